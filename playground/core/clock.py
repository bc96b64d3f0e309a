"""Device-aware timing.

CUDA kernels run asynchronously: a host clock read without a synchronisation measures when work was
*queued*, not when it finished. `Clock.now()` synchronises the device first (every device holding the pair's
weights: `Clock.for_pair`), so it is called only at measurement boundaries (start and end of drafting,
verification, rollback), never inside them. On CPU it is a plain `time.perf_counter()`.

Host synchronisations inside the timed buckets, each one a decision the host must make before it can
go on, counted in the bucket that needs it:
  drafting      one per draft-model token (its id is the input of the next draft step), and with a confidence
                threshold one more read of that token's probability; none for prompt lookup.
  verification  the greedy check reads the k + 1 arg-maxes once; the exact rule reads the k accept/reject flags
                once and draws one token.
  rollback      none: DynamicCache.crop slices tensors on the device.
Reading p(x), q(x) for display happens after the rollback clock read, outside the three buckets (it shows in
`elapsed_s` as other time).
"""

from __future__ import annotations

import time

import torch


class Clock:
    def __init__(self, device: torch.device | str = "cpu", devices=()):
        self.device = torch.device(device)
        cuda = [torch.device(d) for d in (self.device, *devices) if torch.device(d).type == "cuda"]
        # One synchronisation per distinct GPU ("cuda" without an index is the current one).
        self._gpus = list(dict.fromkeys(d if d.index is not None else torch.device("cuda", _current()) for d in cuda))

    @classmethod
    def for_pair(cls, pair) -> Clock:
        return cls(pair.device, getattr(pair, "devices", ()))

    def now(self) -> float:
        for gpu in self._gpus:
            torch.cuda.synchronize(gpu)
        return time.perf_counter()


def _current() -> int:
    return torch.cuda.current_device() if torch.cuda.is_available() else 0
