"""The Run tab's event: one speculative run of the request through playground.run, streamed to the page (its
views and status words are in run_view.py; the layout in blocks.py, the wiring in wiring.py).

The pair loads first if it has to (progress.load_with_progress). `prepare` resolves the prompt within the limits
and builds the proposer over the tab's conversation (the drafters' memory, the k controller's state, the
calibrations). The work then runs in a worker thread (serving.Background) under the device's lock: adaptive k's
first calibration, with its progress on the visible line, then the loop, each record drawn as it comes (at most
every YIELD_EVERY_S). Closing the generator (Stop) stops the worker at the next record; the partial run stays in
the session (handlers.stopped_view). `MachineMonitor` watches the other processes' CPU use meanwhile, for the
verdict of a Compare (verdicts.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

from ..core.records import Iteration, summarize
from ..envinfo import describe_setup, environment
from ..lab.calibration import CalibrationStore
from ..lab.trust import MachineMonitor
from ..limits import Limits
from ..run import CALIBRATING, PreparedRun, prepare
from . import markup, serving, verdicts
from .downloads import document, save_document
from .progress import Tracker, load_with_progress, mapped, phase, ticker
from .render import TokenRenderer
from .run_view import RunView, calibrating_text, done_text, first_view, progress_text, waiting_text
from .serving import Background, PairProvider, stoppable
from .session import RunRequest, RunResult, Session, run_timing

# Each update costs the run the server's postprocessing of every output (CPU and GIL), and a browser on the same
# cores its drawing: scripts/bench_overhead.py --chromium measures both. Redrawing the three plotly charts while
# streaming cost a run a third of its speed there, tokens every 0.25 s another few percent; so a streamed run
# draws its tokens and counters twice a second and its charts once, at the end.
YIELD_EVERY_S = 0.5  # token / counter updates at most this often
HEARTBEAT_QUIET_S = 0.5  # status-only updates of a run that is not streamed (Compare's), as for the plain run


@stoppable("run")
def stream_run(provider: PairProvider, session: Session | None, request: RunRequest,
               limits: Limits | None = None, stream_tokens: bool = True) -> Iterator[RunView]:
    """Speculative decoding of the prompt, streamed: token HTML and counters as records arrive, the charts once,
    when it ends.

    stream_tokens=False (Compare's run): the status line only until the end, as for the plain run after it. A
    browser drawing the tokens on the same cores slows the run it shows (bench_overhead.py --chromium), so
    streamed, one side of the comparison would pay for it and the other not."""
    started = time.monotonic()
    pair = yield from mapped(load_with_progress(provider, started), lambda line: RunView(session, line))
    prepared = prepare(pair, request.spec(), session.conversation, provider.calibrations,
                       limits or Limits.from_env())
    run = _result(prepared, request, stream_tokens)
    session.run = run  # the session keeps the partial run if the user stops it
    special = getattr(pair.tokenizer, "all_special_ids", []) if pair.tokenizer is not None else []
    renderer = TokenRenderer(pair.tokenizer, greedy=request.sampling.greedy, special_ids=special)
    yield first_view(session, run, prepared.needs_calibration)
    tracker = Tracker("Running", started, "prefill")
    with Background(_work(prepared, run), "playground-run", serving.device_lock(pair.device)) as bg:
        yield from _progress(bg, session, run, tracker, renderer, started)
        bg.raise_error()
    yield _done(provider.calibrations, session, run, prepared, renderer, started)


def _result(prepared: PreparedRun, request: RunRequest, streamed: bool) -> RunResult:
    """The session's record of the run, before it begins (its records are the prepared run's, as they come)."""
    if prepared.spec.min_confidence is None and request.min_confidence is not None:
        request = replace(request, min_confidence=None)  # a drafter with nothing to stop on: run.py drops it
    return RunResult(request=request, prompt_ids=prepared.prompt_ids, drafter=prepared.drafter,
                     records=prepared.kept, summary=None, text="", preset=prepared.preset, check=None,
                     setup=describe_setup(prepared.pair), environment=environment(prepared.pair), finished=False,
                     streamed=streamed, constraint=prepared.constraint)


def _work(prepared: PreparedRun, run: RunResult):
    """The worker's job: the calibration adaptive k needs (its progress on the page), then the loop, each record
    emitted as it comes, the other processes' CPU use watched meanwhile."""

    def work(emit, stopped):
        if prepared.needs_calibration:
            phase(emit, CALIBRATING)
            prepared.calibrate(ticker(emit, stopped))
            phase(emit, "")
        monitor = MachineMonitor().__enter__()
        gen = prepared.records()
        try:
            for rec in gen:
                emit(rec)
                if stopped():
                    return
        finally:
            gen.close()
            run.ended_at = time.perf_counter()
            run.machine = monitor.stop()

    return work


def _progress(bg: Background, session: Session, run: RunResult, tracker: Tracker, renderer: TokenRenderer,
              started: float) -> Iterator[RunView]:
    """While the worker runs: the records drawn, and a status update now and then (tokens and counters too when
    the run is streamed; a heartbeat when nothing came, so that Stop is never kept waiting)."""
    last_yield = 0.0
    dirty, n_iterations = False, 0
    while not bg.finished:
        for rec in tracker.take(bg.poll(timeout=YIELD_EVERY_S)):
            renderer.add(rec)
            n_iterations += isinstance(rec, Iteration)
            dirty = True
        now = time.monotonic()
        if bg.finished:
            break
        if dirty and not run.streamed and n_iterations and now - last_yield >= HEARTBEAT_QUIET_S:
            run.tokens_html = renderer.html()  # drawn only if the run is stopped (stopped_view)
            yield RunView(session, progress_text(run, n_iterations, now - started))
            last_yield, dirty = now, False
        elif dirty and run.streamed and now - last_yield >= YIELD_EVERY_S:
            summary = summarize(run.records)
            yield RunView(session, progress_text(run, summary.target_passes, now - started),
                          tokens=renderer.html(), counters=markup.counters_html(summary, run.request.max_new_tokens,
                                                                                True))
            last_yield, dirty = now, False
        elif tracker.phase and (tracker.ticked or now - last_yield >= serving.HEARTBEAT_S):
            yield RunView(session, calibrating_text(run, tracker))
            last_yield = now
        elif now - last_yield >= serving.HEARTBEAT_S:
            yield RunView(session, waiting_text(run, now - started))
            last_yield = now


def _done(store: CalibrationStore, session: Session, run: RunResult, prepared: PreparedRun,
          renderer: TokenRenderer, started: float) -> RunView:
    """The finished run: its text, output check and summary kept in the session; the page drawn whole."""
    finished = prepared.finish()
    run.text, run.summary, run.check, run.finished = finished.text, finished.summary, finished.check, True
    doc = document(store, session)
    summary = finished.summary
    return RunView(session, done_text(session, run, summary, time.monotonic() - started), tokens=renderer.html(),
                   counters=markup.counters_html(summary, run.request.max_new_tokens, False),
                   figures=markup.figures(run.records, summary), check=markup.check_html(run.preset, run.check),
                   prediction=verdicts.prediction_markdown(session, run_timing(session, store)),
                   doc=doc, download=save_document(doc))
