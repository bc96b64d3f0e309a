"""Timing calibration: the step costs (c, v(n), the drafter's cost per call) the cost model needs,
measured the way the loop runs them, under the decoding (greedy or sampling) the run uses."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..core import cost
from ..core.clock import Clock
from ..core.engine import K_MAX
from ..core.proposal import RunContext
from ..core.sampling import GREEDY, SamplingConfig, choose, probabilities
from ..core.static import target_lm
from ..drafters.adaptive import CostCurve
from .common import Progress, spread, tick
from .fit import VerifyFit, fit_verify
from .trust import Verdict, check_calibration


@dataclass(frozen=True)
class Timing:
    """Step costs measured in one calibration: what the cost model needs (c, v(n) and the drafter's
    fixed cost per call), and the decoding they were timed under (`sampling`, SamplingConfig.timing_label)."""

    target_step_s: float  # median target pass over 1 new token, back to back as plain decoding runs
    verify_s: dict[int, float]  # target pass over n new tokens right after a draft, n = 1..n_max (see _paired)
    draft_step_s: float  # per-token cost of the drafter (slope of propose(k) time in k; see _paired)
    context_tokens: int
    raw: dict = field(default_factory=dict)
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
        ratios = self.raw.get("pass_ratio")  # paired with their repetition's plain step (see _paired)
        samples = {int(n): xs for n, xs in (ratios or self.raw.get("target_pass_s") or {}).items() if xs}
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
        """Per proposal source, (c, overhead) in target steps; "draft" is the model drafter."""
        out = {name: (step / self.target_step_s, call / self.target_step_s) for name, (step, call) in self.source_s.items()}
        if out:
            out.setdefault("draft", (self.c, self.overhead))
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

    def to_dict(self) -> dict:
        return {
            "target_step_s": self.target_step_s,
            "verify_s": {str(n): s for n, s in self.verify_s.items()},
            "draft_step_s": self.draft_step_s,
            "draft_call_s": self.draft_call_s,
            "c": self.c,
            "overhead": self.overhead,
            "v": {str(n): x for n, x in self.v.items()},
            "v_measured": {str(n): x for n, x in self.v_measured.items()},
            "verify_fit": fit.to_dict() if (fit := self.verify_fit) is not None else None,
            "trust": self.trust.to_dict(),
            "context_tokens": self.context_tokens,
            "sampling": self.sampling,
            "source_s": {name: list(x) for name, x in self.source_s.items()},
            "source_costs": {name: list(x) for name, x in self.source_costs.items()},
            "raw": self.raw,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Timing | None:
        """A Timing back from its `to_dict()` form (a saved result, the sweep's JSON); None if it does not fit."""
        try:
            return cls(target_step_s=float(d["target_step_s"]),
                       verify_s={int(n): float(s) for n, s in d["verify_s"].items()},
                       draft_step_s=float(d["draft_step_s"]), context_tokens=int(d["context_tokens"]),
                       raw=dict(d.get("raw") or {}), draft_call_s=float(d.get("draft_call_s", 0.0)),
                       source_s={k: (float(a), float(b)) for k, (a, b) in (d.get("source_s") or {}).items()},
                       sampling=str(d.get("sampling") or "greedy"))  # saved before calibrations were sampled
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def pass_lengths(n_max: int) -> list[int]:
    """The pass lengths a calibration times: every n up to 9 (where kernels switch and v(n) can be uneven),
    then 12 and n_max (v grows smoothly there, and the cost model interpolates between them)."""
    return sorted(set(range(1, min(n_max, 9) + 1)) | ({12} if n_max > 12 else set()) | {n_max})


def _target_pass(lm, ids: Sequence[int], sampling: SamplingConfig) -> None:
    """A verifying pass as speculative_generate makes it: the target over the tokens, then, when sampling, the
    distributions over its rows (warpers and softmax; with top-p a sort over the vocabulary). The acceptance
    rule that follows in the loop (a few comparisons and at most one draw) is left out: it is small."""
    logits = lm.feed(ids)
    if not sampling.greedy:
        probabilities(logits, sampling)


def _plain_step(lm, ids: Sequence[int], sampling: SamplingConfig, generator) -> None:
    """A step as plain_generate makes it: the target over one token, then, when sampling, the draw (`choose`:
    the warped distribution and a multinomial). Greedy's arg-max is left out, as it always was: it is small."""
    logits = lm.feed(ids)
    if not sampling.greedy:
        choose(logits[-1], sampling, generator)


def calibrate(pair, prompt_ids: Sequence[int], proposer, n_max: int = 9, repeats: int = 12, warmup: int = 3,
              progress: Progress = None, sampling: SamplingConfig = GREEDY) -> Timing:
    """Time the target over n = 1..n_max new tokens after a real prompt, and the drafter per call and token,
    under `sampling` (the decoding of the run to be predicted).

    The two are timed in the alternation the loop has (draft, then a target pass, then both roll
    back), because on a CPU that shares its cores between two runtimes (torch's and llama.cpp's
    thread pools) each side runs slower right after the other than back to back: timing them apart
    predicted speed-ups 20-30% too high here. Every n gets the same context; the drafter alternates
    between propose(1) and propose(4), and its per-token cost is the slope, its fixed cost per call
    the rest of propose(1). A hybrid drafter is timed by its sources: its model drafter as above, its
    prompt lookup apart (a search of the context, no model), so that each source has its own cost.
    Passes are timed at the lengths of `pass_lengths(n_max)`; the cost model interpolates between them.

    What is timed is what a run under `sampling` does: the drafter begins with a RunContext of that sampling
    (its proposals include its own warpers, softmax and draws); each target pass over n tokens includes the
    distributions over its n rows, and the plain step its draw, when sampling (`_target_pass`, `_plain_step`).
    Greedy times the bare passes. The result is labelled with `sampling.timing_label()`.
    """
    clock = Clock.for_pair(pair)
    prompt = [int(t) for t in prompt_ids]
    lm = target_lm(pair, len(prompt) + n_max)  # the forward the loop runs (static and graphed on CUDA)
    lm.feed(prompt[:-1], last_only=True)
    base = len(lm)
    filler = prompt[-n_max:] if len(prompt) >= n_max else (prompt * n_max)[:n_max]
    ctx = RunContext(sampling, sampling.generator(pair.device), frozenset())
    # A hybrid (prompt lookup's or the suffix tree's) has a model drafter and a free source (`free_source`).
    hybrid = proposer if getattr(proposer, "free_source", None) else None
    if hybrid is not None:
        proposer = hybrid.model
    proposer.begin(prompt, ctx)
    lengths = pass_lengths(n_max)
    samples: dict[int, list[float]] = {n: [] for n in lengths}
    drafts: dict[int, list[float]] = {1: [], 4: []}
    plain: list[float] = []
    # The same, each divided by the plain step of its own repetition (a second or two later): see _paired.
    pass_ratio: dict[int, list[float]] = {n: [] for n in lengths}
    draft_ratio: dict[int, list[float]] = {1: [], 4: []}
    total = (warmup + repeats) * len(lengths)
    done = 0
    for rep in range(warmup + repeats):
        passes, proposals = {}, []
        for n in lengths:
            kd = 1 if (n + rep) % 2 else 4
            # Two unseen tokens, as after an iteration whose proposals were all accepted (the drafter
            # never ran its own last proposal, and the bonus token is new): what a call costs at high alpha.
            proposer.rollback(prompt[:-1])
            t0 = clock.now()
            proposer.propose(prompt, kd)
            t1 = clock.now()
            proposer.rollback(prompt)
            t2 = clock.now()
            _target_pass(lm, filler[:n], sampling)
            t3 = clock.now()
            lm.crop(base)
            passes[n] = t3 - t2
            proposals.append((kd, t1 - t0))
            done += 1
            tick(progress, done / total, f"timing the target over {n} tokens and the drafter")
        # Plain decoding's step, timed as plain decoding runs: target passes back to back, nothing in between
        # (the first of two follows the drafter and is not timed). It is the unit of the cost model (what a
        # token costs without speculation), and it is cheaper than a pass right after the drafter ran (here
        # by 5-8%), which the v(n) above include. Timed once in every repetition, beside the passes, so that
        # the unit sees the machine the passes saw: timed in one burst after them, on a shared host (an AMD
        # EPYC VM), it came out at 41.6 ms where the passes ran one-token steps at 33 ms, so v(1), a ratio to it,
        # read 0.79 (a pass is never cheaper than a step) and predictions missed by up to 0.85.
        _plain_step(lm, filler[:1], sampling, ctx.generator)
        lm.crop(base)
        t0 = clock.now()
        _plain_step(lm, filler[:1], sampling, ctx.generator)
        unit = clock.now() - t0
        lm.crop(base)
        if rep >= warmup:
            plain.append(unit)
            for n, x in passes.items():
                samples[n].append(x)
                pass_ratio[n].append(x / unit)
            for kd, x in proposals:
                drafts[kd].append(x)
                draft_ratio[kd].append(x / unit)
    step = statistics.median(plain)
    pass_ratio_raw = {str(n): xs for n, xs in pass_ratio.items()}
    draft_ratio_raw = {str(k): xs for k, xs in draft_ratio.items()}
    verify, per_token, per_call = _paired(pass_ratio_raw, draft_ratio_raw, step)
    source_s = {}
    if hybrid is not None:
        # A lookup's (or the suffix tree's) cost is its search, whatever k: one number per call (in the run it
        # is made once per iteration, for next_source, and reused by propose).
        search, searches = hybrid.searcher(prompt, ctx), []
        for _ in range(warmup + repeats):
            t0 = clock.now()
            search()
            searches.append(clock.now() - t0)
        source_s[hybrid.free_source] = (0.0, statistics.median(searches[warmup:]))
    return Timing(
        target_step_s=step,
        verify_s=verify,
        draft_step_s=per_token,
        draft_call_s=per_call,
        source_s=source_s,
        context_tokens=len(prompt),
        sampling=sampling.timing_label(),
        raw={"target_pass_s": {str(n): xs for n, xs in samples.items()}, "plain_step_s": plain,
             "draft_propose_s": {str(k): xs for k, xs in drafts.items()},
             "pass_ratio": pass_ratio_raw, "draft_ratio": draft_ratio_raw,
             "target_spread": {str(n): spread(xs) for n, xs in samples.items()}},
    )


def _paired(pass_ratio: Mapping[str, list], draft_ratio: Mapping[str, list], unit_s: float) -> tuple[dict[int, float], float, float]:
    """(verify_s, draft per token, draft per call) in seconds at the plain step `unit_s`, from timings each over the
    plain step of its own repetition: v(n) the median of those ratios, c the slope from propose(1) to propose(4).
    A host whose speed moves from second to second moves a pass and the step beside it together; medians taken
    apart mix its moments. On the AMD EPYC VM the code-edit preset's step samples ran 46-57 ms, and 71-77 ms in
    4 of 16 repetitions, so its median rose to 54 ms, v(1) read 0.89, and every k was predicted 0.11-0.18 too
    high; paired, v(1) is 0.97 and those misses 0.06-0.09 smaller (the int8 grid of 2026-12-04, recomputed)."""
    verify = {int(n): statistics.median(xs) * unit_s for n, xs in pass_ratio.items()}
    per_token, per_call = _draft_costs(draft_ratio["1"], draft_ratio["4"])
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
    if len(timings) == 1 or not all(r.get("target_pass_s") and r.get("plain_step_s") and r.get("draft_propose_s")
                                    for r in raws):
        return timings[0]
    lengths = sorted(set.intersection(*(set(r["target_pass_s"]) for r in raws)), key=int)
    samples = {n: [x for r in raws for x in r["target_pass_s"][n]] for n in lengths}
    drafts = {k: [x for r in raws for x in r["draft_propose_s"].get(k, [])] for k in ("1", "4")}
    plain = [x for r in raws for x in r["plain_step_s"]]
    step = statistics.median(plain)
    paired = all(r.get("pass_ratio") and r.get("draft_ratio") for r in raws)
    if paired:
        ratios = {n: [x for r in raws for x in r["pass_ratio"][n]] for n in lengths}
        draft_ratios = {k: [x for r in raws for x in r["draft_ratio"].get(k, [])] for k in ("1", "4")}
        verify, per_token, per_call = _paired(ratios, draft_ratios, step)
    else:  # calibrations saved before the paired ratios: medians of the seconds, as they were predicted then
        verify = {int(n): statistics.median(xs) for n, xs in samples.items()}
        per_token, per_call = _draft_costs(drafts["1"], drafts["4"])
    sources = {name: tuple(statistics.median(t.source_s[name][i] for t in timings) for i in (0, 1))
               for name in set.intersection(*(set(t.source_s) for t in timings))}
    raw = {"target_pass_s": samples, "plain_step_s": plain, "draft_propose_s": drafts, "pooled": len(timings),
           "target_spread": {n: spread(xs) for n, xs in samples.items()}}
    if paired:
        raw.update(pass_ratio=ratios, draft_ratio=draft_ratios)
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
    returned for a sampled request, nor the reverse.
    """

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


# (repeats, warm-up cycles) of the short calibration a run makes before its first prediction. Two warm-up
# cycles: with one, v(1) came out higher in four of four alternated pairs of calibrations here (by 2-39%) and c
# in three of four (the first passes after the prefills run slow). Four repeats, the median of which is the mean of the middle two, keep
# it under 10 s for the embedded pair on a quiet 2-core machine (scripts/bench_calibration.py prints it).
SHORT_CALIBRATION = (4, 2)


def calibrated_timing(pair, prompt_ids, proposer, store: CalibrationStore | None = None, n_needed: int = K_MAX + 1,
                      repeats: int = SHORT_CALIBRATION[0], warmup: int = SHORT_CALIBRATION[1],
                      progress: Progress = None, sampling: SamplingConfig = GREEDY) -> tuple[Timing, bool]:
    """A calibration of this pair and drafter at this context length, under `sampling`, reaching passes of
    `n_needed` tokens: the stored one when `store` holds it, else a short one (kept in `store`). Returns
    (timing, reused)."""
    drafter = proposer.describe()
    found = store.get(drafter, len(prompt_ids), n_needed, sampling) if store is not None else None
    if found is not None:
        return found, True
    timing = calibrate(pair, prompt_ids, proposer, n_max=n_needed, repeats=repeats, warmup=warmup, progress=progress,
                       sampling=sampling)
    if store is not None:
        store.put(drafter, timing)
    return timing, False


def calibrated_curve(pair, prompt_ids, proposer, store: CalibrationStore | None = None,
                     repeats: int = SHORT_CALIBRATION[0],
                     progress: Progress = None, sampling: SamplingConfig = GREEDY) -> CostCurve:
    """The cost curve adaptive k needs (passes up to K_MAX + 1 tokens) under `sampling`, through
    `calibrated_timing`."""
    timing, _ = calibrated_timing(pair, prompt_ids, proposer, store, K_MAX + 1, repeats=repeats, progress=progress,
                                  sampling=sampling)
    return CostCurve.from_timing(timing)
