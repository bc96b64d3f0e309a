#!/usr/bin/env bash
# The GPU check for a short lease: one command, on a machine with a CUDA GPU and no internet, within about 5
# minutes (a 15-minute lease keeps room for a machine start and a rerun), every result in one folder:
#   wheels        the carried wheels (scripts/gpu_wheels.sh wrote them) installed offline into $SITE (default
#                 /tmp/site), which goes first on PYTHONPATH: the image's own packages are left as they are;
#   preflight     `python -m playground.preflight`, in seconds: imports, versions (transformers >= 5.24), CUDA and
#                 bf16, a cache-length check on a 2-layer model, the attention kernel at the captured shapes. A
#                 failure stops the check with one line saying what is missing, before any step runs;
#   tests         the CUDA tests: tests/test_cuda.py and tests/test_cuda_graphs.py (the graphed forward against
#                 eager and transformers, greedy speculative equal to plain through the graphs, rollback, a seeded
#                 sampling run, replay from a worker thread, a step's kernels counted), with PLAYGROUND_DEVICE=cuda;
#   forwards_8b   `timing --random-weights --pair llama-3.1-8b`: the 8B target's v(n) for n = 1..17 and its 1B
#                 draft's c, eager against graphed, beside the weight-streaming floor, and the kernels one step
#                 launches (bf16, random weights built on the device: no download, and acceptance is not measured);
#   forwards_7b   the same for `--pair qwen2.5-7b` (7B target, 0.5B draft);
#   forwards_3b   the same for the seed's shapes, `--pair llama-3.2-3b` (3B target, 1B draft);
#   summary       one screen (python -m playground.lab.gpu_summary): card, driver, versions, per shape the
#                 step/floor ratio, v(1), v(5), v(17), c, the predicted speed-up at alpha 0.8, kernels per step,
#                 exactness through the graphs, and each target of the graphed path met, NOT MET or not measured;
# and, all along, nvidia-smi's clocks, utilisation, temperature and power once a second (read only: clocks are
# never set), in nvidia_smi.csv.
#
#   bash scripts/gpu_check.sh [--preflight-only] [WHEELS_DIR]
#
# WHEELS_DIR (or $WHEELS): the kit's wheels (bash scripts/gpu_wheels.sh; .whl by default there), installed with
# `pip install --no-index --no-deps --target $SITE`; a wheel too big to carry in one piece may come split as
# NAME.whl.part-* (`split -b 30M NAME.whl NAME.whl.part-`): the parts are joined first. --preflight-only: the
# wheels and the preflight only, its exit status the check's (1 on a machine without CUDA, after one line that
# says "no CUDA"). $OUT: the results folder (default results/gpu); $PYTHON: the interpreter (default
# .venv/bin/python if there, else python3); $BUDGET_S: the seconds the whole check may take (default 300); steps
# that would start after it are skipped and say so. $STEPS: the steps to run (default: tests forwards_8b
# forwards_7b forwards_3b), for a rerun of the ones that failed. compiled_8b (the 8B pair's graphed step through
# torch.compile, $PLAYGROUND_COMPILE_STEP=1, its compile time recorded) runs only when named. The model-weight steps of the embedded model
# (timing_draft timing_lookup acceptance_draft acceptance_lookup speed_draft speed_lookup: the loop, the clock and
# the records on the device with the embedded model's real weights, a second copy of it as the draft, so no
# speed-up is expected) run only when named in $STEPS, with a budget to match (e.g. BUDGET_S=480); they need gguf,
# which the kit does not carry.
# Results (7 files): preflight.json, tests.xml (JUnit XML), forwards_8b.json, forwards_7b.json, forwards_3b.json,
# nvidia_smi.csv, gpu_check.log (everything printed, the summary last), and the model-weight steps' JSON when run.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFLIGHT_ONLY=0
WHEELS="${WHEELS:-}"
for arg in "$@"; do
    case "$arg" in
        --preflight-only) PREFLIGHT_ONLY=1 ;;
        -*) echo "gpu_check: unknown option '$arg' (usage: gpu_check.sh [--preflight-only] [WHEELS_DIR])" >&2; exit 2 ;;
        *) WHEELS="$arg" ;;
    esac
done
OUT="${OUT:-results/gpu}"
SITE="${SITE:-/tmp/site}"
BUDGET_S="${BUDGET_S:-300}"
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
DEFAULT_STEPS="tests forwards_8b forwards_7b forwards_3b"
MODEL_STEPS="timing_draft timing_lookup acceptance_draft acceptance_lookup speed_draft speed_lookup"
OPTIONAL_STEPS="compiled_8b"
ALL_STEPS="$DEFAULT_STEPS $MODEL_STEPS $OPTIONAL_STEPS"
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
    listed "$name" "${STEPS:-$DEFAULT_STEPS}" || return 0
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

if [ -n "$WHEELS" ]; then
    say "installing the wheels in $WHEELS (offline) into $SITE"
    for first in "$WHEELS"/*.whl.part-aa; do
        [ -e "$first" ] || continue
        whole="${first%.part-aa}"
        [ -e "$whole" ] || cat "$whole".part-* >"$whole"
    done
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

say "preflight"
PREFLIGHT=("$PY" -m playground.preflight --out "$OUT/preflight.json")
if [ -n "$WHEELS" ]; then
    PREFLIGHT+=(--wheels "$WHEELS")
fi
if ! timeout --signal=INT --kill-after=10 60 "${PREFLIGHT[@]}"; then
    [ "$PREFLIGHT_ONLY" = 1 ] || say "stopped: the preflight failed (its last line says why); no step ran"
    exit 1
fi
if [ "$PREFLIGHT_ONLY" = 1 ]; then
    exit 0
fi

say "machine"
nvidia-smi || echo "nvidia-smi: not available"

if command -v nvidia-smi >/dev/null; then  # read only: a query, once a second, until the check ends
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,clocks.max.sm,utilization.gpu,utilization.memory,temperature.gpu,power.draw,memory.used \
        --format=csv -l 1 >"$OUT/nvidia_smi.csv" 2>/dev/null &
    SMI=$!
    trap 'kill "$SMI" 2>/dev/null || true' EXIT
fi

# The tests that use the device (they honour PLAYGROUND_DEVICE; none needs gradio, which a lease may not carry).
step tests 100 "$PY" -m pytest -q -p no:cacheprovider --junitxml "$OUT/tests.xml" \
    tests/test_cuda.py tests/test_cuda_graphs.py

RANDOM_WEIGHTS=(timing --random-weights --device cuda --dtype bfloat16 --rounds 2 --repeats 3)
step forwards_8b 60 "$PY" -m playground "${RANDOM_WEIGHTS[@]}" --pair llama-3.1-8b --out "$OUT/forwards_8b.json"
step forwards_7b 55 "$PY" -m playground "${RANDOM_WEIGHTS[@]}" --pair qwen2.5-7b --out "$OUT/forwards_7b.json"
step forwards_3b 45 "$PY" -m playground "${RANDOM_WEIGHTS[@]}" --pair llama-3.2-3b --out "$OUT/forwards_3b.json"
# Only when named in $STEPS: the 8B pair's graphed step compiled by torch.compile (inductor) before its capture,
# its compile time in the result (minutes of Triton codegen: not part of the 5-minute default).
step compiled_8b 240 env PLAYGROUND_COMPILE_STEP=1 "$PY" -m playground "${RANDOM_WEIGHTS[@]}" --arms graphed \
    --pair llama-3.1-8b --out "$OUT/compiled_8b.json"

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
"$PY" -m playground.lab.gpu_summary "$OUT" || echo "gpu_check: the summary could not be made (above: why)"
exit $((FAILED > 0 ? 1 : 0))
