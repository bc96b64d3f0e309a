"""The "vLLM server" tab: its pure parts without a server (the URL gating, steps -> HTML, the histogram, the
metrics, the counters), then its handlers and its API against the real vLLM servers tests/conftest.py starts
once per session (the same ones tests/test_vllm.py uses)."""

from __future__ import annotations

import html
import re
from dataclasses import replace

import gradio as gr
import pytest

from playground.backends import VllmClientError, VllmServerError
from playground.backends.vllm_server import free_port
from playground.backends.vllm_steps import Chunk, build_request, live_step
from playground.limits import Limits
from playground.ui import build_ui
from playground.ui.vllm_panel import VllmInputs, info_markdown, preset_fill, run_views, sweep_views
from playground.ui.vllm_view import (
    StepRenderer,
    VllmSettings,
    histogram_figure,
    live_alpha,
    metrics_markdown,
    request_html,
    vllm_counters_html,
)
from playground.ui.wiring import _guarded
from tests.vllm_servers import COPY, NGRAM, needs_vllm

LIMITS = Limits()
PIECES = {10: "The", 11: " quick", 12: " brown", 13: " fox", 14: " jumps", 2: "<|endoftext|>"}


def _detok(ids):
    return "".join(PIECES[t] for t in ids)


def _request(stop=True):
    """Prompt pass, a verify step keeping 2 of 2 (+ bonus), two keeping 0 of 3 (corrections), the last one EOS."""
    sizes, ids = [1, 3, 1, 1], [10, 11, 12, 13, 14, 2 if stop else 10]
    chunks, pos = [], 0
    for i, n in enumerate(sizes):
        part = ids[pos:pos + n]
        text = "".join(PIECES[t] for t in part if t != 2)
        chunks.append(Chunk(tuple(part), text, 0.1 * (i + 1), ("stop" if stop else "length") if i == 3 else None))
        pos += n
    spec = {"num_spec_steps": 3, "per_step_drafted": [2, 3, 3], "per_step_accepted": [2, 0, 0],
            "acceptance_histogram": [2, 0, 1], "num_accepted_draft_tokens": 2, "num_draft_tokens": 8,
            "mean_acceptance_length": 5 / 3}
    return build_request("m", 3, chunks, {"speculative_decoding": spec, "time_to_first_token_ms": 100.0}), chunks


def _span_text(doc: str) -> str:
    doc = doc.replace('<span class="nl">\u21b5</span>', "")
    return html.unescape("".join(re.findall(r'<span class="tok [^"]*"[^>]*>([^<]*)</span>', doc)))


# --- without a server ---------------------------------------------------------------------------------------


def test_the_tab_exists_only_where_the_operator_sets_the_url(monkeypatch):
    assert VllmSettings.from_env({}) is None and VllmSettings.from_env({"PLAYGROUND_VLLM_URL": "  "}) is None
    s = VllmSettings.from_env({"PLAYGROUND_VLLM_URL": "http://127.0.0.1:8000/v1/",
                               "PLAYGROUND_VLLM_SPEC": '{"method": "ngram", "num_speculative_tokens": 4}',
                               "PLAYGROUND_VLLM_MODEL": "m"})
    assert (s.url, s.spec.k, s.model) == ("http://127.0.0.1:8000", 4, "m")
    with pytest.raises(VllmClientError, match="looks like http"):
        VllmSettings.from_env({"PLAYGROUND_VLLM_URL": "gpu-host:8000"})
    with pytest.raises(VllmServerError, match="speculative config"):
        VllmSettings.from_env({"PLAYGROUND_VLLM_URL": "http://h:1", "PLAYGROUND_VLLM_SPEC": "{oops"})

    def api_names(demo):
        return {fn.api_name for fn in demo.fns.values()}

    monkeypatch.delenv("PLAYGROUND_VLLM_URL", raising=False)
    without = build_ui()
    assert not {"vllm_run", "vllm_concurrency", "vllm_info"} & api_names(without)
    assert "vLLM server" not in str(without.config)
    monkeypatch.setenv("PLAYGROUND_VLLM_URL", f"http://127.0.0.1:{free_port()}")
    with_tab = build_ui()
    assert {"vllm_run", "vllm_concurrency", "vllm_info", "run", "replay", "whatif"} <= api_names(with_tab)
    assert api_names(without) <= api_names(with_tab)  # the existing endpoints are unchanged


def test_steps_become_coloured_runs_with_the_streamed_text():
    req, chunks = _request()
    doc = request_html(req, _detok)
    assert doc.count('class="it ') == len(req.steps) == 4
    assert re.findall(r'class="tok (\w+)', doc) == ["pln", "acc", "bon", "cor", "cor"]
    assert _span_text(doc) == req.text == "The quick brown fox jumps"
    assert 'data-token="11 12"' in doc and "end of sequence" in doc
    # Live: the chunk's last token is the target's own (grey until the end), same text.
    live = StepRenderer(_detok)
    for i, c in enumerate(chunks):
        live.add(live_step(c, i, chunks[i - 1].arrived_s if i else 0.0))
    assert re.findall(r'class="tok (\w+)', live.html()) == ["pln", "acc", "pln", "pln", "pln"]
    assert _span_text(live.html()) == req.text
    # A step whose text does not split is one span, its roles in the hover text; no detokenizer: the same.
    odd = StepRenderer(lambda ids: "nothing like it").add(req.steps[1])
    assert odd.count('class="tok ') == 1 and "bonus token" in odd and " quick brown" in odd
    assert StepRenderer(None).add(req.steps[1]).count('class="tok ') == 1


def test_histogram_metrics_counters_and_live_alpha():
    req, _ = _request()
    fig = histogram_figure(req)
    assert list(fig.data[0].y) == [2, 0, 1] and "mean acceptance length 1.67" in fig.layout.title.text
    assert histogram_figure(None).data == () and "no request yet" in str(histogram_figure(None).layout.annotations)
    md = metrics_markdown(req)
    assert md.count("not available from vLLM") == 3 and "time_to_first_token_ms" in md and "per_step" not in md
    done = vllm_counters_html(req.steps, 64, 3, req)
    assert 'data-counter="alpha"' in done and ">0.50<" in done and "6 / 64" in done  # 2 / (2 + 2 rejections)
    steps = [live_step(Chunk((1,), "", 0.1), 0, 0), live_step(Chunk((2, 3, 4), "", 0.2), 1, 0.1),
             live_step(Chunk((5,), "", 0.3), 2, 0.2)]
    assert live_alpha(steps, 2) == pytest.approx(2 / 3) and live_alpha(steps, None) is None
    assert "(live)" in vllm_counters_html(steps, 8, 2)


def test_presets_fill_a_read_only_box_and_own_prompt_gives_it_back():
    box, max_new, note = preset_fill("tool_call")
    assert box["interactive"] is False and "[user]" in box["value"] and max_new > 0 and "chat template" in note
    box, _, note = preset_fill("")
    assert box["interactive"] is True and "Your own prompt" in note
    assert preset_fill("no_such_preset")[2].startswith("\u26a0")


def test_no_server_at_the_url_is_a_message_on_the_tab_not_a_traceback():
    settings = VllmSettings(f"http://127.0.0.1:{free_port()}", timeout=5)
    assert "no vLLM server answers" in info_markdown(settings)
    values = VllmInputs(prompt="hi", preset="", chat=True, max_new_tokens=8)
    views = _guarded(run_views(settings, values, LIMITS), lambda v: (v.status,), 1)
    assert next(views)[0].startswith("\u26a0 no vLLM server answers")
    with pytest.raises(gr.Error):
        next(views)
    with pytest.raises(VllmClientError, match="no vLLM server answers"):
        next(sweep_views(settings, values, LIMITS))
    # The error the API client gets marks the components Gradio's tracker draws on with a red badge: the hidden
    # #activity, as on the other tabs, never the status line that says what went wrong (nor the tab's outputs).
    demo = build_ui(vllm=settings)
    activity = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "activity")
    for name in ("vllm_run", "vllm_concurrency"):
        fn = next(f for f in demo.fns.values() if f.api_name == name)
        assert fn.show_progress_on == [activity], name


# --- against real servers -----------------------------------------------------------------------------------


def _final(settings, **values):
    values = replace(VllmInputs(prompt=COPY, chat=False, max_new_tokens=32), **values)
    views = list(run_views(settings, values, LIMITS))
    assert len(views) >= 2 and views[-1].doc is not None
    return views


@needs_vllm
@pytest.mark.slow
def test_a_run_on_the_ngram_server_streams_coloured_steps_and_ends_with_vllms_figures(vllm_servers):
    settings = VllmSettings(vllm_servers["ngram"].url, spec=NGRAM)
    unnamed = VllmSettings(vllm_servers["ngram"].url)
    assert "speculative, k = 4 (from its /metrics" in info_markdown(unnamed)  # k from the server's counters
    assert '"num_speculative_tokens":4' in info_markdown(settings)
    views = _final(settings)
    final, doc = views[-1], views[-1].doc
    assert final.status.startswith("Done:") and "exact" in final.status
    assert final.tokens.count('class="it ') == len(doc["step_records"])
    assert 'class="tok acc' in final.tokens and _span_text(final.tokens) == doc["text"]
    assert list(final.figure.data[0].y) == doc["vllm_spec"]["acceptance_histogram"]
    assert doc["accepted"] == doc["vllm_spec"]["num_accepted_draft_tokens"] > 0
    assert final.metrics.count("not available from vLLM") == 3 and doc["draft_s"] == "not available from vLLM"
    assert 'data-counter="mean_acceptance_length"' in final.counters
    assert any("(live)" in v.counters for v in views[:-1])


@needs_vllm
@pytest.mark.slow
def test_a_preset_on_the_plain_server_and_the_bad_servers(vllm_servers, vllm_model_dir):
    plain = VllmSettings(vllm_servers["plain"].url)
    assert "no speculative config" in info_markdown(plain)
    final = _final(plain, preset="json_extract", max_new_tokens=12)[-1]
    assert "no verify steps" in final.status and final.figure.data == ()
    assert 'class="tok acc' not in final.tokens and 'class="tok pln' in final.tokens
    bare = VllmSettings(vllm_servers["bare"].url)
    with pytest.raises(VllmClientError, match="--enable-per-request-metrics"):
        _final(bare)
    other = VllmSettings(vllm_servers["ngram"].url, model="some-other-model")
    assert "not 'some-other-model'" in info_markdown(other)
    with pytest.raises(VllmClientError, match="not 'some-other-model'"):
        _final(other)
    with pytest.raises(VllmClientError, match="refused"):  # vLLM's own check, passed on
        _final(plain, max_new_tokens=4, prompt=COPY * 100)  # over the server's 2048-token context
    assert _final(VllmSettings(vllm_servers["plain"].url, model=str(vllm_model_dir)), max_new_tokens=4)[-1].doc


@needs_vllm
@pytest.mark.slow
def test_the_concurrency_panel_on_one_server(vllm_servers):
    settings = VllmSettings(vllm_servers["ngram"].url, spec=NGRAM)
    values = VllmInputs(prompt=COPY, preset="", chat=False, max_new_tokens=16)
    views = list(sweep_views(settings, values, LIMITS))
    status, rows = views[-1]
    assert status.startswith("Done:") and [r[:2] for r in rows] == [[1, 1], [2, 2], [4, 4]]
    assert all(r[2] > 0 and r[4] is not None and r[4] >= 1 for r in rows)


@needs_vllm
@pytest.mark.slow
def test_the_api_streams_a_run(vllm_servers, launch_app):
    from gradio_client import Client  # the API test only: the others need no client

    demo = build_ui(vllm=VllmSettings(vllm_servers["ngram"].url, spec=NGRAM))
    client = Client(launch_app(demo), verbose=False)
    assert '"num_speculative_tokens":4' in client.predict(api_name="/vllm_info")
    status, tokens, counters, _, metrics, doc = client.predict(prompt=COPY, preset="", chat=False, max_new_tokens=16,
                                                               api_name="/vllm_run")
    assert status.startswith("Done:") and doc["completion_tokens"] <= 16 and "not available from vLLM" in metrics
    assert tokens.count('class="it ') == len(doc["step_records"]) and 'data-counter="alpha"' in counters
