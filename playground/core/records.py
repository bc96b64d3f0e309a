"""The records that flow from the engine to every reader (UI, CLI, lab).

Plain frozen dataclasses of Python scalars and tuples: no tensors, so a record can be
JSON-serialised, compared in tests and streamed to a browser without touching torch.

`summarize(records)` derives the run summary from the records themselves; nothing keeps
statistics in parallel with them.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

# Role of each emitted token, in the order emitted.
ACCEPTED = "accepted"  # a proposal the target kept
CORRECTION = "correction"  # the target's own token after a rejected proposal
BONUS = "bonus"  # the target's extra token after all k proposals were kept
PLAIN = "plain"  # the target's token in an iteration with nothing proposed (a plain step)
FORCED = "forced"  # a proposal the schema forced (no model ran: Proposal source FORCED_SOURCE) and the target kept
Role = Literal["accepted", "correction", "bonus", "plain", "forced"]


@dataclass(frozen=True)
class Prefill:
    """The prompt pass of the target (and the drafter), before the first decoding step.

    Reported apart from decoding so that tokens/s of plain and speculative runs compare the same
    thing: both pay the same target prefill, and the drafter's prefill is shown on its own.

    The drafter's prefill may run beside the target's (`overlapped`, see Proposer.prefill_overlaps).
    `draft_s` is what of it the run waited for (all of it when not overlapped); `draft_total_s` is the
    drafter's own prefill time, hidden or not; `wall_s` is the wall time of the whole phase."""

    prompt_tokens: int
    target_s: float
    draft_s: float = 0.0
    # None in records from before these fields: draft_total_s then equals draft_s, wall_s the sum.
    draft_total_s: float | None = None
    overlapped: bool = False
    wall_s: float | None = None
    # Prompt positions whose KV the drafter copied from the target's cache instead of computing them
    # (Proposer.takes_target_kv); its draft_s is then that copy.
    draft_shared: int = 0

    def __post_init__(self):
        if self.draft_total_s is None:
            object.__setattr__(self, "draft_total_s", self.draft_s)
        if self.wall_s is None:
            object.__setattr__(self, "wall_s", self.target_s + self.draft_s)


@dataclass(frozen=True)
class Iteration:
    """One propose / verify / accept / roll-back iteration of speculative decoding."""

    index: int
    k: int  # proposals asked for this iteration
    proposed: tuple[int, ...]  # what the proposer returned (may be fewer than k, or none)
    n_accepted: int  # proposals the acceptance rule kept, before any EOS / length cut
    emitted: tuple[int, ...]  # tokens appended to the output this iteration
    roles: tuple[Role, ...]  # role of each emitted token
    draft_s: float
    verify_s: float
    rollback_s: float
    elapsed_s: float  # seconds since decoding started (after prefill), at the end of this iteration
    # Per-proposal probabilities, where known: p(x) under the target, q(x) under the drafter (as
    # sampled: after temperature / top-k / top-p), and the acceptance probability min(1, p/q).
    p: tuple[float, ...] | None = None
    q: tuple[float, ...] | None = None
    sources: tuple[str, ...] | None = None  # where each proposal came from (for hybrid drafters)
    finished: str | None = None  # "eos", "length" or (constrained runs) "schema" on the last iteration

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s + self.rollback_s

    @property
    def evaluated(self) -> int:
        """Proposals whose fate the rule decided: the accepted ones plus the first rejected one."""
        return self.n_accepted + (1 if self.n_accepted < len(self.proposed) else 0)

    @property
    def accept_prob(self) -> tuple[float, ...] | None:
        if self.p is None:
            return None
        if self.q is None:  # a deterministic proposal: q is a point mass on the proposed token
            return tuple(min(1.0, pi) for pi in self.p)
        return tuple(min(1.0, pi / qi) if qi > 0 else 1.0 for pi, qi in zip(self.p, self.q))


@dataclass(frozen=True)
class Step:
    """One step of plain decoding: one target pass, one token."""

    index: int
    token: int
    seconds: float
    elapsed_s: float
    finished: str | None = None


Record = Prefill | Iteration | Step


@dataclass(frozen=True)
class RunSummary:
    """What a run amounted to. Built by `summarize` from the records, never kept alongside them."""

    mode: Literal["speculative", "plain"]
    prompt_tokens: int
    new_tokens: int
    target_passes: int  # decoding passes of the target (prefill excluded)
    tokens_per_pass: float
    decode_s: float  # wall time of decoding, prefill excluded
    prefill_s: float
    tokens_per_s: float  # new_tokens / decode_s
    prefill_draft_s: float = 0.0  # what of prefill_s the run waited for the drafter (Prefill.draft_s)
    prefill_shared: int = 0  # prompt positions whose KV the drafter copied from the target (Prefill.draft_shared)
    # Speculative runs only (zero / empty for plain runs):
    alpha: float | None = None  # acceptance rate: accepted / evaluated proposals (see `alpha_of`)
    proposed: int = 0
    accepted: int = 0
    accepted_fraction: float | None = None  # accepted / proposed (lower than alpha: see notes)
    accepted_length_histogram: dict[int, int] = field(default_factory=dict)
    per_position_acceptance: tuple[float | None, ...] = ()  # P(accept i | reached i), i = 1..k_max
    per_position_reached: tuple[int, ...] = ()
    draft_s: float = 0.0
    verify_s: float = 0.0
    rollback_s: float = 0.0
    overhead_s: float = 0.0  # decode time not inside draft, verify or rollback (the loop's own work)
    k_values: dict[int, int] = field(default_factory=dict)  # how many iterations used each k
    drafted_values: dict[int, int] = field(default_factory=dict)  # ... drafted each number of proposals
    source_iterations: dict[str, int] = field(default_factory=dict)  # proposing iterations per source (hybrid)
    roles: dict[str, int] = field(default_factory=dict)
    finished: str | None = None
    median_iteration_s: float | None = None

    @property
    def forced_share(self) -> float | None:
        """The share of the new tokens the schema forced (role FORCED: proposed at no model cost); None for none."""
        return self.roles.get(FORCED, 0) / self.new_tokens if self.new_tokens else None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self),  # JSON's keys are strings: the count maps' int keys, written as such
                "accepted_length_histogram": {str(k): v for k, v in self.accepted_length_histogram.items()},
                "k_values": {str(k): v for k, v in self.k_values.items()},
                "drafted_values": {str(k): v for k, v in self.drafted_values.items()}}


def alpha_of(iterations: Iterable[Iteration]) -> float | None:
    """Acceptance rate alpha, the maximum-likelihood estimate under the iid model.

    Each proposal the rule evaluated was accepted with probability alpha; proposals after the first
    rejection were never evaluated, so they are not counted (counting them, as accepted / proposed
    does, biases alpha low as k grows). alpha = accepted / (accepted + rejections)."""
    accepted = evaluated = 0
    for it in iterations:
        accepted += it.n_accepted
        evaluated += it.evaluated
    return accepted / evaluated if evaluated else None


def describe_choices(k_values, drafted_values=None) -> str:
    """How often each k was chosen ({k: iterations}, keys int or str): '2×1 16×5' (k = 0 is a plain step); with
    `drafted_values` ({proposals: iterations}) that differ, how many the drafter drafted too ('16×6; drafted
    1×2 3×3 9×1'): k is a cap where a confidence stop or adaptive k's stop rule cut the drafting short."""
    def text(values) -> str:
        return " ".join(f"{k}\u00d7{n}" for k, n in sorted(values.items(), key=lambda kv: int(kv[0])))

    chosen = text(k_values)
    drafted = text(drafted_values) if drafted_values else chosen
    return chosen if drafted == chosen else f"{chosen}; drafted {drafted}"


def prefill_note(s: RunSummary) -> str:
    """What the drafter's part of the prefill was: '' for a plain run or a drafter that keeps no state."""
    if s.prefill_shared:
        return f"drafter {s.prefill_draft_s:.2f} s: its KV of {s.prefill_shared} prompt tokens copied from the target"
    if s.mode == "speculative" and s.prefill_draft_s > 0:
        return f"drafter {s.prefill_draft_s:.2f} s"
    return ""


def summarize(records: Iterable[Record]) -> RunSummary:
    records = list(records)
    prefill = next((r for r in records if isinstance(r, Prefill)), None)
    iterations = [r for r in records if isinstance(r, Iteration)]
    steps = [r for r in records if isinstance(r, Step)]
    if iterations and steps:
        raise ValueError("a run has either iterations or steps, not both")
    prompt_tokens = prefill.prompt_tokens if prefill else 0
    prefill_s = prefill.wall_s if prefill else 0.0  # the phase's wall time, overlapped or not

    if not iterations:
        n = len(steps)
        decode_s = steps[-1].elapsed_s if steps else 0.0
        return RunSummary(
            mode="plain",
            prompt_tokens=prompt_tokens,
            new_tokens=n,
            target_passes=n,
            tokens_per_pass=1.0 if n else 0.0,
            decode_s=decode_s,
            prefill_s=prefill_s,
            tokens_per_s=n / decode_s if decode_s > 0 else 0.0,
            verify_s=sum(s.seconds for s in steps),
            roles={PLAIN: n} if n else {},
            finished=steps[-1].finished if steps else None,
            median_iteration_s=statistics.median(s.seconds for s in steps) if steps else None,
        )

    new_tokens = sum(len(it.emitted) for it in iterations)
    passes = len(iterations)
    decode_s = iterations[-1].elapsed_s
    drafting = [it for it in iterations if it.proposed]
    k_max = max((len(it.proposed) for it in drafting), default=0)
    reached = [0] * k_max
    kept = [0] * k_max
    for it in drafting:
        for i in range(it.evaluated):
            reached[i] += 1
            kept[i] += 1 if i < it.n_accepted else 0
    proposed = sum(len(it.proposed) for it in drafting)
    accepted = sum(it.n_accepted for it in drafting)
    roles = Counter(role for it in iterations for role in it.roles)
    draft_s = sum(it.draft_s for it in iterations)
    verify_s = sum(it.verify_s for it in iterations)
    rollback_s = sum(it.rollback_s for it in iterations)
    return RunSummary(
        mode="speculative",
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        target_passes=passes,
        tokens_per_pass=new_tokens / passes,
        decode_s=decode_s,
        prefill_s=prefill_s,
        prefill_draft_s=prefill.draft_s if prefill else 0.0,
        prefill_shared=prefill.draft_shared if prefill else 0,
        tokens_per_s=new_tokens / decode_s if decode_s > 0 else 0.0,
        alpha=alpha_of(drafting),
        proposed=proposed,
        accepted=accepted,
        accepted_fraction=accepted / proposed if proposed else None,
        accepted_length_histogram=dict(sorted(Counter(it.n_accepted for it in drafting).items())),
        per_position_acceptance=tuple(kp / r if r else None for kp, r in zip(kept, reached)),
        per_position_reached=tuple(reached),
        draft_s=draft_s,
        verify_s=verify_s,
        rollback_s=rollback_s,
        overhead_s=max(0.0, decode_s - draft_s - verify_s - rollback_s),
        k_values=dict(sorted(Counter(it.k for it in iterations).items())),
        drafted_values=dict(sorted(Counter(len(it.proposed) for it in iterations).items())),
        source_iterations=dict(Counter(it.sources[0] for it in drafting if it.sources)),
        roles=dict(roles),
        finished=iterations[-1].finished,
        median_iteration_s=statistics.median(it.seconds for it in iterations),
    )


def record_to_dict(record: Record) -> dict:
    return {**dataclasses.asdict(record), "type": type(record).__name__}
