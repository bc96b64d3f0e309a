"""The target's prompt KV handed to the llama.cpp drafter (playground/drafters/llamacpp_kv.py).

The blob format and the key order are tested without llama.cpp; the rest needs llama-cpp-python and
is skipped, saying so, without it.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

from playground.core.cached import CachedLM
from playground.core.engine import plain_generate, speculative_generate
from playground.core.proposal import RunContext
from playground.core.sampling import GREEDY
from playground.drafters import llamacpp_kv as kv
from playground.drafters.proposers import HybridProposer
from tests.test_engine import tokens_of


def blob_arrays(layers=3, cells=5, row=8, seed=0):
    g = np.random.default_rng(seed)
    return [g.standard_normal((layers, cells, row)).astype(np.float16) for _ in range(2)]


@pytest.mark.parametrize("v_trans", [False, True])
def test_build_and_parse_round_trip(v_trans):
    keys, values = blob_arrays()
    layout = kv.Layout(n_layer=3, k_row=8, v_row=8, v_trans=v_trans)
    blob = kv.build(layout, keys, values)
    positions, read, k2, v2 = kv.parse(bytes(blob))
    assert positions == [0, 1, 2, 3, 4] and read == layout
    assert np.array_equal(np.stack(k2), keys) and np.array_equal(np.stack(v2), values)
    # the header is llama.cpp's: magic, sequence 0, one stream, 5 cells
    assert struct.unpack_from("<IiII", blob) == (kv.MAGIC, 0, 1, 5)


def test_parse_refuses_what_it_cannot_write():
    keys, values = blob_arrays()
    blob = bytes(kv.build(kv.Layout(3, 8, 8, False), keys, values))
    with pytest.raises(ValueError, match="one-stream"):
        kv.parse(b"\0\0\0\0" + blob[4:])
    with pytest.raises(ValueError, match="left over"):
        kv.parse(blob + b"\0")
    first_key_type = 16 + 5 * 12 + 8  # header, 5 cells of (position, count, id), v_trans and layer count
    q8 = blob[:first_key_type] + struct.pack("<i", 8) + blob[first_key_type + 4:]
    with pytest.raises(ValueError, match="not f16"):
        kv.parse(q8)


@pytest.mark.parametrize("head_dim", [8, 64])
def test_key_order_undoes_transformers_gguf_unpermute(head_dim):
    """transformers' GGUF loader turns a llama k_proj's GGUF rows into HF rows; llama.cpp's key element e comes
    from the HF row that GGUF row e went to."""
    gguf_rows = np.arange(2 * head_dim).reshape(2 * head_dim, 1)  # two KV heads
    processor = LlamaTensorProcessor(config={"num_attention_heads": 4, "num_key_value_heads": 2})
    hf_rows = processor.process(gguf_rows, "blk.0.attn_k.weight").weights[:, 0].tolist()
    expected = [hf_rows.index(e) for e in range(head_dim)]  # the first head
    assert kv.key_order(head_dim).tolist() == expected


def test_from_cache_lays_out_llama_cpp_rows():
    layers, heads, n, d = 2, 3, 4, 8
    cache = SimpleNamespace(layers=[SimpleNamespace(keys=torch.randn(1, heads, n + 2, d),
                                                    values=torch.randn(1, heads, n + 2, d)) for _ in range(layers)])
    keys, values = kv.from_cache(cache, n, d)
    assert keys.shape == values.shape == (layers, n, heads * d) and keys.dtype == np.float16
    order = kv.key_order(d)
    layer, pos, head = 1, 2, 2
    want_k = cache.layers[layer].keys[0, head, pos, order].half().numpy()
    assert np.array_equal(keys[layer, pos, head * d:(head + 1) * d], want_k)
    want_v = cache.layers[layer].values[0, head, pos].half().numpy()
    assert np.array_equal(values[layer, pos, head * d:(head + 1) * d], want_v)


def test_compatible_names_what_differs():
    layout = kv.Layout(n_layer=30, k_row=192, v_row=192, v_trans=False)
    llama = SimpleNamespace(model_type="llama", num_key_value_heads=3, num_attention_heads=9, hidden_size=576,
                            num_hidden_layers=30, head_dim=64)
    assert kv.compatible(llama, layout, 30, 3) is None
    assert "qwen2" in kv.compatible(SimpleNamespace(**{**vars(llama), "model_type": "qwen2"}), layout, 30, 3)
    assert "not llama.cpp's" in kv.compatible(SimpleNamespace(**{**vars(llama), "num_hidden_layers": 12}),
                                              layout, 30, 3)


# --- with llama.cpp ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install_llama_cpp.sh)")
    from playground.pairs.loading import load_pair

    return load_pair(draft=None, progress=None)


@pytest.fixture(scope="module")
def sharing(pair):
    from playground.drafters.llamacpp import LlamaCppProposer

    proposer = LlamaCppProposer(pair.tokenizer, vocab_size=pair.vocab_size, target_config=pair.target.config)
    yield proposer
    proposer.close()


def chat_ids(pair, text):
    return pair.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True, return_dict=True)["input_ids"]


TEXT = "List three tools an agent might call to book a flight, as JSON."


def test_the_embedded_pair_shares_and_says_so(pair, sharing):
    assert sharing.kv_share is not None, sharing.kv_share_note
    assert sharing.takes_target_kv and HybridProposer(sharing).takes_target_kv
    assert "prompt KV from the target" in sharing.describe()
    assert sharing.kv_tokens == [] and sharing.kv_length() == 0  # the layout check left nothing behind


def test_drafter_on_the_targets_kv_drafts_what_its_own_prefill_drafts(pair, sharing):
    ids = chat_ids(pair, TEXT)
    ctx = RunContext(GREEDY, torch.Generator().manual_seed(0), frozenset(pair.eos_ids))
    sharing.forget()
    sharing.share_kv = False
    try:
        sharing.begin(ids, ctx)
    finally:
        sharing.share_kv = True
    assert sharing.shared_kv == 0
    own_logits = sharing._eval([ids[-1]], logits=True).clone()
    sharing.forget()
    sharing.begin(ids, ctx)
    own = sharing.propose(ids, 8).tokens

    target = CachedLM(pair.target, pair.device, pair.vocab_size)
    target.feed(ids[:-1], last_only=True)
    sharing.forget()
    sharing.begin(ids, RunContext(GREEDY, torch.Generator(), frozenset(pair.eos_ids), target_kv=target))
    assert sharing.shared_kv == len(ids) - 1 and sharing.kv_tokens == ids[:-1]
    assert sharing.kv_length() == len(ids) - 1
    shared_logits = sharing._eval([ids[-1]], logits=True).clone()
    # Same weights, one side's KV from fp32 kernels: the next token agrees, the logits nearly do
    assert int(shared_logits.argmax()) == int(own_logits.argmax())
    assert float((shared_logits - own_logits).abs().max()) < 0.05 * float(own_logits.abs().max())
    sharing.rollback(ids)
    assert sharing.propose(ids, 8).tokens == own


def test_greedy_on_shared_kv_equals_plain_in_turn_by_default(pair, sharing, monkeypatch):
    ids = chat_ids(pair, TEXT)
    plain = tokens_of(plain_generate(pair, ids, max_new_tokens=32))
    # spare cores would make the engine overlap a drafter that prefills; one that copies waits its turn
    monkeypatch.setattr("playground.core.engine.spare_prefill_threads", lambda device: 2)
    for drafter in (sharing, HybridProposer(sharing)):
        sharing.forget()
        records = list(speculative_generate(pair, ids, proposer=drafter, k=4, max_new_tokens=32))
        assert not records[0].overlapped and records[0].draft_shared == len(ids) - 1
        assert tokens_of(records) == plain


def test_a_refused_blob_falls_back_to_prefilling(pair, sharing, monkeypatch):
    ids = chat_ids(pair, TEXT)
    plain = tokens_of(plain_generate(pair, ids, max_new_tokens=16))
    real_build = kv.build

    def broken(layout, keys, values):
        blob = real_build(layout, keys, values)
        blob[-3:] = b""  # a truncated blob: llama.cpp reads past its end and refuses it
        return blob

    monkeypatch.setattr(kv, "build", broken)
    sharing.forget()
    records = list(speculative_generate(pair, ids, proposer=sharing, k=4, max_new_tokens=16))
    assert records[0].draft_shared == 0 and sharing.kv_tokens[: len(ids) - 1] == ids[:-1]
    assert tokens_of(records) == plain


def test_few_new_tokens_are_evaluated_not_copied(pair, sharing):
    ids = chat_ids(pair, TEXT)
    ctx = RunContext(GREEDY, torch.Generator(), frozenset(pair.eos_ids))
    sharing.forget()
    sharing.begin(ids[:-3], ctx)  # the drafter already holds all but the last few prompt tokens
    target = CachedLM(pair.target, pair.device, pair.vocab_size)
    target.feed(ids[:-1], last_only=True)
    sharing.begin(ids, RunContext(GREEDY, torch.Generator(), frozenset(pair.eos_ids), target_kv=target))
    assert sharing.shared_kv == 0 and sharing.reused_prefix == len(ids) - 4 and sharing.kv_tokens == ids[:-1]
