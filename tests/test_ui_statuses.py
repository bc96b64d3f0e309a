"""Every event ends in a status line that says what is true now, without a browser: the handlers and the
wiring that issue 47's walk-through found stuck, silent or long (the real-browser checks are in
test_ui_browser.py)."""

from __future__ import annotations

import html

import gradio as gr
import pytest

from playground.errors import PlaygroundError
from playground.ui import serving
from playground.ui.session import parse_request
from tests.test_ui_handlers import CONTROLS, word_pair  # noqa: F401 - word_pair: a fixture used here


@pytest.fixture(scope="module")
def demo(word_pair):  # noqa: F811 - the fixture imported above
    from playground.ui import build_ui

    return build_ui(serving.PairProvider(pair=word_pair))


def by_elem_id(demo) -> dict:
    return {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}


def test_every_device_event_has_a_listener_for_its_failure(demo):
    """Gradio's page runs `.then` listeners only after a success: a failed event (Gradio's own input checks
    included) reaches its `.failure` listeners alone, so each device event needs one or its 'starting' line
    stays for good."""
    fns = list(demo.fns.values())
    device = [f for f in fns if str(f.concurrency_id or "").startswith("device:")]
    failing = {f.trigger_after for f in fns if f.trigger_only_on_failure}
    missing = [f.name for f in device if f._id not in failing]
    assert len(device) >= 8 and not missing, missing  # run, compare (2), calibrate, sweep, show me, replay, batches


def test_the_drafter_help_explains_every_drafter_in_the_menu_in_the_registrys_words(demo):
    """The user found the suffix drafters unexplained: the help named three drafters by hand."""
    from playground.drafters.registry import drafter_spec
    from playground.ui.serving import drafter_help

    radio, shown = by_elem_id(demo)["drafter"], by_elem_id(demo)["drafter-help"].value
    names = [name for _, name in radio.choices if name != "auto"]
    assert {"suffix", "suffix-hybrid", "schema+draft"} <= set(names)
    for name in names:
        spec = drafter_spec(name)
        assert f"<dt>{html.escape(spec.label)}</dt><dd>{html.escape(spec.description)}</dd>" in shown, name
    assert "<dt>auto</dt><dd>the first this pair can run of llama.cpp, else draft model, else prompt lookup" in shown
    assert "suffix decoding</dt>" not in drafter_help([("lookup", "lookup")])  # the menu's own drafters only


def failure_listener(demo, event_name: str):
    fns = list(demo.fns.values())
    event = next(f for f in fns if f.api_name == event_name)
    return next(f.fn for f in fns if f.trigger_only_on_failure and f.trigger_after == event._id)


def test_a_failed_event_replaces_its_starting_line(demo):
    from playground.ui.replay_panel import STARTING as REPLAY_STARTING
    from playground.ui.replay_panel import TAB_STARTING
    from playground.ui.wiring import NOT_RUN, STARTING, SWEEP_STARTING

    run = failure_listener(demo, "run")
    assert run(STARTING) == NOT_RUN  # refused by Gradio before our code ran: never "Starting" for good
    assert isinstance(run("\u26a0 max new tokens must be from 1 to 512, got 0"), type(gr.skip()))  # it says why
    replay = failure_listener(demo, "replay")
    top, tab = replay(REPLAY_STARTING, "\u26a0 Nothing to replay: 1 line(s) refused, listed below")
    assert top == "\u26a0 Replay: Nothing to replay: 1 line(s) refused, listed below"  # the tab's reason, above
    assert isinstance(tab, type(gr.skip()))
    assert replay(REPLAY_STARTING, TAB_STARTING) == (NOT_RUN, NOT_RUN)
    sweep = failure_listener(demo, "sweep")
    top, _ = sweep(SWEEP_STARTING, "\u26a0 the prompt is empty")
    assert top == "\u26a0 Sweep k: the prompt is empty"
    assert all(isinstance(x, type(gr.skip())) for x in sweep("Done: 3 tokens", "\u26a0 old"))


def test_number_boxes_leave_their_range_to_the_events(demo):
    """Gradio's own range check raises before the event's code (a toast, and the status never updated): the
    boxes name the range, the request parser enforces it with field, range and value."""
    blocks = by_elem_id(demo)
    for elem_id in ("max-new", "sweep-new", "top-k", "seed"):
        assert blocks[elem_id].minimum is None and blocks[elem_id].maximum is None, elem_id
    for value in (0, 999999):
        with pytest.raises(PlaygroundError, match=f"max new tokens must be from 1 to [0-9]+, got {value}"):
            parse_request({**CONTROLS, "max_new_tokens": value})
    with pytest.raises(PlaygroundError, match="seed must be between 0 and .*got -3"):
        parse_request({**CONTROLS, "seed": -3})
    with pytest.raises(PlaygroundError, match="top-k must be .*>= 0.*got -1"):
        parse_request({**CONTROLS, "decoding": "sample", "top_k": -1})


def test_an_error_the_status_line_shows_is_not_also_a_toast():
    from playground.ui.wiring import _guarded

    def bad():
        raise PlaygroundError("k must be from 1 to 16, got 99")
        yield

    with pytest.raises(gr.Error) as shown:
        list(_guarded(bad(), str, 2))
    assert not shown.value.visible  # the status line has it; an API client still gets the error
    with pytest.raises(gr.Error) as toast:
        list(_guarded(bad(), str, 2, status_first=False))
    assert toast.value.visible  # no status line to say it: the toast does


def test_a_trace_of_blank_lines_says_it_holds_no_turn(word_pair, tmp_path):  # noqa: F811 - the fixture
    from playground.limits import Limits
    from playground.ui import replay_panel
    from tests.test_ui_replay import request

    path = tmp_path / "blank.jsonl"
    path.write_text("\n  \n\n")
    gen = replay_panel.stream_replay(serving.PairProvider(pair=word_pair), None, None,
                                     request(trace_file=str(path)), Limits())
    with pytest.raises(PlaygroundError, match="the file holds no turn"):
        list(gen)  # not '0 line(s) refused, listed below' over an empty list


def test_a_slider_moved_from_a_typed_value_refuses_the_next_event_once(demo):
    """k typed 99 (the page's slider moves to 16 as the box loses focus): the status line says so, and the next
    Run is refused naming the range and the move, instead of running k = 16 with no word; a second press runs."""
    import inspect

    from playground.ui.ranges import range_check, remember_moves

    listener = remember_moves(range_check("k", 1, 16, slider=True), "k", 1, 16)
    line, moved = listener(99, "Ready", {})
    assert line == "\u26a0 k must be from 1 to 16, got 99; the slider moved to 16" and moved["k"][:2] == (99, 16)
    _, kept = listener(16, line, moved)  # the slider's own move to the bound
    assert "k" in kept
    _, dropped = listener(5, line, moved)  # set again by hand
    assert "k" not in dropped
    fns = {f.api_name: f.fn for f in demo.fns.values() if f.api_name}
    names = list(inspect.signature(fns["run"]).parameters)[1:-1]  # (session, *controls, progress)
    assert "moved" in names  # a gr.State: the API's parameters are the components'
    values = {**CONTROLS, "preset": "", "k": 16, "k_mode": "fixed", "min_confidence": 0, "max_new_tokens": 4,
              "constrain": False}
    state = dict(kept)
    lines = []
    with pytest.raises(gr.Error):
        for out in fns["run"](None, *[state if n == "moved" else values[n] for n in names], None):
            lines.append(out[0])
    assert lines == [("\u26a0 not run: k was typed as 99, outside 1 to 16; the slider moved to 16. Press again to "
                      "use 16, or set it")]
    assert len(lines[0]) <= 120 and state == {}  # refused once ...
    done = list(fns["run"](None, *[state if n == "moved" else values[n] for n in names], None))
    assert done[-1][0].startswith("Done")  # ... and the second press runs k = 16


def test_a_moved_value_the_event_does_not_read_is_no_reason_to_refuse():
    from playground.ui.ranges import refuse_moved

    moved = {"temperature": (-1, 0.05, 0.05, 2.0), "k": (0, 1, 1, 16)}
    refuse_moved(moved, {"decoding": "greedy", "temperature": 0.05, "k": 1, "k_mode": "adaptive"})  # neither read
    with pytest.raises(PlaygroundError, match="temperature was typed as -1, outside 0.05 to 2"):
        refuse_moved(moved, {"decoding": "sample", "temperature": 0.05})
    refuse_moved(moved, {"decoding": "sample", "temperature": 0.05})  # once: the next one runs


def test_a_long_status_line_shows_its_first_120_characters_and_folds_the_rest():
    import re

    from playground.ui.markup import fold
    from playground.ui.wiring import _guarded

    done = ("Done: 6 new tokens in 6 target passes, finished by length \u00b7 drafter hybrid: prompt lookup (n-gram 2..3) "
            "else tiny-draft, k = 16, greedy \u00b7 cpu, float32 \u00b7 0 s \u00b7 \u26a0 other processes used 1.8 cores")
    folded = fold(done)
    head, rest = folded.split(" <details", 1)
    assert head == "Done: 6 new tokens in 6 target passes, finished by length" and len(head) <= 120
    assert "<summary>more</summary>drafter hybrid" in rest and rest.endswith("1.8 cores</details>")
    assert re.sub(r"<[^>]+>", "", rest).endswith(done[len(head) + 3:])  # nothing lost, only folded
    bold = "Nothing yet: press **Compare with plain** and then " + "x" * 60 + " **Calibrate** to see it " + "y" * 40
    assert fold(bold).split(" <details")[0].count("**") % 2 == 0  # never cut inside a bold span
    assert fold("short") == "short" and fold(None) is None
    (line, _), = list(_guarded(iter([done]), lambda v: (v, 1), 2))
    assert line == folded  # every event's status line goes through the fold


def test_the_words_match_what_a_user_sees(demo):
    from playground.ui import measure
    from playground.ui.blocks import CAREFUL_LABEL
    from playground.ui.session import SHOW_ME_NOTE
    from playground.ui.whatif_view import START_NOTE

    blocks = by_elem_id(demo)
    # the careful box promises what Calibrate then reports ("4 timed cycles after 2 warm-up")
    assert blocks["careful"].label == CAREFUL_LABEL
    assert f"({measure.CAREFUL[0]} timed cycles instead of {measure.SHORT[0]}:" in CAREFUL_LABEL
    assert "instead of 5" not in CAREFUL_LABEL
    texts = [str(getattr(b, "value", "") or "") + str(getattr(b, "label", "") or "") for b in demo.blocks.values()]
    assert not [t for t in texts if "seed chapter" in t] and "seed chapter" not in START_NOTE  # a source never seen
    assert not [t for t in texts if "on the left" in t or "on the right" in t]  # a phone has neither
    assert "runs it" in SHOW_ME_NOTE  # Show me starts a run, and says so


def test_a_big_trace_is_announced_before_it_runs_and_its_first_turns_offered(tmp_path, monkeypatch):
    from playground.limits import Limits
    from playground.ui import replay_announce, replay_panel, replay_request
    from tests import test_ui_replay as rp

    monkeypatch.setattr(replay_announce, "BIG_TURNS", 1)  # more turns than this are big, whatever the estimate
    pair = rp.pair.__wrapped__()  # the module's fixtures, built here: a tiny pair with a perfect draft
    provider = rp.provider.__wrapped__(pair)
    trace = rp.trace.__wrapped__(pair, type("F", (), {"mktemp": lambda self, name: tmp_path})())
    limits = Limits(max_replay_turns=2)  # the trace's 4 good turns: 2 past the cap

    def req(**changes):
        return replay_request.parse_replay({**rp.BASE, "trace_file": trace, **changes}, rp.DRAFTERS, limits)

    state = replay_panel.ReplayState()
    first = list(replay_panel.stream_replay(provider, state, None, req(), limits))
    line = first[-1].status
    assert first[-1].doc is None and not any("Replaying" in u.status for u in first)  # nothing ran
    assert line.startswith("\u26a0 Not started: set First turns to 1 (about ")  # what to do first, then the rest
    assert ", or press Run replay again for all 2 turns (about " in line and " tokens \u00b7 " in line
    assert "2 turns past the cap of 2 (PLAYGROUND_MAX_REPLAY_TURNS) skipped" in line and "1 lines refused" in line
    assert first[-2].status == replay_announce.ESTIMATING  # the probe's second or so says what it does
    assert state.outcome == line  # the line above the tabs says it too
    again = list(replay_panel.stream_replay(provider, state, None, req(), limits))
    assert again[-1].status.startswith("Replay done") and len(again[-1].doc.turns) == 2  # pressed again: runs
    chosen = list(replay_panel.stream_replay(provider, replay_panel.ReplayState(), None, req(first_turns=1), limits))
    assert chosen[-1].status.startswith("Replay done") and len(chosen[-1].doc.turns) == 1  # the offer, no stop
    with pytest.raises(PlaygroundError, match="first turns must be from 0 \\(all\\) to 2, got 3"):
        req(first_turns=3)


def test_a_calibration_on_another_length_stands_in_labelled_and_calibrate_times_this_one(word_pair, monkeypatch):  # noqa: F811
    """Calibrated on a short prompt, a long one gets the nearest bucket's calibration, labelled, instead of
    'press Calibrate' and a calibration hidden inside its first adaptive run; Calibrate itself times this length."""
    from dataclasses import replace

    import playground.lab.calibration as lab_calibration
    from playground.drafters.registry import make_proposer
    from playground.run import find_timing, nearest_timing
    from playground.ui import measure, run_panel
    from playground.ui.session import Session
    from tests.test_replay import fake_timing
    from tests.test_ui_handlers import request

    provider = serving.PairProvider(pair=word_pair)
    name = make_proposer(word_pair, "lookup").describe()
    store = provider.calibrations
    store.put(name, replace(fake_timing(), context_tokens=70))  # bucket 128
    assert nearest_timing(store, name, 330).context_tokens == 70  # 512: two doublings away, the only one
    store.put(name, replace(fake_timing(), context_tokens=1000))  # bucket 1024, one doubling from 512
    assert nearest_timing(store, name, 330).context_tokens == 1000
    assert nearest_timing(store, name, 180).context_tokens == 70  # 256: 128 and 1024 ... the nearer, 128
    assert find_timing(Session().conversation, store, name, list(range(330)), nearest=False) is None
    calls = []
    monkeypatch.setattr(lab_calibration, "calibrate", lambda *a, **k: calls.append(k) or fake_timing())
    monkeypatch.setattr(measure, "calibrate", lambda *a, **k: calls.append(k) or fake_timing())
    long_prompt = " ".join(f"w{i % 60 + 1}" for i in range(180))  # ~190 tokens with the chat template: bucket 256
    session = Session()
    views = list(run_panel.stream_run(provider, session, request(provider, prompt=long_prompt, drafter="lookup",
                                                                k_mode="adaptive", max_new_tokens=6)))
    assert not calls and views[-1].status.startswith("Done")  # no calibration inside the run
    assert ("the calibration on 70 tokens of context (the 128-token bucket) stands in for this prompt's"
            in views[-1].prediction)  # one label for one calibration, its length and its bucket
    cal = list(measure.stream_calibrate(provider, session, request(provider, prompt=long_prompt, drafter="lookup"),
                                        repeats=1, warmup=0))
    assert len(calls) == 1 and cal[-1].status.startswith("Calibrated")  # this length, not 'Already calibrated'
    # (in the run's own session, as the page does: the run kept the stand-in under this prompt's key)


@pytest.mark.parametrize("noisy, said", [(False, "\u2014 trusted"), (True, "\u2014 UNTRUSTWORTHY: ")])
def test_calibrate_ends_its_status_with_the_verdict_trusted_or_not(word_pair, monkeypatch, noisy, said):  # noqa: F811
    """Whether a live calibration is trusted depends on the host (the browser tests take either word): with the
    timing made by hand, both verdicts end the status line here."""
    import dataclasses

    from playground.results.calibration import TimingSamples
    from playground.ui import measure
    from playground.ui.session import Session
    from tests.test_replay import fake_timing
    from tests.test_ui_handlers import request

    timing = fake_timing()
    if noisy:  # a target pass's repeats 6x apart (test_trust's noisy calibration)
        timing = dataclasses.replace(timing, raw=TimingSamples(target_pass_s={2: [0.01, 0.05, 0.011, 0.06]}))
    monkeypatch.setattr(measure, "calibrated_timing", lambda *a, **k: (timing, False))
    provider = serving.PairProvider(pair=word_pair)
    status = list(measure.stream_calibrate(provider, Session(), request(provider, drafter="lookup")))[-1].status
    assert status.startswith("Calibrated ") and said in status, status


def recorded_sweep(**changes):
    """Issue 47's tool-call sweep as recorded (hybrid, 3 rounds, trusted): every predicted curve peaks at k = 8, the
    largest k swept, while the lab's pick from the deepest k's acceptance alone said 6 and adaptive k chose 15-16."""
    from playground.lab.trust import Verdict
    from playground.results import from_document

    table = [{"k": k, "median_ratio": r, "min_ratio": r - 0.05, "max_ratio": r + 0.05, "alpha": 0.9,
              "predicted_iid": r + 0.1, "predicted_empirical": r + 0.05, "predicted_local": r + 0.02,
              "break_even_alpha": 0.3 + 0.05 * k}
             for k, r in [(1, 1.3), (2, 1.6), (4, 1.9), (6, 2.1), (8, 2.22)]]
    table.append({"k": "adaptive", "median_ratio": 2.62, "min_ratio": 2.5, "max_ratio": 2.7, "alpha": 0.9,
                  "k_values": {"15": 10, "16": 30}})
    result = {"experiment": "sweep", "ks": [1, 2, 4, 6, 8, "adaptive"], "rounds": 3, "max_new_tokens": 32,
              "table": table, "best_k": 8, "predicted_best_k": 6, "recommended_k": 8, "withheld": None,
              "trust": Verdict.of([]).to_dict()}
    result.update(changes)
    return from_document(result)


def test_the_sweep_summary_chart_and_recommendation_tell_one_story():
    from playground.ui import charts
    from playground.ui.sweep_words import predicted_peaks, recommendation, sweep_summary

    result = recorded_sweep()
    text = sweep_summary(result, "cpu", 3, 32)
    lead = text.split("</div>", 2)[-1].split("<details")[0]  # after the verdict box, before the fold
    assert "**Recommended k = 8**" in lead and "(trusted)" in lead
    assert len(lead.split(".")[0].split()) <= 30  # one short first sentence: what to use, how sure
    assert set(predicted_peaks(result).values()) == {8}  # the chart's three predicted curves ...
    assert "predictions peak at k = 8, as measured." in lead  # ... and the words say the same
    assert "k = 6" not in text and "see the verdict" not in text and "disagrees" not in text
    assert "k = 8 is the largest k swept" in lead and "adaptive k chose up to 16" in lead
    assert "'Largest k' (up to 16)" in lead  # the wider sweep, offered
    assert "How measured" in text.split("<details", 1)[1]  # method and noise: behind the fold
    fig = charts.sweep_figure(result)
    assert any("recommended k = 8" in a.text for a in fig.layout.annotations) and recommendation(result) == (8, None)
    inner = sweep_summary(recorded_sweep(recommended_k=6), "cpu", 3, 32)
    assert "largest k swept" not in inner  # k = 6 is inside the sweep: no offer


def test_a_prediction_2x_from_its_measurement_fails_the_sweep_and_withholds_k():
    from playground.ui import charts
    from playground.ui.sweep_words import recommendation, sweep_summary, sweep_verdict

    result = recorded_sweep()
    result.table[4].predicted_empirical = 1.05  # k = 8: measured 2.22x, predicted 1.05x (2.1-fold)
    verdict = sweep_verdict(result)
    assert not verdict.trusted and "k = 8: the prediction (1.05" in verdict.failures[0].message
    k, why = recommendation(result)
    assert k is None and why.startswith("the verdict failed: k = 8")
    assert "**No recommended k**" in sweep_summary(result, "cpu", 3, 32)
    assert not any("recommended k" in a.text for a in charts.sweep_figure(result).layout.annotations)


@pytest.mark.parametrize("slower, said", [
    (0.0, "The best measured k was 8 (2.22\u00d7); not a recommendation while the verdict fails."),
    (1.5, "And no k beat plain decoding (the best, k = 8, measured 0.72\u00d7)."),
])
def test_a_failed_verdict_names_the_best_measured_k_whether_or_not_it_beat_plain(slower, said):
    """A one-round sweep (the API test's) fails its verdict on any host, and its best k beat plain decoding or
    not as the host is fast or slow: with the figures made by hand, both sentences are said here."""
    from playground.lab.trust import Finding, Verdict
    from playground.ui.sweep_words import sweep_summary

    rounds = Finding("rounds", "fail", "1 round: a single run has no spread", "run at least 3 rounds")
    result = recorded_sweep(trust=Verdict.of([rounds]).to_dict(), recommended_k=None, withheld=rounds.message)
    for row in result.table:
        row.median_ratio -= slower
    text = sweep_summary(result, "cpu", 1, 32)
    assert "**No recommended k**: 1 round: a single run has no spread." in text and said in text


def test_calibrate_compare_and_whatif_give_a_hybrid_one_kind_of_prediction(word_pair, monkeypatch):  # noqa: F811
    """The user's hybrid got a model prediction after Calibrate (a per-k table) and in What-if, but 'no model for
    this drafter' after Compare: all three now say why through verdicts.pricing and show the run's costed figure,
    where the draft model gets its model prediction on each."""
    from playground.drafters.registry import make_proposer
    from playground.ui import measure, run_panel, verdicts
    from playground.ui.session import Session
    from playground.ui.whatif_view import DEFAULTS, prefill, whatif_view
    from tests.test_replay import fake_timing
    from tests.test_ui_handlers import request

    provider = serving.PairProvider(pair=word_pair)
    said = {}
    for drafter in ("hybrid", "draft"):
        provider.calibrations.put(make_proposer(word_pair, drafter).describe(), fake_timing())
        session, req = Session(), request(provider, drafter=drafter, k=4, max_new_tokens=12)
        calibrated = list(measure.stream_calibrate(provider, session, req))[-1].prediction  # 'Already calibrated'
        _, line = prefill(session, provider.calibrations)
        list(run_panel.stream_run(provider, session, req))
        timing = provider.calibrations.get(make_proposer(word_pair, drafter).describe(), len(session.run.prompt_ids))
        priced = verdicts.pricing(drafter, timing, session.run)
        said[drafter] = (priced, verdicts.pricing(drafter, timing).why, calibrated, verdicts.prediction_markdown(session, timing), line,
                         whatif_view(session, DEFAULTS, provider.calibrations).status)
    (priced, before, calibrated, compared, filled, whatif), draft = said["hybrid"], said["draft"]
    assert not priced.single_c and priced.why.startswith("no model for this drafter") and priced.costed
    assert "lookup (a search: 0.010 target steps a call; " in priced.why and "draft (a model: c = 0.20 + " in priced.why
    assert before.startswith("no model for this drafter") and html.escape(before, False) in calibrated  # before a run
    why = html.escape(priced.why, False)  # ... and after it, the sources' iterations counted
    assert "| k | predicted speed-up |" not in calibrated and "| k | predicted speed-up |" not in calibrated  # no per-k table of a single c
    assert why in compared and f"**{priced.costed:.2f}\u00d7**" in compared and "predicted, iid" not in compared
    assert "of hybrid's model drafter alone (no model for this drafter" in filled
    assert why in whatif and f"its own iterations costed: {priced.costed:.2f}\u00d7" in whatif
    assert "predicted with these costs" not in whatif
    priced, before, calibrated, compared, filled, whatif = draft
    assert priced.single_c and not priced.why and not before
    assert "| k | predicted speed-up |" in calibrated and "predicted, iid" in compared
    assert "model drafter alone" not in filled and "predicted with these costs" in whatif


@pytest.mark.parametrize("hybrid", ["hybrid", "suffix-hybrid"])
def test_a_hybrid_sweep_shows_no_single_c_prediction(hybrid):
    from playground.ui import batching, charts
    from playground.ui.session import Session
    from playground.ui.sweep_words import fit_to_drafter, sweep_summary
    from tests.test_replay import fake_timing
    from tests.test_ui_whatif import fake_batch

    timing = fake_timing().to_dict()  # a calibration to draw the batch lines from
    result, no_model = fit_to_drafter(recorded_sweep(timing=timing), hybrid)
    names = [t.name for t in charts.sweep_figure(result).data]
    assert "predicted (iid \u03b1)" not in names and "predicted (per position)" not in names
    assert "predicted (loop costs)" in names  # priced from the runs' own iterations: it fits any drafter
    assert "no model for this drafter" in sweep_summary(result, "cpu", 3, 32, no_model=no_model)
    assert batching.batch_curves(result, fake_batch()) is None  # nor the single-c model's lines per batch size
    assert "No batch lines for the sweep's drafter: no model for this drafter" in batching.batch_note(
        Session(sweep=result, batch=fake_batch()))
    kept, none = fit_to_drafter(recorded_sweep(timing=timing), "draft")
    assert "predicted (iid \u03b1)" in [t.name for t in charts.sweep_figure(kept).data] and not none
    assert batching.batch_curves(kept, fake_batch())


@pytest.mark.parametrize("drafter, fits", [
    ("hybrid", False), ("suffix-hybrid", False), ("suffix", True), ("draft", True), ("lookup", True), ("auto", True),
])
def test_the_single_c_model_fits_a_drafter_by_the_sources_the_registry_declares(drafter, fits):
    """A drafter with several sources gets no single-c prediction, in a run's panel as in a sweep, even from a run
    whose iterations all drew from one source (a suffix-hybrid whose tree never matched): the registry's sources
    decide, not the drafter's name."""
    from types import SimpleNamespace

    from playground.ui.sweep_words import fit_to_drafter
    from playground.ui.verdicts import pricing

    run = SimpleNamespace(request=SimpleNamespace(drafter=drafter), records=[],
                          summary=SimpleNamespace(source_iterations={"draft": 9}))
    assert pricing(drafter, None, run).single_c is fits
    assert (fit_to_drafter(recorded_sweep(), drafter)[1] == []) is fits
