"""The replay experiment's result (playground.lab.replay): per recorded turn and drafter, the walk of every k and
controller over the recorded text, and those walks pooled per output shape into a summary with a recommended k.

A greedy replay walks each arm (`SimulatedWalk`, its iterations as the engine records them); a sampling replay
walks it in expectation (`ExpectedWalk`); adaptive k without a calibration is not walked (`SkippedWalk`). Field
names are the keys of the saved file; a key shown only where it has a value (`OMITTED`) stays out of the file
otherwise, as it did before results were typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field

from ..core.records import Iteration
from .base import Json, Result
from .environment import Environment

OMITTED = Field(exclude_if=lambda v: v is None)
"""A field's key is written only where it has a value (records "none", a greedy turn that is exact...)."""

ShapeCost = tuple[int, float | None]
"""Per output shape of a walk: its tokens, and the cost they carried in target steps (None without a calibration)."""

CompactIteration = tuple[int, int, int, int, str | None]
"""An iteration as `--records compact` keeps it: k, proposals drafted, accepted, tokens emitted, source."""


def arm_label(arm: int | str) -> str:
    """A walk's name: "k=3" for a fixed k, the controller's name otherwise."""
    return f"k={arm}" if isinstance(arm, int) else str(arm)


@dataclass(frozen=True)
class SimulatedIteration(Iteration):
    """A walk's iteration as the engine records it (its timings 0), and what a live drafter drafts there."""

    type: str = "Iteration"
    drafted: int = 0
    simulated: bool = True


@dataclass
class SimulatedWalk:
    """One greedy arm over one turn: the engine's loop with teacher-forced passes for the verification."""

    arm: str
    iterations: int
    new_tokens: int
    tokens_per_pass: float
    alpha: float | None
    per_position: list[float | None]
    histogram: dict[str, int]  # accepted length -> iterations
    k_values: dict[str, int]  # k -> iterations
    source_iterations: dict[str, int]
    k_sequence: list[int]
    drafted: int
    finished: str | None
    cost: float | None  # target steps, from the calibration
    predicted_speedup: float | None
    shapes: dict[str, ShapeCost]
    records: Annotated[list[SimulatedIteration] | list[CompactIteration] | None, OMITTED] = None


@dataclass
class ExpectedWalk:
    """One fixed k over one turn of a sampling replay, in expectation (figures are expected values)."""

    arm: str
    new_tokens: int
    expected: bool
    iterations: float
    histogram: dict[str, float]
    per_position: list[float | None]
    cost: float | None
    predicted_speedup: float | None
    shapes: dict[str, ShapeCost]


@dataclass
class SkippedWalk:
    arm: str
    skipped: str  # why


@dataclass
class ConstrainedWalk:
    """One arm of a schema+ drafter over a turn that carries a schema: the constrained run replayed (it ends where
    the grammar is complete, with no pass for the end-of-sequence token). forced: kept tokens the schema forced;
    predicted_speedup: over constrained plain decoding, one target step per token (mask costs left out)."""

    arm: str
    drafter: str
    iterations: int
    new_tokens: int
    tokens_per_pass: float
    forced: int
    finished: str | None
    cost: float | None
    predicted_speedup: float | None


@dataclass
class WalkedDrafter:
    """One drafter on one turn of a greedy replay. timing: its calibration's index in the result's `timings`;
    feeding: where a model drafter's proposals came from ("live" or "shared pass"; None for a model-free one);
    agreement: per position, 1 where the drafter's one-token proposal was the target's arg-max;
    chunking_differs: per arm, positions where the live-fed drafter proposed other than the shared pass."""

    timing: int | None
    exact: bool
    feeding: str | None
    agreement: list[int] | None
    walks: dict[str, SimulatedWalk | SkippedWalk]
    chunking_differs: dict[str, list[int]]
    estimate_reason: Annotated[str | None, OMITTED] = None
    constrained: Annotated[dict[str, ConstrainedWalk | SkippedWalk] | None, OMITTED] = None  # per arm


@dataclass
class ExpectedDrafter:
    """One drafter on one turn of a sampling replay; agreement: the expected acceptance sum min(p, q) per position."""

    timing: int | None
    exact: bool
    agreement: list[float] | None
    walks: dict[str, ExpectedWalk]


@dataclass
class Mismatch:
    """A position where the target's teacher-forced arg-max is not the recorded token."""

    position: int
    recorded: int
    target: int
    logit_gap: float
    dtype_spacing: float
    near_tie: bool


@dataclass
class TurnShapes:
    runs: list[tuple[int, int, str]]  # (start, end, shape), token offsets in the completion, end exclusive
    tokens: dict[str, int]  # shape -> its tokens


@dataclass
class SchemaWorth:
    """What a turn's schema forces of its recorded output (lab.replay.schema): of its `tokens` (the output the
    grammar holds, its end-of-sequence token aside), the `forced` ones, walked as the schema+ drafters propose them;
    per shape [tokens, forced]. note: why there is no share (the recording leaves the schema, or the schema cannot
    be compiled). The constrained walks are exact where `exact` is."""

    tokens: int
    forced: int
    forced_share: float | None
    shapes: dict[str, list[int]]
    note: str | None = None
    exact: bool | None = None  # greedy replays: the recording is the masked target's greedy output


@dataclass
class ReplayedTurn:
    name: str
    origin: str
    conversation: str
    kind: str | None
    prompt_tokens: int
    completion_tokens: int
    max_new_tokens: int
    exact: bool
    estimate_reason: str | None
    mismatches: int
    first_mismatches: list[Mismatch]
    shapes: TurnShapes
    drafters: dict[str, WalkedDrafter | ExpectedDrafter]
    schema: Annotated[str | None, OMITTED] = None  # the name of the schema its whole output is held to
    schema_worth: Annotated[SchemaWorth | None, OMITTED] = None


@dataclass
class LineError:
    """A trace file's line (or one turn of it) that could not be read."""

    line: int
    field: str
    message: str

    @property
    def where(self) -> str:
        return f"line {self.line}"


@dataclass
class TurnError:
    """A turn that was read but could not be replayed."""

    turn: str
    field: str
    message: str

    @property
    def where(self) -> str:
        return self.turn


@dataclass
class DrafterTrust:
    trusted: bool
    headline: str


@dataclass
class ShapeRow:
    """One drafter pooled over a shape's turns: the predicted speed-up per arm, the best fixed k and its interval."""

    speedup: dict[str, float | None]
    turns: int
    exact_turns: int
    best_k: int | None
    best_speedup: float | None
    interval: list[float] | None
    recommended_k: int | None = None
    withheld: str | None = None


@dataclass
class ShapeRecommendation:
    """The best (drafter, k) of a shape, and the k recommended (None, with the reason withheld, where none is)."""

    drafter: str | None
    k: int | None
    speedup: float | None
    interval: list[float] | None
    recommended_k: int | None
    withheld: str | None
    estimate: bool


@dataclass
class SchemaArm:
    """One drafter's arm pooled over a shape's turns that keep to their schema: tokens per target pass free (the
    drafter) and constrained (schema+ the drafter), and the constrained walk's predicted speed-up over constrained
    plain decoding."""

    free: float | None
    constrained: float | None
    speedup: float | None


@dataclass
class SchemaShape:
    """A shape's turns that carry a schema their recording keeps to: their tokens of the shape, the forced ones,
    and per drafter and arm the `SchemaArm`."""

    turns: int
    tokens: int
    forced: int
    forced_share: float | None
    drafters: dict[str, dict[str, SchemaArm]]
    exact_turns: int = 0  # those whose recording is the masked target's greedy output: their walks are exact


@dataclass
class ShapeSummary:
    turns: int
    tokens: int
    drafters: dict[str, ShapeRow]
    recommendation: ShapeRecommendation
    schema: Annotated[SchemaShape | None, OMITTED] = None


@dataclass
class ReplaySummary:
    shapes: dict[str, ShapeSummary]
    overall: ShapeSummary
    min_shape_tokens: int
    min_turns: int
    confidence: float


@dataclass
class CalibrationUse:
    """The Replay tab's calibrations: how they were chosen, how many, and how many the tab's store already held."""

    how: str
    calibrations: int
    reused: int


@dataclass(kw_only=True)
class ReplayResult(Result):
    """environment: playground.envinfo's; timings: per drafter, its calibrations (lab.calibration.Timing's
    documents); calibration: "once" or "bucket" from the command line, the tab's `CalibrationUse`."""

    experiment: ClassVar[str] = "replay"
    environment: Environment
    sampling: str
    feeding: str
    ks: list[int]
    controllers: list[str]
    drafters: list[str]
    max_ngram: int
    limits: dict[str, int]
    min_confidence: float | None
    records: str
    records_note: str
    turns: list[ReplayedTurn]
    errors: list[LineError | TurnError]
    timings: dict[str, list[dict[str, Json]]]
    trust: dict[str, DrafterTrust]
    summary: ReplaySummary
    calibration: Annotated[str | CalibrationUse | None, OMITTED] = None
    drafter_descriptions: Annotated[dict[str, str] | None, OMITTED] = None
    command: Annotated[str | None, OMITTED] = None

    @property
    def arms(self) -> list[str]:
        """Every walk's name, fixed k first."""
        return [arm_label(k) for k in self.ks] + list(self.controllers)
