"""Counting the ops a forward dispatches: what a CUDA graph of it would launch, counted on any device.

Every aten op that reaches the dispatcher's Python mode is counted, except views and pure metadata changes (an op
whose schema returns an alias of its input, `_unsafe_view`, `detach`): they launch no kernel. An op that a CUDA
kernel library runs as several kernels counts once here; the profiler's kernel count on a GPU is the other half of
the picture (`lab.forwards` records it where CUDA runs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_METADATA = frozenset({"_unsafe_view", "detach", "alias", "lift_fresh", "_reshape_alias", "view", "t"})


class _Counter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in _METADATA:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> Counter[str]:
    """The ops `fn()` dispatches, by name (views and metadata left out)."""
    with torch.inference_mode(), _Counter() as counter:
        fn()
    return counter.ops
