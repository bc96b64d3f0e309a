"""The Replay tab's status lines as a user sees them, without a browser (issue 56): the part before the "more" fold
says what happens now (reading the trace, which turn is replayed, with the share done and the clock; what to do
about a big trace; a best k at the top of the range), the fold never cuts inside brackets, and after Stop the line
above the tabs says what the tab says, whichever of the two listeners Gradio's page runs on a cancel answers first.
test_ui_replay.py has the tiny pair and the trace these use; test_ui_browser_replay.py watches the same in Chromium."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import gradio as gr
import pytest

from playground.drafters.registry import make_proposer
from playground.limits import Limits
from playground.pairs.registry import PairChoice
from playground.ui import replay_announce, replay_panel, serving
from playground.ui.markup import STATUS_CHARS, fold
from playground.ui.progress import load_with_progress
from playground.ui.replay_panel import STARTING, TAB_STARTING, ReplayState
from playground.ui.wiring import STOP_JS
from tests import test_ui_replay as rp
from tests.test_replay import fake_timing


@pytest.fixture(scope="module")
def pair():
    return rp.pair.__wrapped__()


@pytest.fixture(scope="module")
def trace(pair, tmp_path_factory):
    return rp.trace.__wrapped__(pair, tmp_path_factory)


def visible(line: str) -> str:
    """What a status line shows before its "more" fold is opened."""
    return fold(line).split(" <details", 1)[0]


def squeezed(text: str) -> str:
    """The words, without the spaces and the separators a fold may drop where it cuts."""
    return re.sub(r"[\s\u00b7\u2014]", "", text)


def unbalanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if depth < 0:
            return True
    return depth != 0


@pytest.mark.parametrize("line", [
    ("Calibrating draft model on 230 tokens of context (step 1 of 2 \u00b7 timing the target over 64 tokens and the "
     "drafter \u00b7 12 s) \u00b7 the sample trace with lookup"),
    ("Calibrated the draft model on 64 tokens of context: c = 0.21 (trusted; the spread of its timed cycles is 3%, "
     "under the limit of 10%) \u00b7 4 cycles after 2 warm-up"),
    "Loading [the pair smollm2-1.7b, HuggingFaceTB/SmolLM2-1.7B-Instruct + HuggingFaceTB/SmolLM2-135M-Instruct; "
    "from the cache] " + "x" * 30,
])
def test_the_fold_never_cuts_inside_brackets(line):
    head = visible(line)
    assert head != line and len(head) <= STATUS_CHARS and not unbalanced(head), head
    assert squeezed(rp.shown(fold(line))) == squeezed(line)  # nothing lost, only folded


# --- Stop ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(pair):
    from playground.ui import build_ui  # builds the whole app: only the Stop tests need it

    return build_ui(rp.provider.__wrapped__(pair))


def listeners(demo):
    """The replay event's `.failure` and `.then` listeners: Gradio's page runs both when Stop cancels it."""
    fns = list(demo.fns.values())
    event = next(f for f in fns if f.api_name == "replay")
    after = [f for f in fns if f.trigger_after == event._id]
    return (next(f.fn for f in after if f.trigger_only_on_failure),
            next(f.fn for f in after if not f.trigger_only_on_failure and not f.trigger_only_on_success))


def stop_js(line: str) -> str:
    """What the Stop button's js does to the line above the tabs (STOP_JS's regular expression, read by Python)."""
    pattern = re.search(r"/(\^\(.*?\))/", STOP_JS)[1]
    return "Stopping \u2026" if re.match(pattern, line) else line


@pytest.mark.parametrize("tab", [TAB_STARTING, "Reading line 3 of big.jsonl (40%, 13 s) \u00b7 the sample trace",
                                 "Replaying turn 2 of 7 (29%, 5 s) \u00b7 weather: lookup k=2"])
@pytest.mark.parametrize("heard", [False, True])  # whether the replay's generator was closed yet
@pytest.mark.parametrize("failure_first", [False, True])  # whose answer the page applies first
def test_after_stop_the_line_above_the_tabs_says_what_the_tab_says(demo, tab, heard, failure_first):
    failed, after = listeners(demo)
    top = stop_js(STARTING)
    answers = [failed(top, tab), after(ReplayState(stopped=heard), top)]  # both read the lines as Stop left them
    lines = {"top": top, "tab": tab}
    for answer in answers if failure_first else answers[::-1]:
        for key, value in zip(lines, answer, strict=True):
            if not isinstance(value, type(gr.skip())):
                lines[key] = value
    assert lines["top"] == lines["tab"] and lines["top"].startswith("Stopped"), lines
    done = "Replay done: recommended k = 3 for all tokens with draft"
    assert stop_js(done) == done  # a finished replay's line is no 'starting' one


# --- while it runs, and when it ends ------------------------------------------------------------------------


def test_a_long_loader_message_keeps_the_clock_in_view():
    said = []

    def slow_load(target, draft, device, dtype, progress):
        progress("fetching model.safetensors (HuggingFaceTB/SmolLM2-1.7B-Instruct)")
        time.sleep(1.2)
        said.append(True)
        return "the pair"

    provider = serving.PairProvider(choice=PairChoice("HuggingFaceTB/SmolLM2-1.7B-Instruct",
                                                      "HuggingFaceTB/SmolLM2-135M-Instruct", "cpu", "float32"),
                                    cache=serving.PairCache(load=slow_load))
    lines = list(load_with_progress(provider, time.monotonic() - 65))
    assert said and lines[0].startswith("Loading the model pair HuggingFaceTB/SmolLM2-1.7B-Instruct")
    assert any(re.match(r"Loading the model pair, 1 min 0\d s so far \u00b7 fetching model.safetensors", visible(x))
               for x in lines[1:]), lines


def test_reading_a_trace_says_so_with_its_progress_and_stops_on_stop(pair, trace, monkeypatch):
    """A big file takes seconds to read (each turn goes through the tokenizer): the line says which line of which
    file, how much is read and for how long, not 'waiting for the device', and a Stop there is heard."""
    real = replay_panel.read_trace

    def slow_read(*args, **kwargs):  # the real reader, each line a slow one
        progress = args[5]
        return real(*args[:5], lambda f, m: (progress(f, m), time.sleep(0.4)))

    monkeypatch.setattr(replay_panel, "read_trace", slow_read)
    provider = rp.provider.__wrapped__(pair)
    state = ReplayState()
    gen = replay_panel.stream_replay(provider, state, None, rp.request(trace_file=trace), Limits())
    first = next(gen)
    assert visible(first.status).startswith("Reading (0 s)") and not first.status.startswith("Starting")
    line = next(u.status for u in gen if "line 2" in u.status)
    assert re.match(r"Reading line 2 of trace\.jsonl \(\d+%, \d+ s\) \u00b7 ", visible(line)), line
    gen.close()
    assert state.stopped
    deadline = time.monotonic() + 10
    while any(t.name == "playground-read" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "playground-read" for t in threading.enumerate())


def test_the_replay_line_shows_the_turn_its_share_and_the_clock_before_the_fold(pair, trace, monkeypatch):
    real = replay_panel.replay_turns
    held = []

    def slow_replay(pair, turns, options, progress=None):  # the real replay, held a moment at turn 2's first tick
        def tick(f, m):
            progress(f, m)
            if m.startswith("turn 2 of") and not held:
                held.append(m)
                time.sleep(0.6)
        return real(pair, turns, options, progress=tick)

    monkeypatch.setattr(replay_panel, "replay_turns", slow_replay)
    updates = list(replay_panel.stream_replay(rp.provider.__wrapped__(pair), None, None, rp.request(trace_file=trace),
                                              Limits()))
    shown = [visible(u.status) for u in updates]
    assert held and any(re.match(r"Replaying turn 2 of 4 \(\d+%, (~.+ left, )?\d+ s\) \u00b7 t1: ", s) for s in shown), \
        shown
    assert updates[-1].status.startswith("Replay done")


def test_a_big_trace_says_what_to_do_before_the_fold():
    turns = [SimpleNamespace(prompt_ids=(1,) * 900, completion_ids=(2,) * 400)] * 200
    line = replay_announce.announcement(turns, 141, 3, 750.0, Limits())
    assert "set First turns to 16 (about 1 min 00 s)" in visible(line), line
    for said in ("press Run replay again for all 200 turns (about 12 min 30 s)", "260,000 tokens",
                 "141 turns past the cap of", "3 lines refused"):
        assert said in line


@pytest.mark.parametrize("drafter", ["draft", "schema+suffix-hybrid"])  # the shortest and the longest name
@pytest.mark.parametrize("exact", [True, False])
def test_a_best_k_at_the_top_of_the_range_shows_before_the_fold(pair, trace, drafter, exact):
    provider = serving.PairProvider(pair=pair)
    provider.calibrations.put(make_proposer(pair, "draft").describe(), fake_timing(c=0.2))  # k = 3 pays most
    doc = rp.run(provider, rp.request(trace_file=trace, ks="1-2"))[-1].doc
    doc = doc if exact else replace(doc, turns=[replace(t, exact=False) for t in doc.turns])
    line = replay_announce.done_status(doc, drafter, 65.0)
    assert "k = 2 is the largest replayed: try 1-16" in visible(line), line
    assert ("(estimates)" in line) != exact and line.endswith("1 min 05 s")


@pytest.mark.parametrize("heard", [False, True])  # whether the worker heard the Stop before the page's listener ran
def test_after_stop_the_batch_timing_and_the_sweep_say_stopped_above_the_tabs_as_in_their_tab(demo, heard):
    from playground.ui.session import Session
    from playground.ui.whatif_panel import BATCH_STARTING
    from playground.ui.wiring import SWEEP_STARTING

    fns = list(demo.fns.values())
    for api, kind, starting in (("time_batches", "batch", BATCH_STARTING), ("sweep", "sweep", SWEEP_STARTING)):
        event = next(f for f in fns if f.api_name == api)
        after = next(f.fn for f in fns if f.trigger_after == event._id and not f.trigger_only_on_failure
                     and not f.trigger_only_on_success)
        session = Session(stopped=kind if heard else None)
        lines = after(session, stop_js(starting))
        top, tab = lines[0], lines[1 if kind == "batch" else 5]  # the sweep's: status, counters, 3 charts, its tab
        assert top.startswith(("Batch timing stopped", "Sweep stopped")), (api, lines)
        assert tab.split(" Press")[0] == top.split(" Press")[0], (api, top, tab)
