"""Adaptive k's tuning constants (`AdaptiveSettings`), apart from the controller (adaptive.py) that reads them, so
that scripts and tests can build variants without the controller's module growing."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlaygroundError


@dataclass(frozen=True)
class AdaptiveSettings:
    """`AdaptiveK`'s tuning constants (see its docstring for the rule each one enters)."""

    decay: float = 0.9
    """Forgetting per drafting iteration, in (0, 1]: counts are multiplied by it (memory ~ 1 / (1 - decay))."""
    prior: float = 0.9
    """Acceptance, in [0, 1], assumed before any observation (unless `memory` has one); probes use its best k."""
    prior_weight: float = 2.0
    """Weight of the prior in the pooled rate alpha, in observed proposals (a pseudo-count)."""
    position_weight: float = 4.0
    """Weight of alpha in each position's estimate, in observations of that position (a pseudo-count)."""
    probe_every: int = 4
    """Plain steps in a row after which a verdict of k = 0 is tested by one drafting iteration (>= 1)."""
    optimism: float = 1.0
    """Standard errors of a_1 added to every estimate when the steady choice is k = 0 (0: off)."""
    confidence: bool = True
    """Greedy, with a drafter that has probabilities (told by `drafter_stops`): when the steady choice drafts, the
    cap is k_max and the drafter stops where its sureness of its last proposal (`sureness`) says drafting on no
    longer pays (`drafting_rule`), instead of drafting the k chosen before it saw any of them."""

    def __post_init__(self):
        if not 0.0 < self.decay <= 1.0:
            raise PlaygroundError(f"decay must be in (0, 1], got {self.decay}")
        if not 0.0 <= self.prior <= 1.0:
            raise PlaygroundError(f"the prior acceptance must be in [0, 1], got {self.prior}")
        if self.probe_every < 1:
            raise PlaygroundError(f"probe_every must be >= 1, got {self.probe_every}")
        if self.optimism < 0:
            raise PlaygroundError(f"optimism must be >= 0, got {self.optimism}")


DEFAULT_SETTINGS = AdaptiveSettings()
