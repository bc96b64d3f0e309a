"""Verification at batch > 1: the target's pass over B sequences x n new tokens, and what it does to k.

At batch 1 a pass over a few tokens costs little more than over one, because a decoding step is bound by
reading the weights, not by arithmetic; with B sequences in the batch the same pass does B times the
arithmetic per weight read, so verification stops being nearly free at a smaller n. This measures it: for each
B, the pass over n = 1..n_max new tokens per sequence after a shared prompt (B copies, one KV cache of batch
B), relative to that batch's own one-token step, v_B(n); and the k at which v_B(k + 1) first exceeds a
threshold (1.25 by default: verification no longer nearly free).

The loop itself runs batch 1 (one request); batched serving with speculation is measured on vLLM (the
serving-engine backend), where continuous batching mixes requests. The prediction per B here assumes the
drafter's cost per token relative to the target's step stays what the batch-1 calibration measured: the
drafter is timed at batch 1 only.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from ..core.clock import Clock
from ..envinfo import environment
from ..results.calibration import BatchResult, BatchRow, Spread
from ..tables import markdown_table
from .common import Progress, tick
from .whatif import whatif

NEARLY_FREE = 1.25


@torch.inference_mode()
def batch_timing(pair, prompt_ids: Sequence[int], batches: Sequence[int] = (1, 2, 4, 8), n_max: int = 9,
                 repeats: int = 8, warmup: int = 2, threshold: float = NEARLY_FREE, progress: Progress = None
                 ) -> BatchResult:
    """v_B(n) for every B in `batches` and n = 1..n_max, medians of `repeats` timed passes (after `warmup`)."""
    clock = Clock.for_pair(pair)
    prompt = [int(t) for t in prompt_ids]
    filler = (prompt * n_max)[-n_max:]
    rows, total, done = [], len(batches) * (warmup + repeats) * n_max, 0
    for b in batches:
        cache = DynamicCache(config=pair.target.config)
        ids = torch.tensor([prompt[:-1]] * b, device=pair.device)
        pair.target(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        samples: dict[int, list[float]] = {n: [] for n in range(1, n_max + 1)}
        for rep in range(warmup + repeats):
            for n in range(1, n_max + 1):
                x = torch.tensor([filler[:n]] * b, device=pair.device)
                t0 = clock.now()
                pair.target(input_ids=x, cache=cache, use_cache=True)
                t1 = clock.now()
                cache.crop(-n)  # transformers 5: crop takes the number of tokens to drop, negated
                if rep >= warmup:
                    samples[n].append(t1 - t0)
                done += 1
                tick(progress, done / total, f"batch {b}: a pass over {n} tokens per sequence")
        step = statistics.median(samples[1])
        v = {n: statistics.median(xs) / step for n, xs in samples.items()}
        free_until = 0
        for n in range(2, n_max + 1):  # verifying k proposals is a pass over k + 1 tokens
            if v[n] > threshold:
                break
            free_until = n - 1
        rows.append(BatchRow(batch=b, step_s=step, step_per_sequence_s=step / b, v=v, free_up_to_k=free_until,
                             spread={n: Spread.of(xs) for n, xs in samples.items()}))
    return BatchResult(environment=environment(pair), context_tokens=len(prompt), batches=list(batches), n_max=n_max,
                       repeats=repeats, threshold=threshold, rows=rows)


def batch_predictions(result: BatchResult, c: float, alpha: float, overhead: float = 0.0,
                      ks: Sequence[int] = tuple(range(1, 9))) -> dict[int, dict[int, float]]:
    """Predicted speed-up per k at each batch, through the what-if path (the cost model), with v_B(n)."""
    out = {}
    for row in result.rows:
        predicted = whatif(c, alpha=alpha, v=row.v, overhead=overhead, ks=ks)
        out[row.batch] = {r.k: r.speedup for r in predicted.rows}
    return out


def batch_table(result: BatchResult, setup: str) -> str:
    """v_B(n) per batch, the step per sequence, and the k up to which verification stays nearly free."""
    ns = sorted({n for row in result.rows for n in row.v})
    lines = [(f"batch ({setup}; context {result.context_tokens} tokens; medians of {result.repeats}; v_B(n) is a "
             f"pass over n tokens per sequence / that batch's one-token step)"), ""]
    lines.append(markdown_table(
        ["B", "step, ms", "per sequence, ms", *(f"v({n})" for n in ns), f"nearly free (v <= {result.threshold}) up to k"],
        [[str(row.batch), f"{1000 * row.step_s:.1f}", f"{1000 * row.step_per_sequence_s:.1f}",
          *(f"{row.v[n]:.2f}" for n in ns), str(row.free_up_to_k)] for row in result.rows]))
    p = result.predictions
    if p is not None:
        ks = sorted({k for by_k in p.by_batch.values() for k in by_k})
        lines += ["", f"predicted speed-up at alpha = {p.alpha}, c = {p.c:.2f} (the drafter timed at batch 1)", "",
                  markdown_table(["B", *(f"k={k}" for k in ks)],
                                 [[str(b), *(f"{by_k[k]:.2f}" if k in by_k else "-" for k in ks)]
                                  for b, by_k in p.by_batch.items()])]
    lines += ["", "The loop runs batch 1; batched serving with speculation is measured on vLLM."]
    return "\n".join(lines)
