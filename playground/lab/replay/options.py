"""What a replay is asked to do (`ReplayOptions`, checked against the pair by `resolved`) and what its turns share
as they are walked in order (`TraceMemory`). playground.lab.replay's docstring says what each option changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ...core.engine import K_MAX, check_min_confidence
from ...core.sampling import GREEDY, SamplingConfig
from ...drafters import registry
from ...drafters.conversation import Conversation
from ...drafters.registry import make_proposer
from ...errors import PlaygroundError
from ...limits import Limits

FEEDINGS = ("auto", "live", "shared")
RECORDS = ("full", "compact", "none")


@dataclass(frozen=True)
class ReplayOptions:
    """drafters: default `available_drafters(pair)`. timing_of(drafter, prompt_ids) -> Timing or None: the
    calibration that turns iterations into predicted speed-ups (and that adaptive k needs). feeding: auto, live or
    shared (live is exact for every drafter and costs a drafter run per walk). records: "full" (every simulated
    Iteration), "compact" ([k, drafted, accepted, emitted, source] rows) or "none". errors: the trace file's bad
    lines (inputs.traces.TraceError), carried into the result. Sampling replays fixed k only (controllers are
    greedy-only). min_confidence: the draft confidence stop replayed (greedy only; model drafters are then fed
    live)."""

    drafters: Sequence[str] | None = None
    ks: Sequence[int] = range(1, K_MAX + 1)
    controllers: Sequence[str] = ("adaptive", "heuristic")
    timing_of: Callable | None = None
    sampling: SamplingConfig = GREEDY
    feeding: str = "auto"
    max_ngram: int = 3
    limits: Limits = field(default_factory=Limits)
    records: str = "full"
    errors: Sequence = ()
    min_confidence: float | None = None

    def resolved(self, pair) -> ReplayOptions:
        """These options checked against the pair, before any work: the drafters named (every one this pair can
        run by default), k as ints, the controllers a sampling replay drops. A PlaygroundError says what is wrong."""
        drafters = list(self.drafters) if self.drafters is not None else [
            d for d in registry.available_drafters(pair) if not registry.drafter_spec(d).schema]  # no schema here
        ks = [int(k) for k in self.ks]
        if not ks or any(not 1 <= k <= K_MAX for k in ks):
            raise PlaygroundError(f"k must be from 1 to {K_MAX}, got {ks}")
        unknown = [d for d in drafters if d not in registry.names()]
        if unknown:
            raise PlaygroundError(f"unknown drafter {unknown[0]!r}; choose from {', '.join(registry.names())}")
        for d in drafters:
            make_proposer(pair, d, max_ngram=self.max_ngram)  # refuses a drafter this pair cannot run
        if self.feeding not in FEEDINGS:
            raise PlaygroundError(f"feeding must be one of {', '.join(FEEDINGS)}, got {self.feeding!r}")
        if self.records not in RECORDS:
            raise PlaygroundError(f"records must be full, compact or none, got {self.records!r}")
        check_confidence(self.min_confidence, self.sampling, self.feeding)
        return dataclasses.replace(self, drafters=drafters, ks=ks,
                                   controllers=list(self.controllers) if self.sampling.greedy else [])


class TimingIndex:
    """The distinct calibrations a drafter's turns used, each stored once."""

    def __init__(self):
        self.items: list = []

    def index(self, timing) -> int | None:
        if timing is None:
            return None
        for i, t in enumerate(self.items):
            if t is timing:
                return i
        self.items.append(timing)
        return len(self.items) - 1


@dataclass
class TraceMemory:
    """What the turns of one replay share, walked in the file's order: each arm's `Conversation` (per drafter and
    arm: its drafter's memory of the whole trace, suffix.py, and its controller's state per conversation of
    the trace), and each drafter's calibrations."""

    arms: dict[tuple[str, str], Conversation] = field(default_factory=dict)
    timings: dict[str, TimingIndex] = field(default_factory=dict)

    def arm(self, drafter: str, label: str) -> Conversation:
        """The conversation of `drafter`'s `label` arm (k or controller) over the whole trace."""
        if (drafter, label) not in self.arms:
            self.arms[drafter, label] = Conversation()
        return self.arms[drafter, label]

    def timing_index(self, drafter: str, timing) -> int | None:
        return self.timings.setdefault(drafter, TimingIndex()).index(timing)


def check_confidence(min_confidence, sampling: SamplingConfig, feeding: str) -> None:
    """What a replay with a draft confidence stop needs (the engine's check of the threshold, greedy, live feeding)."""
    if check_min_confidence(min_confidence) is None:
        return
    if not sampling.greedy:
        raise PlaygroundError("a confidence stop is replayed for greedy decoding only (a sampling replay runs in "
                              "expectation and has no drafter run to stop)")
    if feeding == "shared":
        raise PlaygroundError("a confidence stop needs live feeding: one shared pass has no drafter probabilities "
                              "after the drafter's own proposals; use --feeding auto or live")
