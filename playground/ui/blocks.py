"""build_ui(): the components, laid out; the events are wired in wiring.py, the work is in handlers.py and
measure.py, the look in theme.py.

Layout: a CSS grid (theme.py). On a wide screen the prompt and the Run button (`#essentials`) sit top left, the
settings under them, the results on the right from the top, so the Run button and the first result share the
first screen; on a narrow one the results come before the settings. The page opens on an example ready to run
(session.SHOW_ME): one click on Run gives a run that shows every token role.
"""

from __future__ import annotations

import html
from types import SimpleNamespace

import gradio as gr

from ..limits import Limits
from . import charts, handlers, measure, replay_panel, verdicts, vllm_panel, whatif_panel
from .javascript import TOKEN_DETAILS
from .markup import READY, counters_html, pair_info
from .render import EMPTY_TOKENS, legend_html
from .serving import PairProvider, drafter_help
from .session import SHOW_ME, SHOW_ME_NOTE, Session
from .wiring import wire

TITLE = "Speculative decoding playground"
# What Calibrate reports is what the box promises: its timed cycles and warm-ups are measure.SHORT and CAREFUL.
CAREFUL_LABEL = (f"Careful calibration ({measure.CAREFUL[0]} timed cycles instead of {measure.SHORT[0]}: about "
                 f"{sum(measure.CAREFUL) / sum(measure.SHORT):.1f} times as long, less noise)")
K_HELP = "fixed k only; adaptive and heuristic choose k themselves"
STOP_HELP = ("0 = off: every iteration drafts its k. Above 0 a model drafter stops after a token it gave less than "
             "this probability (transformers' assistant stops at 0.4), so k is a cap; prompt lookup never stops")


def _controls(ui, preset_list):
    with gr.Column(elem_id="essentials", min_width=300):
        with gr.Row(equal_height=False, elem_id="preset-row"):
            ui.preset = gr.Dropdown(preset_list, value="", label="Preset", elem_id="preset", scale=3, min_width=160)
            ui.show_btn = gr.Button("Show me", elem_id="show-btn", size="md", scale=0, min_width=96)
        ui.preset_info = gr.Markdown(SHOW_ME_NOTE, elem_id="preset-info")
        ui.prompt = gr.Textbox(SHOW_ME.prompt, label="Prompt", lines=4, max_lines=12, elem_id="prompt",
                               placeholder="Paste anything, or pick a preset above")
        ui.chat = gr.Checkbox(value=SHOW_ME.chat, label="Wrap in the chat template (as one user turn)",
                              elem_id="chat")
        with gr.Row(elem_id="run-row"):
            ui.run_btn = gr.Button("Run", variant="primary", elem_id="run-btn", scale=2, size="md", min_width=100)
            ui.stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn", scale=1, size="md", min_width=80)
        with gr.Row(elem_id="measure-row"):
            ui.compare_btn = gr.Button("Compare with plain", elem_id="compare-btn", size="md", scale=3, min_width=140)
            ui.calibrate_btn = gr.Button("Calibrate", elem_id="calibrate-btn", size="md", scale=2, min_width=100)


def _settings(ui, limits: Limits, drafter_choices, default_drafter, pair_menu: tuple, pair_note: str):
    """The settings column; `pair_menu`: handlers.pair_choices' (choices, value, typed), `pair_note`: the line under
    it."""
    pair_list, pair_value, pair_typed = pair_menu
    with gr.Column(elem_id="settings", min_width=300):
        ui.drafter = gr.Radio(drafter_choices, value=default_drafter, label="Drafter", elem_id="drafter")
        ui.drafter_help = gr.HTML(drafter_help(drafter_choices), elem_id="drafter-help")
        ui.k = gr.Slider(1, 16, value=SHOW_ME.k, step=1, label="k (proposals per iteration)", elem_id="k",
                         info=K_HELP)
        # The number boxes name their range but leave checking it to the events (session.parse_request): Gradio's
        # own check raises before an event's code runs, so its message would never reach the status line.
        ui.max_new = gr.Number(value=min(SHOW_ME.max_new_tokens, limits.max_new_tokens), label="Max new tokens",
                               elem_id="max-new", info=f"1 to {limits.max_new_tokens}")
        ui.k_mode = gr.Radio([("fixed k", "fixed"), ("adaptive", "adaptive"), ("transformers' heuristic", "heuristic")],
                             value=SHOW_ME.k_mode, label="k per iteration", elem_id="k-mode",
                             info="adaptive: the cost model picks k (0-16) each iteration from the acceptance so far "
                                  "(its first use on a pair and context length calibrates; the status line says how "
                                  "long that takes); heuristic: +2 after a fully accepted iteration, -1 otherwise")
        ui.min_confidence = gr.Slider(0.0, 1.0, value=0.0, step=0.05, label="Stop drafting below confidence",
                                      elem_id="min-confidence", info=STOP_HELP)
        ui.careful = gr.Checkbox(value=False, label=CAREFUL_LABEL, elem_id="careful")
        ui.constrain = gr.Checkbox(value=False, label="Constrain to the schema", elem_id="constrain",
                                   info="a JSON preset's schema masks every token (llguidance); the schema+ "
                                        "drafters propose the tokens it forces, shown in their own colour")
        with gr.Accordion("Decoding", open=False, elem_id="decoding-box"):
            ui.decoding = gr.Radio([("greedy", "greedy"), ("sampling", "sample")], value=SHOW_ME.decoding,
                                   label="Decoding", elem_id="decoding")
            with gr.Row(elem_id="sampling-row"):
                ui.temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature", interactive=False,
                                           elem_id="temperature", min_width=200)
                ui.top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.01, label="Top-p", info="1 = off",
                                     interactive=False, elem_id="top-p", min_width=200)
            with gr.Row(elem_id="seed-row"):
                ui.top_k = gr.Number(value=0, label="Top-k", info="0 = off", interactive=False,
                                     elem_id="top-k", min_width=140)
                ui.seed = gr.Number(value=0, label="Seed", elem_id="seed", min_width=140)
        ui.pair_menu = gr.Dropdown(pair_list, value=pair_value, label="Model pair", elem_id="pair",
                                   allow_custom_value=pair_typed, filterable=True,
                                   info="Loads on the next run (hub pairs download once)"
                                   + ("; or type TARGET, DRAFT" if pair_typed else ""))
        ui.pair_note = gr.Markdown(pair_note, elem_id="pair-info")
        gr.Markdown("<span class='small-note'>**Compare with plain** runs speculative decoding, then plain decoding "
                    "of the same prompt and length right after. **Calibrate** times the target and the drafter for "
                    "the cost model, once per pair, drafter and context length (every tab reuses it).</span>")


def _run_tab(ui):
    ui.legend = gr.HTML(legend_html(), elem_id="legend")
    ui.tokens = gr.HTML(EMPTY_TOKENS, elem_id="tokens", padding=False, js_on_load=TOKEN_DETAILS,
                        html_template='<div class="token-box">${value}</div>'
                                      '<div class="tok-detail" aria-live="polite"></div>')
    ui.counters = gr.HTML(counters_html(None, None, False), elem_id="counters")
    ui.check = gr.HTML("", elem_id="check")
    ui.prediction = gr.Markdown(verdicts.prediction_markdown(Session()), elem_id="prediction")
    ui.time_plot = gr.Plot(charts.empty_figure("Time per iteration (ms)"), show_label=False, elem_id="time-plot")
    with gr.Row(equal_height=True, elem_id="run-plots"):
        ui.pos_plot = gr.Plot(charts.empty_figure("Acceptance by draft position"), show_label=False,
                              elem_id="pos-plot", min_width=260)
        ui.alpha_plot = gr.Plot(charts.empty_figure("\u03b1 over iterations"), show_label=False, elem_id="alpha-plot",
                                min_width=260)
    with gr.Row(equal_height=True):
        with gr.Accordion("Run record (JSON)", open=False):
            ui.run_json = gr.JSON(label="records, summary, environment, config", elem_id="run-json")
        ui.download = gr.DownloadButton("Download run (JSON)", value=None, elem_id="download", size="md", scale=0,
                                        min_width=200)
        ui.forget_btn = gr.Button("Forget earlier runs", elem_id="forget-btn", size="md", scale=0, min_width=180)


def _sweep_tab(ui, limits: Limits):
    gr.Markdown(
        "Sweeps k over the current prompt (pick a preset for an output shape): in each round every k runs back to "
        "back in a rotating order, with plain decoding between them to divide by; the chart shows the median "
        "measured speed-up (bars: min\u2013max over rounds) beside the cost model's prediction, the break-even "
        "line and the recommended k, which is given only when the sweep's trust verdict holds (3 rounds or more, "
        "on a quiet machine). Uses the drafter and decoding settings of the Run tab.",
        elem_id="sweep-intro")
    with gr.Row(elem_id="sweep-row"):
        ui.k_max = gr.Slider(1, 16, value=8, step=1, label="Largest k", elem_id="k-max", min_width=150)
        ui.rounds = gr.Slider(1, 5, value=3, step=1, label="Rounds", elem_id="rounds", min_width=150)
        ui.sweep_new = gr.Number(value=min(32, limits.max_new_tokens), label="Max new tokens per run",
                                 info=f"1 to {limits.max_new_tokens}", elem_id="sweep-new", min_width=150)
        ui.sweep_btn = gr.Button("Sweep k", variant="primary", elem_id="sweep-btn", min_width=120)
    ui.sweep_status = gr.Markdown("", elem_id="sweep-status")
    ui.sweep_plot = gr.Plot(charts.sweep_figure(None), show_label=False, elem_id="sweep-plot")
    ui.sweep_text = gr.Markdown("", elem_id="sweep-summary")
    ui.sweep_table = gr.Dataframe(headers=verdicts.SWEEP_COLUMNS, interactive=False, elem_id="sweep-table", wrap=True)
    whatif_panel.batch_section(ui)
    with gr.Accordion("Sweep result (JSON)", open=False):
        ui.sweep_json = gr.JSON(elem_id="sweep-json")


def build_ui(provider: PairProvider | None = None, presets_dir=None, sweep_fn=None,
             calibrate_repeats: int | None = None, limits: Limits | None = None,
             vllm: vllm_panel.VllmSettings | None = None) -> gr.Blocks:
    """The playground's Blocks. Loads no model: the pair loads on first use (see serving.PairCache).
    `limits` default to the environment's (playground.limits), read here, once per app; so does `vllm`, the
    operator's vLLM server (PLAYGROUND_VLLM_URL: the "vLLM server" tab exists only where it is set). `calibrate_repeats`
    replaces the Calibrate button's timed cycles (tests); `sweep_fn` replaces lab.speed.sweep (tests)."""
    provider = provider or PairProvider()
    limits = limits or Limits.from_env()
    vllm = vllm or vllm_panel.VllmSettings.from_env()
    preset_list, preset_errors = handlers.preset_choices(presets_dir)
    drafter_choices = provider.drafter_choices()
    names = [name for _, name in drafter_choices]
    default_drafter = SHOW_ME.drafter if SHOW_ME.drafter in names else names[0]
    ui = SimpleNamespace()

    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        ui.session = gr.State(None)  # a session.Session, created by the first event of each tab
        ui.moved = gr.State({})  # sliders moved from a value typed out of range (ranges.remember_moves), per tab
        with gr.Column(elem_id="header"):
            gr.Markdown(f"# {TITLE}\nA small drafter proposes *k* tokens, the target checks them in one pass, the "
                        "acceptance rule keeps a prefix: see which tokens were accepted, the acceptance rate \u03b1, "
                        "where the time went, and the predicted speed-up beside the measured one.")
            if preset_errors:
                gr.Markdown("\n".join(f"- preset error: {html.escape(e)}" for e in preset_errors))
        with gr.Row(equal_height=False, elem_id="main"):
            _controls(ui, preset_list)
            with gr.Column(elem_id="results", min_width=300):
                with gr.Row(equal_height=True, elem_id="status-row"):
                    ui.status = gr.Markdown(f"{READY} It runs the example prompt; or pick a preset.",
                                            elem_id="status")
                    # Gradio's status tracker of the model events draws here (hidden); javascript.HEAD shows a
                    # queued event's place in line in the span.
                    ui.activity = gr.HTML('<span class="queue-note" role="status"></span>', elem_id="activity",
                                          min_width=10)
                with gr.Tabs():
                    with gr.Tab("Run", id="run-tab"):
                        _run_tab(ui)
                    with gr.Tab("k per output shape", id="sweep-tab"):
                        _sweep_tab(ui, limits)
                    with gr.Tab("What if", id="whatif-tab", elem_id="whatif-tab") as ui.whatif_tab:
                        whatif_panel.whatif_tab(ui)
                    with gr.Tab("Replay", id="replay-tab", elem_id="replay-tab") as ui.replay_tab:
                        replay_panel.replay_tab(ui, drafter_choices)
                    if vllm is not None:
                        with gr.Tab("vLLM server", id="vllm-tab", elem_id="vllm-tab") as ui.vllm_tab:
                            vllm_panel.vllm_tab(ui, vllm, preset_list, limits)
            _settings(ui, limits, drafter_choices, default_drafter, handlers.pair_choices(provider), pair_info(provider))
        wire(ui, provider, limits, sweep_fn=sweep_fn, calibrate_repeats=calibrate_repeats)
        whatif_panel.wire_whatif(ui, provider)
        whatif_panel.wire_batch(ui, provider, limits)
        replay_panel.wire_replay(ui, provider, limits)
        if vllm is not None:
            vllm_panel.wire_vllm(ui, vllm, limits)

    demo.queue(max_size=limits.queue_size, default_concurrency_limit=1)
    return demo
