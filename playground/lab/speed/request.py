"""What `speed` and `sweep` are asked to measure (`SpeedRequest`): the request run.py runs and
cells.py judges the cells of."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ...core.proposal import Proposer
from ...core.sampling import GREEDY, SamplingConfig
from ...pairs.models import ModelPair
from ..calibration import Timing

# A plain run before every PLAIN_EVERY speculative runs of a prompt and after the last (speed(), `plain_every`):
# a run far from its plain run is divided by a plain speed the host has since left (2026-12-04: the spread of
# measured / predicted doubled eight runs away).
PLAIN_EVERY = 3


@dataclass(frozen=True)
class SpeedRequest:
    """What `speed` measures (and `sweep`, on its one prompt): the pair, its prompts by name, a new proposer for
    each run, the arms and rounds, and how each run decodes.

    `ks`: a fixed k, "adaptive" (needs `timing`) or "heuristic" (transformers' schedule), see adaptive.py.
    `max_new_tokens` and `timing`: one for every prompt, or one per prompt name (a longer context costs more per
    step, so per-prompt calibrations predict better; a dict is read again for the predictions made at the end).
    `memory`: what a schedule's state carries over (MEMORY_SCOPES, the --memory help says each). `plain_every`: a
    plain run before every that many speculative runs of a prompt and after the last (`bracketed`).
    `drift_warning`: how far a prompt's plain speed may move between rounds ((max - min) / median) before the
    verdict fails. `proposers`: a prompt's own factory, where its proposers differ (a trace's turn:
    lab/speed/trace.py). `constraint`: a constraints.grammar.Grammar every arm is also run constrained to, right
    after its free run (schema.py), its speculative runs with a new proposer from `constrained_proposer`."""

    pair: ModelPair
    prompts: Mapping[str, Sequence[int]]
    proposer_factory: Callable[[], Proposer]
    ks: Sequence[int | str] = (1, 2, 3, 4, 6)
    rounds: int = 3
    max_new_tokens: int | Mapping[str, int] = 64
    sampling: SamplingConfig = GREEDY
    timing: Timing | Mapping[str, Timing] | None = None
    min_confidence: float | None = None
    memory: str = "conversation"
    plain_every: int = PLAIN_EVERY
    drift_warning: float = 0.15
    proposers: Mapping[str, Callable[[], Proposer]] | None = None
    constraint: object | None = None
    constrained_proposer: Callable[[], Proposer] | None = None

    def proposer(self, name: str) -> Proposer:
        """A new proposer for a run of prompt `name`."""
        return ((self.proposers or {}).get(name) or self.proposer_factory)()

    def timing_of(self, name: str) -> Timing | None:
        return self.timing.get(name) if isinstance(self.timing, Mapping) else self.timing
