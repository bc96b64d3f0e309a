"""A causal LM with its own KV cache and the list of tokens that cache holds.

Every side of the loop (the target, a draft model, plain decoding) uses this one helper, so there is
one place that knows how transformers 5.x wants a cache passed (`cache=`) and cut (`crop` with a
negative count of tokens to drop).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from ..compat import require_transformers


class CachedLM:
    def __init__(self, model: torch.nn.Module, device: torch.device | str, vocab_size: int | None = None):
        require_transformers()  # an older transformers would ignore `cache=` below and run without a cache
        self.model = model
        self.device = torch.device(device)
        self.vocab_size = vocab_size  # logits columns past the tokenizer's vocabulary (padding) are dropped
        self.cache = DynamicCache(config=model.config)
        self.tokens: list[int] = []  # exactly the tokens whose keys/values are in the cache

    def __len__(self) -> int:
        return len(self.tokens)

    @torch.inference_mode()
    def feed(self, ids: Sequence[int], last_only: bool = False) -> torch.Tensor | None:
        """Run the model over `ids` appended to the cached context; return logits [len(ids), V] (or [1, V])."""
        if not ids:
            return None
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        out = self.model(input_ids=input_ids, cache=self.cache, use_cache=True, logits_to_keep=1 if last_only else 0)
        self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
        self.tokens.extend(ids)
        logits = out.logits[0]
        if self.vocab_size is not None:
            logits = logits[:, : self.vocab_size]
        return logits

    @torch.inference_mode()
    def load(self, cache, tokens: Sequence[int]) -> None:
        """Hold a copy of `cache`, which holds `tokens`: another CachedLM's DynamicCache, or the layers' keys and
        values of a static cache (`core.static.StaticLM.cache`, the CPU target's default), of the same layer
        shapes. Later feeds and crops leave the original as it was."""
        if isinstance(cache, DynamicCache):
            self.cache = copy.deepcopy(cache)
        else:
            self.cache = DynamicCache(config=self.model.config)
            for i, layer in enumerate(cache.layers):
                self.cache.update(layer.keys.clone(), layer.values.clone(), i)
        self.tokens = list(tokens)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens (DynamicCache.crop takes the number to drop, negated)."""
        drop = len(self.tokens) - length
        if drop < 0:
            raise ValueError(f"cannot crop a cache of {len(self.tokens)} tokens to {length}")
        if drop:
            self.cache.crop(-drop)
            del self.tokens[length:]

    def cache_length(self) -> int:
        """What the cache itself says it holds (tests compare it with `len(self)`)."""
        return self.cache.get_seq_length()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
