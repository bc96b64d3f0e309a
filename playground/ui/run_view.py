"""The Run tab's content (no gradio here): one `RunView` per update of the tab, and the words of its status line,
built from the tab's `RunResult` (the run event is in run_panel.py).

The visible line always says what is happening now: the model loading (progress.load_with_progress), the
calibration adaptive k makes the first time (with its share done and the time left), the prefill, the iteration
reached, and at the end what the run gave.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.records import RunSummary
from . import markup, verdicts
from .progress import clock_text
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


def head_text(run: RunResult) -> str:
    """What is running: the drafter, k, decoding, the prompt's size, the schema, the setup."""
    request = run.request
    return (f"Running: drafter {run.drafter}, k = {markup.k_text(request)}, {request.sampling.describe()}, "
            f"{len(run.prompt_ids)} prompt tokens, up to {request.max_new_tokens} new{markup.constraint_text(run)}"
            f" \u00b7 {run.setup}")


def first_view(session: Session, run: RunResult, calibrating: bool) -> RunView:
    """The tab as the run starts: empty tokens, counters and charts; the prediction as far as one exists."""
    now = "calibrating for adaptive k first (once per pair, drafter and context length)" if calibrating else "prefill"
    return RunView(session, f"{head_text(run)} \u2014 {now} \u2026", tokens="",
                   counters=markup.counters_html(None, run.request.max_new_tokens, True),
                   figures=markup.figures([], None), check=markup.check_html(run.preset, None),
                   prediction=verdicts.prediction_markdown(session))


def progress_text(run: RunResult, iterations: int, seconds: float) -> str:
    """The line while the loop runs: the iteration reached and the time so far."""
    later = ("tokens and charts when it ends, so that drawing them does not slow what is compared"
             if not run.streamed else "charts when it ends")
    return f"{head_text(run)} \u2014 iteration {iterations} \u00b7 {clock_text(seconds)} ({later})"


def waiting_text(run: RunResult, seconds: float) -> str:
    """The line while nothing new came (the prefill, or a slow iteration)."""
    what = "prefill" if len(run.records) == 0 else f"iteration {len(run.records)}"
    return f"{head_text(run)} \u2014 {what} \u00b7 {clock_text(seconds)} \u2026"


def done_text(session: Session, run: RunResult, summary: RunSummary, seconds: float) -> str:
    """The line when the run ended: what it gave, with what, where, how long; the drafter's memory after it."""
    request = run.request
    return (f"Done: {summary.new_tokens} new tokens in {summary.target_passes} target passes, finished by "
            f"{summary.finished} \u00b7 drafter {run.drafter}, k = {markup.k_text(request, summary)}, "
            f"{request.sampling.describe()} \u00b7 {run.setup} \u00b7 {clock_text(seconds)}"
            + (verdicts.run_load_note(run) if run.streamed else "")
            + (f" \u00b7 {held}" if (held := session.conversation.describe(request.drafter)) else "")
            + markup.constraint_text(run, summary))
