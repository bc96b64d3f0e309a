"""Step costs as the loop paid them, and why a prediction missed.

Every iteration record already carries its k and its drafting, verification and rollback seconds, so the run
itself is a calibration: the drafter's cost is a line in k (a fixed cost per call plus a cost per token,
least squares with standard errors), verification at k is a pass over k + 1 tokens, and the unit is the
plain step of the adjacent plain run.

Measured v(n) is noisy; a pass over more tokens cannot physically cost less unless the kernel changes,
so `fit_verify` fits a monotone (isotonic) curve and keeps a measured drop only where the samples say it is
real (Mann-Whitney U, p < 0.01), flagging it: that is the hardware, not noise.

`explain_run` splits measured - predicted into three parts that add up exactly, per run:
  step costs    the prediction with the loop's own costs instead of the calibration's
  acceptance    what the run really got per unit of drafting and verification time, against what the
                acceptance model expected at those costs
  overhead      time outside the three buckets (bookkeeping, the controller, Python) and rounding
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from scipy.optimize import isotonic_regression
from scipy.stats import linregress, mannwhitneyu

from ..core import cost
from ..drafters.adaptive import CostCurve
from ..results.calibration import VerifyFit
from ..results.speed import MissSplit, SpeedRow, SpeedRun
from ..results.trust import TrustLimits
from ..tables import median_of

SIGNIFICANT_P = 0.01


def fit_verify(samples: Mapping[int, Sequence[float]], unit_s: float) -> VerifyFit:
    """v(n) from timed passes (seconds, per n) in units of `unit_s` (a plain step)."""
    ns = sorted(n for n, xs in samples.items() if xs)
    measured = {n: statistics.median(samples[n]) / unit_s for n in ns}
    if len(ns) < 2:
        return VerifyFit(dict(measured), measured)
    drops = []
    for a, b in pairwise(ns):
        if measured[b] < measured[a] and len(samples[a]) >= 3 and len(samples[b]) >= 3:
            p = mannwhitneyu(samples[a], samples[b], alternative="greater").pvalue
            if p < SIGNIFICANT_P:
                drops.append((a, float(p)))
    if drops:  # real drops stay as measured; the stretches between them are fitted monotone
        fitted: dict[int, float] = {}
        cuts = [0] + [ns.index(a) + 1 for a, _ in drops] + [len(ns)]
        for lo, hi in pairwise(cuts):
            part = ns[lo:hi]
            ys = isotonic_regression([measured[n] for n in part], weights=[len(samples[n]) for n in part]).x
            fitted.update({n: float(y) for n, y in zip(part, ys)})
    else:
        ys = isotonic_regression([measured[n] for n in ns], weights=[len(samples[n]) for n in ns]).x
        fitted = {n: float(y) for n, y in zip(ns, ys)}
    flattened = tuple(n for n in ns if abs(fitted[n] - measured[n]) > 1e-9)
    return VerifyFit(fitted, measured, tuple(drops), flattened)


@dataclass(frozen=True)
class LoopCosts:
    """Costs fitted from iteration records, in plain steps of the adjacent plain run."""

    unit_s: float
    c: float  # the drafter's cost per proposed token
    c_se: float | None
    overhead: float  # its fixed cost per drafting call (plus rollback), per iteration that drafted
    overhead_se: float | None
    verify: VerifyFit
    iterations: int


def fit_loop(iterations: Sequence[Sequence[float]], unit_s: float) -> LoopCosts | None:
    """From compact iteration rows (k, n_accepted, n_emitted, draft_s, verify_s, rollback_s) of one or more runs.

    Only iterations that proposed something count for the drafter (k = 0 is a plain step). None when nothing
    was drafted or the unit is unknown."""
    # The proposals drafted (row[6]: fewer than k after a confidence stop, or from a drafter with fewer to give),
    # else k (rows saved without it).
    rows = [r for r in iterations if r[0] > 0 and (len(r) <= 6 or r[6] > 0)]
    if not rows or not unit_s or unit_s <= 0:
        return None
    drafted = [int(r[6]) if len(r) > 6 else int(r[0]) for r in rows]
    ks = [float(d) for d in drafted]
    draft = [(r[3] + r[5]) / unit_s for r in rows]  # a rollback is paid once per drafting iteration
    if len(set(ks)) >= 2:
        fit = linregress(ks, draft)
        c, c_se = max(0.0, float(fit.slope)), float(fit.stderr)
        overhead, overhead_se = max(0.0, float(fit.intercept)), float(fit.intercept_stderr)
    else:  # one k: only the total per call is known; put it on the tokens, as the calibration's slope would
        c, c_se, overhead, overhead_se = statistics.median(draft) / ks[0], None, 0.0, None
    by_n: dict[int, list[float]] = {}
    for r, d in zip(rows, drafted):
        by_n.setdefault(d + 1, []).append(r[4])
    return LoopCosts(unit_s, c, c_se, overhead, overhead_se, fit_verify(by_n, unit_s), len(rows))


def reached(per_position: Sequence[float | None]) -> list[float]:
    """Per-position acceptance up to the first position never reached."""
    out = []
    for a in per_position:
        if a is None:
            break
        out.append(a)
    return out


def stop_limit(run: SpeedRun) -> int | None:
    """A run's length limit if it ended on a stop token (an EOS) before it, else None: what
    cost.predicted_speedup_finite needs to walk its last iteration as the loop ran it."""
    return run.max_new_tokens if run.finished == "eos" else None


@dataclass(frozen=True)
class RunMiss:
    """One fixed-k run's miss, measured - predicted = step_costs + acceptance + overhead (see the module's doc)."""

    measured: float
    predicted: float
    step_costs: float
    acceptance: float
    overhead: float
    outside_buckets_share: float | None  # of its decode time
    rollback_share: float | None
    loop_costs: LoopCosts


def explain_run(run: SpeedRun, k: int, predicted: float) -> RunMiss | None:
    """The miss of one fixed-k run (one of lab.speed's runs, with its `iterations`), split in three parts
    that add up to measured - predicted. None without what it needs."""
    its = run.iterations
    if not its or not run.plain_new_tokens or not run.plain_decode_s or run.ratio is None:
        return None
    unit = run.plain_decode_s / run.plain_new_tokens
    fitted = fit_loop(its, unit)
    positions = [a for a in run.per_position if a is not None]
    if fitted is None or not positions:
        return None
    with_loop_costs = cost.predicted_speedup_finite(positions, k, fitted.c, fitted.verify.v, run.new_tokens,
                                                    fitted.overhead, stop_limit(run))
    in_buckets = sum(r[3] + r[4] + r[5] for r in its)
    if in_buckets <= 0:
        return None
    bucket_ratio = (run.new_tokens / in_buckets) * unit
    return RunMiss(measured=run.ratio, predicted=predicted, step_costs=with_loop_costs - predicted,
                   acceptance=bucket_ratio - with_loop_costs, overhead=run.ratio - bucket_ratio,
                   outside_buckets_share=max(0.0, 1 - in_buckets / run.decode_s) if run.decode_s else None,
                   rollback_share=sum(r[5] for r in its) / run.decode_s if run.decode_s else None,
                   loop_costs=fitted)


def explain_cell(runs: Sequence[SpeedRun], k: int, predictions: Sequence[float]) -> MissSplit | None:
    """Means over a cell's runs of each part of the miss (means, so the parts still add up to the mean miss)."""
    parts = [p for r, pred in zip(runs, predictions) if (p := explain_run(r, k, pred)) is not None]
    if not parts:
        return None
    measured = statistics.fmean(p.measured for p in parts)
    predicted = statistics.fmean(p.predicted for p in parts)
    return MissSplit(measured=measured, predicted=predicted,
                     step_costs=statistics.fmean(p.step_costs for p in parts),
                     acceptance=statistics.fmean(p.acceptance for p in parts),
                     overhead=statistics.fmean(p.overhead for p in parts), miss=measured - predicted,
                     outside_buckets_share=median_of(p.outside_buckets_share for p in parts),
                     rollback_share=median_of(p.rollback_share for p in parts), runs=len(parts),
                     loop_c=statistics.median(p.loop_costs.c for p in parts))


@dataclass(frozen=True)
class ScoredCell:
    """A fixed-k cell (a row of lab.speed's `by_prompt`) and how closely its measured median is known: the
    half-width of its 90% interval (lab.misses.known_to; None where the runs do not say)."""

    row: SpeedRow
    known: float | None = None

    def miss(self, local: bool) -> float | None:
        return self.row.miss_local if local else self.row.miss_empirical


@dataclass(frozen=True)
class PredictionScore:
    within: float
    past: float
    cells: int
    close: int  # cells within `within`
    sharp: int  # cells whose median is known to `within`
    sharp_close: int
    worst_miss: float
    worst_prompt: str | None
    worst_k: int | str
    far: int  # cells past `past`
    loose: int  # ... of them neither failed nor naming the miss


def prediction_score(cells: Sequence[ScoredCell], within: float = 0.05, past: float = TrustLimits.prediction_miss,
                     local: bool = False) -> PredictionScore | None:
    """How close a prediction came over fixed-k cells: how many missed by at most `within`; the same among the
    sharp cells, whose measured median is known to `within` (a noisier cell cannot show a miss that small, and a
    cell without `known` is not sharp); the largest miss; how many missed by more than `past` (`far`), and how
    many of those in a cell whose trust verdict neither failed nor names the miss (`loose`: none, where lab.speed
    judged the cells). `local`: score the prediction from the neighbouring runs' costs ("miss_local") instead
    of the calibration's ("miss_empirical")."""
    cells = [c for c in cells if c.miss(local) is not None]
    if not cells:
        return None
    close = lambda c: abs(c.miss(local)) <= within
    sharp = [c for c in cells if c.known is not None and c.known <= within]
    worst = max(cells, key=lambda c: abs(c.miss(local)))
    far = [c for c in cells if abs(c.miss(local)) > past]
    loose = [c for c in far if (c.row.trust is None or c.row.trust.trusted) and not _flags_miss(c.row, local)]
    return PredictionScore(within=within, past=past, cells=len(cells), close=sum(map(close, cells)),
                           sharp=len(sharp), sharp_close=sum(map(close, sharp)), worst_miss=worst.miss(local),
                           worst_prompt=worst.row.prompt, worst_k=worst.row.k, far=len(far), loose=len(loose))


def _flags_miss(row: SpeedRow, local: bool) -> bool:
    """Whether a cell's trust verdict names the miss scored (lab.trust.check_prediction)."""
    check = "prediction-miss-local" if local else "prediction-miss"
    return row.trust is not None and any(f.check == check for f in row.trust.findings)


# --- the prediction from the loop's costs at the other arms ------------------------------------------
# A calibration is timed minutes away from most runs, and a host may move the drafter and the target by different
# amounts from minute to minute (docs/results.md). The other arms of the same prompt and round ran seconds from the
# one predicted: the calibration keeps the shape (c per token against the cost per call, v(n) along n), they the level.

@dataclass(frozen=True)
class LoopScales:
    """What the neighbouring runs paid against what the calibration charges for the same iterations."""

    draft: float  # the drafting (and rollback) seconds they paid / the calibration's cost of their drafts
    verify: float  # their verification seconds / the calibration's v(drafted + 1)
    outside: float  # the median share of their decode time outside the three buckets
    iterations: int


def _unit(run: SpeedRun) -> float | None:
    tokens, seconds = run.plain_new_tokens, run.plain_decode_s
    return seconds / tokens if tokens and seconds and seconds > 0 else None


def loop_scales(neighbours: Sequence[SpeedRun], timing) -> LoopScales | None:
    """`timing`: the calibration (lab.calibration.Timing). Sums over the neighbours' drafting iterations
    (not a median of per-iteration ratios: an iteration of 1 token and one of 8 weigh as the time they took).
    None without a drafting iteration to read."""
    paid_d = cal_d = paid_v = cal_v = 0.0
    outside, count = [], 0
    curve = CostCurve.from_timing(timing)  # each proposal source at its own cost (a hybrid's lookup, its model)
    for run in neighbours:
        unit = _unit(run)
        rows = [r for r in run.iterations if r[0] > 0 and (len(r) <= 6 or r[6] > 0)]
        if unit is None or not rows:
            continue
        for r in rows:
            drafted = int(r[6]) if len(r) > 6 else int(r[0])
            c, overhead = curve.for_source(r[7] if len(r) > 7 else None)
            paid_d += (r[3] + r[5]) / unit
            cal_d += drafted * c + overhead
            paid_v += r[4] / unit
            cal_v += cost.verify_cost(curve.v, drafted + 1)
            count += 1
        buckets = sum(r[3] + r[4] + r[5] for r in run.iterations)
        if run.decode_s:
            outside.append(max(0.0, 1 - buckets / run.decode_s))
    if not count or cal_d <= 0 or cal_v <= 0:
        return None
    return LoopScales(paid_d / cal_d, paid_v / cal_v, statistics.median(outside) if outside else 0.0, count)


def predict_from_neighbours(run: SpeedRun, neighbours: Sequence[SpeedRun], timing) -> float | None:
    """A fixed-k run's speed-up predicted from its own per-position acceptance (as the empirical prediction) and
    the calibration's costs rescaled to what `neighbours` paid (`loop_scales`), less their share outside the
    buckets. The run's own timing is not read. None without what it needs."""
    positions = reached(run.per_position)
    scales = loop_scales(neighbours, timing)
    if scales is None or not positions or not isinstance(run.k, int) or not run.new_tokens:
        return None
    c, overhead = timing.mixed(run.source_iterations)
    v = {n: x * scales.verify for n, x in timing.v.items()}
    walked = cost.predicted_speedup_finite(positions, run.k, c * scales.draft, v, run.new_tokens,
                                           overhead * scales.draft, stop_limit(run))
    return walked * (1 - scales.outside)
