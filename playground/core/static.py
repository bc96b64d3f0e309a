"""A static-cache forward for a Llama-architecture model (Llama, Qwen2), and its CUDA-graph replay.

`StaticLM` has `CachedLM`'s interface (feed, crop, tokens, cache_length) over a KV cache preallocated once per
model: a rollback moves a length, a feed writes its keys and values at their positions. It serves the target
(logits of every fed row, for verification) and, on a GPU, the draft (the last row only).

Two ways to run the same arithmetic:
  sliced    attention over the cached positions only (`keys[:, :, :end]`): the CPU's way, cheapest there.
  captured  positions, the token ids and the row to return read from device buffers, the keys and values written
            with `index_copy_` at those positions, attention over the whole capacity with a mask built from the
            positions: nothing depends on a host value, so a CUDA graph can record it once per feed length and
            replay it (`GraphSet`). Feeds are padded up to a bucket length; padded rows sit after the real ones,
            so the causal mask hides them from every real row, and their keys land at positions the length does
            not count, which later feeds overwrite.
The captured arithmetic runs eagerly too (tests compare it with the sliced one on the CPU, where CI runs).

Why by hand rather than transformers' `StaticCache` and `torch.compile(mode="reduce-overhead")`: compile's CUDA
graph trees are thread-local, while the app replays from Gradio's worker threads; and transformers' eager forward
makes host decisions while building its masks, which a manual capture cannot record. The arithmetic is
core.step's, over the model's own weights.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Sequence

import torch

from ..errors import PlaygroundError
from .cached import CachedLM
from .lean import _layers_of, draft_lm, supports
from .step import RotaryTable, Shapes, attend_and_mlp, norm, rotated

BUCKETS = (1, 2, 3, 5, 9, 17)  # feed lengths captured: a verification of k proposals feeds k + 1 rows (K_MAX 16)
MIN_CAPACITY = 1024


def capacity_for(n: int) -> int:
    """Cache positions for `n` tokens plus the longest bucket's padding, rounded up to a power of two."""
    cap = MIN_CAPACITY
    while cap < n + BUCKETS[-1]:
        cap *= 2
    return cap


class _Cache:
    """The preallocated keys and values of one model (one [capacity, 2, kv heads, head dim] slab per layer: keys
    and values of a position side by side), with the rotary rows and the device buffers a captured feed reads.
    `owner` is the StaticLM using it now: one run at a time (the engine's runs on a device take the device lock
    one at a time); a newer run takes it over, and an older one that feeds again is refused."""

    def __init__(self, model, capacity: int, like: torch.Tensor):
        self.capacity = capacity
        self.shapes = s = Shapes(model.config)
        self.kv = like.new_zeros((model.config.num_hidden_layers, capacity, 2, s.kv_heads, s.head_dim))
        self.rotary = RotaryTable(model, capacity, like, s.heads, s.kv_heads, s.head_dim)
        self.positions = torch.arange(capacity, device=like.device)
        self.zero, self.masked = like.new_zeros(()), like.new_full((), float("-inf"))  # the additive mask's values
        self.ids = torch.zeros(1, BUCKETS[-1], dtype=torch.long, device=like.device)
        self.start = torch.zeros(1, dtype=torch.long, device=like.device)  # the first fed row's position
        self.last = torch.zeros(1, dtype=torch.long, device=like.device)  # the row whose logits a draft returns
        self.owner = None

    def keys(self, layer: int, end: int | None = None) -> torch.Tensor:
        """Layer `layer`'s keys as attention reads them, [1, kv heads, positions, head dim] (a view)."""
        return self.kv[layer, :end, 0].transpose(0, 1)[None]

    def values(self, layer: int, end: int | None = None) -> torch.Tensor:
        return self.kv[layer, :end, 1].transpose(0, 1)[None]


COMPILE_ENV = "PLAYGROUND_COMPILE_STEP"  # "1": torch.compile (inductor) the captured step, then capture that


def step_function(lm: StaticLM, backend: str | None):
    """What a graph records for `lm`: its captured step, or with `backend` that step through torch.compile
    (fullgraph, one static shape per bucket: inductor's fused kernels, captured in the same manual graph, since
    compile's own CUDA-graph trees are thread-local). tests/test_static.py traces it on the CPU."""
    if backend is None:
        return lm._captured
    return torch.compile(lm._captured, fullgraph=True, dynamic=False, backend=backend)


class GraphSet:
    """CUDA graphs of the captured feed, one per bucket length, over one `_Cache`, in a memory pool owned here
    (freed with it). Captured on first use, largest bucket first (smaller ones then reuse its pool's blocks).
    `compile_s`: the warm-up's seconds when $PLAYGROUND_COMPILE_STEP=1 compiled the step (None otherwise)."""

    def __init__(self, lm: StaticLM):
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.compile_s: float | None = None
        self._capture_all(lm, "inductor" if os.environ.get(COMPILE_ENV, "").strip() == "1" else None)

    def _capture_all(self, lm: StaticLM, backend: str | None) -> None:
        cache, step = lm.cache_state, step_function(lm, backend)
        cache.start.zero_()
        side = torch.cuda.Stream(device=cache.ids.device)
        side.wait_stream(torch.cuda.current_stream(cache.ids.device))
        started = time.perf_counter()
        with torch.cuda.stream(side):  # warm-up off the default stream (cuBLAS and allocator setup), as torch advises
            for n in BUCKETS:
                cache.last.fill_(n - 1)
                step(n)  # compiled, this compiles each bucket
        torch.cuda.current_stream(cache.ids.device).wait_stream(side)
        if backend is not None:
            torch.cuda.synchronize(cache.ids.device)
            self.compile_s = time.perf_counter() - started
        for n in sorted(BUCKETS, reverse=True):
            cache.last.fill_(n - 1)
            graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA work (the app's) does not invalidate this capture
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = step(n)
            self.graphs[n] = (graph, out)

    def replay(self, n: int) -> torch.Tensor:
        graph, out = self.graphs[n]
        graph.replay()
        return out


_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (_Cache, GraphSet | None, rows)
_STATE_LOCK = threading.Lock()


def compile_seconds(model) -> float | None:
    """How long `model`'s graphed step took to compile (None: not graphed, or not compiled)."""
    with _STATE_LOCK:
        state = _STATE.get(model)
    return None if state is None or state[1] is None else state[1].compile_s


def release(model) -> None:
    """Drop `model`'s cache and graphs (their memory returns to torch's allocator)."""
    with _STATE_LOCK:
        _STATE.pop(model, None)


class StaticLM:
    """`CachedLM`'s interface over the model's static cache. rows: "all" (a target: logits of every fed row) or
    "last" (a draft: the last row's). graphs: replay CUDA graphs for feeds up to the longest bucket (CUDA only;
    longer feeds, the prompt's prefill, run the same arithmetic eagerly)."""

    def __init__(self, model, device, vocab_size: int | None = None, rows: str = "all", graphs: bool = False,
                 capacity: int = MIN_CAPACITY):
        why = supports(model)
        if why is not None:
            raise PlaygroundError(f"the static-cache forward cannot run this model: {why}")
        if rows not in ("all", "last"):
            raise ValueError(f"rows is 'all' or 'last', got {rows!r}")
        self.model, self.device, self.vocab_size, self.rows = model, torch.device(device), vocab_size, rows
        if graphs and self.device.type != "cuda":
            raise PlaygroundError(f"CUDA graphs need a CUDA device, and this model is on {self.device}")
        self.graphed = graphs
        self.layers = _layers_of(model)
        self.tokens: list[int] = []
        self.written = 0
        self.grown = 0  # times the cache grew after this run's first feed (a reservation before it is no growth)
        self._take(capacity)

    def _take(self, capacity: int) -> None:
        """Take the model's cache (and graphs) for this run, building a larger one when `capacity` needs it."""
        with _STATE_LOCK:
            state = _STATE.get(self.model)
            if state is None or state[0].capacity < capacity or state[2] != self.rows or (state[1] is None) == self.graphed:
                _STATE.pop(self.model, None)
                like = self.model.model.embed_tokens.weight
                with torch.inference_mode():
                    state = [_Cache(self.model, capacity_for(capacity - BUCKETS[-1]), like), None, self.rows]
                    self.cache_state = state[0]
                    if self.graphed:
                        state[1] = GraphSet(self)
                _STATE[self.model] = state
            self.cache_state, self.graph_set = state[0], state[1]
            self.cache_state.owner = weakref.ref(self)  # weak: the module-wide table must not keep a run alive

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def room(self) -> int:
        """Tokens the cache holds before it grows again."""
        return self.cache_state.capacity - BUCKETS[-1]

    def reserve(self, n: int) -> None:
        """Make room for `n` cached tokens (before a run starts, so that it never grows mid-run)."""
        if n > self.room:
            self._grow(n)

    @torch.inference_mode()
    def _grow(self, n: int) -> None:
        """A cache with room for `n` tokens (the next power of two), holding what this one holds: a run grows past
        any first capacity, as a DynamicCache would. The graphs are captured again over the new cache (their
        warm-up writes at the first positions, so the copy comes after)."""
        old, written = self.cache_state, self.written
        if old.owner is None or old.owner() is not self:
            raise PlaygroundError("another run took over this model's static cache; start this run again")
        try:
            self._take(n + BUCKETS[-1])
        except torch.OutOfMemoryError as err:
            raise PlaygroundError(f"the static cache could not grow to {capacity_for(n)} tokens: the device is out "
                                  f"of memory ({err})") from None
        self.cache_state.kv[:, :written].copy_(old.kv[:, :written])
        self.grown += 1 if written else 0

    @torch.inference_mode()
    def feed(self, ids: Sequence[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor | None:
        """Run the model over `ids` (host ids, or a 1-D device tensor of them) appended to the cached context;
        return logits [len(ids), V] (rows "all", unless `last_only`) or [1, V]. A device tensor's ids are not
        known to the host: the caller adds them to `tokens` once it has read them (`DraftModelProposer`)."""
        n = len(ids)
        if n == 0:
            return None
        cache = self.cache_state
        if cache.owner is None or cache.owner() is not self:
            raise PlaygroundError("another run took over this model's static cache; start this run again")
        start, end = self.written, self.written + n
        if end > self.room:
            self._grow(end)
        on_host = not isinstance(ids, torch.Tensor)
        if self.graphed and n <= BUCKETS[-1]:
            logits = self._replay(ids, n, start)
        else:
            tensor = torch.tensor(list(ids), dtype=torch.long, device=self.device) if on_host else ids.view(n)
            logits = self._sliced(tensor, start) if self.device.type == "cpu" else self._eager_captured(tensor, start)
        if on_host:
            self.tokens.extend(int(t) for t in ids)
        self.written = end
        if last_only and logits.shape[0] > 1:
            logits = logits[-1:]
        return logits[:, : self.vocab_size] if self.vocab_size is not None else logits

    def _replay(self, ids, n: int, start: int) -> torch.Tensor:
        cache, bucket = self.cache_state, next(b for b in BUCKETS if b >= n)
        if isinstance(ids, torch.Tensor):
            cache.ids[0, :n].copy_(ids)
        else:
            cache.ids[0, :n].copy_(torch.tensor(list(ids), dtype=torch.long), non_blocking=True)
        cache.start.fill_(start)
        cache.last.fill_(n - 1)
        out = self.graph_set.replay(bucket)
        return (out[:n] if self.rows == "all" else out).clone()  # the graph's output is overwritten by its next replay

    def _eager_captured(self, tensor: torch.Tensor, start: int) -> torch.Tensor:
        """The captured arithmetic run eagerly on a feed of any length (a prefill longer than every bucket)."""
        cache, n = self.cache_state, tensor.shape[-1]
        cache.start.fill_(start)
        cache.last.fill_(n - 1)
        return self._captured(n, tensor.view(n))

    def _captured(self, n: int, ids: torch.Tensor | None = None) -> torch.Tensor:
        """The feed of n rows as a CUDA graph records it: every input read from the cache's device buffers. The
        layer's arithmetic is `core.step`'s; here, once per step: the positions, their rotary rows and the one
        additive mask (causal, and nothing past the feed) every layer shares."""
        cache = self.cache_state
        ids = cache.ids[0, :n] if ids is None else ids
        positions = cache.start + cache.positions[:n]
        rot = cache.rotary.rows(positions)
        mask = torch.where(cache.positions[None, :] <= positions[:, None], cache.zero, cache.masked)
        x = self.model.model.embed_tokens(ids)
        s = cache.shapes
        for i, layer in enumerate(self.layers):
            qkv = rotated(layer, x, rot, s)
            cache.kv[i].index_copy_(0, positions, qkv[:, s.heads:].view(n, 2, s.kv_heads, s.head_dim))
            x = attend_and_mlp(layer, x, qkv[:, : s.heads], cache.keys(i), cache.values(i), mask, s)
        if self.rows == "last":
            x = x.index_select(0, cache.last)
        return self.model.lm_head(norm(x, self.model.model.norm))

    def _sliced(self, ids: torch.Tensor, start: int) -> torch.Tensor:
        """The same arithmetic attending over the cached positions only (the CPU's way; no graph records it)."""
        cache, n = self.cache_state, ids.shape[0]
        end = start + n
        rot = cache.rotary.rows(cache.positions[start:end])
        mask = None if n == 1 else torch.ones(n, end, dtype=torch.bool, device=ids.device).tril(start)
        x = self.model.model.embed_tokens(ids)
        s = cache.shapes
        for i, layer in enumerate(self.layers):
            qkv = rotated(layer, x, rot, s)
            cache.kv[i, start:end] = qkv[:, s.heads:].view(n, 2, s.kv_heads, s.head_dim)
            x = attend_and_mlp(layer, x, qkv[:, : s.heads], cache.keys(i, end), cache.values(i, end), mask, s)
        if self.rows == "last":
            x = x[-1:]
        return self.model.lm_head(norm(x, self.model.model.norm))

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens (later feeds overwrite the rest)."""
        if length > self.written:
            raise ValueError(f"cannot crop a cache of {self.written} tokens to {length}")
        del self.tokens[length:]
        self.written = length

    def cache_length(self) -> int:
        return self.written

    @property
    def cache(self) -> _KVView:
        """The cached keys and values as a DynamicCache's layers read ([1, kv heads, tokens, head dim] each), for
        a drafter that copies the target's prompt KV (`LeanLM.load`)."""
        return _KVView(self.cache_state, self.written)


class _KVLayer:
    def __init__(self, keys, values):
        self.keys, self.values = keys, values


class _KVView:
    def __init__(self, cache: _Cache, n: int):
        self.layers = [_KVLayer(cache.keys(i, n), cache.values(i, n)) for i in range(cache.kv.shape[0])]


# --- choosing a forward ------------------------------------------------------------------------------------------

TARGET_FORWARDS = ("auto", "transformers", "static", "graphed")
TARGET_FORWARD_ENV = "PLAYGROUND_TARGET_FORWARD"
# The target's forward on a CPU under "auto": the static one, measured faster than transformers' DynamicCache
# forward side by side (scripts/bench_static.py; docs/results.md, "The target's forward on a CPU").
CPU_TARGET = "static"


def resolve_forward(forward: str, model, device) -> str:
    """"auto" made concrete for this model and device: graphed on CUDA where the static forward runs the model
    (not split across GPUs by accelerate), else CPU_TARGET on a CPU and transformers' elsewhere."""
    if forward not in TARGET_FORWARDS:
        raise PlaygroundError(f"the target forward must be one of {', '.join(TARGET_FORWARDS)}, got {forward!r}")
    dev = torch.device(device)
    split = len({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()}) > 1
    if forward == "auto":
        if supports(model) is not None or split:
            return "transformers"
        return "graphed" if dev.type == "cuda" else CPU_TARGET
    if forward in ("static", "graphed"):
        why = supports(model) or ("accelerate split it across devices" if split else None)
        if why is not None:
            raise PlaygroundError(f"the {forward} forward cannot run this model: {why}")
        if forward == "graphed" and dev.type != "cuda":
            raise PlaygroundError(f"the graphed forward needs a CUDA device, and the model is on {dev}")
    return forward


def target_lm(pair, n_tokens: int, forward: str | None = None):
    """The target's model with an empty cache for a run of up to `n_tokens` tokens, on the pair's forward
    (`forward`, else `pair.target_forward`, else $PLAYGROUND_TARGET_FORWARD, else auto)."""
    asked = forward or getattr(pair, "target_forward", None) or os.environ.get(TARGET_FORWARD_ENV, "") or "auto"
    mode = resolve_forward(asked.strip().lower(), pair.target, pair.device)
    if mode == "transformers":
        return CachedLM(pair.target, pair.device, pair.vocab_size)
    lm = StaticLM(pair.target, pair.device, pair.vocab_size, rows="all", graphs=mode == "graphed")
    lm.reserve(n_tokens)
    return lm


DRAFT_FORWARDS = ("auto", "lean", "transformers", "static", "graphed")


def draft_model_lm(model, device, vocab_size=None, forward: str = "auto"):
    """A draft model with its cache: graphed on CUDA under "auto" (where the static forward runs it), else the lean
    forward or transformers' (`core.lean.draft_lm`)."""
    if forward not in DRAFT_FORWARDS:
        raise PlaygroundError(f"the draft forward must be one of {', '.join(DRAFT_FORWARDS)}, got {forward!r}")
    dev = torch.device(device)
    if forward == "auto" and dev.type == "cuda" and supports(model) is None:
        forward = "graphed"
    if forward in ("static", "graphed"):
        resolve_forward(forward, model, dev)  # refuses what cannot run, with why
        return StaticLM(model, dev, vocab_size, rows="last", graphs=forward == "graphed")
    return draft_lm(model, dev, vocab_size, "auto" if forward == "auto" else forward)
