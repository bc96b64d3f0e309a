"""Choosing k per iteration: the cost-model controller (and, from heuristic.py, transformers' heuristic schedule).

Both are `KController`s for `speculative_generate`: `next_k(remaining, source)` before an iteration,
`observe(iteration)` after it. The k each iteration used is in its record, so the UI and the lab can
show the decisions.

`AdaptiveK` chooses the k in 0..k_max that maximises expected tokens per unit of time under the cost model
(core/cost.py: E(k) tokens for k*c + v(k+1) + o target steps; a plain step, k = 0, is 1 token for 1 step), with
c, v and o from a timing calibration of the pair and drafter (`lab.calibrate`, read through `CostCurve`) and the
per-position acceptance estimated online with exponential forgetting, so k follows the text as it changes within
one response (prose, then a JSON tool call). `AdaptiveSettings` (settings.py) holds its tuning constants.
Schedules that look at acceptance only (transformers' constant and heuristic schedules, confidence thresholds)
cannot account for v(n): when a pass over more tokens costs more, the best k is smaller than acceptance alone
suggests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core import cost
from ..core.engine import K_MAX, FixedK, check_k
from ..core.records import Iteration
from ..errors import PlaygroundError
from .confidence import ConfidenceBins, sureness
from .heuristic import HeuristicK
from .settings import DEFAULT_SETTINGS, AdaptiveSettings


@dataclass(frozen=True)
class CostCurve:
    """What the controller needs from a calibration: c and v(n) (see cost.py), and per proposal source
    its own drafting cost where a drafter has several (the hybrid: prompt lookup costs almost nothing,
    its model drafter c per token)."""

    c: float
    v: Mapping[int, float]
    overhead: float = 0.0  # the drafter's fixed cost per call, in target steps (paid only when k > 0)
    sources: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # source -> (c, overhead)

    @classmethod
    def from_timing(cls, timing) -> CostCurve:
        return cls(c=timing.c, v=dict(timing.v), overhead=getattr(timing, "overhead", 0.0),
                   sources=dict(getattr(timing, "source_costs", {}) or {}))

    def __post_init__(self):
        if not self.c >= 0:
            raise PlaygroundError(f"the draft cost ratio c must be >= 0, got {self.c}")
        for name, (c, o) in self.sources.items():
            if not (c >= 0 and o >= 0):
                raise PlaygroundError(f"the {name} source's costs must be >= 0, got c={c}, overhead={o}")

    def for_source(self, source: str | None) -> tuple[float, float]:
        """(c, overhead) of a proposal from `source`; the drafter's own when it has no separate figure."""
        return self.sources.get(source, (self.c, self.overhead)) if source is not None else (self.c, self.overhead)

    def iteration_cost(self, k: int, drafted: int, source: str | None = None) -> float:
        """An iteration's cost in plain target steps: 1 for a plain step (k = 0), else the source's c per proposal
        drafted, its cost per call and a target pass over drafted + 1 tokens (playground.core.cost)."""
        if k == 0:
            return 1.0
        c, overhead = self.for_source(source)
        return cost.iteration_cost(drafted, c, self.v, overhead)


class AdaptiveK:
    """k maximising expected tokens per unit of time, from per-position acceptance estimated online.

    Estimates, per proposal source (None for a drafter with one): decayed counts reached_i and accepted_i of
    position i's evaluated and accepted proposals, multiplied by `decay` after every drafting iteration (plain
    steps leave them). The pooled rate alpha is their sum shrunk towards the prior p with weight w_p =
    `prior_weight`; each a_i is its position's rate shrunk towards alpha with weight `position_weight`
    (`estimates`). alpha is not taken at its point estimate but as a Beta posterior, and expected tokens are
    averaged over it (`cost.expected_rates_beta`): a first call drafts deep when the prior is high, and a rate
    resting on few observations is not bet on as if on many.
    Rules, with c, o the source's costs from the `CostCurve` (`_choose`, then `next_k`); each earns its place
    in a replay with and without it (docs/results.md, "What each rule of adaptive k is worth"):
      1. steady: k* = argmax over 0..k_max of E(k) / (k c + v(k+1) + o), ties to the smaller k;
      2. optimism: when k* = 0, add `optimism` standard errors of a_1 to every a_i and search 0..probe k;
      3. probing: after `probe_every` plain steps in a row, one iteration at the probe k (the best k at the prior);
      4. stop rule (`confidence`; greedy, a drafter that reports its probabilities, told by `drafter_stops`):
         where rule 1 drafts, the cap opens to k_max and `drafting_rule` stops the drafter once drafting on no
         longer pays, reading each proposal's margin over its runner-up as confidence.py has learnt it.
    Memory: a dict the caller keeps across runs on one pair and drafter (a browser tab, a lab arm): per source
    alpha (the next controller's prior, weighing w_p in the mean) and the decayed count it rests on
    ("adaptive_evidence": the next posterior is that narrow, never wider than w_p's), and the confidence bins."""

    name = "adaptive"

    def __init__(self, curve: CostCurve, k_max: int = K_MAX, settings: AdaptiveSettings = DEFAULT_SETTINGS,
                 memory: dict | None = None):
        check_k(k_max)
        self.curve = curve
        self.k_max = k_max
        self.settings = settings
        # Decayed counts per proposal source (None: a drafter with one source): [reached, accepted].
        self.counts: dict[str | None, tuple[list[float], list[float]]] = {}
        self.memory = memory
        saved = memory.get("adaptive") if memory is not None else None
        self.priors: dict[str | None, float] = dict(saved) if isinstance(saved, dict) else {}  # source -> p
        # source -> what a remembered prior rests on (the last run's decayed count of evaluated proposals)
        seen = memory.get("adaptive_evidence") if memory is not None else None
        self.evidence: dict[str | None, float] = dict(seen) if isinstance(seen, dict) else {}
        self._probe_ks: dict[str | None, int] = {}
        self.plain_run = 0  # plain steps in a row
        self.decisions: list[int] = []
        self.stops = False  # whether the drafter stops on its confidence (drafter_stops); the rule needs it
        self._rule: tuple | None = None  # (source, rate, estimates) while this iteration's rule holds
        self._qs: list[float] = []  # the drafter's sureness of this iteration's proposals (the rule's)
        self.by_confidence = ConfidenceBins(memory)  # what the drafter's sureness means

    def drafter_stops(self, can: bool) -> None:
        """Told by the loop before a run: whether the drafter calls the context's `confident` after each proposal
        (a model drafter, greedy decoding), so that `drafting_rule` can stop it."""
        self.stops = bool(can)

    def drafting_rule(self, source: str | None = None):
        """For the iteration `next_k` just opened to k_max: a function of the drafter's probability of each
        proposal and of its runner-up, True while drafting on pays (`cost.drafts_on`). The chance that the proposals
        so far are all accepted is the product of what their sureness says of acceptance (`confidence.sureness`,
        `ConfidenceBins.accepted_given`, learnt); the positions after them, not drafted yet, take the pooled rate,
        and a target step is worth the steady choice's speed-up. None when this iteration has no rule.

        Why the pooled rate, not each position's estimate: a model drafter's acceptance (the proposals before it
        accepted) depends on the token, which its sureness tells, not on the position (2026-12-03, k = 16 replayed
        over every preset: no trend over positions 1-16 for either model drafter), and one rejection deep in an
        iteration took that position's estimate down enough to stop a sure drafter there."""
        if self._rule is None or self._rule[0] != source:
            return None
        (_, rate, rates), c, v, k_max = self._rule, self.curve.for_source(source)[0], self.curve.v, self.k_max
        accept = self.by_confidence.accepted_given(source, rates, self.settings.position_weight)
        ahead = self.estimates(source, positions=False)
        qs, reached = self._qs, 1.0
        qs.clear()

        def go_on(q: float, runner_up: float) -> bool:
            nonlocal reached
            qs.append(s := sureness(q, runner_up))
            reached *= accept(s, len(qs) - 1)
            j = len(qs)
            return j < k_max and cost.drafts_on(reached, ahead[j:], j, c, v, rate)

        return go_on

    def _counts(self, source: str | None):
        if source not in self.counts:
            self.counts[source] = ([0.0] * self.k_max, [0.0] * self.k_max)
        return self.counts[source]

    def alpha(self, source: str | None = None) -> float:
        """The pooled acceptance rate: accepted / evaluated proposals (decayed), shrunk towards the prior."""
        reached, accepted = self._counts(source)
        prior, weight = self.priors.get(source, self.settings.prior), self.settings.prior_weight
        return (sum(accepted) + prior * weight) / (sum(reached) + weight)

    def estimates(self, source: str | None = None, positions: bool = True) -> list[float]:
        """Current per-position acceptance estimates a_1..a_k_max (of proposals from `source`); with `positions`
        False each position's own counts are left out (every a_i from alpha alone, as `drafting_rule` looks ahead).

        Each position's own rate, shrunk towards the pooled alpha. A position is evaluated only when all
        before it were accepted, so a deep position's count is small; shrunk, one rejection at a position
        not reached before gives a_i = alpha * w / (w + 1) (w = `position_weight`), not 0, and a_i departs
        from alpha only as its own observations accumulate. A position not reached lately drifts back to
        alpha as its counts decay, which lets the controller draft deeper again. alpha is uncertain (the class
        docstring): the a_i returned are conditional rates whose running products are the expected products over
        it, a_1 unchanged."""
        s = self.settings
        pooled, w = self.alpha(source), s.position_weight
        reached, accepted = self._counts(source)
        # The rate's posterior: mean alpha; its concentration the observations plus what the prior rests on
        # (w_p for the default prior, the last run's own count for a remembered one, at least w_p).
        concentration = sum(reached) + max(s.prior_weight, self.evidence.get(source, 0.0))
        if not positions:
            reached = accepted = [0.0] * self.k_max
        return cost.expected_rates_beta([a / (r + w) for r, a in zip(reached, accepted)],
                                        [w / (r + w) for r in reached],
                                        pooled * concentration, (1.0 - pooled) * concentration)

    def choice(self, source: str | None = None) -> cost.KChoice:
        """What the cost model says now (rules 1-2, before probing): the k and its predicted speed-up."""
        return self._choose(source)[0]

    def _choose(self, source: str | None) -> tuple[cost.KChoice, list[float]]:
        """`choice` and the estimates it chose on: what next_k needs."""
        s = self.settings
        c, overhead = self.curve.for_source(source)
        estimates = self.estimates(source)
        steady = cost.best_k(estimates, c, self.curve.v, k_max=self.k_max, overhead=overhead)
        if steady.k == 0 and s.optimism > 0:
            # Optimism under uncertainty: decide on the acceptance `optimism` standard errors above the
            # estimate (of the first position, from its decayed count plus the prior's weight). The
            # error shrinks as observations accumulate, so many rejections still give k = 0, and a
            # verdict near break-even reached on a few observations is tested by drafting.
            reached = self._counts(source)[0][0] + s.prior_weight
            a1 = estimates[0]
            bonus = s.optimism * (a1 * (1.0 - a1) / reached) ** 0.5
            hopeful = [min(1.0, a + bonus) for a in estimates]
            # ... at no more than a probe's k: the hope is that drafting pays, not that it pays deep.
            steady = cost.best_k(hopeful, c, self.curve.v, k_max=self._probe_k(source), overhead=overhead)
        return steady, estimates

    def _probe_k(self, source: str | None) -> int:
        """The k of a probe: the best k at acceptance `prior` (at least 1). A probe tests the k the
        controller would switch to; with a costly draft k = 1 may not pay at any acceptance, and a
        k = 1 probe would then only cost."""
        if source not in self._probe_ks:  # depends on the curve and the source only
            c, overhead = self.curve.for_source(source)
            self._probe_ks[source] = max(1, cost.best_k(self.settings.prior, c, self.curve.v, k_max=self.k_max,
                                                        overhead=overhead).k)
        return self._probe_ks[source]

    def next_k(self, remaining: int | None = None, source: str | None = None) -> int:
        s = self.settings
        choice, estimates = self._choose(source)
        k, self._rule = choice.k, None
        if s.confidence and self.stops and k > 0 and self.curve.for_source(source)[0] > 0:
            # rule 4: open to k_max and let the drafter's confidence stop it (drafting_rule)
            self._rule = (source, choice.speedup, estimates)
            k = self.k_max
        if k == 0 and self.plain_run >= s.probe_every:  # rule 3
            k = self._probe_k(source)
        if remaining is not None:
            k = max(0, min(k, remaining - 1))
        self.decisions.append(k)
        return k

    def observe(self, iteration: Iteration) -> None:
        self.plain_run = self.plain_run + 1 if not iteration.proposed else 0
        if not iteration.proposed:
            return  # a plain step (or a drafter with nothing to say) tells nothing about acceptance
        source = iteration.sources[0] if iteration.sources else None
        if self._rule is not None and self._rule[0] == source and self._qs:
            self.by_confidence.learn(source, self._qs, iteration.evaluated, iteration.n_accepted)
        reached, accepted = self._counts(source)
        decay = self.settings.decay
        for i in range(self.k_max):
            reached[i] *= decay
            accepted[i] *= decay
        for i in range(min(iteration.evaluated, self.k_max)):
            reached[i] += 1.0
            if i < iteration.n_accepted:
                accepted[i] += 1.0
        if self.memory is not None:
            self.memory["adaptive"] = {**(self.memory.get("adaptive") or {}), **{s: self.alpha(s) for s in self.counts}}
            self.memory["adaptive_evidence"] = {**(self.memory.get("adaptive_evidence") or {}),
                                                **{s: sum(c[0]) for s, c in self.counts.items()}}

    def __repr__(self) -> str:
        return f"AdaptiveK(k_max={self.k_max}, c={self.curve.c:.3f}, decay={self.settings.decay})"


def parse_k(text: str) -> int | str:
    """A k setting as users type it: an integer 1..16, 'adaptive' or 'heuristic'."""
    t = str(text).strip().lower()
    if t in ("adaptive", "heuristic"):
        return t
    try:
        k = int(t)
    except ValueError:
        raise PlaygroundError(
            f"k must be an integer from 1 to {K_MAX}, 'adaptive' or 'heuristic', got {text!r}") from None
    return check_k(k)


def make_controller(setting: int | str, curve: CostCurve | None = None, k_max: int = K_MAX,
                    memory: dict | None = None):
    """An int gives FixedK; 'adaptive' needs the pair's cost curve; 'heuristic' starts where
    transformers does (20), capped at the loop's K_MAX (16)."""
    if isinstance(setting, int) and not isinstance(setting, bool):
        return FixedK(check_k(setting))
    if setting == "adaptive":
        if curve is None:
            raise PlaygroundError("adaptive k needs a timing calibration of this pair and drafter (c and v(n))")
        return AdaptiveK(curve, k_max=k_max, memory=memory)
    if setting == "heuristic":
        return HeuristicK(memory=memory)
    raise PlaygroundError(f"unknown k setting {setting!r}; give an integer 1..{K_MAX}, 'adaptive' or 'heuristic'")
