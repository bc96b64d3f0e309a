"""The speed experiments' results: `speed` (plain against speculative decoding per prompt and k, in adjacent runs),
`sweep` (the same on one prompt over k = 1..k_max, with the adaptive arm, break-even alphas and the model's best k)
and `peers` (our loop against transformers' generate). lab.speed and lab.peers build them; lab.report, lab.misses,
lab.schedules and the browser's sweep tab read them.

Field names are the keys of the files saved before results were typed, so those files load. A field that a
file from an older playground may lack has a default; so has one that only some rows carry (the predictions of a
fixed k, the choices of a schedule, a sweep's break-even alpha)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import Json, Result
from .calibration import Spread
from .environment import Environment
from .trust import MachineLoad, Verdict

IterationRow = list[int | float | str | None]
"""One iteration of a run, compact: (k, accepted, emitted, draft_s, verify_s, rollback_s, drafted, source); rows
saved before the last two were kept have six (lab.schedules)."""


@dataclass(kw_only=True)
class ConstrainedRun:
    """A speculative run's arm run again constrained to the schema (`speed --schema`), right after it, with the
    schema+ variant of its drafter: divided by constrained plain decoding at its moment, as the free run is by
    plain decoding."""

    ratio: float | None = None  # constrained speculative / constrained plain tokens per second, decoding only
    spec_tokens_per_s: float | None = None
    plain_tokens_per_s: float | None = None
    tokens_per_pass: float | None = None
    forced_share: float | None = None  # of its new tokens, the ones the schema forced (role forced)
    alpha: float | None = None
    new_tokens: int = 0
    plain_new_tokens: int = 0
    finished: str | None = None  # "schema" where the value was complete


@dataclass(kw_only=True)
class SchemaCell:
    """Medians over the constrained runs of one k (speed --schema): the constrained speed-up over constrained
    plain, tokens per target pass constrained and free (the same k's free runs), and the forced share."""

    median_ratio: float | None = None
    min_ratio: float | None = None
    max_ratio: float | None = None
    tokens_per_pass: float | None = None
    free_tokens_per_pass: float | None = None
    forced_share: float | None = None
    n: int = 0


@dataclass(kw_only=True)
class SpeedRun:
    """One speculative run, divided by plain decoding at its moment (interpolated between the plain runs around
    it), with what the cost model predicted for it."""

    round: int
    prompt: str
    k: int | str  # a fixed k, or a schedule: "adaptive" / "heuristic"
    order: list[str] = field(default_factory=list)  # the arms of its prompt and round, in the order they ran
    plain_tokens_per_s: float | None = None
    spec_tokens_per_s: float | None = None
    ratio: float | None = None  # speculative / plain tokens per second, decoding only
    e2e_ratio: float | None = None  # the same end to end, prefill included
    alpha: float | None = None
    per_position: list[float | None] = field(default_factory=list)  # P(accept i | reached i); None: never reached
    tokens_per_pass: float | None = None
    new_tokens: int = 0
    max_new_tokens: int | None = None  # its length limit (absent from runs saved before they kept how they ended)
    finished: str | None = None  # "eos" or "length"
    plain_new_tokens: int = 0
    draft_s: float | None = None
    verify_s: float | None = None
    rollback_s: float | None = None
    decode_s: float | None = None
    plain_decode_s: float | None = None
    k_values: dict[str, int] = field(default_factory=dict)  # iterations per k chosen
    drafted_values: dict[str, int] = field(default_factory=dict)  # iterations per number of proposals drafted
    source_iterations: dict[str, int] | None = None  # proposing iterations per proposal source (a hybrid's)
    prefill_s: float | None = None
    plain_prefill_s: float | None = None
    iterations: list[IterationRow] = field(default_factory=list)
    predicted_empirical: float | None = None  # its per-position acceptance through the calibration's costs
    costed: float | None = None  # its own iterations priced by the calibration (lab.schedules)
    predicted_local: float | None = None  # ... through the costs the other arms of its round paid (lab.fit)
    schema: ConstrainedRun | None = None  # speed --schema: the same arm constrained, run right after it


@dataclass(kw_only=True)
class PlainRun:
    round: int
    prompt: str
    tokens_per_s: float


@dataclass(kw_only=True)
class Drift:
    """How far a prompt's plain decoding moved between rounds (the median of each round's plain runs)."""

    plain_tokens_per_s: list[float]
    spread: float  # (max - min) / median, as the verdict measures it
    flagged: bool  # past the drift limit


@dataclass(kw_only=True)
class MissSplit:
    """A fixed-k cell's miss, measured - predicted, split into parts that add up to it (means over its runs;
    lab.fit.explain_cell)."""

    measured: float
    predicted: float
    step_costs: float  # the loop's own step costs against the calibration's
    acceptance: float  # what the runs got per unit of their drafting and verification against the model
    overhead: float  # time outside the draft, verify and rollback buckets
    miss: float
    outside_buckets_share: float | None = None  # medians over the runs, of their decode time
    rollback_share: float | None = None
    runs: int
    loop_c: float  # the drafter's cost per token fitted from the loop's records (median)


@dataclass(kw_only=True)
class SpeedRow:
    """Medians over the runs of one k: over every prompt (the table) or of one prompt (`by_prompt`)."""

    prompt: str | None = None  # None in the table over all prompts
    k: int | str
    median_ratio: float
    min_ratio: float
    max_ratio: float
    median_e2e_ratio: float | None = None
    n: int = 0  # runs
    alpha: float | None = None
    median_costed: float | None = None
    k_values: dict[str, int] | None = None  # a schedule's choices, summed over its runs
    drafted_values: dict[str, int] | None = None
    predicted_iid: float | None = None  # a fixed k's predictions and misses (measured - predicted)
    predicted_empirical: float | None = None
    miss_empirical: float | None = None
    predicted_local: float | None = None
    miss_local: float | None = None
    spread: float | None = None  # max - min
    explained: MissSplit | None = None
    trust: Verdict | None = None
    break_even_alpha: float | None = None  # a sweep's fixed k: None where no alpha pays
    schema: SchemaCell | None = None  # speed --schema: the same k's constrained runs


@dataclass(kw_only=True)
class ArmFigures:
    """An arm's median costed and measured ratio on one prompt."""

    costed: float | None = None
    measured: float | None = None


@dataclass(kw_only=True)
class BestFixed:
    k: int
    costed: float
    measured: float | None = None


@dataclass(kw_only=True)
class AdaptiveVsHeuristic:
    costed: float | None = None
    measured: float | None = None
    same_decisions: bool = False  # the same (k, drafted) in every iteration of every round
    costed_by_round: list[float] = field(default_factory=list)
    rounds_level_or_ahead: int = 0


@dataclass(kw_only=True)
class ScheduleEntry:
    """One prompt's schedules against its best fixed k, costed on their own iterations (lab.schedules.compare)."""

    prompt: str
    arms: dict[str, ArmFigures]  # by arm: "1", "2", ..., "adaptive", "heuristic"
    best_fixed: BestFixed | None = None
    adaptive_of_best: float | None = None  # costed, as a share of the best fixed k's
    heuristic_of_best: float | None = None
    adaptive_vs_heuristic: AdaptiveVsHeuristic | None = None

    def of_best(self, schedule: str) -> float | None:
        """A schedule's costed share of the best fixed k."""
        return self.adaptive_of_best if schedule == "adaptive" else self.heuristic_of_best


@dataclass(kw_only=True)
class SpeedResult(Result):
    experiment = "speed"
    trust: Verdict | None = None  # absent from results saved before verdicts
    machine: MachineLoad | None = None
    recommended_k: int | str | None = None  # None: withheld (a failed verdict), or no verdict at all
    withheld: str | None = None
    environment: Environment = field(default_factory=Environment)
    ks: list[int | str]
    rounds: int
    max_new_tokens: int | dict[str, int]  # one limit, or each prompt's own
    sampling: str | None = None  # SamplingConfig.describe(); None: greedy, before it was recorded
    prompts: list[str] = field(default_factory=list)
    min_confidence: float | None = None
    memory: str | None = None  # what a schedule's state carried over (lab.speed.MEMORY_SCOPES)
    table: list[SpeedRow]
    best_k: int | str
    by_prompt: list[SpeedRow] = field(default_factory=list)
    best_k_by_prompt: dict[str, int | str] = field(default_factory=dict)
    drift: dict[str, Drift] = field(default_factory=dict)  # by prompt
    host_drift: Drift | None = None  # every prompt's plain level per round, relative (lab.speed.cells.host_level)
    trace_note: str | None = None  # --trace, greedy: whether its responses are the target's own (lab.speed.trace)
    schedules: list[ScheduleEntry] = field(default_factory=list)
    runs: list[SpeedRun] = field(default_factory=list)
    plain_runs: list[PlainRun] = field(default_factory=list)
    plain_every: int | None = None  # None: one plain run per prompt and round (results saved before)
    timing: dict[str, Json] | None = None  # the (first prompt's) calibration, as lab.calibration.Timing saves it
    timing_by_prompt: dict[str, dict[str, Json]] | None = None
    drafter: str | None = None  # what the command line said (cli.lab)
    command: str | None = None
    schema: str | None = None  # speed --schema: the schema every arm also ran constrained to (its name)


@dataclass(kw_only=True)
class SweepResult(SpeedResult):
    """A speed result on one prompt, its rows with their break-even alphas."""

    experiment = "sweep"
    predicted_best_k: int | None = None  # the model's best k from the deepest k's per-position acceptance


@dataclass(kw_only=True)
class PeersRun:
    round: int
    prompt: str
    arm: str
    tokens: int
    seconds: float  # end to end, prefill included
    tokens_per_s: float
    ratio_to_hf_plain: float
    same_output_as_hf_plain: bool


@dataclass(kw_only=True)
class PeersRow:
    arm: str
    median_ratio: float
    min_ratio: float
    max_ratio: float
    median_tokens_per_s: float
    outputs_equal: int
    n: int



@dataclass(kw_only=True)
class PeersResult(Result):
    """Every arm's end-to-end speed against transformers' plain generate; ours against transformers' assisted
    generation with the same draft and k, per round and prompt (None where the pair has no such arms)."""

    experiment = "peers"
    trust: Verdict | None = None
    machine: MachineLoad | None = None
    environment: Environment = field(default_factory=Environment)
    k: int
    rounds: int
    ours_vs_hf_assisted: Spread | None = None  # both drafting all k
    ours_vs_hf_assisted_conf: Spread | None = None  # both stopping below confidence 0.4
    ours_vs_hf_assisted_own_prefill: Spread | None = None  # ours prefilling the prompt in the draft itself
    ours_vs_hf_assisted_conf_transformers_forward: Spread | None = None  # ours on transformers' forward
    max_new_tokens: int
    timed: str = "end to end, prefill included"
    table: list[PeersRow]
    runs: list[PeersRun] = field(default_factory=list)
    drafter: str | None = None
    command: str | None = None
