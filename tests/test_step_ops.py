"""The captured step's op budget: at most 14 dispatched ops per decoder layer (what a CUDA graph of it launches,
one kernel per op), counted on the CPU for a Llama and a Qwen2 shape, for a draft's 1-token step and a
verification's 5-row bucket. The count per layer is a 2-layer model's count less a 1-layer model's, so the
per-step ops (positions, rotary rows, the mask, the embedding, the head) are not charged to the layers."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from playground.core.cached import CachedLM
from playground.core.opcount import count_ops
from playground.core.static import StaticLM, release

BUDGET = 14
SHAPES = {  # the GQA ratios of Llama-3.1-8B (32:8) and Qwen2.5-7B (28:4), at widths a test builds in milliseconds
    "llama": (LlamaConfig, LlamaForCausalLM, dict(num_attention_heads=8, num_key_value_heads=2)),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(num_attention_heads=7, num_key_value_heads=1)),
}


def build(kind: str, layers: int):
    config, model, heads = SHAPES[kind]
    torch.manual_seed(0)
    cfg = config(vocab_size=96, hidden_size=7 * 8 * 2 if kind == "qwen2" else 64, intermediate_size=128,
                 num_hidden_layers=layers, tie_word_embeddings=False, **heads)
    return model(cfg).to(torch.bfloat16).eval()


def captured_ops(model, n: int):
    lm = StaticLM(model, "cpu", rows="last" if n == 1 else "all")
    lm.feed([1, 2, 3, 4])
    ids = torch.arange(5, 5 + n)
    ops = count_ops(lambda: lm._eager_captured(ids, 4))
    release(model)
    return ops


def transformers_ops(model, n: int):
    lm = CachedLM(model, "cpu")
    lm.feed([1, 2, 3, 4])
    return count_ops(lambda: lm.feed(list(range(5, 5 + n))))


def per_layer(count, kind: str, n: int):
    one, two = count(build(kind, 1), n), count(build(kind, 2), n)
    return sum(two.values()) - sum(one.values()), two - one


@pytest.mark.parametrize("n", [1, 5])
@pytest.mark.parametrize("kind", sorted(SHAPES))
def test_the_captured_step_dispatches_at_most_14_ops_per_layer(kind, n):
    ops, which = per_layer(captured_ops, kind, n)
    assert ops <= BUDGET, dict(which)
    # the counter has power: transformers' eager forward of the same model, counted alike, is over the budget
    theirs, their_ops = per_layer(transformers_ops, kind, n)
    assert theirs > BUDGET + 8, dict(their_ops)
