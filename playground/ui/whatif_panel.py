"""The What-if tab, and the sweep tab's batch timing: components and events (their content is built without
gradio, in whatif_view.py and batching.py).

What-if needs no model run: every change of an input recomputes the tab at once (queue=False: arithmetic, never
behind a model event in the queue). A value the library refuses shows its message on the tab's status line, while
the chart and tables keep the last inputs that worked. 'Time batches 1, 4, 8' is a device event like Calibrate;
its lines go to the sweep tab.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import gradio as gr

from ..errors import PlaygroundError
from ..lab.whatif import whatif
from . import handlers, javascript
from .batching import INTRO, batch_note, stream_batch
from .markup import fold
from .session import Session, _number, parse_request
from .verdicts import glossary_html
from .whatif_view import (
    DEFAULTS,
    FIELDS,
    START_NOTE,
    WhatifInputs,
    error_status,
    parse_positions,
    parse_verify,
    prefill,
    whatif_view,
)
from .wiring import _error, _event, _guarded, _skip, on_failure

log = logging.getLogger(__name__)
BATCH_STARTING = "Timing batches: starting; its progress shows on the 'k per output shape' tab \u2026"
TERMS = ["k", "\u03b1 (acceptance rate)", "iid \u03b1", "per position", "c", "cost per call", "v(n)", "break-even \u03b1",
         "tokens per pass", "speed-up", "calibration"]
INTRO_TEXT = ("What the cost model predicts for numbers you choose: **no model runs**, every change shows at once. "
              "Try a cheaper drafter (smaller c), a verification that gets dearer with n, or the acceptance of "
              "another text. " + START_NOTE)
QUIET = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}


def whatif_tab(ui) -> None:
    """The What-if tab's components, pre-filled with DEFAULTS and their numbers."""
    first = whatif_view(None, DEFAULTS)
    gr.Markdown(INTRO_TEXT, elem_id="whatif-intro")
    with gr.Row(equal_height=True, elem_id="whatif-from-row"):
        ui.whatif_from = gr.Markdown("", elem_id="whatif-from")
        ui.whatif_cal_btn = gr.Button("Use last calibration", elem_id="whatif-use-calibration", size="sm", scale=0,
                                      min_width=160)
        ui.whatif_run_btn = gr.Button("Use last run's \u03b1", elem_id="whatif-use-run", size="sm", scale=0,
                                      min_width=140)
    with gr.Row(elem_id="whatif-acceptance"):
        ui.wi_acceptance = gr.Radio([("iid \u03b1", "iid"), ("per position", "positions")], value="iid",
                                    label="Acceptance", elem_id="whatif-mode", min_width=170,
                                    info="one rate for every proposal, or measured per draft position")
        ui.wi_alpha = gr.Slider(0, 1, value=DEFAULTS.alpha, step=0.01, label="\u03b1 (acceptance rate)",
                                elem_id="whatif-alpha", min_width=220,
                                info="the chance a proposal is kept, given the ones before were")
        ui.wi_positions = gr.Textbox(DEFAULTS.positions, label="Per-position acceptance", interactive=False,
                                     elem_id="whatif-positions", min_width=220,
                                     info="P(accept) at draft positions 1, 2, 3, \u2026 (the last one repeats)")
    with gr.Row(elem_id="whatif-costs"):
        ui.wi_c = gr.Number(DEFAULTS.c, step=0.01, label="c (drafter cost per token)", elem_id="whatif-c",
                            min_width=160, info="in target steps: a target step is what plain decoding pays a token")
        ui.wi_overhead = gr.Number(DEFAULTS.overhead, step=0.01, label="Cost per call", elem_id="whatif-overhead",
                                   min_width=160, info="the drafter's fixed cost per iteration, in target steps")
        ui.wi_v = gr.Textbox(DEFAULTS.v, label="v(n) (a target pass over n tokens)", elem_id="whatif-v",
                             min_width=260, max_lines=3,
                             info="'flat' (every pass costs one step) or n:cost pairs, e.g. 1:1.0,2:1.05,4:1.6")
    ui.whatif_status = gr.Markdown(first.status, elem_id="whatif-status")
    ui.whatif_plot = gr.Plot(first.figure, show_label=False, elem_id="whatif-plot")
    ui.whatif_table = gr.HTML(first.table, elem_id="whatif-table", label="per k")
    gr.Markdown("Predicted speed-up over \u03b1 \u00d7 k, best k of each \u03b1 in bold; "
                "the what-if \u03b1 and your last run's \u03b1 have rows of their own, the run's k is outlined.",
                elem_id="whatif-grid-title")
    ui.whatif_grid = gr.HTML(first.grid, elem_id="whatif-grid")
    gr.HTML(glossary_html(TERMS), elem_id="whatif-glossary")


def batch_section(ui) -> None:
    """The sweep tab's 'Time batches 1, 4, 8' and what it found."""
    gr.Markdown("#### Verification at batch > 1", elem_id="batch-title")
    with gr.Row(equal_height=True, elem_id="batch-row"):
        ui.batch_btn = gr.Button("Time batches 1, 4, 8", elem_id="batch-btn", size="md", scale=0, min_width=200)
        ui.batch_status = gr.Markdown("", elem_id="batch-status")
    ui.batch_note = gr.Markdown(INTRO, elem_id="batch-note")


def _inputs(ui) -> list:
    return [ui.wi_acceptance, ui.wi_alpha, ui.wi_positions, ui.wi_c, ui.wi_overhead, ui.wi_v]


def wire_whatif(ui, provider) -> None:
    """The What-if tab's events, and the /whatif API."""
    inputs = _inputs(ui)
    outputs = [ui.whatif_status, ui.whatif_plot, ui.whatif_table, ui.whatif_grid]

    def view_of(session, values) -> tuple:
        try:
            v = whatif_view(session, values, provider.for_session(session).calibrations if session else None)
        except PlaygroundError as e:
            return error_status(e), gr.skip(), gr.skip(), gr.skip()
        except Exception:  # a bug, not bad input: say so on the tab, log the traceback
            log.exception("what-if failed")
            return "\u26a0 internal error: see the app's log", gr.skip(), gr.skip(), gr.skip()
        return v.status, v.figure, v.table, v.grid

    def recompute(session, *values):
        return view_of(session, WhatifInputs(*values))

    def filler(force):
        def fill(session, *values):
            session = session if session is not None else Session()
            changes, line = prefill(session, provider.for_session(session).calibrations, force)
            values = replace(WhatifInputs(*values), **changes)
            filled = [changes[name] if name in changes else gr.skip() for name in FIELDS]
            return (*filled, _skip(line), *view_of(session, values), session)

        return fill

    # preprocess=False: the values as typed (a slider's too, before Gradio refuses one out of its range), so
    # that the library, not the component, says what is wrong with them.
    gr.on([c.change for c in inputs], recompute, [ui.session, *inputs], outputs, preprocess=False,
          trigger_mode="always_last", **QUIET)
    filled = [*inputs, ui.whatif_from, *outputs, ui.session]
    ui.whatif_tab.select(filler(None), [ui.session, *inputs], filled, preprocess=False, **QUIET)
    ui.whatif_cal_btn.click(filler("calibration"), [ui.session, *inputs], filled, preprocess=False, **QUIET)
    ui.whatif_run_btn.click(filler("run"), [ui.session, *inputs], filled, preprocess=False, **QUIET)

    def acceptance_mode(mode):
        iid = mode != "positions"
        return gr.update(interactive=iid), gr.update(interactive=not iid)

    ui.wi_acceptance.change(acceptance_mode, [ui.wi_acceptance], [ui.wi_alpha, ui.wi_positions], **QUIET)

    def whatif_api(c: float, alpha: float | None = None, positions: str = "", v: str = "flat",
                   overhead: float = 0.0) -> dict:
        """The cost model's predicted speed-up for k = 1..16, tokens per pass, break-even alpha per k, the best k
        and the map over alpha x k, for a drafter costing `c` target steps per token plus `overhead` per call,
        verification `v` ('flat', or n:cost pairs like '1:1.0,2:1.05,4:1.6') and an acceptance: an iid `alpha`,
        or per-position acceptance `positions` ('0.95, 0.9, 0.8'). No model runs."""
        try:
            per_position = parse_positions(positions) if positions and positions.strip() else None
            return whatif(_number(c, "the draft cost ratio c"), positions=per_position, v=parse_verify(v),
                          alpha=None if alpha is None else _number(alpha, "\u03b1"),
                          overhead=_number(overhead, "the drafter's cost per call")).to_dict()
        except (PlaygroundError, ValueError) as e:
            raise _error(PlaygroundError(str(e))) from None

    gr.api(whatif_api, api_name="whatif", concurrency_limit=4, concurrency_id="whatif")


def wire_batch(ui, provider, limits) -> None:
    """'Time batches 1, 4, 8' (/time_batches), its Stop, and the line above the tabs after it."""
    session = ui.session
    device_events = {"concurrency_limit": 1, "concurrency_id": f"device:{provider.device}"}

    def time_batches(session, values):
        """Time the target's pass over B = 1, 4, 8 sequences x n = 1..9 new tokens after this prompt: v(n) per batch
        and the k up to which verification stays nearly free; the sweep chart adds the predicted speed-up per
        batch. The loop itself runs batch 1; batched serving is measured on vLLM."""
        if session is not None:
            session.batch_status = None

        def views():
            names = provider.for_session(session).drafter_names()
            request = parse_request({"drafter": names[0], "k": 1, "decoding": "greedy", "temperature": 1.0,
                                     "top_k": 0, "top_p": 1.0, "max_new_tokens": 1, "seed": 0, **values}, names, limits)
            yield from stream_batch(provider, session, request, limits=limits)

        yield from _guarded(views(), lambda v: (v.status, _skip(v.figure), _skip(v.note), v.session), 4)

    event, event_inputs = _event(time_batches, session, {"prompt": ui.prompt, "preset": ui.preset, "chat": ui.chat})
    ui.batch_btn.click(None, None, [ui.status], js=javascript.starting(BATCH_STARTING, "#batch-status"), **QUIET)
    batch_ev = ui.batch_btn.click(event, event_inputs, [ui.batch_status, ui.sweep_plot, ui.batch_note, session],
                                  api_name="time_batches", show_progress="minimal", show_progress_on=[ui.activity],
                                  **device_events)
    ui.stop_btn.click(None, None, None, cancels=[batch_ev], queue=False)

    def after_batch(session, status):
        """Runs after the batch timing: 'Stopped', or how it ended, on the status line above the tabs."""
        stopped = handlers.stopped_view(session).status
        if stopped or (isinstance(status, str) and status.startswith("Stopping")):  # its worker may not know yet
            return "Batch timing stopped: nothing was kept.", "Batch timing stopped: nothing was kept."
        if isinstance(status, str) and status.startswith(BATCH_STARTING[:14]):
            done = session.batch_status if session is not None and session.batch_status else None
            return fold(done) if done else "The batch timing did not finish: its tab says why.", gr.skip()
        return gr.skip(), gr.skip()

    batch_ev.then(after_batch, [session, ui.status], [ui.status, ui.batch_status], **QUIET)
    on_failure(batch_ev, BATCH_STARTING, "Time batches", ui.status, ui.batch_status)
    ui.sweep_event.then(batch_note, [session], [ui.batch_note], **QUIET)  # the note says whether lines are drawn
