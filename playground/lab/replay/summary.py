"""A replay's turns pooled per output shape: the predicted speed-up of each k and controller, the best k with a
bootstrap interval over turns, and a recommendation per shape and overall.

Pooling. A turn contributes to a shape when at least MIN_SHAPE_TOKENS of its tokens have that shape (shapes.py);
each iteration's cost is shared equally by the tokens it emitted, so a shape's predicted speed-up is its tokens
over the cost they carried, summed over its turns (a ratio of sums: long turns weigh more, as they do in time).
The interval is scipy.stats.bootstrap's percentile interval of that ratio, resampling turns (paired tokens and
costs), for the best k (chosen on the same turns, so it is a little optimistic).

A recommendation is the (drafter, k) with the highest pooled speed-up. It is withheld (no recommended k, with the
reason) when that drafter's calibration is not trusted (playground.lab.trust, via Timing.trust), when the shape
has fewer than MIN_TURNS turns, or when there is no calibration at all.

`schema_shape` pools what the schema is worth (schema.py) over a shape's turns that carry one.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import bootstrap

from ...results.replay import (
    DrafterTrust,
    ReplayedTurn,
    ReplaySummary,
    SchemaArm,
    SchemaShape,
    ShapeRecommendation,
    ShapeRow,
    ShapeSummary,
    SkippedWalk,
)
from ..shapes import SHAPES

MIN_SHAPE_TOKENS = 4
MIN_TURNS = 3
CONFIDENCE = 0.95
RESAMPLES = 2000


def _ratio(tokens, costs) -> float:
    return float(np.sum(tokens) / np.sum(costs))


def interval(tokens, costs, seed: int = 0) -> list[float] | None:
    """The bootstrap percentile interval of sum(tokens) / sum(costs), resampling turns; None with one turn."""
    tokens, costs = np.asarray(tokens, float), np.asarray(costs, float)
    if len(tokens) < 2:
        return None
    if np.allclose(tokens / costs, tokens[0] / costs[0]):
        r = _ratio(tokens, costs)
        return [r, r]
    res = bootstrap((tokens, costs), _ratio, paired=True, vectorized=False, n_resamples=RESAMPLES,
                    confidence_level=CONFIDENCE, method="percentile", rng=np.random.default_rng(seed))
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def turns_of(turns: list[ReplayedTurn], shape: str | None) -> list[ReplayedTurn]:
    """The turns a shape's figures pool: those with at least MIN_SHAPE_TOKENS tokens of it (None: every turn)."""
    if shape is None:
        return list(turns)
    return [t for t in turns if t.shapes.tokens.get(shape, 0) >= MIN_SHAPE_TOKENS]


def _pooled(turns: list[ReplayedTurn], drafter: str, arm: str, shape: str | None):
    """Per turn (tokens, cost) of one arm, on one shape (None: all tokens); costs None without a calibration."""
    tokens, costs = [], []
    for t in turns:
        entry = t.drafters.get(drafter)
        w = entry.walks.get(arm) if entry is not None else None
        if w is None or isinstance(w, SkippedWalk):
            continue
        cells = list(w.shapes.values()) if shape is None else [w.shapes.get(shape, (0, 0.0))]
        tokens.append(sum(c[0] for c in cells))
        costs.append(None if any(c[1] is None for c in cells) else sum(c[1] for c in cells))
    return tokens, costs


def _drafter_row(turns: list[ReplayedTurn], arms: list[str], drafter: str, shape: str | None) -> ShapeRow:
    speedup, per_arm = {}, {}
    for arm in arms:
        tokens, costs = _pooled(turns, drafter, arm, shape)
        per_arm[arm] = (tokens, costs)
        ok = tokens and all(c is not None for c in costs) and sum(costs) > 0
        speedup[arm] = _ratio(tokens, costs) if ok else None
    fixed = [(int(a[2:]), s) for a, s in speedup.items() if a.startswith("k=") and s is not None]
    exact = sum(1 for t in turns if (e := t.drafters.get(drafter)) is not None and e.exact)
    if not fixed:
        return ShapeRow(speedup, len(turns), exact, best_k=None, best_speedup=None, interval=None)
    best_k, best = max(fixed, key=lambda kv: (kv[1], -kv[0]))
    tokens, costs = per_arm[f"k={best_k}"]
    return ShapeRow(speedup, len(turns), exact, best_k=best_k, best_speedup=best, interval=interval(tokens, costs))


def _withheld(trust: dict[str, DrafterTrust], drafter: str | None, row: ShapeRow | None) -> str | None:
    if drafter is None or row is None or row.best_k is None:
        return "no calibration: no speed-up could be predicted"
    verdict = trust.get(drafter)
    if verdict is None or not verdict.trusted:
        return f"the {drafter} calibration is not trusted: {verdict.headline if verdict else 'no verdict'}"
    if row.turns < MIN_TURNS:
        return f"only {row.turns} turn(s) of this shape; a recommendation needs {MIN_TURNS}"
    return None


def _shape_summary(all_turns: list[ReplayedTurn], arms: list[str], drafters: list[str],
                   trust: dict[str, DrafterTrust], shape: str | None) -> ShapeSummary:
    turns = turns_of(all_turns, shape)
    rows = {d: _drafter_row(turns, arms, d, shape) for d in drafters}
    for d, row in rows.items():
        why = _withheld(trust, d, row)
        row.recommended_k, row.withheld = (row.best_k, None) if why is None else (None, why)
    scored = [(d, r) for d, r in rows.items() if r.best_speedup is not None]
    best_d, best = max(scored, key=lambda dr: dr[1].best_speedup) if scored else (None, None)
    why = _withheld(trust, best_d, best) if turns else "no turn of this shape"
    recommendation = ShapeRecommendation(
        drafter=best_d, k=best.best_k if best else None, speedup=best.best_speedup if best else None,
        interval=best.interval if best else None, recommended_k=None if why or best is None else best.best_k,
        withheld=why, estimate=bool(best) and best.exact_turns < best.turns)
    tokens = sum(sum(t.shapes.tokens.values()) if shape is None else t.shapes.tokens.get(shape, 0) for t in turns)
    return ShapeSummary(len(turns), tokens, rows, recommendation, schema_shape(turns, arms, drafters, shape))


def _schema_arm(turns: list[ReplayedTurn], drafter: str, arm: str) -> SchemaArm | None:
    free, held = [0, 0], [0, 0, 0.0]  # tokens, passes (and the constrained walks' cost)
    for t in turns:
        entry = t.drafters.get(drafter)
        w = entry.walks.get(arm) if entry is not None else None
        c = (getattr(entry, "constrained", None) or {}).get(arm)
        if w is None or c is None or isinstance(w, SkippedWalk) or isinstance(c, SkippedWalk):
            continue
        free[0], free[1] = free[0] + w.new_tokens, free[1] + w.iterations
        costs = held[2] if c.cost is not None and held[2] is not None else None
        held = [held[0] + c.new_tokens, held[1] + c.iterations, None if costs is None else costs + c.cost]
    if not free[1] or not held[1]:
        return None
    return SchemaArm(free[0] / free[1], held[0] / held[1], held[0] / held[2] if held[2] else None)


def schema_shape(turns: list[ReplayedTurn], arms: list[str], drafters: list[str],
                 shape: str | None) -> SchemaShape | None:
    """The schema's worth over `turns` (a shape's) that carry a schema their recording keeps to; None: no such turn."""
    held = [t for t in turns if t.schema_worth is not None and t.schema_worth.forced_share is not None]
    if not held:
        return None
    cells = [[t.schema_worth.tokens, t.schema_worth.forced] if shape is None
             else t.schema_worth.shapes.get(shape, [0, 0]) for t in held]
    tokens, forced = sum(c[0] for c in cells), sum(c[1] for c in cells)
    rows = {}
    for d in drafters:
        row = {arm: a for arm in arms if (a := _schema_arm(held, d, arm)) is not None}
        if row:
            rows[d] = row
    return SchemaShape(len(held), tokens, forced, forced / tokens if tokens else None, rows,
                       exact_turns=sum(1 for t in held if t.schema_worth.exact))


def summarize_replay(turns: list[ReplayedTurn], arms: list[str], drafters: list[str],
                     trust: dict[str, DrafterTrust]) -> ReplaySummary:
    """Per shape (SHAPES) and overall: the pooled speed-ups, best k, interval and recommendation of each drafter
    (`drafters`) over its walks (`arms`), withheld where its calibration (`trust`) is not trusted."""
    return ReplaySummary(shapes={s: _shape_summary(turns, arms, drafters, trust, s) for s in SHAPES},
                         overall=_shape_summary(turns, arms, drafters, trust, None),
                         min_shape_tokens=MIN_SHAPE_TOKENS, min_turns=MIN_TURNS, confidence=CONFIDENCE)
