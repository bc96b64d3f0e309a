"""What a drafter's probability of its own proposal says of that proposal's acceptance, learnt per confidence bin
from the proposals the rule judged: the part of adaptive k's stop rule (AdaptiveK.drafting_rule) that is learnt.

A draft's probability is not its acceptance: an int8 copy of the target agrees with it on most tokens it is unsure
of (the arg-max survives where the distribution is flat), and a small draft of another family may be sure and
wrong. So each bin of the drafter's probability counts its evaluated proposals (the accepted ones and the first
rejected one of an iteration) and how many were accepted, and `accepted_given` shrinks a bin's rate with `weight`
observations towards the controller's estimate for the position, or the drafter's probability where that is higher
(its docstring says why). The counts are the pair's and the drafter's,
not the text's: they do not decay, and they carry over in the controller's memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

EDGES = (0.3, 0.5, 0.7, 0.85, 0.95)  # the bins' lower edges after the first (which starts at 0)
BINS = len(EDGES) + 1
MEMORY_KEY = "adaptive_confidence"


def confidence_bin(q: float) -> int:
    return sum(q >= edge for edge in EDGES)


class ConfidenceBins:
    """Per proposal source: [reached, accepted] per bin, read from and written to `memory` (when given)."""

    def __init__(self, memory: dict | None = None):
        self.memory = memory
        saved = memory.get(MEMORY_KEY) if memory is not None else None
        self.counts: dict[str | None, list[list[float]]] = (
            {k: [list(r), list(a)] for k, (r, a) in saved.items()} if isinstance(saved, dict) else {})

    def accepted_given(self, source: str | None, rates: Sequence[float], weight: float) -> Callable[[float, int], float]:
        """P(proposal i + 1 is accepted | those before it were and the drafter gave it probability q), as a function
        of (q, i): q's bin's observed rate shrunk with `weight` towards max(q, rates[i]) (the position's estimate,
        or the drafter's own probability where that is higher). With nothing observed in the bin, that prior.

        Why q is a floor before anything is learnt: a greedy target keeps the draft's arg-max wherever its own
        arg-max is the same, which a draft trained as the target was is more often than its probability says.
        Measured on the embedded pair (AMD EPYC, 2026-12-03, every preset, k = 8, 64 new tokens, proposals judged
        per bin 0-0.3 / 0.3-0.5 / 0.5-0.7 / 0.7-0.85 / 0.85-0.95 / 0.95+): acceptance 0.63 / 0.83 / 0.95 / 1.00 /
        1.00 / 1.00 at mean probabilities 0.19 / 0.40 / 0.62 / 0.78 / 0.91 / 0.99 for the int8 draft, 0.90 and 1.00
        in every other bin for the llama.cpp drafter. Without it a first call drafted the steady choice's 7 where
        the drafter was sure of 16 (replayed code edit and tool call: an iteration more than transformers'
        heuristic, which starts at its deepest k). A draft that is sure and wrong (not seen here) is corrected as its
        bin counts proposals: after `weight` of them they weigh as much as the prior."""
        reached, accepted = self.counts.get(source, ([0.0] * BINS, [0.0] * BINS))
        return lambda q, i: (accepted[b := confidence_bin(q)] + max(q, rates[i]) * weight) / (reached[b] + weight)

    def learn(self, source: str | None, qs: Sequence[float], n_evaluated: int, n_accepted: int) -> None:
        """Count one iteration: the drafter's probabilities `qs` of its proposals, of which the first `n_evaluated`
        were judged and the first `n_accepted` accepted."""
        reached, accepted = self.counts.setdefault(source, [[0.0] * BINS, [0.0] * BINS])
        for i, q in enumerate(qs[:n_evaluated]):
            b = confidence_bin(q)
            reached[b] += 1.0
            accepted[b] += 1.0 if i < n_accepted else 0.0
        if self.memory is not None:
            self.memory[MEMORY_KEY] = {**(self.memory.get(MEMORY_KEY) or {}), source: [list(reached), list(accepted)]}
