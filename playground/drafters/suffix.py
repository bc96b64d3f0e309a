"""Suffix decoding (SuffixDecoding, arXiv 2411.04975; Arctic Inference): draft the continuation of the
longest match of the last tokens in a suffix tree over the current prompt and output and over the agent's
earlier responses (a bounded `SuffixCache`, suffix_cache.py). No model runs, so a proposal costs microseconds.

Its length follows the match: at most `max_spec_factor` * match length + `max_spec_offset` tokens, none the
tree gives less than `min_token_prob`, and never more than the loop's k (fixed or adaptive). The loop verifies
a chain, so the drafter takes the tree's most probable path, not a tree of paths.

The factor is 4, not vLLM's 1, tuned on a trace of other agent tasks than the one the docs report on
(scripts/suffix_factor.py; its table is in docs/drafters.md): after a short match the tree has seen whole,
a long draft is accepted often enough to pay for the wider verification.

`SuffixHybridProposer`: the suffix tree where its match is worth verifying (its expected accepted tokens,
the sum of its path's probabilities, reach `min_score`), a model drafter otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.proposal import EMPTY, LOOKUP_MAX, Proposal, Proposer, RunContext
from .proposers import FallbackProposer
from .suffix_cache import NO_DRAFT, Draft, SuffixCache

SOURCE = "suffix"
MAX_SPEC_FACTOR = 4.0  # tuned on a held-out trace (the module docstring)


class SuffixProposer(Proposer):
    """Suffix-tree drafting over the run's own context and `cache`'s earlier responses.

    Each run is one request in the cache: `begin` starts it with the prompt, and the committed output is
    appended as it grows (in `rollback`, after every verification, and before each proposal), so the run's
    whole response is in the cache for the runs after it."""

    def __init__(self, cache: SuffixCache | None = None, max_spec_factor: float | None = None,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1, name: str = "suffix"):
        # None: MAX_SPEC_FACTOR as it is now (scripts/suffix_factor.py sets it for the replays that tune it)
        max_spec_factor = MAX_SPEC_FACTOR if max_spec_factor is None else max_spec_factor
        if max_spec_factor <= 0 or not 0.0 <= min_token_prob <= 1.0:
            raise ValueError(f"need max_spec_factor > 0 and 0 <= min_token_prob <= 1, "
                             f"got {max_spec_factor}, {min_token_prob}")
        self.cache = cache if cache is not None else SuffixCache()
        self.max_spec_factor = max_spec_factor
        self.max_spec_offset = max_spec_offset
        self.min_token_prob = min_token_prob
        self.name = name
        self._run: int | None = None
        self._seen = 0
        self.last: Draft = NO_DRAFT

    def describe(self) -> str:
        return (f"{self.name} (suffix tree, length <= {self.max_spec_factor:g} x match"
                f"{f' + {self.max_spec_offset:g}' if self.max_spec_offset else ''}, p >= {self.min_token_prob:g})")

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        super().begin(prompt_ids, ctx)
        self._run = self.cache.start(prompt_ids)
        self._seen = len(prompt_ids)
        self.last = NO_DRAFT

    def _sync(self, tokens: Sequence[int]) -> None:
        """Append the committed tokens the cache has not seen. Committed tokens only grow within a run, so
        what it saw is a prefix of `tokens` (a shorter `tokens`, as calibration's rollbacks pass, adds nothing)."""
        if len(tokens) > self._seen:
            self.cache.extend(self._run, tokens[self._seen:])
            self._seen = len(tokens)

    def draft(self, tokens: Sequence[int], k: int, committed: int | None = None) -> Draft:
        """The tree's best path after `tokens`, at most k long (cut after a stop token). committed: how many of
        `tokens` are committed (the cache learns only those); None: all of them."""
        self._sync(tokens if committed is None else tokens[:committed])
        d = self.cache.speculate(self._run, tokens, k, self.max_spec_factor, self.max_spec_offset,
                                 self.min_token_prob)
        stop = self.ctx.stop_ids
        for i, x in enumerate(d.tokens):
            if x in stop:  # nothing after an EOS can be kept
                d = Draft(d.tokens[: i + 1], d.probs[: i + 1], sum(d.probs[: i + 1]), d.match_len)
                break
        self.last = d
        return d

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        d = self.draft(tokens, k)
        return Proposal(d.tokens, sources=(SOURCE,) * len(d.tokens)) if d.tokens else EMPTY

    def propose_after(self, tokens: Sequence[int], extra: Sequence[int], k: int) -> Proposal:
        d = self.draft([*tokens, *extra], k, committed=len(tokens))
        return Proposal(d.tokens, sources=(SOURCE,) * len(d.tokens)) if d.tokens else EMPTY

    def rollback(self, tokens: Sequence[int]) -> None:
        self._sync(tokens)


class SuffixHybridProposer(FallbackProposer):
    """The suffix tree where it has a match worth its verification, the model drafter otherwise.

    Worth it: the tree's path (up to K_MAX tokens) is expected to yield at least `min_score` accepted tokens
    (the sum of its probabilities, SuffixDecoding's score). Below that, a target pass spent on its guess
    would be better spent on the model's."""

    def __init__(self, model: Proposer, suffix: SuffixProposer | None = None, min_score: float = 1.0,
                 name: str | None = None):
        if min_score < 0:
            raise ValueError(f"need min_score >= 0, got {min_score}")
        super().__init__(model, name or f"suffix hybrid (suffix + {model.name})")
        self.suffix = suffix if suffix is not None else SuffixProposer()
        self.min_score = min_score

    def describe(self) -> str:
        return f"hybrid: {self.suffix.describe()} where its score >= {self.min_score:g}, else {self.model.describe()}"

    def _begin_free(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        self.suffix.begin(prompt_ids, ctx)

    def _suffix_draft(self, tokens: Sequence[int]) -> Draft:
        """The tree's K_MAX-token path for `tokens`, kept so that next_source and the propose after it
        search once (the tree is only appended to, so the same length means the same tokens here)."""
        if self._found is None or self._found[0] != len(tokens):
            self._found = (len(tokens), self.suffix.draft(tokens, LOOKUP_MAX))
        return self._found[1]

    def next_source(self, tokens: Sequence[int]) -> str:
        d = self._suffix_draft(tokens)
        return SOURCE if d.tokens and d.score >= self.min_score else "draft"

    free_source = SOURCE  # the source that runs no model (calibration times it apart: `searcher`)

    def searcher(self, prompt: Sequence[int], ctx: RunContext):
        """A call that makes the tree's search after `prompt` once, as next_source does each iteration (the
        tree starts a run over `prompt`; it holds no output, so the cache keeps nothing of it)."""
        self.suffix.begin(prompt, ctx)
        return lambda: self.suffix.draft(prompt, LOOKUP_MAX)

    def _free_proposal(self, tokens: Sequence[int], k: int) -> Proposal | None:
        if self.next_source(tokens) != SOURCE:
            return None
        found = self._suffix_draft(tokens).tokens[:k]
        return Proposal(found, sources=(SOURCE,) * len(found))

    def _rollback_free(self, tokens: Sequence[int]) -> None:
        self.suffix.rollback(tokens)
