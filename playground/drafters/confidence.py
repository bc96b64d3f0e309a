"""What a drafter's sureness of its own proposal says of that proposal's acceptance, learnt per sureness bin from
the proposals the rule judged: the part of adaptive k's stop rule (AdaptiveK.drafting_rule) that is learnt.

A draft's probability is not its acceptance: an int8 copy of the target agrees with it on most tokens it is unsure
of (the arg-max survives where the distribution is flat), and a small draft of another family may be sure and
wrong. What a greedy target checks is whether its arg-max is the draft's, which a near-tie between the draft's first
and second choices puts in doubt, and a flat tail does not: so a proposal's sureness is its margin, 1 - (the
runner-up's probability / the proposal's), 0 at a tie, 1 when nothing else has any. Measured on the embedded pair
(AMD EPYC, 2026-12-03, the int8 draft, 770 judged proposals): the margin tells accepted from rejected proposals with
an area under the ROC curve of 0.958 against 0.923 for the probability, and under probability 0.5 0.82 against 0.64.

The first bin ends at 0.1 because that is where the rejections are (2026-12-04, k = 16 drafted in full: 0.40-0.67
accepted below a margin of 0.1, 0.88-1.00 above it): one bin for 0-0.3 let a near-tie's rejection lower the rate of
the 0.1-0.3 proposals, nearly all accepted, and the rule then stopped a sure first draft early (docs/results.md).

Each bin counts its evaluated proposals (the accepted ones and the first rejected one of an iteration) and how many
were accepted, and `accepted_given` shrinks a bin's rate with `weight` observations towards the controller's
estimate for the position, or the sureness where that is higher (its docstring says why). The counts are the
pair's and the drafter's, not the text's: they do not decay, and they carry over in the controller's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

EDGES = (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)  # the bins' lower edges after the first (which starts at 0)
TIE = EDGES[0]  # under this margin a proposal is a near-tie (the module docstring has the measurement)
BINS = len(EDGES) + 1
MEMORY_KEY = "adaptive_confidence"


def sureness(q: float, runner_up: float) -> float:
    """A proposal's sureness in [0, 1], its margin, from the drafter's probability `q` of it and `runner_up`, the
    highest it gave any other token (the module docstring says why the margin)."""
    return max(0.0, 1.0 - runner_up / q) if q > 0 else 0.0


def prior(s: float, rate: float) -> float:
    """What a proposal of sureness `s` is taken to be accepted at before its bin has counted any, where the position's
    estimate is `rate`: max(s, rate) (`ConfidenceBins.accepted_given` says why s is a floor), except at a near-tie
    (s under TIE), where it rises from a coin flip at a tie to the rate at TIE, and never above the rate. Why: when
    the draft's first two choices tie, a target that ranks them as the draft nearly does picks either; the
    measurement in the module docstring has 0.40-0.67 accepted under margin 0.05 and 0.67-0.88 at 0.05-0.1."""
    if s >= TIE:
        return max(s, rate)
    return min(rate, 0.5 + 0.5 * s / TIE)


def confidence_bin(s: float) -> int:
    return sum(s >= edge for edge in EDGES)


class ConfidenceBins:
    """Per proposal source: [reached, accepted] per bin of sureness, read from and written to `memory` (when given)."""

    def __init__(self, memory: dict | None = None):
        self.memory, self.key = memory, MEMORY_KEY
        saved = memory.get(self.key) if memory is not None else None
        self.counts: dict[str | None, list[list[float]]] = (
            {k: [list(r), list(a)] for k, (r, a) in saved.items() if len(r) == len(a) == BINS}
            if isinstance(saved, dict) else {})  # counts kept under other bins than these are not read

    def accepted_given(self, source: str | None, rates: Sequence[float], weight: float) -> Callable[[float, int], float]:
        """P(proposal i + 1 is accepted | those before it were and the drafter was s sure of it), as a function of
        (s, i): s's bin's observed rate shrunk with `weight` towards `prior(s, rates[i])` (the position's estimate,
        or the sureness where that is higher; less at a near-tie). With nothing observed in the bin, that prior.

        Why s is a floor before anything is learnt: a greedy target keeps the draft's arg-max wherever its own
        arg-max is the same, which a draft trained as the target was is more often than its sureness says (on the
        embedded pair, AMD EPYC, 2026-12-03: the int8 draft's proposals at margins 0.16 / 0.40 / 0.59 were accepted
        at 0.51 / 0.79 / 0.96; the llama.cpp drafter's at 0.90 and up in every bin). Without the floor a first call
        drafted the steady choice's 7 where the drafter was sure of 16. A draft that is sure and wrong is corrected
        as its bin counts proposals: after `weight` of them they weigh as much as the prior."""
        reached, accepted = self.counts.get(source, ([0.0] * BINS, [0.0] * BINS))
        return lambda s, i: (accepted[b := confidence_bin(s)] + prior(s, rates[i]) * weight) / (reached[b] + weight)

    def learn(self, source: str | None, sure: Sequence[float], n_evaluated: int, n_accepted: int) -> None:
        """Count one iteration: the drafter's sureness `sure` of each of its proposals, of which the first
        `n_evaluated` were judged and the first `n_accepted` accepted."""
        reached, accepted = self.counts.setdefault(source, [[0.0] * BINS, [0.0] * BINS])
        for i, s in enumerate(sure[:n_evaluated]):
            b = confidence_bin(s)
            reached[b] += 1.0
            accepted[b] += 1.0 if i < n_accepted else 0.0
        if self.memory is not None:
            self.memory[self.key] = {**(self.memory.get(self.key) or {}), source: [list(reached), list(accepted)]}
