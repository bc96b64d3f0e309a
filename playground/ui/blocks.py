"""build_ui(): the components and their wiring. The work is in handlers.py; this file builds each event's
request from its controls (session.parse_request / parse_sweep, the one place raw control values are read),
maps handler views to component updates and PlaygroundError to a message the user sees. The look is in
theme.py.

Serving: one queue; every event that touches the model runs under one concurrency group per device
(`concurrency_limit=1`, shared `concurrency_id`), the queue is bounded (PLAYGROUND_QUEUE_SIZE waiting events;
one more gets Gradio's "queue full"), Stop cancels the running
event (`cancels=`: Gradio closes its generator, whose engine thread stops at its next record), and
every event has a stable `api_name` for gradio_client: /run, /compare, /calibrate, /sweep,
/load_preset, /select_pair (an API client stops a job with `job.cancel()`). The pair menu holds the named
pairs (playground.pairs); it takes typed model ids only under PLAYGROUND_ALLOW_ANY_MODEL=1.
"""

from __future__ import annotations

import html
import inspect
import logging
import traceback

import gradio as gr

from ..envinfo import redact
from ..errors import PlaygroundError
from ..limits import Limits
from . import charts, handlers
from .panels import LOADING_MESSAGE, SWEEP_COLUMNS, counters_html, pair_info, prediction_markdown
from .render import EMPTY_TOKENS, legend_html
from .serving import AUTO_HELP, PairProvider
from .session import Session, parse_request, parse_sweep

log = logging.getLogger(__name__)
TITLE = "Speculative decoding playground"
TRACK_PROGRESS = gr.Progress(track_tqdm=True)  # a marker: Gradio hands each call a tracker of its own
DEFAULT_MAX_NEW = 64


def _error(e: Exception) -> gr.Error:
    return gr.Error(html.escape(redact(str(e))), title="Cannot do that", print_exception=False)


def _skip(x):
    return gr.skip() if x is None else x


def _guarded(views, to_outputs, n_outputs: int, status_first: bool = True):
    """Map each view to output values; turn a PlaygroundError into a status line (the first output) and an
    error the user or API client sees, and any other exception into an 'internal error' message. The app
    keeps serving either way. No secret (HF_TOKEN, ...) is shown or logged: messages go through `redact`."""
    try:
        for v in views:
            yield to_outputs(v)
    except PlaygroundError as e:
        if status_first:
            yield (f"\u26a0 {redact(str(e))}", *([gr.skip()] * (n_outputs - 1)))
        raise _error(e) from None
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: say what happened, log the traceback
        log.error("playground event failed\n%s", redact(traceback.format_exc()))
        message = redact(f"internal error: {type(e).__name__}: {e}")
        if status_first:
            yield (f"\u26a0 {message}", *([gr.skip()] * (n_outputs - 1)))
        raise gr.Error(html.escape(message), title="Something broke", print_exception=False) from None


def _event(body, session: gr.State, controls: dict):
    """An event function for `body(session, values, progress)`, where `values` is {name: value} for `controls`
    ({API parameter name: component}), and the event's inputs ([session, *components]).

    Gradio passes an event's inputs by position and names its API parameters after the function's, so the
    function gets the signature (session, *names, progress): the names are written once, beside the components,
    and the values reach the body as one mapping, never by position."""
    names = list(controls)

    def event(session, *values):
        *values, progress = values  # Gradio passes its progress tracker where the signature puts it: last
        yield from body(session, dict(zip(names, values, strict=True)), progress)

    param = inspect.Parameter
    event.__signature__ = inspect.Signature(
        [param(name, param.POSITIONAL_OR_KEYWORD) for name in ("session", *names)]
        + [param("progress", param.POSITIONAL_OR_KEYWORD, default=TRACK_PROGRESS)])
    event.__name__, event.__qualname__, event.__doc__ = body.__name__, body.__qualname__, body.__doc__
    return event, [session, *controls.values()]


def build_ui(provider: PairProvider | None = None, presets_dir=None, sweep_fn=None,
             calibrate_repeats: int = 12, limits: Limits | None = None) -> gr.Blocks:
    """The playground's Blocks. Loads no model: the pair loads on first use (see serving.PairCache).
    `limits` default to the environment's (playground.limits), read here, once per app."""
    provider = provider or PairProvider()
    limits = limits or Limits.from_env()
    group = f"device:{provider.device}"  # one run at a time per device, whatever the event
    device_events = {"concurrency_limit": 1, "concurrency_id": group}
    preset_list, preset_errors = handlers.preset_choices(presets_dir)
    drafter_choices = provider.drafter_choices()
    pair_list, pair_value, pair_typed = handlers.pair_choices(provider)
    choice = provider.choice

    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        session = gr.State(None)  # a session.Session, created by the first event of each tab

        with gr.Column(elem_id="header"):
            gr.Markdown(
                f"# {TITLE}\n"
                "A small drafter proposes *k* tokens, the target checks them in one pass, the acceptance rule "
                "keeps a prefix. See which tokens were accepted, the acceptance rate \u03b1, where the time went, "
                "and the cost model's predicted speed-up beside the measured one.  \n"
                f"<span class='small-note'>Pair: target `{redact(choice.target)}`, "
                f"draft `{redact(choice.draft or 'none')}`, "
                f"device `{choice.device}`, dtype `{choice.dtype}` \u00b7 loaded once per process on first use.</span>"
            )
            if preset_errors:
                gr.Markdown("\n".join(f"- preset error: {html.escape(e)}" for e in preset_errors))

        with gr.Row(equal_height=False):
            # ---------------- controls ----------------
            with gr.Column(scale=4, min_width=340, elem_id="controls"):
                pair_menu = gr.Dropdown(pair_list, value=pair_value, label="Model pair", elem_id="pair",
                                        allow_custom_value=pair_typed, filterable=True,
                                        info="Loads on the next run (hub pairs download once)"
                                        + ("; or type TARGET, DRAFT" if pair_typed else ""))
                pair_note = gr.Markdown(pair_info(provider), elem_id="pair-info")
                preset = gr.Dropdown(preset_list, value="", label="Preset", elem_id="preset",
                                     info="Fills the prompt with the exact text the model sees")
                preset_info = gr.Markdown("Your own prompt: sent as one user turn of the chat template.",
                                          elem_id="preset-info")
                prompt = gr.Textbox(label="Prompt", lines=6, max_lines=12, elem_id="prompt",
                                    placeholder="Paste anything, or pick a preset above")
                chat = gr.Checkbox(value=True, label="Wrap in the chat template (as one user turn)", elem_id="chat")
                drafter = gr.Radio(drafter_choices, value=drafter_choices[0][1] if drafter_choices else None,
                                   label="Drafter", info=AUTO_HELP, elem_id="drafter")
                with gr.Row():
                    k = gr.Slider(1, 16, value=4, step=1, label="k (proposals per iteration)", elem_id="k")
                    max_new = gr.Number(value=min(DEFAULT_MAX_NEW, limits.max_new_tokens), precision=0,
                                        minimum=1, maximum=limits.max_new_tokens, label="Max new tokens",
                                        elem_id="max-new")
                k_mode = gr.Radio([("fixed k", "fixed"), ("adaptive", "adaptive"),
                                   ("transformers' heuristic", "heuristic")], value="fixed", label="k per iteration",
                                  elem_id="k-mode",
                                  info="adaptive: the cost model picks k (0-16) each iteration from the acceptance "
                                       "so far (first use calibrates, a few seconds); heuristic: +2 after a fully "
                                       "accepted iteration, -1 otherwise")
                with gr.Accordion("Decoding", open=False, elem_id="decoding-box"):
                    decoding = gr.Radio([("greedy", "greedy"), ("sampling", "sample")], value="greedy",
                                        label="Decoding", elem_id="decoding")
                    with gr.Row():
                        temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature",
                                                interactive=False)
                        top_k = gr.Number(value=0, precision=0, minimum=0, label="Top-k (0 = off)", interactive=False)
                    with gr.Row():
                        top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.01, label="Top-p (1 = off)", interactive=False)
                        seed = gr.Number(value=0, precision=0, minimum=0, label="Seed")
                with gr.Row():
                    run_btn = gr.Button("Run", variant="primary", elem_id="run-btn", scale=2, size="md")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", scale=1, size="md")
                with gr.Row():
                    compare_btn = gr.Button("Compare with plain", elem_id="compare-btn", size="md", scale=3)
                    calibrate_btn = gr.Button("Calibrate", elem_id="calibrate-btn", size="md", scale=2)
                gr.Markdown("<span class='small-note'>**Compare with plain** runs speculative decoding, then plain "
                            "decoding of the same prompt and length right after. **Calibrate** times the target "
                            "and the drafter on this prompt (kept for this session) for the cost model.</span>")

            # ---------------- results ----------------
            with gr.Column(scale=9, min_width=520):
                with gr.Row(equal_height=True, elem_id="status-row"):
                    status = gr.Markdown("Ready. Pick a preset or type a prompt, then press Run.", elem_id="status",
                                         scale=12)
                    # Where Gradio's own progress timer and error badge go, beside the status line, not over it.
                    activity = gr.HTML("", elem_id="activity", min_width=110, scale=1, min_height=30)
                with gr.Tabs():
                    with gr.Tab("Run", id="run-tab"):
                        gr.HTML(legend_html(), elem_id="legend")
                        tokens = gr.HTML(EMPTY_TOKENS, html_template='<div class="token-box">${value}</div>',
                                         elem_id="tokens", padding=False)
                        counters = gr.HTML(counters_html(None, None, False), elem_id="counters")
                        check = gr.HTML("", elem_id="check")
                        time_plot = gr.Plot(charts.empty_figure("Time per iteration (ms)"), show_label=False,
                                            elem_id="time-plot")
                        with gr.Row(equal_height=True):
                            pos_plot = gr.Plot(charts.empty_figure("Acceptance by draft position"),
                                               show_label=False, elem_id="pos-plot")
                            alpha_plot = gr.Plot(charts.empty_figure("\u03b1 over iterations"), show_label=False,
                                                 elem_id="alpha-plot")
                        prediction = gr.Markdown(prediction_markdown(Session()),
                                                 elem_id="prediction")
                        with gr.Row(equal_height=True):
                            with gr.Accordion("Run record (JSON)", open=False):
                                run_json = gr.JSON(label="records, summary, environment, config",
                                                   elem_id="run-json")
                            download = gr.DownloadButton("Download run (JSON)", value=None, elem_id="download",
                                                         size="md", scale=0, min_width=200)
                    with gr.Tab("k per output shape", id="sweep-tab"):
                        gr.Markdown(
                            "Sweeps k over the current prompt (pick a preset for an output shape): in each round "
                            "plain decoding and every k run back to back in a rotating order; the chart shows the "
                            "median measured speed-up (bars: min\u2013max over rounds) beside the cost model's "
                            "prediction, the break-even line and the recommended k. Uses the drafter and decoding "
                            "settings on the left.")
                        with gr.Row():
                            k_max = gr.Slider(1, 16, value=8, step=1, label="Largest k", elem_id="k-max")
                            rounds = gr.Slider(1, 5, value=2, step=1, label="Rounds", elem_id="rounds")
                            sweep_new = gr.Number(value=min(32, limits.max_new_tokens), precision=0, minimum=1,
                                                  maximum=limits.max_new_tokens,
                                                  label="Max new tokens per run", elem_id="sweep-new")
                            sweep_btn = gr.Button("Sweep k", variant="primary", elem_id="sweep-btn")
                        sweep_status = gr.Markdown("", elem_id="sweep-status")
                        sweep_plot = gr.Plot(charts.sweep_figure(None), show_label=False, elem_id="sweep-plot")
                        sweep_text = gr.Markdown("", elem_id="sweep-summary")
                        sweep_table = gr.Dataframe(headers=SWEEP_COLUMNS, interactive=False,
                                                   elem_id="sweep-table")
                        with gr.Accordion("Sweep result (JSON)", open=False):
                            sweep_json = gr.JSON(elem_id="sweep-json")

        # ---------------- events ----------------
        # The controls each model event reads, by the names of its API parameters (gradio_client passes them by
        # these names, or by position in this order).
        run_controls = {"prompt": prompt, "preset": preset, "chat": chat, "drafter": drafter, "k": k,
                        "decoding": decoding, "temperature": temperature, "top_k": top_k, "top_p": top_p,
                        "max_new_tokens": max_new, "seed": seed}
        sweep_controls = {**{n: run_controls[n] for n in ("prompt", "preset", "chat", "drafter", "decoding",
                                                          "temperature", "top_k", "top_p", "seed")},
                          "k_max": k_max, "rounds": rounds, "max_new_tokens": sweep_new}
        run_outputs = [status, tokens, counters, time_plot, pos_plot, alpha_plot, check, prediction, run_json,
                       download, session]

        def drafters_of(session):  # what a request may name: the drafters of the pair this tab chose
            return provider.for_session(session).drafter_names()

        def run_outputs_of(v):
            figs = v.figures or {}
            return (v.status, _skip(v.tokens), _skip(v.counters), _skip(figs.get("time")),
                    _skip(figs.get("positions")), _skip(figs.get("alpha")), _skip(v.check), _skip(v.prediction),
                    _skip(v.doc), _skip(v.download), v.session)

        def run(session, values, progress):
            """Speculative decoding of the prompt, streamed. Returns status, token HTML, counters, the three
            charts, the output check, the prediction panel, the run record (JSON) and its download.
            k_mode: "fixed" (k every iteration), "adaptive" or "heuristic" (k chosen per iteration)."""

            def views():
                request = parse_request(values, drafters_of(session), limits)
                yield from handlers.stream_run(provider, session, request, progress, limits=limits)

            yield from _guarded(views(), run_outputs_of, len(run_outputs))

        def compare(session, progress=TRACK_PROGRESS):
            """Plain decoding of the last run's prompt and length, right after it: the measured speed-up."""
            yield from _guarded(handlers.stream_compare(provider, session, progress),
                                lambda v: (v.status, _skip(v.prediction), _skip(v.doc), _skip(v.download), v.session),
                                5)

        def calibrate(session, values, progress):
            """Time the target (v(n)) and the drafter (c) on the current prompt; cached for this session."""

            def views():
                request = parse_request(values, drafters_of(session), limits)
                yield from handlers.stream_calibrate(provider, session, request, progress, repeats=calibrate_repeats,
                                                     limits=limits)

            yield from _guarded(views(), lambda v: (v.status, _skip(v.prediction), v.session), 3)

        def sweep(session, values, progress):
            """Sweep k = 1..k_max on the current prompt: measured and predicted speed-up, recommended k."""

            def views():
                request = parse_sweep(values, drafters_of(session), limits)
                yield from handlers.stream_sweep(provider, session, request, progress, sweep_fn=sweep_fn, limits=limits)

            yield from _guarded(views(), lambda v: (v.status, _skip(v.figure), _skip(v.table), _skip(v.summary),
                                                    _skip(v.doc), v.session), 6)

        run_event, run_inputs = _event(run, session, {**run_controls, "k_mode": k_mode})
        calibrate_event, calibrate_inputs = _event(calibrate, session, run_controls)
        sweep_event, sweep_inputs = _event(sweep, session, sweep_controls)

        def load_preset(preset, prompt, session=None, progress=TRACK_PROGRESS):
            """Fill the prompt box (and max new tokens) from a preset; describe it."""
            if preset and not provider.for_session(session).loaded():
                yield gr.skip(), gr.skip(), gr.skip(), LOADING_MESSAGE

            def views():
                yield handlers.load_preset(provider, preset, prompt, progress, session=session)

            def to_outputs(v):  # a preset's length, within this app's limit
                n = None if v.max_new_tokens is None else min(v.max_new_tokens, limits.max_new_tokens)
                return v.prompt, _skip(n), v.chat, v.info

            yield from _guarded(views(), to_outputs, 4, status_first=False)

        def select_pair(session, value):
            """Choose this tab's model pair (a named pair; it loads on the next run): the drafters it offers."""

            def views():
                yield handlers.select_pair(provider, session, value)

            def to_outputs(v):
                return gr.update(choices=v.drafters, value=v.drafters[0][1]), v.info, v.session

            yield from _guarded(views(), to_outputs, 3, status_first=False)

        def after_stop(session):
            """Runs after each model event (Gradio runs it once a cancellation is complete): says 'Stopped'."""
            v = handlers.stopped_view(session)
            figs = v.figures or {}
            return (_skip(v.status), _skip(v.counters), _skip(figs.get("time")), _skip(figs.get("positions")),
                    _skip(figs.get("alpha")), _skip(v.sweep_status))

        # Progress and errors show on the status line only (an error would otherwise badge every output).
        on_status = {"show_progress": "minimal", "show_progress_on": [activity]}
        run_ev = run_btn.click(run_event, run_inputs, run_outputs, api_name="run", **on_status, **device_events)
        cmp_run_ev = compare_btn.click(run_event, run_inputs, run_outputs, api_visibility="private", **on_status,
                                       **device_events)
        cmp_ev = cmp_run_ev.success(compare, [session], [status, prediction, run_json, download, session],
                                    api_name="compare", **on_status, **device_events)
        cal_ev = calibrate_btn.click(calibrate_event, calibrate_inputs, [status, prediction, session],
                                     api_name="calibrate", **on_status, **device_events)
        sweep_ev = sweep_btn.click(sweep_event, sweep_inputs,
                                   [sweep_status, sweep_plot, sweep_table, sweep_text, sweep_json, session],
                                   api_name="sweep", **on_status, **device_events)
        preset.input(load_preset, [preset, prompt, session], [prompt, max_new, chat, preset_info],
                     api_name="load_preset", show_progress="minimal", show_progress_on=[preset_info],
                     concurrency_limit=4, concurrency_id="presets")
        pair_menu.input(select_pair, [session, pair_menu], [drafter, pair_note, session], api_name="select_pair",
                        show_progress="minimal", show_progress_on=[pair_note], concurrency_limit=4,
                        concurrency_id="presets")
        # Stop cancels whichever model event runs (or waits) for this tab; API clients use job.cancel().
        device_evs = [run_ev, cmp_run_ev, cmp_ev, cal_ev, sweep_ev]
        stop_btn.click(None, None, None, cancels=device_evs, queue=False)
        for ev in device_evs:
            ev.then(after_stop, [session], [status, counters, time_plot, pos_plot, alpha_plot, sweep_status],
                    api_visibility="private", queue=False, show_progress="hidden")

        def sampling_controls(decoding):
            on = decoding == "sample"
            return gr.update(interactive=on), gr.update(interactive=on), gr.update(interactive=on)

        decoding.change(sampling_controls, [decoding], [temperature, top_k, top_p], api_visibility="private",
                        queue=False)

    demo.queue(max_size=limits.queue_size, default_concurrency_limit=1)
    return demo
