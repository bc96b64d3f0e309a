"""python -m playground COMMAND: the playground from the command line.

  generate   run speculative decoding on a prompt or preset; coloured tokens live, then a summary
  presets    list the presets
  pairs      list the named model pairs and which models may be loaded
  info       the model pair, its memory, and the environment

Every figure printed names its threads, dtype and device. --json prints machine-readable records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys

from ..errors import PlaygroundError

COLOURS = {"accepted": "\033[32m", "correction": "\033[1;31m", "bonus": "\033[1;36m", "plain": ""}
RESET = "\033[0m"


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
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own choice); plain and speculative runs get the same")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m playground", description=__doc__.split("\n\n")[0])
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
    g.add_argument("--drafter", default="auto",
                   help="auto (llama.cpp for the embedded target when installed, else draft), llama.cpp, draft "
                        "(the pair's draft model), lookup (prompt lookup) or hybrid (lookup where it matches, "
                        "else the model drafter)")
    g.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched (default 3)")
    g.add_argument("--min-confidence", type=float, default=None,
                   help="a model drafter stops drafting after a token it gave less than this probability")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--greedy", dest="sample", action="store_false", help="greedy decoding (default)")
    mode.add_argument("--sample", dest="sample", action="store_true", help="sampling")
    g.set_defaults(sample=False)
    g.add_argument("--temperature", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: the preset's, or 64 (at most PLAYGROUND_MAX_NEW_TOKENS, default 2048)")
    g.add_argument("--compare-plain", action="store_true",
                   help="also run plain decoding of the same prompt right after, and print the measured ratio")
    g.add_argument("--json", action="store_true", help="print the records, summary and environment as JSON")
    g.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    _add_pair_args(g)

    _add_lab_parsers(sub)

    rep = sub.add_parser("report", help="Markdown tables from saved speed / sweep / timing results (--out files)")
    rep.add_argument("files", nargs="+", metavar="FILE")
    sub.add_parser("presets", help="list the presets")
    sub.add_parser("pairs", help="list the named model pairs (--pair NAME) and which other models may be loaded")
    info = sub.add_parser("info", help="load the pair and print what it is, its memory and the environment")
    _add_pair_args(info)
    return parser


LAB_COMMANDS = ("timing", "acceptance", "speed", "sweep", "divergence", "distribution", "bench-peers")


def _add_lab_parsers(sub) -> None:
    helps = {
        "timing": "target pass time over n = 1..n_max new tokens and the drafter's step: c and v(n)",
        "acceptance": "alpha, per-position acceptance and tokens per pass per preset kind and k",
        "speed": "plain vs speculative at each k in alternating runs; measured beside predicted",
        "sweep": "k = 1..8 on one preset or prompt: measured and predicted curves, break-even, best k",
        "divergence": "greedy runs that differ from plain greedy: near-tie or bug?",
        "distribution": "first-token distribution through the exact and the two wrong rules (chi-square)",
        "bench-peers": "our loop against transformers' assisted generation and prompt lookup",
    }
    for name in LAB_COMMANDS:
        p = sub.add_parser(name, help=helps[name])
        src = p.add_mutually_exclusive_group()
        src.add_argument("--preset", action="append", help="a preset (repeatable; default: one per kind)")
        src.add_argument("--prompt", help="a prompt text instead of presets")
        p.add_argument("--drafter", default="auto", help="auto, llama.cpp, draft, lookup or hybrid")
        p.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched")
        # Each command gets only the options it reads; the others keep their defaults.
        p.set_defaults(ks=None, k=4, rounds=3, max_new_tokens=None, draws=20_000, min_confidence=None)
        if name in ("timing", "acceptance", "speed", "sweep", "divergence"):
            p.add_argument("--ks", default=None, help=(
                "comma-separated k values" + (", or adaptive / heuristic (k chosen per iteration)"
                                              if name in ("speed", "sweep") else "")
                + ("; timing measures passes over up to max(k) + 1 tokens" if name == "timing" else "")))
        if name == "bench-peers":
            p.add_argument("--k", type=int, default=4, help="proposals per iteration for every arm")
        if name in ("speed", "sweep", "bench-peers"):
            p.add_argument("--rounds", type=int, default=3, help="rounds of adjacent runs (default 3)")
        if name in ("speed", "sweep"):
            p.add_argument("--min-confidence", type=float, default=None,
                           help="model drafters stop after a token they gave less than this probability")
        if name != "timing" and name != "distribution":
            p.add_argument("--max-new-tokens", type=int, default=None,
                           help="default: each preset's own (64 for a prompt)")
        if name == "distribution":
            p.add_argument("--draws", type=int, default=20_000, help="draws per context, seed and rule")
        p.add_argument("--out", help="write the JSON result here")
        _add_pair_args(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in lab result files
    try:
        if args.command == "presets":
            return cmd_presets()
        if args.command == "pairs":
            return cmd_pairs()
        if args.command == "info":
            return cmd_info(args)
        if args.command in LAB_COMMANDS:
            return cmd_lab(args)
        if args.command == "report":
            from ..lab.report import report

            for i, path in enumerate(args.files):
                print(("\n" if i else "") + report(path))
            return 0
        return cmd_generate(args)
    except PlaygroundError as e:
        from ..envinfo import redact

        print(f"error: {redact(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug, not bad input: keep the traceback for a report, with secrets scrubbed
        import traceback

        from ..envinfo import redact

        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        print("error: an unexpected failure (a bug in the playground, not in your input); the traceback above "
              "has secret values redacted and can be pasted into a report", file=sys.stderr)
        return 1


def _load(args, quiet=False):
    import torch

    from ..pairs.registry import choose_pair, load_choice

    if args.threads is not None:
        if args.threads < 1:
            raise PlaygroundError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    choice = choose_pair(pair=args.pair, target=args.target, draft=args.draft, device=args.device, dtype=args.dtype,
                         device_map=args.device_map or os.environ.get("PLAYGROUND_DEVICE_MAP"))
    say = (lambda m: print(m, file=sys.stderr)) if not quiet else None
    pair = load_choice(choice, progress=say)
    for warning in pair.memory_report().get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return pair


def cmd_presets() -> int:
    from ..inputs.presets import load_presets

    presets, errors = load_presets(strict=False)
    for name, p in presets.items():
        schema = " (JSON Schema)" if p.output_schema else ""
        print(f"{name:28} {p.kind:10} {p.title}{schema}")
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    return 1 if errors else 0


def cmd_pairs() -> int:
    from ..pairs.registry import ALLOW_ANY_ENV, DEFAULT_PAIR, PAIR_ENV, ROOTS_ENV, ModelPolicy, pairs_table

    default = os.environ.get(PAIR_ENV, "").strip() or DEFAULT_PAIR
    for row in pairs_table():
        mark = "*" if row["name"] == default else " "
        state = "cached" if row["cached"] else "downloads on first use"
        print(f"{mark} {row['name']:14} {row['target']} + {row['draft'] or 'no draft model'} "
              f"[{row['dtype']}, {row['device']}; {state}]\n      {row['note']}")
    policy = ModelPolicy.from_env()
    roots = os.pathsep.join(map(str, policy.roots)) or ("any folder" if policy.allow_any else "none")
    print(f"* the default pair (${PAIR_ENV}). Other hub ids: {'allowed' if policy.allow_any else 'refused'} "
          f"(${ALLOW_ANY_ENV}); local paths inside: {roots} (${ROOTS_ENV})")
    return 0


def cmd_info(args) -> int:
    from ..envinfo import environment

    pair = _load(args)
    print(json.dumps({"environment": environment(pair), "memory": pair.memory_report()}, indent=2))
    return 0


def cmd_generate(args) -> int:
    from ..core.engine import check_request, plain_generate, speculative_generate
    from ..envinfo import describe_setup, environment, redact
    from ..limits import Limits
    from ..drafters.registry import make_proposer
    from ..core.records import Iteration, record_to_dict, summarize
    from ..core.sampling import SamplingConfig
    from ..inputs.text import check_prompt_text, read_prompt_file

    from ..drafters.adaptive import parse_k

    k_setting = parse_k(args.k)
    sampling = SamplingConfig(do_sample=args.sample, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p, seed=args.seed)
    limits = Limits.from_env()
    if args.max_new_tokens is not None:
        limits.check_max_new_tokens(args.max_new_tokens)
    if args.prompt_file is not None:
        args.prompt = read_prompt_file(args.prompt_file, limits.max_prompt_chars)
    if args.prompt is not None:
        check_prompt_text(args.prompt, limits.max_prompt_chars)
    preset = None
    if args.preset is not None:
        from ..inputs.presets import get_preset

        preset = get_preset(args.preset)
    pair = _load(args, quiet=args.json)
    proposer = make_proposer(pair, args.drafter, max_ngram=args.max_ngram)
    if preset is not None:
        prompt_ids = preset.prompt_ids(pair.tokenizer)
        max_new = args.max_new_tokens if args.max_new_tokens is not None else min(preset.max_new_tokens,
                                                                                   limits.max_new_tokens)
    else:
        from ..inputs.text import encode_prompt

        prompt_ids = encode_prompt(pair.tokenizer, args.prompt, chat=not args.raw)
        max_new = args.max_new_tokens if args.max_new_tokens is not None else min(64, limits.max_new_tokens)
    limits.check_max_new_tokens(max_new)
    limits.check_prompt_tokens(len(prompt_ids))
    check_request(pair, prompt_ids, max_new)  # the target's context, before anything is printed

    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    out = sys.stdout
    if not args.json:
        print(f"# {redact(pair.target_name)} | drafter: {proposer.describe()} | k={args.k} | {sampling.describe()} | "
              f"{describe_setup(pair)}", file=sys.stderr)
        if colour:
            print(f"# {_paint('accepted', 'accepted')}  {_paint('correction', 'correction')}  "
                  f"{_paint('bonus', 'bonus')}  plain", file=sys.stderr)

    from ..drafters.adaptive import make_controller
    from ..lab.calibration import calibrated_curve

    curve = calibrated_curve(pair, prompt_ids, proposer) if k_setting == "adaptive" else None
    controller = make_controller(k_setting, curve)
    records = []
    streamer = _Streamer(pair.tokenizer, colour, out) if not args.json else None
    for rec in speculative_generate(pair, prompt_ids, proposer=proposer, k=controller, sampling=sampling,
                                    min_confidence=args.min_confidence,
                                    max_new_tokens=max_new):
        records.append(rec)
        if streamer is not None and isinstance(rec, Iteration):
            streamer.add(rec)
    summary = summarize(records)
    tokens = [t for r in records if isinstance(r, Iteration) for t in r.emitted]
    text = pair.tokenizer.decode(tokens, skip_special_tokens=True)
    check = None
    if preset is not None:
        from ..inputs.presets import check_output

        check = check_output(preset, text)

    plain_summary = None
    if args.compare_plain:
        plain_summary = summarize(plain_generate(pair, prompt_ids, sampling=sampling, max_new_tokens=max_new))

    if args.json:
        doc = {
            "environment": environment(pair),
            "config": {"prompt_ids": prompt_ids, "preset": args.preset, "k": k_setting,
                       "cost_curve": None if curve is None else {"c": curve.c, "v": {str(n): x for n, x in curve.v.items()}}, "drafter": proposer.describe(),
                       "sampling": dataclasses.asdict(sampling),
                       "max_new_tokens": max_new},
            "records": [record_to_dict(r) for r in records],
            "summary": summary.to_dict(),
            "text": text,
            "output_check": None if check is None else {"is_json": check.is_json, "schema_valid": check.schema_valid,
                                                        "error": check.error},
            "plain_summary": plain_summary.to_dict() if plain_summary else None,
        }
        json.dump(redact(doc), out, indent=1)  # no secret (HF_TOKEN, ...) in an exported record
        out.write("\n")
        return 0

    out.write("\n\n")
    print(format_summary(summary, describe_setup(pair)))
    if check is not None:
        verdict = "valid against the preset's schema" if check.schema_valid else (
            "valid JSON" if check.is_json and check.schema_valid is None else "NOT valid")
        print(f"output check: {verdict}" + (f" ({check.error})" if check.error else ""))
    if plain_summary is not None:
        ratio = summary.tokens_per_s / plain_summary.tokens_per_s if plain_summary.tokens_per_s else float("nan")
        print(f"plain decoding, run right after: {plain_summary.tokens_per_s:.1f} tokens/s -> measured speed-up "
              f"{ratio:.2f}x (one adjacent pair of runs, prefill excluded: a noisy figure on a shared machine)")
    return 0


def _paint(text: str, role: str) -> str:
    c = COLOURS.get(role, "")
    return f"{c}{text}{RESET}" if c else text


class _Streamer:
    """Prints each iteration's tokens as they arrive, coloured by role."""

    def __init__(self, tokenizer, colour: bool, out):
        self.tokenizer, self.colour, self.out = tokenizer, colour, out
        self.tokens: list[int] = []
        self.roles: list[str] = []
        self.printed = 0

    def add(self, it) -> None:
        from ..inputs.text import token_pieces

        self.tokens.extend(it.emitted)
        self.roles.extend(it.roles)
        pieces = token_pieces(self.tokenizer, self.tokens, skip_special_tokens=True)
        for piece, role in zip(pieces[self.printed:], self.roles[self.printed:]):
            self.out.write(_paint(piece, role) if self.colour else piece)
        self.printed = len(pieces)
        self.out.flush()


def format_summary(s, setup: str) -> str:
    lines = [f"summary ({setup}; prefill excluded from tokens/s)"]
    lines.append(f"  new tokens {s.new_tokens} in {s.target_passes} target passes: {s.tokens_per_pass:.2f} tokens/pass, "
                 f"{s.tokens_per_s:.1f} tokens/s, decode {s.decode_s:.2f} s, prefill {s.prefill_s:.2f} s")
    if s.alpha is not None:
        lines.append(f"  alpha {s.alpha:.3f} (accepted {s.accepted} of {s.proposed} proposed; alpha counts only "
                     f"proposals the rule evaluated)")
        hist = ", ".join(f"{n}:{c}" for n, c in s.accepted_length_histogram.items())
        lines.append(f"  accepted per iteration (length:count) {hist}")
        pos = " ".join("-" if a is None else f"{a:.2f}" for a in s.per_position_acceptance)
        lines.append(f"  acceptance by draft position {pos}")
    if len(s.k_values) > 1:  # an adaptive or heuristic k: how often each k was chosen (k = 0: a plain step)
        from ..drafters.adaptive import describe_choices

        lines.append(f"  k chosen per iteration (k\u00d7iterations) {describe_choices(s.k_values)}")
    total = s.decode_s or 1.0
    lines.append(f"  time: drafting {s.draft_s:.3f} s ({100 * s.draft_s / total:.0f}%), verification {s.verify_s:.3f} s "
                 f"({100 * s.verify_s / total:.0f}%), rollback {s.rollback_s:.4f} s ({100 * s.rollback_s / total:.1f}%), "
                 f"other {s.overhead_s:.3f} s")
    roles = ", ".join(f"{k} {v}" for k, v in s.roles.items())
    lines.append(f"  tokens by role: {roles}; finished by {s.finished}")
    return "\n".join(lines)


def _progress_bar():
    tty = sys.stderr.isatty()
    last = [-1]

    def show(fraction: float, message: str) -> None:
        pct = int(fraction * 100)
        if tty:
            bar = "#" * (pct // 4) + "." * (25 - pct // 4)
            sys.stderr.write(f"\r[{bar}] {pct:3d}% {message[:60]:60}")
            if fraction >= 1:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif pct // 10 != last[0]:
            last[0] = pct // 10
            print(f"[{pct:3d}%] {message}", file=sys.stderr)

    return show


def _lab_prompts(pair, args) -> dict[str, tuple[str, list[int], int]]:
    from ..inputs.presets import get_preset, load_presets
    from ..inputs.text import encode_prompt

    if args.prompt is not None:
        return {"prompt": ("prompt", encode_prompt(pair.tokenizer, args.prompt), args.max_new_tokens or 64)}
    if args.preset:
        chosen = [get_preset(name) for name in args.preset]
    else:  # one preset per kind, the first by name
        by_kind = {}
        for preset in load_presets().values():
            by_kind.setdefault(preset.kind, preset)
        chosen = list(by_kind.values())
    return {p.name: (p.kind, p.prompt_ids(pair.tokenizer), args.max_new_tokens or p.max_new_tokens) for p in chosen}


def _parse_ks(text: str | None, default) -> tuple[int, ...]:
    from ..drafters.adaptive import parse_k

    if text is None:
        return tuple(default)
    try:
        ks = tuple(parse_k(x) for x in text.split(","))
    except PlaygroundError:
        raise PlaygroundError(f"--ks takes comma-separated k values (integers from 1 to 16, or adaptive / heuristic), "
                              f"got {text!r}") from None
    if not any(isinstance(k, int) for k in ks):
        raise PlaygroundError(f"--ks needs at least one fixed k (an integer 1..16) besides adaptive/heuristic, got {text!r}")
    return ks


def _print_by_prompt(result: dict, kinds: dict[str, str]) -> None:
    """Per prompt and k: measured median ratio with the empirical prediction in brackets; then the best k,
    its ratio end to end (prefill counted) and alpha."""
    ks = result["ks"]
    print("  per prompt: measured (empirical prediction)")
    print(f"  {'prompt':14} {'kind':10}" + "".join(f" {'k=' + str(k):>12}" for k in ks) + "   best k, end to end, alpha")
    for name in result["prompts"]:
        rows = {r["k"]: r for r in result["by_prompt"] if r["prompt"] == name}
        cells = []
        for k in ks:
            r = rows[k]
            pred = r.get("predicted_empirical")
            cells.append(f" {r['median_ratio']:5.2f} ({'  -  ' if pred is None else format(pred, '.2f')})")
        best = rows[result["best_k_by_prompt"][name]]
        e2e = best["median_e2e_ratio"]
        print(f"  {name:14} {kinds.get(name, ''):10}" + "".join(f"{c:>13}" for c in cells)
              + f"   k={best['k']} {best['median_ratio']:.2f}x, {'-' if e2e is None else format(e2e, '.2f')}x, "
              + f"{best['alpha'] or 0:.2f}")


def cmd_lab(args) -> int:
    from .. import lab
    from ..envinfo import describe_setup, environment
    from ..drafters.registry import make_proposer

    if args.rounds < 1:
        raise PlaygroundError(f"--rounds must be >= 1, got {args.rounds}")
    if args.draws < 1:
        raise PlaygroundError(f"--draws must be >= 1, got {args.draws}")
    defaults = {"timing": range(1, 9), "acceptance": (1, 2, 4, 8), "speed": (1, 2, 3, 4, 6), "sweep": range(1, 9),
                "divergence": (1, 2, 3, 4, 6)}
    ks = _parse_ks(args.ks, defaults.get(args.command, ()))
    if args.command not in ("speed", "sweep") and not all(isinstance(k, int) for k in ks):
        raise PlaygroundError(f"{args.command} takes fixed k values only; adaptive and heuristic run in speed and sweep")
    pair = _load(args)
    make_proposer(pair, args.drafter, max_ngram=args.max_ngram)  # fail early on a bad drafter
    factory = lambda: make_proposer(pair, args.drafter, max_ngram=args.max_ngram)  # noqa: E731
    prompts = _lab_prompts(pair, args)
    ids_only = {name: ids for name, (_, ids, _) in prompts.items()}
    max_new = max(m for _, _, m in prompts.values())
    bar = _progress_bar()
    setup = describe_setup(pair)
    mem = pair.memory_report()
    from ..envinfo import redact

    print(redact(f"# {pair.target_name} | drafter: {factory().describe()} | {setup}"), file=sys.stderr)
    print("# memory: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in mem.items()
                                    if isinstance(v, int)), file=sys.stderr)
    first_ids = next(iter(ids_only.values()))
    cmd = args.command
    if cmd == "timing":
        t = lab.calibrate(pair, first_ids, factory(), n_max=max(k for k in ks if isinstance(k, int)) + 1, progress=bar)
        result = {"experiment": "timing", "environment": environment(pair), "memory": mem, **t.to_dict()}
        print(f"timing ({setup}; context {t.context_tokens} tokens; medians of {len(t.raw['target_pass_s']['1'])})")
        print(f"  target step {1000 * t.target_step_s:.1f} ms, drafter per token {1000 * t.draft_step_s:.1f} ms "
              f"(c = {t.c:.3f}) + {1000 * t.draft_call_s:.1f} ms per call")
        for n, v in t.v.items():
            sp = t.raw["target_spread"][str(n)]
            print(f"  v({n}) = {v:.2f}   pass over {n}: {1000 * sp['median']:.1f} ms "
                  f"[{1000 * sp['min']:.1f}-{1000 * sp['max']:.1f}]")
        if t.c > 1:
            print("  WARNING: the drafter's step is slower than the target's: speculation cannot pay "
                  "(is something paged out or sharing the cores?)")
    elif cmd == "acceptance":
        result = lab.acceptance(pair, prompts, factory, ks=ks, progress=bar)
        print(f"acceptance ({setup}; greedy)")
        print(f"  {'kind':10} {'k':>2} {'alpha':>6} {'tok/pass':>8} {'iid':>6} {'empir.':>6}  per position")
        for row in result["pooled"]:
            if row["alpha"] is None:
                continue
            pos = " ".join("-" if a is None else f"{a:.2f}" for a in row["per_position"])
            emp = row["tokens_per_pass_empirical"]
            print(f"  {row['kind']:10} {row['k']:>2} {row['alpha']:6.3f} {row['tokens_per_pass']:8.2f} "
                  f"{row['tokens_per_pass_iid']:6.2f} {emp if emp is None else format(emp, '6.2f')}  {pos}")
    elif cmd in ("speed", "sweep"):
        from ..core.engine import K_MAX

        # Each prompt is calibrated on its own context (a longer one costs more per step on both sides);
        # adaptive k may draft up to K_MAX, so verification is timed that far when it runs.
        n_max = (K_MAX if cmd == "sweep" or "adaptive" in ks else max(k for k in ks if isinstance(k, int))) + 1
        names = list(ids_only) if cmd == "speed" else [next(iter(ids_only))]
        share = 0.3 / len(names)
        timings = {name: lab.calibrate(pair, ids_only[name], factory(), n_max=n_max, repeats=8,
                                       progress=lambda f, m, i=i, name=name: bar(share * (i + f), f"{name}: {m}"))
                   for i, name in enumerate(names)}
        timing = timings[names[0]]
        if any(t.c > 1 for t in timings.values()):
            print("WARNING: the drafter's step is slower than the target's", file=sys.stderr)
        progress = lambda f, m: bar(0.3 + 0.7 * f, m)  # noqa: E731
        if cmd == "speed":
            result = lab.speed(pair, ids_only, factory, ks=ks, rounds=args.rounds, max_new_tokens=max_new,
                               timing=timings, min_confidence=args.min_confidence, progress=progress)
        else:
            result = lab.sweep(pair, first_ids, factory, ks=ks, rounds=args.rounds, max_new_tokens=max_new,
                               timing=timing, min_confidence=args.min_confidence, name=names[0], progress=progress)
        print(f"{cmd} ({setup}; greedy; {max_new} new tokens; {args.rounds} rounds of adjacent runs in rotating "
              f"order; ratio = speculative / plain tokens/s, prefill excluded; c = {timing.c:.2f})")
        print(f"  {'k':>9} {'median':>7} {'min-max':>13} {'alpha':>6} {'pred iid':>8} {'pred emp':>8}"
              + ("  break-even alpha" if cmd == "sweep" else ""))
        for row in result["table"]:
            be = row.get("break_even_alpha")
            iid, emp = row.get("predicted_iid"), row.get("predicted_empirical")
            tail = ""
            if isinstance(row["k"], str):  # adaptive / heuristic: how often each k was chosen
                from ..drafters.adaptive import describe_choices

                tail = "  k chosen: " + describe_choices(row.get("k_values", {}))
            elif cmd == "sweep":
                tail = f"  {'never' if be is None else format(be, '.2f')}"
            print(f"  {row['k']:>9} {row['median_ratio']:7.2f} {row['min_ratio']:6.2f}-{row['max_ratio']:<6.2f} "
                  f"{row['alpha'] or 0:6.3f} {'-' if iid is None else format(iid, '8.2f'):>8} "
                  f"{'-' if emp is None else format(emp, '8.2f'):>8}" + tail)
        print(f"  best k measured: {result['best_k']}" + (f"; predicted: {result['predicted_best_k']}"
                                                           if "predicted_best_k" in result else ""))
        if cmd == "speed":
            _print_by_prompt(result, {name: kind for name, (kind, _, _) in prompts.items()})
        for name, d in result["drift"].items():
            if d["flagged"]:
                print(f"  note: plain speed on {name} moved {100 * d['spread']:.0f}% between rounds (machine drift)")
    elif cmd == "divergence":
        result = lab.divergence(pair, ids_only, factory, ks=ks, max_new_tokens=max_new, progress=bar)
        print(f"divergence ({setup}): {result['diverged']} of {result['runs']} greedy runs differ from plain")
        for c in result["cases"]:
            gaps = ", ".join(f"{w} {g:+.2e}" for w, g in c["gaps"].items())
            print(f"  {c['prompt']} k={c['k']} at token {c['position']}: plain {c.get('plain_text')!r} vs "
                  f"speculative {c.get('spec_text')!r}; gaps {gaps}; spacing {c['dtype_spacing']:.1e} -> {c['verdict']}")
    elif cmd == "distribution":
        from ..core.sampling import SamplingConfig

        result = lab.distribution(pair, ids_only, factory, sampling=SamplingConfig(do_sample=True),
                                  draws=args.draws, progress=bar)
        print(f"distribution ({setup}; {args.draws} draws per context, seed and rule)")
        for r in result["results"]:
            tv = r["tv_distance_p_q"]
            print(f"  {r['prompt']:16} seed {r['seed']} {r['rule']:26} p = {r['p_value']:.3g}"
                  f"   TV(p, q) = {'-' if tv is None else format(tv, '.2f')}")
    else:  # bench-peers
        result = lab.peers(pair, ids_only, k=args.k, rounds=args.rounds, max_new_tokens=max_new,
                           max_ngram=args.max_ngram, progress=bar)
        print(f"bench-peers ({setup}; greedy; end to end incl. prefill; ratio to transformers' plain generate)")
        for row in result["table"]:
            print(f"  {row['arm']:28} {row['median_ratio']:5.2f}x [{row['min_ratio']:.2f}-{row['max_ratio']:.2f}] "
                  f"{row['median_tokens_per_s']:6.1f} tok/s  same output {row['outputs_equal']}/{row['n']}")
        for key, what in (("ours_vs_hf_assisted", "drafting all k"), ("ours_vs_hf_assisted_conf",
                                                                        "both stopping below confidence 0.4")):
            h2h = result.get(key)
            if h2h:
                print(f"  ours / transformers' assisted generation, same draft, k = {args.k}, {what}, per round and "
                      f"prompt: median {h2h['median']:.2f}x [{h2h['min']:.2f}-{h2h['max']:.2f}], n = {h2h['n']}")
    if args.out:
        result.setdefault("drafter", factory().describe())
        result.setdefault("command", "python -m playground " + shlex.join(args.argv))
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0

