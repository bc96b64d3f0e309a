#!/usr/bin/env bash
# Install arctic-inference, pinned, into a virtualenv, for its suffix tree (the `suffix` drafter).
#
#   bash scripts/install_arctic_inference.sh [VENV]        (VENV defaults to .venv)
#
# Idempotent: does nothing when that version already imports its suffix tree in VENV.
# PyPI has only an sdist. Its default build compiles one C++ extension, the suffix tree
# (arctic_inference.suffix_decoding._C, nanobind; the CUDA ops are built only with
# ARCTIC_INFERENCE_PRECOMPILED_OPS=1), but its declared build requirements include torch>=2.10 (setup.py
# imports it for a cmake path the suffix tree does not use), protobuf and grpcio-tools. Built with pip's
# build isolation, that would download a CUDA torch; so the wheel is built without isolation in a throwaway
# build venv that sees VENV's own CPU torch (a .pth line) and holds the small build tools, and installed
# into VENV with --no-deps: the suffix tree needs only numpy at run time, no vLLM and no torch.
# The build took 28 s on a 2-core x86_64 machine (2026-12-05). The wheel is kept under
# ~/.cache/speculative-playground/wheels/, keyed by version, machine and Python.
set -euo pipefail

VERSION="0.3.0"
VENV="${1:-.venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
    echo "install_arctic_inference.sh: no python at $PY (give the virtualenv's directory)" >&2
    exit 2
fi
CHECK="import sys; from importlib.metadata import version; from arctic_inference.suffix_decoding import SuffixDecodingCache; sys.exit(version('arctic_inference') != '$VERSION')"
if "$PY" -c "$CHECK" >/dev/null 2>&1; then
    echo "arctic-inference $VERSION (suffix tree) already installed in $VENV"
    exit 0
fi

PYVER="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
SIGNATURE="arctic-inference==$VERSION suffix-tree-only $(uname -m) py$PYVER"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/speculative-playground/wheels/$(echo "$SIGNATURE" | sha256sum | cut -c1-16)"
WHEEL="$(ls "$CACHE"/arctic_inference-"$VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
    echo "Building arctic-inference $VERSION's suffix tree from source (under a minute on 2 cores) ..."
    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    BASE="$("$PY" -c 'import sys; print(sys.base_prefix)')/bin/python$PYVER"
    "$BASE" -m venv "$TMP/build-venv"
    # After the build venv's own packages: VENV's (its torch, which setup.py imports).
    "$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("-packages")))' >"$("$TMP/build-venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-target.pth"
    TOOLS="setuptools>=61 wheel nanobind==2.9.2 protobuf==5.29.6 grpcio-tools"
    command -v cmake >/dev/null || TOOLS="$TOOLS cmake>=3.18 ninja"
    "$TMP/build-venv/bin/python" -m pip install --quiet $TOOLS
    # cmake's FindPython takes the first python on PATH: the build venv's, which has nanobind.
    PATH="$TMP/build-venv/bin:$PATH" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
        "$TMP/build-venv/bin/python" -m pip wheel --no-deps --no-cache-dir --no-build-isolation \
        --no-binary arctic-inference -w "$TMP/wheel" "arctic-inference==$VERSION"
    mkdir -p "$CACHE"
    cp "$TMP"/wheel/arctic_inference-"$VERSION"-*.whl "$CACHE"/
    WHEEL="$(ls "$CACHE"/arctic_inference-"$VERSION"-*.whl | head -n1)"
else
    echo "Installing arctic-inference $VERSION from the wheel built earlier: $WHEEL"
fi

# --no-deps: its extras pull vLLM; the suffix tree needs numpy only (requirements.txt has it).
"$PY" -m pip install --force-reinstall --no-deps "$WHEEL"
"$PY" -c "$CHECK"
echo "arctic-inference $VERSION: the suffix tree imports"
