"""Where guesses come from.

A proposer is a small object with one life per run:
  begin(prompt_ids, ctx)   prefill whatever state it keeps (a draft model's cache)
  propose(tokens, k)       up to k proposed next tokens for the committed `tokens`, with the
                           proposer's distribution q over each (None when proposals are deterministic)
  rollback(tokens)         after verification: forget everything not in the new committed `tokens`
A new drafting method is a new proposer, never a new loop (transformers' CandidateGenerator shape).

A proposer with `prefill_overlaps` may have its `begin` run in a worker thread beside the target's prefill
(engine.speculative_generate): `Proposer.prefill_overlaps` says when that pays.
"""


from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .sampling import SamplingConfig


@dataclass(frozen=True)
class Proposal:
    tokens: tuple[int, ...]
    # The proposer's distribution at each proposed position, [len(tokens), V], as sampled from
    # (warped like the target's). None for a deterministic proposer: q is then a point mass.
    q: torch.Tensor | None = None
    sources: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY = Proposal(())
# The source of the tokens a grammar forces (constrained runs, the schema+ drafters): kept, they are role FORCED.
FORCED_SOURCE = "schema"
LOOKUP_MAX = 16  # the longest lookup continuation kept (the loop's K_MAX)


@dataclass
class RunContext:
    """What a proposer needs to know about the run it serves."""

    sampling: SamplingConfig
    generator: torch.Generator
    stop_ids: frozenset[int] = field(default_factory=frozenset)
    # Stop drafting early, after a token the drafter itself gave less than this probability (as
    # transformers' assistant_confidence_threshold does); None drafts all k.
    min_confidence: float | None = None
    # Set only while `begin` runs beside the target's prefill (Proposer.prefill_overlaps): the threads the
    # proposer's prefill may use then, leaving the rest to the target's. None: begin runs alone, and
    # may use the whole thread budget.
    prefill_threads: int | None = None
    # Set only while `begin` runs after the target's prefill (in turn): the target's CachedLM, holding the
    # prompt but its last token. A drafter that runs the target's own weights may copy that KV instead of
    # computing it (Proposer.takes_target_kv); nothing may change it.
    target_kv: object | None = None
    # The most tokens the run's caches may hold (the prompt, the new tokens, a longest proposal): a drafter with a
    # preallocated cache reserves it at `begin`, so that it does not grow mid-run. None: not known.
    room: int | None = None

    # Set per iteration by a k controller that decides, token by token, whether drafting on pays
    # (AdaptiveK.drafting_rule): called with the drafter's probability of each proposal and the highest it gave
    # any other token (`top_two`), True to go on.
    go_on: Callable[[float, float], bool] | None = None

    # A constrained run's guide (playground.constraints.guide.Guide), None otherwise: a model drafter masks each
    # drafting step's logits with `guide.allowed(tokens + drafted)` before it chooses, so its q is the grammar's too
    # (the exact rule needs p and q both masked); the schema+ drafters propose its `forced` tokens.
    guide: object | None = None

    @property
    def stops_on_confidence(self) -> bool:
        """Whether `confident` can say stop (a drafter may skip computing probabilities when it cannot)."""
        return self.min_confidence is not None or self.go_on is not None

    def confident(self, probs: torch.Tensor, token: int) -> bool:
        """Whether drafting may go on after `token`, drawn from (or the argmax of) `probs`."""
        if not self.stops_on_confidence:
            return True
        if self.go_on is None:
            return float(probs[token]) >= self.min_confidence
        q, second = top_two(probs, token)
        if self.min_confidence is not None and q < self.min_confidence:
            return False
        return self.go_on(q, second)


def top_two(probs: torch.Tensor, token: int) -> tuple[float, float]:
    """`token`'s probability in `probs` and the highest of any other token's (the runner-up), read back in one
    transfer (one device sync, inside the draft's timed bucket). The runner-up is a copy's max with that token
    zeroed, not torch.topk(probs, 2): both values in 31 against 103 microseconds over a 49152-token vocabulary
    (AMD EPYC, 2 threads), paid on every proposal the stop rule judges."""
    rest = probs.clone()
    rest[token] = 0.0
    q, second = torch.stack((probs[token], rest.max())).tolist()
    return q, second


class Proposer(ABC):
    name: str = "proposer"
    uses_draft_model: bool = False
    # Whether `begin` may run in a worker thread beside the target's prefill: it pays only where begin spends its time
    # in native code that releases the GIL, queues no device work, and stays off torch's intra-op pool (llama.cpp;
    # not a torch draft model, whose prefill would compete for torch's threads). Such a begin reads ctx.prefill_threads.
    prefill_overlaps: bool = False
    # Whether `begin` copies the prompt's KV from the target's cache (ctx.target_kv) rather than computing
    # it: it then runs after the target's prefill, never beside it. `shared_kv`: the prompt positions the
    # last begin copied.
    takes_target_kv: bool = False
    shared_kv: int = 0
    # Whether `propose` honours ctx.min_confidence (a model drafter stops on its own probabilities; prompt lookup
    # has none, so a confidence stop changes nothing it does).
    confidence_stops: bool = False

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def propose(self, tokens: Sequence[int], k: int) -> Proposal: ...

    def propose_after(self, tokens: Sequence[int], extra: Sequence[int], k: int) -> Proposal:
        """Up to k proposals continuing the committed `tokens` followed by `extra`, tokens another source proposed
        first this iteration (the schema+ drafters' forced tokens): context, not committed text."""
        return self.propose([*tokens, *extra], k)

    def rollback(self, tokens: Sequence[int]) -> None:
        pass

    def next_source(self, tokens: Sequence[int]) -> str | None:
        """Where the next proposal for `tokens` would come from, for a drafter with several sources
        (their costs differ, so k is chosen per source); None for a drafter with one."""
        return None

    def describe(self) -> str:
        return self.name
