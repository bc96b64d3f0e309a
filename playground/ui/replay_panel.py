"""The Replay tab: which k for an agent's recorded outputs (playground.lab.replay), in the browser. Components,
the replay event and its handler; the request is parsed in replay_request.py and the panels are built in
replay_view.py, both without gradio.

The turns come from an uploaded JSONL trace, the sample trace shipped with the playground, or presets (their
completions are the target's own greedy output, generated first, so they replay exactly). The event is a device
event like Calibrate and the sweep (its worker holds serving.device_lock), stopped by Stop, with status lines from
replay_announce. The predictions use the pair's calibrations, shared with every tab (`PairProvider.calibrations`).
The result stays in the tab's own gr.State (a `ReplayState`), so the token view redraws at another turn or k
without running anything. API: /replay (`trace_file` takes an uploaded file, e.g. gradio_client.handle_file); it
returns the panels and the result without its per-iteration records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr

from ..core.sampling import GREEDY, SamplingConfig
from ..drafters.registry import available_drafters, make_proposer
from ..errors import PlaygroundError
from ..inputs.presets import load_presets
from ..inputs.traces import SAMPLE_TRACE, read_trace
from ..lab.calibration import SHORT_CALIBRATION, CalibrationStore, calibrated_timing
from ..lab.replay import ReplayOptions, calibration_contexts, preset_turns, replay_turns
from ..limits import Limits
from ..results.replay import CalibrationUse, LineError, ReplayResult
from . import javascript, serving
from .downloads import jsonable
from .markup import fold
from .progress import load_with_progress, mapped, phase, progress_lines, ticker
from .ranges import refuse_moved
from .render import legend_html
from .replay_announce import (
    ESTIMATING,
    ReplayTracker,
    announcement,
    done_status,
    estimate_seconds,
    is_big,
    probe_seconds_per_token,
)
from .replay_request import SOURCES, ReplayRequest, parse_replay, size_text
from .replay_view import (
    EMPTY_TOKENS,
    arm_choices,
    default_arm,
    errors_markdown,
    public_doc,
    replay_figure,
    replay_per_k_html,
    replay_recommendation_html,
    token_view,
    turn_choices,
)
from .serving import Background, PairProvider
from .session import SHOW_ME, stop_text
from .wiring import _event, _guarded, _skip, on_failure

STARTING = "Replay: starting; its progress shows on the Replay tab \u2026"
TAB_STARTING = "Starting: waiting for the device if another event is using it \u2026"
DEFAULT_PRESETS = ("tool_call", "json_extract", "code", "prose")
QUIET = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}
INTRO = (
    "Which k for **your** agent, from what it actually wrote: each recorded turn is replayed with teacher-forced "
    "passes of the target and the drafter (nothing is generated), so every k costs seconds, not a sweep. Upload a "
    "JSONL trace (one object per line: `{\"messages\": [...]}` in the OpenAI chat format, tool calls included, or "
    "`{\"prompt\": ..., \"completion\": ...}`), or use the sample trace or presets. Exact where the completion is "
    "the target's own greedy output (presets); an estimate elsewhere, and labelled so. The prediction uses this "
    "pair's calibration (shared with the other tabs; a short one is made when there is none); **Stop** stops it. "
    "Uses the Run tab's decoding settings and its draft confidence stop.")


@dataclass
class ReplayState:
    """One tab's last replay (held in the tab's gr.State): its result, what the token view needs to draw it,
    and how the last replay event ended (for the status line above the tabs)."""

    doc: ReplayResult | None = None
    drafter: str | None = None
    tokenizer: object | None = None  # the pair's tokenizer (shared, read-only; ModelPair's), to draw the token view
    special_ids: frozenset = field(default_factory=frozenset)
    stopped: bool = False
    outcome: str | None = None
    announced: str | None = None  # the request whose big replay was announced: pressed again, it runs


@dataclass
class ReplayUpdate:
    status: str
    state: ReplayState
    doc: ReplayResult | None = None  # the finished result: every panel is rebuilt from it
    errors: str | None = None  # the bad lines, when nothing could be replayed


def drafter_choices(run_choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(label, name) of the drafters a replay takes: the Run tab's (`run_choices`, the pair's), less 'auto'."""
    return [(label, name) for label, name in run_choices if name != "auto"]


def replay_default_drafter(choices) -> str:
    names = [name for _, name in choices]
    return SHOW_ME.drafter if SHOW_ME.drafter in names else names[0]


# --- the work ------------------------------------------------------------------------------------------------


def calibrations(pair, turns, drafter: str, store: CalibrationStore, how: str, progress,
                 sampling: SamplingConfig = GREEDY):
    """timing_of(drafter, prompt_ids) for the replay, from the pair's store (a short calibration where it has
    none): with how="once" one, on the turn of median prompt length; with "bucket" one per context-length bucket
    the turns fall in; each timed under `sampling`, the decoding replayed. Also returns how many were reused."""
    bucket = CalibrationStore.bucket
    firsts = calibration_contexts(turns, how)
    found, reused = {}, 0
    for i, (b, ids) in enumerate(firsts.items()):
        n = len(ids)
        tick = (lambda f, m, i=i, n=n: progress((i + f) / len(firsts), f"on {n} tokens of context \u00b7 {m}"))
        found[b], was = calibrated_timing(pair, ids, make_proposer(pair, drafter), store,
                                          SHORT_CALIBRATION.under(sampling), progress=tick)
        reused += was
    if how == "once":
        only = found[next(iter(found))]
        return (lambda d, ids: only), reused, len(found)
    return (lambda d, ids: found[bucket(len(ids))]), reused, len(found)


def _tracked(work, tracker, state: ReplayState, lock=None, name: str = "playground-replay"):
    """`work(emit, stopped)` in a worker thread (holding `lock`), its status lines as updates; returns its result."""
    yield ReplayUpdate(tracker.line(), state)
    with Background(work, name, lock) as bg:
        for line in progress_lines(bg, tracker):
            yield ReplayUpdate(line, state)
        bg.raise_error()
    return bg.result


def _read(pair, req: ReplayRequest, limits: Limits, state: ReplayState, started: float):
    """(turns, errors, turns skipped past the cap) of a trace source, read in a worker thread while the status line
    says how far; ([], [], 0) for presets (generated in the worker)."""
    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so no text can be replayed")
    if req.source == "presets":
        return [], [], 0
    path = Path(req.path if req.source == "file" else SAMPLE_TRACE)
    tracker = ReplayTracker(f"{SOURCES[req.source]}, {size_text(path.stat().st_size)}: each turn tokenized for "
                            f"the pair", started, ["Reading"])

    def work(emit, stopped):
        return read_trace(path, pair.tokenizer, pair.eos_ids, limits, pair.max_context, ticker(emit, stopped))

    trace = yield from _tracked(work, tracker, state, name="playground-read")
    return trace.turns, trace.errors, trace.skipped_turns


def _announce(pair, req: ReplayRequest, state: ReplayState, turns, errors, skipped: int, limits: Limits):
    """The line that stops a big replay before it starts, once per request (None: run it)."""
    with serving.device_lock(pair.device):
        per_token = probe_seconds_per_token(pair, turns[0], limits.replay_chunk_tokens)
    note = announcement(turns, skipped, len(errors) - bool(skipped), estimate_seconds(turns, per_token, req.drafter),
                        limits)
    state.announced = repr(req) if note else None
    return note


def _work(pair, req: ReplayRequest, turns, errors, limits: Limits, store: CalibrationStore):
    """The replay's work in its worker thread: the presets' turns (generated), the calibrations, the replay."""

    def work(emit, stopped):
        tick = ticker(emit, stopped)
        replayed = list(turns)
        if req.source == "presets":
            phase(emit, "Generating")
            for i, name in enumerate(req.presets):
                tick(i / len(req.presets), f"the target's greedy output of preset {i + 1} of {len(req.presets)} "
                                           f"\u00b7 {name}")
                replayed += preset_turns(pair, [name])
        phase(emit, "Calibrating")
        timing_of, reused, count = calibrations(pair, replayed, req.drafter, store, req.calibration, tick,
                                                req.sampling)
        phase(emit, "Replaying")
        options = ReplayOptions(drafters=[req.drafter], ks=req.ks, controllers=req.controllers, timing_of=timing_of,
                                sampling=req.sampling, limits=limits, records="full", errors=errors,
                                min_confidence=req.min_confidence)
        result = replay_turns(pair, replayed, options, progress=tick)
        result.calibration = CalibrationUse(req.calibration, count, reused)
        return result

    return work


def _tracker(req: ReplayRequest, turns, started: float) -> ReplayTracker:
    """The replay's status lines: its steps, and what it replays with what, as the detail."""
    n = len(req.presets) if req.source == "presets" else len(turns)
    what = f"{n} preset(s)" if req.source == "presets" else f"{n} turns of {SOURCES[req.source]}"
    arms = ", ".join([f"k = {','.join(map(str, req.ks))}", *[f"{c} k" for c in req.controllers]])
    stop = f", {stop_text(req.min_confidence)}" if req.min_confidence is not None else ""
    how = "one, on the median prompt" if req.calibration == "once" else "one per context length"
    steps = ["Generating"] * (req.source == "presets") + ["Calibrating", "Replaying"]
    return ReplayTracker(f"{what} with {req.drafter}: {arms}; {req.sampling.describe()}{stop}; calibration: {how}",
                         started, steps)


def stream_replay(provider: PairProvider, state: ReplayState | None, session, req: ReplayRequest,
                  limits: Limits) -> Iterator[ReplayUpdate]:
    """Replay the request's turns with its drafter at every k and controller asked for; status lines while it
    runs, then the result. Bad lines are listed; with no turn left, the list and a PlaygroundError."""
    started = time.monotonic()
    state = state if state is not None else ReplayState()
    state.stopped, state.outcome = False, None
    provider = provider.for_session(session)  # the pair this tab chose
    try:
        pair = yield from mapped(load_with_progress(provider, started), lambda line: ReplayUpdate(line, state))
        offered = available_drafters(pair)
        if req.drafter not in offered:
            raise PlaygroundError(f"the {req.drafter} drafter cannot replay on this pair; choose one of "
                                  f"{', '.join(offered)}")
        turns, errors, skipped = yield from _read(pair, req, limits, state, started)
        if req.source != "presets" and not turns:
            if not errors:
                raise PlaygroundError("nothing to replay: the file holds no turn (blank lines only?)")
            listing = errors_markdown([LineError(e.line, e.field, e.message) for e in errors])
            yield ReplayUpdate(f"\u26a0 Nothing to replay: {len(errors)} line(s) refused, listed below", state,
                               errors=listing)
            raise PlaygroundError(f"nothing to replay: the file's {len(errors)} bad line(s) are listed on the tab")
        if req.first_turns:
            turns = turns[: req.first_turns]
        elif req.source != "presets" and is_big(turns) and state.announced != repr(req):
            yield ReplayUpdate(ESTIMATING, state)
            state.outcome = _announce(pair, req, state, turns, errors, skipped, limits)
            if state.outcome:
                yield ReplayUpdate(state.outcome, state)
                return
        work = _work(pair, req, turns, errors, limits, provider.calibrations)
        doc = yield from _tracked(work, _tracker(req, turns, started), state, serving.device_lock(pair.device))
        state.doc, state.drafter = doc, req.drafter
        state.tokenizer, state.special_ids = pair.tokenizer, frozenset(pair.eos_ids)
        state.outcome = done_status(doc, req.drafter, time.monotonic() - started)
        if not doc.turns:
            state.outcome = "\u26a0 Nothing was replayed: every turn was refused (listed below)"
        yield ReplayUpdate(state.outcome, state, doc)
    except GeneratorExit:  # Stop cancelled the event: the event chained after it says so
        state.stopped = True
        raise


# --- the tab -------------------------------------------------------------------------------------------------


def replay_tab(ui, run_choices: list[tuple[str, str]]) -> None:
    """The Replay tab's components (`run_choices`: the Run tab's drafters)."""
    choices = drafter_choices(run_choices)
    presets, _ = load_presets(strict=False)
    gr.Markdown(INTRO, elem_id="replay-intro")
    with gr.Row(elem_id="replay-source-row"):
        ui.rp_source = gr.Radio([(label, key) for key, label in SOURCES.items()], value="sample",
                                label="Replay", elem_id="replay-source", min_width=220)
        ui.rp_file = gr.File(label="Trace file (JSONL)", file_types=[".jsonl", ".json", ".txt"], type="filepath",
                             file_count="single", elem_id="replay-file", min_width=220, height=120)
        ui.rp_presets = gr.Dropdown([(f"{p.title} \u00b7 {p.kind}", n) for n, p in presets.items()],
                                    value=[n for n in DEFAULT_PRESETS if n in presets], multiselect=True,
                                    label="Presets", elem_id="replay-presets", min_width=220,
                                    info="their completions are the target's own greedy output: exact")
    with gr.Row(elem_id="replay-settings-row"):
        ui.rp_drafter = gr.Radio(choices, value=replay_default_drafter(choices), label="Drafter",
                                 elem_id="replay-drafter", min_width=220)
        ui.rp_ks = gr.Textbox("1-8", label="k values", elem_id="replay-ks", min_width=140, max_lines=1,
                              info="e.g. 1-8 or 1,2,4,8 (1 to 16)")
        ui.rp_controllers = gr.CheckboxGroup([("adaptive k", "adaptive"), ("transformers' heuristic", "heuristic")],
                                             value=["heuristic"], label="Also simulate", elem_id="replay-controllers",
                                             min_width=200, info="greedy only; adaptive k needs the calibration")
        ui.rp_first = gr.Number(value=0, precision=None, label="First turns", elem_id="replay-first", min_width=120,
                                info="0 = all, up to the cap")
        ui.rp_calibration = gr.Radio([("once, on the median prompt", "once"), ("per context length", "bucket")],
                                     value="once", label="Calibration", elem_id="replay-calibration", min_width=200)
    ui.rp_btn = gr.Button("Run replay", variant="primary", elem_id="replay-btn", size="md")
    ui.rp_status = gr.Markdown("", elem_id="replay-status")
    ui.rp_verdict = gr.HTML("", elem_id="replay-verdict")
    ui.rp_plot = gr.Plot(replay_figure(None), show_label=False, elem_id="replay-plot")
    ui.rp_table = gr.HTML("", elem_id="replay-table")
    ui.rp_errors = gr.Markdown("", elem_id="replay-errors")
    gr.Markdown("#### Token view: what would have been accepted", elem_id="replay-token-title")
    with gr.Row(elem_id="replay-view-row"):
        ui.rp_turn = gr.Dropdown([], value=None, label="Turn", elem_id="replay-turn", min_width=260, scale=3)
        ui.rp_arm = gr.Dropdown([], value=None, label="k", elem_id="replay-k", min_width=140, scale=1)
    ui.rp_turn_note = gr.Markdown("", elem_id="replay-turn-note")
    gr.HTML(legend_html(), elem_id="replay-legend")
    ui.rp_tokens = gr.HTML(EMPTY_TOKENS, elem_id="replay-tokens", padding=False, js_on_load=javascript.TOKEN_DETAILS,
                           html_template='<div class="token-box">${value}</div>'
                                         '<div class="tok-detail" aria-live="polite"></div>')
    with gr.Accordion("Replay result (JSON)", open=False):
        ui.rp_json = gr.JSON(elem_id="replay-json")
    ui.rp_state = gr.State(None)  # a ReplayState, per tab


def _outputs_of(u: ReplayUpdate) -> tuple:
    """A handler update -> (status, verdict, plot, table, errors, turn, k, turn note, tokens, JSON, state)."""
    s = gr.skip()
    if u.doc is None:
        return (u.status, s, s, s, _skip(u.errors), s, s, s, s, s, u.state)
    doc, drafter = u.doc, u.state.drafter
    arm = default_arm(doc)
    note, tokens = token_view(doc, drafter, 0, arm, u.state.tokenizer, u.state.special_ids)
    return (u.status, replay_recommendation_html(doc, drafter), replay_figure(doc, drafter),
            replay_per_k_html(doc, drafter), errors_markdown(doc.errors),
            gr.update(choices=turn_choices(doc), value=0 if doc.turns else None),
            gr.update(choices=arm_choices(doc), value=arm), note, tokens, jsonable(public_doc(doc)), u.state)


def wire_replay(ui, provider: PairProvider, limits: Limits) -> None:
    """The Replay event (/replay), its Stop, the line above the tabs after it, and the token view's redraws."""
    device_events = {"concurrency_limit": 1, "concurrency_id": f"device:{provider.device}"}
    controls = {"state": ui.rp_state, "source": ui.rp_source, "trace_file": ui.rp_file, "presets": ui.rp_presets,
                "drafter": ui.rp_drafter, "ks": ui.rp_ks, "controllers": ui.rp_controllers,
                "calibration": ui.rp_calibration, "decoding": ui.decoding, "temperature": ui.temperature,
                "top_k": ui.top_k, "top_p": ui.top_p, "seed": ui.seed, "min_confidence": ui.min_confidence,
                "first_turns": ui.rp_first, "moved": ui.moved}  # a gr.State: no API parameter
    outputs = [ui.rp_status, ui.rp_verdict, ui.rp_plot, ui.rp_table, ui.rp_errors, ui.rp_turn, ui.rp_arm,
               ui.rp_turn_note, ui.rp_tokens, ui.rp_json, ui.rp_state]

    def run_replay(session, values):
        """Replay recorded turns (the sample trace, an uploaded JSONL trace or presets) with one drafter at the
        given k values (e.g. '1-8') and controllers: per output shape the predicted speed-up of each k, the
        recommended k (or why none), break-even alpha per k, the bad lines, and a token view."""
        state = values.pop("state")
        if state is not None:
            state.stopped, state.outcome = False, None

        def views():
            refuse_moved(values.pop("moved", None), values)
            names = [name for _, name in drafter_choices(provider.for_session(session).drafter_choices())]
            request = parse_replay(values, names, limits)
            yield from stream_replay(provider, state, session, request, limits)

        yield from _guarded(views(), _outputs_of, len(outputs))

    event, inputs = _event(run_replay, ui.session, controls)
    ui.rp_btn.click(None, None, [ui.status], js=f"() => {json.dumps(STARTING)}", **QUIET)
    ui.rp_btn.click(None, None, [ui.rp_status], js=javascript.starting(TAB_STARTING, "#replay-status"), **QUIET)
    replay_ev = ui.rp_btn.click(event, inputs, outputs, api_name="replay", show_progress="minimal",
                                show_progress_on=[ui.activity], **device_events)
    ui.stop_btn.click(None, None, None, cancels=[replay_ev], queue=False)

    def after_replay(state, status):
        """Runs after the replay: 'Stopped' (Stop turned the line above the tabs to 'Stopping', and the replay
        may not have heard it yet), or how it ended, on the status line above the tabs."""
        if (state is not None and state.stopped) or (isinstance(status, str) and status.startswith("Stopping")):
            if state is not None:
                state.stopped = False
            line = "Stopped: the replay was stopped; the tab keeps the last finished one."
            return line, line
        if isinstance(status, str) and status.startswith(STARTING[:14]):
            done = state.outcome if state is not None and state.outcome else None
            return fold(done) if done else "The replay did not finish: its tab says why.", gr.skip()
        return gr.skip(), gr.skip()

    replay_ev.then(after_replay, [ui.rp_state, ui.status], [ui.status, ui.rp_status], **QUIET)
    on_failure(replay_ev, STARTING, "Replay", ui.status, ui.rp_status)

    def redraw(state, turn, arm):
        if state is None or state.doc is None:
            return gr.skip(), gr.skip()
        return token_view(state.doc, state.drafter, turn, arm, state.tokenizer, state.special_ids)

    gr.on([ui.rp_turn.change, ui.rp_arm.change], redraw, [ui.rp_state, ui.rp_turn, ui.rp_arm],
          [ui.rp_turn_note, ui.rp_tokens], **QUIET)
    ui.rp_file.upload(lambda f: "file", [ui.rp_file], [ui.rp_source], **QUIET)
    ui.rp_presets.input(lambda p: "presets", [ui.rp_presets], [ui.rp_source], **QUIET)

    def refresh_drafters(session, current):
        """The drafters of the pair this tab chose on the Run tab, when it is not the app's (the tab was built with
        those); a choice made meanwhile is kept when the pair offers it."""
        chosen = provider.for_session(session)
        if chosen is provider:
            return gr.skip()
        choices = drafter_choices(chosen.drafter_choices())
        names = [name for _, name in choices]
        return gr.update(choices=choices, value=current if current in names else replay_default_drafter(choices))

    ui.replay_tab.select(refresh_drafters, [ui.session, ui.rp_drafter], [ui.rp_drafter], **QUIET)
