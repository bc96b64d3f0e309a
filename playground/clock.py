"""Device-aware timing.

CUDA kernels run asynchronously: a host clock read without a synchronisation measures when work was
*queued*, not when it finished. `Clock.now()` synchronises the device first, so it is called only at
measurement boundaries (start and end of drafting, verification, rollback), never inside them.
On CPU it is a plain `time.perf_counter()`.
"""

from __future__ import annotations

import time

import torch


class Clock:
    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self._sync = torch.cuda.synchronize if self.device.type == "cuda" else None

    def now(self) -> float:
        if self._sync is not None:
            self._sync(self.device)
        return time.perf_counter()
