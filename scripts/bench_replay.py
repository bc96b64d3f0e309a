"""Replay against a live sweep, side by side in one process: which is faster at answering "which k", and by how much.

For the first N turns of a trace (default: the shipped agent sample; scripts/make_trace.py writes a long one),
one calibration per context-length bucket (lab.replay.calibration_contexts, as `replay --calibration bucket`),
shared by both sides and timed apart, then
  - replay: k = 1..16 and the adaptive and heuristic controllers, with the default feeding (auto: one shared
    pass per turn for llama.cpp, live feeding for the int8 draft) and with live feeding for every drafter
    (playground.lab.replay), over all N turns and over the swept ones;
  - sweep: playground.lab.sweep on each swept turn's prompt, k = 1..8 and adaptive, `--rounds` rounds of
    adjacent plain and speculative runs of the turn's completion length (what `python -m playground sweep` runs).
A live sweep of 100 long turns takes hours on 2 cores; `--sweep-turns M` sweeps every (N/M)-th turn only. The
ratio printed first is measured on the same M turns; the sweep's time for all N turns is then extrapolated from
its time per completion token, and said to be. Run it on a quiet machine (nothing else on the cores):

    .venv/bin/python scripts/bench_replay.py --turns 10 --drafter llama.cpp --threads 2
    .venv/bin/python scripts/bench_replay.py --trace results/long_trace.jsonl --turns 100 --sweep-turns 10
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup
from playground.inputs.traces import SAMPLE_TRACE, read_trace
from playground.lab import calibrate
from playground.lab.calibration import CalibrationPlan, CalibrationStore
from playground.lab.replay import ReplayOptions, calibration_contexts, replay_turns
from playground.lab.speed import SpeedRequest, sweep
from playground.pairs.registry import choose_pair, load_choice


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(SAMPLE_TRACE), help="a JSONL trace (default: the shipped agent sample)")
    ap.add_argument("--turns", type=int, default=10, help="turns replayed and swept (default 10)")
    ap.add_argument("--drafter", default="llama.cpp", help="draft, llama.cpp, lookup or hybrid (default llama.cpp)")
    ap.add_argument("--sweep-turns", type=int, default=None, help="turns swept live (default: all N), evenly spaced")
    ap.add_argument("--rounds", type=int, default=2, help="the sweep's rounds (default 2, as lab.sweep)")
    ap.add_argument("--pair", default=None, help="a named pair (default: the embedded one)")
    ap.add_argument("--threads", type=int, default=2, help="torch (and llama.cpp) threads (default 2)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    pair = load_choice(choose_pair(pair=args.pair), progress=None)
    trace = read_trace(args.trace, pair.tokenizer, pair.eos_ids, max_context=pair.max_context)
    turns = trace.turns[: args.turns]
    tokens = sum(len(t.completion_ids) for t in turns)
    print(f"# {pair.target_name} | drafter: {make_proposer(pair, args.drafter).describe()} | {describe_setup(pair)}")
    print(f"# {len(turns)} turns of {args.trace}, {tokens} completion tokens")

    step = max(1, len(turns) // (args.sweep_turns or len(turns)))
    swept = turns[::step][: args.sweep_turns or len(turns)]
    swept_tokens = sum(len(t.completion_ids) for t in swept)
    print(f"# live sweep on {len(swept)} of them (every {step}th), {swept_tokens} completion tokens")

    t0 = time.perf_counter()
    by_bucket = {b: calibrate(pair, ids, make_proposer(pair, args.drafter), CalibrationPlan(n_max=17))
                 for b, ids in calibration_contexts(turns, "bucket").items()}
    cal_s = time.perf_counter() - t0

    def timing_of(drafter, ids):
        return by_bucket[CalibrationStore.bucket(len(ids))]

    def replay_wall(which, feeding):
        t0 = time.perf_counter()
        replay_turns(pair, which, ReplayOptions(drafters=[args.drafter], ks=range(1, 17),
                                                controllers=("adaptive", "heuristic"), timing_of=timing_of,
                                                feeding=feeding, records="none"))
        return time.perf_counter() - t0

    walls = {}
    for feeding in ("auto", "live"):
        walls[f"replay ({feeding} feeding), swept turns"] = replay_wall(swept, feeding)
    t0 = time.perf_counter()
    for t in swept:
        sweep(SpeedRequest(pair, {"prompt": list(t.prompt_ids)}, lambda: make_proposer(pair, args.drafter),
                           ks=tuple(range(1, 9)), rounds=args.rounds, max_new_tokens=len(t.completion_ids),
                           timing=timing_of(None, t.prompt_ids)))
    live = f"live sweep, k = 1..8 + adaptive, {args.rounds} rounds with plain, swept turns"
    walls[live] = time.perf_counter() - t0
    if len(swept) < len(turns):
        for feeding in ("auto", "live"):
            walls[f"replay ({feeding} feeding), all {len(turns)} turns"] = replay_wall(turns, feeding)

    print(f"\ncalibrations (shared, {len(by_bucket)} context buckets, not counted below): {cal_s:.1f} s")
    for label, s in walls.items():
        print(f"{label:70s} {s:8.1f} s")
    print("\nk = 1..16 + 2 controllers replayed (18 arms) against k = 1..8 + adaptive swept (9 arms):")
    for feeding in ("auto", "live"):
        r = walls[f"replay ({feeding} feeding), swept turns"]
        print(f"sweep / replay ({feeding} feeding), measured on the same {len(swept)} turns: {walls[live] / r:.1f}x")
    if len(swept) < len(turns):
        est = walls[live] / swept_tokens * tokens
        print(f"sweep of all {len(turns)} turns, extrapolated from its {walls[live] / swept_tokens * 1000:.0f} ms "
              f"per completion token: {est:.0f} s (not measured)")
        for feeding in ("auto", "live"):
            r = walls[f"replay ({feeding} feeding), all {len(turns)} turns"]
            print(f"extrapolated sweep / measured replay ({feeding} feeding), all {len(turns)} turns: {est / r:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
