"""How long a calibration takes on the embedded pair: the short one adaptive k runs before its first run in a
tab (passes up to 17 tokens, `lab.calibrated_timing`, the browser's and the CLI's settings) and the lab's
default (`lab.calibrate`, passes up to 9 tokens, 12 repeats). Drafters alternate, rounds rotate; medians and
min-max are printed with the CPU, the thread budget and whether other processes used the cores meanwhile.

    .venv/bin/python scripts/bench_calibration.py --threads 2 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from playground.core.engine import K_MAX
from playground.drafters.registry import make_proposer
from playground.envinfo import environment
from playground.inputs.presets import get_preset
from playground.lab.calibration import SHORT_CALIBRATION, CalibrationPlan, calibrate, calibrated_timing
from playground.lab.common import rotated
from playground.lab.trust import MachineMonitor, Verdict
from playground.pairs.registry import load_named_pair


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--preset", default="tool_call")
    ap.add_argument("--drafters", default="llama.cpp,draft")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_named_pair("embedded", device="cpu", progress=None)
    ids = get_preset(args.preset).prompt_ids(pair.tokenizer)
    drafters = args.drafters.split(",")
    arms = [(d, kind) for d in drafters for kind in (f"short (adaptive, n<=17, {SHORT_CALIBRATION.repeats} repeats)", "lab default (n<=9, 12)")]
    proposers = {d: make_proposer(pair, d) for d in drafters}
    for d in drafters:  # warm-up: one untimed short calibration per drafter
        calibrated_timing(pair, ids, proposers[d], None, CalibrationPlan(n_max=K_MAX + 1, repeats=1, warmup=1))
    times: dict[tuple, list[float]] = {a: [] for a in arms}
    with MachineMonitor() as m:
        for r in range(args.rounds):
            for d, kind in rotated(arms, r):
                t0 = time.perf_counter()
                if kind.startswith("short"):  # the settings a run uses
                    calibrated_timing(pair, ids, proposers[d], None, SHORT_CALIBRATION)
                else:
                    calibrate(pair, ids, proposers[d])
                times[(d, kind)].append(time.perf_counter() - t0)
                print(f"round {r + 1}: {d}, {kind}: {times[(d, kind)][-1]:.1f} s", flush=True)
    env = environment(pair)
    print(f"CPU: {env.get('cpu')} | torch threads {torch.get_num_threads()} | {len(ids)} prompt tokens "
          f"({args.preset}) | {args.rounds} rounds")
    print(f"machine: {Verdict.of(m.load.findings()).headline()} (other processes: {m.load.other_cores:.2f} cores)")
    print("| drafter | calibration | median s | min-max s |\n|---|---|---|---|")
    for (d, kind), xs in times.items():
        print(f"| {d} | {kind} | {statistics.median(xs):.1f} | {min(xs):.1f}-{max(xs):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
