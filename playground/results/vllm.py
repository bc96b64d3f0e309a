"""The `vllm-sweep` result (playground.backends.vllm_sweep): the plan, the servers, the environment and one cell per
(preset, method, k, concurrency, round), each with both arms' figures, the cost model's prediction and, for
n-gram, the cross-check of vLLM's proposer against our lookup (playground.backends.vllm_ngram).

Field names are the keys of the files the sweep saved before results were typed, so those still load. A vLLM
speculative config (`spec`, `spec_config`) stays the dict vLLM was started with: its keys are vLLM's, not ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import Json, Result


@dataclass(frozen=True)
class VllmPlanRecord:
    """The sweep's plan as run (backends.vllm_sweep.SweepPlan, with paths as text)."""

    external: list[str] | None  # the running servers measured (plain URL, speculative URL), else None
    model: str
    presets: list[str]
    ks: list[int]
    concurrencies: list[int]
    methods: list[str]
    rounds: int
    max_new_tokens: int | None  # None: each preset's own
    prompt_lookup: list[int]  # n-gram's [prompt_lookup_min, prompt_lookup_max]
    draft: str
    enforce_eager: bool
    suffix_factor: float | None = None  # suffix's suffix_decoding_max_spec_factor; None: vLLM's default (1)
    structured: bool = False  # JSON presets measured constrained to their schema too (--structured)


@dataclass(frozen=True)
class ThreadBudget:
    """What vLLM's CPU worker said about its threads in its log (None where it did not say)."""

    omp_bind: str | None
    worker_cores: str | None
    reserved_cpus: str | None
    torch_threads: int | None


@dataclass(frozen=True)
class VllmServerRecord:
    """One server the sweep measured: started here (pid, log, its settings) or running already (`external`)."""

    url: str
    external: bool = False
    pid: int | None = None
    model: str | None = None
    served_model_name: str | None = None
    spec: dict[str, Json] | None = None  # vLLM's --speculative-config; None: the plain server
    enforce_eager: bool | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    kv_cache_gib: float | None = None
    startup_s: float | None = None
    thread_budget: ThreadBudget | None = None  # None: an external server's threads are not known here
    log: str | None = None


@dataclass(frozen=True)
class VllmEnvironment:
    playground: str
    vllm: str | None  # what scripts/setup_vllm.sh installed, or a note for external servers
    cpu: str
    cpu_count: int | None
    loadavg_at_start: list[float] | None
    loadavg_at_end: list[float] | None = None


@dataclass(frozen=True)
class ServedArmFigures:
    """One arm (plain or speculative) of one batch of identical requests."""

    tokens_per_s: float | None  # per request, median decode rate (prefill excluded)
    tokens_per_s_all: list[float]
    aggregate_tokens_per_s: float  # all completion tokens over the batch's wall time
    completion_tokens: list[int]
    wall_s: float
    ttft_s: float | None
    step_s: float | None
    verify_step_s: float | None
    plain_step_s: float | None
    verify_share: float  # verify steps / decode steps
    merged_chunks: int
    chunks: int
    schedule: list[str]
    vllm_histogram: list[int] | None  # vLLM's acceptance histograms summed over the batch
    mean_acceptance_length: float | None
    alpha: float | None
    draft_acceptance_rate: float | None
    per_position_acceptance: list[float | None]
    accepted_match_vllm: bool
    vllm_mean_itl_ms: float | None
    loadavg: list[float] | None
    text: str
    token_ids: list[int]


@dataclass(frozen=True)
class VllmPrediction:
    """The cost model's speed-up from the engine's own step times (backends.vllm_sweep.predict); without verify
    steps or step times only `why` is set."""

    predicted_speedup: float | None
    why: str | None = None
    v_k_plus_1: float | None = None
    v_1: float | None = None
    expected_tokens: float | None = None
    verify_share: float | None = None
    c: float | None = None


@dataclass(frozen=True)
class NgramReplaySummary:
    """A greedy replay of one drafting rule over a finished output (backends.vllm_ngram.Replay.summary)."""

    decode_steps: int
    verify_steps: int
    drafted: int
    accepted: int
    alpha: float | None
    draft_acceptance_rate: float | None
    mean_acceptance_length: float | None
    histogram: dict[str, int]  # accepted drafts -> verify steps


@dataclass(frozen=True)
class NgramReplayCheck(NgramReplaySummary):
    """The replay of vLLM's rule, and whether it reproduced vLLM's per-step arrays (`check` says how)."""

    reproduces_vllm: bool
    check: str


@dataclass(frozen=True)
class VllmReported:
    """What vLLM's per-request metrics said of the same request (None where it did not send it)."""

    verify_steps: int | None
    drafted: int | None
    accepted: int | None
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None


@dataclass(frozen=True)
class OurLoopCheck:
    """Our own loop with our lookup, run on the same prompt (backends.vllm_ngram.run_our_loop)."""

    verify_steps: int
    drafted: int
    accepted: int
    alpha: float | None
    histogram: dict[str, int]
    same_output_as_vllm: bool


@dataclass(frozen=True)
class LookupCrosscheck:
    """vLLM's n-gram against our lookup with the same n-gram range on the same greedy output."""

    k: int
    prompt_lookup_min: int
    prompt_lookup_max: int
    output_tokens: int
    vllm_reported: VllmReported | None
    vllm_replayed: NgramReplayCheck
    our_lookup: NgramReplaySummary
    contexts: int
    contexts_proposing_differently: int
    our_loop: OurLoopCheck | None = None


@dataclass(frozen=True)
class VllmCell:
    """One (preset, method, k, concurrency, round): plain against speculative in adjacent batches, the prediction
    (VllmPrediction's fields, flat as they were saved) and the miss."""

    preset: str
    kind: str
    method: str
    k: int
    spec_config: dict[str, Json]  # vLLM's --speculative-config of the speculative server
    concurrency: int
    round: int
    first_arm: str
    prompt_tokens: int
    plain: ServedArmFigures
    spec: ServedArmFigures
    outputs_equal: bool
    speedup: float | None
    aggregate_speedup: float | None
    predicted_speedup: float | None
    why: str | None = None
    v_k_plus_1: float | None = None
    v_1: float | None = None
    expected_tokens: float | None = None
    verify_share: float | None = None
    c: float | None = None
    miss: float | None = None  # measured / predicted - 1
    crosscheck: LookupCrosscheck | None = None  # n-gram cells of the first round at the lowest concurrency
    structured: bool = False  # both arms' requests constrained to the preset's schema (vllm-sweep --structured)
    schema_valid: bool | None = None  # the speculative output against the preset's schema (None: no schema)


@dataclass
class VllmSweepResult(Result):
    experiment = "vllm-sweep"
    started: str
    plan: VllmPlanRecord
    servers: list[VllmServerRecord]
    environment: VllmEnvironment
    cells: list[VllmCell] = field(default_factory=list)
    command: str | None = None  # the command line that ran it (the CLI sets it)
    structured_refused: dict[str, str] = field(default_factory=dict)  # preset -> why its constrained run was refused
