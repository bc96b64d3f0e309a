"""The drafter's lean forward (playground.core.lean) against transformers' forward of the same model."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from playground.core import lean
from playground.core.cached import CachedLM
from playground.core.engine import plain_generate, speculative_generate
from playground.core.lean import LeanLM, copy_lm, draft_lm, fused, supports
from playground.core.records import Iteration, Step
from playground.drafters.proposers import DraftModelProposer
from playground.errors import PlaygroundError
from playground.pairs.loading import int8_copy

from .tiny import perturbed, tiny_model, tiny_pair

IDS = [3, 17, 42, 5, 9, 33, 8, 61, 2, 14, 27, 40]


def _int8(model):
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model).float(), {torch.nn.Linear: per_channel_dynamic_qconfig},
                                dtype=torch.qint8).eval()


def _walk(lm):
    """Logits of the last position after: a prefill, single steps, a feed of three, a crop and two more (transformers'
    lm_head on the last position only, as the lean forward's: an int8 lm_head scales its activation over its rows)."""
    out = [lm.feed(IDS[:6], last_only=True)[-1]]
    for t in IDS[6:9]:
        out.append(lm.feed([t], last_only=True)[-1])
    out.append(lm.feed(IDS[9:12], last_only=True)[-1])
    lm.crop(7)
    out.append(lm.feed([50, 51], last_only=True)[-1])
    out.append(lm.feed([52], last_only=True)[-1])
    assert lm.tokens == IDS[:7] + [50, 51, 52]
    return torch.stack(out)


def test_matches_transformers_float64():
    model = tiny_model(layers=3)
    assert supports(model) is None
    ours, theirs = _walk(LeanLM(model, "cpu")), _walk(CachedLM(model, "cpu"))
    assert ours.shape == theirs.shape == (7, 64)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-10)


def test_matches_transformers_on_qwen2_with_its_biases():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, initializer_range=0.5, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to(torch.float64).eval()
    with torch.no_grad():  # initialised at zero: give them values, or a forward that dropped them would pass
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    assert supports(model) is None
    torch.testing.assert_close(_walk(LeanLM(model, "cpu")), _walk(CachedLM(model, "cpu")), rtol=0, atol=1e-10)
    windowed = copy.deepcopy(model)
    windowed.config.layer_types = ["sliding_attention", "full_attention"]
    assert "sliding window" in supports(windowed)


def test_growth_keeps_the_cache(monkeypatch):
    monkeypatch.setattr(lean, "FIRST_CAPACITY", 4)  # every few feeds reallocate
    model = tiny_model(layers=2)
    ours, theirs = LeanLM(model, "cpu"), CachedLM(model, "cpu")
    for chunk in ([1, 2, 3], [4, 5, 6, 7, 8], [9], [10, 11], list(range(12, 30))):
        torch.testing.assert_close(ours.feed(chunk)[-1], theirs.feed(chunk)[-1], rtol=0, atol=1e-10)
    assert ours.keys.shape[2] == 32 and len(ours) == 29


def test_int8_fusion_is_exact_and_forward_matches():
    model = _int8(tiny_model(layers=2, dtype=torch.float32))
    layer = model.model.layers[0]
    h = torch.randn(3, 32)
    a = layer.self_attn
    both = fused([a.q_proj, a.k_proj, a.v_proj])(h)
    assert torch.equal(both, torch.cat([a.q_proj(h), a.k_proj(h), a.v_proj(h)], -1))
    torch.testing.assert_close(_walk(LeanLM(model, "cpu")), _walk(CachedLM(model, "cpu")), rtol=1e-5, atol=1e-5)


def test_loads_a_transformers_cache_and_copies():
    model = tiny_model(layers=2)
    hf = CachedLM(model, "cpu")
    hf.feed(IDS[:8], last_only=True)
    ours = LeanLM(model, "cpu")
    ours.load(hf.cache, IDS[:8])
    twin = ours.copy()
    step = ours.feed([IDS[8]])[-1]
    torch.testing.assert_close(step, hf.feed([IDS[8]])[-1], rtol=0, atol=1e-10)
    # the copy did not see that step: fed another token, it answers as a fresh model would
    other = twin.feed([7])[-1]
    fresh = CachedLM(model, "cpu")
    torch.testing.assert_close(other, fresh.feed(IDS[:8] + [7], last_only=True)[-1], rtol=0, atol=1e-10)
    assert ours.tokens == IDS[:9] and twin.tokens == IDS[:8] + [7]
    assert copy_lm(hf).tokens == hf.tokens and copy_lm(hf).cache is not hf.cache


def test_unsupported_models_fall_back_or_refuse():
    model = tiny_model(layers=1)
    gelu = copy.deepcopy(model)
    gelu.config.hidden_act = "gelu"
    assert "SiLU" in supports(gelu)
    assert isinstance(draft_lm(gelu, "cpu"), CachedLM)
    assert isinstance(draft_lm(model, "cpu", forward="transformers"), CachedLM)
    with pytest.raises(PlaygroundError, match="cannot run this draft"):
        draft_lm(gelu, "cpu", forward="lean")
    with pytest.raises(PlaygroundError, match="must be one of"):
        draft_lm(model, "cpu", forward="fast")
    trained = copy.deepcopy(model).train()
    assert "training" in supports(trained)


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_output_and_proposals_equal_under_either_forward(k):
    target = tiny_model(seed=0)
    pair = tiny_pair(target, perturbed(target, noise=0.02))
    prompt = [1, 5, 9, 13]
    plain = [r.token for r in plain_generate(pair, prompt, max_new_tokens=24) if isinstance(r, Step)]
    runs = {}
    for forward in ("lean", "transformers"):
        proposer = DraftModelProposer(pair.draft, "cpu", None, forward=forward)
        recs = [r for r in speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=24)
                if isinstance(r, Iteration)]
        assert [t for r in recs for t in r.emitted] == plain
        runs[forward] = [r.proposed for r in recs]
        assert isinstance(proposer.lm, LeanLM if forward == "lean" else CachedLM)
    assert runs["lean"] == runs["transformers"]


def test_float_fusion_shares_the_weights_and_unfusable_layers_run_apart(monkeypatch):
    model = tiny_model(layers=2)
    before = CachedLM(model, "cpu").feed(IDS, last_only=True)
    a = model.model.layers[0].self_attn
    qkv = fused([a.q_proj, a.k_proj, a.v_proj])
    assert a.k_proj.weight.untyped_storage().data_ptr() == qkv.weight.untyped_storage().data_ptr()  # no copy
    torch.testing.assert_close(CachedLM(model, "cpu").feed(IDS, last_only=True), before, rtol=0, atol=0)
    monkeypatch.setattr(lean, "fused", lambda modules: None)  # layers it cannot fuse (another kernel's modules)
    apart = tiny_model(layers=2, seed=5)
    ours = LeanLM(apart, "cpu")
    assert ours.layers[0].qkv is None and ours.layers[0].gate_up is None
    torch.testing.assert_close(_walk(ours), _walk(CachedLM(apart, "cpu")), rtol=0, atol=1e-10)


def test_loads_an_empty_cache_for_a_one_token_prompt():
    model = tiny_model(layers=1)
    hf = CachedLM(model, "cpu")
    ours = LeanLM(model, "cpu")
    ours.load(hf.cache, [])
    torch.testing.assert_close(ours.feed([5])[-1], hf.feed([5])[-1], rtol=0, atol=1e-10)


def test_a_float32_draft_loads_a_float64_targets_cache():
    """The int8 draft computes in float32 whatever the target's dtype: the loaded keys and values take the draft's."""
    target = tiny_model(layers=2)  # float64
    draft = copy.deepcopy(target).float()
    hf = CachedLM(target, "cpu")
    hf.feed(IDS[:8], last_only=True)
    ours = LeanLM(draft, "cpu")
    ours.load(hf.cache, IDS[:8])
    assert ours.keys.dtype == torch.float32 and ours.cache_length() == 8
    fresh = CachedLM(draft, "cpu")
    torch.testing.assert_close(ours.feed([IDS[8]])[-1], fresh.feed(IDS[:9], last_only=True)[-1], rtol=1e-4, atol=1e-4)


def test_biases_survive_fusion_int8_and_float():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, initializer_range=0.5, attention_bias=True, mlp_bias=True)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():  # initialised at zero: give them values, or a forward that dropped them would pass
        for m in model.modules():
            if isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0.0, 0.5)
    for variant in (_int8(model), int8_copy(model), model):
        assert LeanLM(variant, "cpu").layers[0].gate_up is not None  # fused, biases and all
        torch.testing.assert_close(_walk(LeanLM(variant, "cpu")), _walk(CachedLM(variant, "cpu")), rtol=1e-5,
                                   atol=1e-5)
    mixed = tiny_model(layers=1)
    a = mixed.model.layers[0].self_attn
    a.k_proj.bias = torch.nn.Parameter(torch.ones(a.k_proj.out_features, dtype=torch.float64))
    assert fused([a.q_proj, a.k_proj, a.v_proj]) is None  # some with a bias, some without: run apart


def test_fused_layers_follow_the_model_when_it_moves_to_another_dtype():
    model = tiny_model(layers=2)
    first = LeanLM(model, "cpu").layers
    assert LeanLM(model, "cpu").layers is first  # built once per model
    model.float()  # new storage for every weight: the old fused products no longer stand for it
    again = LeanLM(model, "cpu")
    assert again.layers is not first and again.layers[0].qkv.weight.dtype == torch.float32
    torch.testing.assert_close(_walk(again), _walk(CachedLM(model, "cpu")), rtol=1e-5, atol=1e-5)
