"""The environment a figure was measured in: every result records it (versions, device, dtype, threads, the
variables that change a measurement).

Secrets never leave the process: a variable whose name holds TOKEN, SECRET, KEY, PASSWORD or CREDENTIAL
(HF_TOKEN, ...) is never recorded, and `redact` replaces any such value wherever it turns up (error
messages, logs, exported JSON).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys

import torch
import transformers

from . import __version__
from .results.environment import Environment, PairRecord

SECRET_WORDS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL")
# Variables that change what a measurement means (threads, devices, the playground's own settings).
RECORDED_PREFIXES = ("PLAYGROUND_", "OMP_", "MKL_", "OPENBLAS_", "CUDA_VISIBLE_DEVICES", "PYTORCH_", "TORCH_")
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def secret_values(env=None) -> list[str]:
    """The values of secret-named variables, longest first. Values under 8 characters are flags or numbers, not
    credentials (a real token is 30+ characters), and replacing them would mangle ordinary text."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if is_secret_name(k) and v and len(v.strip()) >= 8}
    return sorted(values, key=len, reverse=True)


def redact(x, env=None):
    """`x` (a string, or dicts / lists / tuples of them) with every secret value replaced by <redacted>."""
    secrets = secret_values(env)
    if not secrets:
        return x

    def scrub(v):
        if isinstance(v, str):
            for s in secrets:
                if s in v:
                    v = v.replace(s, REDACTED)
            return v
        if isinstance(v, dict):
            return {scrub(k): scrub(w) for k, w in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(scrub(w) for w in v)
        return v

    return scrub(x)


def recorded_variables(env=None) -> dict:
    """The environment variables that change a measurement, by name; secret-named ones are left out."""
    env = os.environ if env is None else env
    return {k: redact(env[k], env) for k in sorted(env)
            if k.startswith(RECORDED_PREFIXES) and not is_secret_name(k)}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(pair=None) -> Environment:
    env = {
        "playground": __version__,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "variables": recorded_variables(),
    }
    pair_record = redact(dataclasses.asdict(pair.describe())) if pair is not None else None
    return Environment(**redact(env), pair=PairRecord(**pair_record) if pair_record is not None else None)


def describe_setup(pair) -> str:
    """One line that goes with every printed figure: threads, dtype and device."""
    d = pair.describe()
    where = torch.cuda.get_device_name(pair.device) if pair.device.type == "cuda" else cpu_name()
    named = {"onednn": ", oneDNN kernels", "blas": ", BLAS kernels"}.get(d.target_kernels(), "")
    return f"{d.device} ({where}), {d.dtype}, {torch.get_num_threads()} torch threads{named}"
