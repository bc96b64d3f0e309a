"""The `replay` command's arguments, kept apart from cli/replay.py (which imports torch) so that entry.py can build
its parser, and answer --help, without loading anything heavy."""

from __future__ import annotations

from ..drafters.registry import names as drafter_names
from .experiments import add_sampling_args

CONTROLLERS = ("adaptive", "heuristic")
FEEDINGS = ("auto", "live", "shared")  # playground.lab.replay.FEEDINGS (the same test keeps them equal)


def add_replay_parser(sub, add_pair_args) -> None:
    """The `replay` subcommand's arguments (add_pair_args: entry.py's --pair/--target/... options)."""
    p = sub.add_parser("replay", help="which k, from recorded outputs: every k and controller replayed from "
                                      "teacher-forced passes, per output shape, without generating")
    p.add_argument("file", nargs="?", metavar="FILE",
                   help="a JSONL trace: OpenAI chat conversations ({\"messages\": [...]}, tool calls included) or "
                        "{\"prompt\", \"completion\"} lines; every assistant turn is replayed")
    p.add_argument("--preset", action="append", help="a preset (repeatable); its completion is the target's own "
                                                     "greedy output, generated once")
    p.add_argument("--text", help="a prompt (one user turn); its completion is the target's own greedy output")
    p.add_argument("--drafter", action="append", choices=drafter_names(),
                   help="repeatable (default: every drafter this pair can run)")
    p.add_argument("--ks", default=None, help="comma-separated k values (default 1..16)")
    p.add_argument("--controllers", default=",".join(CONTROLLERS),
                   help="comma-separated: adaptive, heuristic, or none (greedy only)")
    p.add_argument("--feeding", choices=FEEDINGS, default="auto",
                   help="where a model drafter's proposals come from: auto (default: one shared pass per turn for "
                        "llama.cpp and the int8 draft, whose walks from it equal live runs; live feeding for other "
                        "draft models, whose proposals may depend on how they are fed), live (every walk feeds the "
                        "drafter as a live run does: exact, a drafter run per k) or shared (one pass for every "
                        "drafter: fastest, an estimate for other draft models)")
    p.add_argument("--calibration", choices=["once", "bucket"], default="once",
                   help="once (default): one calibration per drafter, on the turn of median prompt length; bucket: one "
                        "per drafter and context-length bucket (64, 128, 256, ... tokens): more accurate when the "
                        "contexts differ a lot, a calibration (seconds) per bucket")
    p.add_argument("--min-confidence", type=float, default=None,
                   help="replay runs with a draft confidence stop: a model drafter stops drafting after a token it "
                        "gave less than this probability (greedy; model drafters are then fed live)")
    p.add_argument("--max-ngram", type=int, default=3, help="prompt lookup: longest n-gram matched")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="presets and --text: tokens generated (default: each preset's own, 64 for --text)")
    p.add_argument("--records", choices=["full", "compact", "none"], default="full",
                   help="simulated iteration records in --out: every field, [k, drafted, accepted, emitted, source] "
                        "rows, or none")
    add_sampling_args(p, sample_help="sampling: expected acceptance sum min(p, q) per position (an estimate)")
    p.add_argument("--out", help="write the JSON result here")
    add_pair_args(p)
