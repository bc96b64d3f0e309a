"""The browser playground without a browser: token HTML and charts from hand-built records, and the
event handlers on tiny random models (a word-level tokenizer stands in for a real one)."""

from __future__ import annotations

import copy
import dataclasses
import html
import json
import re
import threading
import time

import plotly.graph_objects as go
import pytest
import torch

from playground.core.engine import K_MAX
from playground.core.records import ACCEPTED, BONUS, CORRECTION, PLAIN, Iteration, Prefill, Step, summarize
from playground.errors import PlaygroundError
from playground.inputs.presets import OutputCheck, get_preset
from playground.inputs.text import token_pieces
from playground.lab.calibration import pass_lengths
from playground.pairs.models import ModelPair
from playground.pairs.registry import PairChoice
from playground.results import from_document
from playground.results.speed import SpeedRun, SweepResult
from playground.ui import charts, handlers, markup, measure, render, run_panel, serving, sweep_words, verdicts
from playground.ui.session import Session, parse_request, parse_sweep
from tests.tiny import perturbed, tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]  # + "<eos>" = 64 tokens
PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"
CONTROLS = {"prompt": PROMPT, "preset": "", "chat": True, "drafter": "draft", "k": 3, "decoding": "greedy",
            "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 24, "seed": 0}


def it(index, proposed, n_accepted, emitted, roles, p=None, q=None, finished=None, k=None):
    return Iteration(index=index, k=k if k is not None else len(proposed), proposed=tuple(proposed),
                     n_accepted=n_accepted, emitted=tuple(emitted), roles=tuple(roles), draft_s=0.01 * (index + 1),
                     verify_s=0.02, rollback_s=0.001, elapsed_s=0.05 * (index + 1), p=p, q=q, finished=finished)


RECORDS = [
    Prefill(prompt_tokens=5, target_s=0.1, draft_s=0.05),
    it(0, [1, 2, 3], 1, [1, 7], [ACCEPTED, CORRECTION], p=(0.9, 0.1, 0.5), q=(0.8, 0.4, 0.5)),
    it(1, [4, 5], 2, [4, 5, 6], [ACCEPTED, ACCEPTED, BONUS], p=(0.5, 0.7), q=(0.25, 0.7)),
    it(2, [], 0, [8], [PLAIN], k=3, finished="length"),
]


@pytest.fixture(scope="module")
def word_pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    return ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")


@pytest.fixture(scope="module")
def provider(word_pair):
    return serving.PairProvider(pair=word_pair)


def request(provider, **changes):
    """What blocks.py builds from the controls before an event: a validated RunRequest, with the drafters of the
    provider's pair."""
    return parse_request({**CONTROLS, **changes}, provider.drafter_names())


def sweep_request(provider, k_max, rounds, max_new_tokens, drafter="draft"):
    controls = {name: CONTROLS[name] for name in ("prompt", "preset", "chat", "decoding", "temperature", "top_k",
                                                  "top_p", "seed")}
    return parse_sweep({**controls, "drafter": drafter, "k_max": k_max, "rounds": rounds,
                        "max_new_tokens": max_new_tokens}, provider.drafter_names())


def run_to_end(provider, session=None, prompt=PROMPT, drafter="draft", k=3, decoding="greedy", max_new=24, **kw):
    req = request(provider, prompt=prompt, drafter=drafter, k=k, decoding=decoding, max_new_tokens=max_new, **kw)
    return list(run_panel.stream_run(provider, session, req))


# --- render -------------------------------------------------------------------------------------------------


def test_token_html_has_one_span_per_token_coloured_by_role_with_alternating_iterations():
    out = render.records_html(RECORDS)
    assert out.count('class="tok ') == 6
    assert out.count('class="tok acc"') == 3 and out.count('class="tok cor"') == 1
    assert out.count('class="tok bon"') == 1 and out.count('class="tok pln"') == 1
    assert out.index('class="it even" data-iteration="1"') < out.index('class="it odd" data-iteration="2"') \
        < out.index('class="it even" data-iteration="3"')
    assert "max new tokens reached" in out  # the finish mark after the last iteration


def test_hover_text_gives_iteration_role_p_q_and_acceptance_probability():
    out = render.records_html(RECORDS, greedy=False)
    titles = [html.unescape(t.split('"')[0]) for t in out.split('title="')[1:]]
    accepted_first = titles[0]
    assert "iteration 1" in accepted_first and "accepted draft token" in accepted_first
    assert "p(x) = 0.900" in accepted_first and "q(x) = 0.800" in accepted_first
    assert "min(1, p/q) = 1.000" in accepted_first
    correction = titles[1]  # the rejected proposal's numbers: p 0.1, q 0.4 -> 0.25
    assert "target's correction" in correction and "position 2 of 3" in correction
    assert "min(1, p/q) = 0.250" in correction
    assert "bonus" in titles[4] and "all 2 proposals kept" in titles[4]
    assert "plain step" in titles[5]


def test_deterministic_proposals_show_q_as_a_point_mass_and_greedy_says_how_it_decides():
    lookup = it(0, [3, 4], 2, [3, 4, 5], [ACCEPTED, ACCEPTED, BONUS], p=(0.4, 0.9), q=None)
    tip = render.token_tip(lookup, 0, greedy=True)
    assert "q(x) = 1 (deterministic proposal)" in tip and "min(1, p/q) = 0.400" in tip
    assert "greedy: a proposal is kept iff it is the target's arg-max" in tip


def test_token_text_is_escaped_and_newlines_are_shown():
    tok = word_tokenizer(["<b>", "a&b", "x"])
    # a word-level tokenizer joins with spaces; the pieces carry the markup characters
    out = render.records_html([it(0, [0, 1], 2, [0, 1, 2], [ACCEPTED, ACCEPTED, BONUS])], tok)
    assert "<b>" not in out.replace('<span class="tok', "") and "&lt;b&gt;" in out and "a&amp;b" in out
    assert render.escape_piece('x\n"y"') == 'x<span class="nl">\u21b5</span>\n&quot;y&quot;'
    evil = it(0, [], 0, [9], [PLAIN])
    assert "<script" not in render.records_html([evil], _FakeTokenizer({9: "<script>alert(1)</script>"}))


class _FakeTokenizer:
    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.pieces[i] for i in ids)


def test_piece_decoder_matches_token_pieces_and_holds_back_incomplete_characters():
    tok = word_tokenizer(WORDS)
    ids = [1, 5, 9, 2, 2, 40]
    dec = render.PieceDecoder(tok)
    assert dec.extend(ids[:2]) + dec.extend(ids[2:]) == token_pieces(tok, ids)
    # a byte-level tokenizer splits "é" into two byte tokens: the first shows nothing, the second the character
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    byte_tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    ids = byte_tok("a\u00e9b")["input_ids"]
    assert len(ids) == 4
    pieces = render.PieceDecoder(byte_tok).extend(ids)
    assert pieces == ["a", "", "\u00e9", "b"] and "".join(pieces) == "a\u00e9b"


def test_plain_steps_render_as_plain_tokens():
    out = render.records_html([Prefill(3, 0.1), Step(0, 4, 0.01, 0.01), Step(1, 5, 0.01, 0.02, "eos")])
    assert out.count('class="tok pln"') == 2 and "end of sequence" in out


# --- charts -------------------------------------------------------------------------------------------------


def valid(fig: go.Figure) -> go.Figure:
    return go.Figure(fig.to_dict())  # plotly validates every property on construction from a dict


def test_time_split_is_stacked_draft_verify_rollback_in_ms():
    its = [r for r in RECORDS if isinstance(r, Iteration)]
    fig = valid(charts.time_split_figure(its))
    assert [t.name for t in fig.data] == ["draft", "verify", "rollback"] and fig.layout.barmode == "stack"
    assert list(fig.data[0].y) == pytest.approx([10, 20, 30]) and list(fig.data[0].x) == [1, 2, 3]


def test_acceptance_by_position_and_alpha_charts():
    s = summarize(RECORDS)
    fig = valid(charts.acceptance_by_position_figure(s))
    # position 1: 2 of 2, position 2: 1 of 2, position 3: never reached (no bar, not a zero)
    assert list(fig.data[0].y) == [1.0, 0.5, None] and list(fig.data[0].text)[2] == "not reached"
    assert fig.layout.shapes[0].y0 == pytest.approx(s.alpha)
    fig = valid(charts.alpha_figure([r for r in RECORDS if isinstance(r, Iteration)]))
    running = fig.data[1]
    assert list(running.x) == [1, 2] and list(running.y) == pytest.approx([0.5, 0.75])


def test_empty_figures_exist_for_every_chart():
    for fig in (charts.time_split_figure([]), charts.acceptance_by_position_figure(None), charts.alpha_figure([]),
                charts.sweep_figure(None), charts.empty_figure("x")):
        valid(fig)
        assert fig.layout.annotations  # the "no data yet" note


SWEEP_RESULT = {  # a sweep result as saved (a trimmed one: no runs, no verdict)
    "experiment": "sweep", "ks": [1, 2, 3, 4], "rounds": 2, "max_new_tokens": 24,
    "table": [{"k": k, "median_ratio": r, "min_ratio": r - 0.1, "max_ratio": r + 0.1, "alpha": 0.8,
               "predicted_iid": r + 0.05, "predicted_empirical": r + 0.02, "break_even_alpha": 0.3 + 0.05 * k}
              for k, r in [(1, 1.2), (2, 1.4), (3, 1.3), (4, 0.9)]],
    "best_k": 2,
    "predicted_best_k": 3,
    "timing": {"target_step_s": 0.02, "verify_s": {"1": 0.02, "2": 0.022, "3": 0.024, "4": 0.026, "5": 0.028},
               "draft_step_s": 0.01, "c": 0.5, "v": {}, "context_tokens": 9, "raw": {}},
}


def sweep_result(**changes) -> SweepResult:
    """SWEEP_RESULT as lab.speed.sweep returns it, with `changes` to its saved fields."""
    return from_document(json.loads(json.dumps({**SWEEP_RESULT, **changes})))


def test_sweep_chart_shows_measured_predicted_break_even_and_recommended_k():
    fig = valid(charts.sweep_figure(sweep_result()))
    names = [t.name for t in fig.data]
    assert names == ["measured (median)", "predicted (iid \u03b1)", "predicted (per position)"]
    assert list(fig.data[0].error_y.array) == pytest.approx([0.1] * 4)
    assert any(s.y0 == 1.0 and s.y1 == 1.0 for s in fig.layout.shapes)  # break-even line
    assert any(s.x0 == 2 for s in fig.layout.shapes)  # recommended k
    assert any("recommended k = 2" in a.text for a in fig.layout.annotations)


# --- input parsing ------------------------------------------------------------------------------------------


ARGS = {"prompt": "hello", "preset": "", "chat": True, "drafter": "draft", "k": 4, "decoding": "greedy",
        "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 16, "seed": 0}


def parse(**changes):
    return parse_request({**ARGS, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"prompt": "   "}, "the prompt is empty"),
    ({"prompt": None}, "the prompt is empty"),
    ({"k": 0}, "k must be from 1 to 16"),
    ({"k": 17}, "k must be from 1 to 16"),
    ({"k": 2.5}, "k must be a whole number"),
    ({"drafter": "oracle"}, "unknown drafter 'oracle'"),
    ({"decoding": "beam"}, "decoding must be 'greedy' or 'sample'"),
    ({"max_new_tokens": 0}, "max new tokens must be from 1"),
    ({"max_new_tokens": None}, "max new tokens must be a whole number"),
    ({"decoding": "sample", "temperature": 0}, "temperature must be a finite number > 0"),
    ({"decoding": "sample", "temperature": float("nan")}, "temperature must be a finite number"),
    ({"decoding": "sample", "top_p": 0}, "top-p must be in (0, 1]"),
    ({"decoding": "sample", "top_k": -1}, "top-k must be an integer >= 0"),
    ({"seed": -3}, "seed must be between 0"),
])
def test_bad_input_is_a_clear_playground_error(changes, message):
    with pytest.raises(PlaygroundError) as e:
        parse(**changes)
    assert message in str(e.value)


def test_control_values_from_the_browser_are_normalised():
    req = parse(k=4.0, max_new_tokens=32.0, seed=7.0)
    assert (req.k, req.max_new_tokens, req.sampling.seed) == (4, 32, 7) and req.sampling.greedy
    # sampling settings are ignored for greedy decoding, used when sampling
    greedy = parse(temperature=0).sampling
    assert greedy.greedy
    s = parse(decoding="sample", temperature=0.7, top_k=20.0, top_p=0.9, seed=3).sampling
    assert (s.do_sample, s.temperature, s.top_k, s.top_p, s.seed) == (True, 0.7, 20, 0.9, 3)
    assert parse().k_mode == "fixed" and parse(k_mode="adaptive").k_mode == "adaptive"  # k_mode: "fixed" if unset


# --- the pair loader ----------------------------------------------------------------------------------------


def test_pair_cache_loads_once_per_pair_under_concurrency():
    calls = []

    def slow_load(target, draft, device, dtype, progress):
        calls.append((target, draft, device, dtype))
        time.sleep(0.05)
        return object()

    cache = serving.PairCache(load=slow_load)
    choice = PairChoice("t", None, "cpu", "float32")
    got = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(choice))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len({id(g) for g in got}) == 1 and cache.loaded(choice)
    cache.get(PairChoice("t", "int8", "cpu", "float32"))
    assert len(calls) == 2


def test_two_choices_differing_only_in_name_share_one_loaded_pair():
    loads = []
    cache = serving.PairCache(load=lambda t, d, **k: loads.append(t) or object(), max_pairs=1)
    named = PairChoice("t", None, "cpu", "float32", name="a-name")
    first = cache.get(named)
    assert cache.get(PairChoice("t", None, "cpu", "float32")) is first and loads == ["t"]
    assert cache.loaded(PairChoice("t", None, "cpu", "float32", name="another"))
    assert cache.calibrations(named) is cache.calibrations(PairChoice("t", None, "cpu", "float32"))
    provider = serving.PairProvider(choice=named, cache=cache)
    assert provider.for_session(Session(pair=PairChoice("t", None, "cpu", "float32"))) is provider


def test_the_cache_loads_through_the_policy_checked_loader(monkeypatch):
    seen = []
    monkeypatch.setattr(serving, "load_choice", lambda choice, progress: seen.append(choice) or "pair")
    choice = PairChoice("t", "int8", "cpu", "float32", device_map="auto", name="x")
    assert serving.PairCache().get(choice) == "pair" and seen == [choice]  # the choice itself, as it was given
    kwargs = []
    injected = serving.PairCache(load=lambda target, draft, **kw: kwargs.append((target, draft, kw)) or "p")
    injected.get(choice)
    assert kwargs == [("t", "int8", {"device": "cpu", "dtype": "float32", "progress": None, "device_map": "auto"})]


def test_pair_choice_from_environment():
    assert serving.choice_from_env({}) == PairChoice("embedded", "int8", "auto", "auto", name="embedded")
    choice = serving.choice_from_env({"PLAYGROUND_TARGET": "/m", "PLAYGROUND_DRAFT": "none",
                                      "PLAYGROUND_DEVICE": "cpu", "PLAYGROUND_DTYPE": "bf16"})
    assert choice == PairChoice("/m", None, "cpu", "bf16")
    no_draft = serving.PairProvider(choice=choice, cache=serving.PairCache(load=None))
    names = [name for _, name in no_draft.drafter_choices()]
    assert names[0] == "auto" and "lookup" in names and "draft" not in names  # no draft model in this pair
    assert "llama.cpp" not in names  # the llama.cpp drafter drafts for the embedded target only
    embedded = [name for _, name in serving.PairProvider(choice=serving.choice_from_env({})).drafter_choices()]
    from playground.drafters.registry import names

    assert embedded == ["auto", *names()]


# --- events on tiny models ----------------------------------------------------------------------------------


def test_run_streams_views_and_ends_with_the_run_record(provider, word_pair):
    views = run_to_end(provider, max_new=24)
    assert len(views) >= 2 and views[-1].status.startswith("Done: 24 new tokens")
    final = views[-1]
    run = final.session.run
    doc = final.doc
    assert run.finished and doc["summary"]["new_tokens"] == 24
    iterations = [r for r in doc["records"] if r["type"] == "Iteration"]
    assert doc["records"][0]["type"] == "Prefill"
    assert sum(len(r["emitted"]) for r in iterations) == 24
    assert doc["summary"]["target_passes"] == len(iterations)
    assert doc["config"]["k"] == 3 and doc["config"]["sampling"]["do_sample"] is False
    assert doc["environment"]["pair"]["target"] == "tiny-target"
    assert final.tokens.count('class="tok ') == 24 and isinstance(final.figures, markup.RunFigures)
    assert 'data-counter="iterations"' in final.counters and "prefill" in final.counters
    with open(final.download) as f:
        assert json.load(f)["summary"] == doc["summary"]
    # greedy speculative output equals plain greedy output
    from playground.core.engine import plain_generate

    ids = word_pair.tokenizer(PROMPT)["input_ids"]
    plain = [r.token for r in plain_generate(word_pair, ids, max_new_tokens=24) if isinstance(r, Step)]
    assert [t for r in run.records if isinstance(r, Iteration) for t in r.emitted] == plain


def test_run_with_prompt_lookup_and_sampling(provider):
    views = run_to_end(provider, drafter="lookup", k=4, decoding="sample", temperature=0.8, top_p=0.95, seed=5,
                       max_new=16)
    doc = views[-1].doc
    assert doc["config"]["drafter"].startswith("prompt-lookup") and doc["config"]["sampling"]["seed"] == 5
    assert doc["summary"]["new_tokens"] == 16


def test_bad_input_fails_before_anything_runs(provider):
    with pytest.raises(PlaygroundError, match="the prompt is empty"):
        next(run_panel.stream_run(provider, None, request(provider, prompt="", k=4, max_new_tokens=16)))
    with pytest.raises(PlaygroundError, match="context holds 256"):
        run_to_end(provider, max_new=300)


def worker_ends(name: str, timeout: float = 10.0) -> bool:
    for t in [t for t in threading.enumerate() if t.name == name]:
        t.join(timeout)
    return not [t for t in threading.enumerate() if t.name == name]


def test_stopping_a_run_stops_the_engine_thread(provider, monkeypatch):
    import playground.core.engine

    real = playground.core.engine.speculative_generate

    def slowed(*args, **kwargs):  # tiny models are fast: make sure the run is still going when we stop it
        for rec in real(*args, **kwargs):
            time.sleep(0.02)
            yield rec

    monkeypatch.setattr(playground.core.engine, "speculative_generate", slowed)
    monkeypatch.setattr(run_panel, "YIELD_EVERY_S", 0.02)  # tokens drawn before the run can end
    gen = run_panel.stream_run(provider, None, request(provider, k=2, max_new_tokens=200))
    session = None
    for view in gen:
        session = view.session
        if view.tokens:
            break
    gen.close()  # what Gradio does when Stop cancels the event: returns at once, the worker stops at its next record
    assert worker_ends("playground-run")
    run = session.run
    n = len(run.records)
    time.sleep(0.2)
    assert not run.finished and len(run.records) == n > 1  # the partial run stays; nothing more arrives
    assert session.stopped == "run"  # for the event chained after the cancelled one
    after = handlers.stopped_view(session)
    assert after.status.startswith(f"Stopped after {n - 1} iterations") is False  # tokens first, then iterations
    assert after.status.startswith("Stopped after ") and "iterations" in after.status
    assert 'class="counters done"' in after.counters and session.stopped is None
    assert isinstance(after.figures, markup.RunFigures)
    assert handlers.stopped_view(session) == handlers.StoppedView()  # reported once


def test_a_stopped_compare_run_still_shows_its_tokens(provider, monkeypatch):
    import playground.core.engine

    def slowed(*args, **kwargs):
        for rec in real(*args, **kwargs):
            time.sleep(0.02)
            yield rec

    real = playground.core.engine.speculative_generate
    monkeypatch.setattr(playground.core.engine, "speculative_generate", slowed)
    monkeypatch.setattr(run_panel, "HEARTBEAT_QUIET_S", 0.0)
    gen = run_panel.stream_run(provider, None, request(provider, k=2, max_new_tokens=200), stream_tokens=False)
    session = None
    for view in gen:
        session = view.session
        assert view.tokens is None or view.tokens == ""  # nothing drawn while it runs
        if "tokens and charts when it ends" in view.status:
            break
    gen.close()
    assert worker_ends("playground-run")
    after = handlers.stopped_view(session)
    assert after.status.startswith("Stopped after ") and 'class="tok' in after.tokens


def test_compare_needs_a_run_then_measures_plain_right_after(provider):
    with pytest.raises(PlaygroundError, match="no finished speculative run"):
        list(handlers.stream_compare(provider, Session()))
    session = run_to_end(provider, max_new=20)[-1].session
    final = list(handlers.stream_compare(provider, session))[-1]
    run = session.run
    assert run.plain.mode == "plain" and run.plain.new_tokens == 20 and run.plain_gap_s >= 0
    assert final.doc["plain_summary"]["new_tokens"] == 20
    assert final.doc["measured_speedup"] == pytest.approx(run.summary.tokens_per_s / run.plain.tokens_per_s)
    assert "measured" in final.prediction and "n = 1 pair of runs" in final.prediction
    assert "prefill excluded" in final.prediction


def test_compares_run_draws_the_page_at_the_end_as_its_plain_run_does(provider, word_pair, monkeypatch):
    """A browser drawing the streamed tokens and charts on the same 2 cores slowed the run it showed 2.2x, and
    the plain run after it is not streamed: Compare's speculative run shows its progress only, then everything."""
    monkeypatch.setattr(run_panel, "HEARTBEAT_QUIET_S", 0.0)  # a view at every new record, either way
    monkeypatch.setattr(run_panel, "YIELD_EVERY_S", 0.02)
    # every pass a few ms (on the embedding, which each forward runs), so that a run spans several views
    slow = word_pair.target.model.embed_tokens.register_forward_pre_hook(lambda *_: time.sleep(0.005))
    request_ = request(provider, k=2, max_new_tokens=40)
    try:
        _check_compare_draws_at_the_end(provider, request_)
    finally:
        slow.remove()


def _check_compare_draws_at_the_end(provider, req):
    quiet = list(run_panel.stream_run(provider, None, req, stream_tokens=False))
    middle = quiet[1:-1]
    assert middle and all(v.tokens is None and v.counters is None and v.figures is None for v in middle)
    assert any("tokens and charts when it ends" in v.status for v in middle)  # its progress, said
    assert quiet[-1].status.startswith("Done") and 'class="tok' in quiet[-1].tokens and quiet[-1].figures
    session = quiet[-1].session
    assert session.run.streamed is False
    final = list(handlers.stream_compare(provider, session))[-1]
    assert "Both runs showed only their progress while they decoded" in final.prediction
    streamed = list(run_panel.stream_run(provider, None, req))
    assert any(v.tokens for v in streamed[1:-1])  # the Run button's run streams its tokens and counters ...
    assert any(v.counters for v in streamed[1:-1])
    # ... but draws its charts only when it ends: redrawn while streaming, they cost a third of its speed
    # with a browser on the same 2 cores (scripts/bench_overhead.py --chromium)
    assert isinstance(streamed[0].figures, markup.RunFigures) and streamed[-1].figures
    assert all(v.figures is None for v in streamed[1:-1])
    assert all("(charts when it ends)" in v.status for v in streamed[1:-1] if v.tokens)
    session = streamed[-1].session
    final = list(handlers.stream_compare(provider, session))[-1]
    assert "slows that side alone" in final.prediction


def test_calibrate_is_cached_per_session_and_feeds_the_prediction(provider):
    session = run_to_end(provider, k=3, max_new=16)[-1].session
    req = request(provider, k=3, max_new_tokens=16)
    views = list(measure.stream_calibrate(provider, session, req, repeats=2, warmup=1))
    assert views[-1].status.startswith("Calibrated") and len(session.timings) == 1
    timing = next(iter(session.timings.values()))
    assert sorted(timing.verify_s) == pass_lengths(K_MAX + 1)  # one calibration serves every k and adaptive k
    assert "predicted, iid \u03b1" in views[-1].prediction and "per-position" in views[-1].prediction
    s = session.run.summary
    assert f"**{timing.predict(s.alpha, 3):.2f}\u00d7**" in views[-1].prediction
    again = list(measure.stream_calibrate(provider, session, req, repeats=2, warmup=1))
    assert len(again) == 1 and "Already calibrated: reused this tab's calibration" in again[0].status


def test_sweep_calls_lab_sweep_with_the_settings_and_reports_progress(provider):
    seen = {}

    def fake_sweep(request, progress=None):
        (prompt_ids,) = request.prompts.values()
        seen.update(ks=list(request.ks), rounds=request.rounds, max_new=request.max_new_tokens, timing=request.timing,
                    n_prompt=len(prompt_ids), proposer=request.proposer_factory().describe())
        for i in range(4):
            progress((i + 1) / 4, f"step {i}")
            time.sleep(0.35)
        return sweep_result()

    session = Session()
    views = list(measure.stream_sweep(provider, session, sweep_request(provider, 4, 2, 24, drafter="lookup"),
                                      sweep_fn=fake_sweep))
    assert seen["ks"] == [1, 2, 3, 4] and seen["rounds"] == 2 and seen["max_new"] == 24
    # the sweep calibrates first, through the pair's store (so the next tab, the next sweep and Calibrate reuse it)
    assert seen["timing"] is provider.calibrations.get(seen["proposer"], seen["n_prompt"], K_MAX + 1) is not None
    assert seen["proposer"].startswith("prompt-lookup")
    progress = [v.status for v in views[:-1] if "measuring" in v.status]
    assert any("step" in line and "%" in line for line in progress)  # progress shown, with the elapsed time
    assert any("step 1 of 2, calibrating" in v.status for v in views[:-1])
    final = views[-1]
    assert "recommended k = 2" in final.status
    assert final.table[1][:2] == [2, 1.4] and len(final.table) == 4 and final.table[1][-1] == 0.4
    assert "**Recommended k = 2**" in final.summary and "predictions peak at k = 2, as measured" in final.summary
    assert "Slower than plain decoding" in final.summary and "k = 4" in final.summary
    assert session.sweep.best_k == 2 and len(session.timings) == 1  # the sweep's calibration is kept


def test_sweep_runs_the_lab_sweep_by_default(provider, monkeypatch):
    from playground.lab.speed import sweep as lab_sweep

    assert measure.sweep is lab_sweep
    called = []
    result = sweep_result()
    monkeypatch.setattr(measure, "sweep", lambda request, **k: called.append(request.ks) or result)
    final = list(measure.stream_sweep(provider, Session(), sweep_request(provider, 2, 1, 8)))[-1]
    assert called == [[1, 2]] and "recommended k = 2" in final.status


def test_stopping_a_sweep_stops_the_worker(provider):
    stopped = threading.Event()

    def endless_sweep(request, progress=None):
        try:
            while True:
                progress(0.5, "working")
                time.sleep(0.02)
        except serving.Stopped:
            stopped.set()
            raise

    gen = measure.stream_sweep(provider, Session(), sweep_request(provider, 8, 1, 16), sweep_fn=endless_sweep)
    for view in gen:
        if "measuring" in view.status and "%" in view.status:  # past the calibration, in the sweep itself
            break
    gen.close()
    assert worker_ends("playground-sweep") and stopped.is_set()


@pytest.fixture(scope="module")
def schema_provider():
    from tests.schema_models import embedded_tokenizer, tiny_schema_pair

    return serving.PairProvider(pair=tiny_schema_pair(embedded_tokenizer(), keep_tokenizer=True))


@pytest.mark.parametrize("ticked", [True, False])
def test_a_sweep_with_the_schema_box_ticked_runs_each_arm_again_constrained(schema_provider, ticked):
    """"Constrain to the schema" reaches the sweep as `sweep --schema` takes it: the preset's grammar and the
    drafter's schema+ variant for the constrained arms; the plan says so and counts those runs, and the summary
    shows each k's constrained figures. Unticked: none of it."""
    seen = {}

    def fake_sweep(request, progress=None):
        seen.update(constraint=request.constraint, proposer=request.constrained_proposer)
        table = [{**row, "schema": {"median_ratio": 1.7, "min_ratio": 1.6, "max_ratio": 1.8, "tokens_per_pass": 3.1,
                                    "free_tokens_per_pass": 2.2, "forced_share": 0.4, "n": 2} if ticked else None}
                 for row in SWEEP_RESULT["table"]]
        return sweep_result(table=table, schema="the tool_call preset's schema" if ticked else None)

    shown = handlers.load_preset_view(schema_provider, "tool_call")  # what picking the preset puts in the form
    controls = {**{name: CONTROLS[name] for name in ("decoding", "temperature", "top_k", "top_p", "seed")},
                "prompt": shown.prompt, "preset": "tool_call", "chat": shown.chat, "drafter": "lookup",
                "k_max": 2, "rounds": 1, "max_new_tokens": 8, "constrain": ticked}
    req = parse_sweep(controls, schema_provider.drafter_names())
    views = list(measure.stream_sweep(schema_provider, Session(), req, sweep_fn=fake_sweep))
    said = "each run again constrained to tool_call's schema right after it"
    plan = next(v.status for v in views if "runs" in v.status)
    assert (said in plan) == ticked and "recommended k = 2" in views[-1].status
    one_round = len(measure.bracketed(["1", "2", "adaptive"], measure.PLAIN_EVERY))  # with its plain runs
    assert re.search(r": (\d+) runs", plan)[1] == str((2 if ticked else 1) * one_round)
    if ticked:
        assert seen["constraint"].name == "the tool_call preset's schema"
        assert seen["proposer"]().describe().startswith("the schema's forced tokens, then prompt-lookup")
        assert "| 2 | 1.70\u00d7 | 1.60-1.80 | 2.20 \u2192 3.10 | 40% |" in views[-1].summary
    else:
        assert seen == {"constraint": None, "proposer": None} and "Constrained" not in views[-1].summary


def test_a_sweep_constrained_to_a_preset_without_a_schema_is_refused(provider):
    controls = {**{name: CONTROLS[name] for name in ("prompt", "preset", "chat", "decoding", "temperature", "top_k",
                                                     "top_p", "seed")},
                "drafter": "lookup", "k_max": 2, "rounds": 1, "max_new_tokens": 8, "constrain": True}
    with pytest.raises(PlaygroundError, match="'Constrain to the schema' uses a JSON preset's schema"):
        parse_sweep(controls, provider.drafter_names())


def test_sweep_rejects_bad_settings(provider):
    with pytest.raises(PlaygroundError, match="largest k"):
        sweep_request(provider, 0, 2, 16)
    with pytest.raises(PlaygroundError, match="rounds"):
        sweep_request(provider, 8, 0, 16)


def test_presets_fill_the_prompt_or_say_why_not(provider):
    own = handlers.load_preset_view(provider, "", "typed text")
    assert own.prompt == "typed text" and own.chat and own.max_new_tokens is None
    # the tiny tokenizer has no chat template: a chat preset cannot be shown, and says so
    with pytest.raises(PlaygroundError, match="no chat template"):
        handlers.load_preset_view(provider, "tool_call")
    raw = handlers.load_preset_view(provider, "story")
    story = get_preset("story")
    assert raw.prompt == story.prompt and raw.max_new_tokens == story.max_new_tokens and not raw.chat
    assert story.kind in raw.info
    with pytest.raises(PlaygroundError, match="unknown preset"):
        handlers.load_preset_view(provider, "nope")
    choices, errors = handlers.preset_choices()
    assert choices[0][1] == "" and ("tool_call" in {v for _, v in choices}) and errors == []


def test_output_check_and_counters_html():
    preset = get_preset("tool_call")
    assert "waiting" in markup.check_html(preset, None)
    ok = markup.check_html(preset, OutputCheck(True, True, None))
    assert "valid JSON" in ok and "valid against the schema" in ok and "badge bad" not in ok
    bad = markup.check_html(preset, OutputCheck(True, False, "at $.name: 'x' is not one of <a>"))
    assert "not valid against the schema" in bad and "&lt;a&gt;" in bad
    assert markup.check_html(get_preset("story"), None) == ""
    s = summarize(RECORDS)
    c = markup.counters_html(s, 10, running=False)
    for key, value in (("iterations", "3"), ("alpha", f"{s.alpha:.2f}"), ("tokens_per_pass", "2.00"),
                       ("new_tokens", "6 / 10")):
        assert f'data-counter="{key}"' in c and f'<div class="value">{value}</div>' in c


def test_build_ui_loads_no_model_and_names_every_event(word_pair):
    def refuse(*a, **k):
        raise AssertionError("build_ui must not load a model")

    provider = serving.PairProvider(choice=serving.choice_from_env({}), cache=serving.PairCache(load=refuse))
    from playground.ui import build_ui

    demo = build_ui(provider)
    by_name = {fn.api_name: fn for fn in demo.fns.values() if fn.api_visibility == "public"}
    assert {"run", "compare", "calibrate", "sweep", "load_preset", "time_batches", "whatif"} <= set(by_name)
    device_events = [by_name[n] for n in ("run", "compare", "calibrate", "sweep", "time_batches")]
    assert {fn.concurrency_id for fn in device_events} == {"device:auto"}
    assert all(fn.concurrency_limit == 1 for fn in device_events)
    assert demo._queue.max_size == 16
    assert not provider.loaded()
    # the API's parameters are the controls, by name, in this order (gradio_client calls them so)
    api = demo.get_api_info()["named_endpoints"]
    run_names = ["prompt", "preset", "chat", "drafter", "k", "decoding", "temperature", "top_k", "top_p",
                 "max_new_tokens", "seed"]
    assert [p["parameter_name"] for p in api["/run"]["parameters"]] == [*run_names, "k_mode", "min_confidence",
                                                                          "constrain"]
    assert [p["parameter_name"] for p in api["/calibrate"]["parameters"]] == [*run_names, "careful"]
    assert [p["parameter_name"] for p in api["/sweep"]["parameters"]] == [
        "prompt", "preset", "chat", "drafter", "decoding", "temperature", "top_k", "top_p", "seed", "k_max", "rounds",
        "max_new_tokens", "min_confidence", "constrain"]
    assert [p["parameter_name"] for p in api["/time_batches"]["parameters"]] == ["prompt", "preset", "chat"]
    assert [p["parameter_name"] for p in api["/whatif"]["parameters"]] == ["c", "alpha", "positions", "v", "overhead"]
    assert by_name["whatif"].concurrency_id != "device:auto"  # arithmetic: never waits behind a model event


def test_sweep_rows_say_when_a_k_never_pays():
    result = sweep_result(table=[{"k": 1, "median_ratio": 0.81234, "min_ratio": 0.8, "max_ratio": 0.9, "alpha": None,
                                  "break_even_alpha": None},
                                 {"k": 2, "median_ratio": 1.2, "min_ratio": 1.1, "max_ratio": 1.3, "alpha": 0.9,
                                  "predicted_iid": 1.25, "predicted_local": 1.1789, "break_even_alpha": 0.41234}])
    rows = sweep_words.sweep_rows(result)
    assert rows[0] == [1, 0.812, 0.8, 0.9, "\u2013", "\u2013", "\u2013", "\u2013", "never pays"]
    assert rows[1] == [2, 1.2, 1.1, 1.3, 0.9, 1.25, "\u2013", 1.179, 0.412]
    assert len(verdicts.SWEEP_COLUMNS) == len(rows[0])


def test_event_errors_become_a_status_line_and_a_message_and_the_app_keeps_serving():
    import gradio as gr

    from playground.ui.wiring import _guarded

    def bad_input():
        yield "first"
        raise PlaygroundError("k must be from 1 to 16, got <17>")

    def bug():
        raise KeyError("oops")
        yield

    got = []
    with pytest.raises(gr.Error) as e:
        for x in _guarded(bad_input(), lambda v: v.upper(), 3):
            got.append(x)  # noqa: PERF402 - one by one, so what came before the error is kept
    assert got[0] == "FIRST" and got[1][0] == "\u26a0 k must be from 1 to 16, got <17>" and len(got[1]) == 3
    assert e.value.message == "k must be from 1 to 16, got &lt;17&gt;"  # gr.Error renders HTML: escaped
    with pytest.raises(gr.Error, match="internal error: KeyError"):
        list(_guarded(bug(), str, 2))


def test_one_device_lock_serialises_workers_even_after_a_stop():
    lock = serving.device_lock("cpu")
    assert lock is serving.device_lock("cpu") and lock is not serving.device_lock("cuda:0")
    order = []

    def slow(emit, stopped):
        order.append("first starts")
        while not stopped():
            time.sleep(0.01)
        time.sleep(0.2)  # finishing its iteration after the stop
        order.append("first ends")

    def quick(emit, stopped):
        order.append("second runs")

    def consumer(work):
        with serving.Background(work, "lock-test", lock) as bg:
            while not bg.finished:
                bg.poll(0.05)
                yield

    first = consumer(slow)
    next(first)
    time.sleep(0.05)
    t0 = time.monotonic()
    first.close()  # GeneratorExit: returns without waiting for the worker
    assert time.monotonic() - t0 < 0.15
    list(consumer(quick))
    assert order == ["first starts", "first ends", "second runs"]


# --- trust verdicts, calibration reuse, honest progress, messages instead of clamping (issue 15) -------------


def _verdict(*findings):
    from playground.lab.trust import Verdict

    return Verdict(tuple(findings))


LOAD_FAIL = ("machine-load", "fail", "other processes kept 1.60 of the 2 cores busy while this was measured",
             "stop the other work, or measure on a quiet machine")


def untrusted_sweep_result() -> SweepResult:
    """What lab.speed.sweep returns when its verdict failed: no recommended k, the reason and the fix instead."""
    from playground.lab.trust import Finding, Verdict, recommend

    verdict = Verdict((Finding(*LOAD_FAIL), Finding("rounds", "fail", "1 round: a single run has no spread, so noise "
                                                    "cannot be told from an effect", "run at least 3 rounds")))
    result = sweep_result()
    advice = recommend(result.best_k, verdict)
    result.trust, result.recommended_k, result.withheld = verdict, advice.recommended_k, advice.withheld
    for row in result.table:
        row.trust = verdict
    return result


def test_a_failed_verdict_shows_its_reason_and_fix_and_never_a_recommended_k(provider):
    result = untrusted_sweep_result()
    assert result.recommended_k is None and result.withheld
    final = list(measure.stream_sweep(provider, Session(), sweep_request(provider, 4, 1, 8),
                                      sweep_fn=lambda *a, **k: copy.deepcopy(result)))[-1]
    assert "no recommended k" in final.status and "recommended k = " not in final.status
    assert "other processes kept 1.60 of the 2 cores" in final.status
    assert 'class="trust fail"' in final.summary and "fix: stop the other work" in final.summary
    assert "**No recommended k**" in final.summary and "Recommended k =" not in final.summary
    assert "not a recommendation while the verdict fails" in final.summary
    fig = valid(final.figure)
    assert not any("recommended k" in (a.text or "") for a in fig.layout.annotations)
    assert not any(s.x0 == 2 and s.x1 == 2 for s in fig.layout.shapes)  # no recommended-k line
    assert "no recommended k" in fig.layout.title.text
    assert final.session.sweep_status.startswith("Sweep done: no recommended k")


def test_no_k_is_recommended_when_every_k_is_slower_than_plain():
    result = sweep_result(trust=_verdict().to_dict(), recommended_k=2, withheld=None)
    for row in result.table:
        row.median_ratio -= 0.6  # best: k = 2 at 0.8x
    k, why = sweep_words.recommendation(result)
    assert k is None and "no k beat plain decoding" in why
    text = sweep_words.sweep_summary(result, "cpu", 3, 16)
    assert "**No recommended k**" in text and "Slower than plain decoding at k = 1, 2, 3, 4" in text
    assert not any("recommended k" in (a.text or "") for a in valid(charts.sweep_figure(result)).layout.annotations)


def test_a_trusted_sweep_summary_agrees_with_its_chart():
    result = sweep_result(trust=_verdict().to_dict(), recommended_k=2, withheld=None)
    text = sweep_words.sweep_summary(result, "cpu", 3, 16)
    assert 'class="trust ok"' in text and "**Recommended k = 2**" in text
    assert "Slower than plain decoding at k = 4." in text  # the recommended k is not among the losing ones
    # where the chart's predicted curves peak (k = 2), not the lab's deepest-k pick (predicted_best_k = 3)
    assert "The cost model's predictions peak at k = 2, as measured." in text and "k = 3" not in text.split("<details")[0]
    assert "What the terms mean" in text and "break-even" in text  # the glossary, a details element
    assert "Noise bound" not in text  # a result without its runs has no scatter to read
    # with its runs (10% apart around each cell), it says what any prediction could score on that scatter
    runs = [SpeedRun(prompt="prompt", k=r.k, round=0, ratio=r.median_ratio * f) for r in result.table
            for f in (0.9, 1.0, 1.1) if isinstance(r.k, int)]
    said = sweep_words.sweep_summary(dataclasses.replace(result, runs=runs), "cpu", 3, 16)
    assert "Noise bound: runs scatter by 10% around their cell" in said and "3 ran, or a quieter host)." in said
    assert "<dt>noise bound</dt>" in said  # with the term in the glossary


def test_sweep_chart_labels_every_line_and_keeps_its_labels_apart():
    result = sweep_result(table=[*SWEEP_RESULT["table"], {"k": "adaptive", "median_ratio": 1.02, "min_ratio": 0.9,
                                                          "max_ratio": 1.1, "alpha": 0.8, "k_values": {"2": 3}}])
    fig = valid(charts.sweep_figure(result))
    assert any(t.name.startswith("adaptive k, measured (1.02") for t in fig.data)  # in the legend, with its value
    margin = [a for a in fig.layout.annotations if a.xref == "paper" and a.x == 1.0]
    assert {a.text for a in margin} == {"break-even", "adaptive 1.02\u00d7"}
    # 1.02 and 1.0 are a few pixels apart on the axis: the second label is pushed off the first
    lo, hi = fig.layout.yaxis.range
    px = sorted((a.y - lo) / (hi - lo) * 210 + (a.yshift or 0) for a in margin)
    assert px[1] - px[0] >= charts.LABEL_PX
    iid, per_position = fig.data[1], fig.data[2]  # the two predictions, drawn apart so both stay visible
    assert list(iid.customdata) == list(per_position.customdata) == [1, 2, 3, 4]
    assert all(a < b for a, b in zip(iid.x, per_position.x, strict=True))
    assert iid.line.dash != per_position.line.dash and iid.marker.symbol != per_position.marker.symbol


def test_a_compare_is_one_pair_a_warning_and_untrustworthy_under_load(provider):
    from playground.lab.trust import MachineLoad

    session = run_to_end(provider, max_new=20)[-1].session
    final = list(handlers.stream_compare(provider, session))[-1]
    run = session.run
    assert run.machine is not None and run.plain_machine is not None  # watched during both runs
    assert "one speculative and one plain run, back to back" in final.prediction
    quiet = MachineLoad(wall_s=1.0, other_cores=0.0, steal=0.0, cores=2)
    run.machine = run.plain_machine = quiet
    verdict = verdicts.compare_verdict(run)
    assert verdict.trusted and [f.check for f in verdict.warnings] == ["single-pair"]
    run.plain_machine = MachineLoad(wall_s=1.0, other_cores=1.6, steal=0.0, cores=2)
    verdict = verdicts.compare_verdict(run)
    assert not verdict.trusted and "other processes kept 1.60 of the 2 cores" in verdict.failures[0].message
    box = verdicts.verdict_html(verdict, "This comparison")
    assert 'class="trust fail"' in box and "not to be trusted" in box and "fix: stop the other work" in box
    assert "This comparison: not to be trusted" in verdicts.prediction_markdown(session)
    assert "single-pair" in {f["check"] for f in final.doc["trust"]["findings"]}
    assert set(final.doc["machine"]) == {"speculative", "plain"}


def test_a_run_under_load_says_so_on_its_done_line(provider, monkeypatch):
    """The Run button's figures (tokens/s, time split) carry no verdict box: its status line names other
    processes on the cores, the page's own browser among them when it runs on this machine."""
    from playground.lab.trust import MachineLoad, MachineMonitor

    monkeypatch.setattr(MachineMonitor, "stop", lambda self: MachineLoad(1.0, 0.0, 0.0, 2))
    assert "other processes" not in run_to_end(provider, max_new=12)[-1].status
    monkeypatch.setattr(MachineMonitor, "stop", lambda self: MachineLoad(1.0, 0.52, 0.0, 2))
    done = run_to_end(provider, max_new=12)[-1].status
    assert done.startswith("Done") and "other processes used 0.52 of the 2 cores during this run" in done
    assert "a browser showing this page on this machine counts" in done
    quiet_run = list(run_panel.stream_run(provider, None, request(provider, k=3, max_new_tokens=12), stream_tokens=False))
    assert "other processes" not in quiet_run[-1].status  # Compare's run: the comparison's verdict says it


def test_prediction_and_measurement_far_apart_is_flagged():
    assert verdicts.miss_findings(1.5, 1.4) == []
    assert verdicts.miss_findings(1.5, 1.1)[0].severity == "warn"
    miss = verdicts.miss_findings(1.9, 0.7)[0]
    assert miss.severity == "fail" and "differ 2.7-fold" in miss.message


def _slow_drafter_timing():
    from playground.lab.calibration import Timing

    verify = {n: 0.01 * (1 + 0.1 * n) for n in range(1, 10)}
    return Timing(target_step_s=0.01, verify_s=verify, draft_step_s=0.0184, context_tokens=40)


def test_a_calibration_with_a_drafter_slower_than_the_target_is_flagged():
    session = Session(calibration=("int8-draft", _slow_drafter_timing()))
    text = verdicts.prediction_markdown(session)
    assert "The calibration: not to be trusted" in text and "c = 1.84 target steps per token" in text
    assert "fix: use a faster drafter" in text
    assert "the drafter costs **1.84** target steps per proposed token" in text  # in words, not just "c = 1.840"


def test_calibrate_alone_fills_the_prediction_panel(provider):
    session = Session()
    final = list(measure.stream_calibrate(provider, session, request(provider, k=3), repeats=2, warmup=1))[-1]
    assert session.run is None and session.calibration is not None
    panel = final.prediction
    assert f"at \u03b1 = {verdicts.PRIOR_ALPHA:.2f}, the prior" in panel
    assert "| k | predicted speed-up | break-even \u03b1 |" in panel and "\n| 8 | " in panel
    assert "What the terms mean" in panel


def test_the_calibration_store_is_reused_by_every_tab_calibrate_run_and_sweep(word_pair, monkeypatch):
    import playground.lab.calibration as lab_calibration

    provider = serving.PairProvider(pair=word_pair)  # a store of its own, empty
    calls = []
    real = lab_calibration.calibrate
    counted = lambda pair, ids, proposer, plan, *a, **k: calls.append(plan) or real(pair, ids, proposer, plan, *a, **k)
    monkeypatch.setattr(lab_calibration, "calibrate", counted)
    monkeypatch.setattr(measure, "calibrate", counted)
    req = request(provider, k=3, drafter="lookup")
    first = list(measure.stream_calibrate(provider, Session(), req))
    assert len(calls) == 1 and (calls[0].repeats, calls[0].warmup) == measure.SHORT  # the short settings
    assert any("timing the target's passes over 1-17 tokens" in v.status for v in first)
    other_tab = Session()
    again = list(measure.stream_calibrate(provider, other_tab, req))
    assert len(calls) == 1 and len(again) == 1
    assert "reused the calibration on " in again[0].status and "(the 64-token bucket)" in again[0].status
    seen = {}

    def fake_sweep(request, progress=None):
        seen["timing"] = request.timing
        return sweep_result()

    views = list(measure.stream_sweep(provider, Session(), sweep_request(provider, 2, 1, 8, drafter="lookup"),
                                      sweep_fn=fake_sweep))
    assert len(calls) == 1 and seen["timing"] is other_tab.calibration[1]
    assert "reused the calibration on " in views[0].status and "at plain decoding's speed" in views[0].status
    run_to_end(provider, Session(), drafter="lookup", k=3, max_new=8, k_mode="adaptive")
    assert len(calls) == 1  # adaptive k found it too
    list(measure.stream_calibrate(provider, Session(), req, careful=True, repeats=2, warmup=1))
    assert len(calls) == 2  # a careful calibration is asked for: it times again and replaces the stored one


def test_progress_lines_count_the_whole_event_and_estimate_the_time_left():
    from playground.ui import progress

    assert progress.clock_text(7.4) == "7 s" and progress.clock_text(125) == "2 min 05 s"
    assert progress.eta_text(1.0, 0.5) is None  # too early to say
    assert progress.eta_text(10.0, 0.02) is None
    assert progress.eta_text(10.0, 0.25) == "~30 s left"
    tracker = progress.Tracker("Sweeping", started=time.monotonic() - 65)
    tracker.take([("phase", "step 2 of 2, measuring", time.monotonic() - 10, None), ("progress", 0.5, "round 1/3")])
    line = tracker.line()
    # the numbers and the time since the event began (not since the phase did) first, where the fold keeps them
    assert line.startswith("Sweeping \u2014 step 2 of 2, measuring: round 1/3 (50%, ~10 s left, 1 min 05 s)")
    assert "<details" not in markup.fold(line).split("1 min 05 s")[0]


def test_a_sweeps_first_estimate_is_its_calibrations_not_its_slow_first_runs():
    """The user's 107 s sweep first said ~11 min: two warm-up-slowed runs of 39, extrapolated. Where the sweep's
    calibration says how long its runs take (measure.sweep_seconds), that stands until a quarter is done."""
    from playground.ui import progress
    from tests.test_replay import fake_timing

    assert progress.eta_text(35.0, 0.05) == "~11 min 05 s left"  # the runs so far alone
    assert progress.eta_text(35.0, 0.05, 100.0) == "~1 min 05 s left (from the calibration)"
    assert progress.eta_text(35.0, None, 100.0) == "~1 min 05 s left (from the calibration)"  # before a tick
    assert progress.eta_text(40.0, 0.4, 100.0) == "~1 min 00 s left"  # a quarter done: the runs' own pace
    assert progress.eta_text(120.0, 0.1, 100.0) == "~18 min 00 s left"  # past the expectation: the runs' pace
    tracker = progress.Tracker("Sweeping", started=time.monotonic() - 40)
    tracker.take([("phase", "measuring", time.monotonic() - 35, 100.0), ("progress", 0.05, "round 1/3, k=1")])
    assert re.search(r"\(5%, ~1 min 0\d s left \(from the calibration\), 40 s\)", tracker.line()), tracker.line()
    req = parse_request({**CONTROLS, "max_new_tokens": 31})
    assert measure.sweep_seconds(fake_timing(), 39, req) == 39 * 32 * 1.0  # each run: 31 tokens and a prompt pass


def test_the_loading_line_names_the_pair_being_loaded():
    from playground.ui import progress

    text = progress.loading_message(serving.choice_from_env({}, pair="smollm2-1.7b"))
    assert "smollm2-1.7b" in text and "HuggingFaceTB/SmolLM2-1.7B-Instruct" in text and "network" in text
    assert "dequantiz" not in text  # the embedded model's text belongs to the embedded pair only
    embedded = progress.loading_message(serving.choice_from_env({}))
    assert "embedded" in embedded and "dequantizes" in embedded


def test_a_slow_load_reports_what_it_loads_and_for_how_long():
    from playground.ui import progress

    def slow_load(target, draft, device, dtype, progress):
        progress("fetching config.json")
        time.sleep(1.2)
        return "the pair"

    provider = serving.PairProvider(choice=PairChoice("t", None, "cpu", "float32"),
                                    cache=serving.PairCache(load=slow_load))
    gen = progress.load_with_progress(provider, time.monotonic())
    lines = []
    try:
        while True:
            lines.append(next(gen))
    except StopIteration as e:
        assert e.value == "the pair"
    assert lines[0].startswith("Loading the model pair t + no draft model")
    assert all(line.startswith("Loading the model pair, ") and " t + no draft model: " in line for line in lines[1:])
    assert any(" s so far \u00b7 fetching config.json \u00b7 " in line for line in lines[1:])


def test_typed_values_out_of_range_get_a_message_not_a_silent_clamp():
    from playground.ui.ranges import range_check

    k = range_check("k", 1, 16, slider=True)
    assert k(100, "Ready") == "\u26a0 k must be from 1 to 16, got 100; the slider moved to 16"
    assert k(0, "Ready") == "\u26a0 k must be from 1 to 16, got 0; the slider moved to 1"
    stale = "\u26a0 k must be from 1 to 16, got 100; the slider moved to 16"
    assert isinstance(k(16, stale), type(k(5, "Ready")))  # the clamp's own change keeps the message (a skip)
    assert k(5, stale) == markup.READY  # fixed: the status line is current again
    assert k(1, stale) == markup.READY  # the other bound is a value like any other, not the clamp's
    stop = range_check("the draft confidence stop", 0.0, 1.0, whole=False, slider=True)
    moved = stop(1.5, "Ready")
    assert moved.endswith("the slider moved to 1") and isinstance(stop(1.0, moved), type(k(5, "Ready")))
    assert stop(0.0, moved) == markup.READY  # 0 (off) after an out-of-range value clears the message
    new = range_check("max new tokens", 1, 512)
    assert new(2.5, "Ready") == "\u26a0 max new tokens must be a whole number from 1 to 512, got 2.5"
    assert new(None, "Ready").startswith("\u26a0 max new tokens is empty")
    with pytest.raises(PlaygroundError, match="max new tokens must be a whole number, got 2.5"):
        parse(max_new_tokens=2.5)  # never rounded to 2 in silence


def test_the_page_opens_on_an_example_ready_to_run_and_the_k_slider_follows_the_mode(word_pair):
    from playground.ui import build_ui
    from playground.ui.session import SHOW_ME

    demo = build_ui(serving.PairProvider(pair=word_pair))
    by_id = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
    assert by_id["prompt"].value == SHOW_ME.prompt and by_id["drafter"].value == "hybrid"
    assert by_id["k"].value == SHOW_ME.k and by_id["decoding"].value == "greedy"
    assert by_id["max-new"].precision is None  # 2.5 reaches the check instead of being rounded
    fns = {fn.name: fn for fn in demo.fns.values()}
    k_control = fns["k_control"].fn
    assert k_control("adaptive")["interactive"] is False and k_control("fixed")["interactive"] is True
    nothing = fns["nothing_yet"].fn
    assert nothing(None).startswith("Nothing to download yet: press **Run** first")
    # the example runs on this pair as it is (hybrid: lookup, else the draft model)
    shown = {k: v for k, v in dataclasses.asdict(SHOW_ME).items() if v is not None and k != "prompt"}
    req = parse_request({**CONTROLS, **shown, "prompt": PROMPT}, serving.PairProvider(pair=word_pair).drafter_names())
    assert req.drafter == "hybrid" and req.k == 4 and req.sampling.greedy


def test_a_first_adaptive_runs_visible_line_says_it_calibrates_and_for_how_long(word_pair):
    """The 'more' fold holds the run's settings; what happens now (the calibration, its share done, the clock) stays
    in the visible part of the line."""
    provider = serving.PairProvider(pair=word_pair)  # no calibration stored by another test
    views = list(run_panel.stream_run(provider, Session(), request(provider, k_mode="adaptive", max_new_tokens=8)))
    visible = [markup.fold(v.status).split("<details")[0] for v in views]
    calibrating = [line for line in visible if "calibrating for adaptive k" in line]
    assert calibrating and all(line.startswith("Running: calibrating") for line in calibrating)
    assert all(re.search(r"\d+ s \u2026", line) for line in calibrating)
    assert "<details" in markup.fold(views[1].status)  # the settings went into the fold, not the news
    assert views[-1].status.startswith("Done:")
