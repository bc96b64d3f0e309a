"""The "vLLM server" tab: one streamed request against the operator's vLLM server (PLAYGROUND_VLLM_URL, read
once when the app is built; see vllm_view.py), coloured per engine step, and a small concurrency panel.

The handlers (`run_views`, `sweep_views`) are generators of views and know nothing of gradio; `vllm_tab` lays
the components out and `wire_vllm` connects them. A PlaygroundError (no server at the URL, a server without the
metrics flags, another model, a refused request) shows the library's message on the tab's status line; the app
keeps serving. API: /vllm_run and /vllm_concurrency (only where the tab exists), /vllm_info.

The events do not touch this app's device, so they have concurrency groups of their own.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import gradio as gr

from ..backends import ServedRequest, ServedStep
from ..backends.vllm_sweep import arm_figures, prompt_ids, run_batch
from ..errors import PlaygroundError
from ..inputs.presets import get_preset
from ..limits import Limits
from .downloads import jsonable
from .javascript import TOKEN_DETAILS
from .vllm_view import (
    CONCURRENCIES,
    EMPTY_TOKENS,
    HIST_TITLE,
    SWEEP_COLUMNS,
    StepRenderer,
    VllmSettings,
    header_markdown,
    histogram_figure,
    metrics_markdown,
    request_html,
    server_info,
    sweep_row,
    vllm_counters_html,
    vllm_legend_html,
)
from .wiring import _guarded, _skip

INTRO = ("One request to the operator's **vLLM server**, streamed: each engine step's tokens, coloured as on the "
         "Run tab (a step is one streamed chunk; vLLM's per-step metrics settle the roles when the request ends). "
         "The server's own drafter and batching, not this app's loop.")
SWEEP_NOTE = ("The same prompt sent 1, 2 and 4 times at once to **this server only**: vLLM batches them. Comparing "
              "with a plain server at the same concurrency is the CLI's `python -m playground vllm-sweep` "
              "(docs/vllm.md).")
THROTTLE_S = 0.1  # at most ten token-view updates a second while streaming
QUIET = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}


@dataclass(frozen=True)
class VllmInputs:
    """What the tab's inputs ask for: a preset, or a typed prompt (as one user turn when `chat`), and the max new
    tokens (as the number box gives it: checked by `request_ids`)."""

    prompt: str = ""
    preset: str = ""
    chat: bool = True
    max_new_tokens: int | float | None = None


@dataclass
class VllmRunView:
    status: str
    tokens: str
    counters: str
    figure: object = None  # the histogram, at the end
    metrics: str | None = None
    doc: dict | None = None


def _whole(value, label: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlaygroundError(f"{label} must be a whole number, got {value!r}")
    return value


def request_ids(client, values: VllmInputs, limits: Limits) -> tuple[list[int], int, str]:
    """The prompt as the server's tokenizer makes it (a preset's chat through the server's template), the max
    new tokens, and what was sent, in words."""
    max_new = limits.check_max_new_tokens(_whole(values.max_new_tokens, "max new tokens"))
    name = values.preset or ""
    if name:
        preset = get_preset(name)
        ids, what = prompt_ids(client, preset), f"preset {preset.name}"
    else:
        text = values.prompt or ""
        if not text.strip():
            raise PlaygroundError("type a prompt, or pick a preset")
        limits.check_prompt_chars(len(text))
        chat = bool(values.chat)
        ids = client.tokenize(messages=[{"role": "user", "content": text}]) if chat else client.tokenize(text)
        what = "your prompt" + (" as one user turn" if chat else "")
    limits.check_prompt_tokens(len(ids))
    return ids, max_new, what


def run_views(settings: VllmSettings, values: VllmInputs, limits: Limits) -> Iterator[VllmRunView]:
    """Stream one greedy request: live views (provisional roles), then the final view with the histogram."""
    client = settings.client()
    model = client.check(settings.model)
    ids, max_new, what = request_ids(client, values, limits)
    k = settings.spec.k if settings.spec else server_info(settings).k
    yield VllmRunView(f"Running: {what} ({len(ids)} prompt tokens) on `{model}` \u2026", EMPTY_TOKENS,
                  vllm_counters_html([], max_new, k))
    live = StepRenderer(lambda t: client.detokenize(t, model=model))
    steps: list[ServedStep] = []
    shown = 0.0
    records: queue.Queue = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=_pump, args=(client.stream(ids, max_tokens=max_new, model=model), records, stop),
                     daemon=True, name="vllm-stream").start()
    try:
        while not isinstance(record := records.get(), ServedRequest):
            if isinstance(record, BaseException):
                raise record
            steps.append(record)
            live.add(record)
            if records.empty() and time.perf_counter() - shown >= THROTTLE_S:
                shown = time.perf_counter()
                yield VllmRunView(f"Running: {len(steps)} steps \u2026", live.html(),
                                  vllm_counters_html(steps, max_new, k))
    finally:
        stop.set()  # Stop (the generator closed): the reader closes the stream at its next chunk
    req = record
    mal = req.mean_acceptance_length
    status = (f"Done: {req.completion_tokens} tokens in {len(req.steps)} engine steps"
              + (f", \u03b1 {req.alpha:.2f}, mean acceptance length {mal:.2f}" if mal else ", no verify steps")
              + (f", {req.tokens_per_s:.1f} tokens/s" if req.tokens_per_s else "") + f" \u00b7 {req.schedule}")
    yield VllmRunView(status, request_html(req, live.detok), vllm_counters_html(req.steps, max_new, k, req),
                  histogram_figure(req), metrics_markdown(req), jsonable(req.to_dict()))


def _pump(stream, records: queue.Queue, stop: threading.Event) -> None:
    """Read the stream in a thread of its own, so that the client's arrival times (the steps' seconds, tokens/s)
    are not delayed by drawing or by Gradio sending the views; an error is handed over as the last record."""
    last = None
    try:
        for last in stream:
            records.put(last)
            if stop.is_set():
                return
    except Exception as e:  # noqa: BLE001 - re-raised by the reader of the queue (run_views)
        records.put(e)
        return
    finally:
        stream.close()
    if not isinstance(last, ServedRequest):
        records.put(PlaygroundError("the vLLM stream ended without its final record"))


def sweep_views(settings: VllmSettings, values: VllmInputs, limits: Limits) -> Iterator[tuple[str, list]]:
    """(status, table rows) after each concurrency of 1, 2, 4 identical greedy requests at once."""
    client = settings.client()
    client.check(settings.model)
    ids, max_new, what = request_ids(client, values, limits)
    client.run(ids, max_tokens=4)  # warm-up: the prompt in the prefix cache, as the CLI's sweep does
    rows: list[list] = []
    for c in CONCURRENCIES:
        yield f"Concurrency {c}: {c} request(s) of {what} at once \u2026", rows
        rows = [*rows, sweep_row(c, arm_figures(run_batch(client, ids, c, max_new)))]
    yield f"Done: {what}, {max_new} max new tokens, concurrency {', '.join(map(str, CONCURRENCIES))}.", rows


def info_markdown(settings: VllmSettings) -> str:
    try:
        return header_markdown(settings, server_info(settings))
    except PlaygroundError as e:
        return header_markdown(settings, error=str(e))


def preset_fill(name: str) -> tuple:
    """Picking a preset shows its messages (read-only: the server's chat template renders them) and sets its max
    new tokens; 'your own prompt' gives the box back."""
    if not name:
        return (gr.update(value="", interactive=True), gr.skip(),
                "Your own prompt (ticked: sent as one user turn of the server's chat template).")
    try:
        preset = get_preset(name)
    except PlaygroundError as e:
        return gr.skip(), gr.skip(), f"\u26a0 {e}"
    text = (preset.prompt if not preset.is_chat else
            "\n\n".join(f"[{m['role']}]\n{m.get('content') or ''}" for m in preset.messages))
    note = (f"**{preset.title}** \u00b7 kind `{preset.kind}` \u00b7 "
            + ("its chat messages go through the server's own chat template" if preset.is_chat else "raw text"))
    return gr.update(value=text, interactive=False), preset.max_new_tokens, note


# --- components and events -----------------------------------------------------------------------------------


def vllm_tab(ui, settings: VllmSettings, preset_list, limits: Limits) -> None:
    """The tab's components (blocks.py calls it inside the tab)."""
    ui.vllm_header = gr.Markdown(header_markdown(settings), elem_id="vllm-header")
    gr.Markdown(INTRO, elem_id="vllm-intro")
    with gr.Row(equal_height=False, elem_id="vllm-inputs"):
        with gr.Column(scale=3, min_width=280):
            ui.vllm_preset = gr.Dropdown(preset_list, value="", label="Preset", elem_id="vllm-preset")
            ui.vllm_prompt = gr.Textbox("", label="Prompt", lines=3, max_lines=10, elem_id="vllm-prompt",
                                        placeholder="Type a prompt, or pick a preset")
        with gr.Column(scale=1, min_width=200):
            ui.vllm_chat = gr.Checkbox(value=True, label="As one user turn (chat template)", elem_id="vllm-chat")
            ui.vllm_max_new = gr.Number(value=min(64, limits.max_new_tokens), precision=0, label="Max new tokens",
                                        info=f"1 to {limits.max_new_tokens}", elem_id="vllm-max-new")
            with gr.Row():
                ui.vllm_run_btn = gr.Button("Run on vLLM", variant="primary", elem_id="vllm-run-btn", min_width=100)
                ui.vllm_stop_btn = gr.Button("Stop", variant="stop", elem_id="vllm-stop-btn", min_width=70)
    ui.vllm_preset_note = gr.Markdown("", elem_id="vllm-preset-note")
    ui.vllm_status = gr.Markdown("Ready: press **Run on vLLM**.", elem_id="vllm-status")
    gr.HTML(vllm_legend_html(), elem_id="vllm-legend")
    ui.vllm_tokens = gr.HTML(EMPTY_TOKENS, elem_id="vllm-tokens", padding=False, js_on_load=TOKEN_DETAILS,
                             html_template='<div class="token-box">${value}</div>'
                                           '<div class="tok-detail" aria-live="polite"></div>')
    ui.vllm_counters = gr.HTML(vllm_counters_html([], 0, None), elem_id="vllm-counters")
    ui.vllm_hist = gr.Plot(histogram_figure(None), show_label=False, elem_id="vllm-hist")
    with gr.Accordion("vLLM's metrics for this request", open=False):
        ui.vllm_metrics = gr.Markdown("", elem_id="vllm-metrics")
    with gr.Accordion("Request record (JSON)", open=False):
        ui.vllm_json = gr.JSON(elem_id="vllm-json")
    gr.Markdown("#### Concurrency 1, 2, 4", elem_id="vllm-sweep-title")
    gr.Markdown(SWEEP_NOTE, elem_id="vllm-sweep-note")
    with gr.Row(equal_height=True):
        ui.vllm_sweep_btn = gr.Button("Run at concurrency 1, 2, 4", elem_id="vllm-sweep-btn", scale=0, min_width=220)
        ui.vllm_sweep_status = gr.Markdown("", elem_id="vllm-sweep-status")
    ui.vllm_sweep_table = gr.Dataframe(headers=SWEEP_COLUMNS, interactive=False, elem_id="vllm-sweep-table")


def wire_vllm(ui, settings: VllmSettings, limits: Limits) -> None:
    """The tab's events: preset, header, run (/vllm_run), concurrency (/vllm_concurrency), Stop."""
    ui.vllm_preset.change(preset_fill, [ui.vllm_preset],
                          [ui.vllm_prompt, ui.vllm_max_new, ui.vllm_preset_note], **QUIET)

    def vllm_info() -> str:
        """The vLLM server's model and speculative config, or why it cannot say."""
        return info_markdown(settings)

    ui.vllm_tab.select(vllm_info, None, [ui.vllm_header], api_name="vllm_info", show_progress="hidden",
                       concurrency_limit=4, concurrency_id="vllm-info")

    def vllm_run(prompt: str, preset: str, chat: bool, max_new_tokens: int):
        """Stream one greedy request from the operator's vLLM server: the coloured steps, counters, and at the end
        the acceptance histogram, vLLM's metrics and the request record."""
        values = VllmInputs(prompt, preset, chat, max_new_tokens)
        yield from _guarded(run_views(settings, values, limits),
                            lambda v: (v.status, v.tokens, v.counters, _skip(v.figure), _skip(v.metrics),
                                       _skip(v.doc)), 6)

    def vllm_concurrency(prompt: str, preset: str, chat: bool, max_new_tokens: int):
        """The same prompt at concurrency 1, 2, 4 on the server: aggregate tokens/s and mean acceptance length."""
        values = VllmInputs(prompt, preset, chat, max_new_tokens)
        yield from _guarded(sweep_views(settings, values, limits), lambda v: (v[0], v[1] or gr.skip()), 2)

    inputs = [ui.vllm_prompt, ui.vllm_preset, ui.vllm_chat, ui.vllm_max_new]
    # Gradio's tracker (and its red 'Error' badge when an event raises for the API client) draws in the hidden
    # #activity, as the other tabs' events do: a refusal is read on the tab's status line, uncovered.
    on_status = {"show_progress": "minimal", "show_progress_on": [ui.activity]}
    run_ev = ui.vllm_run_btn.click(
        vllm_run, inputs, [ui.vllm_status, ui.vllm_tokens, ui.vllm_counters, ui.vllm_hist, ui.vllm_metrics,
                           ui.vllm_json], api_name="vllm_run", concurrency_limit=4, **on_status,
        concurrency_id="vllm-run")
    sweep_ev = ui.vllm_sweep_btn.click(vllm_concurrency, inputs, [ui.vllm_sweep_status, ui.vllm_sweep_table],
                                       api_name="vllm_concurrency", concurrency_limit=1, **on_status,
                                       concurrency_id="vllm-sweep")
    ui.vllm_stop_btn.click(None, None, None, cancels=[run_ev, sweep_ev], queue=False)


__all__ = ["HIST_TITLE", "VllmInputs", "VllmSettings", "info_markdown", "preset_fill", "run_views", "sweep_views",
           "vllm_tab", "wire_vllm"]
