"""The browser playground's lab events: Calibrate and the k sweep (no gradio here; the run and compare events
are in handlers.py).

Both reuse the pair's calibrations (`PairProvider.calibrations`, a lab `CalibrationStore` shared by every tab on
the pair, one per drafter and context-length bucket) through `lab.calibration.calibrated_timing`, and say so when
they reuse one. The Calibrate button takes the short settings (SHORT: lab.calibration.SHORT_CALIBRATION) unless a
careful calibration (CAREFUL) is asked for, which replaces what the store holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core.engine import K_MAX
from ..drafters.registry import make_proposer
from ..envinfo import describe_setup
from ..lab.calibration import (
    SHORT_CALIBRATION,
    CalibrationPlan,
    Timing,
    calibrate,
    calibrated_timing,
    pass_lengths,
)
from ..lab.speed import PLAIN_EVERY, SpeedRequest, bracketed, sweep
from ..lab.speed.schema import schema_arms
from ..limits import Limits
from ..results.speed import SweepResult
from ..run import confidence_stop, find_timing
from . import charts, serving, sweep_words, verdicts
from .batching import batch_curves
from .downloads import jsonable
from .progress import Tracker, clock_text, load_with_progress, mapped, phase, progress_lines, ticker
from .serving import Background, PairProvider, stoppable
from .session import (
    RunRequest,
    Session,
    SweepRequest,
    encode_request,
    is_nearest,
    prompt_key,
    run_timing,
    stop_text,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

SHORT = (SHORT_CALIBRATION.repeats, SHORT_CALIBRATION.warmup)  # (repeats, warm-up cycles) of the Calibrate button
CAREFUL = (12, 3)  # ... of a careful calibration
N_NEEDED = K_MAX + 1  # passes timed up to this many tokens: one calibration serves any fixed k, adaptive k, a sweep


@dataclass
class CalibrateView:
    session: Session
    status: str
    prediction: str | None = None


@dataclass
class SweepView:
    session: Session
    status: str
    figure: go.Figure | None = None
    table: list | None = None
    summary: str | None = None
    doc: dict | None = None  # the result as JSON (the sweep's Download)


def reused_text(timing: Timing, own: bool, context_tokens: int | None = None) -> str:
    if own:
        return "reused this tab's calibration of this prompt"
    if context_tokens is not None and is_nearest(timing, context_tokens):
        return verdicts.stand_in_note(timing, context_tokens).replace("**", "")
    return (f"reused the calibration on {verdicts.context_label(timing)}: one serves every context in its bucket on "
            "this pair and drafter, in every tab")


def timing_text(timing: Timing) -> str:
    return (f"a target step takes {1000 * timing.target_step_s:.1f} ms, the drafter {1000 * timing.draft_step_s:.2f} "
            f"ms per proposed token (c = {timing.c:.2f} target steps)")


def calibrate_plan(n_max: int, repeats: int, warmup: int) -> str:
    lengths = pass_lengths(n_max)
    return (f"timing the target's passes over {lengths[0]}-{lengths[-1]} tokens ({len(lengths)} lengths) and the "
            f"drafter's proposals, {warmup} warm-up and {repeats} timed cycles each")


@stoppable("calibrate")
def stream_calibrate(provider: PairProvider, session: Session | None, request: RunRequest, careful: bool = False,
                     repeats: int | None = None, warmup: int | None = None,
                     limits: Limits | None = None) -> Iterator[CalibrateView]:
    """Time the target over n = 1..17 tokens and the drafter per token, on this prompt's context length.

    The result (a lab.Timing) is kept in the pair's store (every tab reuses it) and in the session, and it
    fills the prediction panel at once. `repeats` / `warmup` override the short or careful settings (tests)."""
    started = time.monotonic()
    limits = limits or Limits.from_env()
    pair = yield from mapped(load_with_progress(provider, started), lambda line: CalibrateView(session, line))
    ids, _ = encode_request(pair, request, N_NEEDED, limits)
    proposer = make_proposer(pair, request.drafter)
    name, key, store = proposer.describe(), prompt_key(ids), provider.calibrations
    default = CAREFUL if careful else SHORT
    reps = repeats if repeats is not None else default[0]
    warm = warmup if warmup is not None else default[1]
    if not careful:
        found = find_timing(session.conversation, store, name, ids, N_NEEDED, request.sampling, nearest=False)
        if found is not None and not is_nearest(found, len(ids)):  # a stand-in an adaptive run kept: time this one
            own = session.timings.get((name, key)) is found
            session.timings[(name, key)] = found
            session.calibration = (request.drafter, found)  # the registry's name: its traits (verdicts.pricing)
            yield CalibrateView(session, f"Already calibrated: {reused_text(found, own)} \u00b7 {name}: "
                                         f"{timing_text(found)} \u2014 {found.trust.headline()}",
                                verdicts.prediction_markdown(session, run_timing(session, provider.calibrations)))
            return
    tracker = Tracker(f"Calibrating on {len(ids)} tokens of context" + (" (careful)" if careful else ""),
                      started, calibrate_plan(N_NEEDED, reps, warm), about=name)
    yield CalibrateView(session, tracker.line())

    def work(emit, stopped):
        tick = ticker(emit, stopped)
        plan = CalibrationPlan(n_max=N_NEEDED, repeats=reps, warmup=warm, sampling=request.sampling)
        if careful:
            timing = calibrate(pair, ids, proposer, plan, progress=tick)
            store.put(name, timing)
            return timing, False
        return calibrated_timing(pair, ids, proposer, store, plan, progress=tick)

    with Background(work, "playground-calibrate", serving.device_lock(pair.device)) as bg:
        for line in progress_lines(bg, tracker):
            yield CalibrateView(session, line)
        bg.raise_error()
    timing, reused = bg.result
    session.timings[(name, key)] = timing
    session.calibration = (request.drafter, timing)
    how = reused_text(timing, False) if reused else f"{reps} timed cycles after {warm} warm-up"
    clock = clock_text(time.monotonic() - started)
    status = (f"Calibrated {name} on {verdicts.context_label(timing)} ({how}, {clock}): {timing_text(timing)}"
              f" \u2014 {timing.trust.headline()}")
    yield CalibrateView(session, status, verdicts.prediction_markdown(session, run_timing(session, provider.calibrations)))


def sweep_seconds(timing: Timing, runs: int, req: RunRequest) -> float:
    """What a sweep's `runs` take by the calibration: each at plain decoding's speed, its new tokens and a pass over
    its prompt (a speculative run that pays is faster, one that loses slower)."""
    return runs * (req.max_new_tokens + 1) * timing.target_step_s


@stoppable("sweep")
def stream_sweep(provider: PairProvider, session: Session | None, sweep_req: SweepRequest,
                 sweep_fn: Callable[..., SweepResult] | None = None, limits: Limits | None = None) -> Iterator[SweepView]:
    """k = 1..k_max on the current prompt: measured and predicted speed-up against k, break-even, and a
    recommended k only where the trust verdict holds. `sweep_fn` replaces lab.speed.sweep (tests)."""
    started = time.monotonic()
    sweep_fn = sweep_fn or sweep
    limits = limits or Limits.from_env()
    req, k_max, rounds = sweep_req.run, sweep_req.k_max, sweep_req.rounds
    pair = yield from mapped(load_with_progress(provider, started), lambda line: SweepView(session, line))
    ids, _ = encode_request(pair, req, req.max_new_tokens, limits)
    proposer = make_proposer(pair, req.drafter)
    req, name = replace(req, min_confidence=confidence_stop(req.min_confidence, proposer)), proposer.describe()
    key, store = prompt_key(ids), provider.calibrations
    ks = list(range(1, k_max + 1))
    timing = find_timing(session.conversation, store, name, ids, N_NEEDED, req.sampling)
    schema = schema_arms(pair, req.drafter, req.preset if req.constrain else None)  # as `sweep --schema` takes it
    runs = rounds * len(bracketed([*map(str, ks), "adaptive"], PLAIN_EVERY))  # with the plain runs between them
    runs *= 2 if schema else 1  # each again constrained, right after its free run

    def factory():
        return make_proposer(pair, req.drafter)

    def work(emit, stopped):
        t, reused = timing, True
        if t is None:
            phase(emit, "step 1 of 2, calibrating")
            t, reused = calibrated_timing(pair, ids, factory(), store, SHORT_CALIBRATION.under(req.sampling),
                                          progress=ticker(emit, stopped))
        phase(emit, "step 2 of 2, measuring" if timing is None else "measuring", sweep_seconds(t, runs, req))
        lab_request = SpeedRequest(pair, {"prompt": ids}, factory, ks=ks, rounds=rounds,
                                   max_new_tokens=req.max_new_tokens, sampling=req.sampling, timing=t,
                                   min_confidence=req.min_confidence, **schema)
        return sweep_fn(lab_request, progress=ticker(emit, stopped)), t, reused

    stop = f" ({stop_text(req.min_confidence)}, so no fixed-k prediction)" if req.min_confidence is not None else ""
    held = (f", each run again constrained to {req.preset}'s schema right after it (the schema+ drafter)"
            if schema else "")
    plan = (f"{rounds} round(s) of k = 1..{k_max} and adaptive k back to back, plain decoding before every "
            f"{PLAIN_EVERY} and after the last{stop}, "
            f"{req.max_new_tokens} new tokens per run{held}: {runs} runs"
            + (f"; {reused_text(timing, False, len(ids))}; about {clock_text(sweep_seconds(timing, runs, req))} "
               "at plain decoding's speed" if timing is not None else ", after a short calibration"))
    tracker = Tracker(f"Sweeping k = 1..{k_max}", started, plan)
    yield SweepView(session, tracker.line(), figure=charts.sweep_figure(None))
    with Background(work, "playground-sweep", serving.device_lock(pair.device)) as bg:
        for line in progress_lines(bg, tracker):
            yield SweepView(session, line)
        bg.raise_error()
    result, t, _ = bg.result
    result, no_model = sweep_words.fit_to_drafter(result, req.drafter)
    session.sweep = result
    session.timings[(name, key)] = t
    text = sweep_words.sweep_summary(result, describe_setup(pair), rounds, req.max_new_tokens, no_model=no_model)
    k, why_not = sweep_words.recommendation(result)
    clock = clock_text(time.monotonic() - started)
    if k is not None:
        status = f"Sweep done: recommended k = {k} for this prompt and drafter ({name}) \u00b7 {clock}"
    else:
        status = f"Sweep done: no recommended k \u2014 {why_not} \u00b7 {clock}"
    session.sweep_status = status + " (see the k per output shape tab)"
    figure = charts.sweep_figure(result, batch_curves(result, session.batch))  # + the lines of a batch timing
    yield SweepView(session, status, figure, sweep_words.sweep_rows(result), text, jsonable(result))
