"""How far the predictions missed a speed or sweep result's measured ratios: the per-cell table, the scores, the
miss split into its parts; and the small cell helpers lab.report shares."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import t as student_t

from ..results.speed import SpeedResult, SpeedRow, SpeedRun
from ..results.trust import Verdict
from ..tables import fmt, markdown_table
from .fit import ScoredCell, prediction_score

Z90 = 1.645  # a two-sided 90% normal interval's half-width, in standard errors
MEDIAN_SE = math.sqrt(math.pi / 2)  # a median's standard error over a mean's, for normal runs (large n;
# at 3 runs it is 1.16, so intervals from it are a little wide there)


def k_label(k) -> str:
    return f"k={k}" if isinstance(k, int) else str(k)


def result_cells(doc: SpeedResult) -> tuple[dict[tuple[str, int | str], SpeedRow], list[str]]:
    """A speed / sweep result's rows by (prompt, k), and its prompts in order."""
    rows = doc.by_prompt or [replace(r, prompt="prompt") for r in doc.table]
    return {(r.prompt, r.k): r for r in rows}, doc.prompts or sorted({r.prompt for r in rows})


def has_local(doc: SpeedResult) -> bool:
    """Whether the result's cells carry the prediction from the loop's costs, and its miss (lab.fit.
    predict_from_neighbours; results saved before it have the calibration's only)."""
    by, _ = result_cells(doc)
    return any(r.predicted_local is not None for r in by.values())


def trust_cell(trust: Verdict | None) -> str:
    if not trust:
        return "-"
    if not trust.trusted:
        return "UNTRUSTED"
    return "ok (warn)" if trust.findings else "ok"


def misses_markdown(doc: SpeedResult) -> str:
    """How far each prediction missed the measured ratio, per prompt and k (measured - predicted): the
    calibration's, then (where the result has it) the one from the other arms' costs in each round, with how
    closely the cell's median is known (known_to: a miss within it cannot be told from the runs' noise); and per
    prompt how many cells each put within 0.05."""
    ks = [k for k in doc.ks if isinstance(k, int)]
    by, prompts = result_cells(doc)
    misses = ((lambda c: c.miss_empirical), (lambda c: c.miss_local)) if has_local(doc) else ((lambda c: c.miss_empirical),)
    head = ["preset", *(k_label(k) for k in ks), "within 0.05"]
    known = known_to(doc.runs)
    rows = []
    for name in prompts:
        cells = [by[(name, k)] for k in ks]
        within = [sum(1 for c in cells if miss(c) is not None and abs(miss(c)) <= 0.05) for miss in misses]
        shown = [" / ".join(fmt(miss(c), "+.2f") for miss in misses)
                 + (f" (\u00b1{known[(name, k)]:.2f})" if (name, k) in known else "") for c, k in zip(cells, ks)]
        rows.append([name, *shown, " / ".join(f"{n}/{len(ks)}" for n in within)])
    return markdown_table(head, rows)


def prediction_lines(doc: SpeedResult) -> list[str]:
    """After a blank line, how close each prediction came over a result's fixed-k cells (lab.fit.prediction_score):
    the calibration's ("miss_empirical"), then the one from the other arms' costs in each run's round
    ("miss_local")."""
    by, prompts = result_cells(doc)
    known = known_to(doc.runs)
    cells = [ScoredCell(by[(name, k)], known.get((name, k))) for name in prompts for k in doc.ks
             if isinstance(k, int) and (name, k) in by]
    lines = []
    for local, what in ((False, "prediction"), (True, "prediction from the other arms' costs in each round")):
        if (score := prediction_score(cells, local=local)) is None:
            continue
        w, p = score.within, score.past
        lines.append(f"{what}: within {w} of the measured median in {score.close} of {score.cells} cells, in "
                     f"{score.sharp_close} of the {score.sharp} whose median is known to {w} (90%); largest miss "
                     f"{score.worst_miss:+.2f} ({score.worst_prompt}, k={score.worst_k}); {score.far} past "
                     f"{p}, {score.far - score.loose} of them flagged in their cells")
    if lines and (bound := noise_bound(doc.runs)) is not None:
        lines.append(noise_line(bound))
    if not lines and doc.min_confidence is not None:
        lines.append("prediction: none at a fixed k under a confidence stop (the model drafts every k); the costed "
                     "column counts what was drafted")
    return ["", *lines] if lines else []


def _fixed_runs(runs: Sequence[SpeedRun]) -> dict[tuple[str, int], list[float]]:
    """A result's run ratios by (prompt, fixed k)."""
    cells: dict = {}
    for r in runs:
        if isinstance(r.k, int) and not isinstance(r.k, bool) and r.ratio:
            cells.setdefault((r.prompt, r.k), []).append(r.ratio)
    return cells


def _pooled_scatter(cells: dict) -> dict[str, tuple[float, int]]:
    """Per prompt, its runs' relative standard deviation around their cell's mean, pooled over its fixed-k cells
    (n - 1 degrees of freedom a cell), with those degrees of freedom. Pooled, not per cell: three runs' own
    standard deviation is itself uncertain by about half, and a prompt's cells share its host and its drafter."""
    pooled: dict[str, list[float]] = {}  # prompt -> [sum of squared relative deviations, degrees of freedom]
    for (prompt, _), xs in cells.items():
        if len(xs) > 1:
            mean = statistics.fmean(xs)
            acc = pooled.setdefault(prompt, [0.0, 0])
            acc[0] += sum((x / mean - 1.0) ** 2 for x in xs)
            acc[1] += len(xs) - 1
    return {prompt: (math.sqrt(ss / dof), int(dof)) for prompt, (ss, dof) in pooled.items()}


def known_to(runs: Sequence[SpeedRun], level: float = 0.9) -> dict[tuple[str, int], float]:
    """How closely each fixed-k cell's measured median is known, by (prompt, k): the half-width of its `level`
    interval, t(level, pooled degrees of freedom) * MEDIAN_SE * the prompt's pooled relative scatter * the cell's
    median / sqrt(its runs). A miss can be told from the cell's noise when this is at most the miss tested for:
    the cells "whose own spread allows it" that lab.fit.prediction_score counts as sharp. Unlike the runs' range,
    it narrows as runs are added.
    Cells of a prompt without two runs in any cell are left out."""
    cells = _fixed_runs(runs)
    return _known(cells, _pooled_scatter(cells), level)


def _known(cells: dict, scatter: dict[str, tuple[float, int]], level: float = 0.9) -> dict:
    """known_to from the runs and their pooled scatter (noise_bound has both already)."""
    t = {prompt: float(student_t.ppf(0.5 + level / 2, dof)) for prompt, (_, dof) in scatter.items()}
    return {(prompt, k): t[prompt] * MEDIAN_SE * scatter[prompt][0] * statistics.median(xs) / math.sqrt(len(xs))
            for (prompt, k), xs in cells.items() if prompt in scatter}


@dataclass(frozen=True)
class NoiseBound:
    """What a prediction equal to every cell's true median would score on a result's scatter (noise_bound)."""

    within: float
    cells: int
    close: float  # expected cells within `within`
    sharp: int  # cells whose median is known to `within`
    sharp_close: float  # ... expected within it
    sd: dict[str, float]  # per prompt: its runs' pooled relative scatter
    ratio: float  # the median cell's median
    rounds: int  # runs a cell needs to be known to `within` at 90% on the median prompt's scatter
    runs_per_cell: float


def noise_bound(runs: Sequence[SpeedRun], within: float = 0.05, draws: int = 2000, seed: int = 0) -> NoiseBound | None:
    """What a perfect prediction would score on this result's own scatter: the yardstick for prediction_score.

    Each cell's runs are drawn `draws` times from a normal around its measured median with its prompt's pooled
    relative scatter (_pooled_scatter; seeded: the figure is the result file's, whoever reads it), and the draws
    scored as prediction_score scores a prediction equal to that median: the expected cells within `within`; the
    sharp cells (known_to at most `within`, which the draws leave as measured) and the expected number of them
    within it. `rounds`: the runs a cell's median needs to be known to `within` at 90% on the median prompt's
    scatter and ratio (Z90 * MEDIAN_SE * sd * ratio / sqrt(n) at most `within`). None without two runs in a cell.

    Why it is needed: where runs scatter by several percent, a median of three runs is known to no better than
    0.05, so no prediction can score well however right it is, and the score alone would blame the model for the
    host (docs/results.md)."""
    cells = _fixed_runs(runs)
    scatter = _pooled_scatter(cells)
    sd = {prompt: s for prompt, (s, _) in scatter.items()}
    if not sd:
        return None
    known = _known(cells, scatter)
    rng = np.random.default_rng(seed)
    close = sharp_close = 0.0
    sharp = 0
    scored = [(key, xs, statistics.median(xs)) for key, xs in cells.items() if key[0] in sd]
    for key, xs, mu in scored:
        runs = rng.normal(mu, sd[key[0]] * mu, size=(draws, len(xs)))
        near = float((np.abs(np.median(runs, axis=1) - mu) <= within).mean())
        close += near
        if known[key] <= within:
            sharp, sharp_close = sharp + 1, sharp_close + near
    ratio = statistics.median(mu for _, _, mu in scored)
    typical = statistics.median(sd.values())
    return NoiseBound(within=within, cells=len(scored), close=close, sharp=sharp, sharp_close=sharp_close,
                      sd={prompt: round(v, 4) for prompt, v in sd.items()}, ratio=ratio,
                      rounds=math.ceil((Z90 * MEDIAN_SE * typical * ratio / within) ** 2),
                      runs_per_cell=statistics.median(len(xs) for _, xs, _ in scored))


def noise_line(bound: NoiseBound) -> str:
    """noise_bound in words, with what it says of the scores above it."""
    w, sds = bound.within, bound.sd.values()
    share = bound.sharp_close / bound.sharp if bound.sharp >= 1 else None  # a share of no expected cell says nothing
    lo, hi = f"{min(sds):.0%}", f"{max(sds):.0%}"
    line = (f"noise bound: runs scatter by {lo if lo == hi else f'{lo}-{hi}'} around their cell's mean (per prompt); a "
            f"prediction equal to every cell's true median would put about {bound.close:.0f} of {bound.cells} "
            f"cells within {w}")
    line += (f" and {share:.0%} of the sharp ones" if share is not None else "") + "; "
    if bound.rounds <= bound.runs_per_cell:
        return line + "this scatter lets a score show a miss of that size"
    return (line + f"a score near that is as close as this scatter allows, one well under it the model's miss (a cell's "
            f"median known to {w} at 90% needs about {bound.rounds} rounds at this scatter, "
            f"{bound.runs_per_cell:.0f} ran, or a quieter host)")


def explained_markdown(doc: SpeedResult) -> str:
    """Per prompt and fixed k: the miss (measured - predicted, means over rounds) split into step costs (the
    loop's own against the calibration's), the acceptance model and the time outside the three buckets,
    with the cell's spread and the loop's overhead and rollback shares of decoding time."""
    ks = [k for k in doc.ks if isinstance(k, int)]
    by, prompts = result_cells(doc)
    head = ["preset", "k", "miss", "spread", "step costs", "acceptance", "overhead", "outside buckets", "rollback",
            "c in loop", "trust"]
    rows = []
    for name in prompts:
        for k in ks:
            r = by[(name, k)]
            ex = r.explained
            if not ex:
                continue
            rows.append([name, str(k), f"{ex.miss:+.2f}", fmt(r.spread), f"{ex.step_costs:+.2f}",
                         f"{ex.acceptance:+.2f}", f"{ex.overhead:+.2f}", fmt(ex.outside_buckets_share, ".1%"),
                         fmt(ex.rollback_share, ".1%"), fmt(ex.loop_c), trust_cell(r.trust)])
    return markdown_table(head, rows)
