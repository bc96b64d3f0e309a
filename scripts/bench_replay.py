"""Replay against a live sweep, side by side in one process: which is faster at answering "which k", and by how much.

For the first N turns of a trace (default: the shipped agent sample), one calibration per turn (shared by both
sides, and timed apart), then
  - replay: k = 1..16 and the adaptive and heuristic controllers, with the default feeding (auto: one shared
    pass per turn for llama.cpp, live feeding for the int8 draft) and with live feeding for every drafter
    (playground.lab.replay);
  - sweep: playground.lab.sweep on each turn's prompt, k = 1..8 and adaptive, `--rounds` rounds of adjacent
    plain and speculative runs of the turn's completion length (what `python -m playground sweep` runs).
Prints each side's wall time and the ratios. Run it on a quiet machine (nothing else on the cores):

    .venv/bin/python scripts/bench_replay.py --turns 10 --drafter llama.cpp --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup
from playground.inputs.traces import SAMPLE_TRACE, read_trace
from playground.lab import calibrate, sweep
from playground.lab.replay import replay
from playground.pairs.registry import choose_pair, load_choice


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(SAMPLE_TRACE), help="a JSONL trace (default: the shipped agent sample)")
    ap.add_argument("--turns", type=int, default=10, help="turns replayed and swept (default 10)")
    ap.add_argument("--drafter", default="llama.cpp", help="draft, llama.cpp, lookup or hybrid (default llama.cpp)")
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

    t0 = time.perf_counter()
    timings = {t.prompt_ids: calibrate(pair, t.prompt_ids, make_proposer(pair, args.drafter), n_max=17) for t in turns}
    cal_s = time.perf_counter() - t0

    def timing_of(drafter, ids):
        return timings[tuple(ids)]

    walls = {}
    for label, feeding in (("replay (auto feeding), k = 1..16 + adaptive + heuristic", "auto"),
                           ("replay (live feeding), k = 1..16 + adaptive + heuristic", "live")):
        t0 = time.perf_counter()
        replay(pair, turns, drafters=[args.drafter], ks=range(1, 17), controllers=("adaptive", "heuristic"),
               timing_of=timing_of, feeding=feeding, records="none")
        walls[label] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for t in turns:
        sweep(pair, list(t.prompt_ids), lambda: make_proposer(pair, args.drafter), ks=tuple(range(1, 9)),
              rounds=args.rounds, max_new_tokens=len(t.completion_ids), timing=timings[t.prompt_ids])
    live = f"live sweep, k = 1..8 + adaptive, {args.rounds} rounds with plain"
    walls[live] = time.perf_counter() - t0

    print(f"\ncalibrations (shared, not counted below): {cal_s:.1f} s")
    for label, s in walls.items():
        print(f"{label:55s} {s:8.1f} s")
    for label, s in walls.items():
        if label != live:
            print(f"sweep / {label.split(',')[0]}: {walls[live] / s:.1f}x "
                  f"(per k: {walls[live] / 9 / (s / 18):.1f}x, replay covering 18 arms, the sweep 9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
