"""A reference pulse: the target's one-token step on a fixed context, timed right before every run of an experiment,
so that two runs measured seconds apart can be compared at one machine speed.

Why: `speed` divides each speculative run by the plain run of its round, which ran up to a round's length
earlier. On a shared host the machine's own speed moves on that scale with nothing visible inside the VM: on an
AMD EPYC (2 cores, 2026-12-02) plain decoding moved 16-30% between rounds while other processes used 0.01 cores
and steal was 0%, and a plain step timed in a tight loop slowed from 24.7 to 27.6 ms within a minute. Plain
decoding is made of these steps, so plain speed at the time of a run is estimated as the measured plain speed
times (pulse before the plain run / pulse before this run). What the pulse does not track (a plain run slowed
by something that spares the pulse) shows as the plain speed per pulse step moving between rounds: that residual
is what the trust verdict fails on (lab.trust.check_drift with the pulse). A pulse also ends any idle gap before
a run (after a second idle here the first steps ran 40 ms instead of 25).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..core.cached import CachedLM
from ..core.clock import Clock

CONTEXT_TOKENS = 64
PASSES = 5  # timed, after one untimed: ~0.15 s a pulse for the embedded target on 2 cores


class Pulse:
    """The median of `passes` one-token steps of the pair's target after a fixed context (the first
    CONTEXT_TOKENS tokens of `context`), in seconds. One per experiment; its own KV cache, cut back after each step."""

    def __init__(self, pair, context: Sequence[int], passes: int = PASSES):
        self.base = list(context)[:CONTEXT_TOKENS] or [0]
        self.passes = passes
        self.clock = Clock.for_pair(pair)
        self.lm = CachedLM(pair.target, pair.device, pair.vocab_size)
        self.lm.feed(self.base, last_only=True)

    def measure(self) -> float:
        token = self.base[-1]
        times = []
        for i in range(self.passes + 1):
            t0 = self.clock.now()
            self.lm.feed([token], last_only=True)
            t1 = self.clock.now()
            self.lm.crop(len(self.base))
            if i:
                times.append(t1 - t0)
        return statistics.median(times)
