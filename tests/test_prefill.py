"""The drafter's prompt prefill beside the target's (engine.speculative_generate, Proposer.prefill_overlaps).

The thread mechanics, on tiny random models with fake proposers. Exactness, the Prefill record and the thread
split with the llama.cpp drafter on the embedded pair are in tests/test_llamacpp.py (its fixtures).
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from playground.core import engine, prefill
from playground.core.cached import CachedLM
from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.prefill import spare_prefill_threads
from playground.core.proposal import RunContext
from playground.core.records import Prefill, summarize
from playground.core.sampling import GREEDY
from playground.drafters.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer
from playground.errors import PlaygroundError
from tests.test_engine import tokens_of

PROMPT = [10, 11, 12, 13, 10, 11, 12, 13, 10, 11]  # repetitive: lookup proposes, so the loop really runs


def prefill_threads_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("draft-prefill")]


class Recording(PromptLookupProposer):
    """Prompt lookup that records the thread its begin ran in and the context it was given."""

    def __init__(self, overlaps: bool, fail: BaseException | None = None, sleep_s: float = 0.0):
        super().__init__()
        self.prefill_overlaps = overlaps
        self.fail, self.sleep_s = fail, sleep_s
        self.begin_thread: int | None = None
        self.threads_seen: int | None = None
        self.finished_begin = False

    def begin(self, prompt_ids, ctx):
        super().begin(prompt_ids, ctx)
        self.begin_thread = threading.get_ident()
        self.threads_seen = ctx.prefill_threads
        time.sleep(self.sleep_s)
        if self.fail is not None:
            raise self.fail
        self.finished_begin = True


# --- the mechanics, on tiny models -------------------------------------------------------------


@pytest.fixture
def spare(monkeypatch):
    """Set the cores the engine sees free beside the target (engine.spare_prefill_threads)."""
    def set_(n: int) -> None:
        monkeypatch.setattr(engine, "spare_prefill_threads", lambda device: n)
    return set_


def test_an_overlapping_proposer_begins_in_a_worker_and_the_output_is_unchanged(pair64, spare):
    spare(0)  # every core busy with the target: asked for, the drafter gets half of torch's threads
    plain = tokens_of(plain_generate(pair64, PROMPT, max_new_tokens=12))
    proposer = Recording(overlaps=True)
    records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=3, max_new_tokens=12,
                                        options=LoopOptions(overlap_prefill=True)))
    assert proposer.begin_thread != threading.get_ident()
    assert proposer.threads_seen == max(1, torch.get_num_threads() // 2)  # the share asked for with no spare core
    assert proposer.ctx.prefill_threads is None  # reset once the prefill is over: drafting runs alone
    assert tokens_of(records) == plain
    prefill = records[0]
    assert isinstance(prefill, Prefill) and prefill.overlapped
    assert 0 <= prefill.draft_s <= prefill.draft_total_s and prefill.wall_s >= prefill.target_s
    assert summarize(records).prefill_s == prefill.wall_s
    assert not prefill_threads_alive()


def test_prefill_threads_reach_the_proposer(pair64):
    proposer = Recording(overlaps=True)
    list(speculative_generate(pair64, PROMPT, proposer=proposer, k=2, max_new_tokens=3,
                              options=LoopOptions(prefill_threads=3, overlap_prefill=True)))
    assert proposer.threads_seen == 3


def test_by_default_the_prefill_overlaps_only_on_spare_cores(pair64, spare):
    """Two thread teams on the same cores slow each other (bench_prefill.py): no spare core, no overlap."""
    spare(0)
    proposer = Recording(overlaps=True)
    records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=2, max_new_tokens=3))
    assert not records[0].overlapped and proposer.begin_thread == threading.get_ident()
    spare(3)
    records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=2, max_new_tokens=3))
    assert records[0].overlapped and proposer.threads_seen == 3  # the spare cores, not half of torch's


def test_the_spare_cores_are_those_torch_leaves_or_all_beside_an_accelerator(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(prefill.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert spare_prefill_threads("cpu") == 0
    monkeypatch.setattr(prefill.os, "sched_getaffinity", lambda pid: set(range(6)), raising=False)
    assert spare_prefill_threads("cpu") == 4
    assert spare_prefill_threads("cuda") == 2  # the target's prefill runs on the GPU: the CPU is the drafter's


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_prefill_threads_are_a_clear_error(pair64, bad):
    with pytest.raises(PlaygroundError, match="prefill threads"):
        list(speculative_generate(pair64, PROMPT, proposer=Recording(True), k=2, max_new_tokens=3,
                                  options=LoopOptions(prefill_threads=bad)))


def test_an_exception_in_the_workers_begin_surfaces_in_the_caller(pair64):
    proposer = Recording(overlaps=True, fail=ValueError("boom in the drafter's prefill"))
    with pytest.raises(ValueError, match="boom in the drafter's prefill"):
        list(speculative_generate(pair64, PROMPT, proposer=proposer, k=2, max_new_tokens=4,
                                  options=LoopOptions(overlap_prefill=True)))
    assert proposer.begin_thread not in (None, threading.get_ident())  # it did fail in the worker
    assert not prefill_threads_alive()


def test_a_failing_target_prefill_still_joins_the_worker(pair64, monkeypatch):
    """The target's exception propagates, but only after the drafter's begin (still running) has ended."""
    def failing_feed(tokens, last_only=False):
        raise RuntimeError("target prefill failed")

    def failing_target(pair, n_tokens):  # whichever forward the loop runs (core.static.target_lm)
        lm = real_target_lm(pair, n_tokens)
        lm.feed = failing_feed
        return lm

    real_target_lm = engine.target_lm
    monkeypatch.setattr(engine, "target_lm", failing_target)
    proposer = Recording(overlaps=True, sleep_s=0.3)
    with pytest.raises(RuntimeError, match="target prefill failed"):
        list(speculative_generate(pair64, PROMPT, proposer=proposer, k=2, max_new_tokens=4,
                                  options=LoopOptions(overlap_prefill=True)))
    assert proposer.finished_begin
    assert not prefill_threads_alive()


def test_a_proposer_without_the_capability_begins_in_the_callers_thread(pair64):
    proposer = Recording(overlaps=False)
    records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=3, max_new_tokens=6))
    assert proposer.begin_thread == threading.get_ident() and proposer.threads_seen is None
    prefill = records[0]
    assert not prefill.overlapped and prefill.draft_s == prefill.draft_total_s
    assert prefill.wall_s == pytest.approx(prefill.target_s + prefill.draft_s)


def test_the_torch_draft_model_never_overlaps(pair64):
    """It would share torch's thread pool with the target: not by default, and refused when asked for."""
    seen = []

    class Draft(DraftModelProposer):
        def begin(self, prompt_ids, ctx):
            seen.append(threading.get_ident())
            super().begin(prompt_ids, ctx)

    draft = Draft(pair64.draft, "cpu", None)
    assert not draft.prefill_overlaps and not HybridProposer(draft).prefill_overlaps
    records = list(speculative_generate(pair64, PROMPT, proposer=draft, k=3, max_new_tokens=6))
    assert seen == [threading.get_ident()] and not records[0].overlapped
    with pytest.raises(PlaygroundError, match="cannot prefill beside the target"):
        list(speculative_generate(pair64, PROMPT, proposer=draft, k=3, max_new_tokens=6,
                                  options=LoopOptions(overlap_prefill=True)))


def test_overlap_can_be_turned_off(pair64):
    proposer = Recording(overlaps=True)
    records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=3, max_new_tokens=6,
                                        options=LoopOptions(overlap_prefill=False)))
    assert proposer.begin_thread == threading.get_ident() and not records[0].overlapped


def test_old_prefill_records_still_read():
    """Records built (or serialised) before draft_total_s, overlapped and wall_s existed."""
    p = Prefill(5, target_s=0.1, draft_s=0.05)
    assert p.draft_total_s == 0.05 and p.wall_s == pytest.approx(0.15) and not p.overlapped
    assert summarize([p]).prefill_s == pytest.approx(0.15)


def test_a_draft_that_copies_the_target_takes_its_prompt_kv(pair64, monkeypatch):
    """A draft that is a copy of the target (here the target itself) copies the target's prompt KV after the
    target's prefill, never beside it, drafts what its own prefill would have, and the output is unchanged."""
    monkeypatch.setattr(engine, "spare_prefill_threads", lambda device: 2)
    plain = tokens_of(plain_generate(pair64, PROMPT, max_new_tokens=12))
    runs = {}
    for copies in (True, False):
        proposer = DraftModelProposer(pair64.target, "cpu", None, copies_target=copies)
        records = list(speculative_generate(pair64, PROMPT, proposer=proposer, k=3, max_new_tokens=12))
        assert records[0].draft_shared == (len(PROMPT) - 1 if copies else 0) and not records[0].overlapped
        assert summarize(records).prefill_shared == records[0].draft_shared
        assert tokens_of(records) == plain
        runs[copies] = [r.proposed for r in records[1:]]
    assert runs[True] == runs[False]
    hybrid = list(speculative_generate(pair64, PROMPT, proposer=HybridProposer(
        DraftModelProposer(pair64.target, "cpu", None, copies_target=True)), k=3, max_new_tokens=12))
    assert hybrid[0].draft_shared == len(PROMPT) - 1 and tokens_of(hybrid) == plain


def test_the_copy_is_the_drafters_own(pair64):
    """The drafter's cache is a copy: the target's cache changing afterwards does not reach it."""
    target = CachedLM(pair64.target, "cpu")
    target.feed(PROMPT[:-1], last_only=True)
    proposer = DraftModelProposer(pair64.target, "cpu", None, copies_target=True)
    proposer.begin(PROMPT, RunContext(GREEDY, torch.Generator(), target_kv=target))
    assert proposer.shared_kv == len(PROMPT) - 1 and proposer.lm.tokens == PROMPT[:-1]
    target.crop(3)
    target.feed([7, 7, 7, 7])  # the target's cache now holds other keys where the prompt's were
    assert proposer.lm.cache_length() == len(PROMPT) - 1
    fresh = CachedLM(pair64.target, "cpu")
    torch.testing.assert_close(proposer.lm.feed([PROMPT[-1]])[-1], fresh.feed(PROMPT, last_only=True)[-1])
    # a prompt the target's cache does not hold: the drafter prefills it itself
    proposer.begin(PROMPT + [12], RunContext(GREEDY, torch.Generator(), target_kv=target))
    assert proposer.shared_kv == 0 and proposer.lm.tokens == PROMPT
