"""The prompt's prefill: the target's and the drafter's (`Proposer.begin`), in turn or side by side.

A drafter outside torch (llama.cpp) can prefill in a worker thread while the target prefills in the caller's,
on cores the target leaves free (`spare_prefill_threads`); the Prefill record says how much of the drafter's
time the overlap hid.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from ..errors import PlaygroundError
from .cached import CachedLM
from .clock import Clock
from .proposal import Proposer, RunContext
from .records import Prefill


def spare_prefill_threads(device) -> int:
    """Cores a drafter's prefill can have beside the target's without taking any from it: all of torch's
    threads when the target runs on an accelerator (its prefill leaves the CPU idle), else the usable cores
    torch does not use (0 on a machine where torch has every core). On 2 cores beside a 2-thread target an
    overlapped llama.cpp prefill measured no gain at 2 threads and lost 0.2 of end-to-end speed-up at 1
    (scripts/bench_prefill.py, docs/results.md): two thread teams on the same cores only slow each other."""
    threads = max(1, torch.get_num_threads())
    if torch.device(device).type != "cpu":
        return threads
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS): every core counts
        cores = os.cpu_count() or 1
    return max(0, cores - threads)


def check_overlap(proposer: Proposer, overlap_prefill: bool | None, prefill_threads, spare: int) -> bool:
    if prefill_threads is not None and (isinstance(prefill_threads, bool) or not isinstance(prefill_threads, int)
                                        or prefill_threads < 1):
        raise PlaygroundError(f"prefill threads must be a positive integer, got {prefill_threads!r}")
    if overlap_prefill is None:  # a drafter that copies the target's KV needs it done: in turn
        return proposer.prefill_overlaps and spare > 0 and not proposer.takes_target_kv
    if overlap_prefill and not proposer.prefill_overlaps:
        # A torch drafter in a second thread would share (and oversubscribe) torch's own thread pool.
        raise PlaygroundError(f"the {proposer.name} drafter cannot prefill beside the target (only a drafter "
                              "outside torch, such as llama.cpp, can)")
    return bool(overlap_prefill)


def prefill_in_turn(clock: Clock, target: CachedLM, proposer: Proposer, committed, ctx: RunContext):
    """The target's prefill, then the drafter's: each with the whole thread budget. Returns the record and
    the time it ended (where decoding's clock starts)."""
    t0 = clock.now()
    target.feed(committed[:-1], last_only=True)
    t1 = clock.now()
    ctx.target_kv = target
    try:
        proposer.begin(committed, ctx)
    finally:
        ctx.target_kv = None  # the target's cache changes from here on
    t2 = clock.now()
    return Prefill(len(committed), target_s=t1 - t0, draft_s=t2 - t1, draft_total_s=t2 - t1, wall_s=t2 - t0,
                   draft_shared=proposer.shared_kv), t2


def prefill_overlapped(clock: Clock, target: CachedLM, proposer: Proposer, committed, ctx: RunContext):
    """The drafter's begin in a worker thread while the target prefills here; both finish before this returns
    (what it returns: as prefill_in_turn).

    The worker reads `committed`, which nothing changes until it has been joined. Leaving the `with`
    block joins the worker whatever happened (a failing target prefill waits for the drafter's to end);
    `result()` re-raises an exception of the drafter's begin here, in the caller."""
    t0 = clock.now()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="draft-prefill") as pool:
        worker = pool.submit(_timed_begin, proposer, committed, ctx)
        target.feed(committed[:-1], last_only=True)
        t1 = clock.now()
        w0, w1 = worker.result()
    t2 = clock.now()
    # Not hidden: the part of the drafter's own interval [w0, w1] after the target finished (so it is
    # never more than the drafter's own time, even when the thread started late); the thread's start
    # and join show in wall_s only.
    return Prefill(len(committed), target_s=t1 - t0, draft_s=max(0.0, w1 - max(w0, t1)), draft_total_s=w1 - w0,
                   overlapped=True, wall_s=t2 - t0), t2


def _timed_begin(proposer: Proposer, committed, ctx: RunContext) -> tuple[float, float]:
    """Runs in the worker. A host clock without the device synchronisation Clock.now() does: an overlapping
    begin leaves no device work queued, and a sync here would wait for the target's kernels instead.
    time.perf_counter is Clock.now()'s own time base, so the two compare."""
    w0 = time.perf_counter()
    proposer.begin(committed, ctx)
    return w0, time.perf_counter()
