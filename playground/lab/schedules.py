"""What a run's decisions were worth, with the host's noise taken out: schedules compared on their own iterations.

A speculative run's iterations are its decisions (the k of each) and what the text made of them (the proposals
drafted, accepted and emitted). Costed under one calibration (`CostCurve.iteration_cost`: 1 for a plain step,
drafted * c + o + v(drafted + 1) for a drafting iteration, with its source's c and o), the run's tokens over the
target steps its iterations cost is its *costed* speed-up: the ratio it would have measured on a host that ran
every step at its calibrated cost. It is exact arithmetic on the records, so it does not move between rounds
unless the decisions or the text do.

Why: a measured ratio carries the host's noise (10% between two runs that did identical work, docs/results.md),
and a schedule that beats another by less than that in one run is no finding. Two greedy schedules that chose the
same k in every iteration did the same work: their costed figures are equal, and any gap between their measured
ratios is the host's.

Compact iteration rows, as lab.speed keeps them: (k, accepted, emitted, draft_s, verify_s, rollback_s, drafted,
source); rows without the last two (results saved before they were kept) are costed as if k were drafted by the
drafter's own source.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..core.records import Iteration
from ..drafters.adaptive import CostCurve
from ..results.speed import AdaptiveVsHeuristic, ArmFigures, BestFixed, ScheduleEntry, SpeedRun
from ..tables import markdown_table, median_of

SCHEDULES = ("adaptive", "heuristic")


def iteration_rows(records) -> list[list]:
    """A run's iterations as the compact rows above (its Prefill and Step records left out)."""
    return [[it.k, it.n_accepted, len(it.emitted), it.draft_s, it.verify_s, it.rollback_s, len(it.proposed),
             it.sources[0] if it.sources else None] for it in records if isinstance(it, Iteration)]


def _drafted(row: Sequence) -> int:
    return int(row[6]) if len(row) > 6 else int(row[0])


def costed_ratio(rows: Sequence[Sequence], curve: CostCurve | None) -> float | None:
    """A run's emitted tokens over the target steps its iterations cost under `curve` (None without a curve or
    iterations)."""
    if curve is None or not rows:
        return None
    steps = sum(curve.iteration_cost(int(r[0]), _drafted(r), r[7] if len(r) > 7 else None) for r in rows)
    tokens = sum(int(r[2]) for r in rows)
    return tokens / steps if steps > 0 else None


def decisions(rows: Sequence[Sequence]) -> tuple[tuple[int, int], ...]:
    """A run's (k, drafted) per iteration: what two runs must share to have done the same work on the same text."""
    return tuple((int(r[0]), _drafted(r)) for r in rows)


def compare(runs: Sequence[SpeedRun], prompts: Sequence[str], ks: Sequence) -> list[ScheduleEntry]:
    """Per prompt, every arm's median costed and measured ratio, the best fixed k by its costed figure, and each
    schedule (adaptive, heuristic) against it; adaptive against the heuristic too, with whether the two made the
    same decisions in every round. `runs`: lab.speed's runs, each with its `costed` figure and `iterations`."""
    fixed = [k for k in ks if isinstance(k, int)]
    return [_entry([x for x in runs if x.prompt == name], name, ks, fixed) for name in prompts]


def _entry(mine: list[SpeedRun], name: str, ks: Sequence, fixed: list[int]) -> ScheduleEntry:
    arms = {k: ArmFigures(costed=median_of(x.costed for x in mine if x.k == k),
                          measured=median_of(x.ratio for x in mine if x.k == k)) for k in ks}
    entry = ScheduleEntry(prompt=name, arms={str(k): a for k, a in arms.items()})
    adaptive, heuristic = (arms.get(s) for s in SCHEDULES)
    costed_fixed = {k: arms[k].costed for k in fixed if arms[k].costed is not None}
    if costed_fixed:
        best = max(costed_fixed, key=lambda k: (costed_fixed[k], -k))
        entry.best_fixed = BestFixed(k=best, costed=costed_fixed[best], measured=arms[best].measured)
        entry.adaptive_of_best = _share(adaptive, costed_fixed[best])
        entry.heuristic_of_best = _share(heuristic, costed_fixed[best])
    if adaptive and heuristic:
        entry.adaptive_vs_heuristic = _head_to_head(mine, adaptive, heuristic)
    return entry


def _share(arm: ArmFigures | None, best: float) -> float | None:
    """A schedule's costed figure over the best fixed k's (None where it did not run or was not costed)."""
    return arm.costed / best if arm is not None and arm.costed is not None else None


def _head_to_head(mine: list[SpeedRun], a: ArmFigures, h: ArmFigures) -> AdaptiveVsHeuristic:
    rounds = sorted({x.round for x in mine})
    by_round = [(_run(mine, "adaptive", r), _run(mine, "heuristic", r)) for r in rounds]
    same = all(decisions(x.iterations if x else ()) == decisions(y.iterations if y else ()) for x, y in by_round)
    # Per round, so that a reader sees whether the rounds agree: with a memory carried from call to call a
    # schedule's walk differs between rounds, and on a short answer one proposal can decide a walk.
    per_round = [x.costed / y.costed for x, y in by_round if x and y and x.costed and y.costed]
    return AdaptiveVsHeuristic(
        costed=a.costed / h.costed if a.costed and h.costed else None,
        measured=a.measured / h.measured if a.measured and h.measured else None,
        same_decisions=same, costed_by_round=per_round,
        rounds_level_or_ahead=sum(1 for x in per_round if x >= 1.0 - 1e-9))


def _run(runs: Sequence[SpeedRun], arm, r: int) -> SpeedRun | None:
    """The run of `arm` in round `r` (None if there is none)."""
    return next((x for x in runs if x.k == arm and x.round == r), None)


def summary_line(entries: Sequence[ScheduleEntry]) -> str | None:
    """Adaptive against the heuristic and the best fixed k over a result's prompts, costed and measured."""
    entries_vs = [(e, e.adaptive_vs_heuristic) for e in entries if e.adaptive_vs_heuristic]
    costed = [(vs.costed, e.prompt) for e, vs in entries_vs if vs.costed is not None]
    if not costed:
        return None
    same = sum(1 for _, vs in entries_vs if vs.same_decisions)
    measured = [vs.measured for _, vs in entries_vs if vs.measured]
    low = min(costed)
    shown = (f"median {statistics.median(measured):.3f} ({min(measured):.3f}-{max(measured):.3f})" if measured
             else "none")
    line = (f"adaptive / heuristic, costed (their own iterations under the calibration, no host noise): median "
            f"{statistics.median(x for x, _ in costed):.3f}, lowest {low[0]:.3f} ({low[1]}); measured: {shown}; "
            f"same k in every iteration on {same} of {len(entries_vs)} prompts")
    shares = [(e.adaptive_of_best, e.prompt) for e in entries if e.adaptive_of_best is not None]
    if shares:
        lo = min(shares)
        line += (f"; adaptive / best fixed k, costed: median {statistics.median(x for x, _ in shares):.3f}, lowest "
                 f"{lo[0]:.3f} ({lo[1]})")
    return line


def schedules_rows(entries: Sequence[ScheduleEntry]) -> tuple[list[str], list[list[str]]] | None:
    """A table's head and rows, per prompt: the best fixed k by its costed figure, each schedule's costed figure
    and its share of that, and adaptive against the heuristic, costed and measured."""
    present = [s for s in SCHEDULES if any(s in e.arms for e in entries)]
    if not entries or not present:
        return None
    head = ["preset", "best fixed k, costed (measured)",
            *(f"{s}, costed (measured)" for s in present)]
    both = len(present) == 2
    head += ["adaptive / heuristic: costed, measured"] if both else []
    rows = []
    for e in entries:
        best = e.best_fixed
        row = [e.prompt, f"k={best.k}: {best.costed:.2f} ({best.measured:.2f})" if best else "-"]
        for s in present:
            a = e.arms.get(s) or ArmFigures()
            share = f", {of_best:.0%} of best" if (of_best := e.of_best(s)) is not None else ""
            row.append("-" if a.costed is None else f"{a.costed:.2f}{share} ({a.measured:.2f})")
        if both:
            row.append(_versus_cell(e.adaptive_vs_heuristic or AdaptiveVsHeuristic()))
        rows.append(row)
    return head, rows


def _versus_cell(vs: AdaptiveVsHeuristic) -> str:
    text = "-" if vs.costed is None else f"{vs.costed:.3f}, {vs.measured:.3f}"
    by_round = vs.costed_by_round
    if vs.same_decisions:
        text += " (same k every iteration)"
    elif len(by_round) > 1:  # whether the rounds agree, costed (a result saved before has no rounds)
        text += (f" (costed {min(by_round):.2f}-{max(by_round):.2f} by round; level or ahead in "
                 f"{vs.rounds_level_or_ahead} of {len(by_round)})")
    return text


def schedules_lines(entries: Sequence[ScheduleEntry]) -> list[str]:
    """The schedules table and its summary line, as the lab's text prints them (nothing without schedules)."""
    if (table := schedules_rows(entries)) is None:
        return []
    lines = ["", "schedules: costed = each run's own iterations under the calibration (no host noise), medians", "",
             markdown_table(*table)]
    return lines + ([line] if (line := summary_line(entries)) else [])
