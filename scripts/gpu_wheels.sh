#!/usr/bin/env bash
# The wheels a GPU lease carries, downloaded here (where PyPI answers) for the device image (CPython 3.12, manylinux
# x86_64): exactly the pins of scripts/gpu_image/wheels.txt, no dependency pulled in unnamed, one version each.
# Then scripts/gpu_image/kit.py checks the folder: the pins and nothing else, every wheel's requirements met by a pin
# or by the image (scripts/gpu_image/packages.txt), and the wheels with the working tree under the 64 MiB a lease
# may carry (it prints the size; over it, it fails).
#
#   bash scripts/gpu_wheels.sh [DIR]      DIR: the kit's folder, default .whl (ignored by git)
#
# DIR is the kit's own: a wheel there that wheels.txt does not pin (an older version) is removed first, so two
# versions never travel together. Then: bash scripts/gpu_check.sh DIR on the lease, with DIR carried.
# $PYTHON: the interpreter that runs pip and the check (default .venv/bin/python if there, else python3).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${1:-.whl}"
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
else
    PY=python3
fi
KIT=(env "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}" "$PY" scripts/gpu_image/kit.py)

mkdir -p "$DIR"
"${KIT[@]}" prune "$DIR"
mapfile -t PINS < <("${KIT[@]}" pins)
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" "${PINS[@]}"
"${KIT[@]}" check "$DIR"
