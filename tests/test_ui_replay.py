"""The Replay tab without a browser: its request parsing and limits, the handler on a tiny random pair with a
word-level tokenizer (a trace file with a bad line, the pair's shared calibrations, Stop, nothing to replay), the
panels built from the result (recommendation or withheld reason, break-even alpha from core.cost, labels placed
apart, the token view at each k), the /replay event's error path, and one slow replay of a preset on the embedded
pair (exact: the target's own greedy output)."""

from __future__ import annotations

import html
import itertools
import json
import re
import threading
import time

import gradio as gr
import pytest
import torch

from playground.core.cost import break_even_alpha
from playground.drafters.registry import make_proposer
from playground.errors import PlaygroundError
from playground.lab.replay import greedy_turn
from playground.limits import Limits
from playground.pairs.models import ModelPair
from playground.results.replay import CalibrationUse, LineError, ShapeRecommendation, ShapeSummary
from playground.ui import replay_panel, replay_request, replay_view, serving
from playground.ui.markup import fold
from tests.test_replay import fake_timing
from tests.tiny import tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]  # + "<eos>" = 64 tokens
PROMPTS = ["w1 w2 w3 w4 w5 w1 w2 w3", "w7 w8 w9 w7 w8", "w20 w21 w22 w23 w20 w21", "w30 w31 w32 w30 w31"]
BASE = {"source": "file", "trace_file": None, "presets": [], "drafter": "draft", "ks": "1-4",
        "controllers": ["heuristic"], "calibration": "once", "decoding": "greedy", "temperature": 1.0, "top_k": 0,
        "top_p": 1.0, "seed": 0, "min_confidence": 0.0, "first_turns": 0}
DRAFTERS = ["draft", "lookup", "hybrid"]


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    return ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=target, eos_ids=frozenset({63}),
                     target_name="tiny-target", draft_name="tiny-draft")  # a perfect draft: every k pays


@pytest.fixture
def provider(pair):
    p = serving.PairProvider(pair=pair)
    for drafter in DRAFTERS:  # a trusted calibration with round numbers (c = 0.2), shared as the tabs share one
        p.calibrations.put(make_proposer(pair, drafter).describe(), fake_timing())
    return p


@pytest.fixture(scope="module")
def trace(pair, tmp_path_factory):
    """Four turns whose completions are the target's own greedy output, and one bad line."""
    lines = []
    for i, prompt in enumerate(PROMPTS):
        ids = pair.tokenizer(prompt)["input_ids"]
        turn = greedy_turn(pair, f"t{i}", ids, 12, "text")
        lines.append(json.dumps({"id": f"t{i}", "prompt": prompt,
                                 "completion": " " + pair.tokenizer.decode(list(turn.completion_ids))}))
    lines.insert(2, '{"prompt": "w1", "completion": 5}')
    path = tmp_path_factory.mktemp("traces") / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def request(**changes):
    return replay_request.parse_replay({**BASE, **changes}, DRAFTERS, Limits())


def run(provider, req, state=None):
    return list(replay_panel.stream_replay(provider, state, None, req, Limits()))


# --- the request ---------------------------------------------------------------------------------------------


def test_k_values_parse_as_lists_and_ranges_or_say_what_to_type():
    assert replay_request.parse_ks("1-4, 8") == (1, 2, 3, 4, 8)
    assert replay_request.parse_ks("4,2,2") == (2, 4)
    for text, message in (("", "empty"), ("a", "not a whole number"), ("5-2", "backwards"), ("0", "from 1 to 16"),
                          ("1-17", "from 1 to 16")):
        with pytest.raises(PlaygroundError, match=message):
            replay_request.parse_ks(text)


@pytest.mark.parametrize("changes, message", [
    ({"trace_file": None}, "no trace file"),
    ({"trace_file": "/nonexistent/trace.jsonl"}, "gone from the server"),
    ({"source": "nowhere"}, "replay what"),
    ({"source": "sample", "drafter": "llama.cpp"}, "unknown drafter"),
    ({"source": "presets", "presets": []}, "no preset chosen"),
    ({"source": "presets", "presets": ["no_such_preset"]}, "unknown preset"),
    ({"source": "sample", "controllers": ["magic"]}, "unknown controller"),
    ({"source": "sample", "decoding": "sample", "temperature": -1}, "temperature"),
])
def test_bad_requests_are_refused_with_a_clear_message(changes, message):
    with pytest.raises(PlaygroundError, match=message):
        request(**changes)


def test_an_oversize_or_empty_upload_is_refused_naming_the_limits(tmp_path):
    limits = Limits(max_replay_turns=2, max_replay_tokens=8)  # 8 bytes x 8 tokens x 2 turns = 128 bytes
    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": "w1", "completion": "w2"}\n' * 4)
    with pytest.raises(PlaygroundError, match="PLAYGROUND_MAX_REPLAY_TOKENS.*PLAYGROUND_MAX_REPLAY_TURNS"):
        replay_request.parse_replay({**BASE, "trace_file": str(big)}, DRAFTERS, limits)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(PlaygroundError, match="empty"):
        replay_request.parse_replay({**BASE, "trace_file": str(empty)}, DRAFTERS, limits)


# --- the handler ---------------------------------------------------------------------------------------------


def test_a_trace_replays_with_its_bad_line_listed_and_a_recommended_k(provider, trace):
    updates = run(provider, request(trace_file=trace))
    assert updates[0].status.startswith("Reading") and any("4 turns of an uploaded trace file with draft" in u.status
                                                           for u in updates)
    last = updates[-1]
    doc = last.doc
    assert last.status.startswith("Replay done: recommended k = ")
    assert len(doc.turns) == 4 and all(t.exact for t in doc.turns)  # the target's own output: exact
    assert doc.errors == [LineError(line=3, field="completion", message="missing or not a non-empty string")]
    assert "1 not replayed" in last.status and doc.calibration == CalibrationUse(how="once", calibrations=1, reused=1)
    state = last.state
    assert state.doc is doc and state.drafter == "draft" and state.tokenizer is provider.get().tokenizer
    errors = replay_view.errors_markdown(doc.errors)
    assert "line 3, field `completion`: missing or not a non-empty string" in errors
    rec = replay_view.replay_recommendation_html(doc, "draft")
    k = doc.summary.overall.recommendation.recommended_k
    assert f"Recommended k = {k} with draft" in rec and "estimate" not in rec and "trusted" in rec
    table = replay_view.replay_per_k_html(doc, "draft")
    timing = fake_timing()
    for kk in (1, 4):  # break-even alpha from the cost model with the calibration's c, v and cost per call
        expected = break_even_alpha(kk, timing.c, timing.v, timing.overhead)
        assert f'data-arm="k={kk}"' in table and f"<td>{expected:.2f}</td>" in table
    assert 'data-arm="heuristic"' in table


def test_the_token_view_is_coloured_by_what_each_k_would_have_accepted(provider, trace):
    doc = run(provider, request(trace_file=trace))[-1].doc
    tok = provider.get().tokenizer
    views = {arm: replay_view.token_view(doc, "draft", 0, arm, tok) for arm in ("k=1", "k=4", "heuristic")}
    for arm, (note, tokens) in views.items():
        label = "k = 1" if arm == "k=1" else "k = 4" if arm == "k=4" else "heuristic k"
        assert label in note and "exact" in note
        assert tokens.count('class="tok ') == doc.turns[0].completion_tokens
        iterations = doc.turns[0].drafters["draft"].walks[arm].iterations
        assert tokens.count('class="it ') == iterations
    assert views["k=1"][1] != views["k=4"][1]  # another k, other iterations
    assert 'class="tok acc' in views["k=4"][1]
    assert replay_view.token_view(None, None, None, None) == ("", replay_view.EMPTY_TOKENS)
    public = replay_view.public_doc(doc)
    assert "records" not in json.dumps(public["turns"])
    assert doc.turns[0].drafters["draft"].walks["k=1"].records is not None


def test_the_run_tabs_confidence_stop_is_replayed_and_named(provider, trace):
    """The stop decides how far a drafter drafts: the replay stops where a live run with it would (lab.replay's
    tests compare the two), so a k = 4 walk iterates more often than without it, and the page names the stop."""
    plain = run(provider, request(trace_file=trace))[-1].doc
    updates = run(provider, request(trace_file=trace, min_confidence=0.5))
    doc = updates[-1].doc
    assert doc.min_confidence == 0.5 and plain.min_confidence is None
    assert any("drafting stopped below confidence 0.5" in u.status for u in updates)
    assert "stopped below confidence 0.5" in replay_view.replay_recommendation_html(doc, "draft")
    assert "confidence" not in replay_view.replay_recommendation_html(plain, "draft")
    walks = [(t.drafters["draft"].walks["k=4"].iterations, p.drafters["draft"].walks["k=4"].iterations)
             for t, p in zip(doc.turns, plain.turns)]
    assert all(a >= b for a, b in walks) and any(a > b for a, b in walks)


def test_nothing_to_replay_lists_the_bad_lines_and_says_so(provider, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('not json\n{"messages": 3}\n')
    gen = replay_panel.stream_replay(provider, None, None, request(trace_file=str(path)), Limits())
    updates = []
    with pytest.raises(PlaygroundError, match="nothing to replay"):
        updates.extend(gen)
    assert "line 1" in updates[-1].errors and "line 2" in updates[-1].errors
    assert updates[-1].status.startswith("\u26a0 Nothing to replay")


def test_a_drafter_the_pair_cannot_replay_is_refused(provider):
    req = replay_request.parse_replay({**BASE, "source": "sample", "drafter": "llama.cpp"}, ["llama.cpp"], Limits())
    with pytest.raises(PlaygroundError, match="cannot replay on this pair"):
        run(provider, req)


def test_stopping_a_replay_stops_its_worker_and_marks_the_tab(provider, trace, monkeypatch):
    def endless(pair, turns, options, progress=None):
        while True:
            progress(0.5, "replaying")  # raises Stopped once the consumer is closed
            time.sleep(0.05)

    monkeypatch.setattr(replay_panel, "replay_turns", endless)
    gen = replay_panel.stream_replay(provider, None, None, request(trace_file=trace), Limits())
    for u in gen:
        if "replaying" in u.status:
            break
    state = u.state
    gen.close()
    assert state.stopped
    deadline = time.monotonic() + 10
    while any(t.name == "playground-replay" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "playground-replay" for t in threading.enumerate())


# --- the chart -----------------------------------------------------------------------------------------------


def test_margin_labels_are_placed_apart_and_inside_the_plot():
    labels = [(1.0, "a", "#000"), (1.01, "b", "#000"), (1.02, "c", "#000"), (2.0, "d", "#000"), (2.0, "e", "#000")]
    notes = replay_view.place_labels(labels, 0.0, 2.05, 200)
    per_px = 2.05 / 200
    centres = sorted(n["y"] / per_px + n["yshift"] for n in notes)
    assert all(b - a >= replay_view.LABEL_GAP_PX - 1e-9 for a, b in itertools.pairwise(centres))
    assert 0 < centres[0] and centres[-1] <= 200 - replay_view.LABEL_GAP_PX / 2


def test_the_chart_has_a_labelled_line_per_shape_and_the_recommended_k(provider, trace):
    doc = run(provider, request(trace_file=trace))[-1].doc
    fig = replay_view.replay_figure(doc, "draft")
    texts = [a.text for a in fig.layout.annotations]
    k = doc.summary.overall.recommendation.recommended_k
    assert "plain decoding" in texts and any(t.startswith("all tokens") for t in texts)
    assert f"recommended k = {k}" in texts and "no recommended k" not in fig.layout.title.text
    lines = [d for d in fig.data if d.mode == "lines+markers"]
    assert {d.name for d in lines} >= {"all tokens"} and all(list(d.x) == [1, 2, 3, 4] for d in lines)
    assert replay_view.replay_figure(None).layout.annotations[0].text.startswith("run a replay")


def shown(line: str) -> str:
    """A status line as the page shows it with its fold opened (tests/test_ui_browser.status): no tags, "more" a
    space, entities read."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", line.replace("<summary>more</summary>", " "))).split())


@pytest.mark.parametrize("c, status, verdict", [
    (0.2, "Replay done: recommended k = 3 for all tokens with draft \u00b7 4 turns", "Recommended k = 3 with draft: "),
    (0.98, "Replay done: no recommended k with draft no k is predicted to beat plain decoding (the best, k = 1, ",
     "No recommended k: no k is predicted to beat plain decoding (the best, k = 1, "),
    (5.0, "Replay done: no recommended k with draft the draft calibration is not trusted: UNTRUSTWORTHY: ",
     "No recommended k: the draft calibration is not trusted: UNTRUSTWORTHY: "),
])
def test_the_done_status_says_the_recommended_k_or_why_none_as_the_page_shows_it(pair, trace, c, status, verdict):
    """Every outcome on any host: the calibration is made by hand, a drafter step of 0.2 target steps (k = 3
    pays most), of 0.98 (no k beats plain decoding) or of 5 (slower than the target: not trusted), and the status
    is read as the page shows it, through the fold that cuts a long line at " \u2014 " and drops the dash (the
    browser test asserts only what holds whichever outcome its host gives)."""
    provider = serving.PairProvider(pair=pair)
    provider.calibrations.put(make_proposer(pair, "draft").describe(), fake_timing(c=c))
    last = run(provider, request(trace_file=trace))[-1]
    assert shown(fold(last.status)).startswith(status), last.status
    assert verdict in replay_view.replay_recommendation_html(last.doc, "draft")


def test_a_slower_than_plain_best_k_is_not_recommended():
    shape = ShapeSummary(turns=3, tokens=30, drafters={}, recommendation=ShapeRecommendation(
        drafter="draft", k=3, speedup=0.8, interval=None, recommended_k=3, withheld=None, estimate=False))
    k, why = replay_view.replay_recommendation(shape)
    assert k is None and "no k is predicted to beat plain decoding" in why


# --- the event -----------------------------------------------------------------------------------------------


def test_the_replay_event_turns_bad_input_into_a_message_and_lists_the_api(provider):
    from playground.ui import build_ui  # builds the whole app: only this test needs it

    demo = build_ui(provider)
    fns = {f.api_name: f for f in demo.fns.values()}
    assert {"replay", "run", "sweep", "calibrate"} <= set(fns)
    assert fns["replay"].concurrency_id == fns["run"].concurrency_id and fns["replay"].concurrency_limit == 1
    api = demo.get_api_info()["named_endpoints"]["/replay"]  # the tab's state is no API parameter
    assert [p["parameter_name"] for p in api["parameters"]] == list(BASE)
    args = {**BASE, "state": None, "moved": {}}
    names = ["state", *[n for n in BASE], "moved"]  # the two gr.States: the tab's replay, the sliders' moves
    gen = fns["replay"].fn(None, *[args[n] for n in names], None)
    first = next(gen)
    assert first[0].startswith("\u26a0 no trace file")
    with pytest.raises(gr.Error):
        next(gen)


def test_the_replay_api_takes_an_uploaded_trace(provider, trace, launch_app):
    from gradio_client import Client, handle_file  # the API client: only this test needs it

    from playground.ui import build_ui  # builds the whole app: only this test needs it

    client = Client(launch_app(build_ui(provider)), verbose=False)
    out = client.predict(**{**BASE, "trace_file": handle_file(trace), "ks": "1,2"}, api_name="/replay")
    status, verdict, doc = out[0], out[1], out[9]
    assert status.startswith("Replay done: recommended k = ") and "Recommended k = " in verdict
    assert doc["ks"] == [1, 2] and len(doc["turns"]) == 4 and doc["errors"][0]["line"] == 3
    assert "records" not in doc["turns"][0]["drafters"]["draft"]["walks"]["k=1"]


@pytest.mark.slow
def test_a_preset_replays_exactly_on_the_embedded_pair():
    provider = serving.PairProvider()
    req = replay_request.parse_replay({**BASE, "source": "presets", "presets": ["tool_call"], "drafter": "lookup",
                                    "ks": "1,4", "controllers": []}, ["lookup"], Limits())
    last = run(provider, req)[-1]
    doc = last.doc
    assert last.status.startswith("Replay done") and doc.turns[0].exact and doc.turns[0].origin == "preset"
    assert "estimate" not in replay_view.replay_recommendation_html(doc, "lookup").split("</div>")[0]
    note, tokens = replay_view.token_view(doc, "lookup", 0, "k=4", last.state.tokenizer, last.state.special_ids)
    assert "exact" in note and 'class="tok ' in tokens


@pytest.mark.parametrize("ks, edge", [("1-2", True), ("1-4", False)])
def test_a_recommended_k_at_the_edge_of_the_range_is_said_with_a_wider_one_offered(pair, trace, ks, edge):
    """With a drafter step of 0.2 target steps k = 3 pays most: replayed over k 1-2 the recommendation is the
    range's top, and the status and the panel say so and offer 1-16; over 1-4 it is inside, and nothing is said."""
    provider = serving.PairProvider(pair=pair)
    provider.calibrations.put(make_proposer(pair, "draft").describe(), fake_timing(c=0.2))
    last = run(provider, request(trace_file=trace, ks=ks))[-1]
    note = replay_view.edge_note(last.doc)
    panel = replay_view.replay_recommendation_html(last.doc, "draft")
    if edge:
        assert note is not None and note.startswith("k = 2 is the largest k replayed") and "1-16" in note
        assert "k = 2 is the largest replayed: try 1-16" in shown(fold(last.status)) and 'id="replay-edge"' in panel
    else:
        assert note is None and "largest" not in last.status and "replay-edge" not in panel
