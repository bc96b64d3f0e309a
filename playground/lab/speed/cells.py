"""A speed result's cells: each run's predictions, the medians of each k (over every prompt, and per prompt) with
their predictions and misses, and the verdicts on them (lab.speed measures the runs; this reads them)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ...drafters.adaptive import CostCurve
from ...results.speed import Drift, PlainRun, SpeedRow, SpeedRun
from ...results.trust import WARN, Finding, MachineLoad, TrustLimits, Verdict
from ...tables import median_of
from ..calibration import Timing
from ..fit import explain_cell, predict_from_neighbours, reached, stop_limit
from ..schedules import costed_ratio, decisions
from ..trust import (
    check_calibration,
    check_drift,
    check_host_level,
    check_local_prediction,
    check_prediction,
    check_rounds,
    check_sampling,
    check_spread,
    relative_spread,
)
from .request import SpeedRequest
from .schema import schema_cell


def predict_runs(request: SpeedRequest, runs: list[SpeedRun]) -> None:
    """Each run's predictions and costed figure, from the calibrations as they are now (pooled between rounds)."""
    for x in runs:
        t = request.timing_of(x.prompt)
        # The fixed-k model drafts every k; under a confidence stop it would charge drafts that never ran, so
        # such a run gets no prediction from it (its costed figure, below, counts what was drafted).
        x.predicted_empirical = run_prediction(x, t) if request.min_confidence is None else None
        x.costed = costed_ratio(x.iterations, CostCurve.from_timing(t) if t is not None else None)
        x.predicted_local = (predict_from_neighbours(x, _neighbours(runs, x), t)
                             if t is not None and request.min_confidence is None else None)


def drift_by_prompt(request: SpeedRequest, plain_runs: list[PlainRun]) -> dict[str, Drift]:
    """Per prompt: its plain speed in each round (the median of the round's plain runs) and how far it moved."""
    drift = {}
    for name in request.prompts:
        plain_speeds = [statistics.median(x.tokens_per_s for x in plain_runs if x.prompt == name and x.round == r)
                        for r in range(request.rounds)]
        moved = relative_spread(plain_speeds)  # as the verdict measures it, so the two never disagree
        drift[name] = Drift(plain_tokens_per_s=plain_speeds, spread=moved, flagged=moved > request.drift_warning)
    return drift


POOLED_FROM = 3  # prompts from which the figure over every prompt is judged by the host's level, not each prompt


def host_level(request: SpeedRequest, drift: dict[str, Drift]) -> Drift | None:
    """The plain level of the whole run in each round: the median over prompts of each prompt's plain speed
    relative to its own median. The figure over many prompts is a median over them, and each ratio divides
    adjacent runs, so what moves it is the host changing under every prompt at once, not one short prompt whose
    plain runs wobbled (an agent's trace: 16 turns of a second or two each, where any one turn moving 16% failed
    the whole run). None: fewer than POOLED_FROM prompts, where a median cannot outvote one."""
    if len(drift) < POOLED_FROM:
        return None
    levels = []
    for r in range(request.rounds):
        rel = [d.plain_tokens_per_s[r] / statistics.median(d.plain_tokens_per_s) for d in drift.values()]
        levels.append(statistics.median(rel))
    moved = relative_spread(levels)
    return Drift(plain_tokens_per_s=levels, spread=moved, flagged=moved > request.drift_warning)


def verdicts(request: SpeedRequest, drift: dict[str, Drift], host: Drift | None,
             load: MachineLoad) -> tuple[Verdict, dict[str, Verdict]]:
    """The verdict on the figures over every prompt, and each prompt's own: the rounds, the machine and the
    calibrations hold for all. A prompt whose plain speed moved fails its own figures; it fails the figures over
    every prompt too unless the run judges them by the host's level (`host`), where it only warns."""
    limits = TrustLimits(drift=request.drift_warning)
    timings = [t for name in request.prompts if (t := request.timing_of(name)) is not None]
    head = (check_rounds(request.rounds), load.findings())
    tail = (*(check_calibration(t) for t in timings),
            *(check_sampling(t, request.sampling.timing_label()) for t in timings))
    own = {name: check_drift(name, d.plain_tokens_per_s, limits, load) for name, d in drift.items()}
    pooled = (own.values() if host is None else
              (check_host_level(host.plain_tokens_per_s, len(drift), limits, load),
               [_warning(f) for fs in own.values() for f in fs]))
    return Verdict.of(*head, *pooled, *tail), {name: Verdict.of(*head, fs, *tail) for name, fs in own.items()}


def _warning(finding: Finding) -> Finding:
    return Finding(finding.check, WARN, finding.message + " (one prompt; the host's level held)", finding.fix)


def best_fixed(rows: list[SpeedRow]) -> SpeedRow:
    """The row of the fixed k with the highest median ratio (adaptive / heuristic rows are not a k to pick)."""
    fixed = [r for r in rows if isinstance(r.k, int)] or rows
    return max(fixed, key=lambda r: r.median_ratio)


def speed_row(k: int | str, runs: list[SpeedRun], timing_of: Callable[[str], Timing | None],
               prompt: str | None = None) -> SpeedRow:
    """Medians over the runs of one k (all prompts, or one): measured ratio, prediction beside it and
    how far the empirical prediction missed (measured - predicted)."""
    rows = [x for x in runs if x.ratio is not None]
    row = SpeedRow(prompt=prompt, k=k, median_ratio=statistics.median(x.ratio for x in rows),
                   min_ratio=min(x.ratio for x in rows), max_ratio=max(x.ratio for x in rows),
                   median_e2e_ratio=median_of(x.e2e_ratio for x in rows), n=len(rows),
                   alpha=median_of(x.alpha for x in rows), median_costed=median_of(x.costed for x in rows),
                   schema=schema_cell(rows))
    if isinstance(k, str):  # adaptive / heuristic: k varies by iteration; show how it was spread
        row.k_values = _choices(x.k_values for x in rows)
        row.drafted_values = _choices(x.drafted_values for x in rows)
    elif rows and timing_of(rows[0].prompt) is not None and row.alpha is not None:
        # iid: the seed chapter's steady-state formula from the median alpha. empirical: each run's
        # per-position acceptance, for a run of its length (see cost.predicted_speedup_finite), median.
        row.predicted_iid = statistics.median(timing_of(x.prompt).predict(row.alpha, k, source_iterations=
                                              x.source_iterations) for x in rows)
        row.predicted_empirical = median_of(x.predicted_empirical for x in rows)
        if row.predicted_empirical is not None:
            row.miss_empirical = row.median_ratio - row.predicted_empirical
        # the calibration's costs set to the level the other arms paid around each run (lab.fit)
        row.predicted_local = median_of(x.predicted_local for x in rows)
        if row.predicted_local is not None:
            row.miss_local = row.median_ratio - row.predicted_local
    return row


def _choices(counts) -> dict[str, int]:
    """Iterations per k (or per number drafted), summed over runs, by k."""
    spread: dict[str, int] = {}
    for by_k in counts:
        for kk, n in by_k.items():
            spread[kk] = spread.get(kk, 0) + n
    return dict(sorted(spread.items(), key=lambda kv: int(kv[0])))


def _neighbours(runs: list[SpeedRun], run: SpeedRun) -> list[SpeedRun]:
    """The other arms' runs of `run`'s prompt and round: seconds from it, on the host as it was then."""
    return [x for x in runs if x is not run and x.prompt == run.prompt and x.round == run.round]


def run_prediction(run: SpeedRun, timing: Timing | None) -> float | None:
    """The empirical prediction for one fixed-k run: its per-position acceptance, for a run of its length; for a
    drafter whose proposals vary in length (`variable_lengths`), priced by how often it drafted each length."""
    positions = reached(run.per_position)
    if timing is None or not isinstance(run.k, int) or not positions:
        return None
    lengths = variable_lengths(run.iterations)
    if lengths is not None:
        return timing.predict_lengths(positions, lengths, source_iterations=run.source_iterations)
    return timing.predict(positions, run.k, new_tokens=run.new_tokens, source_iterations=run.source_iterations,
                          limit=stop_limit(run))


def variable_lengths(rows) -> dict[int, int] | None:
    """{tokens drafted: iterations} of a run whose drafter drafted fewer than its k before the last iteration (a
    model-free drafter finding a short match or none); None for one that drafted every k it was given (a model
    drafter, whose last iteration alone may stop short, at an end of sequence), which the fixed-k walk prices."""
    drafted = decisions(rows)
    if not any(d < k for k, d in drafted[:-1]):
        return None
    lengths: dict[int, int] = {}
    for _, d in drafted:
        lengths[d] = lengths.get(d, 0) + 1
    return lengths


def _round_medians(runs: list[SpeedRun]) -> list[float]:
    """What repeats from round to round in a figure over several prompts: each round's median over its prompts.
    The prompts' own speed-ups differ (a tool call against prose: 2x against 10x on an agent's trace), which is
    no noise, so the spread of every run pooled would fail a steady measurement; one prompt: its runs."""
    by_round: dict[int, list[float]] = {}
    for x in runs:
        if x.ratio is not None:
            by_round.setdefault(x.round, []).append(x.ratio)
    if len({x.prompt for x in runs}) <= 1:
        return [r for rs in by_round.values() for r in rs]
    return [statistics.median(rs) for rs in by_round.values()]


def judge(row: SpeedRow, runs: list[SpeedRun], overall: Verdict) -> None:
    """The cell's verdict (its spread, on top of what holds for the whole experiment) and, for a fixed k,
    its miss split into step costs, acceptance model and overhead (lab.fit)."""
    label = f"k={row.k}" + (f" on {row.prompt}" if row.prompt else "")
    row.spread = (row.max_ratio - row.min_ratio) if runs else None
    ratios = _round_medians(runs)  # a prompt's own row: its runs
    missed = []
    if isinstance(row.k, int):
        paired = [(x, x.predicted_empirical) for x in runs if x.predicted_empirical is not None]
        row.explained = explain_cell([x for x, _ in paired], row.k, [p for _, p in paired]) if paired else None
        missed = [*check_prediction(label, row.miss_empirical, row.explained),
                  *check_local_prediction(label, row.miss_local)]
    row.trust = Verdict.of(overall, check_spread(label, ratios), missed)
