"""`replay FILE`: which k for an agent, from its recorded outputs (playground.lab.replay), and `report FILE` for
saved results of any kind (each as its experiment declares, through playground.lab.report)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from ..core.engine import K_MAX, check_k
from ..core.sampling import GREEDY, SamplingConfig
from ..drafters.registry import available_drafters, make_proposer
from ..envinfo import describe_setup, redact
from ..errors import PlaygroundError
from ..inputs.traces import read_trace
from ..lab.calibration import SHORT_CALIBRATION, CalibrationStore, calibrated_timing
from ..lab.replay import (
    ReplayOptions,
    calibration_contexts,
    check_confidence,
    preset_turns,
    replay_table,
    replay_turns,
    text_turn,
)
from ..lab.report import report
from ..limits import Limits
from .load import pair_from_args, sampling_of
from .progress import progress_bar
from .replay_args import CONTROLLERS


def _ks(text: str | None) -> list[int]:
    if text is None:
        return list(range(1, K_MAX + 1))
    try:
        return [check_k(int(x)) for x in text.split(",")]
    except ValueError:
        raise PlaygroundError(f"--ks takes comma-separated integers from 1 to {K_MAX}, got {text!r}") from None


def _controllers(text: str) -> list[str]:
    names = [] if text.strip().lower() == "none" else [x.strip().lower() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in CONTROLLERS]
    if bad:
        raise PlaygroundError(f"--controllers takes adaptive, heuristic or none, got {bad[0]!r}")
    return names


def cmd_replay(args: argparse.Namespace) -> int:
    ks, controllers = _ks(args.ks), _controllers(args.controllers)
    sampling = sampling_of(args)
    if args.file is None and not args.preset and args.text is None:
        raise PlaygroundError("give a trace FILE, --preset NAME or --text PROMPT to replay")
    if args.max_ngram < 1:
        raise PlaygroundError(f"--max-ngram must be >= 1, got {args.max_ngram}")
    check_confidence(args.min_confidence, sampling, args.feeding)  # before the pair loads
    limits = Limits.from_env()
    pair = pair_from_args(args)
    drafters = args.drafter or available_drafters(pair)
    descriptions = {d: make_proposer(pair, d, max_ngram=args.max_ngram).describe() for d in drafters}
    print(redact(f"# {pair.target_name} | drafters: {', '.join(descriptions.values())} | {describe_setup(pair)}"),
          file=sys.stderr)
    turns, errors = [], []
    if args.file is not None:
        trace = read_trace(args.file, pair.tokenizer, pair.eos_ids, limits, pair.max_context)
        turns += trace.turns
        errors += trace.errors
        for e in trace.errors:
            print(f"warning: {args.file}: {e}", file=sys.stderr)
    if args.preset:
        turns += preset_turns(pair, args.preset, args.max_new_tokens)
    if args.text is not None:
        turns.append(text_turn(pair, args.text, args.max_new_tokens or 64))
    if not turns:
        raise PlaygroundError(f"nothing to replay: {len(errors)} bad lines and no turn")
    bar = progress_bar()
    timing_of = calibrate_all(pair, turns, drafters, args.max_ngram, args.calibration, lambda f, m: bar(0.3 * f, m),
                              sampling)
    options = ReplayOptions(drafters=drafters, ks=ks, controllers=controllers, timing_of=timing_of,
                            sampling=sampling, feeding=args.feeding, max_ngram=args.max_ngram, limits=limits,
                            records=args.records, errors=errors, min_confidence=args.min_confidence)
    result = replay_turns(pair, turns, options, progress=lambda f, m: bar(0.3 + 0.7 * f, m))
    result.calibration = args.calibration
    result.drafter_descriptions = descriptions
    result.command = "python -m playground " + shlex.join(getattr(args, "argv", []))
    print(replay_table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(redact(result.to_dict()), indent=1))
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def calibrate_all(pair, turns, drafters, max_ngram: int, how: str, progress, sampling: SamplingConfig = GREEDY):
    """The calibrations the replay predicts with, as timing_of(drafter, prompt_ids) -> Timing: with how="once" one
    per drafter, timed on the turn of median prompt length; with "bucket" one per drafter and context-length
    bucket the turns fall in (CalibrationStore.bucket), timed on the bucket's first turn. Passes up to K_MAX + 1
    tokens (adaptive k may draft that far). Timed under `sampling`, the decoding replayed."""
    bucket = CalibrationStore.bucket
    firsts = calibration_contexts(turns, how)
    jobs = [(d, b, ids) for d in drafters for b, ids in firsts.items()]
    timings = {}
    for i, (d, b, ids) in enumerate(jobs):
        timings[(d, b)] = calibrated_timing(
            pair, ids, make_proposer(pair, d, max_ngram=max_ngram), None, SHORT_CALIBRATION.under(sampling),
            progress=lambda f, m, i=i, d=d: progress((i + f) / len(jobs), f"calibrating {d}: {m}"))[0]
    if how == "once":
        return lambda drafter, ids: timings[(drafter, next(iter(firsts)))]
    return lambda drafter, ids: timings[(drafter, bucket(len(ids)))]


def cmd_report(args: argparse.Namespace) -> int:
    """`report FILE...`: each saved result as its experiment prints it (playground.lab.report.report)."""
    for i, path in enumerate(args.files):
        print(("\n" if i else "") + report(path, args.brief))
    return 0
