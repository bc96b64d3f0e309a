"""The browser playground's events, as plain functions and generators (no gradio here).

`blocks.py` wires these to components; tests call them directly. The run, calibrate and sweep events take
the tab's `Session` (kept per browser tab in a `gr.State`) and a request already parsed and validated
(`session.RunRequest` / `SweepRequest`); each event yields view objects that blocks.py turns into component
updates, and raises `PlaygroundError`, with a message for a person, for what it can only find out on the
pair (a prompt longer than the target's context, an unknown preset, a drafter that cannot load).

The engine and the lab run in a worker thread (serving.Background) under the device's lock; closing an
event's generator (Stop) stops its worker at the next record.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..core import engine
from ..core.records import Iteration, summarize
from ..drafters.registry import make_proposer
from ..envinfo import describe_setup, environment
from ..errors import PlaygroundError
from ..inputs.presets import check_output, get_preset, load_presets
from ..lab.calibration import Timing, calibrate
from ..lab.speed import sweep
from ..limits import Limits
from ..pairs.registry import PAIRS, ModelPolicy
from . import charts, panels, serving
from .downloads import jsonable, run_document, save_document
from .render import TokenRenderer
from .serving import Background, PairProvider, Progress, stoppable
from .session import RunRequest, RunResult, Session, SweepRequest, encode_request, k_controller, prompt_key

YIELD_EVERY_S = 0.1  # token / counter updates at most this often
CHART_EVERY_S = 0.5  # chart updates at most this often while streaming (and once at the end)


# --- views: one update of a panel each; None for a field means 'unchanged' ----------------------------------


@dataclass
class RunView:
    session: Session
    status: str
    tokens: str | None = None
    counters: str | None = None
    figures: dict | None = None  # {"time": fig, "positions": fig, "alpha": fig}
    check: str | None = None
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


@dataclass
class CompareView:
    session: Session
    status: str
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


@dataclass
class CalibrateView:
    session: Session
    status: str
    prediction: str | None = None


@dataclass
class SweepView:
    session: Session
    status: str
    figure: Any = None
    table: list | None = None
    summary: str | None = None
    doc: dict | None = None


@dataclass
class StoppedView:
    status: str | None = None
    counters: str | None = None
    figures: dict | None = None
    sweep_status: str | None = None


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
                           panels.counters_html(s, run.request.max_new_tokens, running=False),
                           panels.figures(run.records, s))
    if what == "compare":
        return StoppedView("Stopped the plain run: no measured speed-up this time." + again)
    if what == "calibrate":
        return StoppedView("Calibration stopped: nothing was cached." + again)
    if what == "sweep":
        return StoppedView("Sweep stopped.", sweep_status="Sweep stopped: no result.")
    return StoppedView("Stopped." + again)


@stoppable("run")
def stream_run(provider: PairProvider, session: Session | None, request: RunRequest, progress: Progress = None,
               limits: Limits | None = None) -> Iterator[RunView]:
    """Speculative decoding of the prompt, streamed: token HTML and counters as records arrive, charts throttled."""
    limits = limits or Limits.from_env()
    loading = panels.loading_status(provider)
    if loading:
        yield RunView(session, loading)
    pair = serving.get_pair(provider, progress)
    ids, preset_obj = encode_request(pair, request, request.max_new_tokens, limits)
    proposer = make_proposer(pair, request.drafter)
    setup = describe_setup(pair)
    sampling = request.sampling
    run = RunResult(request=request, prompt_ids=ids, drafter=proposer.describe(), records=[], summary=None, text="",
                    preset=preset_obj, check=None, setup=setup, environment=environment(pair), finished=False)
    session.run = run  # the session keeps the partial run if the user stops it
    tokenizer = pair.tokenizer
    special = getattr(tokenizer, "all_special_ids", []) if tokenizer is not None else []
    renderer = TokenRenderer(tokenizer, greedy=sampling.greedy, special_ids=special)
    head = (f"Running: drafter {proposer.describe()}, k = {panels.k_text(request)}, {sampling.describe()}, "
            f"{len(ids)} prompt tokens, up to {request.max_new_tokens} new \u00b7 {setup}")
    yield RunView(session, head + " \u2014 prefill \u2026", tokens="",
                  counters=panels.counters_html(None, request.max_new_tokens, True), figures=panels.figures([], None),
                  check=panels.check_html(preset_obj, None), prediction=panels.prediction_markdown(session))

    phase = ["prefill"]

    def work(emit, stopped):
        if request.k_mode == "adaptive":
            phase[0] = "calibrating the cost model for adaptive k (once per pair, drafter and context length)"
        controller = k_controller(request, pair, ids, proposer, session, provider.calibrations)
        phase[0] = "prefill"
        gen = engine.speculative_generate(pair, ids, proposer=proposer, k=controller, sampling=sampling,
                                          max_new_tokens=request.max_new_tokens)
        try:
            for rec in gen:
                emit(rec)
                if stopped():
                    return
        finally:
            gen.close()
            run.ended_at = time.perf_counter()

    last_yield = last_chart = 0.0
    dirty = False
    started = time.monotonic()
    with Background(work, "playground-run", serving.device_lock(pair.device)) as bg:
        while not bg.finished:
            items = bg.poll(timeout=YIELD_EVERY_S)
            for rec in items:
                run.records.append(rec)
                renderer.add(rec)
                dirty = True
            now = time.monotonic()
            if bg.finished:
                break
            if dirty and now - last_yield >= YIELD_EVERY_S:
                summary = summarize(run.records)
                figs = None
                if now - last_chart >= CHART_EVERY_S:
                    figs, last_chart = panels.figures(run.records, summary), now
                yield RunView(session, f"{head} \u2014 iteration {summary.target_passes}", tokens=renderer.html(),
                              counters=panels.counters_html(summary, request.max_new_tokens, True), figures=figs)
                last_yield, dirty = now, False
            elif now - last_yield >= serving.HEARTBEAT_S:
                # Nothing new (the prefill, or a slow iteration): still hand control back to Gradio now and
                # then, so that Stop can close this generator promptly.
                what = phase[0] if len(run.records) == 0 else f"iteration {len(run.records)}"
                yield RunView(session, f"{head} \u2014 {what} \u2026 {now - started:.1f} s")
                last_yield = now
        bg.raise_error()

    summary = summarize(run.records)
    tokens = [t for r in run.records if isinstance(r, Iteration) for t in r.emitted]
    run.text = tokenizer.decode(tokens, skip_special_tokens=True) if tokenizer is not None else ""
    run.summary = summary
    run.check = check_output(preset_obj, run.text) if preset_obj is not None else None
    run.finished = True
    doc = run_document(run, session.timing_for(run.drafter, run.prompt_key, request.k + 1))
    done = (f"Done: {summary.new_tokens} new tokens in {summary.target_passes} target passes, finished by "
            f"{summary.finished} \u00b7 drafter {run.drafter}, k = {panels.k_text(request, summary)}, "
            f"{sampling.describe()} \u00b7 {setup}")
    yield RunView(session, done, tokens=renderer.html(),
                  counters=panels.counters_html(summary, request.max_new_tokens, False),
                  figures=panels.figures(run.records, summary), check=panels.check_html(preset_obj, run.check),
                  prediction=panels.prediction_markdown(session), doc=doc, download=save_document(doc))


@stoppable("compare")
def stream_compare(provider: PairProvider, session: Session | None, progress: Progress = None) -> Iterator[CompareView]:
    """Plain decoding of the last run's prompt and length, right after it; the measured ratio beside the prediction."""
    run = session.run
    if run is None or not run.finished:
        raise PlaygroundError("there is no finished speculative run to compare with: press Run first (the "
                              "'Compare with plain' button runs one and then plain decoding right after)")
    pair = serving.get_pair(provider, progress)
    records: list = []
    started: list[float] = []

    def work(emit, stopped):
        started.append(time.perf_counter())
        for rec in engine.plain_generate(pair, run.prompt_ids, sampling=run.sampling,
                                         max_new_tokens=run.request.max_new_tokens):
            records.append(rec)
            emit(None)
            if stopped():
                return

    n_max = run.request.max_new_tokens
    with Background(work, "playground-plain", serving.device_lock(pair.device)) as bg:
        last = 0.0
        while not bg.finished:
            bg.poll(timeout=0.25)
            now = time.monotonic()
            if now - last >= 0.5 and not bg.finished:
                n = max(0, len(records) - 1)
                serving.report(progress, min(1.0, n / n_max), f"plain decoding: {n}/{n_max} tokens")
                yield CompareView(session, f"Plain decoding of the same prompt, for comparison: {n} / {n_max} "
                                           f"tokens \u2026")
                last = now
        bg.raise_error()
    plain = summarize(records)
    run.plain = plain
    run.plain_gap_s = started[0] - run.ended_at if started and run.ended_at else None
    run.plain_setup = describe_setup(pair)
    ratio = run.measured_speedup
    doc = run_document(run, session.timing_for(run.drafter, run.prompt_key, run.request.k + 1))
    status = (f"Compared: speculative {run.summary.tokens_per_s:.1f} tokens/s, plain {plain.tokens_per_s:.1f} tokens/s"
              + (f" \u2192 measured speed-up {ratio:.2f}\u00d7" if ratio else "")
              + " (one adjacent pair of runs, prefill excluded)")
    yield CompareView(session, status, panels.prediction_markdown(session), doc, save_document(doc))


@stoppable("calibrate")
def stream_calibrate(provider: PairProvider, session: Session | None, request: RunRequest, progress: Progress = None,
                     repeats: int = 12, warmup: int = 3, limits: Limits | None = None) -> Iterator[CalibrateView]:
    """Time the target over n = 1..max(9, k+1) tokens and the drafter per token on the current prompt.

    The result (a lab.Timing) is cached in the session per drafter and prompt."""
    limits = limits or Limits.from_env()
    loading = panels.loading_status(provider)
    if loading:
        yield CalibrateView(session, loading)
    pair = serving.get_pair(provider, progress)
    n_max = max(9, request.k + 1)  # calibration feeds up to n_max tokens after the prompt
    ids, _ = encode_request(pair, request, n_max, limits)
    proposer = make_proposer(pair, request.drafter)
    name = proposer.describe()
    key = prompt_key(ids)
    if session.timing_for(name, key, n_max) is not None:
        yield CalibrateView(session, f"Calibration for this prompt and drafter is already cached in this session "
                                     f"({name}, {len(ids)} prompt tokens).", panels.prediction_markdown(session))
        return

    def work(emit, stopped):
        return calibrate(pair, ids, proposer, n_max=n_max, repeats=repeats, warmup=warmup,
                         progress=serving.ticker(emit, stopped))

    with Background(work, "playground-calibrate", serving.device_lock(pair.device)) as bg:
        for line in serving.progress_lines(bg, progress, "Calibrating"):
            yield CalibrateView(session, line)
        bg.raise_error()
    timing = bg.result
    session.timings[(name, key)] = timing
    v = timing.v
    status = (f"Calibrated on this prompt ({len(ids)} tokens): target step {1000 * timing.target_step_s:.1f} ms, "
              f"drafter {1000 * timing.draft_step_s:.1f} ms/token \u2192 c = {timing.c:.3f}, "
              f"v({n_max}) = {v[n_max]:.2f}")
    yield CalibrateView(session, status, panels.prediction_markdown(session))


@stoppable("sweep")
def stream_sweep(provider: PairProvider, session: Session | None, sweep_req: SweepRequest, progress: Progress = None,
                 sweep_fn: Callable | None = None, limits: Limits | None = None) -> Iterator[SweepView]:
    """k = 1..k_max on the current prompt: measured and predicted speed-up against k, break-even, best k.
    `sweep_fn` replaces lab.speed.sweep (tests)."""
    sweep_fn = sweep_fn or sweep
    limits = limits or Limits.from_env()
    req, k_max, rounds = sweep_req.run, sweep_req.k_max, sweep_req.rounds
    loading = panels.loading_status(provider)
    if loading:
        yield SweepView(session, loading)
    pair = serving.get_pair(provider, progress)
    ids, _ = encode_request(pair, req, req.max_new_tokens, limits)
    name = make_proposer(pair, req.drafter).describe()
    key = prompt_key(ids)
    ks = list(range(1, k_max + 1))
    timing = session.timing_for(name, key, k_max + 1)

    def factory():
        return make_proposer(pair, req.drafter)

    def work(emit, stopped):
        return sweep_fn(pair, ids, factory, ks=ks, rounds=rounds, max_new_tokens=req.max_new_tokens,
                        sampling=req.sampling, timing=timing, progress=serving.ticker(emit, stopped))

    yield SweepView(session, f"Sweeping k = 1..{k_max}, {rounds} round(s), {req.max_new_tokens} new tokens per run "
                             f"\u2026", figure=charts.sweep_figure(None))
    with Background(work, "playground-sweep", serving.device_lock(pair.device)) as bg:
        for line in serving.progress_lines(bg, progress, "Sweep"):
            yield SweepView(session, line)
        bg.raise_error()
    result = bg.result
    session.sweep = result
    if timing is None and isinstance(result.get("timing"), dict):
        restored = Timing.from_dict(result["timing"])
        if restored is not None:
            session.timings[(name, key)] = restored
    text = panels.sweep_summary(result, describe_setup(pair), rounds, req.max_new_tokens)
    status = f"Sweep done: recommended k = {result.get('best_k')} for this prompt and drafter ({name})."
    yield SweepView(session, status, charts.sweep_figure(result), panels.sweep_rows(result), text, jsonable(result))


def preset_choices(directory=None) -> tuple[list[tuple[str, str]], list[str]]:
    """Dropdown choices (label, name), with a first entry for the user's own prompt; and any preset errors."""
    presets, errors = load_presets(directory, strict=False)
    choices = [("your own prompt (no preset)", "")]
    choices += [(f"{p.title} \u00b7 {p.kind}", name) for name, p in presets.items()]
    return choices, [str(e) for e in errors]


def load_preset(provider: PairProvider, name, current_prompt: str = "", progress: Progress = None,
                session: Session | None = None) -> PresetView:
    """Fill the prompt box with the exact text the model sees for a preset (with the tokenizer of the pair the
    tab chose), and its max new tokens."""
    provider = provider.for_session(session)
    if not name:
        return PresetView(current_prompt or "", None, True,
                          "Your own prompt: sent as one user turn of the chat template (untick it to send raw text).")
    preset = get_preset(name)
    pair = serving.get_pair(provider, progress)
    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so presets cannot be shown as text")
    text = preset.prompt_text(pair.tokenizer)
    checked = ("output checked: valid JSON" + (" against the preset's JSON Schema" if preset.output_schema else "")
               if preset.checks_output else "free text (no output check)")
    info = (f"**{html.escape(preset.title)}** \u00b7 kind `{preset.kind}` \u00b7 {preset.max_new_tokens} max new "
            f"tokens \u00b7 {checked}  \n{html.escape(preset.description)}")
    return PresetView(text, preset.max_new_tokens, False, info)


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
        return PairView(session, provider.drafter_choices(), panels.pair_info(provider))
    choice = provider.choice_for(value)
    session.pair = None if serving.same_pair(choice, provider.choice) else choice
    session.timings.clear()  # calibrations, runs and sweeps belong to the pair that made them
    session.run = session.sweep = None
    chosen = provider.for_session(session)
    return PairView(session, chosen.drafter_choices(), panels.pair_info(chosen))
