"""The events of build_ui's components (blocks.py lays them out). Each model event builds its request from its
controls (session.parse_request / parse_sweep, the one place raw control values are read), maps handler views to
component updates and PlaygroundError to a message the user sees.

Serving: one queue, bounded (PLAYGROUND_QUEUE_SIZE); every event that touches the model runs under one
concurrency group per device (`concurrency_limit=1`, shared `concurrency_id`); Stop cancels the running event
(`cancels=`: Gradio closes its generator, whose engine thread stops at its next record); every event has a stable
`api_name` for gradio_client (docs/browser.md lists them).

What the status line says is always the present: a click says at once that the event is starting (javascript.py;
a queued one shows its place in line), the event's own lines follow, and `_after` (chained after every model
event) says what happened when the event was stopped, refused before it began, or ran on another tab (a sweep).
A control typed out of its range says so instead of being clamped in silence (controls.py).
"""

from __future__ import annotations

import html
import inspect
import logging
import traceback
from dataclasses import dataclass
from types import SimpleNamespace

import gradio as gr

from ..envinfo import redact
from ..errors import PlaygroundError
from ..limits import Limits
from . import handlers, javascript, measure, run_panel
from .controls import wire_controls
from .form import Controls
from .markup import RunFigures, fold
from .ranges import refuse_moved
from .serving import PairProvider, drafter_help
from .session import SHOW_ME, SHOW_ME_NOTE, parse_request, parse_sweep

log = logging.getLogger(__name__)
PROGRESS = gr.Progress()  # a marker: Gradio hands each call a tracker of its own
STARTING = "Starting: waiting for the device if another event is using it \u2026"
SHOW_STARTING = "Starting: waiting for the device to run the example (Show me loads it and runs it) \u2026"
SWEEP_STARTING = "Sweep k: starting; its progress shows on the 'k per output shape' tab \u2026"
STOP_JS = ("(s) => /^(Starting|Running|Loading|Calibrating|Plain decoding|Sweep k|Sweeping|Timing batches"
           "|Replay: starting)/.test(s || '') ? 'Stopping \u2026' : s")


def _error(e: Exception, visible: bool = True) -> gr.Error:
    return gr.Error(html.escape(redact(str(e))), title="Cannot do that", print_exception=False, visible=visible)


def _skip(x):
    return gr.skip() if x is None else x


def _figure_outputs(figures: RunFigures | None) -> tuple:
    """The three chart outputs of a view: each figure, or unchanged."""
    if figures is None:
        return gr.skip(), gr.skip(), gr.skip()
    return _skip(figures.time), _skip(figures.positions), _skip(figures.alpha)


def _guarded(views, to_outputs, n_outputs: int, status_first: bool = True):
    """Map each view to output values; turn a PlaygroundError into a status line (the first output) and an
    error the API client sees, and any other exception into an 'internal error' message. Where the status line
    says it, the page shows no toast as well (toasts pile up and outlive the error they report). The app
    keeps serving either way. No secret (HF_TOKEN, ...) is shown or logged: messages go through `redact`."""
    try:
        for v in views:
            out = to_outputs(v)
            yield (fold(out[0]), *out[1:]) if status_first and isinstance(out, tuple) else out
    except PlaygroundError as e:
        if status_first:
            yield (fold(f"\u26a0 {redact(str(e))}"), *([gr.skip()] * (n_outputs - 1)))
        raise _error(e, visible=not status_first) from None
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: say what happened, log the traceback
        log.error("playground event failed\n%s", redact(traceback.format_exc()))
        message = redact(f"internal error: {type(e).__name__}: {e}")
        if status_first:
            yield (fold(f"\u26a0 {message}"), *([gr.skip()] * (n_outputs - 1)))
        raise gr.Error(html.escape(message), title="Something broke", print_exception=False,
                       visible=not status_first) from None


def _event(body, session: gr.State, controls: dict):
    """An event function for `body(session, values)`, where `values` is {name: value} for `controls` ({API
    parameter name: component}), and the event's inputs ([session, *components]).

    Gradio passes an event's inputs by position and names its API parameters after the function's, so the
    function gets the signature (session, *names, progress): the names are written once, beside the components,
    and the values reach the body as one mapping, never by position. (The progress tracker Gradio hands over is
    not used: the status line says how the work goes.)"""
    names = list(controls)

    def event(session, *values):
        *values, _ = values  # Gradio passes its progress tracker where the signature puts it: last
        yield from body(session, dict(zip(names, values, strict=True)))

    param = inspect.Parameter
    event.__signature__ = inspect.Signature(
        [param(name, param.POSITIONAL_OR_KEYWORD) for name in ("session", *names)]
        + [param("progress", param.POSITIONAL_OR_KEYWORD, default=PROGRESS)])
    event.__name__, event.__qualname__, event.__doc__ = body.__name__, body.__qualname__, body.__doc__
    return event, [session, *controls.values()]


NOT_RUN = ("\u26a0 Not run: a value was refused before it began (the message names it); fix it and press the "
           "button again.")


def on_failure(event, starting: str, what: str, status, tab_status=None) -> None:
    """Make sure a failed event leaves no 'starting' line behind. Gradio 6's page runs an event's `.then`
    listeners only after it succeeded or was cancelled (one that raised gr.Error, in its own code or in Gradio's
    checks of the inputs, runs its `.failure` listeners alone), so the `after` events chained with `.then` never
    ran after an error: this chains one with `.failure`. While the status line (and the tab's, `tab_status`) still
    shows `starting`, it gets the tab's error line or NOT_RUN; a line already describing the error stays. Stop runs
    an event's `.failure` listeners too, beside its `.then` ones (Gradio 6's page does so on a cancel), after
    STOP_JS turned the line to 'Stopping': then the `.then` listener says what became of it, and this nothing."""

    def failed(top, tab=None):
        if not (isinstance(top, str) and top.startswith(starting[:12])):
            return gr.skip() if tab_status is None else (gr.skip(), gr.skip())
        tab_error = tab if isinstance(tab, str) and tab.startswith("\u26a0") else None
        line = fold(f"\u26a0 {what}: {tab_error[1:].strip()}" if tab_error else NOT_RUN)
        if tab_status is None:
            return line
        starting_tab = isinstance(tab, str) and tab.startswith(("Starting", starting[:12]))
        return line, (NOT_RUN if starting_tab else gr.skip())

    inputs, outputs = ([status], [status]) if tab_status is None else ([status, tab_status], [status, tab_status])
    event.failure(failed, inputs, outputs, queue=False, api_visibility="private", show_progress="hidden")


@dataclass
class _Wiring:
    """What every model event is wired with: the components, the pair provider, the limits, and the device's
    concurrency group and the status line's progress settings."""

    ui: SimpleNamespace  # blocks.py's components
    provider: PairProvider
    limits: Limits
    device_events: dict
    on_status: dict

    def drafters_of(self, session):
        """What a request may name: the drafters of the pair this tab chose."""
        return self.provider.for_session(session).drafter_names()


def wire(ui, provider, limits, sweep_fn=None, calibrate_repeats: int | None = None) -> None:
    """Every event of the playground's components (`ui`: blocks.py's namespace of components)."""
    group = f"device:{provider.device}"  # one run at a time per device, whatever the event
    # Gradio's tracker (its queue position and timer) draws in the hidden #activity only; the status line says
    # what happens, and javascript.HEAD shows the place in line.
    w = _Wiring(ui, provider, limits, device_events={"concurrency_limit": 1, "concurrency_id": group},
                on_status={"show_progress": "minimal", "show_progress_on": [ui.activity]})
    _wire_starting(ui)
    run_ev, cmp_run_ev, cmp_ev, (run_event, run_inputs) = _wire_run(w)
    cal_ev = _wire_calibrate(w, calibrate_repeats)
    sweep_ev = _wire_sweep(w, sweep_fn)
    show_ev = _wire_show_me(w, run_event, run_inputs)
    _wire_preset_and_pair(w)
    _wire_stop_and_after(ui, [(run_ev, "run"), (cmp_run_ev, "run"), (cmp_ev, "compare"), (cal_ev, "calibrate"),
                              (sweep_ev, "sweep"), (show_ev, "run")])
    wire_controls(ui, limits)


def _run_controls(ui) -> dict:
    return {"prompt": ui.prompt, "preset": ui.preset, "chat": ui.chat, "drafter": ui.drafter, "k": ui.k,
            "decoding": ui.decoding, "temperature": ui.temperature, "top_k": ui.top_k, "top_p": ui.top_p,
            "max_new_tokens": ui.max_new, "seed": ui.seed}


def _run_outputs(ui) -> list:
    return [ui.status, ui.tokens, ui.counters, ui.time_plot, ui.pos_plot, ui.alpha_plot, ui.check, ui.prediction,
            ui.run_json, ui.download, ui.session]


def _wire_starting(ui) -> None:
    """A click says at once that its event is starting (before the queue has it)."""
    starting = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}
    for btn in (ui.run_btn, ui.compare_btn, ui.calibrate_btn):
        btn.click(None, None, [ui.status], js=javascript.starting(STARTING), **starting)
    ui.show_btn.click(None, None, [ui.status], js=javascript.starting(SHOW_STARTING), **starting)
    ui.sweep_btn.click(None, None, [ui.status], js=javascript.starting(SWEEP_STARTING, "#sweep-status"), **starting)


def _wire_run(w: _Wiring):
    """Run (/run), and Compare: its speculative run, then plain decoding (/compare). Returns the three events
    and the run event's function and inputs (Show me runs it too)."""
    ui, provider, limits = w.ui, w.provider, w.limits
    run_outputs = _run_outputs(ui)

    def run_outputs_of(v):
        return (v.status, _skip(v.tokens), _skip(v.counters), *_figure_outputs(v.figures), _skip(v.check),
                _skip(v.prediction), _skip(v.doc), _skip(v.download), v.session)

    def run(session, values, stream_tokens: bool = True):
        """Speculative decoding of the prompt, streamed. Returns status, token HTML, counters, the three
        charts, the output check, the prediction panel, the run record (JSON) and its download.
        k_mode: "fixed" (k every iteration), "adaptive" or "heuristic" (k chosen per iteration)."""

        def views():
            refuse_moved(values.pop("moved", None), values)
            request = parse_request(values, w.drafters_of(session), limits)
            yield from run_panel.stream_run(provider, session, request, limits=limits, stream_tokens=stream_tokens)

        yield from _guarded(views(), run_outputs_of, len(run_outputs))

    def run_to_compare(session, values):
        """Compare's speculative run: as `run`, but the page is drawn when it ends, as for the plain run after it."""
        yield from run(session, values, stream_tokens=False)

    def compare(session):
        """Plain decoding of the last run's prompt and length, right after it: the measured speed-up, with the
        verdict of one adjacent pair."""
        yield from _guarded(handlers.stream_compare(provider, session),
                            lambda v: (v.status, _skip(v.prediction), _skip(v.doc), _skip(v.download), v.session), 5)

    speculative = {**_run_controls(ui), "k_mode": ui.k_mode, "min_confidence": ui.min_confidence, "moved": ui.moved,
                   "constrain": ui.constrain}
    run_event, run_inputs = _event(run, ui.session, speculative)
    compare_run_event, _ = _event(run_to_compare, ui.session, speculative)
    run_ev = ui.run_btn.click(run_event, run_inputs, run_outputs, api_name="run", **w.on_status, **w.device_events)
    cmp_run_ev = ui.compare_btn.click(compare_run_event, run_inputs, run_outputs, api_visibility="private",
                                      **w.on_status, **w.device_events)
    cmp_ev = cmp_run_ev.success(compare, [ui.session], [ui.status, ui.prediction, ui.run_json, ui.download, ui.session],
                                api_name="compare", **w.on_status, **w.device_events)
    return run_ev, cmp_run_ev, cmp_ev, (run_event, run_inputs)


def _wire_calibrate(w: _Wiring, repeats: int | None):
    """Calibrate (/calibrate)."""
    ui, provider, limits = w.ui, w.provider, w.limits

    def calibrate(session, values):
        """Time the target (v(n)) and the drafter (c) for the cost model, on this context length; reused by every
        tab on the pair. careful: measure.CAREFUL's timed cycles instead of SHORT's."""

        def views():
            refuse_moved(values.pop("moved", None), values, ignore=("k",))  # a calibration serves every k
            request = parse_request(values, w.drafters_of(session), limits)
            yield from measure.stream_calibrate(provider, session, request, careful=bool(Controls.of(values).careful),
                                                repeats=repeats, limits=limits)

        yield from _guarded(views(), lambda v: (v.status, _skip(v.prediction), v.session), 3)

    event, inputs = _event(calibrate, ui.session, {**_run_controls(ui), "careful": ui.careful, "moved": ui.moved})
    return ui.calibrate_btn.click(event, inputs, [ui.status, ui.prediction, ui.session], api_name="calibrate",
                                  **w.on_status, **w.device_events)


def _wire_sweep(w: _Wiring, sweep_fn):
    """Sweep k (/sweep), its outcome on the 'k per output shape' tab."""
    ui, provider, limits = w.ui, w.provider, w.limits
    run_controls = _run_controls(ui)
    sweep_controls = {**{n: run_controls[n] for n in ("prompt", "preset", "chat", "drafter", "decoding",
                                                      "temperature", "top_k", "top_p", "seed")},
                      "k_max": ui.k_max, "rounds": ui.rounds, "max_new_tokens": ui.sweep_new,
                      "min_confidence": ui.min_confidence,  # new ones last: API clients' positional calls keep working
                      "constrain": ui.constrain,
                      "moved": ui.moved}  # a gr.State: no API parameter

    def sweep(session, values):
        """Sweep k = 1..k_max on the current prompt: measured and predicted speed-up, the trust verdict, and a
        recommended k where the verdict holds."""

        def views():
            refuse_moved(values.pop("moved", None), values)
            request = parse_sweep(values, w.drafters_of(session), limits)
            yield from measure.stream_sweep(provider, session, request, sweep_fn=sweep_fn, limits=limits)

        yield from _guarded(views(), lambda v: (v.status, _skip(v.figure), _skip(v.table), _skip(v.summary),
                                                _skip(v.doc), v.session), 6)

    event, inputs = _event(sweep, ui.session, sweep_controls)
    sweep_ev = ui.sweep_btn.click(event, inputs, [ui.sweep_status, ui.sweep_plot, ui.sweep_table, ui.sweep_text,
                                                  ui.sweep_json, ui.session],
                                  api_name="sweep", **w.on_status, **w.device_events)
    ui.sweep_event = sweep_ev  # whatif_panel chains the batch note after it
    return sweep_ev


def _wire_show_me(w: _Wiring, run_event, run_inputs):
    """Show me: fill the controls with the example the page opens on, then run it."""
    ui, limits = w.ui, w.limits
    example = [ui.prompt, ui.chat, ui.drafter, ui.k, ui.k_mode, ui.min_confidence, ui.decoding, ui.max_new, ui.preset,
               ui.preset_info]
    names = w.provider.drafter_names()

    def show_me():
        """The example the page opens on: every token role in one run."""
        drafter = SHOW_ME.drafter if SHOW_ME.drafter in names else names[0]
        return (SHOW_ME.prompt, SHOW_ME.chat, drafter, SHOW_ME.k, SHOW_ME.k_mode, 0.0,
                SHOW_ME.decoding, min(SHOW_ME.max_new_tokens, limits.max_new_tokens), "", SHOW_ME_NOTE)

    return ui.show_btn.click(show_me, None, example, queue=False, api_visibility="private").then(
        run_event, run_inputs, _run_outputs(ui), api_visibility="private", **w.on_status, **w.device_events)


def _wire_preset_and_pair(w: _Wiring) -> None:
    """The preset menu (/load_preset) and the pair menu (/select_pair)."""
    ui, provider, limits = w.ui, w.provider, w.limits

    def load_preset(preset, prompt, session=None):
        """Fill the prompt box (and max new tokens) from a preset; describe it."""
        if preset:
            loading = handlers.preset_loading(provider, session)
            if loading:
                yield gr.skip(), gr.skip(), gr.skip(), loading

        def views():
            yield handlers.load_preset_view(provider, preset, prompt, session=session)

        def to_outputs(v):  # a preset's length, within this app's limit
            n = None if v.max_new_tokens is None else min(v.max_new_tokens, limits.max_new_tokens)
            return v.prompt, _skip(n), v.chat, v.info

        yield from _guarded(views(), to_outputs, 4, status_first=False)

    def select_pair(session, value):
        """Choose this tab's model pair (a named pair; it loads on the next run): the drafters it offers."""

        def views():
            yield handlers.select_pair(provider, session, value)

        def to_outputs(v):
            names = [name for _, name in v.drafters]
            chosen = SHOW_ME.drafter if SHOW_ME.drafter in names else names[0]
            return gr.update(choices=v.drafters, value=chosen), v.info, v.session

        yield from _guarded(views(), to_outputs, 3, status_first=False)

    ui.preset.input(load_preset, [ui.preset, ui.prompt, ui.session], [ui.prompt, ui.max_new, ui.chat, ui.preset_info],
                    api_name="load_preset", show_progress="minimal", show_progress_on=[ui.preset_info],
                    concurrency_limit=4, concurrency_id="presets")
    pair_ev = ui.pair_menu.input(select_pair, [ui.session, ui.pair_menu], [ui.drafter, ui.pair_note, ui.session],
                                 api_name="select_pair", show_progress="minimal", show_progress_on=[ui.pair_note],
                                 concurrency_limit=4, concurrency_id="presets")
    pair_ev.then(lambda session: drafter_help(provider.for_session(session).drafter_choices()), [ui.session],
                 [ui.drafter_help], queue=False, api_visibility="private", show_progress="hidden")


def _after(kind: str):
    def after_event(session, status):
        """Runs after a model event (Gradio runs it once a cancellation is complete): says 'Stopped', or what
        became of an event that never began (refused by a component's range check, or stopped in the queue),
        or, for a sweep, its outcome on the status line above the tabs."""
        if kind == "sweep" and session is not None and isinstance(status, str) and status.startswith("Stopping"):
            session.stopped = session.stopped or "sweep"  # stopped while it ran, before its worker heard the Stop
        v = handlers.stopped_view(session)
        line = v.status
        if line is None and isinstance(status, str):
            if kind == "sweep" and status.startswith(SWEEP_STARTING[:12]):
                line = (session.sweep_status if session is not None and session.sweep_status
                        else "The sweep did not finish: its tab says why.")
            elif status.startswith(STARTING[:9]):
                line = NOT_RUN
            elif status.startswith("Stopping"):
                line = "Stopped before it began. Press Run to start again."
        return (_skip(fold(line)), _skip(v.counters), *_figure_outputs(v.figures), _skip(v.sweep_status),
                _skip(v.tokens))

    return after_event


def _wire_stop_and_after(ui, events: list) -> None:
    """Stop cancels whichever model event runs (or waits) for this tab (API clients use job.cancel()); after
    each model event, what became of it (`_after`, and `on_failure` for one that raised). `events`: (event,
    kind) pairs."""
    ui.stop_btn.click(None, [ui.status], [ui.status], js=STOP_JS, cancels=[ev for ev, _ in events], queue=False)
    after_outputs = [ui.status, ui.counters, ui.time_plot, ui.pos_plot, ui.alpha_plot, ui.sweep_status, ui.tokens]
    for ev, kind in events:
        ev.then(_after(kind), [ui.session, ui.status], after_outputs, api_visibility="private", queue=False,
                show_progress="hidden")
        if kind == "sweep":
            on_failure(ev, SWEEP_STARTING, "Sweep k", ui.status, ui.sweep_status)
        else:
            on_failure(ev, STARTING, kind.capitalize(), ui.status)
