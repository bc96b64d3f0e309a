"""The lab's commands: the options every lab command takes, each experiment's own options (`<name>_args`) and how
it runs (`<name>_run`), which its declaration in playground.experiments names.

This module imports nothing heavy (torch, transformers): the CLI builds its parser from it, and a run imports
cli/lab.py when it starts.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from types import ModuleType

from ..drafters.registry import drafters
from ..experiments import experiments


def _on_lab(job: Callable[[ModuleType], Callable], default_ks: Sequence = (), schedules: bool = False
            ) -> Callable[[argparse.Namespace], int]:
    """run(args) of an experiment: cli.lab.cmd_lab with the job that `job(lab)` picks from cli/lab.py, the k values
    it runs when --ks is not given, and whether --ks may name adaptive / heuristic (`schedules`)."""

    def run(args: argparse.Namespace) -> int:
        from . import lab  # imports torch: on use, so that the parser and --help load nothing heavy

        return lab.cmd_lab(args, job(lab), default_ks, schedules)

    return run


# --- options, shared by several experiments ----------------------------------------------------------------------


def add_common(p: argparse.ArgumentParser) -> None:
    """The options every lab command takes, and the defaults of those only some take (each command gets only the
    options it reads; the others keep their defaults)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", action="append", help="a preset (repeatable; default: one per kind)")
    src.add_argument("--prompt", help="a prompt text instead of presets")
    add_drafter_arg(p)
    p.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched")
    p.set_defaults(ks=None, k=4, rounds=3, max_new_tokens=None, draws=20_000, min_confidence=None, batch=None,
                   alpha=0.8, schema=None)


def add_drafter_arg(p: argparse.ArgumentParser) -> None:
    """--drafter: auto or a declared drafter (playground.drafters.registry), each with its one line."""
    specs = drafters()
    p.add_argument("--drafter", default="auto", choices=["auto", *(s.name for s in specs)], metavar="DRAFTER",
                   help="auto (the best this pair can run: llama.cpp for the embedded target when installed, else "
                        "the draft model, else prompt lookup; default) or "
                        + "; ".join(f"{s.name}: {s.description}" for s in specs))


def add_sampling_args(p: argparse.ArgumentParser, always: bool = False,
                      sample_help: str = "sampling with the exact rule (the target's distribution is kept)") -> None:
    """--greedy / --sample and the warpers, as `generate` takes them (always: the command always samples)."""
    if not always:
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--greedy", dest="sample", action="store_false", help="greedy decoding (default)")
        mode.add_argument("--sample", dest="sample", action="store_true", help=sample_help)
    p.set_defaults(sample=always)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    p.add_argument("--seed", type=int, default=0)


def _ks(p: argparse.ArgumentParser, more: str = "") -> None:
    p.add_argument("--ks", default=None, help="comma-separated k values" + more)


_SCHEDULES = ", or adaptive / heuristic (k chosen per iteration)"


def _rounds(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=3, help="rounds of adjacent runs (default 3)")


def _stop_and_plain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--min-confidence", type=float, default=None,
                   help="model drafters stop after a token they gave less than this probability")
    # lab.speed.request.PLAIN_EVERY, spelled out: the parser imports nothing that loads torch
    p.add_argument("--plain-every", type=int, default=3, metavar="N",
                   help="a plain run before every N speculative runs of a prompt and after the last; each "
                        "speculative run is divided by plain speed interpolated to its moment (default 3; "
                        "fewer plain runs are quicker, more follow a drifting host closer)")


def _schema(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schema", metavar="FILE|PRESET",
                   help="also run every arm constrained to this JSON schema (a .json file, or a preset's name: its "
                        "schema), right after its free run, with the drafter's schema+ variant: the constrained "
                        "speed-up over constrained plain, tokens per pass constrained and free, the forced share")


def _max_new(p: argparse.ArgumentParser, per_prompt: bool) -> None:
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="default: each preset's own (64 for a prompt)" if per_prompt
                   else "default: the longest of the chosen presets' own (64 for a prompt)")


# --- each experiment's own options -------------------------------------------------------------------------------


def timing_args(p: argparse.ArgumentParser) -> None:
    _ks(p, "; timing measures passes over up to max(k) + 1 tokens")
    p.add_argument("--batch", default=None, metavar="B,B,...",
                   help="also time the target's pass over B sequences x n tokens at each batch size "
                        "(e.g. 1,2,4,8): v(n) per batch and the k up to which verification stays nearly free")
    p.add_argument("--alpha", type=float, default=0.8,
                   help="the acceptance rate the --batch predictions assume (default 0.8)")
    add_sampling_args(p)  # the calibration is timed under this decoding
    g = p.add_argument_group("random weights (no download; cli/random_timing.py)")
    g.add_argument("--random-weights", action="store_true",
                   help="build the pair (--pair, or --target/--draft hub ids with shipped configs) with random "
                        "weights, time the target's v(n) for n = 1..17 and the draft's c on each forward, beside the "
                        "weight-streaming floor and the predicted speed-ups at assumed alphas; acceptance is not "
                        "measured")
    g.add_argument("--layers", type=int, default=None,
                   help="cut the target to this many layers at most, the draft in proportion (a big pair's shapes "
                        "on a small machine)")
    # lab.forwards.ARMS, spelled out: the parser imports nothing that loads torch
    g.add_argument("--arms", default=None,
                   help="forwards to time, comma-separated from eager, static, graphed (default: eager and graphed "
                        "on CUDA, eager and static on a CPU)")
    g.add_argument("--context", type=int, default=256, help="context tokens before each pass (default 256)")
    g.add_argument("--rounds", type=int, default=3, help="rounds, the arms alternating (default 3)")
    g.add_argument("--repeats", type=int, default=3, help="timed repeats per round and arm (default 3)")


def timing_run(args: argparse.Namespace) -> int:
    if args.random_weights:
        from . import random_timing  # imports torch: on use, so that the parser and --help load nothing heavy

        return random_timing.cmd_random_timing(args)
    return _on_lab(lambda lab: lab.timing_job, range(1, 9))(args)


def acceptance_args(p: argparse.ArgumentParser) -> None:
    _ks(p)
    _max_new(p, per_prompt=False)
    add_sampling_args(p)


def speed_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a recorded trace's turns instead of presets (lab/speed/trace.py)")
    g.add_argument("--trace", metavar="FILE", help="run the turns of this JSONL trace (as `replay` reads it), each "
                   "to its recorded length; the suffix drafters hold the responses before each turn")
    # lab.shapes.SHAPES, spelled out: the parser imports nothing that loads torch
    g.add_argument("--shape", choices=("json", "code", "copied", "prose"),
                   help="only the turns with 4 or more tokens of this output shape")
    g.add_argument("--turns", type=int, metavar="N", help="only the last N turns chosen (the most history)")
    _ks(p, _SCHEDULES)
    _rounds(p)
    _stop_and_plain(p)
    # lab.speed.MEMORY_SCOPES, spelled out: the parser imports nothing that loads torch
    p.add_argument("--memory", choices=("conversation", "prompt", "none"), default="conversation",
                   help="what adaptive k and the heuristic carry from run to run: conversation (every prompt "
                        "and round, as an agent's calls; default), prompt (rounds of one prompt only: a "
                        "figure per output shape whatever the order) or none (every run a first call)")
    p.add_argument("--no-spread-calibration", dest="spread_calibration", action="store_false",
                   help="predict from the calibrations made before the rounds only (default: a short one "
                        "more between rounds, pooled, so the step costs span the minutes the rounds ran)")
    _schema(p)
    _max_new(p, per_prompt=True)
    add_sampling_args(p)


def sweep_args(p: argparse.ArgumentParser) -> None:
    _ks(p, _SCHEDULES)
    _rounds(p)
    _stop_and_plain(p)
    _schema(p)
    _max_new(p, per_prompt=True)
    add_sampling_args(p)


def divergence_args(p: argparse.ArgumentParser) -> None:
    _ks(p)
    _max_new(p, per_prompt=False)


def distribution_args(p: argparse.ArgumentParser) -> None:
    add_sampling_args(p, always=True)
    p.add_argument("--draws", type=int, default=20_000, help="draws per context, seed and rule")


def peers_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=4, help="proposals per iteration for every arm")
    _rounds(p)
    _max_new(p, per_prompt=False)


acceptance_run = _on_lab(lambda lab: lab.acceptance_job, (1, 2, 4, 8))
speed_run = _on_lab(lambda lab: lab.speed_job, (1, 2, 3, 4, 6), schedules=True)
sweep_run = _on_lab(lambda lab: lab.sweep_job, range(1, 9), schedules=True)
divergence_run = _on_lab(lambda lab: lab.divergence_job, (1, 2, 3, 4, 6))
distribution_run = _on_lab(lambda lab: lab.distribution_job)
peers_run = _on_lab(lambda lab: lab.peers_job)


def add_lab_parsers(sub, add_pair_args) -> None:
    """A subcommand per lab experiment (add_pair_args: entry.py's --pair/--target/... options, added last)."""
    for e in experiments():
        if e.run is None:
            continue  # another command's results, or a script's
        p = sub.add_parser(e.name, aliases=list(e.aliases), help=e.help)
        add_common(p)
        e.load("add_arguments")(p)
        p.add_argument("--out", help="write the JSON result here")
        add_pair_args(p)
