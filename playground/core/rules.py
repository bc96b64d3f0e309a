"""Acceptance rules: pure functions of the proposals and the target's (and draft's) distributions.

Each takes the k proposed tokens and the target's k + 1 next-token rows (row i predicts proposal i,
the last row predicts the token after all of them) and returns a `Decision`: how many proposals are
kept and the target's own next token (a correction after a rejection, or the bonus token when all
were kept).

`accept_greedy` and `accept_sample` (Leviathan et al. 2023; Chen et al. 2023) are exact.
`accept_resample_target` and `accept_keep_draft` are WRONG on purpose: they are kept for the
distribution experiment and its tests, which must be able to tell them apart from the exact rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .sampling import draw


@dataclass(frozen=True)
class Decision:
    n_accepted: int
    token: int  # the target's token: a correction if n_accepted < k, else the bonus token

    def is_bonus(self, k: int) -> bool:
        return self.n_accepted == k


def accept_greedy(proposals: Sequence[int], target_logits: torch.Tensor) -> Decision:
    """Keep proposal i while it is the target's arg-max at that position."""
    k = len(proposals)
    best = torch.argmax(target_logits[: k + 1], dim=-1).tolist()  # one host sync for the whole check
    for i, x in enumerate(proposals):
        if best[i] != x:
            return Decision(i, best[i])
    return Decision(k, best[k])


def _proposal_probs(proposals: Sequence[int], p: torch.Tensor, q: torch.Tensor | None):
    k = len(proposals)
    idx = torch.arange(k, device=p.device)
    x = torch.as_tensor(list(proposals), dtype=torch.long, device=p.device)
    px = p[idx, x]
    # A deterministic proposer (prompt lookup) proposes x with certainty: q is a point mass on x.
    qx = q[idx, x] if q is not None else torch.ones_like(px)
    return px, qx


def _first_rejection(px: torch.Tensor, qx: torch.Tensor, generator: torch.Generator) -> int:
    """Accept proposal i with probability min(1, p(x)/q(x)); return the index of the first rejection (or k)."""
    k = px.shape[0]
    r = torch.rand(k, generator=generator, device=px.device, dtype=px.dtype)
    # r < p/q, written without the division so q(x) = 0 cannot produce a NaN.
    rejected = (r * qx >= px).tolist()
    return next((i for i, rej in enumerate(rejected) if rej), k)


def residual(p_row: torch.Tensor, q_row: torch.Tensor | None, proposal: int) -> torch.Tensor:
    """The normalised positive part of p - q, sampled from after a rejection."""
    if q_row is None:
        q_row = torch.zeros_like(p_row)
        q_row[proposal] = 1.0
    res = torch.clamp(p_row - q_row, min=0.0)
    total = res.sum()
    # A rejection implies p(x) < q(x), so the positive part has mass; guard only against round-off, on the
    # device (a host `if` on the sum would be one more synchronisation inside the verification time).
    return torch.where(total > 0, res / total.clamp(min=torch.finfo(res.dtype).tiny), p_row)


def accept_sample(
    proposals: Sequence[int], p: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator
) -> Decision:
    """The exact rule: accept with min(1, p/q); on rejection sample the residual; else a bonus from p."""
    k = len(proposals)
    if k == 0:
        return Decision(0, draw(p[0], generator))
    px, qx = _proposal_probs(proposals, p, q)
    n = _first_rejection(px, qx, generator)
    if n == k:
        return Decision(k, draw(p[k], generator))
    return Decision(n, draw(residual(p[n], None if q is None else q[n], proposals[n]), generator))


def accept_resample_target(
    proposals: Sequence[int], p: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator
) -> Decision:
    """WRONG: after a rejection, draw from the target p instead of the residual.

    Over-represents the tokens the draft already favours (they can be drawn twice: once accepted,
    once resampled)."""
    k = len(proposals)
    if k == 0:
        return Decision(0, draw(p[0], generator))
    px, qx = _proposal_probs(proposals, p, q)
    n = _first_rejection(px, qx, generator)
    return Decision(n, draw(p[n], generator))


def accept_keep_draft(
    proposals: Sequence[int], p: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator
) -> Decision:
    """WRONG: keep every draft token and ignore p. Samples the draft's distribution, not the target's."""
    k = len(proposals)
    return Decision(k, draw(p[k], generator))


SampleRule = Callable[[Sequence[int], torch.Tensor, "torch.Tensor | None", torch.Generator], Decision]

SAMPLING_RULES: dict[str, SampleRule] = {
    "exact": accept_sample,
    "resample-target (wrong)": accept_resample_target,
    "keep-draft (wrong)": accept_keep_draft,
}
