"""The package as pip installs it: pyproject.toml agrees with requirements*.txt, and a non-editable
`pip install .` into a fresh virtualenv gives a `playground` command that lists its commands and the presets
from the installed copy (package data), run away from the repository.

Offline: pip runs with --no-index --no-build-isolation, so the build backend (setuptools, from
requirements-dev.txt) and the dependencies (torch, ...) come from the virtualenv running the tests.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirement_lines(path: Path) -> list[str]:
    """The requirements in a requirements file: comments, blank lines and `-r other.txt` dropped."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(line)
    return out


def canonical(requirement: str) -> str:
    """`Name_x >= 1,<2` -> `name-x<2,>=1`: the same requirement written either way compares equal."""
    name, spec = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)", requirement.strip()).groups()
    parts = sorted(p.strip() for p in spec.replace(" ", "").split(",") if p.strip())
    return re.sub(r"[-_.]+", "-", name).lower() + ",".join(parts)


def test_pyproject_dependencies_are_requirements_txt():
    declared = sorted(canonical(r) for r in pyproject()["project"]["dependencies"])
    assert declared == sorted(canonical(r) for r in requirement_lines(ROOT / "requirements.txt"))
    assert "torch==2.13.0" in declared


def test_pyproject_dev_extra_is_requirements_dev_txt():
    assert (ROOT / "requirements-dev.txt").read_text().splitlines()[0] == "-r requirements.txt"
    dev = sorted(canonical(r) for r in pyproject()["project"]["optional-dependencies"]["dev"])
    assert dev == sorted(canonical(r) for r in requirement_lines(ROOT / "requirements-dev.txt"))


def test_ruff_is_pinned_to_the_version_the_setup_installs_and_make_test_lints_first():
    (pin,) = [r for r in requirement_lines(ROOT / "requirements-dev.txt") if r.startswith("ruff")]
    version = pin.removeprefix("ruff==")
    try:
        assert importlib.metadata.version("ruff") == version, "the virtualenv's ruff is not the pinned one"
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"ruff is not installed in this virtualenv (requirements-dev.txt pins {pin}; run make setup)")
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lint: .*\n\t\$\(VENV\)/bin/ruff check \.$", makefile, re.MULTILINE)
    assert re.search(r"^test: lint$", makefile, re.MULTILINE)
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


def test_make_test_runs_every_file_that_uses_the_vllm_servers():
    """The second part of `make test` collects only VLLM_TESTS; a file using the servers left out of that list would
    run in neither part (the first deselects the `vllm_servers` marker)."""
    (listed,) = re.findall(r"^VLLM_TESTS := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    takes = re.compile(r"^\s*def \w+\([^)]*\bvllm_servers\b", re.MULTILINE)  # a test or fixture taking the servers
    using = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py") if takes.search(p.read_text())}
    assert using and set(listed.split()) == using
    assert re.search(r"^\t\$\(PY\) -m pytest -m vllm_servers \$\(VLLM_TESTS\)$", (ROOT / "Makefile").read_text(),
                     re.MULTILINE)


def test_pyproject_declares_the_packages_the_data_and_the_command():
    project = pyproject()
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert project["project"]["scripts"] == {"playground": "playground.cli:run"}
    setuptools = project["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["include"] == ["playground*"]
    assert "presets/*.json" in setuptools["package-data"]["playground"]
    assert not (ROOT / "playground" / "presets" / "__init__.py").exists(), "the presets are data, not a package"
    assert project["tool"]["ruff"]["line-length"] == 120


def commands() -> list[str]:
    from playground.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def shipped_presets() -> list[str]:
    return sorted(p.stem for p in (ROOT / "playground" / "presets").glob("*.json"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the package pip-installed into it (not editable), offline. Returns its bin/."""
    try:
        import setuptools
    except ImportError:
        pytest.fail("setuptools is not installed in this virtualenv (requirements-dev.txt has it; run make setup)")
    major, minor = (int(x) for x in setuptools.__version__.split(".")[:2])
    assert (major, minor) >= (70, 1), f"setuptools {setuptools.__version__}: 70.1+ builds wheels without `wheel`"

    tmp = tmp_path_factory.mktemp("packaging")
    # Build from a copy: an in-tree build would leave build/ and *.egg-info in the repository. The copy leaves out
    # the virtualenvs (setup puts vLLM's, 3.5 GB, beside the repository's own).
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", ".ci", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis", ".ruff_cache", ".cache",
        "results", "build", "dist", "*.egg-info", "tests", "docs", "*.gguf", "*.safetensors"))
    venv = tmp / "venv"
    # --system-site-packages from a virtualenv's python reaches the *base* interpreter's site-packages, not the
    # virtualenv's; a .pth file adds this virtualenv's (torch, pip, setuptools, ...) after the new one's own.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    parents = [p for p in {*site.getsitepackages(), sysconfig.get_path("purelib")} if Path(p).is_dir()]
    (purelib / "_parent_venv.pth").write_text("\n".join(sorted(parents)) + "\n")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
    env.pop("PYTHONPATH", None)
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
         "--no-cache-dir", "--quiet", str(src)],
        capture_output=True, text=True, timeout=300, cwd=tmp, env=env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    shutil.rmtree(src)  # nothing may be read from the source tree after this
    return venv / "bin"


def playground(bin_dir: Path, *args: str, exe: str = "playground") -> subprocess.CompletedProcess:
    away = bin_dir.parent.parent / "elsewhere"  # not the repository, not the source copy
    away.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(bin_dir / "playground"), *args] if exe == "playground" else [str(bin_dir / "python"), "-m",
                                                                           "playground", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=away, env=env, check=False)


def test_the_installed_copy_is_the_one_that_runs(installed):
    code = "import playground, playground.inputs.presets as p; print(playground.__file__); print(p.PRESETS_DIR)"
    run = subprocess.run([str(installed / "python"), "-c", code],
                         capture_output=True, text=True, timeout=60, cwd=installed, check=False)
    assert run.returncode == 0, run.stderr
    package, presets = (Path(line) for line in run.stdout.splitlines())
    venv = installed.parent.resolve()
    assert venv in package.resolve().parents and "site-packages" in package.parts, package
    assert sorted(p.stem for p in presets.glob("*.json")) == shipped_presets()


@pytest.mark.parametrize("exe", ["playground", "python -m playground"])
def test_the_installed_command_lists_its_commands(installed, exe):
    assert (installed / "playground").is_file(), "pip installed no `playground` console script"
    run = playground(installed, "--help", exe=exe)
    assert run.returncode == 0, run.stdout + run.stderr
    for command in commands():
        assert command in run.stdout, f"{exe} --help does not list {command}"


def test_the_installed_command_lists_the_presets_from_the_installed_copy(installed):
    run = playground(installed, "presets")
    assert run.returncode == 0, run.stdout + run.stderr
    listed = sorted(line.split()[0] for line in run.stdout.splitlines() if line.strip())
    assert listed == shipped_presets() and len(listed) == 11, run.stdout
