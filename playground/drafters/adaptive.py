"""Choosing k per iteration: the cost-model controller and transformers' heuristic schedule.

Both are `KController`s for `speculative_generate` (next_k before an iteration, observe after it);
the k each iteration used is in its record, so the UI and the lab can show the decisions.

`AdaptiveK` maximises expected tokens per unit of time. From the cost model (cost.py): with per-position
acceptance a_1..a_k (a_i = P(proposal i accepted | 1..i-1 accepted)), an iteration emits
E(k) = 1 + sum_j prod_{i<=j} a_i tokens for k*c + v(k+1) target steps, and a plain step (k = 0)
emits 1 token for v(1) = 1. The a_i are running estimates with exponential forgetting, so the choice
follows the text: a Thought in prose, then a JSON tool call, within one response. c and v(n) come from
a timing calibration (`lab.calibrate`) of this pair and drafter.

Written by hand (no library offers it): transformers' schedules (constant, heuristic) and
confidence thresholds look at acceptance only, never at what verification of n tokens costs, which on
a CPU is not flat (a pass over 4 tokens cost 1.45 target steps here, over 3 tokens 1.07).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..core import cost
from ..core.engine import K_MAX, FixedK, check_k
from ..errors import PlaygroundError
from ..core.records import Iteration


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
    def from_timing(cls, timing) -> "CostCurve":
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


class AdaptiveK:
    """k maximising expected tokens per unit of time, from per-position acceptance estimated online.

    Steady state: k = argmax over 0..k_max of E(k) / (k*c + v(k+1) + o). Within two iterations of the
    length limit (and at most `horizon` tokens) the choice is the k that finishes the remaining tokens
    soonest in expectation (`cost.best_k_finite`), so the last iterations do not draft past the end
    and leave a few tokens for a whole extra iteration.

    Estimates: decayed counts of proposals evaluated and accepted, pooled over positions (one rate,
    alpha) and per position; every iteration multiplies all counts by `decay`, so about 1 / (1 - decay)
    recent iterations dominate. Each position's rate is shrunk towards the pooled alpha with the weight
    of `position_weight` observations (see `estimates`). A drafter with several sources (the hybrid's
    lookup and model) gets one set of estimates and one cost per source, and the engine says which
    source the next proposal will come from.

    When the model says k = 0 (drafting cannot pay), nothing new would ever be observed; so after
    `probe_every` plain steps in a row the controller spends one iteration drafting (see `_probe_k`) to look again. A
    probe that is turned down and does not change the verdict doubles the wait (up to `probe_max`), so a drafter that
    cannot pay on this text costs little (measured: with a fixed wait of 4 the int8 draft's probes held
    prose at 0.90x plain); as soon as drafting pays again, the wait goes back to `probe_every`.
    """

    name = "adaptive"

    def __init__(self, curve: CostCurve, k_max: int = K_MAX, decay: float = 0.9, prior: float = 0.9,
                 prior_weight: float = 2.0, position_weight: float = 4.0, probe_every: int = 4,
                 probe_max: int = 32, horizon: int = 2 * (K_MAX + 1), optimism: float = 1.0,
                 growth: float = 2.0, memory: dict | None = None):
        check_k(k_max)
        if not 0.0 < decay <= 1.0:
            raise PlaygroundError(f"decay must be in (0, 1], got {decay}")
        if not 0.0 <= prior <= 1.0:
            raise PlaygroundError(f"the prior acceptance must be in [0, 1], got {prior}")
        if not 1 <= probe_every <= probe_max:
            raise PlaygroundError(f"need 1 <= probe_every <= probe_max, got {probe_every}, {probe_max}")
        if optimism < 0:
            raise PlaygroundError(f"optimism must be >= 0, got {optimism}")
        if growth < 1:
            raise PlaygroundError(f"growth must be >= 1, got {growth}")
        self.curve = curve
        self.k_max = k_max
        self.decay = decay
        self.prior = prior
        self.prior_weight = prior_weight
        self.position_weight = position_weight
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.horizon = horizon
        self.optimism = optimism
        # Decayed counts per proposal source (None: a drafter with one source): [reached, accepted].
        self.counts: dict[str | None, tuple[list[float], list[float]]] = {}
        # `memory`: a dict kept by the caller across runs on one pair and drafter (a browser tab, a lab
        # arm). The last run's acceptance per source sets this run's prior (with the prior's weight,
        # `prior_weight` observations), as transformers' "heuristic" schedule keeps its k from one
        # generate() call to the next: a drafter that was accepted throughout starts deep (a 33-token
        # JSON answer is 3-4 iterations, and starting at k = 5 cost one of them), and a new text moves the
        # estimate within a few iterations. Carried as counts instead, prose's low acceptance kept the int8
        # draft from drafting on a code edit for 46 of its 57 iterations, where drafting paid.
        self.memory = memory
        saved = memory.get("adaptive") if memory is not None else None
        self.priors: dict[str | None, float] = dict(saved) if isinstance(saved, dict) else {}
        # Depth grows by at most `growth` times the last k that drafted, plus one: the deep positions'
        # estimates are extrapolated from the shallow ones until a draft reaches them, and a draft's
        # acceptance falls with depth more than a single rate says (measured with the int8 draft: after
        # a run of accepted k = 2 the estimate asked for k = 15 on a code edit, rejected early). Not for
        # a source that costs nothing per token (lookup): there a long guess costs only its verification,
        # and the ramp cost the hybrid's code edit 7.0x -> 5.8x.
        self.growth = growth
        self.last_k: dict[str | None, int] = {}
        self._probe_ks: dict[str | None, int] = {}
        self.plain_run = 0
        self.probe_wait = probe_every
        self._probed: bool | str = False  # False, "sent" (a probe is out) or "rejected" (it was turned down)
        self.decisions: list[int] = []

    def _counts(self, source: str | None):
        if source not in self.counts:
            self.counts[source] = ([0.0] * self.k_max, [0.0] * self.k_max)
        return self.counts[source]

    def alpha(self, source: str | None = None) -> float:
        """The pooled acceptance rate: accepted / evaluated proposals (decayed), shrunk towards `prior`."""
        reached, accepted = self._counts(source)
        prior = self.priors.get(source, self.prior)
        return (sum(accepted) + prior * self.prior_weight) / (sum(reached) + self.prior_weight)

    def estimates(self, source: str | None = None) -> list[float]:
        """Current per-position acceptance estimates a_1..a_k_max (of proposals from `source`).

        Each position's own rate, shrunk towards the pooled alpha. A deep position is reached far less
        often than the first, so its own count is small and one rejection there would, unpooled, say
        "never draft this deep" for the next ten iterations (measured: the controller then sat at k = 2-5
        on JSON where k = 16 paid most); pooled, a position departs from alpha only when its own
        observations insist. A position not reached lately drifts back to alpha as its counts decay,
        which is also what makes the controller look deeper again.
        """
        pooled, w = self.alpha(source), self.position_weight
        reached, accepted = self._counts(source)
        return [(a + pooled * w) / (r + w) for r, a in zip(reached, accepted)]

    def choice(self, remaining: int | None = None, source: str | None = None) -> cost.KChoice:
        """What the cost model says now (before probing): the k and its predicted speed-up."""
        c, overhead = self.curve.for_source(source)
        estimates = self.estimates(source)
        steady = cost.best_k(estimates, c, self.curve.v, k_max=self.k_max, overhead=overhead)
        if steady.k == 0 and self.optimism > 0:
            # Optimism under uncertainty: k = 0 observes nothing, so a verdict reached on a few
            # observations would stand untested. Decide on the acceptance one standard error above the
            # estimate (of the first position, from its decayed count): a handful of rejections still
            # stops drafting, a few acceptances near break-even keep it going.
            reached = self._counts(source)[0][0] + self.prior_weight
            a1 = estimates[0]
            bonus = self.optimism * (a1 * (1.0 - a1) / reached) ** 0.5
            hopeful = [min(1.0, a + bonus) for a in estimates]
            # ... at no more than a probe's k: the hope is that drafting pays, not that it pays deep.
            steady = cost.best_k(hopeful, c, self.curve.v, k_max=self._probe_k(source), overhead=overhead)
            if steady.k > 0:
                return steady
        # Near the length limit (within two iterations of the steady choice) plan the finish instead. When
        # drafting cannot pay in the steady state it cannot near the end either, so k = 0 stands.
        if steady.k == 0 or remaining is None or remaining > min(self.horizon, 2 * (steady.k + 1)):
            return steady
        return cost.best_k_finite(estimates, c, self.curve.v, remaining, k_max=min(self.k_max, remaining - 1),
                                  overhead=overhead)

    def _probe_k(self, source: str | None) -> int:
        """The k of a probe: the one that would pay best if acceptance were the prior's. With a draft
        whose k = 1 cannot pay at any plausible acceptance (the int8 copy: c = 0.6, one proposal for
        about 1.9 steps), a k = 1 probe only costs; the k it would switch to is what needs testing."""
        if source not in self._probe_ks:  # depends on the curve and the source only
            c, overhead = self.curve.for_source(source)
            self._probe_ks[source] = max(1, cost.best_k(self.prior, c, self.curve.v, k_max=self.k_max,
                                                        overhead=overhead).k)
        return self._probe_ks[source]

    def next_k(self, remaining: int | None = None, source: str | None = None) -> int:
        k = self.choice(remaining, source).k
        if source in self.last_k and self.curve.for_source(source)[0] > 0:  # a free source (lookup) risks little
            k = min(k, int(self.growth * self.last_k[source]) + 1)
        if k > 0:
            self.probe_wait = self.probe_every
        elif self._probed == "rejected":  # the last probe was turned down and the verdict stands: wait longer
            self.probe_wait = min(2 * self.probe_wait, self.probe_max)
        self._probed = False
        if k == 0 and self.plain_run >= self.probe_wait and (remaining is None or remaining > 1):
            k, self._probed = self._probe_k(source), "sent"
            if remaining is not None:
                k = min(k, remaining - 1)
        self.decisions.append(k)
        return k

    def observe(self, iteration: Iteration) -> None:
        self.plain_run = self.plain_run + 1 if not iteration.proposed else 0
        if self._probed and iteration.n_accepted < len(iteration.proposed):
            self._probed = "rejected"
        if not iteration.proposed:
            return  # a plain step (or a drafter with nothing to say) tells nothing about acceptance
        source = iteration.sources[0] if iteration.sources else None
        self.last_k[source] = iteration.k
        reached, accepted = self._counts(source)
        for i in range(self.k_max):
            reached[i] *= self.decay
            accepted[i] *= self.decay
        for i in range(min(iteration.evaluated, self.k_max)):
            reached[i] += 1.0
            if i < iteration.n_accepted:
                accepted[i] += 1.0
        if self.memory is not None:
            self.memory["adaptive"] = {**(self.memory.get("adaptive") or {}), **{s: self.alpha(s) for s in self.counts}}

    def __repr__(self) -> str:
        return f"AdaptiveK(k_max={self.k_max}, c={self.curve.c:.3f}, decay={self.decay})"


class HeuristicK:
    """transformers' `num_assistant_tokens_schedule="heuristic"` as a controller for our loop: start at
    `start`; after an iteration whose proposals were all accepted, k += 2, else k = max(1, k - 1)
    (transformers 5.x, generation/candidate_generator.py, AssistedCandidateGenerator.update_candidate_strategy).
    Same loop, same drafter: only the schedule differs, so a comparison measures the schedule alone."""

    name = "heuristic"

    def __init__(self, start: int = 20, k_max: int = K_MAX, memory: dict | None = None):
        check_k(k_max)
        if not isinstance(start, int) or start < 1:
            raise PlaygroundError(f"the heuristic schedule starts at k >= 1, got {start!r}")
        # With `memory` (kept by the caller across runs) k carries over from the last run, as
        # transformers' "heuristic" does between generate() calls ("heuristic_transient" resets it).
        self.memory = memory
        self.k = min(memory.get("heuristic", start) if memory is not None else start, k_max)
        self.k_max = k_max

    def next_k(self, remaining: int | None = None, source: str | None = None) -> int:
        return self.k

    def observe(self, iteration: Iteration) -> None:
        if not iteration.proposed:
            return
        if iteration.n_accepted == len(iteration.proposed):
            self.k = min(self.k + 2, self.k_max)
        else:
            self.k = max(1, self.k - 1)
        if self.memory is not None:
            self.memory["heuristic"] = self.k

    def __repr__(self) -> str:
        return f"HeuristicK(k={self.k})"


def parse_k(text: str) -> int | str:
    """A k setting as users type it: an integer 1..16, 'adaptive' or 'heuristic'."""
    t = str(text).strip().lower()
    if t in ("adaptive", "heuristic"):
        return t
    try:
        k = int(t)
    except ValueError:
        raise PlaygroundError(f"k must be an integer from 1 to {K_MAX}, 'adaptive' or 'heuristic', got {text!r}") from None
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


def describe_choices(k_values) -> str:
    """How often each k was chosen ({k: iterations}, keys int or str): '2×1 16×5' (k = 0 is a plain step)."""
    return " ".join(f"{k}\u00d7{n}" for k, n in sorted(k_values.items(), key=lambda kv: int(kv[0])))
