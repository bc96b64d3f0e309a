"""The proposers that ship: a draft model, prompt lookup, and the hybrid of the two (the interface they
implement is playground.core.proposal; llama.cpp is playground.drafters.llamacpp)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..constraints.guide import restrict
from ..core.cached import CachedLM, common_prefix
from ..core.lean import LeanLM, supports
from ..core.proposal import EMPTY, LOOKUP_MAX, Proposal, Proposer, RunContext
from ..core.sampling import draw, draw_tensor, probabilities
from ..core.static import StaticLM, draft_model_lm


class DraftModelProposer(Proposer):
    """A smaller causal LM with the target's vocabulary drafts k tokens one step at a time.

    Its cache may lag the committed tokens (it never ran its own last proposal, nor the target's
    correction or bonus token): each `propose` first feeds whatever committed tokens it has not seen."""

    uses_draft_model = True
    confidence_stops = True

    def __init__(self, model: torch.nn.Module, device: torch.device | str, vocab_size: int | None, name: str = "draft",
                 copies_target: bool = False, forward: str = "auto"):
        """copies_target: the model is a quantized copy of the target (ModelPair.draft_copies_target), so its
        `begin` copies the target's cache of the prompt (ctx.target_kv) instead of computing it again.
        forward: "auto" (the lean forward of lean.py where it runs the model, else transformers'), "lean" or
        "transformers"."""
        self.model = model
        self.device = device
        self.vocab_size = vocab_size
        self.name = name
        self.takes_target_kv = copies_target
        self.forward = forward
        self.lm: CachedLM | LeanLM | StaticLM | None = None

    def describe(self) -> str:
        """The name and the forward it runs on (a calibration is kept per description: their step costs differ)."""
        kind = self.forward
        if kind == "auto":
            cuda = torch.device(self.device).type == "cuda"
            kind = "transformers" if supports(self.model) is not None else ("graphed" if cuda else "lean")
        return f"{self.name} ({kind} forward)"

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        super().begin(prompt_ids, ctx)
        self.lm = draft_model_lm(self.model, self.device, self.vocab_size, self.forward)
        if isinstance(self.lm, StaticLM) and ctx.room is not None:
            self.lm.reserve(ctx.room)  # as the target's: a graphed draft then never captures again mid-run
        prefix, target = list(prompt_ids[:-1]), ctx.target_kv
        self.shared_kv = 0
        if self.takes_target_kv and target is not None and target.tokens == prefix:
            # The same layers' keys and values up to the quantization's rounding: a copy, not a second prefill.
            self.lm.load(target.cache, prefix)
            self.shared_kv = len(prefix)
        else:
            self.lm.feed(prefix, last_only=True)

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        lm, ctx = self.lm, self.ctx
        feed = list(tokens[len(lm) :])
        guide = ctx.guide
        if isinstance(lm, StaticLM) and not ctx.stops_on_confidence and guide is None:
            return self._propose_on_device(feed, k)
        out: list[int] = []
        dists = []
        for _ in range(k):
            logits = lm.feed(feed)[-1]
            if guide is not None:  # a constrained run: q is drawn from what the grammar allows, as p is
                logits = restrict(logits, guide.allowed([*tokens, *out]))
            probs = probabilities(logits.unsqueeze(0), ctx.sampling)[0]
            if ctx.sampling.greedy:
                x = int(torch.argmax(logits))
            else:
                x = draw(probs, ctx.generator)
            out.append(x)
            dists.append(probs)
            if x in ctx.stop_ids or not ctx.confident(probs, x):  # nothing after an EOS can be kept
                break
            feed = [x]
        return Proposal(tuple(out), torch.stack(dists))

    def _propose_on_device(self, feed: list[int], k: int) -> Proposal:
        """Draft k tokens with each one fed back to the graphed draft on the device, and read them once at the end:
        one host sync per proposal instead of one per token. Without a stop rule nothing needs a token on the
        host before the end; an EOS cuts the proposal afterwards, as drafting would have stopped there (the
        tokens drafted past it are never proposed, and the rollback drops them from the draft's cache)."""
        lm, ctx = self.lm, self.ctx
        logits = lm.feed(feed)[-1]
        drawn, dists = [], []
        for i in range(k):
            probs = probabilities(logits.unsqueeze(0), ctx.sampling)[0]
            x = torch.argmax(logits) if ctx.sampling.greedy else draw_tensor(probs, ctx.generator)
            drawn.append(x.view(1))
            dists.append(probs)
            if i + 1 < k:
                logits = lm.feed(drawn[-1])[-1]
        out = torch.cat(drawn).tolist()  # the one host sync
        lm.tokens.extend(out[:-1])  # fed as device ids: the cache holds every drafted token but the last
        stop = next((i for i, x in enumerate(out) if x in ctx.stop_ids), None)
        if stop is not None:
            out = out[: stop + 1]
        return Proposal(tuple(out), torch.stack(dists[: len(out)]))

    def rollback(self, tokens: Sequence[int]) -> None:
        # Keep what the cache shares with the committed tokens, but never all of them: the next
        # propose needs at least one unseen token to get logits for the next position.
        keep = min(common_prefix(self.lm.tokens, tokens), len(tokens) - 1)
        self.lm.crop(keep)


class PromptLookupProposer(Proposer):
    """Prompt lookup (n-gram) drafting: find the most recent earlier occurrence of the last n tokens
    in the prompt + generated text and propose what followed it. Longest n first (max_ngram down to
    min_ngram). Proposes nothing when there is no match, so that iteration is a plain step."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, name: str = "prompt-lookup"):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = name

    def describe(self) -> str:
        return f"{self.name} (n-gram {self.min_ngram}..{self.max_ngram})"

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        found = lookup(tokens, k, self.max_ngram, self.min_ngram)
        stop = self.ctx.stop_ids
        for i, x in enumerate(found):
            if x in stop:
                found = found[: i + 1]
                break
        return Proposal(tuple(found)) if found else EMPTY


def lookup(tokens: Sequence[int], k: int, max_ngram: int, min_ngram: int = 1) -> list[int]:
    """Up to k tokens that followed the most recent earlier match of the trailing n-gram."""
    n_tokens = len(tokens)
    if k <= 0:
        return []
    for n in range(min(max_ngram, n_tokens - 1), min_ngram - 1, -1):
        pattern = list(tokens[n_tokens - n :])
        # Most recent first; a match must end before the trailing n-gram itself starts.
        for start in range(n_tokens - n - 1, -1, -1):
            if tokens[start] == pattern[0] and list(tokens[start : start + n]) == pattern:
                cont = list(tokens[start + n : start + n + k])
                if cont:
                    return cont
    return []


class FallbackProposer(Proposer):
    """A free source (no model runs) where it has a proposal worth a target pass, a model drafter otherwise: the
    shared part of the hybrids (HybridProposer: prompt lookup; suffix.SuffixHybridProposer: the suffix tree).

    Each proposal says where it came from (`sources`: the free source's name or "draft"), for the UI's colours
    and the lab's per-source acceptance. The model drafter's cache lags while the free source proposes and
    catches up in one batched pass at its next proposal. A subclass finds the free proposal (`_free_proposal`,
    None to fall back on the model) and keeps its search in `_found`, reset at each begin."""

    def __init__(self, model: Proposer, name: str):
        self.model = model
        self.uses_draft_model = model.uses_draft_model
        self.confidence_stops = model.confidence_stops
        # begin is the free source's indexing (microseconds at most) plus the model drafter's prefill, so it
        # overlaps where that one does.
        self.prefill_overlaps = model.prefill_overlaps
        self.name = name
        self._found: tuple | None = None

    @property
    def takes_target_kv(self) -> bool:
        return self.model.takes_target_kv

    @property
    def shared_kv(self) -> int:
        return self.model.shared_kv

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        super().begin(prompt_ids, ctx)
        self._found = None
        self._begin_free(prompt_ids, ctx)
        self.model.begin(prompt_ids, ctx)

    def _begin_free(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        """Start the free source on a run (prompt lookup needs nothing)."""

    def _free_proposal(self, tokens: Sequence[int], k: int) -> Proposal | None:
        raise NotImplementedError

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        found = self._free_proposal(tokens, k)
        if found is not None:
            return found
        proposal = self.model.propose(tokens, k)
        return Proposal(proposal.tokens, proposal.q, ("draft",) * len(proposal))

    def _rollback_free(self, tokens: Sequence[int]) -> None:
        """Tell the free source what was committed (prompt lookup reads `tokens` afresh each time)."""

    def rollback(self, tokens: Sequence[int]) -> None:
        self._rollback_free(tokens)
        self.model.rollback(tokens)


class HybridProposer(FallbackProposer):
    """Prompt lookup where it finds a match (free: no model runs), the model drafter otherwise.

    Agent output copies a lot (argument values from the prompt, keys of a schema it was shown) between
    stretches of new text; lookup covers the first at no cost, the draft model the second."""

    def __init__(self, model: Proposer, max_ngram: int = 3, min_ngram: int = 2, name: str | None = None):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        super().__init__(model, name or f"hybrid (lookup + {model.name})")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def describe(self) -> str:
        return f"hybrid: prompt lookup (n-gram {self.min_ngram}..{self.max_ngram}) else {self.model.describe()}"

    def _lookup(self, tokens: Sequence[int]) -> list[int]:
        """The lookup continuation (up to K_MAX tokens), kept for the `tokens` it was found for, so that
        next_source and the propose after it search once. Which match is found does not depend on k, so
        the continuation for k is this one's first k tokens."""
        key = (len(tokens), tuple(tokens[-self.max_ngram:]))
        if self._found is None or self._found[0] != key:
            self._found = (key, lookup(tokens, LOOKUP_MAX, self.max_ngram, self.min_ngram))
        return self._found[1]

    def next_source(self, tokens: Sequence[int]) -> str:
        return "lookup" if self._lookup(tokens) else "draft"

    free_source = "lookup"  # the source that runs no model (calibration times it apart: `searcher`)

    def searcher(self, prompt: Sequence[int], ctx: RunContext):
        """A call that makes the free source's search after `prompt` once, as next_source does each iteration."""
        return lambda: lookup(prompt, LOOKUP_MAX, self.max_ngram, self.min_ngram)

    def _free_proposal(self, tokens: Sequence[int], k: int) -> Proposal | None:
        found = self._lookup(tokens)[:k]
        if not found:
            return None
        for i, x in enumerate(found):
            if x in self.ctx.stop_ids:
                found = found[: i + 1]
                break
        return Proposal(tuple(found), sources=("lookup",) * len(found))
