"""What if: the cost model's predictions for a drafter and a text that need no model run.

Given an acceptance, the drafter's costs and the verification curve v(n), `whatif` returns for each k the
predicted speed-up, the break-even alpha and tokens per target pass, the best k, and the map of predicted
speed-up over alpha x k. Every number comes from playground.core.cost: this module only lays them out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..core import cost
from ..errors import PlaygroundError
from ..results.calibration import WhatifGridRow, WhatifResult, WhatifRow
from ..tables import markdown_table

ALPHAS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def parse_v(text: str | None) -> dict[int, float] | None:
    """'1:1.0,2:1.05,4:1.6' -> {1: 1.0, 2: 1.05, 4: 1.6}; None or 'flat' -> None (every pass costs one step)."""
    if text is None or text.strip().lower() in ("", "flat"):
        return None
    out = {}
    for part in text.split(","):
        try:
            n, x = part.split(":")
            out[int(n)] = float(x)
        except ValueError:
            raise PlaygroundError(f"v(n) is a list like '1:1.0,2:1.05,4:1.6' (n:cost in plain steps), got {part!r}") \
                from None
    if any(n < 1 or x <= 0 for n, x in out.items()):
        raise PlaygroundError("v(n) needs n >= 1 and a cost > 0 for every pass length")
    return out


def _check(alpha, positions, c, overhead) -> None:
    if (alpha is None) == (positions is None):
        raise PlaygroundError("give either an acceptance rate alpha or per-position acceptance, not both")
    values = [alpha] if alpha is not None else list(positions)
    if not values or any(not (0.0 <= a <= 1.0) for a in values):
        raise PlaygroundError(f"acceptance is a probability in [0, 1], got {values}")
    if not c >= 0:
        raise PlaygroundError(f"the draft cost ratio c must be >= 0, got {c}")
    if not overhead >= 0:
        raise PlaygroundError(f"the drafter's cost per call must be >= 0, got {overhead}")


def whatif(c: float, alpha: float | None = None, positions: Sequence[float] | None = None,
           v: Mapping[int, float] | None = None, overhead: float = 0.0, ks: Sequence[int] = tuple(range(1, 17)),
           alphas: Sequence[float] = ALPHAS) -> WhatifResult:
    """Predicted speed-up per k (and over alpha x k) for a drafter costing c per token plus `overhead` per call,
    verification v(n) (None: flat) and an acceptance: iid `alpha`, or measured per-position `positions`."""
    _check(alpha, positions, c, overhead)
    rows = []
    for k in ks:
        if alpha is not None:
            speedup, tokens = cost.predicted_speedup(alpha, k, c, v, overhead), cost.expected_tokens(alpha, k)
        else:
            speedup = cost.predicted_speedup_empirical(positions, k, c, v, overhead)
            tokens = cost.expected_tokens_empirical(positions, k)
        rows.append(WhatifRow(k=k, speedup=speedup, tokens_per_pass=tokens,
                              break_even_alpha=cost.break_even_alpha(k, c, v, overhead),
                              iteration_cost=cost.iteration_cost(k, c, v, overhead)))
    best = max(rows, key=lambda r: r.speedup)
    grid = [WhatifGridRow(alpha=a, speedups={k: cost.predicted_speedup(a, k, c, v, overhead) for k in ks})
            for a in alphas]
    return WhatifResult(c=c, overhead=overhead, alpha=alpha, positions=list(positions) if positions is not None else None,
                        v=None if v is None else dict(v), rows=rows, best_k=best.k if best.speedup > 1.0 else 0,
                        best_speedup=best.speedup, grid=grid, ks=list(ks))


def whatif_text(result: WhatifResult) -> str:
    """The what-if result as Markdown: per k, then the alpha x k map (the seed chapter's table)."""
    what = (f"alpha = {result.alpha}" if result.alpha is not None
            else "per-position acceptance " + ", ".join(f"{a:.2f}" for a in result.positions))
    v = "flat (every pass costs one plain step)" if result.v is None else ", ".join(
        f"v({n}) = {x:.2f}" for n, x in result.v.items())
    lines = [(f"what if: {what}; drafter c = {result.c:.3f} per token + {result.overhead:.3f} per call; "
             f"verification {v} (predictions from the cost model, not measurements)"), ""]
    lines.append(markdown_table(["k", "predicted speed-up", "tokens per pass", "break-even alpha"], [
        [str(r.k), f"{r.speedup:.2f}", f"{r.tokens_per_pass:.2f}",
         "never" if r.break_even_alpha is None else f"{r.break_even_alpha:.2f}"] for r in result.rows]))
    lines.append("")
    lines.append(f"best k: {result.best_k} ({result.best_speedup:.2f}x)" if result.best_k
                 else f"no k pays: the best is {result.best_speedup:.2f}x, below plain decoding")
    ks = result.ks
    lines += ["", "predicted speed-up over alpha x k", "",
              markdown_table(["alpha", *(f"k={k}" for k in ks)],
                             [[f"{g.alpha:.2f}", *(f"{g.speedups[k]:.2f}" for k in ks)] for g in result.grid])]
    return "\n".join(lines)
