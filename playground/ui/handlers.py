"""The browser playground's events, as plain functions and generators (no gradio here).

`blocks.py` wires these to components; tests call them directly. The run event (run_panel.py), the compare event
(here) and the calibrate and sweep events (measure.py) take the tab's `Session` (kept per browser tab in a `gr.State`) and a
request already parsed and validated (`session.RunRequest` / `SweepRequest`); each event yields view objects
that blocks.py turns into component updates, and raises `PlaygroundError`, with a message for a person, for
what it can only find out on the pair (a prompt longer than the target's context, an unknown preset, a
drafter that cannot load). The work runs in a worker thread under the device's lock (serving.py says how).
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..core import engine
from ..core.records import summarize
from ..envinfo import describe_setup
from ..errors import PlaygroundError
from ..inputs.presets import get_preset, load_presets
from ..lab.trust import MachineMonitor
from ..pairs.registry import PAIRS, ModelPolicy
from . import markup, serving, verdicts
from .downloads import document, save_document
from .progress import clock_text, eta_text, load_with_progress, loading_message, mapped
from .serving import Background, PairProvider, stoppable
from .session import Session, run_timing

# --- views: one update of a panel each; None for a field means 'unchanged' ----------------------------------


@dataclass
class CompareView:
    session: Session
    status: str
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


@dataclass
class StoppedView:
    status: str | None = None
    counters: str | None = None
    figures: markup.RunFigures | None = None
    sweep_status: str | None = None
    tokens: str | None = None  # a stopped run that was not streamed: its tokens, drawn now


@dataclass
class PresetView:
    prompt: str
    max_new_tokens: int | None
    chat: bool
    info: str


@dataclass
class PairView:
    session: Session
    drafters: list  # (label, name) for the drafter radio
    info: str


# --- events -------------------------------------------------------------------------------------------------


def stopped_view(session: Session | None) -> StoppedView:
    """What to show after a Stop (nothing when the last event was not stopped)."""
    what = session.stopped if session is not None else None
    if what is None:
        return StoppedView()
    session.stopped = None
    again = " Press Run to start again."
    if what == "run" and session.run is not None:
        run = session.run
        s = summarize(run.records)
        return StoppedView(f"Stopped after {s.new_tokens} new tokens in {s.target_passes} iterations; the partial "
                           f"run stays on the page (it is not saved for Compare or Download).{again}",
                           markup.counters_html(s, run.request.max_new_tokens, running=False),
                           markup.figures(run.records, s), tokens=None if run.streamed else run.tokens_html or "")
    if what == "compare":
        return StoppedView("Stopped the plain run: no measured speed-up this time." + again)
    if what == "calibrate":
        return StoppedView("Calibration stopped: nothing was kept." + again)
    if what == "sweep":
        return StoppedView("Sweep stopped: no result." + again, sweep_status="Sweep stopped: no result.")
    if what == "batch":
        return StoppedView("Batch timing stopped: nothing was kept." + again)
    return StoppedView("Stopped." + again)


@stoppable("compare")
def stream_compare(provider: PairProvider, session: Session | None) -> Iterator[CompareView]:
    """Plain decoding of the last run's prompt and length, right after it; the measured ratio beside the
    prediction, with the verdict of the comparison (one adjacent pair; other processes on the cores)."""
    started = time.monotonic()
    run = session.run
    if run is None or not run.finished:
        raise PlaygroundError("there is no finished speculative run to compare with: press Run first (the "
                              "'Compare with plain' button runs one and then plain decoding right after)")
    pair = yield from mapped(load_with_progress(provider, started), lambda line: CompareView(session, line))
    records: list = []
    begun: list[float] = []

    def work(emit, stopped):
        begun.append(time.perf_counter())
        with MachineMonitor() as monitor:
            for rec in engine.plain_generate(pair, run.prompt_ids, sampling=run.sampling,
                                             max_new_tokens=run.request.max_new_tokens, constraint=run.constraint):
                records.append(rec)
                emit(None)
                if stopped():
                    break
        run.plain_machine = monitor.load

    n_max = run.request.max_new_tokens
    with Background(work, "playground-plain", serving.device_lock(pair.device)) as bg:
        last = 0.0
        while not bg.finished:
            bg.poll(timeout=0.25)
            now = time.monotonic()
            if now - last >= 0.5 and not bg.finished:
                n = max(0, len(records) - 1)
                left = eta_text(now - begun[0], n / n_max) if begun else None
                yield CompareView(session, f"Plain decoding of the same prompt, for comparison: {n} / {n_max} tokens"
                                           f"{', ' + left if left else ''} \u00b7 {clock_text(now - started)} \u2026")
                last = now
        bg.raise_error()
    plain = summarize(records)
    run.plain = plain
    run.plain_gap_s = begun[0] - run.ended_at if begun and run.ended_at else None
    run.plain_setup = describe_setup(pair)
    ratio = run.measured_speedup
    doc = document(provider.calibrations, session)
    verdict = verdicts.compare_verdict(run, run_timing(session, provider.calibrations))
    note = (f"not to be trusted: {verdict.failures[0].message}" if not verdict.trusted
            else "a single pair: a first look, not a figure to rely on")
    status = (f"Compared: speculative {run.summary.tokens_per_s:.1f} tokens/s, plain {plain.tokens_per_s:.1f} tokens/s"
              + (f" \u2192 measured speed-up {ratio:.2f}\u00d7" if ratio else "")
              + f" (one adjacent pair of runs, prefill excluded) \u2014 {note} \u00b7 "
              + clock_text(time.monotonic() - started))
    yield CompareView(session, status, verdicts.prediction_markdown(session, run_timing(session, provider.calibrations)), doc,
                      save_document(doc))


def preset_choices(directory=None) -> tuple[list[tuple[str, str]], list[str]]:
    """Dropdown choices (label, name), with a first entry for the user's own prompt; and any preset errors."""
    presets, errors = load_presets(directory, strict=False)
    choices = [("your own prompt", "")]
    choices += [(f"{p.title} \u00b7 {p.kind}", name) for name, p in presets.items()]
    return choices, [str(e) for e in errors]


def load_preset_view(provider: PairProvider, name, current_prompt: str = "",
                     session: Session | None = None) -> PresetView:
    """Fill the prompt box with the exact text the model sees for a preset (with the tokenizer of the pair the
    tab chose), and its max new tokens."""
    provider = provider.for_session(session)
    if not name:
        return PresetView(current_prompt or "", None, True,
                          "Your own prompt: sent as one user turn of the chat template (untick it to send raw text).")
    preset = get_preset(name)
    pair = serving.get_pair(provider)
    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so presets cannot be shown as text")
    text = preset.prompt_text(pair.tokenizer)
    checked = ("output checked: valid JSON" + (" against the preset's JSON Schema" if preset.output_schema else "")
               if preset.checks_output else "free text (no output check)")
    info = (f"**{html.escape(preset.title)}** \u00b7 kind `{preset.kind}` \u00b7 {preset.max_new_tokens} max new "
            f"tokens \u00b7 {checked}  \n{html.escape(preset.description)}")
    return PresetView(text, preset.max_new_tokens, False, info)


def preset_loading(provider: PairProvider, session: Session | None) -> str | None:
    """The preset box's note while a preset waits for its pair's tokenizer (None when the pair is loaded)."""
    chosen = provider.for_session(session)
    return None if chosen.loaded() else f"{loading_message(chosen.choice)} \u2026"


def pair_choices(provider: PairProvider) -> tuple[list[tuple[str, str]], str, bool]:
    """The pair menu: (label, value) per named pair (the app's own pair first if it is a custom one), the
    current value, and whether other models may be typed in (PLAYGROUND_ALLOW_ANY_MODEL=1)."""
    if provider.fixed:  # an app built around one loaded pair (tests, embedding): nothing to choose
        name = provider.get().target_name
        return [(name, name)], name, False
    choices = [(f"{p.name} \u00b7 {p.describe()}" + (" (gated)" if p.gated else ""), p.name) for p in PAIRS.values()]
    value = serving.menu_value(provider.choice)
    if value not in PAIRS:
        choices.insert(0, (f"custom \u00b7 {value}", value))
    return choices, value, ModelPolicy.from_env().allow_any


def select_pair(provider: PairProvider, session: Session | None, value) -> PairView:
    """Choose this tab's model pair (it loads on the next event that needs it); the drafters it offers."""
    session = session if session is not None else Session()
    if provider.fixed:
        if value != provider.get().target_name:
            raise PlaygroundError(f"this app serves one pair, {provider.get().target_name!r}")
        return PairView(session, provider.drafter_choices(), markup.pair_info(provider))
    choice = provider.choice_for(value)
    session.pair = None if serving.same_pair(choice, provider.choice) else choice
    session.timings.clear()  # calibrations, runs, sweeps and the drafters' memories belong to the pair that made them
    session.conversation.forget()
    session.run = session.sweep = session.calibration = session.sweep_status = None
    session.batch = session.batch_status = session.whatif_from = None
    chosen = provider.for_session(session)
    return PairView(session, chosen.drafter_choices(), markup.pair_info(chosen))


def forget_runs(session: Session | None) -> tuple[str, Session]:
    """The Run tab's "Forget earlier runs": empty this tab's drafters' memories of its runs (the suffix tree)."""
    session = session if session is not None else Session()
    held = session.conversation.forget()
    return (f"Forgot this tab's earlier runs: {held} before; a drafter that remembers starts from its run's own "
            "text again."), session
