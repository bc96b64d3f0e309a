"""The lease's preflight (playground.preflight) on a CPU: each check passes here, and each fails in one line where
its fault is planted: a transformers too old (faked version), a forward that drops its cache, a carried wheel that is
not the one imported. The attention kernel is read from the ops dispatched; requirements are met, assumed or not."""

from __future__ import annotations

import argparse
from importlib.metadata import version

import pytest
import transformers
from transformers import LlamaForCausalLM

from playground.lab.profiled import Profiled
from playground.preflight import main
from playground.preflight.checks import check_cache, sdpa_kernel
from playground.preflight.kit import Failed, carried_problems, requirement_status

CPU = argparse.Namespace(device="cpu", wheels=None)


def test_an_old_transformers_stops_the_preflight_with_one_line_naming_both_versions(monkeypatch, capsys):
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert main(["--device", "cpu"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == ("preflight: transformers 5.17.0 is older than 5.24: carry the wheels (scripts/gpu_wheels.sh) "
                         "and pass their folder to scripts/gpu_check.sh")
    assert [line.split()[2] for line in lines[:-1]] == ["imports"]  # the checks after it never ran


def test_a_forward_that_drops_its_cache_fails_the_cache_check(monkeypatch):
    forward = LlamaForCausalLM.forward

    def without_cache(self, *args, cache=None, **kwargs):  # what transformers 5.17 does with `cache=`
        return forward(self, *args, **kwargs)

    assert "cache holds 5 of 5" in check_cache(CPU, {})
    monkeypatch.setattr(LlamaForCausalLM, "forward", without_cache)
    with pytest.raises(Failed, match=r"kept \d of 5 fed tokens in its cache, so it ran without one"):
        check_cache(CPU, {})


def test_the_attention_kernel_is_the_fused_op_dispatched_else_math():
    fused = Profiled(ops=("scaled_dot_product_attention", "_scaled_dot_product_cudnn_attention", "empty"),
                     top_ops=("scaled_dot_product_attention",), kernels=("cudnn_sdpa_fprop_kernel",), copies=())
    assert sdpa_kernel(fused) == "_scaled_dot_product_cudnn_attention [1 kernels: cudnn_sdpa_fprop_kernel]"
    math = Profiled(ops=("scaled_dot_product_attention", "matmul", "bmm", "_softmax", "bmm"), top_ops=(),
                    kernels=(), copies=())
    assert sdpa_kernel(math) == "math (scaled_dot_product_attention, matmul, bmm, _softmax)"


@pytest.mark.parametrize("text, status", [
    ("click>=8.4.2", "met"),
    ("click>=9", "click>=9 (found 8.5.1)"),
    ("tomli>=1.1.0; python_version < '3.11'", "n/a"),
    ("attrs>=22.2.0", "assumed"),
    ("typer", "met"),
    ("httpx2>=2", "httpx2>=2 (not there)"),
])
def test_a_requirement_is_met_missing_assumed_or_not_for_here(text, status):
    versions = {"click": "8.5.1", "attrs": None, "typer": None}
    assert requirement_status(text, versions, {"python_version": "3.12", "sys_platform": "linux"}) == status


def test_a_carried_wheel_must_be_the_one_imported(tmp_path):
    (tmp_path / f"pydantic-{version('pydantic')}-py3-none-any.whl").touch()  # the one imported here: its needs met
    assert carried_problems(tmp_path) == []
    (tmp_path / "typing_extensions-0.1.0-py3-none-any.whl").touch()
    imported = version("typing_extensions")
    assert carried_problems(tmp_path) == [f"typing-extensions 0.1.0 is carried but {imported} is imported"]
