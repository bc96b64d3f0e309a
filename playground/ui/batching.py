"""Verification at batch > 1 on the page (no gradio here): the 'Time batches 1, 4, 8' event (`stream_batch`:
lab.batch.batch_timing after the tab's prompt, in a worker thread under the device's lock, kept in the tab's
Session for the sweep chart) and the sweep chart's predicted lines per batch size (`batch_curves`, through
lab.batch.batch_predictions with the sweep's own calibration and the alpha it measured at each k; none for a
drafter the single-c model does not fit, as the sweep's own curves).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..envinfo import describe_setup
from ..lab.batch import NEARLY_FREE, batch_predictions, batch_table, batch_timing
from ..lab.calibration import Timing
from ..limits import Limits
from ..results.calibration import BatchResult
from ..results.speed import SweepResult
from . import charts, serving
from .progress import Tracker, clock_text, load_with_progress, mapped, progress_lines, ticker
from .serving import Background, PairProvider, stoppable
from .session import RunRequest, Session, encode_request
from .verdicts import pricing

if TYPE_CHECKING:
    import plotly.graph_objects as go

BATCHES = (1, 4, 8)
N_MAX = 9  # passes over 1..9 new tokens per sequence: k up to 8 (the sweep's default largest k)
SHORT = (4, 2)  # (timed, warm-up) cycles per batch and pass length, as the short calibration
LOOP_NOTE = ("The loop itself runs batch 1 (one request at a time): the batch lines are the cost model's predictions "
             "from the target's passes timed at each batch size, not measured speed-ups. Batched serving with "
             "speculation is measured on vLLM (the serving-engine backend), where continuous batching mixes "
             "requests.")
INTRO = ("**Time batches 1, 4, 8** times the target's pass over B copies of this prompt \u00d7 n = 1..9 new tokens "
         "each (no drafter): v(n) at each batch size, and the k up to which verification stays nearly free. The "
         "sweep chart then adds the predicted speed-up at batch 1, 4 and 8. " + LOOP_NOTE)


@dataclass
class BatchView:
    session: Session
    status: str
    figure: go.Figure | None = None  # the sweep chart with the batch lines (when the tab has a sweep)
    note: str | None = None


def sweep_timing(sweep: SweepResult | None) -> Timing | None:
    """The calibration a sweep (the tab's last, lab.speed.sweep's result) predicted from, if it kept one."""
    return Timing.from_dict(sweep.timing) if sweep is not None and sweep.timing is not None else None


def batch_curves(sweep: SweepResult | None, batch: BatchResult | None) -> dict[int, dict[int, float]] | None:
    """{B: {k: predicted speed-up}} for the sweep's fixed ks within the batch timing's pass lengths, or None.

    Each k takes the sweep's median alpha at that k and the drafter's cost from the sweep's calibration, which was
    timed at batch 1. None for a drafter with no single-c model (a hybrid: `no_lines`)."""
    timing = sweep_timing(sweep)
    if timing is None or batch is None or no_lines(sweep):
        return None
    curves: dict[int, dict[int, float]] = {}
    for row in sweep.table:
        k, alpha = row.k, row.alpha
        if not isinstance(k, int) or alpha is None or k > batch.n_max - 1:
            continue
        for b, by_k in batch_predictions(batch, timing.c, alpha, timing.overhead, ks=[k]).items():
            curves.setdefault(b, {})[k] = by_k[k]
    return curves or None


def no_lines(sweep: SweepResult | None) -> str:
    """Why the sweep's drafter gets no batch lines ('' where it gets them): the model's single c does not fit it."""
    return pricing(sweep.drafter).why if sweep is not None else ""


def batch_note(session: Session | None) -> str:
    """What the batch timing found (the lab's table), or what the button does before it ran."""
    doc = session.batch if session is not None else None
    if doc is None:
        return INTRO
    drawn = batch_curves(session.sweep, doc) is not None
    where = ("The chart above draws the predicted speed-up at each batch size (dotted, labelled on the right) at the "
             "sweep's \u03b1 per k." if drawn else f"No batch lines for the sweep's drafter: {no_lines(session.sweep)}."
             if no_lines(session.sweep) else "Sweep k to see the predicted speed-up at each batch size on the chart.")
    table = batch_table(doc, doc.setup or "this machine").replace("\nThe loop runs batch 1; batched serving "
                                                                        "with speculation is measured on vLLM.", "")
    return f"{where} {LOOP_NOTE}\n\n{table}"


def free_text(result: BatchResult) -> str:
    return ", ".join(f"k \u2264 {r.free_up_to_k} at batch {r.batch}" for r in result.rows)


@stoppable("batch")
def stream_batch(provider: PairProvider, session: Session | None, request: RunRequest, repeats: int | None = None,
                 warmup: int | None = None, limits: Limits | None = None) -> Iterator[BatchView]:
    """Time the target's pass at batch 1, 4 and 8 on this prompt's context; keep it in the session."""
    started = time.monotonic()
    limits = limits or Limits.from_env()
    reps = repeats if repeats is not None else SHORT[0]
    warm = warmup if warmup is not None else SHORT[1]
    pair = yield from mapped(load_with_progress(provider, started), lambda line: BatchView(session, line))
    ids, _ = encode_request(pair, request, N_MAX, limits)
    tracker = Tracker(f"Timing batches {', '.join(map(str, BATCHES))} on {len(ids)} tokens of context", started,
                      f"the target's pass over B sequences \u00d7 n = 1..{N_MAX} tokens, {warm} warm-up and {reps} "
                      f"timed cycles each")
    yield BatchView(session, tracker.line())

    def work(emit, stopped):
        return batch_timing(pair, ids, BATCHES, n_max=N_MAX, repeats=reps, warmup=warm,
                            progress=ticker(emit, stopped))

    with Background(work, "playground-batch", serving.device_lock(pair.device)) as bg:
        for line in progress_lines(bg, tracker):
            yield BatchView(session, line)
        bg.raise_error()
    doc = bg.result
    doc.setup = describe_setup(pair)
    session.batch = doc
    status = (f"Timed batches {', '.join(map(str, BATCHES))} on {len(ids)} tokens of context "
              f"({clock_text(time.monotonic() - started)}): verification stays nearly free (v \u2264 {NEARLY_FREE}) "
              f"up to {free_text(doc)}")
    session.batch_status = status + " (see the k per output shape tab)"
    curves = batch_curves(session.sweep, doc)
    figure = charts.sweep_figure(session.sweep, curves) if session.sweep else None
    yield BatchView(session, status, figure, batch_note(session))
