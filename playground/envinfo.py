"""The environment a figure was measured in: every result records it (versions, device, dtype, threads)."""

from __future__ import annotations

import os
import platform
import sys

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(pair=None) -> dict:
    import transformers

    from . import __version__

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
    }
    if pair is not None:
        env["pair"] = pair.describe()
    return env


def describe_setup(pair) -> str:
    """One line that goes with every printed figure: threads, dtype and device."""
    d = pair.describe()
    where = torch.cuda.get_device_name(pair.device) if pair.device.type == "cuda" else cpu_name()
    return f"{d['device']} ({where}), {d['dtype']}, {torch.get_num_threads()} torch threads"
