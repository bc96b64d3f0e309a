"""transformers' heuristic schedule as a controller for our loop (the baseline adaptive k is measured against)."""

from __future__ import annotations

from ..core.engine import K_MAX, check_k
from ..core.records import Iteration
from ..errors import PlaygroundError


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
