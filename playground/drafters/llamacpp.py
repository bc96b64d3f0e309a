"""A drafter that runs a GGUF (by default the embedded target's own Q4_1 file) in llama.cpp.

The target is the embedded GGUF dequantized to fp32 and run by torch; llama.cpp runs the same
quantized weights several times faster per token on the CPU, so its guesses are nearly always the
target's (acceptance 0.97-1.00 at 0.17-0.35 of a target step: docs/results.md). Run after the target's
prefill, `begin` copies the prompt's KV from the target's cache rather than computing it (llamacpp_kv).

It talks to llama.cpp through llama-cpp-python's low-level C API rather than its `Llama` class:
the model has to be loaded with `use_extra_bufts = False` (ggml's AMX extra buffer type segfaulted on a
CPU with AMX: docs/measuring.md, "Facts the code relies on"), which `Llama()` cannot set; and the hot
path reads the last position's logits only, as a numpy view of llama.cpp's own buffer.

Threads and OpenMP. llama-cpp-python is built with OpenMP (scripts/install_llama_cpp.sh says why), bound to the
one runtime torch loaded first (llamacpp_runtime says how, and refuses a process with two). Draft and
target decode in turn, never at once, so each gets the whole thread budget (torch.get_num_threads()), except a
prefill beside torch's (`prefill_overlaps`), which uses `ctx.prefill_threads` and restores the budget after.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..constraints.guide import restrict
from ..core.cached import common_prefix
from ..core.proposal import EMPTY, Proposal, Proposer, RunContext
from ..core.sampling import draw, probabilities
from ..errors import PlaygroundError
from ..pairs.loading import embedded_gguf_path
from .llamacpp_kv import KvShare
from .llamacpp_runtime import import_llama_cpp, llama_cpp_available
from .vocab_check import check_tokenizer


class LlamaCppProposer(Proposer):
    """Drafts k tokens one at a time with llama.cpp, from a GGUF that shares the target's tokenizer.

    Its KV memory may lag the committed tokens (it never ran its own last proposal, nor the target's
    correction or bonus token): each `propose` first feeds whatever committed tokens it has not seen.
    `kv_tokens` is exactly what llama.cpp's memory holds, position by position."""

    name = "llama.cpp"
    uses_draft_model = False
    confidence_stops = True
    prefill_overlaps = True  # host-synchronous, GIL-free C calls, outside torch's thread pool

    def __init__(
        self,
        tokenizer=None,
        gguf_path: str | os.PathLike | None = None,
        vocab_size: int | None = None,
        n_ctx: int | None = None,
        n_batch: int = 512,
        target_config=None,
    ):
        """tokenizer: the target's (its ids are checked against the GGUF's; None skips the check).
        gguf_path: default the embedded SmolLM2 GGUF. vocab_size: logits columns the target uses
        (default: the tokenizer's length). n_ctx: default the model's training context.
        target_config: the config of a target dequantized from this same GGUF, whose cache of the prompt
        `begin` then copies instead of prefilling (llamacpp_kv); None: it always prefills."""
        ok, why = llama_cpp_available()
        if not ok:
            raise PlaygroundError(f"the llama.cpp drafter is not available: {why}")
        self._ll = import_llama_cpp()
        path = Path(embedded_gguf_path() if gguf_path is None else gguf_path)
        if not path.is_file():
            raise PlaygroundError(f"no GGUF file at {str(path)!r}")
        self.gguf_path = path
        model = self._load_model(path)
        self._size(model, tokenizer, vocab_size, n_ctx, n_batch)
        self.n_threads = max(1, torch.get_num_threads())  # the whole budget: what drafting uses
        self._threads_set = self.n_threads  # what the context is set to now (less during an overlapped prefill)
        self._make_context(model)
        self._make_batch()
        self.kv_tokens: list[int] = []
        self.device = torch.device("cpu")
        self.kv_share, self.kv_share_note = KvShare.check(self._ll, model, self._ctx, self._memory,
                                                          lambda ids: self._eval(ids, logits=False), target_config)
        self.kv_tokens = []
        self.share_kv = True  # benchmarks turn it off to time the drafter's own prefill
        self.shared_kv = 0  # prompt positions the last begin copied from the target

    def _load_model(self, path: Path):
        ll = self._ll
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = False  # the AMX / repack buffer types: see the module docstring
        model = ll.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise PlaygroundError(f"llama.cpp could not load {path.name} (is it a GGUF model file?)")
        # Native handles are freed when the proposer is collected (or by close()), whatever happens after this.
        self._native = _Native(ll, model)
        self._finalizer = weakref.finalize(self, self._native.free)
        return model

    def _size(self, model, tokenizer, vocab_size: int | None, n_ctx: int | None, n_batch: int) -> None:
        """The vocabulary (checked against the target's), the context length and the batch size."""
        ll = self._ll
        self._vocab = ll.llama_model_get_vocab(model)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self._vocab))
        n_train = int(ll.llama_model_n_ctx_train(model))
        self.n_ctx = int(n_ctx or n_train)
        self.n_batch = int(min(n_batch, self.n_ctx))
        self.vocab_size = int(vocab_size if vocab_size is not None else (len(tokenizer) if tokenizer else self.n_vocab))
        if self.vocab_size > self.n_vocab:
            raise PlaygroundError(
                f"{self.gguf_path.name} has {self.n_vocab} tokens but the target uses {self.vocab_size}; a drafter "
                "must share the target's vocabulary"
            )
        if tokenizer is not None:
            check_tokenizer(self, tokenizer)

    def _make_context(self, model) -> None:
        ll = self._ll
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = self.n_ctx
        cparams.n_batch = self.n_batch
        cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = self.n_threads
        cparams.n_threads_batch = self.n_threads
        cparams.no_perf = True
        ctx = ll.llama_init_from_model(model, cparams)
        if not ctx:
            raise PlaygroundError(f"llama.cpp could not create a context of {self.n_ctx} tokens for "
                                  f"{self.gguf_path.name}")
        self._ctx = self._native.ctx = ctx
        self._memory = ll.llama_get_memory(ctx)

    def _make_batch(self) -> None:
        """One batch, reused: numpy views of its arrays make filling it a few vector assignments."""
        batch = self._ll.llama_batch_init(self.n_batch, 0, 1)
        self._batch = self._native.batch = batch
        n = self.n_batch
        self._b_token = np.ctypeslib.as_array(batch.token, shape=(n,))
        self._b_pos = np.ctypeslib.as_array(batch.pos, shape=(n,))
        self._b_logits = np.ctypeslib.as_array(batch.logits, shape=(n,))
        np.ctypeslib.as_array(batch.n_seq_id, shape=(n,))[:] = 1
        for i in range(n):  # one sequence (id 0) for every slot, set once
            batch.seq_id[i][0] = 0

    @property
    def takes_target_kv(self) -> bool:
        return self.kv_share is not None and self.share_kv

    # --- the proposer interface ---------------------------------------------------------------

    def begin(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        super().begin(prompt_ids, ctx)
        # Drafting gets all threads (torch's count, the same in a worker thread).
        self.n_threads = max(1, torch.get_num_threads())
        # Beside the target's prefill only its share; the whole budget is back before any propose.
        self._set_threads(ctx.prefill_threads or self.n_threads)
        try:
            self._prefill(prompt_ids, ctx)
        finally:
            self._set_threads(self.n_threads)

    def _prefill(self, prompt_ids: Sequence[int], ctx: RunContext) -> None:
        # q goes where the target's p is (the generator's device); llama.cpp itself runs on the CPU.
        self.device = ctx.generator.device
        # Keep the KV of whatever prefix this prompt shares with what the context last held (an agent's
        # system prompt and tool list repeat from call to call): prefill only the rest. Rollback is exact
        # (seq_rm + position counter, tested), so this is the same state a full prefill reaches, up to
        # llama.cpp's batch-shape rounding, which can only change a proposal, never the output.
        prefix = [int(t) for t in prompt_ids[:-1]]
        keep = common_prefix(self.kv_tokens, prefix)
        self.shared_kv = 0
        if self.takes_target_kv and len(prefix) - keep >= KvShare.MIN_TOKENS:
            try:
                if self.kv_share.load(ctx.target_kv, prefix):
                    self.kv_tokens, self.shared_kv, self.reused_prefix = prefix, len(prefix), 0
                    return
            except RuntimeError:  # llama.cpp refused it and emptied the sequence: prefill it all here
                keep = 0
        if keep == 0:
            self._ll.llama_memory_clear(self._memory, False)  # metadata only: no 100 MB memset
            self.kv_tokens = []
        else:
            self._truncate(keep)
        self.reused_prefix = keep
        self._eval(prefix[keep:], logits=False)

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        ctx = self.ctx
        sampling = ctx.sampling
        kv = self.kv_tokens
        if len(kv) >= len(tokens) or kv != list(tokens[: len(kv)]):  # not rolled back since last time
            self.rollback(tokens)
        feed = [int(t) for t in tokens[len(self.kv_tokens) :]]
        # Room in llama.cpp's context: the feed plus k - 1 proposals go into the KV memory.
        k = min(k, self.n_ctx - len(tokens) + 1)
        if k <= 0:
            return EMPTY
        out: list[int] = []
        rows = torch.empty((k, self.vocab_size), dtype=torch.float32, device=self.device)
        on_cpu = self.device.type == "cpu"
        for i in range(k):
            logits = self._eval(feed, logits=True)
            if not on_cpu:
                logits = logits.to(self.device)
            if ctx.guide is not None:  # a constrained run: q is drawn from what the grammar allows, as p is
                logits = restrict(logits, ctx.guide.allowed([*tokens, *out]))
            if sampling.greedy:
                x = int(torch.argmax(logits))
                rows[i] = logits
                go_on = not ctx.stops_on_confidence or ctx.confident(torch.softmax(logits, -1), x)
            else:
                probs = probabilities(logits.unsqueeze(0), sampling)[0]
                x = draw(probs, ctx.generator)
                rows[i] = probs
                go_on = ctx.confident(probs, x)
            out.append(x)
            if x in ctx.stop_ids or not go_on:  # nothing after an end-of-sequence token can be kept
                break
            feed = [x]
        n = len(out)
        q = probabilities(rows[:n], sampling) if sampling.greedy else rows[:n]
        return Proposal(tuple(out), q)

    def rollback(self, tokens: Sequence[int]) -> None:
        # Keep what the KV shares with the committed tokens, but never all of them: the next propose
        # needs at least one unseen token to get logits for the next position.
        keep = min(common_prefix(self.kv_tokens, tokens), len(tokens) - 1)
        self._truncate(keep)

    def describe(self) -> str:
        shared = ", prompt KV from the target" if self.takes_target_kv else ""
        return f"{self.name} ({self.gguf_path.name}, {self.n_threads} threads{shared})"

    def forget(self) -> None:
        """Drop the KV memory: the next begin prefills its whole prompt, as a first call (benchmarks)."""
        self._ll.llama_memory_clear(self._memory, False)
        self.kv_tokens = []

    # --- llama.cpp -------------------------------------------------------------------------------

    def _set_threads(self, n: int) -> None:
        if n != self._threads_set:
            self._ll.llama_set_n_threads(self._ctx, n, n)
            self._threads_set = n

    def kv_length(self) -> int:
        """What llama.cpp's memory itself says it holds (tests compare it with len(kv_tokens))."""
        return int(self._ll.llama_memory_seq_pos_max(self._memory, 0)) + 1

    def _truncate(self, keep: int) -> None:
        """Forget KV positions keep.. ; our position counter (len(kv_tokens)) follows, or the next
        decode is refused (its positions would not continue the sequence)."""
        if keep >= len(self.kv_tokens):
            return
        if not self._ll.llama_memory_seq_rm(self._memory, 0, keep, -1):
            raise RuntimeError(f"llama.cpp refused to remove KV positions {keep}.. (partial removal unsupported?)")
        del self.kv_tokens[keep:]

    def _eval(self, ids: list[int], logits: bool) -> torch.Tensor | None:
        """Append `ids` to the KV memory; with logits=True return the last position's logits [vocab_size]
        as a view of llama.cpp's buffer (valid until the next decode)."""
        ll = self._ll
        for start in range(0, len(ids), self.n_batch):
            chunk = ids[start : start + self.n_batch]
            n, pos = len(chunk), len(self.kv_tokens)
            if pos + n > self.n_ctx:
                raise PlaygroundError(f"the llama.cpp drafter's context ({self.n_ctx} tokens) is full")
            self._b_token[:n] = chunk
            self._b_pos[:n] = np.arange(pos, pos + n, dtype=self._b_pos.dtype)
            self._b_logits[:n] = 0
            last = logits and start + n == len(ids)
            if last:
                self._b_logits[n - 1] = 1
            self._batch.n_tokens = n
            rc = ll.llama_decode(self._ctx, self._batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} at position {pos} ({n} tokens)")
            self.kv_tokens.extend(chunk)
        if not logits:
            return None
        ptr = ll.llama_get_logits_ith(self._ctx, -1)
        if not ptr:
            raise RuntimeError("llama.cpp returned no logits for the last position")
        return torch.from_numpy(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)))[: self.vocab_size]

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's token ids for `text`: special tokens parsed, no BOS/EOS added."""
        ll = self._ll
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, False, True)
        if n < 0:  # not enough room: -n is what it needs
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, False, True)
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n})")
        return list(buf[:n])

    def close(self) -> None:
        """Free llama.cpp's model, context and batch now (otherwise when the proposer is collected)."""
        self._finalizer()


class _Native:
    """llama.cpp's model, context and batch, freed once, context before model."""

    def __init__(self, ll, model):
        self.ll, self.model, self.ctx, self.batch = ll, model, None, None

    def free(self) -> None:
        ll = self.ll
        if self.batch is not None:
            ll.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx is not None:
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model is not None:
            ll.llama_model_free(self.model)
            self.model = None
