"""The static forward's arithmetic for one decoder layer, in few dispatched ops (`core.static` runs it).

On a GPU a captured step replays one kernel per dispatched op, so a small draft is bound by its op count, not its
weight bytes. Per layer this runs 13 ops in half precision (14 where attention's output must be laid out again for
the product; float32 and float64 keep transformers' rounding order, `EXACT`, at 18):

    rms_norm          the norm with its weight folded in (one op; normalised in float32 inside the kernel)
    qkv product       query, key and value as one product (`core.lean.fused`; Qwen2's biases folded in)
    mul, roll,        rotary embeddings over q, k and v at once: x * cos + roll(x, d/2) * sin', where sin' carries
    addcmul           rotate_half's sign, and v's rows of the table are cos 1, sin 0 (so v passes through exactly)
    index_copy_       keys and values written together, at their positions, into one [capacity, 2, kv heads, d]
                      slab per layer (the layout flash attention reads: sequence outside, heads inside)
    sdpa              scaled-dot-product attention under the step's one additive mask
    [copy]            attention's output as rows (a view where the kernel already wrote it that way)
    addmm             the out-projection with the residual added in the same product
    rms_norm, gate_up product, silu, mul
    addmm             the down-projection with the residual added in the same product

Per step, shared by every layer: the positions, the rotary rows (an index_select and a gather), the additive mask
(a comparison and a where), the embedding, and at the end the final norm and the head.

Why this shape: transformers' eager forward runs ~30 dispatched ops per layer (core.static says why by hand at
all). The arithmetic is the model's own (its weights, its rotary tables, the same order of operations), and it
agrees with transformers' forward to a rounding (tests/test_static.py, tests/test_static_bf16.py). Linear layers
of other types run as modules: oneDNN's (pairs.kernels) add the residual in their own op but are not fused (a
fused copy of a packed weight would hold it twice, ~280 MB for the embedded target, for no measured gain on a
CPU); a quantized draft's run apart, with the residual added after.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class RotaryTable:
    """The rotary rows for every cached position, laid out for the fused rotation: [capacity, 2 (cos, sin'),
    2 (rotated, passed through), d], and the per-head choice between the two (q's and k's heads rotate, v's pass
    through). `rows(positions)` gives [n, 2, heads + 2 * kv heads, d]."""

    def __init__(self, model, capacity: int, like: torch.Tensor, heads: int, kv_heads: int, head_dim: int):
        positions = torch.arange(capacity, device=like.device)
        cos, sin = model.model.rotary_emb(like, positions[None])  # the model's own tables, in its dtype
        cos, sin = cos[0], sin[0]
        half = head_dim // 2
        sign = torch.cat([-torch.ones(half, dtype=sin.dtype, device=sin.device),
                          torch.ones(head_dim - half, dtype=sin.dtype, device=sin.device)])
        one, zero = torch.ones_like(cos), torch.zeros_like(sin)
        self.table = torch.stack([torch.stack([cos, one], 1), torch.stack([sin * sign, zero], 1)], 1).contiguous()
        self.group = torch.tensor([0] * (heads + kv_heads) + [1] * kv_heads, device=like.device)

    def rows(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table.index_select(0, positions)[:, :, self.group]


class Shapes:
    """The head counts and sizes one step needs, read from a Llama/Qwen2 config (head_dim where it is given, else
    hidden / heads): every reader of a config's heads takes them from here."""

    def __init__(self, cfg):
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


EXACT = (torch.float32, torch.float64)
"""Dtypes whose step keeps transformers' own rounding order, bit for bit: the norm's weight multiplied after it, the
rotation's products rounded before their sum, each residual added after its product. Replay teacher-forces through transformers' forward and an int8 draft copies
the target's prompt keys and values, so on a CPU (float32) a last-bit difference moved a near-tie and replay no
longer reproduced live runs; the folded forms below measured no faster there. Half precision (a GPU's) folds them:
its logits round by the feed's shape anyway."""


def norm(x: torch.Tensor, module) -> torch.Tensor:
    """LlamaRMSNorm: in half precision one op, the weight folded into torch's rms_norm (which normalises in float32
    inside); in EXACT dtypes transformers' order (normalised in float32, cast back, then scaled)."""
    if x.dtype in EXACT:
        return module.weight * F.rms_norm(x.float(), (x.shape[-1],), eps=module.variance_epsilon).to(x.dtype)
    return F.rms_norm(x, (x.shape[-1],), module.weight, module.variance_epsilon)


def _project_add(x: torch.Tensor, h: torch.Tensor, module) -> torch.Tensor:
    """x + module(h), in one op: addmm for a plain linear layer without a bias, the module's own `add_to` where it
    has one (oneDNN's post-op add, pairs.kernels.OneDnnLinear); else the product and an add."""
    if x.dtype in EXACT:
        return x + module(h)
    if type(module) is torch.nn.Linear and module.bias is None:
        return torch.addmm(x, h, module.weight.t())
    if hasattr(module, "add_to"):
        return module.add_to(x, h)
    return x + module(h)


def _qkv(layer, h: torch.Tensor) -> torch.Tensor:
    """The fused query-key-value product, [n, (heads + 2 kv heads) * d]."""
    if layer.qkv is not None:
        return layer.qkv(h)
    return torch.cat([layer.q(h), layer.k(h), layer.v(h)], -1)


def rotated(layer, x: torch.Tensor, rot: torch.Tensor, s: Shapes) -> torch.Tensor:
    """q, k and v of rows `x` [n, hidden] with q and k rotated: [n, heads + 2 kv heads, d]."""
    qkv = _qkv(layer, norm(x, layer.norm1)).view(x.shape[0], -1, s.head_dim)
    if x.dtype in EXACT:  # transformers' order: each product rounded, then the sum
        return qkv * rot[:, 0] + qkv.roll(s.head_dim // 2, -1) * rot[:, 1]
    return torch.addcmul(qkv * rot[:, 0], qkv.roll(s.head_dim // 2, -1), rot[:, 1])


def attend_and_mlp(layer, x: torch.Tensor, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask,
                   s: Shapes) -> torch.Tensor:
    """The rest of the layer: attention of `q` [n, heads, d] over keys/values [1, kv heads, length, d], the
    out-projection with the residual, the MLP with the residual. Returns the layer's output rows [n, hidden]."""
    n = x.shape[0]
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys, values, attn_mask=mask, scale=layer.scaling,
                                       enable_gqa=True)
    x = _project_add(x, o[0].transpose(0, 1).reshape(n, s.heads * s.head_dim), layer.o)
    gate, up = layer.gate_up_of(norm(x, layer.norm2))
    return _project_add(x, F.silu(gate) * up, layer.down)
