"""A Llama-architecture (Llama, Qwen2) draft model's forward pass without transformers' per-call machinery: the drafter's half of
the loop, where a small model's step is mostly Python and small kernels, not weights.

Why by hand (the house prefers transformers' own code): a draft step of the embedded pair's int8 draft spent about
as long in transformers' per-layer plumbing (the attention interface's dispatch, the cache's update, the mask's
construction, keyword handling, output objects) as in its quantized matrix products. `LeanLM` runs the same modules'
weights in the same order (RMSNorm, rotary embeddings from the model's own module, scaled-dot-product attention,
SiLU MLP), with the query, key and value projections and the MLP's gate and up projections each fused into one
matrix product, and a preallocated cache that a rollback cuts by moving its length.

It is for drafts only: a draft's outputs only propose, and the target's pass decides what is kept, so what the
engine emits does not depend on it (greedy output still equals plain greedy). Fusing is exact for the int8 draft
(dynamic quantization scales the activation once per product, and the fused product's input is the same tensor;
the weights are quantized per output channel), and equal to a rounding for float weights. One difference: it
computes logits for the last fed position only, so where transformers quantizes the lm_head's activation over
every fed row, this quantizes the last row alone.

On a model whose products are row-independent (the int8 draft's, core.int8), feeds of 2 to `int8.SHORT_FEED` rows (a
draft's catch-up) attend row by row, each row as if fed alone, so that a token's logits do not depend on how its
feed was chunked (other models attend over the feed at once: a float product rounds by the kernel the feed's size
picks anyway, and on a GPU every row would be more kernel launches): masked attention over two rows rounds otherwise
than over one (up to 0.73 of a logit on the embedded int8 draft).

`lean_lm(model, ...)` returns a `LeanLM` when `supports(model)` and a transformers `CachedLM` otherwise; both have
the interface the drafter uses (feed, load, crop, copy, tokens).
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..errors import PlaygroundError
from .cached import CachedLM
from .int8 import SHORT_FEED, RowInt8Linear, row_independent
from .step import Shapes

MODEL_TYPES = ("llama", "qwen2")  # one layout: Qwen2 is Llama with biases on q, k and v, which the fused product keeps
STATIC_ROPE = ("default", "linear", "llama3")  # rope types whose tables do not depend on the sequence's length
FIRST_CAPACITY = 512  # cache positions allocated at first; doubled when a feed needs more
# model -> its fused layers. Built once per model, not per run: fusing the embedded int8 draft's 30 layers (60 new
# quantized products, each prepacked) took about 1 s, which a drafter that begins once per generation must not pay.
# Derived from the weights only, and dropped with the model.
_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_ROW_ATTENTION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> short feeds attended row by row
_FUSING = threading.Lock()  # tabs sharing a model fuse it once (a second fusion would re-point its float weights)


def supports(model: torch.nn.Module) -> str | None:
    """None when `LeanLM` can run `model`, else why not (a Llama or Qwen2 causal LM in eval mode, SiLU MLP, a rope
    whose tables do not depend on the length, every layer full attention)."""
    if not isinstance(model, torch.nn.Module):  # a wrapper (a test's memoizing target) runs on its own forward
        return "not a torch module"
    cfg = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if cfg is None or getattr(cfg, "model_type", None) not in MODEL_TYPES:
        return f"model type {getattr(cfg, 'model_type', None)!r} is not one of {', '.join(MODEL_TYPES)}"
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
        return "some layers attend over a sliding window"
    if model.training:
        return "the model is in training mode"
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return "not a SiLU MLP with pretraining_tp 1"
    rope = getattr(getattr(inner, "rotary_emb", None), "rope_type", None)
    if rope not in STATIC_ROPE:
        return f"rope type {rope!r} is not one of {', '.join(STATIC_ROPE)}"
    if not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm")) or not hasattr(model, "lm_head"):
        return "not laid out as LlamaForCausalLM (model.embed_tokens, .layers, .norm, lm_head)"
    return None


def _has_bias(module) -> bool:
    bias = module.bias  # a method on torch.ao's quantized linears and RowInt8Linear; a tensor or None on nn.Linear
    return (bias() if callable(bias) else bias) is not None


def fused(modules: Sequence[torch.nn.Module]) -> torch.nn.Module | None:
    """One linear layer computing `modules`' outputs side by side (their output features concatenated), or None
    when they are not all plain or all dynamically quantized linear layers. Exact for per-channel quantized ones:
    their int8 rows and per-row scales are concatenated as they are (a copy: about 70 MB for the embedded int8
    draft, whose packed weights cannot be shared); plain ones' weights become views of the fused weight's rows."""
    # torch.ao is deprecated and warns when imported: imported here, where a model is fused, not at import time
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

    if len({_has_bias(m) for m in modules}) > 1:
        return None  # some with a bias and some without (no supported config has it): run them apart
    if all(type(m) is RowInt8Linear for m in modules):
        inner = fused([m.quantized for m in modules])
        if inner is None:
            return None
        out, start = RowInt8Linear(inner), 0
        for m in modules:  # the same values: each module's rows become views of the fused ones (70 MB not held twice)
            rows = slice(start, start + m.out_features)
            m.int8, m.scales = out.int8[rows], out.scales[rows]
            if m.bias_ is not None:
                m.bias_ = out.bias_[rows]
            start += m.out_features
        return out
    if all(type(m) is DynamicQuantLinear for m in modules):
        ws = [m.weight() for m in modules]
        if any(w.qscheme() not in (torch.per_channel_affine, torch.per_channel_symmetric) for w in ws):
            return None
        weight = torch._make_per_channel_quantized_tensor(
            torch.cat([w.int_repr() for w in ws]), torch.cat([w.q_per_channel_scales() for w in ws]),
            torch.cat([w.q_per_channel_zero_points() for w in ws]), 0)
        biases = [m.bias() for m in modules]
        out = DynamicQuantLinear(weight.shape[1], weight.shape[0], bias_=biases[0] is not None, dtype=torch.qint8)
        out.set_weight_bias(weight, torch.cat(biases) if biases[0] is not None else None)
        return out
    if all(type(m) is torch.nn.Linear for m in modules):
        # One weight, and each module's weight a view of its rows: the model's own forward reads the same values,
        # and the fused product costs no memory (a bf16 draft of a billion parameters on a GPU would otherwise
        # hold two thirds of itself twice).
        w = modules[0].weight
        out = torch.nn.Linear(w.shape[1], sum(m.out_features for m in modules), bias=modules[0].bias is not None,
                              device=w.device, dtype=w.dtype).eval().requires_grad_(False)
        with torch.no_grad():
            out.weight.copy_(torch.cat([m.weight for m in modules]))
            if out.bias is not None:
                out.bias.copy_(torch.cat([m.bias for m in modules]))
            start = 0
            for m in modules:
                rows = slice(start, start + m.out_features)
                m.weight = torch.nn.Parameter(out.weight[rows], requires_grad=m.weight.requires_grad)
                if m.bias is not None:
                    m.bias = torch.nn.Parameter(out.bias[rows], requires_grad=m.bias.requires_grad)
                start += m.out_features
        return out
    return None


class _Layer:
    """One decoder layer's modules, with the fused projections where they could be fused."""

    def __init__(self, layer):
        a, mlp = layer.self_attn, layer.mlp
        self.norm1, self.norm2 = layer.input_layernorm, layer.post_attention_layernorm
        self.qkv = fused([a.q_proj, a.k_proj, a.v_proj])
        self.gate_up = fused([mlp.gate_proj, mlp.up_proj])
        self.q, self.k, self.v, self.o = a.q_proj, a.k_proj, a.v_proj, a.o_proj
        self.gate, self.up, self.down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        self.sizes = (a.q_proj.out_features, a.k_proj.out_features, a.v_proj.out_features)
        self.inter = mlp.gate_proj.out_features
        self.scaling = a.scaling

    def qkv_of(self, h):
        return self.qkv(h).split(self.sizes, -1) if self.qkv is not None else (self.q(h), self.k(h), self.v(h))

    def gate_up_of(self, h):
        return self.gate_up(h).split(self.inter, -1) if self.gate_up is not None else (self.gate(h), self.up(h))


def _current(layers: tuple[_Layer, ...], model) -> bool:
    """Whether fused layers still stand for `model`: the same modules (a kernel swap replaces them), and float
    weights still the fused weight's views (a move to another device or dtype gives them new storage)."""
    first, attn = layers[0], model.model.layers[0].self_attn
    if first.q is not attn.q_proj:
        return False
    if type(first.qkv) is torch.nn.Linear:
        return first.q.weight.untyped_storage().data_ptr() == first.qkv.weight.untyped_storage().data_ptr()
    return True


def _layers_of(model) -> tuple[_Layer, ...]:
    with _FUSING:
        if model not in _LAYERS or not _current(_LAYERS[model], model):
            _LAYERS[model] = tuple(_Layer(x) for x in model.model.layers[: model.config.num_hidden_layers])
            _ROW_ATTENTION[model] = row_independent(model)  # a walk over every module (4 ms): once, with the layers
        return _LAYERS[model]


def _norm(x, module):
    """LlamaRMSNorm's arithmetic: normalised in float32, cast back, then scaled by the weight."""
    return module.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=module.variance_epsilon).to(x.dtype)


def _rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LeanLM:
    """A Llama-architecture causal LM with its own preallocated KV cache and the tokens it holds (`CachedLM`'s
    interface: feed, load, crop, copy, tokens)."""

    def __init__(self, model: torch.nn.Module, device: torch.device | str, vocab_size: int | None = None,
                 _shared: tuple | None = None):
        self.model, self.device, self.vocab_size = model, torch.device(device), vocab_size
        s = Shapes(model.config)
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        self.layers = _shared if _shared is not None else _layers_of(model)
        self.row_attention = _ROW_ATTENTION.get(model, False)  # the module docstring
        self.keys: torch.Tensor | None = None  # [layers, kv heads, capacity, head dim]
        self.values: torch.Tensor | None = None
        self.cos = self.sin = None  # [capacity, head dim]
        self.tokens: list[int] = []
        self.written = 0  # cache positions holding keys and values (what cache_length reports; tests compare)

    def __len__(self) -> int:
        return len(self.tokens)

    def _reserve(self, n: int, like: torch.Tensor) -> None:
        """Room for n positions in the cache and the rotary tables (doubling), keeping what is cached."""
        have = 0 if self.keys is None else self.keys.shape[2]
        if n <= have:
            return
        cap = max(FIRST_CAPACITY, have)
        while cap < n:
            cap *= 2
        shape = (len(self.layers), self.kv_heads, cap, self.head_dim)
        keys, values = like.new_zeros(shape), like.new_zeros(shape)
        if self.keys is not None:
            keys[:, :, :have], values[:, :, :have] = self.keys, self.values
        self.keys, self.values = keys, values
        positions = torch.arange(cap, device=like.device)[None]
        cos, sin = self.model.model.rotary_emb(like, positions)
        self.cos, self.sin = cos[0], sin[0]

    @torch.inference_mode()
    def feed(self, ids: Sequence[int], last_only: bool = True) -> torch.Tensor | None:
        """Run the model over `ids` appended to the cached context; return the last position's logits, [1, V]
        (`last_only` is accepted for CachedLM's interface: this always computes the last position's only)."""
        if not ids:
            return None
        inner, start, n = self.model.model, len(self.tokens), len(ids)
        x = inner.embed_tokens(torch.tensor([list(ids)], dtype=torch.long, device=self.device))
        self._reserve(start + n, x)
        end = start + n
        cos, sin = self.cos[start:end][None, None], self.sin[start:end][None, None]
        rowwise = self.row_attention and 1 < n <= SHORT_FEED
        mask = None if n == 1 or rowwise else torch.ones(n, end, dtype=torch.bool, device=x.device).tril(start)
        for i, layer in enumerate(self.layers):
            h = _norm(x, layer.norm1)
            q, k, v = layer.qkv_of(h)
            q = _rotate(q.view(1, n, self.heads, self.head_dim).transpose(1, 2), cos, sin)
            k = _rotate(k.view(1, n, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
            self.keys[i, :, start:end] = k[0]
            self.values[i, :, start:end] = v.view(n, self.kv_heads, self.head_dim).transpose(0, 1)
            if rowwise:
                o = torch.cat([F.scaled_dot_product_attention(
                    q[:, :, j:j + 1], self.keys[i, None, :, :start + j + 1], self.values[i, None, :, :start + j + 1],
                    scale=layer.scaling, enable_gqa=True) for j in range(n)], 2)
            else:
                o = F.scaled_dot_product_attention(q, self.keys[i, None, :, :end], self.values[i, None, :, :end],
                                                   attn_mask=mask, scale=layer.scaling, enable_gqa=True)
            x = x + layer.o(o.transpose(1, 2).reshape(1, n, -1))
            gate, up = layer.gate_up_of(_norm(x, layer.norm2))
            x = x + layer.down(F.silu(gate) * up)
        self.tokens.extend(ids)
        self.written = end
        logits = self.model.lm_head(_norm(x[:, -1:], inner.norm))[0]
        return logits[:, : self.vocab_size] if self.vocab_size is not None else logits

    def load(self, cache, tokens: Sequence[int]) -> None:
        """Hold a copy of a transformers cache (a DynamicCache of this model's layer shapes) that holds `tokens`."""
        n = len(tokens)
        self.tokens, self.written = [], 0
        if n == 0:  # a one-token prompt: the target's cache of the prompt before its last token is empty
            return
        # the buffers in this model's dtype (the int8 draft computes in float32 whatever the target's dtype): the
        # slice assignments below cast the target's keys and values to it
        self._reserve(n, self.model.model.embed_tokens.weight)
        for i, layer in enumerate(cache.layers):
            self.keys[i, :, :n] = layer.keys[0, :, :n]
            self.values[i, :, :n] = layer.values[0, :, :n]
        self.tokens, self.written = list(tokens), n

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens (the rest of the buffer is overwritten by later feeds)."""
        if length > len(self.tokens):
            raise ValueError(f"cannot crop a cache of {len(self.tokens)} tokens to {length}")
        del self.tokens[length:]
        self.written = length

    def copy(self) -> LeanLM:
        """Another LeanLM on the same model and fused layers, with a copy of this one's cache."""
        other = LeanLM(self.model, self.device, self.vocab_size, _shared=self.layers)
        other.keys, other.values = (None if t is None else t.clone() for t in (self.keys, self.values))
        other.cos, other.sin, other.tokens, other.written = self.cos, self.sin, list(self.tokens), self.written
        return other

    def cache_length(self) -> int:
        return self.written


def prepare(model) -> bool:
    """Build `model`'s fused layers now (where the lean forward runs it), so that its first run does not pay for
    them; whether it does."""
    if supports(model) is not None:
        return False
    _layers_of(model)
    return True


FORWARDS = ("auto", "lean", "transformers")


def draft_lm(model, device, vocab_size=None, forward: str = "auto") -> LeanLM | CachedLM:
    """The drafter's model with its cache: `LeanLM` when `forward` is "lean", or "auto" and `supports(model)`;
    transformers' forward (`CachedLM`) for "transformers" and for models the lean forward does not run."""
    if forward not in FORWARDS:
        raise PlaygroundError(f"the draft forward must be one of {', '.join(FORWARDS)}, got {forward!r}")
    why = supports(model) if forward != "transformers" else "asked for"
    if why is None:
        return LeanLM(model, device, vocab_size)
    if forward == "lean":
        raise PlaygroundError(f"the lean forward cannot run this draft: {why}")
    return CachedLM(model, device, vocab_size)


def copy_lm(lm: LeanLM | CachedLM) -> LeanLM | CachedLM:
    """A copy of `lm`'s cache on the same model (for replay's shared prefill)."""
    if isinstance(lm, LeanLM):
        return lm.copy()
    other = CachedLM(lm.model, lm.device, lm.vocab_size)
    other.cache, other.tokens = copy.deepcopy(lm.cache), list(lm.tokens)
    return other
