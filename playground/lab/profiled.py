"""What one call runs, read with torch.profiler: the aten ops it dispatched and, on CUDA, the kernels it launched.

A step replayed from a CUDA graph launches the kernels its eager run launched when the graph was captured, so the
eager step's kernel count is the graph's node count (memory copies and sets counted apart). The preflight reads
which attention kernel runs at the captured shapes from the ops; `timing --random-weights` counts a step's kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

COPIES = ("Memcpy", "Memset")  # the CUDA activity's names for copies and fills: nodes of a graph, not kernels


@dataclass(frozen=True)
class Profiled:
    ops: tuple[str, ...]  # every aten op dispatched, nested ones too, in order ("aten::" dropped)
    top_ops: tuple[str, ...]  # those dispatched by the call itself (not from inside another op)
    kernels: tuple[str, ...]  # CUDA kernels launched, in order (none on a CPU)
    copies: tuple[str, ...]  # CUDA memory copies and sets


def profiled(fn: Callable[[], object], device: torch.device) -> Profiled:
    """Run `fn` once under the profiler (CPU ops; CUDA kernels too on a CUDA device, synchronised before the
    profiler stops) and return what ran."""
    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.events()
    aten = [e for e in events if e.device_type == DeviceType.CPU and e.name.startswith("aten::")]
    device_side = [e.name for e in events if e.device_type == DeviceType.CUDA]
    if cuda and not device_side:  # kernels reported under the ops that launched them instead
        device_side = [k.name for e in events for k in getattr(e, "kernels", ())]
    return Profiled(
        ops=tuple(e.name.removeprefix("aten::") for e in aten),
        top_ops=tuple(e.name.removeprefix("aten::") for e in aten if not _inside_aten(e)),
        kernels=tuple(n for n in device_side if not n.startswith(COPIES)),
        copies=tuple(n for n in device_side if n.startswith(COPIES)),
    )


def _inside_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False
