"""vLLM's suffix method (Arctic Inference's suffix tree, in vLLM's own venv): the sweep starts suffix servers with
the factor asked for, a venv without the tree is refused before vLLM loads anything, and a real suffix server
(tests/vllm_servers.py) keeps greedy output and drafts from the prompt."""

from __future__ import annotations

import pytest

from playground.backends import VllmClient, VllmServer
from playground.backends.vllm_server import VllmServerError, arctic_check, suffix
from playground.backends.vllm_sweep import SweepPlan
from playground.errors import PlaygroundError
from playground.inputs.presets import get_preset
from tests.vllm_servers import COPY, SUFFIX, needs_vllm


def plan(tmp_path, **kw) -> SweepPlan:
    return SweepPlan(model=tmp_path, presets=[get_preset("tool_call")], **kw)


def test_the_sweep_starts_suffix_servers_with_the_factor_asked_for(tmp_path):
    four = plan(tmp_path, methods=["ngram", "suffix"], suffix_factor=4.0)
    four.check()
    assert four.spec("suffix", 8).to_dict() == {"method": "suffix", "num_speculative_tokens": 8,
                                                "suffix_decoding_max_spec_factor": 4.0}
    assert four.record().suffix_factor == 4.0 and four.spec("ngram", 2).method == "ngram"
    assert plan(tmp_path, methods=["suffix"]).spec("suffix", 4).to_dict() == {"method": "suffix",
                                                                             "num_speculative_tokens": 4}
    with pytest.raises(PlaygroundError, match=r"got eagle \(eagle, eagle3, mtp, medusa need a trained head"):
        plan(tmp_path, methods=["eagle"]).check()
    with pytest.raises(PlaygroundError, match="--suffix-factor must be > 0, got 0"):
        plan(tmp_path, methods=["suffix"], suffix_factor=0).check()


def test_a_vllm_venv_without_the_suffix_tree_is_refused_before_vllm_starts(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"  # a stand-in that fails the import as a venv without the tree does
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'arctic_inference'\" >&2\nexit 1\n")
    python.chmod(0o755)
    (venv / ".vllm-installed").write_text("torch vllm")
    ok, why = arctic_check(venv)
    assert not ok and "No module named 'arctic_inference'" in why
    assert f"bash scripts/install_arctic_inference.sh {venv}" in why
    server = VllmServer(tmp_path, suffix(4), venv=venv, log_path=tmp_path / "server.log")
    with pytest.raises(VllmServerError, match="vLLM's suffix method needs arctic-inference"):
        server.start()
    assert server.proc is None and not (tmp_path / "server.log").exists()  # nothing was started


@needs_vllm
@pytest.mark.slow
def test_vllms_suffix_method_keeps_greedy_output_and_drafts_from_the_prompt(vllm_servers):
    plain = VllmClient(vllm_servers["plain"].url, timeout=120)
    spec = VllmClient(vllm_servers["suffix"].url, timeout=120, spec=SUFFIX)
    assert spec.speculative() and arctic_check()[0]
    ids = plain.tokenize(messages=list(get_preset("tool_call").messages))
    for prompt in (COPY, ids):
        assert spec.run(prompt, max_tokens=40).token_ids == plain.run(prompt, max_tokens=40).token_ids
    req = spec.run(COPY, max_tokens=48)
    assert req.accepted > 0 and req.accepted == req.spec["num_accepted_draft_tokens"]
    assert max(s.n_drafted for s in req.verify_steps) <= SUFFIX.k
