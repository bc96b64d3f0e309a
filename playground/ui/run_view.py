"""The Run tab's content (no gradio here): one `RunView` per update of the tab, and the words of its status line,
built from the tab's `RunResult` (the run event is in run_panel.py).

The visible line always says what is happening now: the model loading (progress.load_with_progress), the
calibration adaptive k makes the first time (with its share done and the time left), the prefill, the iteration
reached, and at the end what the run gave.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..core.records import RunSummary
from ..run import CALIBRATING
from . import markup, verdicts
from .progress import Tracker, clock_text
from .session import RunResult, Session


@dataclass
class RunView:
    session: Session
    status: str
    tokens: str | None = None
    counters: str | None = None
    figures: markup.RunFigures | None = None
    check: str | None = None
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


def about_text(run: RunResult) -> str:
    """What runs: the drafter, k, decoding, the prompt's size, the schema, the setup (after the line's news)."""
    request = run.request
    return (f"drafter {run.drafter}, k = {markup.k_text(request)}, {request.sampling.describe()}, "
            f"{len(run.prompt_ids)} prompt tokens, up to {request.max_new_tokens} new{markup.constraint_text(run)}"
            f" \u00b7 {run.setup}")


def running_text(run: RunResult, now: str, seconds: float) -> str:
    """A line while the run goes: what it does now and for how long first, with no ' · ' between them, so that
    markup.fold keeps both in sight and folds the rest."""
    return f"Running: {now}, {clock_text(seconds)} \u2026 \u2014 {about_text(run)}"


def first_view(session: Session, run: RunResult, calibrating: bool) -> RunView:
    """The tab as the run starts: empty tokens, counters and charts; the prediction as far as one exists."""
    now = f"{CALIBRATING} first (once per pair, drafter, context length and decoding)" if calibrating else "prefill"
    return RunView(session, running_text(run, now, 0.0), tokens="",
                   counters=markup.counters_html(None, run.request.max_new_tokens, True),
                   figures=markup.figures([], None), check=markup.check_html(run.preset, None),
                   prediction=verdicts.prediction_markdown(session))


def progress_text(run: RunResult, iterations: int, seconds: float) -> str:
    """The line while the loop runs: the iteration reached and the time so far."""
    later = ("tokens and charts when it ends, so that drawing them does not slow what is compared"
             if not run.streamed else "charts when it ends")
    return running_text(run, f"iteration {iterations} ({later})", seconds)


def calibrating_text(run: RunResult, tracker: Tracker) -> str:
    """The line while adaptive k's calibration runs: how far it is and the time left."""
    return running_text(run, tracker.doing(), time.monotonic() - tracker.started)


def waiting_text(run: RunResult, seconds: float) -> str:
    """The line while nothing new came (the prefill, or a slow iteration)."""
    return running_text(run, "prefill" if len(run.records) == 0 else f"iteration {len(run.records)}", seconds)


def done_text(session: Session, run: RunResult, summary: RunSummary, seconds: float) -> str:
    """The line when the run ended: what it gave, with what, where, how long; the drafter's memory after it."""
    request = run.request
    return (f"Done: {summary.new_tokens} new tokens in {summary.target_passes} target passes, finished by "
            f"{summary.finished} \u00b7 drafter {run.drafter}, k = {markup.k_text(request, summary)}, "
            f"{request.sampling.describe()} \u00b7 {run.setup} \u00b7 {clock_text(seconds)}"
            + (verdicts.run_load_note(run) if run.streamed else "")
            + (f" \u00b7 {held}" if (held := session.conversation.describe(request.drafter)) else "")
            + markup.constraint_text(run, summary))
