"""The suffix drafter's memory: a bounded cache of an agent's earlier responses, in a suffix tree.

The trees (SuffixDecoding's two: one over the current request, a global one over earlier responses) are Arctic
Inference's (`arctic_inference.suffix_decoding`, C++ through nanobind; built by
scripts/install_arctic_inference.sh without vLLM or CUDA). This module adds what it lacks: a limit on the
cached *tokens* beside its limit on responses, eviction of the oldest responses when either bites, the
count of the responses evicted and a sentence saying so, and one owner per cache.

A cache belongs to one agent as a live one would build it: one per browser tab, per lab arm, per replayed
trace (turn by turn in file order). It is an object passed to the drafter, never a module global, and it
serves one run at a time: starting a run ends the one before (its prompt tree is dropped; its response
stays cached), so a run that was abandoned midway holds no memory.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PlaygroundError

ARCTIC_INSTALL_HINT = "run `bash scripts/install_arctic_inference.sh .venv` (part of `make setup`)"
MAX_TREE_DEPTH = 64  # the longest match and continuation the trees index (Arctic Inference's default)


def suffix_tree_available() -> tuple[bool, str]:
    """(True, what) when arctic-inference's suffix tree imports; (False, why not) otherwise. Never raises."""
    if importlib.util.find_spec("arctic_inference") is None:
        return False, f"arctic-inference is not installed: {ARCTIC_INSTALL_HINT}"
    try:
        _tree_module()
    except Exception as e:  # noqa: BLE001  a broken build: missing extension, wrong glibc, ...
        return False, f"arctic-inference is installed but its suffix tree does not load ({type(e).__name__}: {e}); {ARCTIC_INSTALL_HINT}"
    return True, "arctic-inference's suffix tree"


def _tree_module():
    # Imported on first use, not at import time: the playground runs without it (the drafter then says why).
    from arctic_inference.suffix_decoding import cache

    return cache


@dataclass(frozen=True)
class Draft:
    """A continuation from the trees: the tokens of the best path, the tree's estimate of each token's
    probability (its frequency after the match), their sum (`score`, the expected accepted count) and the
    length of the context match it followed."""

    tokens: tuple[int, ...]
    probs: tuple[float, ...]
    score: float
    match_len: int


NO_DRAFT = Draft((), (), 0.0, 0)


class SuffixCache:
    """Earlier responses in a global suffix tree, bounded by `max_responses` and `max_tokens` (the oldest go
    first), plus the current run's prompt and output in a tree of its own.

    Thread-safe (one lock): two tabs never share a cache, but a tab's "forget" may come while it runs."""

    def __init__(self, max_responses: int = 256, max_tokens: int = 100_000, max_depth: int = MAX_TREE_DEPTH):
        if max_responses < 1 or max_tokens < 1:
            raise PlaygroundError(f"the suffix cache needs room for at least one response and one token, "
                                  f"got max_responses={max_responses}, max_tokens={max_tokens}")
        if not 2 <= max_depth <= 1024:
            raise PlaygroundError(f"the suffix tree's depth must be 2..1024, got {max_depth}")
        ok, why = suffix_tree_available()
        if not ok:
            raise PlaygroundError(f"the suffix drafter cannot run here: {why}")
        self.max_responses = max_responses
        self.max_tokens = max_tokens
        self.max_depth = max_depth
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._reset()

    def _reset(self) -> None:
        # The responses limit is enforced here (with the tokens'), so the trees' own FIFO is off (-1).
        self._trees = _tree_module().SuffixDecodingCache(max_tree_depth=self.max_depth, max_cached_requests=-1)
        self._sizes: OrderedDict[int, int] = OrderedDict()  # cached response -> its tokens, oldest first
        self._active: int | None = None
        self.evicted_responses = 0
        self.truncated = 0  # responses that alone outgrew max_tokens and stopped being cached

    # -- one run ------------------------------------------------------------------------------------------
    def start(self, prompt_ids: Sequence[int]) -> int:
        """Begin a run over `prompt_ids`: ends the previous run, and returns the new run's id."""
        with self._lock:
            if self._active is not None:
                self._trees.stop_request(self._active)
                if self._sizes.get(self._active) == 0:  # a run that produced nothing (a calibration's) is no response
                    del self._sizes[self._active]
                    self._trees.evict_cached_response(self._active)
            run = next(self._ids)
            self._trees.start_request(run, [int(t) for t in prompt_ids])
            self._sizes[run] = 0
            self._active = run
            self._evict(keep=run)
            return run

    def extend(self, run: int, tokens: Sequence[int]) -> None:
        """Append the run's newly committed output tokens (to its own tree and, while it is cached, to the
        global one). A run that is no longer the active one (a newer run started) is ignored."""
        if not tokens:
            return
        with self._lock:
            if run != self._active:
                return
            self._trees.add_active_response(run, [int(t) for t in tokens])
            if run in self._sizes:
                self._sizes[run] += len(tokens)
                if self._sizes[run] > self.max_tokens:
                    # This response alone is over the limit: it keeps only its own tree (for this run).
                    del self._sizes[run]
                    self._trees.evict_cached_response(run)
                    self.truncated += 1
                else:
                    self._evict(keep=run)

    def speculate(self, run: int, context: Sequence[int], max_tokens: int, max_spec_factor: float,
                  max_spec_offset: float, min_token_prob: float) -> Draft:
        """The best path from either tree after the longest matches of `context`'s end (SuffixDecoding's
        speculation: at most max_tokens, at most max_spec_factor * match length + max_spec_offset, and no
        token the tree gives less than min_token_prob)."""
        if max_tokens <= 0:
            return NO_DRAFT
        with self._lock:
            if run != self._active:
                return NO_DRAFT
            tail = [int(t) for t in context[-self.max_depth:]]
            d = self._trees.speculate(run, tail, max_spec_tokens=max_tokens, max_spec_factor=max_spec_factor,
                                      max_spec_offset=max_spec_offset, min_token_prob=min_token_prob)
        return Draft(tuple(d.token_ids), tuple(d.probs), float(d.score), int(d.match_len))

    # -- the cache as a whole -----------------------------------------------------------------------------
    def add_response(self, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> None:
        """Cache one earlier turn without running it (history recorded elsewhere)."""
        run = self.start(prompt_ids)
        self.extend(run, response_ids)

    def clear(self) -> None:
        """Forget every response (the browser's "forget" button)."""
        with self._lock:
            self._reset()

    @property
    def responses(self) -> int:
        """The cached responses (the active run counts once it has output)."""
        return sum(1 for n in self._sizes.values() if n)

    @property
    def tokens(self) -> int:
        return sum(self._sizes.values())

    def memory_bytes(self) -> int:
        """The global tree's own estimate of its memory (Arctic Inference's SuffixTree.estimate_memory)."""
        with self._lock:
            return int(self._trees._global_tree.estimate_memory())

    def _evict(self, keep: int) -> None:
        """Drop the oldest responses (never `keep`, the active one) while either limit is exceeded."""
        while len(self._sizes) > self.max_responses or sum(self._sizes.values()) > self.max_tokens:
            oldest = next((r for r in self._sizes if r != keep), None)
            if oldest is None:
                return
            del self._sizes[oldest]
            self.evicted_responses += 1
            self._trees.evict_cached_response(oldest)

    def describe(self) -> str:
        """How many responses the tree holds, and what a limit did, in a sentence for the UI and the CLI."""
        held = f"the suffix cache holds {self.responses} response{'s' * (self.responses != 1)} ({self.tokens:,} tokens)"
        notes = []
        if self.evicted_responses:
            notes.append(f"{self.evicted_responses} older response{'s' * (self.evicted_responses != 1)} evicted "
                         f"to stay within {self.max_responses} responses and {self.max_tokens:,} tokens")
        if self.truncated:
            notes.append(f"{self.truncated} response{'s' * (self.truncated != 1)} longer than {self.max_tokens:,} "
                         "tokens not kept for later runs")
        return held + ("; " + "; ".join(notes) if notes else "")
