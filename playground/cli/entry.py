"""python -m playground COMMAND: the playground from the command line.

  generate   run speculative decoding on a prompt or preset; coloured tokens live, then a summary
  presets    list the presets
  pairs      list the named model pairs and which models may be loaded
  info       the model pair, its memory, and the environment
  timing, acceptance, speed, sweep, divergence, distribution, peers
             the lab's experiments, their tables printed and (--out) their results saved as JSON
  replay     which k, from recorded outputs (a JSONL trace, presets): every k replayed without generating
  report     Markdown tables from saved results
  whatif     the cost model's predicted speed-up per k for a given alpha, c and v(n); no model runs
  vllm-sweep, vllm-serve, vllm-report
             the vLLM backend: plain vs speculative vLLM servers swept, a server kept running, a sweep's tables

Every figure printed names its threads, dtype and device. --json prints machine-readable records.
This module holds the parser and the dispatch; each command lives in its own module (generate, info, lab).
"""

from __future__ import annotations

import argparse
import sys
import traceback

from ..errors import PlaygroundError
from ..experiments import experiment_named
from .experiments import add_drafter_arg, add_lab_parsers, add_sampling_args
from .replay_args import add_replay_parser
from .vllm import COMMANDS as VLLM_COMMANDS
from .vllm import add_vllm_parsers

NO_MODEL_COMMANDS = frozenset({"presets", "pairs", "report", "whatif", *VLLM_COMMANDS})
"""Commands that run no model in this process (vLLM's run in its own server), so need no transformers check."""


def _add_pair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", default=None,
                   help="a named model pair (see `python -m playground pairs`; default: $PLAYGROUND_PAIR, else "
                        "'embedded'); --target/--draft/--device/--dtype override its parts")
    p.add_argument("--target", default=None,
                   help="'embedded' or a local path / hub id (paths: inside $PLAYGROUND_MODEL_ROOTS; other hub ids: "
                        "with PLAYGROUND_ALLOW_ANY_MODEL=1); without --pair the draft defaults to int8")
    p.add_argument("--draft", default=None,
                   help="'int8' (quantized copy of the target, CPU), 'embedded', 'none', or a path / hub id "
                        "(default: the pair's)")
    p.add_argument("--device", default=None,
                   help="auto (CUDA when present; CPU for the int8 draft), cpu, cuda, cuda:1, ... "
                        "(default: the pair's)")
    p.add_argument("--dtype", default=None,
                   help="auto (fp32 on CPU, bf16 on a GPU that supports it, else fp16), float32, bfloat16, ... "
                        "(default: the pair's)")
    p.add_argument("--device-map", default=None,
                   help="auto/balanced/sequential: accelerate splits the target across GPUs; none: never "
                        "(default: $PLAYGROUND_DEVICE_MAP, else auto only with several GPUs and no GPU index)")
    p.add_argument("--kernels", default=None, choices=("auto", "blas", "onednn"),
                   help="what a CPU fp32 model's linear layers run on: auto (BLAS or oneDNN, whichever a probe "
                        "at load times faster here), blas (torch's default) or onednn (default: $PLAYGROUND_KERNELS, "
                        "else auto)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own choice); plain and speculative runs get the same")


def build_parser(prog: str = "python -m playground") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="speculative decoding of one prompt, shown token by token")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text (sent as one user turn of the chat template)")
    src.add_argument("--prompt-file", metavar="PATH",
                     help="read the prompt text from a UTF-8 file ('-': standard input)")
    src.add_argument("--preset", help="a preset name (see `python -m playground presets`)")
    g.add_argument("--raw", action="store_true", help="feed the prompt as raw text, without the chat template")
    g.add_argument("--k", default="4",
                   help="proposals per iteration: 1..16 (default 4), 'adaptive' (chosen per iteration from the "
                        "acceptance seen so far and a quick timing calibration) or 'heuristic' (transformers' schedule)")
    add_drafter_arg(g)
    g.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched (default 3)")
    g.add_argument("--min-confidence", type=float, default=None,
                   help="a model drafter stops drafting after a token it gave less than this probability")
    add_sampling_args(g, sample_help="sampling")
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the preset's, or 64 (at most PLAYGROUND_MAX_NEW_TOKENS, default 2048)")
    g.add_argument("--compare-plain", action="store_true",
                   help="also run plain decoding of the same prompt right after, and print the measured ratio")
    g.add_argument("--schema", metavar="FILE|PRESET",
                   help="constrain the output to a JSON schema: a .json file, or a preset's name (its schema); the "
                        "schema+ drafters propose the tokens it forces")
    g.add_argument("--json", action="store_true", help="print the records, summary and environment as JSON")
    g.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    _add_pair_args(g)

    add_lab_parsers(sub, _add_pair_args)
    add_replay_parser(sub, _add_pair_args)
    add_vllm_parsers(sub)

    rep = sub.add_parser("report", help="Markdown tables from saved results (--out files: lab, replay, vllm-sweep)")
    rep.add_argument("files", nargs="+", metavar="FILE")
    rep.add_argument("--brief", action="store_true",
                     help="a speed or sweep grid in a page: one row per k over all prompts (what docs/results.md shows)")
    sub.add_parser("presets", help="list the presets")
    sub.add_parser("pairs", help="list the named model pairs (--pair NAME) and which other models may be loaded")
    info = sub.add_parser("info", help="load the pair and print what it is, its memory and the environment")
    _add_pair_args(info)
    _add_whatif_parser(sub)
    return parser


def _add_whatif_parser(sub) -> None:
    p = sub.add_parser("whatif", help="predicted speed-up per k from alpha, c and v(n), without running a model")
    acc = p.add_mutually_exclusive_group(required=True)
    acc.add_argument("--alpha", type=float, help="iid acceptance rate in [0, 1]")
    acc.add_argument("--positions", help="per-position acceptance, comma-separated (e.g. 0.95,0.9,0.8,0.7)")
    p.add_argument("--c", type=float, default=None, help="the drafter's cost per token in target steps")
    p.add_argument("--overhead", type=float, default=None, help="the drafter's cost per call in target steps")
    p.add_argument("--v", default=None, help="verification cost per pass length, e.g. 1:1.0,2:1.05,4:1.6 "
                                            "(default: flat, or the calibration's)")
    p.add_argument("--calibration", metavar="FILE",
                   help="take c, the cost per call and v(n) from a saved timing, speed or sweep result (--out)")
    p.add_argument("--ks", default=",".join(map(str, range(1, 17))), help="k values (default 1..16)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def main(argv: list[str] | None = None, prog: str = "python -m playground") -> int:
    """Runs one command; the exit status: 0 done, 1 a bug (its traceback printed, secrets redacted),
    2 bad input (one `error: ...` line), 130 interrupted."""
    args = build_parser(prog).parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in lab result files
    try:
        return _dispatch(args)
    except PlaygroundError as e:
        print(f"error: {_redact(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 (a bug, not bad input: the traceback is kept, secrets scrubbed)
        print(_redact(traceback.format_exc()), file=sys.stderr, end="")
        print("error: an unexpected failure (a bug in the playground, not in your input); the traceback above "
              "has secret values redacted and can be pasted into a report", file=sys.stderr)
        return 1


def run() -> None:
    """The `playground` console script."""
    sys.exit(main(prog="playground"))


def _dispatch(args: argparse.Namespace) -> int:
    """Runs the parsed command. A command's module is imported here, when it runs: they import torch and
    transformers (seconds), which --help and a usage error need not wait for. A command that runs a model first
    refuses a transformers too old to run it (one line, before anything is built or loaded)."""
    if args.command not in NO_MODEL_COMMANDS:
        from ..compat import require_transformers  # imports transformers: on use (see the docstring)

        require_transformers()
    if args.command in ("presets", "pairs", "info"):
        from . import info  # on use (see the docstring)

        if args.command == "presets":
            return info.cmd_presets()
        return info.cmd_pairs() if args.command == "pairs" else info.cmd_info(args)
    if args.command in ("replay", "report"):  # report: a replay result's tables, every other result's via lab
        from . import replay  # on use (see the docstring)

        return replay.cmd_replay(args) if args.command == "replay" else replay.cmd_report(args)
    experiment = experiment_named(args.command)
    if experiment is not None and args.command in experiment.commands:
        return experiment.load("run")(args)  # imports the lab on use (see the docstring)
    if args.command in VLLM_COMMANDS:
        from . import vllm  # on use (see the docstring)

        return vllm.cmd_vllm(args)
    if args.command == "whatif":
        from . import whatif  # on use (see the docstring)

        return whatif.cmd_whatif(args)
    from . import generate  # on use (see the docstring)

    return generate.cmd_generate(args)


def _redact(text: str) -> str:
    """`text` with secret values (HF_TOKEN, ...) replaced."""
    from ..envinfo import redact  # imports torch: on use, as the commands are (see _dispatch)

    return redact(text)
