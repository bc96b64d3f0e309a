"""The target's KV of the prompt, handed to the llama.cpp drafter in place of its own prefill.

The llama.cpp drafter runs the embedded target's own GGUF; transformers dequantized that same file to
fp32 for the target. After the target's prefill its cache holds the keys and values of every prompt
position, which llama.cpp would compute again from the same weights, differing only by its quantized
kernels' rounding. Copying them costs milliseconds where llama.cpp's own prefill of a 330-token prompt
took about a second on 2 cores, which made a first call on a long prompt slower end to end than plain
decoding (docs/results.md, "The drafter's prompt KV"). Only the prompt's KV is shared: from the first
decoding position on the drafter computes its own. The KV changes what the drafter proposes, never the
output (the target verifies every token).

llama.cpp has no call that writes KV cells, but it restores a sequence from the blob that
`llama_state_seq_get_data` writes (llama-context.cpp and llama-kv-cache.cpp `state_write` in the pinned
llama-cpp-python): a header (magic, sequence id, streams, cell count), each cell's position and
sequence ids, then per layer the keys' rows and per layer the values' rows (or, with `v_trans`, the
values transposed). This module writes that blob by hand because no library does; `KvShare.check` checks
that it reads the layout as this build writes it (two tokens evaluated, exported, parsed and rebuilt: the
rebuild must equal llama.cpp's bytes), and sharing is off, with the reason, where it does not.

Key order. convert_hf_to_gguf permutes the rows of q_proj and k_proj per head so that llama.cpp's RoPE
rotates adjacent pairs (2j, 2j+1); transformers' GGUF loader undoes it
(`TensorProcessor._reverse_permute_weights`), so the target's keys are in rotate-half order (j, j + d/2).
llama.cpp's key element 2j + t of a head is the target's element t * d/2 + j. Values are not permuted.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import numpy as np
import torch

MAGIC = 0xAF143CD8  # llama-context.cpp's io_magic
F16 = 1  # GGML_TYPE_F16: the KV type of a default context, the one this module writes
MODEL_TYPES = ("llama",)  # architectures whose GGUF q/k rows transformers un-permutes as above


@dataclass(frozen=True)
class Layout:
    """What a sequence's state blob looks like for one llama.cpp context."""

    n_layer: int
    k_row: int  # key elements per cell (KV heads x head size)
    v_row: int
    v_trans: bool


def parse(blob: bytes) -> tuple[list[int], Layout, list[np.ndarray], list[np.ndarray]]:
    """(positions, layout, keys, values) of a one-sequence, one-stream blob of f16 KV; keys and values
    are per layer [cells, row] arrays. Raises ValueError on anything else."""
    off = 0

    def read(fmt: str):
        nonlocal off
        values = struct.unpack_from(fmt, blob, off)
        off += struct.calcsize(fmt)
        return values

    magic, _seq, n_stream, cells = read("<IiII")
    if magic != MAGIC or n_stream != 1:
        raise ValueError(f"not a one-stream sequence state (magic {magic:#x}, {n_stream} streams)")
    positions = []
    for _ in range(cells):
        pos, n_seq = read("<iI")
        read(f"<{n_seq}i")
        positions.append(pos)
    v_trans, n_layer = read("<II")
    keys, values = [], []
    for _ in range(n_layer):
        k_type, row_bytes = read("<iQ")
        if k_type != F16:
            raise ValueError(f"keys of ggml type {k_type}, not f16")
        keys.append(np.frombuffer(blob, np.float16, cells * row_bytes // 2, off).reshape(cells, row_bytes // 2))
        off += cells * row_bytes
    for _ in range(n_layer):
        if v_trans:
            v_type, element, row = read("<iII")
            if v_type != F16 or element != 2:
                raise ValueError(f"values of ggml type {v_type}, not f16")
            values.append(np.frombuffer(blob, np.float16, cells * row, off).reshape(row, cells).T)
            off += cells * row * 2
        else:
            v_type, row_bytes = read("<iQ")
            if v_type != F16:
                raise ValueError(f"values of ggml type {v_type}, not f16")
            values.append(np.frombuffer(blob, np.float16, cells * row_bytes // 2, off).reshape(cells, row_bytes // 2))
            off += cells * row_bytes
    if off != len(blob):
        raise ValueError(f"{len(blob) - off} bytes left over")
    layout = Layout(n_layer, keys[0].shape[1] if keys else 0, values[0].shape[1] if values else 0, bool(v_trans))
    return positions, layout, keys, values


def build(layout: Layout, keys, values) -> bytearray:
    """The blob that restores sequence 0 with these per-layer [cells, row] f16 keys and values at
    positions 0..cells-1 (what `parse` reads). keys and values: sequences of arrays, or [layers, cells,
    row] arrays. Written into one buffer, 8 MB for a 330-token prompt of the embedded model."""
    cells = keys[0].shape[0]
    k_head = struct.pack("<iQ", F16, layout.k_row * 2)
    v_head = struct.pack("<iII", F16, 2, layout.v_row) if layout.v_trans else struct.pack("<iQ", F16, layout.v_row * 2)
    meta = np.zeros((cells, 3), dtype="<i4")  # per cell: position, one sequence id, the id 0
    meta[:, 0], meta[:, 1] = np.arange(cells), 1
    parts = [struct.pack("<IiII", MAGIC, 0, 1, cells), meta, struct.pack("<II", int(layout.v_trans), layout.n_layer)]
    parts += [x for k in keys for x in (k_head, k)]
    parts += [x for v in values for x in (v_head, v.T if layout.v_trans else v)]
    out = bytearray(sum(len(p) if isinstance(p, bytes) else p.size * p.itemsize for p in parts))
    view, off = memoryview(out), 0
    for p in parts:
        if isinstance(p, bytes):
            view[off : off + len(p)] = p
            off += len(p)
        else:  # an array (f16 rows, or the cells' int32 metadata): its elements in C order, copied once
            np.copyto(np.frombuffer(out, p.dtype, p.size, off).reshape(p.shape), p)
            off += p.size * p.itemsize
    return out


def key_order(head_dim: int) -> torch.Tensor:
    """Index into a target key's head dimension giving llama.cpp's order (the module docstring)."""
    half = head_dim // 2
    return torch.tensor([t * half + j for j in range(half) for t in range(2)])


def from_cache(cache, n: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The first n positions of a transformers cache (layers of [1, heads, positions, head_dim]) as
    llama.cpp's [layers, n, heads x head_dim] f16 keys and values."""
    layers = cache.layers
    heads = layers[0].keys.shape[1]
    order = key_order(head_dim).to(layers[0].keys.device)
    keys = np.empty((len(layers), n, heads * head_dim), np.float16)
    values = np.empty_like(keys)
    # Views of the outputs as [layers, heads, n, head_dim]: each layer is converted straight into place.
    k_out = torch.from_numpy(keys).view(len(layers), n, heads, head_dim).permute(0, 2, 1, 3)
    v_out = torch.from_numpy(values).view(len(layers), n, heads, head_dim).permute(0, 2, 1, 3)
    for i, layer in enumerate(layers):
        k_out[i].copy_(layer.keys[0, :, :n].index_select(-1, order))
        v_out[i].copy_(layer.values[0, :, :n])
    return keys, values


def compatible(config, layout: Layout, n_layer: int, n_head_kv: int) -> str | None:
    """None when a target of this config has llama.cpp's cache layout; else why not."""
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_TYPES:
        return f"the target is a {model_type!r} model; keys are reordered for {', '.join(MODEL_TYPES)} only"
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    mine = (config.num_hidden_layers, heads, heads * head_dim)
    theirs = (n_layer, n_head_kv, layout.k_row)
    if mine != theirs or layout.v_row != heads * head_dim:
        return f"the target's cache (layers, KV heads, row) {mine} is not llama.cpp's {theirs}"
    return None


def seq_state(ll, ctx) -> bytes:
    """llama.cpp's own blob of sequence 0."""
    size = ll.llama_state_seq_get_size(ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    written = ll.llama_state_seq_get_data(ctx, buf, size, 0)
    return bytes(buf[:written])


def restore(ll, ctx, blob: bytes | bytearray) -> None:
    """Replace sequence 0 with `blob`; RuntimeError when llama.cpp refuses it (it then holds nothing)."""
    buf = (ctypes.c_uint8 * len(blob)).from_buffer(blob) if isinstance(blob, bytearray) else \
        (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
    if ll.llama_state_seq_set_data(ctx, buf, len(blob), 0) != len(blob):
        raise RuntimeError("llama.cpp refused the target's KV")


class KvShare:
    """Sharing for one llama.cpp context: `check` once (the layout and the target), then `load` per prompt."""

    # Fewer new prompt tokens than this are cheaper to evaluate than to copy the whole prompt's KV for:
    # copying 330 positions took ~20 ms, llama.cpp's pass over 8 tokens about as long (AMD EPYC, 2 threads).
    MIN_TOKENS = 8

    def __init__(self, ll, ctx, layout: Layout, head_dim: int):
        self.ll, self.ctx, self.layout, self.head_dim = ll, ctx, layout, head_dim

    @classmethod
    def check(cls, ll, model, ctx, memory, evaluate, config) -> tuple[KvShare | None, str]:
        """(a KvShare, what it does) or (None, why not). `evaluate(ids)` appends ids to the empty
        sequence 0; the sequence is emptied again before this returns."""
        if config is None:
            return None, "no target configuration given"
        try:
            evaluate([1, 2])
            blob = seq_state(ll, ctx)
            _, layout, keys, values = parse(blob)
            if bytes(build(layout, keys, values)) != blob:
                return None, "llama.cpp's sequence state is not laid out as this version expects"
        except (ValueError, RuntimeError, struct.error) as e:
            return None, f"llama.cpp's sequence state could not be read ({e})"
        finally:
            ll.llama_memory_clear(memory, False)
        why = compatible(config, layout, int(ll.llama_model_n_layer(model)), int(ll.llama_model_n_head_kv(model)))
        if why is not None:
            return None, why
        head_dim = layout.k_row // int(ll.llama_model_n_head_kv(model))
        return cls(ll, ctx, layout, head_dim), "the prompt's KV is taken from the target's cache"

    def load(self, target, prefix: list[int]) -> bool:
        """Make sequence 0 hold `prefix` from the target's CachedLM (RunContext.target_kv) when that holds
        exactly `prefix`: True; else False, sequence 0 untouched. RuntimeError: llama.cpp refused it, and
        sequence 0 holds nothing."""
        if target is None or target.tokens != prefix:
            return False
        keys, values = from_cache(target.cache, len(prefix), self.head_dim)
        restore(self.ll, self.ctx, build(self.layout, keys, values))
        return True
