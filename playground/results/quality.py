"""The quality experiments' results (playground.lab.quality): acceptance per output shape and k (`acceptance`),
greedy speculative against plain greedy (`divergence`), and whether each acceptance rule keeps the target's
distribution (`distribution`).

Field names are the keys of the files saved before results were typed, so those still load (the committed
docs/results/acceptance-*.json among them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import ConfigDict, Field, TypeAdapter

from .base import Result
from .environment import Environment

# --- acceptance -------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class PooledAcceptance:
    """Acceptance at one k over the iterations that drafted all k (`alpha` None, and the rest absent, where none
    did): per-position acceptance, the accepted-length histogram, tokens per target pass measured and from the iid
    and empirical models."""

    kind: str
    k: int
    iterations: int
    alpha: float | None
    per_position: list[float | None] | None = None
    histogram: dict[int, int] | None = None  # accepted length -> iterations
    tokens_per_pass: float | None = None
    tokens_per_pass_iid: float | None = None
    tokens_per_pass_empirical: float | None = None


@dataclass(kw_only=True)
class AcceptanceRow(PooledAcceptance):
    """One prompt at one k."""

    prompt: str


@dataclass(kw_only=True)
class AcceptanceResult(Result):
    """`acceptance`: every prompt at every k, and the same pooled by kind (from the pooled iteration records)."""

    experiment = "acceptance"
    environment: Environment = field(default_factory=Environment)
    ks: list[int]
    sampling: str = "greedy"
    rows: list[AcceptanceRow]
    pooled: list[PooledAcceptance]
    drafter: str | None = None
    command: str | None = None


# --- divergence -------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class DivergenceCase:
    """The first token where a greedy speculative run differs from plain greedy, and the two competing tokens'
    logit gaps (plain's minus speculative's) recomputed three ways (way -> gap, way -> which one won)."""

    prompt: str
    k: int
    position: int
    plain_token: int
    spec_token: int
    gaps: dict[str, float]
    winners: dict[str, str]
    top_logit: float
    dtype_spacing: float
    recompute_disagreement: float
    verdict: str  # "near-tie" or "bug"
    plain_text: str | None = None  # None: the pair has no tokenizer
    spec_text: str | None = None


@dataclass(kw_only=True)
class DivergenceResult(Result):
    experiment = "divergence"
    environment: Environment = field(default_factory=Environment)
    runs: int
    diverged: int
    cases: list[DivergenceCase]
    drafter: str | None = None
    command: str | None = None


# --- distribution -----------------------------------------------------------------------------------------


@dataclass
class DistributionContext:
    """Where a prompt's draws were made: `position` tokens of greedy continuation in, with TV(p, q) there (None
    for a deterministic proposer), and whether both wrong rules were rejected there at every seed (`power`)."""

    position: int
    tv_distance_p_q: float | None
    context_tokens: int
    power: bool = False


@dataclass
class RuleTest:
    """One prompt, seed and rule: the chi-square p-value of its first tokens against the target's distribution."""

    prompt: str
    seed: int
    rule: str
    p_value: float
    tv_distance_p_q: float | None
    draws: int


@dataclass
class RuleSummary:
    __pydantic_config__ = ConfigDict(serialize_by_alias=True)
    tests: int
    below_001: Annotated[int, Field(alias="below_0.01")]
    below_005: Annotated[int, Field(alias="below_0.05")]
    min_p: float


@dataclass
class DistributionSummary:
    """Contexts with power, and per rule (core.rules.SAMPLING_RULES, by its name) how many tests fell below 0.01
    and 0.05."""

    __pydantic_config__ = ConfigDict(serialize_by_alias=True)
    contexts_with_power: int
    contexts: int
    without_power: list[str]
    exact: RuleSummary
    resample_target: Annotated[RuleSummary, Field(alias="resample-target (wrong)")]
    keep_draft: Annotated[RuleSummary, Field(alias="keep-draft (wrong)")]

    @classmethod
    def of(cls, contexts_with_power: int, contexts: int, without_power: list[str],
           by_rule: dict[str, RuleSummary]) -> DistributionSummary:
        """The summary with each rule's under its name (`by_rule`: SAMPLING_RULES' names, the fields' aliases)."""
        return TypeAdapter(cls).validate_python(dict(contexts_with_power=contexts_with_power, contexts=contexts,
                                                     without_power=without_power, **by_rule))


@dataclass(kw_only=True)
class DistributionResult(Result):
    experiment = "distribution"
    environment: Environment = field(default_factory=Environment)
    sampling: str
    draws: int
    seeds: list[int]
    min_tv: float
    contexts: dict[str, DistributionContext]  # prompt name -> its context
    results: list[RuleTest]
    summary: DistributionSummary
    note: str = ""
    drafter: str | None = None
    command: str | None = None
