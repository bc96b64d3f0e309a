"""Timing calibration: the step costs (c, v(n), the drafter's cost per call) the cost model needs,
measured the way the loop runs them, under the decoding (greedy or sampling) the run uses."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError

from ..core import cost
from ..core.engine import K_MAX
from ..core.sampling import GREEDY, SamplingConfig
from ..drafters.registry import DRAFT
from ..results.calibration import Spread, TimingRecord, TimingSamples, VerifyFit
from ..results.trust import Verdict
from .calibration_bench import CalibrationBench, search_seconds, time_cycles
from .common import Progress
from .fit import fit_verify
from .trust import check_calibration

R = TypeVar("R", bound=TimingRecord)


@dataclass(frozen=True)
class Timing:
    """Step costs measured in one calibration: what the cost model needs (c, v(n) and the drafter's
    fixed cost per call), and the decoding they were timed under (`sampling`, SamplingConfig.timing_label)."""

    target_step_s: float  # median target pass over 1 new token, back to back as plain decoding runs
    verify_s: dict[int, float]  # target pass over n new tokens right after a draft, n = 1..n_max (see _paired)
    draft_step_s: float  # per-token cost of the drafter (slope of propose(k) time in k; see _paired)
    context_tokens: int
    raw: TimingSamples = field(default_factory=TimingSamples)
    draft_call_s: float = 0.0  # what a propose() costs beyond k per-token steps (catching up, set-up)
    # A drafter with several proposal sources (the hybrid): the seconds per token and per call of each
    # source other than the model drafter timed above, e.g. {"lookup": (0.0, 0.0002)}.
    source_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    # The decoding timed (SamplingConfig.timing_label: "greedy", "sample T=0.7 top-p=0.9"): a sampled run does
    # the warpers, softmax and draws in every pass, so it is predicted from a calibration under its own settings.
    sampling: str = "greedy"

    @property
    def c(self) -> float:
        return self.draft_step_s / self.target_step_s

    @property
    def v(self) -> dict[int, float]:
        """v(n) to predict with: the monotone fit of the timed passes (lab.fit.fit_verify), which keeps a drop
        only where the samples show it is real; the medians as measured when no samples were kept."""
        fit = self.verify_fit
        return fit.v if fit is not None else self.v_measured

    @property
    def v_measured(self) -> dict[int, float]:
        return {n: s / self.target_step_s for n, s in self.verify_s.items()}

    @cached_property  # an isotonic fit and its tests: once per calibration, not at every read of v
    def verify_fit(self) -> VerifyFit | None:
        ratios = self.raw.pass_ratio  # paired with their repetition's plain step (see _paired)
        samples = {n: xs for n, xs in (ratios or self.raw.target_pass_s).items() if xs}
        if not samples or set(samples) != set(self.verify_s):
            return None
        return fit_verify(samples, 1.0 if ratios else self.target_step_s)

    @property
    def trust(self) -> Verdict:
        return Verdict.of(check_calibration(self))

    @property
    def overhead(self) -> float:
        """The drafter's fixed cost per iteration, in target steps."""
        return self.draft_call_s / self.target_step_s

    @property
    def source_costs(self) -> dict[str, tuple[float, float]]:
        """Per proposal source, (c, overhead) in target steps; DRAFT's is the model drafter's."""
        out = {name: (step / self.target_step_s, call / self.target_step_s) for name, (step, call) in self.source_s.items()}
        if out:
            out.setdefault(DRAFT.name, (self.c, self.overhead))
        return out

    def mixed(self, source_iterations: dict[str, int] | None) -> tuple[float, float]:
        """(c, overhead) averaged over the sources a run's proposing iterations came from."""
        costs = self.source_costs
        counts = {s: n for s, n in (source_iterations or {}).items() if s in costs and n > 0}
        if not costs or not counts:
            return self.c, self.overhead
        total = sum(counts.values())
        return (sum(costs[s][0] * n for s, n in counts.items()) / total,
                sum(costs[s][1] * n for s, n in counts.items()) / total)

    def predict(self, alpha_or_positions, k: int, new_tokens: int | None = None,
                source_iterations: dict[str, int] | None = None, limit: int | None = None) -> float:
        """Predicted speed-up over plain decoding: iid alpha or per-position acceptance (empirical). `new_tokens`: for a
        run of that length (`limit`: its limit, if it ended on a stop token before; cost.predicted_speedup_finite).
        `source_iterations` ({source: proposing iterations}): a hybrid's cost as the mix of its sources'."""
        c, overhead = self.mixed(source_iterations)
        if new_tokens is not None:
            positions = ([alpha_or_positions] if isinstance(alpha_or_positions, (int, float))
                         else alpha_or_positions)
            return cost.predicted_speedup_finite(positions, k, c, self.v, new_tokens, overhead, limit)
        if isinstance(alpha_or_positions, (int, float)):
            return cost.predicted_speedup(alpha_or_positions, k, c, self.v, overhead)
        return cost.predicted_speedup_empirical(alpha_or_positions, k, c, self.v, overhead)

    def predict_lengths(self, positions: Sequence[float], lengths: Mapping[int, int],
                        source_iterations: dict[str, int] | None = None) -> float:
        """Predicted speed-up of a drafter whose proposals vary in length, from how often it drafted each length
        (cost.predicted_speedup_lengths), a hybrid's cost the mix of its sources'."""
        c, overhead = self.mixed(source_iterations)
        return cost.predicted_speedup_lengths(lengths, positions, c, self.v, overhead)

    def record(self, kind: type[R] = TimingRecord, **extra) -> R:
        """The calibration as results hold it, with what follows from it (c, v, the fit, the verdict): a
        TimingRecord, or `kind` (a TimingResult) with its `extra` fields."""
        return kind(target_step_s=self.target_step_s, verify_s=dict(self.verify_s), draft_step_s=self.draft_step_s,
                    draft_call_s=self.draft_call_s, c=self.c, overhead=self.overhead, v=self.v,
                    v_measured=self.v_measured, verify_fit=self.verify_fit, trust=self.trust,
                    context_tokens=self.context_tokens, sampling=self.sampling, source_s=dict(self.source_s),
                    source_costs=self.source_costs, raw=self.raw, **extra)

    def to_dict(self) -> dict:
        """`record()` as JSON (what results embed where a calibration is saved)."""
        return _RECORD.dump_python(self.record(), mode="json")

    @classmethod
    def from_dict(cls, d: dict) -> Timing | None:
        """A Timing from a saved calibration's JSON (its `to_dict()`, or any with the measured fields); None if it
        does not fit."""
        try:
            return _TIMING.validate_python(d)
        except ValidationError:
            return None


_RECORD = TypeAdapter(TimingRecord)
_TIMING = TypeAdapter(Timing)


def pass_lengths(n_max: int) -> list[int]:
    """The pass lengths a calibration times: every n up to 9 (where kernels switch and v(n) can be uneven),
    then 12 and n_max (v grows smoothly there, and the cost model interpolates between them)."""
    return sorted(set(range(1, min(n_max, 9) + 1)) | ({12} if n_max > 12 else set()) | {n_max})


@dataclass(frozen=True)
class CalibrationPlan:
    """How a calibration is timed: the target's passes over up to `n_max` new tokens (at `pass_lengths(n_max)`),
    `repeats` timed cycles after `warmup` untimed ones, under `sampling` (the decoding of the run to be predicted)."""

    n_max: int = 9
    repeats: int = 12
    warmup: int = 3
    sampling: SamplingConfig = GREEDY

    def under(self, sampling: SamplingConfig) -> CalibrationPlan:
        """The same plan, timed under `sampling`."""
        return replace(self, sampling=sampling)


def calibrate(pair, prompt_ids: Sequence[int], proposer, plan: CalibrationPlan = CalibrationPlan(),
              progress: Progress = None) -> Timing:
    """Time the target over n = 1..plan.n_max new tokens after a real prompt, and the drafter per call and token,
    under `plan.sampling` (the decoding of the run to be predicted).

    The two are timed in the alternation the loop has (draft, then a target pass, then both roll back), because
    on a CPU that shares its cores between two runtimes each side runs slower right after the other than back to
    back (timed apart, predictions came out 20-30% too high). The drafter alternates between propose(1) and
    propose(4): its per-token cost is the slope, its fixed cost per call the rest. A hybrid drafter is timed by its
    sources, so that each has its own cost. Passes are timed at `pass_lengths(n_max)`; the model interpolates.

    What is timed is what a run under the plan's sampling does: the drafter begins with a RunContext of that
    sampling (its proposals include its own warpers, softmax and draws); each target pass over n tokens includes
    the distributions over its n rows, and the plain step its draw, when sampling (lab.calibration_bench).
    Greedy times the bare passes. The result is labelled with `sampling.timing_label()`."""
    # A hybrid (prompt lookup's or the suffix tree's) has a model drafter and a free source (`free_source`).
    hybrid = proposer if getattr(proposer, "free_source", None) else None
    bench = CalibrationBench(pair, prompt_ids, hybrid.model if hybrid is not None else proposer, plan.n_max,
                             plan.sampling)
    raw = time_cycles(bench, pass_lengths(plan.n_max), plan.warmup, plan.repeats, progress)
    step = statistics.median(raw.plain_step_s)
    verify, per_token, per_call = _paired(raw.pass_ratio, raw.draft_ratio, step)
    source_s = ({hybrid.free_source: (0.0, search_seconds(bench, hybrid, plan.warmup, plan.repeats))}
                if hybrid is not None else {})
    return Timing(target_step_s=step, verify_s=verify, draft_step_s=per_token, draft_call_s=per_call,
                  source_s=source_s, context_tokens=len(bench.prompt), sampling=plan.sampling.timing_label(), raw=raw)


def _paired(pass_ratio: Mapping[int, list], draft_ratio: Mapping[int, list], unit_s: float) -> tuple[dict[int, float], float, float]:
    """(verify_s, draft per token, draft per call) in seconds at the plain step `unit_s`, from timings each over the
    plain step of its own repetition: v(n) the median of those ratios, c the slope from propose(1) to propose(4).
    A host whose speed moves from second to second moves a pass and the step beside it together; medians taken
    apart mix its moments (a few slow step samples once read v(1) as 0.89, predicting every k 0.11-0.18 too high)."""
    verify = {n: statistics.median(xs) * unit_s for n, xs in pass_ratio.items()}
    per_token, per_call = _draft_costs(draft_ratio[1], draft_ratio[4])
    return verify, per_token * unit_s, per_call * unit_s


def _draft_costs(propose_1: Sequence[float], propose_4: Sequence[float]) -> tuple[float, float]:
    """(per token, per call beyond it) from timed propose(1) and propose(4) calls: the slope and the rest."""
    one, four = statistics.median(propose_1), statistics.median(propose_4)
    per_token = max(0.0, (four - one) / 3)
    return per_token, max(0.0, one - per_token)


def pooled(timings: Sequence[Timing]) -> Timing:
    """One calibration from several of the same pair, drafter, context and decoding, their samples pooled (each
    cost the median over all of them). Calibrations made between the rounds of a measurement see the machine in
    the states the rounds saw (on the 2-core VMs of docs/results.md plain decoding moves by tens of percent
    between rounds), where one made before them sees one moment. Only the lengths every calibration timed are
    kept; a hybrid's lookup cost is the median of theirs (its searches are not kept as samples)."""
    if not timings:
        raise ValueError("pooled() needs at least one calibration")
    if len({(t.context_tokens, t.sampling) for t in timings}) > 1:
        raise ValueError("pooled() takes calibrations of one context length and decoding")
    raws = [t.raw for t in timings]
    if len(timings) == 1 or not all(r.target_pass_s and r.plain_step_s and r.draft_propose_s for r in raws):
        return timings[0]
    lengths = sorted(set.intersection(*(set(r.target_pass_s) for r in raws)))
    samples = {n: [x for r in raws for x in r.target_pass_s[n]] for n in lengths}
    drafts = {k: [x for r in raws for x in r.draft_propose_s.get(k, [])] for k in (1, 4)}
    plain = [x for r in raws for x in r.plain_step_s]
    step = statistics.median(plain)
    ratios: dict[int, list[float]] = {}
    draft_ratios: dict[int, list[float]] = {}
    if all(r.pass_ratio and r.draft_ratio for r in raws):
        ratios = {n: [x for r in raws for x in r.pass_ratio[n]] for n in lengths}
        draft_ratios = {k: [x for r in raws for x in r.draft_ratio.get(k, [])] for k in (1, 4)}
        verify, per_token, per_call = _paired(ratios, draft_ratios, step)
    else:  # calibrations saved before the paired ratios: medians of the seconds, as they were predicted then
        verify = {n: statistics.median(xs) for n, xs in samples.items()}
        per_token, per_call = _draft_costs(drafts[1], drafts[4])
    sources = {name: tuple(statistics.median(t.source_s[name][i] for t in timings) for i in (0, 1))
               for name in set.intersection(*(set(t.source_s) for t in timings))}
    raw = TimingSamples(target_pass_s=samples, plain_step_s=plain, draft_propose_s=drafts, pass_ratio=ratios,
                        draft_ratio=draft_ratios, target_spread={n: Spread.of(xs) for n, xs in samples.items()},
                        pooled=len(timings))
    return Timing(target_step_s=step, verify_s=verify, draft_step_s=per_token, draft_call_s=per_call,
                  source_s=sources, context_tokens=timings[0].context_tokens, sampling=timings[0].sampling, raw=raw)


class CalibrationStore:
    """The calibrations of one loaded pair, one per drafter, context-length bucket and decoding, reused by every run.

    A step's cost depends on the model, the drafter and how long the context is, not on what the context
    says, so one calibration serves every prompt whose length falls in the same bucket (powers of two from
    64 tokens). Shared by every browser tab on the pair (the app keeps one store per loaded pair) and safe
    to share: a lock guards the table, and a Timing, once stored, is never changed (a longer calibration of
    the same bucket replaces it whole). A sampled run does more per step than a greedy one (the warpers, softmax
    and draws), so the decoding is part of the key (SamplingConfig.timing_label): a greedy calibration is never
    returned for a sampled request, nor the reverse."""

    def __init__(self):
        self._lock = threading.Lock()
        self._timings: dict[tuple[str, int, str], Timing] = {}

    @staticmethod
    def bucket(context_tokens: int) -> int:
        """The smallest power of two >= the context length, at least 64."""
        b = 64
        while b < context_tokens:
            b *= 2
        return b

    def get(self, drafter: str, context_tokens: int, n_needed: int = 1,
            sampling: SamplingConfig = GREEDY) -> Timing | None:
        """The stored calibration of this drafter, bucket and decoding if it timed passes of at least `n_needed`
        tokens."""
        with self._lock:
            t = self._timings.get((drafter, self.bucket(context_tokens), sampling.timing_label()))
        return t if t is not None and max(t.verify_s) >= n_needed else None

    def put(self, drafter: str, timing: Timing) -> None:
        """Keep `timing` under its drafter, bucket and decoding (`timing.sampling`)."""
        with self._lock:
            self._timings[(drafter, self.bucket(timing.context_tokens), timing.sampling)] = timing

    def __len__(self) -> int:
        with self._lock:
            return len(self._timings)


# The short calibration a run makes before its first prediction: passes up to K_MAX + 1 tokens (any fixed k,
# adaptive k, a sweep). Two warm-up cycles, since the first passes after the prefills run slow; four repeats keep it
# under 10 s for the embedded pair on a quiet 2-core machine (scripts/bench_calibration.py prints it).
SHORT_CALIBRATION = CalibrationPlan(n_max=K_MAX + 1, repeats=4, warmup=2)


def calibrated_timing(pair, prompt_ids, proposer, store: CalibrationStore | None = None,
                      plan: CalibrationPlan = SHORT_CALIBRATION, progress: Progress = None) -> tuple[Timing, bool]:
    """A calibration of this pair and drafter at this context length, under `plan.sampling`, reaching passes of
    `plan.n_max` tokens: the stored one when `store` holds it, else one by `plan` (kept in `store`). Returns
    (timing, reused)."""
    drafter = proposer.describe()
    found = store.get(drafter, len(prompt_ids), plan.n_max, plan.sampling) if store is not None else None
    if found is not None:
        return found, True
    timing = calibrate(pair, prompt_ids, proposer, plan, progress)
    if store is not None:
        store.put(drafter, timing)
    return timing, False
