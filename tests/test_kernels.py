"""The CPU kernels a model's linear layers run on (pairs.kernels): BLAS or oneDNN, the probe that chooses, and
that the loop stays exact on either."""

from __future__ import annotations

import pytest
import torch

from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration, Step
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.errors import PlaygroundError
from playground.pairs import kernels
from playground.pairs.kernels import OneDnnLinear, choose_kernels, resolve_kernels
from playground.pairs.models import _param_count, memory_report
from tests.tiny import perturbed, tiny_model, tiny_pair


def linears(model):
    return [m for m in model.modules() if isinstance(m, (torch.nn.Linear, OneDnnLinear))]


def fp32_model(seed=0, tied=False):
    m = tiny_model(vocab=64, seed=seed, dtype=torch.float32)
    if tied:
        m.lm_head.weight = m.model.embed_tokens.weight
    return m


def plain_tokens(pair, prompt, n):
    return [r.token for r in plain_generate(pair, prompt, max_new_tokens=n) if isinstance(r, Step)]


def spec_tokens(pair, prompt, proposer, k, n):
    recs = speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=n)
    return [t for r in recs if isinstance(r, Iteration) for t in r.emitted]


def test_resolve_kernels_reads_the_environment_and_refuses_unknown_names():
    assert resolve_kernels(None, env={}) == "auto"
    assert resolve_kernels(None, env={"PLAYGROUND_KERNELS": " oneDNN "}) == "onednn"
    assert resolve_kernels("blas", env={"PLAYGROUND_KERNELS": "onednn"}) == "blas"
    with pytest.raises(PlaygroundError, match="unknown kernels 'mkl'; choose one of auto, blas, onednn"):
        resolve_kernels("mkl", env={})


def test_onednn_linears_give_the_blas_logits():
    model = fp32_model()
    ids = torch.tensor([[1, 5, 9, 2, 7, 3]])
    with torch.inference_mode():
        before = model(ids).logits
    choice = choose_kernels(model, "onednn")
    assert choice.kernels == "onednn" and choice.asked == "onednn"
    assert all(isinstance(m, OneDnnLinear) for m in linears(model)) and len(linears(model)) == 2 * 7 + 1
    with torch.inference_mode():
        after = model(ids).logits
    assert torch.allclose(before, after, atol=1e-5, rtol=1e-5)


def test_blas_leaves_the_model_alone():
    model = fp32_model()
    choice = choose_kernels(model, "blas")
    assert (choice.kernels, choice.reason) == ("blas", "asked for")
    assert all(type(m) is torch.nn.Linear for m in linears(model))


def test_greedy_speculative_equals_plain_on_onednn():
    target, draft = fp32_model(0), None
    draft = perturbed(target, 0.05)
    for m in (target, draft):
        choose_kernels(m, "onednn")
    pair = tiny_pair(target, draft)
    for prompt in ([1, 2, 3], [7, 7, 7, 7, 9], [5, 11, 5, 11, 5]):
        expected = plain_tokens(pair, prompt, 24)
        for k in (1, 3, 8):
            assert spec_tokens(pair, prompt, DraftModelProposer(draft, "cpu", None), k, 24) == expected, (prompt, k)
            assert spec_tokens(pair, prompt, PromptLookupProposer(3), k, 24) == expected, (prompt, k)


def test_auto_times_both_kernels_and_keeps_what_its_probe_says():
    model = fp32_model()
    choice = choose_kernels(model, "auto")
    assert choice.asked == "auto"
    assert set(choice.probe_ms) == {"blas", "onednn"}
    for per in choice.probe_ms.values():
        assert set(per) == set(kernels.PROBE_SIZES) and all(ms > 0 for ms in per.values())
    total = {k: sum(v.values()) for k, v in choice.probe_ms.items()}
    expected = "onednn" if total["onednn"] < (1 - kernels.MARGIN) * total["blas"] else "blas"
    assert choice.kernels == expected
    kinds = {type(m) for m in linears(model)}
    assert kinds == ({OneDnnLinear} if expected == "onednn" else {torch.nn.Linear})
    d = choice.to_dict()
    assert d["kernels"] == expected and f"{total['blas']:.1f} ms" in d["reason"]


@pytest.mark.parametrize("onednn_share, chosen, reason", [
    (0.5, "onednn", "oneDNN faster than BLAS"),
    (0.98, "blas", "oneDNN not 5% faster than BLAS"),
])
def test_auto_keeps_onednn_only_when_its_probe_is_5_percent_faster(monkeypatch, onednn_share, chosen, reason):
    """Which kernels win the probe depends on the host (the test above takes whichever it gets): with the probe's
    timings made by hand, both outcomes run on any host."""
    def probe(model, swap, sizes=kernels.PROBE_SIZES, **_):
        return {"blas": {n: [0.01] for n in sizes}, "onednn": {n: [0.01 * onednn_share] for n in sizes}}

    monkeypatch.setattr(kernels, "time_kernels", probe)
    model = fp32_model()
    choice = choose_kernels(model, "auto")
    assert choice.kernels == chosen and choice.reason.startswith(reason)
    assert {type(m) for m in linears(model)} == {OneDnnLinear if chosen == "onednn" else torch.nn.Linear}


def test_auto_stays_on_blas_when_onednn_fails(monkeypatch):
    def broken(self, x):
        raise RuntimeError("could not create a primitive\nmore detail")

    monkeypatch.setattr(OneDnnLinear, "forward", broken)
    model = fp32_model()
    choice = choose_kernels(model, "auto")
    assert choice.kernels == "blas"
    assert choice.reason == "oneDNN failed on this machine: could not create a primitive"
    assert all(type(m) is torch.nn.Linear for m in linears(model))
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3]]))  # the model still runs


def test_models_onednn_cannot_serve_are_left_on_blas_or_refused():
    model = tiny_model(vocab=64, dtype=torch.float64)
    choice = choose_kernels(model, "auto")
    assert (choice.kernels, choice.reason) == ("blas", "oneDNN kernels are used for fp32 models only")
    assert not choice.probe_ms
    with pytest.raises(PlaygroundError, match="kernels 'onednn' asked for, but oneDNN kernels are used for fp32"):
        choose_kernels(model, "onednn")


def test_a_tied_head_counts_once_as_a_parameter_and_its_copy_as_memory():
    model = fp32_model(tied=True)
    params = _param_count(model)
    choose_kernels(model, "onednn")
    assert _param_count(model) == params
    head = model.lm_head
    assert isinstance(head, OneDnnLinear) and head.shares_weight
    assert not model.model.layers[0].mlp.up_proj.shares_weight
    pair = tiny_pair(model)
    head_bytes = head.packed.numel() * 4
    dense_bytes = sum(p.numel() * 4 for p in model.parameters())
    assert memory_report(pair)["target_bytes"] >= dense_bytes + head_bytes


@pytest.fixture(scope="module")
def embedded_both():
    from playground.pairs.loading import load_pair

    return {k: load_pair(draft=None, progress=None, kernels=k) for k in ("blas", "onednn")}


@pytest.mark.slow
def test_embedded_target_on_either_kernels_is_exact_and_says_which(embedded_both):
    from playground.envinfo import describe_setup
    from playground.inputs.text import encode_prompt

    ids = encode_prompt(embedded_both["blas"].tokenizer, "Write a JSON object with the keys name and age.")
    logits = {}
    for name, pair in embedded_both.items():
        assert pair.describe().target_kernels() == name
        assert ("oneDNN kernels" if name == "onednn" else "BLAS kernels") in describe_setup(pair)
        with torch.inference_mode():
            logits[name] = pair.target(torch.tensor([ids])).logits[0, -1]
        expected = plain_tokens(pair, ids, 32)
        for k in (2, 5):
            assert spec_tokens(pair, ids, PromptLookupProposer(3), k, 32) == expected, (name, k)
    assert (logits["blas"] - logits["onednn"]).abs().max() < 1e-3
    assert logits["blas"].argmax() == logits["onednn"].argmax()


@pytest.mark.slow
def test_bench_kernels_times_both_kernels_side_by_side(capsys):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_kernels", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.main(["--rounds", "2", "--sizes", "2", "--context", "16"])
    for name in ("blas", "onednn"):
        per = result["kernels"][name]
        assert set(per) == {"1", "2"} and per["1"]["v"] == 1.0  # sizes as the JSON file keeps them
        assert all(0 < x["min_ms"] <= x["median_ms"] <= x["max_ms"] for x in per.values())
    out = capsys.readouterr().out
    assert "| n | BLAS ms [min-max] | v(n) BLAS | oneDNN ms [min-max] | v(n) oneDNN | BLAS / oneDNN |" in out
    ratio = result["kernels"]["blas"]["2"]["median_ms"] / result["kernels"]["onednn"]["2"]["median_ms"]
    assert f"| {ratio:.2f} |" in out and "verdict:" in out
