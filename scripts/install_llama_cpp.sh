#!/usr/bin/env bash
# Install llama-cpp-python, pinned, into a virtualenv, built from source with the playground's flags.
#
#   bash scripts/install_llama_cpp.sh [VENV]        (VENV defaults to .venv)
#
# Idempotent: does nothing when that version, built with these flags, already imports in VENV.
# PyPI has only an sdist, so the first install compiles llama.cpp (cmake + gcc, ~20 min on 2 cores);
# the wheel is kept under ~/.cache/speculative-playground/wheels/, keyed by version, flags, machine
# and Python, so another venv (or CI) on the same machine installs it in seconds.
#
# Flags, and why (measured on a 2-core machine beside torch 2.13's CPU wheel; the measurements are in
# docs/measuring.md, "Facts the code relies on"):
#   GGML_OPENMP=ON     (llama.cpp's default) ggml runs its threads on OpenMP. torch's wheel bundles
#                      its own libgomp under the same soname, libgomp.so.1, so the dynamic loader gives
#                      torch and llama.cpp ONE runtime in either import order (the one loaded first;
#                      tests/test_llamacpp.py checks both orders). One runtime means one pool of threads,
#                      and draft and target take turns on it. With OpenMP OFF, ggml's own pool spins in
#                      its barriers (hundreds per token, never yielding) while torch's OpenMP workers are
#                      still spinning after the target's pass: on 2 cores the draft step went from ~11 to
#                      ~21-24 ms (median), back to ~11 only when torch's spinning was turned off
#                      (GOMP_SPINCOUNT=0; a passive wait policy, OMP_WAIT_POLICY=PASSIVE, slows torch's
#                      own step from 50 to 83 ms). LLAMA_CPP_OPENMP=OFF builds it off
#                      all the same, for a torch whose OpenMP runtime is not libgomp.so.1.
#   GGML_NATIVE=OFF    (x86_64) the portable x86-64-v3 set ggml enables when not native: SSE4.2, AVX,
#                      AVX2, FMA, F16C, BMI2; no AVX-512, no AMX. The same wheel runs on every x86_64
#                      machine of this kind, whichever CPU it lands on (a -march=native build kept in a
#                      reused venv or wheel cache dies of SIGILL on an older CPU), and ggml's AMX code,
#                      which segfaulted on an AMX CPU (docs/measuring.md), is not compiled in at all.
#                      Other architectures keep GGML_NATIVE=ON and key the cache on the CPU model.
#   LLAVA_BUILD=OFF    the multimodal library, which the playground does not use (less to compile).
set -euo pipefail

VERSION="0.3.36"
VENV="${1:-.venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "install_llama_cpp.sh: no python at $PY (give the virtualenv's directory)" >&2
    exit 2
fi

ARCH="$(uname -m)"
FLAGS="-DGGML_OPENMP=${LLAMA_CPP_OPENMP:-ON} -DLLAVA_BUILD=OFF"
if [ "$ARCH" = "x86_64" ]; then
    FLAGS="$FLAGS -DGGML_NATIVE=OFF"
    CPU_KEY="x86-64-v3"
else
    CPU_KEY="$(grep -m1 -iE 'model name|cpu part|cpu model' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-12 || echo native)"
fi
PYVER="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
SIGNATURE="llama-cpp-python==$VERSION $FLAGS $ARCH $CPU_KEY py$PYVER"
MARKER="$VENV/.llama-cpp-python-build"

# Already there? The right version importing, built with these flags (recorded by this script).
if [ "$(cat "$MARKER" 2>/dev/null)" = "$SIGNATURE" ] &&
    "$PY" -c "import sys, llama_cpp; sys.exit(llama_cpp.__version__ != '$VERSION')" >/dev/null 2>&1; then
    echo "llama-cpp-python $VERSION already installed in $VENV ($FLAGS)"
    exit 0
fi

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/speculative-playground/wheels/$(echo "$SIGNATURE" | sha256sum | cut -c1-16)"
WHEEL="$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
    echo "Building llama-cpp-python $VERSION from source ($FLAGS); about 20 minutes on 2 cores ..."
    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS and could hand back a build with other flags.
    CMAKE_ARGS="$FLAGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$PY" -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$TMP" "llama-cpp-python==$VERSION"
    mkdir -p "$CACHE"
    cp "$TMP"/llama_cpp_python-"$VERSION"-*.whl "$CACHE"/
    WHEEL="$(ls "$CACHE"/llama_cpp_python-"$VERSION"-*.whl | head -n1)"
else
    echo "Installing llama-cpp-python $VERSION from the wheel built earlier: $WHEEL"
fi

# Replace whatever llama-cpp-python is there (another version or other flags), then its dependencies.
"$PY" -m pip install --force-reinstall --no-deps "$WHEEL"
"$PY" -m pip install "$WHEEL"
"$PY" -c "import llama_cpp; print('llama-cpp-python', llama_cpp.__version__, 'imports')"
echo "$SIGNATURE" >"$MARKER"
