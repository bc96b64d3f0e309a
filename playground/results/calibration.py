"""Step costs as results hold them: a calibration (`timing`), the target's passes at batch > 1 (`batch`), the cost
model's what-if map (`whatif`) and a pair's steps on each forward with random weights (`forwards`).

Field names are the keys of the files saved before results were typed, so those still load. Maps keyed by data
(pass length n -> cost, k -> speed-up, alpha -> ..., arm name -> its summary) stay dicts; their number keys are
ints (or floats) here and strings in the file, as JSON has them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from .base import Json, Result
from .environment import Environment
from .trust import Verdict


@dataclass(frozen=True)
class Spread:
    """The median, min and max of timed samples, and how many."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Spread:
        return cls(statistics.median(xs), min(xs), max(xs), len(xs))


@dataclass(frozen=True)
class TimingSamples:
    """A calibration's samples (its `raw`): seconds per pass length n, per plain step and per propose(k) call,
    the same over the plain step of their own repetition (`pass_ratio`, `draft_ratio`; empty in calibrations made
    before they were paired), and how many calibrations were pooled into these."""

    target_pass_s: dict[int, list[float]] = field(default_factory=dict)
    plain_step_s: list[float] = field(default_factory=list)
    draft_propose_s: dict[int, list[float]] = field(default_factory=dict)
    pass_ratio: dict[int, list[float]] = field(default_factory=dict)
    draft_ratio: dict[int, list[float]] = field(default_factory=dict)
    target_spread: dict[int, Spread] = field(default_factory=dict)
    pooled: int = 1


@dataclass(frozen=True)
class VerifyFit:
    """v(n) fitted monotone to a calibration's timed passes (lab.fit.fit_verify), a drop kept only where the
    samples show it is real."""

    v: dict[int, float]  # the curve to predict with: monotone unless a drop is significant
    measured: dict[int, float]  # medians as measured
    drops: tuple[tuple[int, float], ...] = ()  # (n, p) where v(n + 1) < v(n) beyond noise: real hardware
    flattened: tuple[int, ...] = ()  # n whose measured median the fit raised or lowered (noise)

    def to_dict(self) -> dict:
        return {"v": {str(n): x for n, x in self.v.items()}, "measured": {str(n): x for n, x in self.measured.items()},
                "drops": [list(d) for d in self.drops], "flattened": list(self.flattened)}


@dataclass(kw_only=True)
class TimingRecord:
    """A calibration as saved (lab.calibration.Timing.record()): what was measured, and what followed from it
    when it was saved (c, v, the fit, the verdict), so that a report re-reads the figures the run printed."""

    target_step_s: float
    verify_s: dict[int, float]
    draft_step_s: float
    draft_call_s: float = 0.0
    c: float
    overhead: float = 0.0
    v: dict[int, float]
    v_measured: dict[int, float] = field(default_factory=dict)
    verify_fit: VerifyFit | None = None
    trust: Verdict | None = None
    context_tokens: int
    sampling: str = "greedy"
    source_s: dict[str, tuple[float, float]] = field(default_factory=dict)
    source_costs: dict[str, tuple[float, float]] = field(default_factory=dict)
    raw: TimingSamples = field(default_factory=TimingSamples)


# --- batch ------------------------------------------------------------------------------------------------


@dataclass
class BatchRow:
    """One batch size: its one-token step, v_B(n), and the largest k whose verification stays nearly free."""

    batch: int
    step_s: float
    step_per_sequence_s: float
    v: dict[int, float]
    free_up_to_k: int
    spread: dict[int, Spread] = field(default_factory=dict)


@dataclass
class BatchPredictions:
    """The predicted speed-up per batch and k at one alpha, with the drafter's c timed at batch 1."""

    alpha: float
    c: float
    by_batch: dict[int, dict[int, float]]


@dataclass(kw_only=True)
class BatchResult(Result):
    experiment = "batch"
    environment: Environment = field(default_factory=Environment)
    context_tokens: int
    batches: list[int]
    n_max: int
    repeats: int
    threshold: float
    rows: list[BatchRow]
    predictions: BatchPredictions | None = None
    setup: str | None = None  # the app's setup line, where it timed them


@dataclass(kw_only=True)
class TimingResult(TimingRecord, Result):
    """`timing`: one calibration with the environment and memory it was measured in; with --batch, the batch
    timing beside it."""

    experiment = "timing"
    environment: Environment = field(default_factory=Environment)
    memory: dict[str, Json] = field(default_factory=dict)
    batch: BatchResult | None = None
    drafter: str | None = None
    command: str | None = None


# --- whatif -----------------------------------------------------------------------------------------------


@dataclass
class WhatifRow:
    k: int
    speedup: float
    tokens_per_pass: float
    break_even_alpha: float | None  # None: no alpha pays at this k
    iteration_cost: float


@dataclass
class WhatifGridRow:
    alpha: float
    speedups: dict[int, float]  # k -> predicted speed-up


@dataclass
class WhatifResult(Result):
    """The cost model's predictions for a drafter costing c per token and `overhead` per call, verification v(n)
    (None: flat) and an acceptance (iid `alpha`, or per-position `positions`)."""

    experiment = "whatif"
    c: float
    overhead: float
    alpha: float | None
    positions: list[float] | None
    v: dict[int, float] | None
    rows: list[WhatifRow]
    best_k: int  # 0: no k pays
    best_speedup: float
    grid: list[WhatifGridRow]
    ks: list[int]


# --- forwards ---------------------------------------------------------------------------------------------


@dataclass
class ForwardsRound:
    """One arm's timings in one round: per n the target's passes (wall and CUDA-event seconds), the draft's
    steps."""

    target: dict[int, list[float]]
    target_gpu: dict[int, list[float | None]]
    draft: list[float] = field(default_factory=list)
    draft_gpu: list[float | None] = field(default_factory=list)


@dataclass
class ForwardsArm:
    """One forward's medians over its rounds, v(n), c and the predicted speed-up (alpha -> k -> x)."""

    target_step_s: float
    target_pass_s: dict[int, float]
    v: dict[int, float]
    target_step_round_medians_s: list[float]
    raw: list[ForwardsRound]
    target_step_gpu_s: float | None = None
    draft_step_s: float | None = None  # None: no draft model
    draft_step_round_medians_s: list[float] | None = None
    c: float | None = None
    draft_step_gpu_s: float | None = None
    predicted: dict[float, dict[int, float]] | None = None


@dataclass
class StreamingFloor:
    """The bytes a target step reads over the device's bandwidth (a copy measured here; the datasheet's)."""

    bytes: int
    copy_bandwidth_Bps: float
    step_s: float
    datasheet_bandwidth_Bps: float | None = None
    datasheet_step_s: float | None = None


CUDA_KERNELS = "CUDA kernels"
"""StepKernels.unit of a count made on CUDA (a CPU's counts ops, under another unit)."""


@dataclass
class StepKernels:
    """What one 1-token step of each model's static forward runs (lab.forwards.step_kernels): CUDA kernels on a
    GPU, the count a CUDA graph of the step replays; dispatched aten ops on a CPU, `unit` says which."""

    unit: str
    target: int
    draft: int | None = None


@dataclass
class PairShape:
    layers: int | None  # --layers: both cut to this many at most
    target_layers: int
    draft_layers: int | None
    layer_ratio: float | None  # the draft's layers / the target's, in the full pair
    byte_ratio: float | None


@dataclass(kw_only=True)
class ForwardsResult(Result):
    """`timing --random-weights`: each forward's step costs (`arms`), the floor, and what the pair was."""

    experiment = "forwards"
    context_tokens: int
    n_max: int
    rounds: int
    repeats: int
    alphas: list[float]
    arms: dict[str, ForwardsArm]
    floor: StreamingFloor
    gpu_driver: str | None = None
    seconds: float
    acceptance: str
    pair: str | None = None
    target: str | None = None
    draft: str | None = None
    device: str | None = None
    dtype: str | None = None
    environment: Environment = field(default_factory=Environment)
    kernels: dict[str, dict[str, Json]] = field(default_factory=dict)  # role -> pairs.kernels.KernelChoice's dict
    shape: PairShape | None = None
    command: str | None = None
    setup: str | None = None
    step_kernels: StepKernels | None = None  # absent from files saved before steps were counted
    compile_s: dict[str, float] | None = None  # role -> seconds torch.compile took ($PLAYGROUND_COMPILE_STEP=1)
