"""The int8 draft's row-independent linear layers (playground.core.int8) and what they buy: a token's logits that do
not depend on what was fed beside it."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from playground.core import int8
from playground.core.int8 import SHORT_FEED, RowInt8Linear, rowwise, why_not_rowwise
from playground.core.lean import LeanLM, fused
from playground.pairs.loading import int8_copy

from .tiny import tiny_model


def _quantized(n_in: int, n_out: int, bias: bool = True, qconfig: str = "per_channel_dynamic_qconfig"):
    from torch.ao import quantization

    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(n_in, n_out, bias=bias)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantization.quantize_dynamic(layer, {torch.nn.Linear: getattr(quantization, qconfig)},
                                             dtype=torch.qint8)[0], layer[0]


def test_each_row_of_a_short_feed_is_the_row_fed_alone():
    quantized, _ = _quantized(64, 48)
    assert why_not_rowwise(quantized) is None
    layer = RowInt8Linear(quantized)
    x = torch.randn(1, SHORT_FEED, 64) * torch.logspace(-2, 2, SHORT_FEED)[None, :, None]  # rows of other scales
    together = layer(x)
    for j in range(SHORT_FEED):
        assert torch.equal(together[:, j], layer(x[:, j:j + 1])[:, 0])
    # torch.ao's product scales the rows together: the small rows come out otherwise beside the large ones
    assert not torch.equal(quantized(x)[:, 0], quantized(x[:, :1])[:, 0])


def test_products_are_the_quantized_layers_and_long_feeds_keep_torch_ao():
    quantized, float_layer = _quantized(64, 48)
    layer = RowInt8Linear(quantized)
    x = torch.randn(2, 3, 64)
    want = float_layer(x).detach()
    got = layer(x)
    assert got.shape == want.shape == (2, 3, 48) and got.dtype == torch.float32
    assert float((got - want).abs().max() / want.abs().max()) < 0.02  # int8 weights, bfloat16 activations
    long = torch.randn(1, SHORT_FEED + 1, 64)
    assert torch.equal(layer(long), quantized(long))


def test_layers_it_cannot_run_keep_torch_ao_and_say_why(monkeypatch):
    per_tensor, _ = _quantized(64, 48, qconfig="default_dynamic_qconfig")
    assert "per channel" in why_not_rowwise(per_tensor)
    # widths the kernel reads wrong or crashes on (here: 4, 12, 30, 33) are refused before it is called
    odd, _ = _quantized(36, 48)
    assert "multiple of 8" in why_not_rowwise(odd)
    # a kernel that computes wrong on this CPU is found by the shape's check, not in proposals
    monkeypatch.setattr(int8, "_CHECKED", {})
    monkeypatch.setattr(torch, "_weight_int8pack_mm", lambda x, w, s: torch.zeros(x.shape[0], w.shape[0]))
    assert "off by" in why_not_rowwise(_quantized(64, 48)[0])


def test_int8_copy_replaces_every_linear_but_the_lm_head():
    model = int8_copy(tiny_model(layers=2, dtype=torch.float64))
    kinds = {name: type(m).__name__ for name, m in model.named_modules() if name.endswith(("proj", "lm_head"))}
    assert kinds.pop("lm_head") == "Linear"  # torch.ao's: the lean forward feeds it one row
    assert len(kinds) == 2 * 7 and set(kinds.values()) == {"RowInt8Linear"}
    assert rowwise(model) == 0  # nothing left to replace
    # the lean forward attends a short feed row by row only where the products are row-independent too
    assert LeanLM(model, "cpu").row_attention and not LeanLM(tiny_model(layers=2), "cpu").row_attention


def test_the_int8_copys_parameter_count_counts_each_packed_weight_as_unpacking_it_would():
    from playground.pairs.models import _param_count

    model = int8_copy(tiny_model(layers=2, dtype=torch.float32))
    packed = [m.weight() for m in model.modules() if callable(getattr(m, "weight", None)) and hasattr(m, "_packed_params")]
    assert len(packed) == 2 * 7 + 1  # every projection's and the lm_head's weight is packed, outside .parameters()
    assert _param_count(model) == sum(p.numel() for p in model.parameters()) + sum(w.numel() for w in packed)


def test_fusion_keeps_the_rows_and_the_products():
    model = int8_copy(tiny_model(layers=1, dtype=torch.float32))
    a = model.model.layers[0].self_attn
    alone = [m.int8.clone() for m in (a.q_proj, a.k_proj, a.v_proj)]
    both = fused([a.q_proj, a.k_proj, a.v_proj])
    assert type(both) is RowInt8Linear
    # each module's int8 rows are now a view of the fused rows, with the values they had
    for m, before in zip((a.q_proj, a.k_proj, a.v_proj), alone):
        assert m.int8.untyped_storage().data_ptr() == both.int8.untyped_storage().data_ptr()
        assert torch.equal(m.int8, before) and m.int8.is_contiguous()
    for rows in (1, 3, SHORT_FEED + 4):  # short feeds on the weight-only product, long ones on torch.ao's
        h = torch.randn(1, rows, 32)
        assert torch.equal(both(h), torch.cat([a.q_proj(h), a.k_proj(h), a.v_proj(h)], -1))


@pytest.mark.parametrize("split", [(1, 2), (2, 1), (1, 1, 1)])
def test_the_int8_drafts_logits_do_not_depend_on_how_its_feeds_were_chunked(split):
    """A catch-up of two tokens and the same tokens fed one at a time leave the same cache and the same logits,
    bitwise: two schedules over one prompt draw the same proposals from the same prefix."""
    model = int8_copy(tiny_model(layers=2, dtype=torch.float32, scale=0.5))
    prompt, more = [3, 17, 42, 5, 9, 33, 8, 61, 2, 14, 27, 40], [50, 51, 52]
    whole = LeanLM(model, "cpu")
    whole.feed(prompt)
    chunked = whole.copy()
    want = whole.feed(more)
    at = 0
    for size in split:
        got = chunked.feed(more[at:at + size])
        at += size
    assert at == len(more) and torch.equal(got, want)
    assert torch.equal(chunked.keys[:, :, :len(prompt) + 3], whole.keys[:, :, :len(prompt) + 3])


def test_the_embedded_int8_draft_is_chunk_invariant_on_real_weights():
    """On the embedded pair's weights, where the tiny model above does not show it, attention over a masked pair of
    rows rounds otherwise than over one row (0.73 of a logit apart here before the lean forward attended row by row)."""
    from playground.pairs.loading import load_pair

    pair = load_pair(progress=None)
    ids = pair.tokenizer("A tool call: search(query='weather in Paris', limit=3). The answer was")["input_ids"]
    whole = LeanLM(pair.draft, "cpu")
    whole.feed(ids[:-2])
    chunked = whole.copy()
    want = whole.feed(ids[-2:])
    chunked.feed(ids[-2:-1])
    assert torch.equal(chunked.feed(ids[-1:]), want)


def test_replay_shares_one_pass_only_for_a_draft_whose_rows_are_independent():
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    from playground.lab.replay.walk import shared_exact

    from .tiny import tiny_pair

    target = tiny_model(layers=2, dtype=torch.float32)
    per_feed = quantize_dynamic(copy.deepcopy(target), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                dtype=torch.qint8).eval()
    assert shared_exact(tiny_pair(target, int8_copy(target))) == {"llama.cpp", "draft"}
    for draft in (per_feed, copy.deepcopy(target), None):  # torch.ao's per-feed scale, a float draft, no draft
        assert shared_exact(tiny_pair(target, draft)) == {"llama.cpp"}
