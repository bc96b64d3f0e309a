"""Replay's prediction against live runs, per preset: the table of misses issue 16 asks for.

Per preset and drafter: a calibration on the preset's prompt (passes up to 17 tokens), a replay of the target's
own greedy output for k = 1..16 (exact: the walks are the live run's iterations), the k replay recommends for that
turn (its best predicted speed-up), then `lab.speed` at that k and with both controllers: --rounds rounds of
adjacent plain and speculative runs, each controller starting afresh in every round (a first call, as replay
predicts it). Between rounds a short calibration (--repeats) is made and pooled with the first
(`lab.calibration.pooled`), so that the step costs the prediction uses were timed across the minutes the rounds
ran, not at one moment before them; the prediction from the first calibration alone is printed beside it.

The miss is measured median - predicted. How well the rounds pin a median down is its 90% confidence interval
(distribution-free, from order statistics); a
cell whose half-interval is wider than the tolerance cannot show a miss within it, and is counted apart. The
"step costs" part of the miss is lab.fit's: the prediction with the costs the loop itself paid (fitted from the
live run's iterations) minus the prediction with the calibration's. Run it alone:

    .venv/bin/python scripts/replay_misses.py --threads 2 --rounds 5 --out docs/results/NAME.json
    .venv/bin/python scripts/replay_misses.py --rounds 1 --presets prose --repeats 1    # a smoke run

`--out` writes every row (the predictions, the measured spread, the miss, the controllers) with each cell's speed
table and verdict, the setup, the environment and the machine's load (no per-run records); scripts/results_tables.py
draws the table from it with `markdown`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from scipy.stats import quantile_test

from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup, environment
from playground.inputs.presets import get_preset, preset_names
from playground.lab.calibration import CalibrationPlan, calibrate, pooled
from playground.lab.replay import ReplayOptions, preset_turns, replay_turns
from playground.lab.speed import SpeedRequest, speed
from playground.lab.trust import MachineMonitor, Verdict
from playground.pairs.registry import load_named_pair
from playground.results.replay import ReplayedTurn, SkippedWalk
from playground.studies.replay_misses import CONTROLLERS, EXPERIMENT, markdown


def median_interval(xs: list[float]) -> tuple[float, float]:
    """A distribution-free 90% confidence interval of the median of a cell's ratios (order statistics,
    scipy's quantile_test): how well its rounds pin the median down. With 5 rounds it is their min-max."""
    if len(set(xs)) < 2:
        return (xs[0], xs[0])
    ci = quantile_test(xs, q=statistics.median(xs), p=0.5).confidence_interval(confidence_level=0.9)
    low = ci.low if math.isfinite(ci.low) else min(xs)
    high = ci.high if math.isfinite(ci.high) else max(xs)
    return (float(low), float(high))


def best_arm(turn: ReplayedTurn, drafter: str) -> tuple[int, float]:
    walks = turn.drafters[drafter].walks
    fixed = [(int(a[2:]), w.predicted_speedup) for a, w in walks.items()
             if a.startswith("k=") and not isinstance(w, SkippedWalk) and w.predicted_speedup is not None]
    return max(fixed, key=lambda kv: (kv[1], -kv[0]))


def measure_cell(pair, drafter: str, name: str, args) -> dict:
    """One preset and drafter: calibrate, replay for the best k, run it live, and the row the table shows."""
    preset = get_preset(name)
    turn = preset_turns(pair, [name])[0]
    proposer = make_proposer(pair, drafter)
    first = calibrate(pair, turn.prompt_ids, proposer, CalibrationPlan(n_max=17))
    timings = [first]

    def replayed(timing):
        options = ReplayOptions(drafters=[drafter], ks=range(1, 17), controllers=CONTROLLERS,
                                timing_of=lambda d, ids: timing, records="none")
        return replay_turns(pair, [turn], options).turns[0]

    first_doc = replayed(first)
    k, first_predicted = best_arm(first_doc, drafter)
    live_timing = {name: first}

    def recalibrate(_round):
        timings.append(calibrate(pair, turn.prompt_ids, proposer,
                                 CalibrationPlan(n_max=17, repeats=args.repeats, warmup=1)))
        live_timing[name] = pooled(timings)

    live = speed(SpeedRequest(pair, {name: list(turn.prompt_ids)}, lambda: make_proposer(pair, drafter),
                              ks=(k, *CONTROLLERS), rounds=args.rounds, max_new_tokens=preset.max_new_tokens,
                              timing=live_timing, memory="none"),
                 between_rounds=recalibrate if args.spread_calibration else None).to_dict()
    timing = live_timing[name]
    tdoc = replayed(timing) if timing is not first else first_doc
    walks = tdoc.drafters[drafter].walks
    predicted = walks[f"k={k}"].predicted_speedup
    cell = live["table"][0]
    controllers = {c: {"predicted": None if isinstance(walks[c], SkippedWalk) else walks[c].predicted_speedup,
                       "measured": row_c["median_ratio"], "min": row_c["min_ratio"], "max": row_c["max_ratio"]}
                   for c, row_c in zip(CONTROLLERS, live["table"][1:])}
    ratios = [x["ratio"] for x in live["runs"] if x["k"] == k and x["ratio"] is not None]
    explained = cell.get("explained") or {}
    return {"preset": name, "kind": preset.kind, "drafter": drafter, "k": k, "exact": tdoc.exact,
            "replay_predicted": predicted, "first_predicted": first_predicted, "calibrations": len(timings),
            "speed_predicted": cell.get("predicted_empirical"),
            "measured": cell["median_ratio"], "min": cell["min_ratio"], "max": cell["max_ratio"],
            "spread": cell["max_ratio"] - cell["min_ratio"], "ci": median_interval(ratios),
            "miss": cell["median_ratio"] - predicted, "step_costs": explained.get("step_costs"),
            "trusted": live["trust"]["trusted"], "trust": live["trust"]["headline"], "controllers": controllers,
            "speed_table": [{k: v for k, v in x.items() if k != "trust"} for x in live["table"]]}  # trust: above


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--drafters", default="llama.cpp", help="comma-separated (default llama.cpp)")
    ap.add_argument("--presets", default=None, help="comma-separated (default: all)")
    ap.add_argument("--repeats", type=int, default=4, help="repeats of each calibration made between rounds")
    ap.add_argument("--no-spread-calibration", dest="spread_calibration", action="store_false",
                    help="predict from the one calibration made before the rounds")
    ap.add_argument("--out", default=None, help="write the rows, each cell's speed table and the setup as JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_named_pair("embedded", device="cpu", progress=None)
    names = args.presets.split(",") if args.presets else preset_names()
    print(f"# {describe_setup(pair)} | {args.rounds} rounds | presets: {', '.join(names)}", flush=True)
    rows, started = [], time.perf_counter()
    with MachineMonitor() as monitor:
        for drafter in args.drafters.split(","):
            for name in names:
                row = measure_cell(pair, drafter, name, args)
                rows.append(row)
                print(f"{drafter} {name}: k={row['k']} predicted {row['replay_predicted']:.2f}, measured "
                      f"{row['measured']:.2f} [{row['min']:.2f}-{row['max']:.2f}] "
                      f"({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    result = {"experiment": EXPERIMENT, "date": time.strftime("%Y-%m-%d"), "setup": describe_setup(pair),
              "environment": environment(pair).to_dict(), "rounds": args.rounds, "repeats": args.repeats,
              "spread_calibration": args.spread_calibration, "elapsed_s": time.perf_counter() - started,
              "machine": monitor.load.to_dict(), "verdict": Verdict.of(monitor.load.findings()).to_dict(),
              "rows": rows}
    print(markdown(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
