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

from dataclasses import dataclass
from typing import Mapping

from . import cost
from .engine import K_MAX, check_k
from .errors import PlaygroundError
from .records import Iteration


@dataclass(frozen=True)
class CostCurve:
    """What the controller needs from a calibration: c and v(n) (see cost.py)."""

    c: float
    v: Mapping[int, float]
    overhead: float = 0.0  # the drafter's fixed cost per call, in target steps (paid only when k > 0)

    @classmethod
    def from_timing(cls, timing) -> "CostCurve":
        return cls(c=timing.c, v=dict(timing.v), overhead=getattr(timing, "overhead", 0.0))

    def __post_init__(self):
        if not self.c >= 0:
            raise PlaygroundError(f"the draft cost ratio c must be >= 0, got {self.c}")


class AdaptiveK:
    """k = argmax over 0..k_max of E(k) / (k*c + v(k+1) + o), per-position acceptance estimated online.

    Estimates: decayed counts of proposals evaluated and accepted, pooled over positions (one rate,
    alpha) and per position; every iteration multiplies all counts by `decay`, so about 1 / (1 - decay)
    recent iterations dominate. Each position's rate is shrunk towards the pooled alpha with the weight
    of `position_weight` observations (see `estimates`). When the model says k = 0 (drafting cannot
    pay), nothing new would ever be observed; so after `probe_every` plain steps in a row the controller
    spends one iteration on k = 1 to look again.
    """

    name = "adaptive"

    def __init__(self, curve: CostCurve, k_max: int = K_MAX, decay: float = 0.9, prior: float = 0.9,
                 prior_weight: float = 0.5, position_weight: float = 2.0, probe_every: int = 4,
                 memory: dict | None = None):
        check_k(k_max)
        if not 0.0 < decay <= 1.0:
            raise PlaygroundError(f"decay must be in (0, 1], got {decay}")
        if not 0.0 <= prior <= 1.0:
            raise PlaygroundError(f"the prior acceptance must be in [0, 1], got {prior}")
        if probe_every < 1:
            raise PlaygroundError(f"probe_every must be >= 1, got {probe_every}")
        self.curve = curve
        self.k_max = k_max
        self.decay = decay
        self.prior = prior
        self.prior_weight = prior_weight
        self.position_weight = position_weight
        self.probe_every = probe_every
        self.reached = [0.0] * k_max
        self.accepted = [0.0] * k_max
        # `memory`: a dict kept by the caller across runs on one pair and drafter (a browser tab, a lab
        # arm). The estimates start where the last run left them, as transformers' "heuristic" schedule
        # keeps its k from one generate() call to the next; the forgetting still lets a new text move them.
        self.memory = memory
        saved = memory.get("adaptive") if memory is not None else None
        if saved is not None and len(saved[0]) == k_max:
            self.reached, self.accepted = list(saved[0]), list(saved[1])
        self.plain_run = 0
        self.decisions: list[int] = []

    def alpha(self) -> float:
        """The pooled acceptance rate: accepted / evaluated proposals (decayed), shrunk towards `prior`."""
        return (sum(self.accepted) + self.prior * self.prior_weight) / (sum(self.reached) + self.prior_weight)

    def estimates(self) -> list[float]:
        """Current per-position acceptance estimates a_1..a_k_max.

        Each position's own rate, shrunk towards the pooled alpha. A deep position is reached far less
        often than the first, so its own count is small and one rejection there would, unpooled, say
        "never draft this deep" for the next ten iterations (measured: the controller then sat at k = 2-5
        on JSON where k = 16 paid most); pooled, a position departs from alpha only when its own
        observations insist. A position not reached lately drifts back to alpha as its counts decay,
        which is also what makes the controller look deeper again.
        """
        pooled, w = self.alpha(), self.position_weight
        return [(a + pooled * w) / (r + w) for r, a in zip(self.reached, self.accepted)]

    def _choice(self):
        return cost.best_k(self.estimates(), self.curve.c, self.curve.v, k_max=self.k_max, overhead=self.curve.overhead)

    def next_k(self) -> int:
        k = self._choice().k
        if k == 0 and self.plain_run >= self.probe_every:
            k = 1
        self.decisions.append(k)
        return k

    def observe(self, iteration: Iteration) -> None:
        self.plain_run = self.plain_run + 1 if not iteration.proposed else 0
        if not iteration.proposed:
            return  # a plain step (or a drafter with nothing to say) tells nothing about acceptance
        self.reached = [r * self.decay for r in self.reached]
        self.accepted = [a * self.decay for a in self.accepted]
        for i in range(iteration.evaluated):
            self.reached[i] += 1.0
            if i < iteration.n_accepted:
                self.accepted[i] += 1.0
        if self.memory is not None:
            self.memory["adaptive"] = (list(self.reached), list(self.accepted))

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

    def next_k(self) -> int:
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
    from .engine import FixedK

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


def calibrated_curve(pair, prompt_ids, proposer, repeats: int = 5, progress=None) -> CostCurve:
    """The cost curve of this pair and drafter, calibrated once (a few seconds: `lab.calibrate` with few
    repeats) and kept in `pair.resources`, so later adaptive runs on the pair reuse it."""
    from .lab import calibrate

    key = ("cost-curve", proposer.describe())
    if key not in pair.resources:
        timing = calibrate(pair, prompt_ids, proposer, n_max=K_MAX + 1, repeats=repeats, warmup=2, progress=progress)
        pair.resources[key] = CostCurve.from_timing(timing)
    return pair.resources[key]
