"""BLAS against oneDNN for the target's linear layers (pairs.kernels), side by side in one run.

Loads the embedded target once, keeps both forms of every linear layer, and times a pass over each of --sizes
tokens after a --context-token prompt, the two kernels alternating within every round (A B A B), so that a
drifting machine moves both alike. Printed per kernel and size: the median pass in ms with its min-max, v(n) (the
pass over n tokens in one-token passes of the same kernel: the verification cost the cost model uses), and the
ratio BLAS / oneDNN of the medians (above 1: oneDNN faster). The machine's other load over the run is printed
with the trust verdict's own check: a figure measured beside other work is not one to rely on.

    .venv/bin/python scripts/bench_kernels.py --threads 2 --rounds 15 --out docs/results/NAME.json
    .venv/bin/python scripts/bench_kernels.py --rounds 2 --sizes 1,2           # a smoke run

`--out` writes the summaries (per kernel and size: median, min, max, v(n)) with the setup, the environment and
the machine's load; scripts/results_tables.py draws the table from it with `markdown`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from playground.envinfo import describe_setup, environment
from playground.lab.trust import MachineMonitor, Verdict
from playground.pairs.kernels import Swap, eligible, time_kernels
from playground.pairs.loading import load_pair
from playground.studies.bench_kernels import EXPERIMENT, markdown


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--sizes", default="1,2,3,4,5,6,8,9")
    p.add_argument("--context", type=int, default=128, help="prompt tokens in the cache before each timed pass")
    p.add_argument("--out", default=None, help="write the result (summaries, setup, machine load) as JSON here")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {1})
    pair = load_pair(draft=None, progress=None, kernels="blas")
    why_not = eligible(pair.target)
    if why_not:
        raise SystemExit(f"bench_kernels: {why_not}")
    setup = describe_setup(pair).replace(", BLAS kernels", "")  # both kernels are timed
    swap = Swap(pair.target)
    with MachineMonitor() as mon:
        raw = time_kernels(pair.target, swap, sizes=sizes, rounds=args.rounds, context_tokens=args.context)
    swap.keep("blas", pair.target)
    result = {"experiment": EXPERIMENT, "date": time.strftime("%Y-%m-%d"), "setup": setup,
              "environment": environment(pair).to_dict(), "rounds": args.rounds, "context_tokens": args.context,
              "sizes": sizes, "machine": mon.load.to_dict(),
              "verdict": Verdict(tuple(mon.load.findings())).to_dict(), "kernels": {}}
    for kernels, per in raw.items():
        one = statistics.median(per[1])
        result["kernels"][kernels] = {
            str(n): {"median_ms": statistics.median(xs) * 1e3, "min_ms": min(xs) * 1e3, "max_ms": max(xs) * 1e3,
                     "v": statistics.median(xs) / one} for n, xs in per.items()}
    print(markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
