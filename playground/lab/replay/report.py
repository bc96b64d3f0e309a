"""A replay result as text: one Markdown table per output shape (predicted speed-up of every k and controller per
drafter, the best k, its bootstrap interval over turns and the recommendation), printed by `replay` when it
finishes and by `report FILE` for a saved result, from the same function."""

from __future__ import annotations

from ...results.replay import ReplayResult, ShapeRecommendation, ShapeSummary
from ...tables import fmt, markdown_table
from ..shapes import LABELS, SHAPES


def header(result: ReplayResult) -> str:
    """The line that goes with every figure: the pair, the CPU and the thread budget, the decoding and the mode."""
    env, pair = result.environment, result.environment.pair
    turns = result.turns
    exact = sum(1 for t in turns if t.exact)
    cores = f"{env.cpu_count} cores" if env.cpu_count else None
    threads = f"{env.torch_threads} torch threads (llama.cpp gets the same)" if env.torch_threads else None
    stop = result.min_confidence
    bits = [pair and pair.target, env.gpu or env.cpu, cores, threads, pair and pair.device, pair and pair.dtype,
            result.sampling,
            f"{result.feeding} feeding", f"draft confidence stop {stop:g}" if stop is not None else None,
            f"{len(turns)} turns ({exact} exact, {len(turns) - exact} estimates)",
            f"{len(result.errors)} errors" if result.errors else None]
    return "replay (" + "; ".join(str(b) for b in bits if b) + ")"


def _interval(iv) -> str:
    return "-" if not iv else f"{iv[0]:.2f}-{iv[1]:.2f}"


def _recommendation(rec: ShapeRecommendation) -> str:
    if rec.recommended_k is not None:
        what = f"{rec.drafter} k={rec.recommended_k}: {rec.speedup:.2f}x [{_interval(rec.interval)}]"
        return "recommended: " + what + (" (an estimate: not every turn replays exactly)" if rec.estimate else "")
    best = f" (best predicted: {rec.drafter} k={rec.k}, {rec.speedup:.2f}x)" if rec.k else ""
    return f"no recommended k: {rec.withheld}{best}"


def shape_table(result: ReplayResult, shape: ShapeSummary) -> str:
    arms = result.arms
    head = ["drafter", *arms, "best k", "interval", "turns (exact)", "recommended k"]
    rows = []
    for drafter, row in shape.drafters.items():
        rows.append([drafter, *(fmt(row.speedup.get(a)) for a in arms),
                     "-" if row.best_k is None else f"k={row.best_k}: **{row.best_speedup:.2f}x**",
                     _interval(row.interval), f"{row.turns} ({row.exact_turns})",
                     str(row.recommended_k) if row.recommended_k is not None else "none"])
    return markdown_table(head, rows)


def _schema_cell(a) -> str:
    if a is None:
        return "-"
    return f"{fmt(a.free)} / {fmt(a.constrained)}" + (f" ({a.speedup:.2f}x)" if a.speedup is not None else "")


def schema_lines(result: ReplayResult, shape: ShapeSummary) -> list[str]:
    """What the schema is worth on a shape's turns that carry one (none: no lines): the forced share, then per
    drafter and arm tokens per target pass free / constrained (schema+ the drafter), and the constrained walk's
    predicted speed-up over constrained plain decoding."""
    s = shape.schema
    if s is None:
        return []
    share = f" ({s.forced_share:.0%})" if s.forced_share is not None else ""
    lines = ["", (f"turns with a schema: {s.turns} ({s.exact_turns} the masked target's greedy output, walked "
             f"exactly); forced by the schema: {s.forced} of {s.tokens} tokens{share}")]
    if s.drafters:
        arms = result.arms
        rows = [[d, *(_schema_cell(cells.get(a)) for a in arms)] for d, cells in s.drafters.items()]
        lines += [("tokens per target pass, free / constrained (schema+ the drafter), and the constrained predicted "
                  "speed-up over constrained plain"), "", markdown_table(["drafter", *arms], rows)]
    return lines


def replay_table(result: ReplayResult) -> str:
    """What `replay` prints: the header line, then per output shape with turns, and overall, the table of
    predicted speed-ups (plain decoding = 1.00) and the recommendation; then the errors."""
    summary = result.summary
    legend = ("predicted speed-up over plain decoding (decode only, prefill excluded) from the calibration; best k "
              f"among fixed k; interval: bootstrap over turns ({summary.confidence:.0%})")
    lines = [header(result), "", legend]
    for name in SHAPES:
        s = summary.shapes[name]
        if not s.turns:
            continue
        lines += ["", f"### {LABELS[name]}: {s.turns} turns, {s.tokens} tokens", "", shape_table(result, s), "",
                  _recommendation(s.recommendation), *schema_lines(result, s)]
    o = summary.overall
    lines += ["", f"### overall: {o.turns} turns, {o.tokens} tokens", "", shape_table(result, o), "",
              _recommendation(o.recommendation), *schema_lines(result, o)]
    for drafter, trust in result.trust.items():
        lines.append(f"calibration of {drafter}: {trust.headline}")
    if result.errors:
        lines += ["", f"{len(result.errors)} lines or turns were not replayed:"]
        for e in result.errors:
            lines.append(f"- {e.where}: field '{e.field}': {e.message}")
    return "\n".join(lines)
