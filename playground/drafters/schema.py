"""The schema as a drafter source: the tokens a constrained run's grammar forces, proposed at no model cost, then
another drafter's guesses from there (the schema+ drafters of the registry).

At each iteration the guide's fast-forward tokens (constraints.guide.Guide.forced: the library's boundary rule keeps a
forced string from ending mid-token) open the proposal, tagged with the source FORCED_SOURCE; the inner drafter
continues after them with what is left of k (`propose_after`: it sees them as context, not as committed text). The
target still verifies the forced tokens: the grammar forces a string, not a tokenization, so the target (masked)
may spell the same string otherwise, and then its own token wins, as it would in a plain constrained run.

Without a constraint (a run with no schema) nothing is forced and the drafter is its inner one alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..core.proposal import EMPTY, FORCED_SOURCE, Proposal, Proposer, RunContext


class SchemaProposer(Proposer):
    """The schema's forced tokens, then `inner`'s proposal (its tokens tagged with `inner_source`)."""

    def __init__(self, inner: Proposer, inner_source: str, name: str | None = None):
        self.inner, self.inner_source = inner, inner_source
        self.name = name or f"schema+{inner.name}"
        self.uses_draft_model = inner.uses_draft_model
        self.confidence_stops = inner.confidence_stops
        self.prefill_overlaps = inner.prefill_overlaps

    @property
    def takes_target_kv(self) -> bool:
        return self.inner.takes_target_kv

    @property
    def shared_kv(self) -> int:
        return self.inner.shared_kv

    def describe(self) -> str:
        return f"the schema's forced tokens, then {self.inner.describe()}"

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        super().begin(prompt_ids, ctx)
        self.inner.begin(prompt_ids, ctx)

    def next_source(self, tokens: Sequence[int]) -> str | None:
        """FORCED_SOURCE where the schema forces tokens here, else the inner drafter's source (each proposal's first
        source: what adaptive k learns acceptance under)."""
        guide = self.ctx.guide if getattr(self, "ctx", None) is not None else None
        if guide is not None and guide.forced(tokens):
            return FORCED_SOURCE
        return self.inner.next_source(tokens) or self.inner_source

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        guide = self.ctx.guide
        forced = guide.forced(tokens)[:k] if guide is not None else []
        rest = k - len(forced)
        inner = self.inner.propose_after(tokens, forced, rest) if rest > 0 else EMPTY
        if not forced:
            return _tagged(inner, self.inner_source)
        if not inner.tokens:
            return Proposal(tuple(forced), sources=(FORCED_SOURCE,) * len(forced))
        sources = (FORCED_SOURCE,) * len(forced) + (inner.sources or (self.inner_source,) * len(inner))
        return Proposal((*forced, *inner.tokens), _q(forced, inner.q), sources)

    def rollback(self, tokens: Sequence[int]) -> None:
        self.inner.rollback(tokens)


def _tagged(proposal: Proposal, source: str) -> Proposal:
    if not proposal.tokens or proposal.sources:
        return proposal
    return Proposal(proposal.tokens, proposal.q, (source,) * len(proposal))


def _q(forced: list[int], q: torch.Tensor | None) -> torch.Tensor | None:
    """The proposal's q: a point mass on each forced token (a deterministic proposal), then the inner drafter's rows;
    None where both parts are deterministic."""
    if q is None:
        return None
    head = torch.zeros((len(forced), q.shape[-1]), dtype=q.dtype, device=q.device)
    head[torch.arange(len(forced)), torch.as_tensor(forced)] = 1.0
    return torch.cat([head, q])
