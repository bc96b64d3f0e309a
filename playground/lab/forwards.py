"""Step costs of a pair's shapes on each forward: `timing --random-weights`.

A named pair is built from its shipped configs with random weights (playground.pairs.synthetic) on the chosen
device and dtype, and its steps are timed on the forwards the loop can run:
  eager     transformers' forward with a DynamicCache for the target, the lean forward for the draft (a GPU's
            path before graphs, a CPU's default);
  static    the static-cache forward (core.static) for both, without graphs (a CPU's candidate);
  graphed   the same arithmetic replayed from CUDA graphs (CUDA only; the GPU's default).
For each: v(n) over n = 1..n_max new tokens after a context, the draft's one-token step as the loop takes it,
c, and the cost model's predicted speed-up per k at a few alphas; beside them, the weight-streaming floor of a
target step (the bytes a step must read over the device's memory bandwidth, measured by a large copy).

Arms alternate round by round (A B, B A, ...) so that a host that drifts moves both; figures are medians over
rounds with the spread of the per-round medians. Timing is real; what random weights would propose and accept
means nothing, and nothing here measures acceptance: the alphas are assumptions, printed as such.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence

import torch

from ..core.cached import CachedLM
from ..core.clock import Clock
from ..core.cost import predicted_speedup
from ..core.lean import draft_lm
from ..core.static import StaticLM, compile_seconds, release
from ..core.step import Shapes
from ..errors import PlaygroundError
from ..pairs.synthetic import param_count
from ..results.calibration import CUDA_KERNELS, ForwardsArm, ForwardsResult, ForwardsRound, StepKernels, StreamingFloor
from ..tables import median_of
from .common import Progress, tick
from .profiled import profiled

ALPHAS = (0.6, 0.8, 0.9)
ARMS = ("eager", "static", "graphed")
DRAFT_CHAIN = 4  # draft steps timed back to back, as one proposal of k = 4 runs them
# Datasheet peak memory bandwidth (bytes/s) by a substring of torch.cuda.get_device_name, most specific first: a
# reference beside the measured copy, which is what the floor uses (no card reaches its datasheet peak).
DATASHEET_BANDWIDTH = (
    ("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12),
    ("A100-SXM4-80GB", 2.039e12), ("A100-PCIE-80GB", 1.935e12), ("A100", 1.555e12),
    ("L40S", 0.864e12), ("A10G", 0.6e12), ("L4", 0.3e12), ("RTX 4090", 1.008e12),
)


def default_arms(device: torch.device) -> tuple[str, ...]:
    """eager beside the path the loop takes by default there: graphed on CUDA, the static forward on a CPU."""
    return ("eager", "graphed") if device.type == "cuda" else ("eager", "static")


def datasheet_bandwidth(name: str | None) -> float | None:
    return next((bw for key, bw in DATASHEET_BANDWIDTH if name and key in name), None)


def copy_bandwidth(device: torch.device, mib: int | None = None, repeats: int = 5) -> float:
    """Bytes per second of a large device-to-device copy (read + write), the best of `repeats`."""
    mib = mib or (1024 if device.type == "cuda" else 256)
    src = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    clock, best = Clock(device), float("inf")
    dst.copy_(src)  # first touch: pages and caches
    for _ in range(repeats):
        t0 = clock.now()
        dst.copy_(src)
        best = min(best, clock.now() - t0)
    del src, dst
    return 2 * (mib << 20) / best


def streamed_bytes(model, context: int) -> int:
    """Bytes a one-token step reads: every weight but an untied input embedding (a step reads one row of it),
    and the keys and values of `context` tokens. From the config's shapes (pairs.synthetic.param_count) and the
    model's dtype, not from its modules: a CPU's oneDNN kernels replace the linear layers' weights with packed ones."""
    cfg = model.config
    size = torch.empty((), dtype=model.dtype).element_size()
    embed = cfg.vocab_size * cfg.hidden_size
    weights = param_count(cfg) - (0 if cfg.tie_word_embeddings else embed)
    s = Shapes(cfg)
    kv = 2 * cfg.num_hidden_layers * s.kv_heads * s.head_dim * context
    return (weights + kv) * size


def _timer(device: torch.device) -> Callable[[Callable[[], object]], tuple[float, float | None]]:
    """time(fn) -> (wall seconds, CUDA-event seconds or None): the wall clock synchronises the device at both ends
    (core.clock.Clock); on CUDA the events recorded on the stream beside it say what the GPU itself took."""
    clock = Clock(device)

    def time_it(fn):
        if device.type != "cuda":
            t0 = clock.now()
            fn()
            return clock.now() - t0, None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = clock.now()
        start.record()
        fn()
        end.record()
        wall = clock.now() - t0
        return wall, start.elapsed_time(end) / 1000.0

    return time_it


def _target_lm(pair, arm: str, capacity: int):
    if arm == "eager":
        return CachedLM(pair.target, pair.device, pair.vocab_size)
    lm = StaticLM(pair.target, pair.device, pair.vocab_size, rows="all", graphs=arm == "graphed")
    lm.reserve(capacity)
    return lm


def _draft_lm(pair, arm: str):
    if arm == "eager":
        return draft_lm(pair.draft, pair.device, pair.vocab_size, "auto")
    return StaticLM(pair.draft, pair.device, pair.vocab_size, rows="last", graphs=arm == "graphed")


def _draft_chain(lm, first: int, on_device: bool) -> None:
    """DRAFT_CHAIN draft steps, each fed the previous one's arg-max: read by the host (int) on the eager path,
    fed back as a device id on the static ones (as DraftModelProposer does on each)."""
    token = first
    for _ in range(DRAFT_CHAIN):
        logits = lm.feed(token.view(1) if on_device and isinstance(token, torch.Tensor) else [int(token)],
                         last_only=True)
        token = logits[-1].argmax()
        if not on_device:
            token = int(token)


def _round(pair, arm: str, context: Sequence[int], ns: Sequence[int], repeats: int, time_it) -> ForwardsRound:
    """One arm's timings over one round: per n the target passes, the draft chains (per step)."""
    out = ForwardsRound(target={n: [] for n in ns}, target_gpu={n: [] for n in ns})
    lm = _target_lm(pair, arm, len(context) + max(ns) + 1)
    lm.feed(list(context), last_only=True)
    base, filler = len(lm), list(context[-max(ns):])
    for _ in range(repeats):
        for n in ns:
            wall, gpu = time_it(lambda n=n: lm.feed(filler[:n]))
            lm.crop(base)
            out.target[n].append(wall)
            out.target_gpu[n].append(gpu)
    if pair.draft is not None:
        dlm = _draft_lm(pair, arm)
        if isinstance(dlm, StaticLM):
            dlm.reserve(len(context) + DRAFT_CHAIN + 1)
        dlm.feed(list(context), last_only=True)
        dbase = len(dlm)
        for _ in range(repeats):
            wall, gpu = time_it(lambda: _draft_chain(dlm, context[-1], on_device=arm != "eager"))
            dlm.crop(dbase)
            out.draft.append(wall / DRAFT_CHAIN)
            out.draft_gpu.append(gpu / DRAFT_CHAIN if gpu is not None else None)
    return out


def _summary(rounds: list[ForwardsRound], ns: Sequence[int], gpu: bool) -> ForwardsArm:
    """One arm's medians over all its timings, the spread of its per-round medians, v(n), c and the predictions."""
    pooled = {n: [x for r in rounds for x in r.target[n]] for n in ns}
    step = statistics.median(pooled[1])
    out = ForwardsArm(
        target_step_s=step,
        target_pass_s={n: statistics.median(xs) for n, xs in pooled.items()},
        v={n: statistics.median(xs) / step for n, xs in pooled.items()},
        target_step_round_medians_s=[statistics.median(r.target[1]) for r in rounds],
        raw=rounds,
        target_step_gpu_s=median_of([x for r in rounds for x in r.target_gpu[1]]) if gpu else None,
    )
    drafts = [x for r in rounds for x in r.draft]
    if drafts:
        out.draft_step_s = statistics.median(drafts)
        out.draft_step_round_medians_s = [statistics.median(r.draft) for r in rounds]
        out.c = out.draft_step_s / step
        if gpu:
            out.draft_step_gpu_s = median_of([x for r in rounds for x in r.draft_gpu])
        out.predicted = {a: {k: predicted_speedup(a, k, out.c, out.v) for k in range(1, max(ns))} for a in ALPHAS}
    return out


def step_kernels(pair, context: Sequence[int]) -> StepKernels | None:
    """What one 1-token feed of each model's static forward runs, eagerly, after a warm-up feed: on CUDA the
    kernels it launches, which are the ones a CUDA graph of that step records and replays (the graph's copies of
    the token and position in come apart); on a CPU, which has no kernels to count, the aten ops the step
    dispatches itself (nested ones not counted). None where the profiler saw no CUDA activity at all (no CUPTI):
    not measured, rather than a count of 0."""
    device = torch.device(pair.device)
    counts: dict[str, int] = {}
    for role, model, rows in (("target", pair.target, "all"), ("draft", pair.draft, "last")):
        if model is None:
            continue
        lm = StaticLM(model, device, pair.vocab_size, rows=rows, graphs=False)
        lm.feed(list(context), last_only=True)
        lm.feed(list(context[-1:]))  # warm-up: the first one-token feed may set up what later ones reuse
        ran = profiled(lambda lm=lm: lm.feed(list(context[-1:])), device)
        if device.type == "cuda" and not (ran.kernels or ran.copies):
            return None
        counts[role] = len(ran.kernels) if device.type == "cuda" else len(ran.top_ops)
    unit = CUDA_KERNELS if device.type == "cuda" else "aten ops dispatched (a CPU runs no kernels to count)"
    return StepKernels(unit=unit, target=counts["target"], draft=counts.get("draft"))


def gpu_driver() -> str | None:
    """The NVIDIA driver's version, read with nvidia-smi (read only), or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def time_forwards(pair, arms: Sequence[str] | None = None, context: int = 256, n_max: int = 17, rounds: int = 3,
                  repeats: int = 3, seed: int = 0, progress: Progress = None) -> ForwardsResult:
    """Time `pair` (random weights or not) on each of `arms`, alternating them round by round (a first round per
    arm, untimed, warms up and captures the graphs). The result holds each arm's summary (`_summary`), the
    floor and the bandwidth behind it."""
    device = torch.device(pair.device)
    arms = tuple(arms or default_arms(device))
    bad = [a for a in arms if a not in ARMS]
    if bad or ("graphed" in arms and device.type != "cuda"):
        raise PlaygroundError(f"arms are {', '.join(ARMS)} (graphed on CUDA only), got {', '.join(arms)}")
    if not 1 <= n_max <= 17:
        raise PlaygroundError(f"n_max is from 1 to 17 (the longest captured feed), got {n_max}")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, pair.vocab_size, (context + n_max,), generator=gen).tolist()
    ns, time_it = list(range(1, n_max + 1)), _timer(device)
    timed: dict[str, list[ForwardsRound]] = {a: [] for a in arms}
    started, total = time.perf_counter(), (rounds + 1) * len(arms)
    with torch.inference_mode():
        for r in range(rounds + 1):
            order = arms if r % 2 == 0 else tuple(reversed(arms))
            for i, arm in enumerate(order):
                tick(progress, (r * len(arms) + i) / total, f"round {r}/{rounds}: {arm}")
                got = _round(pair, arm, ids[:context], ns, repeats if r else 1, time_it)
                if r:  # round 0 warms up (and captures the graphs)
                    timed[arm].append(got)
        compiled = {role: compile_seconds(m) if m is not None else None
                    for role, m in (("target", pair.target), ("draft", pair.draft))}  # before step_kernels replaces them
        compiled = {role: s for role, s in compiled.items() if s is not None}
        kernels = step_kernels(pair, ids[:min(context, 16)])  # after the timing: its profiler stays out of it
        for model in (pair.target, pair.draft):
            if model is not None:
                release(model)
    tick(progress, 1.0, "done")
    bandwidth = copy_bandwidth(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    floor_bytes = streamed_bytes(pair.target, context)
    sheet = datasheet_bandwidth(name)
    return ForwardsResult(
        context_tokens=context, n_max=n_max, rounds=rounds, repeats=repeats, alphas=list(ALPHAS),
        arms={a: _summary(timed[a], ns, device.type == "cuda") for a in arms},
        floor=StreamingFloor(bytes=floor_bytes, copy_bandwidth_Bps=bandwidth, step_s=floor_bytes / bandwidth,
                             datasheet_bandwidth_Bps=sheet, datasheet_step_s=floor_bytes / sheet if sheet else None),
        gpu_driver=gpu_driver() if device.type == "cuda" else None,
        seconds=time.perf_counter() - started,
        acceptance="not measured: random weights propose and accept nothing meaningful; the alphas are assumed",
        step_kernels=kernels,
        compile_s=compiled or None,
    )
