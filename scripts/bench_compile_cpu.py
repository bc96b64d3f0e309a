"""torch.compile on the CPU target's static forward, against the same forward eager (issue 44: compile is kept
only if it measurably pays). The embedded target after the tool-call preset's prompt: one-token and five-token
feeds, eager and compiled alternating per round, milliseconds per feed.

    .venv/bin/python scripts/bench_compile_cpu.py --kernels blas --threads 2

`--kernels onednn` (the load-time probe's choice on AVX-512 machines) fails in inductor's lowering of oneDNN's
prepacked linear; with `blas` the compile (dynamic shapes: the feed length and the cache position vary) is what
this script times first.
"""

from __future__ import annotations

import argparse
import time

import torch

from playground.core import static
from playground.inputs.presets import get_preset
from playground.pairs.registry import Placement, choose_pair, load_choice


def feed_ms(pair, ids, forward, steps: int, n: int) -> float:
    """Milliseconds per feed of n tokens after the prompt, with StaticLM's sliced step replaced by `forward`."""
    saved, static.StaticLM._sliced = static.StaticLM._sliced, forward
    try:
        lm = static.StaticLM(pair.target, "cpu", pair.vocab_size)
        lm.reserve(len(ids) + steps * n + 1)
        lm.feed(ids)
        t = time.perf_counter()
        for _ in range(steps):
            lm.feed([5] * n)
        return (time.perf_counter() - t) / steps * 1000
    finally:
        static.StaticLM._sliced = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", default="blas", help="blas or onednn (the pair's linear layers)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_choice(choose_pair(pair="embedded", placement=Placement(kernels=args.kernels)))
    ids = get_preset("tool_call").prompt_ids(pair.tokenizer)
    eager = static.StaticLM._sliced
    compiled = torch.compile(eager, dynamic=True)
    started = time.perf_counter()
    for n in (1, 5):
        feed_ms(pair, ids, compiled, 2, n)
    print(f"compiled (first feeds of 1 and 5 tokens) in {time.perf_counter() - started:.0f} s", flush=True)
    for r in range(args.rounds):
        for n in (1, 5):
            a, b = feed_ms(pair, ids, eager, args.steps, n), feed_ms(pair, ids, compiled, args.steps, n)
            print(f"round {r} n={n}: eager {a:.1f} ms, compiled {b:.1f} ms, compiled / eager {b / a:.3f}", flush=True)


if __name__ == "__main__":
    main()
