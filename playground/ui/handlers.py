"""What the browser playground does, as plain functions and generators (no gradio here).

`blocks.py` wires these to components; tests call them directly. Each event handler takes the
session (a `Session`, kept per browser tab in a `gr.State`) and the raw control values, validates
them (bad input raises `PlaygroundError` with a message for a person), and yields view objects the
UI turns into component updates.

Measurement: the engine runs in a background thread and hands its records over a queue, so the
time the UI spends rendering is never inside the engine's clock (a generator that yields to the UI
would count the UI's work as decoding time). Stopping a run closes the consuming generator, which
tells the producer to stop at its next record; a per-device lock makes the next event's producer
wait for it, so two runs never share the device.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import html
import json
import math
import os
import queue
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ..errors import PlaygroundError
from ..lab.calibration import CalibrationStore
from . import charts
from .render import TokenRenderer

Progress = Callable[..., Any] | None
DEFAULT_MAX_NEW = 64
YIELD_EVERY_S = 0.1  # token / counter updates at most this often
HEARTBEAT_S = 0.5  # a status update at least this often, so a Stop never waits on a silent generator
CHART_EVERY_S = 0.5  # chart updates at most this often while streaming (and once at the end)
DECODINGS = ("greedy", "sample")


# --- the model pair: loaded once per process, on first use ---------------------------------------------


@dataclass(frozen=True)
class PairSpec:
    """Which pair the app serves. From the environment: PLAYGROUND_PAIR (a named pair, playground.pairs;
    default 'embedded'), PLAYGROUND_TARGET / PLAYGROUND_DRAFT (override its target / draft; 'none' for
    model-free drafters only), PLAYGROUND_DEVICE, PLAYGROUND_DTYPE ('auto' default), PLAYGROUND_DEVICE_MAP.
    Which models may load is checked when the pair loads (playground.pairs.ModelPolicy)."""

    target: str = "embedded"
    draft: str | None = "int8"
    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None
    name: str = field(default="", compare=False)  # the named pair, if it is one

    @classmethod
    def from_env(cls, env=None, pair: str | None = None, custom: tuple | None = None) -> "PairSpec":
        """The environment's pair; or the named `pair`, or a `custom` (target, draft), chosen in the app, with
        the environment's device, dtype and device map."""
        from ..pairs.registry import choose_pair

        env = os.environ if env is None else env
        if pair is None and custom is None:
            target, draft = env.get("PLAYGROUND_TARGET") or None, env.get("PLAYGROUND_DRAFT")
            pair = env.get("PLAYGROUND_PAIR") or None
        else:
            target, draft = custom if custom is not None else (None, None)
            draft = "none" if custom is not None and draft is None else draft
        c = choose_pair(pair=pair, target=target, draft=draft, device=env.get("PLAYGROUND_DEVICE") or None,
                        dtype=env.get("PLAYGROUND_DTYPE") or None, device_map=env.get("PLAYGROUND_DEVICE_MAP") or None,
                        env=env, check=False)
        return cls(c.target, c.draft, c.device, c.dtype, c.device_map, c.name or "")

    @property
    def choice(self) -> str:
        """Its value in the app's pair menu: the pair's name, or 'TARGET, DRAFT'."""
        from ..pairs.registry import pair_name_of

        return self.name or pair_name_of(self.target, self.draft) or f"{self.target}, {self.draft or 'none'}"


class PairCache:
    """The process-wide model cache: one ModelPair per spec, loaded lazily under a lock.

    Shared by every session (models are read-only during decoding); per-user state lives in each
    session's `gr.State`, never here.
    """

    def __init__(self, load=None, max_pairs: int | None = None):
        self._lock = threading.Lock()
        self._pairs: dict[PairSpec, Any] = {}
        self._calibrations: dict[PairSpec, CalibrationStore] = {}  # kept while the pair is loaded
        self._load = load
        # At most this many pairs stay loaded (least recently used goes first): two hub pairs may not fit one
        # GPU together. PLAYGROUND_MAX_LOADED_PAIRS, default 1.
        if max_pairs is None:
            try:
                max_pairs = int(os.environ.get("PLAYGROUND_MAX_LOADED_PAIRS", "1"))
            except ValueError:
                max_pairs = 1
        self._max_pairs = max(1, max_pairs)

    def loaded(self, spec: PairSpec) -> bool:
        return spec in self._pairs

    def get(self, spec: PairSpec, progress: Callable[[str], None] | None = None):
        with self._lock:
            pair = self._pairs.pop(spec, None)
            if pair is None:
                load = self._load
                if load is None:  # the policy and gated-model checks, then models.load_pair
                    from ..pairs.registry import load_checked as load
                if len(self._pairs) >= self._max_pairs:
                    while len(self._pairs) >= self._max_pairs:
                        dropped = next(iter(self._pairs))
                        self._pairs.pop(dropped)
                        self._calibrations.pop(dropped, None)
                    from ..pairs.models import release_memory

                    release_memory()  # a run still holding the dropped pair keeps it until it ends
                extra = {"device_map": spec.device_map} if spec.device_map else {}
                pair = load(spec.target, spec.draft, device=spec.device, dtype=spec.dtype, progress=progress, **extra)
            self._pairs[spec] = pair  # most recently used last
            return pair

    def calibrations(self, spec: PairSpec) -> CalibrationStore:
        """The cost curves measured on this pair, shared by every tab (see lab.CalibrationStore)."""
        with self._lock:
            return self._calibrations.setdefault(spec, CalibrationStore())


PAIRS = PairCache()


class PairProvider:
    """What the UI asks for its pair: a spec served from the shared cache, or a fixed pair (tests)."""

    def __init__(self, spec: PairSpec | None = None, pair=None, cache: PairCache | None = None):
        self.spec = spec or PairSpec.from_env()
        self._pair = pair
        self._cache = cache or PAIRS
        self._own_calibrations = CalibrationStore() if pair is not None else None

    def loaded(self) -> bool:
        return self._pair is not None or self._cache.loaded(self.spec)

    @property
    def fixed(self) -> bool:
        """Built around one loaded pair (tests): the pair menu has nothing to choose."""
        return self._pair is not None

    def for_session(self, session) -> "PairProvider":
        """The provider of the pair a tab chose in the pair menu (the same shared cache), or this one."""
        spec = getattr(session, "pair", None)
        if self._pair is not None or spec is None or spec == self.spec:
            return self
        return PairProvider(spec=spec, cache=self._cache)

    def spec_for(self, value) -> PairSpec:
        """The spec of a pair-menu value: a named pair, this provider's own choice, or a typed 'TARGET, DRAFT'
        (only with PLAYGROUND_ALLOW_ANY_MODEL=1; paths only inside PLAYGROUND_MODEL_ROOTS)."""
        from ..pairs.registry import ALLOW_ANY_ENV, PAIRS, ModelPolicy, parse_custom

        if not isinstance(value, str) or not value.strip():
            raise PlaygroundError(f"choose a model pair: one of {', '.join(PAIRS)}")
        value = value.strip()
        if value == self.spec.choice:
            return self.spec
        if value in PAIRS:
            return PairSpec.from_env(pair=value)
        policy = ModelPolicy.from_env()
        if not policy.allow_any:
            raise PlaygroundError(f"unknown model pair {value[:200]!r}; choose one of {', '.join(PAIRS)} (other "
                                  f"models can be typed in only when the app runs with {ALLOW_ANY_ENV}=1)")
        target, draft = parse_custom(value)
        policy.check(target, "target")
        policy.check(draft, "draft")
        return PairSpec.from_env(custom=(target, draft))

    def get(self, progress: Callable[[str], None] | None = None):
        if self._pair is not None:
            return self._pair
        return self._cache.get(self.spec, progress)

    @property
    def calibrations(self) -> CalibrationStore:
        """The pair's calibrations, shared by the tabs that use it."""
        return self._own_calibrations if self._pair is not None else self._cache.calibrations(self.spec)

    @property
    def has_draft(self) -> bool:
        if self._pair is not None:
            return self._pair.draft is not None
        return self.spec.draft is not None

    @property
    def device(self) -> str:
        return str(self._pair.device) if self._pair is not None else self.spec.device

    @property
    def embedded_target(self) -> bool:
        if self._pair is not None:
            from ..pairs.models import EMBEDDED_NAME

            return self._pair.target_name == EMBEDDED_NAME
        return self.spec.target == "embedded"

    def drafter_choices(self) -> list[tuple[str, str]]:
        """(label, name): 'auto' first (playground.proposers.default_drafter picks at run time), then each
        drafter in playground.proposers.DRAFTERS this pair can use. Availability that needs an import
        (llama-cpp-python) is checked when a run asks for it, with a message saying how to install it."""
        from ..drafters.registry import DRAFTERS

        out = [(AUTO_LABEL, "auto")]
        for name, what in DRAFTERS.items():
            if (name == "draft" and not self.has_draft) or (name == "llama.cpp" and not self.embedded_target):
                continue
            short = what.split(":")[0].split("(")[0].strip()
            out.append((f"{name} \u00b7 {short}" if short and short != name else name, name))
        return out


AUTO_LABEL = "auto \u00b7 the best drafter available here"
AUTO_HELP = ("auto picks llama.cpp for the embedded target when llama-cpp-python is installed, else the pair's "
             "draft model, else prompt lookup")


# --- per-session state ------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One speculative run, as the session keeps it (records are the truth; the summary is derived)."""

    request: "RunRequest"
    sampling: Any  # SamplingConfig
    prompt_ids: list[int]
    drafter: str  # proposer.describe()
    records: list
    summary: Any  # RunSummary
    text: str
    preset: Any  # Preset | None
    check: Any  # OutputCheck | None
    setup: str
    environment: dict
    finished: bool  # False while streaming (or if it was stopped)
    ended_at: float = 0.0  # time.perf_counter() when the last record arrived
    plain: Any = None  # RunSummary of the plain run right after ("Compare with plain")
    plain_gap_s: float | None = None  # seconds between the speculative run's end and the plain run's start
    plain_setup: str | None = None

    @property
    def prompt_key(self) -> str:
        return prompt_key(self.prompt_ids)


@dataclass
class Session:
    """Everything one browser tab remembers, held in a gr.State (never in module globals)."""

    run: RunResult | None = None
    timings: dict = field(default_factory=dict)  # (drafter, prompt_key) -> lab.Timing
    sweep: dict | None = None
    stopped: str | None = None  # which event the user stopped ("run", "compare", ...), until reported
    pair: Any = None  # the PairSpec this tab chose in the pair menu (None: the app's default pair)
    k_memory: dict = field(default_factory=dict)  # drafter -> adaptive / heuristic state carried between runs

    def timing_for(self, drafter: str, ids_key: str, n_needed: int = 1):
        t = self.timings.get((drafter, ids_key))
        if t is not None and max(t.verify_s) >= n_needed:
            return t
        return None


def new_session() -> Session:
    return Session()


def prompt_key(ids: Sequence[int]) -> str:
    return hashlib.sha256(",".join(str(int(t)) for t in ids).encode()).hexdigest()[:16]


# --- input parsing ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    prompt: str
    preset: str | None
    chat: bool
    drafter: str
    k: int
    decoding: str  # "greedy" | "sample"
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: int
    k_mode: str = "fixed"  # "fixed" (the k slider), "adaptive" or "heuristic" (k chosen per iteration)


K_MODES = {"fixed": "the k above, every iteration", "adaptive": "chosen per iteration by the cost model",
           "heuristic": "transformers' heuristic schedule (+2 / -1)"}


def _integer(value, what: str) -> int:
    if isinstance(value, bool):
        raise PlaygroundError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return _integer(float(value), what) if "." in value or "e" in value.lower() else int(value.strip())
        except ValueError:
            pass
    raise PlaygroundError(f"{what} must be a whole number, got {value!r}")


def _number(value, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise PlaygroundError(f"{what} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PlaygroundError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise PlaygroundError(f"{what} must be a finite number, got {value!r}")
    return x


def parse_request(prompt, preset, chat, drafter, k, decoding, temperature, top_k, top_p, max_new_tokens,
                  seed, drafters: Sequence[str] | None = None, limits=None,
                  k_mode: str | None = "fixed") -> tuple[RunRequest, Any]:
    """Raw control values -> (RunRequest, SamplingConfig); raises PlaygroundError with what to fix.
    `limits` (a playground.limits.Limits) default to the environment's, read now."""
    from ..core.engine import check_k
    from ..limits import Limits
    from ..drafters.registry import DRAFTERS
    from ..core.sampling import SamplingConfig
    from ..inputs.text import check_prompt_text

    limits = limits or Limits.from_env()
    check_prompt_text(prompt, limits.max_prompt_chars)
    if preset is not None and not isinstance(preset, str):
        raise PlaygroundError(f"the preset must be a preset name, got {preset!r}")
    known = list(drafters) if drafters is not None else list(DRAFTERS)
    if drafter not in known:
        raise PlaygroundError(f"unknown drafter {drafter!r}; choose one of {', '.join(known)}")
    k = check_k(_integer(k, "k"))
    k_mode = k_mode or "fixed"
    if k_mode not in K_MODES:
        raise PlaygroundError(f"k per iteration must be one of {', '.join(K_MODES)}, got {k_mode!r}")
    if decoding not in DECODINGS:
        raise PlaygroundError(f"decoding must be 'greedy' or 'sample', got {decoding!r}")
    max_new = limits.check_max_new_tokens(_integer(max_new_tokens, "max new tokens"))
    seed = _integer(seed, "seed")
    sample = decoding == "sample"
    t = _number(temperature, "temperature") if sample else 1.0
    tk = _integer(top_k, "top-k") if sample else 0
    tp = _number(top_p, "top-p") if sample else 1.0
    sampling = SamplingConfig(do_sample=sample, temperature=t, top_k=tk, top_p=tp, seed=seed)
    req = RunRequest(prompt=prompt, preset=preset or None, chat=bool(chat), drafter=drafter, k=k,
                     decoding=decoding, temperature=t, top_k=tk, top_p=tp, max_new_tokens=max_new, seed=seed,
                     k_mode=k_mode)
    return req, sampling


def _k_text(req: RunRequest, summary=None) -> str:
    """'4', or 'adaptive (chosen: 2x3 16x5)' once a run says which k it used."""
    if req.k_mode == "fixed":
        return str(req.k)
    if summary is None or not summary.k_values:
        return req.k_mode
    from ..drafters.adaptive import describe_choices

    return f"{req.k_mode} (chosen: {describe_choices(summary.k_values)})"


def _controller(pair, ids, proposer, req: RunRequest, session: Session, store=None):
    """The k setting as the loop takes it. Adaptive k needs the cost curve of this pair, drafter and prompt:
    the session's own calibration when it reaches far enough, else the pair's for this context length
    (`store`, a lab.CalibrationStore shared by every tab), calibrated briefly the first time."""
    from ..drafters.adaptive import CostCurve, make_controller
    from ..lab.calibration import calibrated_curve
    from ..core.engine import K_MAX

    if req.k_mode == "fixed":
        return req.k
    curve = None
    if req.k_mode == "adaptive":
        timing = session.timing_for(proposer.describe(), prompt_key(ids), K_MAX + 1)
        curve = CostCurve.from_timing(timing) if timing is not None else calibrated_curve(pair, ids, proposer, store,
                                                                                          repeats=3)
    return make_controller(req.k_mode, curve, memory=session.k_memory.setdefault(proposer.describe(), {}))


def _check_prompt_ids(pair, ids, max_new_tokens: int, limits) -> None:
    """The encoded prompt within this playground's token limit and, with the new tokens, the target's context."""
    from ..core.engine import check_request

    limits.check_prompt_tokens(len(ids))
    check_request(pair, ids, max_new_tokens)


def resolve_prompt(pair, req: RunRequest):
    """(prompt ids, preset or None). The preset's exact ids when the box still holds its text unchanged."""
    from ..inputs.text import encode_prompt

    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so a text prompt cannot be encoded")
    preset = None
    if req.preset:
        from ..inputs.presets import get_preset

        preset = get_preset(req.preset)
        try:
            if req.prompt == preset.prompt_text(pair.tokenizer):
                return preset.prompt_ids(pair.tokenizer), preset
        except PlaygroundError:
            pass
    return encode_prompt(pair.tokenizer, req.prompt, chat=req.chat), preset


# --- running work off the consuming thread ----------------------------------------------------------------


class Stopped(Exception):
    """Raised inside background work when the consumer was closed (the user pressed Stop)."""


_DONE = object()


_DEVICE_LOCKS: dict[str, threading.Lock] = {}
_DEVICE_LOCKS_GUARD = threading.Lock()


def device_lock(device) -> threading.Lock:
    """One lock per device, held by whatever computes on it (shared hardware, not per-user state).

    Gradio's queue already runs one model event at a time per device; this lock also covers the moment
    after a Stop, when the cancelled event's worker may still be finishing its current iteration while
    the next queued event starts: the next worker waits for it instead of overlapping it.
    """
    with _DEVICE_LOCKS_GUARD:
        return _DEVICE_LOCKS.setdefault(str(device), threading.Lock())


class Background:
    """Runs `work(emit, stopped)` in a thread (holding the device lock, if given); the consuming
    generator polls what it emits.

    Used as a context manager. Leaving the block normally joins the finished thread. Leaving it by
    GeneratorExit (Gradio closing the generator when Stop cancels the event) sets the stop flag and
    returns at once: the close may run on the server's event loop, which must not wait for an
    iteration to finish. The worker stops at its next record and releases the device lock.
    """

    def __init__(self, work: Callable[[Callable[[Any], None], Callable[[], bool]], Any], name: str = "playground",
                 lock: threading.Lock | None = None):
        self._work = work
        self._lock = lock
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self.result = None
        self.error: BaseException | None = None
        self.finished = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def _main(self):
        try:
            if self._lock is None:
                self.result = self._work(self._queue.put, self._stop.is_set)
            else:
                with self._lock:
                    if self._stop.is_set():
                        raise Stopped()
                    self.result = self._work(self._queue.put, self._stop.is_set)
        except BaseException as e:  # handed to the consumer, re-raised there
            self.error = e
        finally:
            self._queue.put(_DONE)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        if exc_type is None or not issubclass(exc_type, GeneratorExit):
            self._thread.join()
        return False

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the worker; True when it has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def poll(self, timeout: float) -> list:
        """Whatever was emitted (waiting up to `timeout` for the first item); sets `finished` at the end."""
        items = []
        try:
            items.append(self._queue.get(timeout=timeout))
            while True:
                items.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        if any(x is _DONE for x in items):
            self.finished = True
            items = [x for x in items if x is not _DONE]
        return items

    def raise_error(self) -> None:
        if self.error is not None and not isinstance(self.error, Stopped):
            raise self.error


def _ticker(emit, stopped):
    """A lab progress callback that reports through the queue and aborts when the consumer stopped."""

    def tick(fraction: float, message: str) -> None:
        if stopped():
            raise Stopped()
        emit(("progress", float(fraction), str(message)))

    return tick


def _progress_lines(bg: Background, progress: Progress, what: str) -> Iterator[str]:
    """Status lines for long lab work: on progress ticks (at most ~3 a second) and a heartbeat otherwise."""
    start = last = time.monotonic()
    fraction, message = 0.0, "starting"
    while not bg.finished:
        ticks = [x for x in bg.poll(timeout=0.2) if isinstance(x, tuple) and x[0] == "progress"]
        if ticks:
            _, fraction, message = ticks[-1]
        now = time.monotonic()
        if not bg.finished and now - last >= (0.3 if ticks else HEARTBEAT_S):
            _report(progress, fraction, f"{what.lower()}: {message}")
            yield f"{what} ({100 * fraction:.0f}%, {now - start:.0f} s): {message} \u2026"
            last = now


def _report(progress: Progress, fraction, message: str) -> None:
    if progress is not None:
        try:
            progress(fraction, desc=message)
        except TypeError:
            progress(fraction, message)


# --- views ------------------------------------------------------------------------------------------------


@dataclass
class RunView:
    """One update of the run panel. None for a field means 'unchanged'."""

    session: Session
    status: str
    tokens: str | None = None
    counters: str | None = None
    figures: dict | None = None  # {"time": fig, "positions": fig, "alpha": fig}
    check: str | None = None
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


def counters_html(summary, max_new_tokens: int | None, running: bool, prefill_s: float | None = None) -> str:
    """The live counters: iterations, alpha, tokens per target pass, tokens/s, elapsed."""
    s = summary
    n_it = s.target_passes if s else 0
    alpha = "\u2013" if s is None or s.alpha is None else f"{s.alpha:.2f}"
    tpp = "\u2013" if not s or not s.target_passes else f"{s.tokens_per_pass:.2f}"
    tps = "\u2013" if not s or not s.decode_s else f"{s.tokens_per_s:.1f}"
    elapsed = "\u2013" if not s else f"{s.decode_s:.2f} s"
    new = f"{s.new_tokens if s else 0}" + (f" / {max_new_tokens}" if max_new_tokens else "")
    cards = [
        ("iterations", "Iterations", str(n_it), "target passes (verification) so far"),
        ("alpha", "\u03b1 acceptance", alpha, "accepted / evaluated proposals (proposals after a rejection "
                                             "were never evaluated, so they do not count)"),
        ("tokens_per_pass", "Tokens / target pass", tpp, "new tokens per verification pass (plain decoding: 1)"),
        ("tokens_per_s", "Tokens / s", tps, "new tokens / decode time, prefill excluded"),
        ("elapsed", "Decode time", elapsed, "wall time since decoding started (prefill excluded)"),
        ("new_tokens", "New tokens", new, "tokens generated / max new tokens"),
    ]
    state = "running" if running else "done"
    out = [f'<div class="counters {state}">']
    for key, label, value, tip in cards:
        out.append(f'<div class="counter" data-counter="{key}" title="{html.escape(tip, quote=True)}">'
                   f'<div class="value">{html.escape(value)}</div><div class="label">{html.escape(label)}</div></div>')
    out.append("</div>")
    if s is not None and s.prefill_s:
        out.append(f'<div class="counters-note">prefill {s.prefill_s:.2f} s ({s.prompt_tokens} prompt tokens), '
                   f"not counted in tokens/s</div>")
    return "".join(out)


def check_html(preset, check) -> str:
    """The verdict on a preset's output: valid JSON? valid against the schema? (and why not)."""
    if preset is None or not preset.checks_output:
        return ""
    if check is None:
        return '<div class="check pending">Output check: waiting for the run to finish</div>'

    def badge(ok, yes, no, unknown="not checked"):
        if ok is None:
            return f'<span class="badge na">\u2013 {unknown}</span>'
        text = "\u2714 " + yes if ok else "\u2718 " + no
        return f'<span class="badge {"ok" if ok else "bad"}">{text}</span>'

    parts = [f'<div class="check"><b>Output check</b> ({html.escape(preset.name)}, {preset.output_format}): ',
             badge(check.is_json, "valid JSON", "not valid JSON"), " ",
             badge(check.schema_valid if check.is_json else None, "valid against the schema",
                   "not valid against the schema", "schema not checked")]
    if check.error:
        parts.append(f'<div class="check-error">{html.escape(check.error)}</div>')
    parts.append("</div>")
    return "".join(parts)


def _ratio(a, b):
    return a / b if b else None


def prediction_markdown(session: Session) -> str:
    """Predicted speed-up (cost model + calibration) beside the measured one, saying how each was measured."""
    from ..core.cost import break_even_alpha, verify_cost

    run = session.run
    lines = ["#### Predicted against measured"]
    if run is None or not run.finished or run.summary is None:
        lines.append("Run speculative decoding, press **Calibrate** to time the target and the drafter on the "
                     "current prompt, and **Compare with plain** to measure the speed-up.")
        return "\n\n".join(lines)
    s = run.summary
    k = run.request.k
    varying = run.request.k_mode != "fixed"
    timing = None if varying else session.timing_for(run.drafter, run.prompt_key, k + 1)
    rows = ["| | speed-up | from |", "|---|---:|---|"]
    if varying:
        rows.append(f"| predicted | \u2013 | k was chosen per iteration ({_k_text(run.request, s)}); the cost model "
                    f"predicts a fixed k (the **k per output shape** tab compares them) |")
    elif timing is not None:
        positions = [a for a in s.per_position_acceptance if a is not None]
        if s.alpha is not None:
            rows.append(f"| predicted, iid \u03b1 | **{timing.predict(s.alpha, k):.2f}\u00d7** | "
                        f"\u03b1 = {s.alpha:.3f} at k = {k} |")
        if positions:
            rows.append(f"| predicted, per-position acceptance | "
                        f"**{timing.predict(positions, k, new_tokens=s.new_tokens or None):.2f}\u00d7** | "
                        f"P(accept) by position: {' '.join(f'{a:.2f}' for a in positions)}; "
                        f"{s.new_tokens} tokens, the last iterations clipped as the loop clips them |")
    else:
        rows.append("| predicted | \u2013 | press **Calibrate** (times c and v(n) on this prompt) |")
    if run.plain is not None:
        ratio = _ratio(s.tokens_per_s, run.plain.tokens_per_s)
        rows.append(f"| measured | **{ratio:.2f}\u00d7** | {s.tokens_per_s:.1f} tokens/s speculative, "
                    f"{run.plain.tokens_per_s:.1f} tokens/s plain |" if ratio else "| measured | \u2013 | |")
    else:
        rows.append("| measured | \u2013 | press **Compare with plain** |")
    lines.append("\n".join(rows))
    if timing is not None:
        v = timing.v
        be = break_even_alpha(k, timing.c, v)
        vs = ", ".join(f"{verify_cost(v, n):.2f}" for n in range(1, k + 2))
        lines.append(
            f"Cost model inputs: c = {timing.c:.3f} (drafter step / target step), v(n) for n = 1..{k + 1}: {vs}; "
            f"break-even \u03b1 at k = {k}: {'never pays' if be is None else f'{be:.2f}'}. Calibrated on this "
            f"prompt ({timing.context_tokens} tokens of context): median of "
            f"{len(timing.raw.get('target_pass_s', {}).get('1', []))} timed repeats after warm-up.")
    if run.plain is not None:
        gap = f"{run.plain_gap_s:.2f} s" if run.plain_gap_s is not None else "?"
        lines.append(
            f"How measured: one speculative run and one plain run of the same prompt, length "
            f"({run.request.max_new_tokens} max new tokens) and sampling, back to back (plain started {gap} after "
            f"the speculative run ended); "
            f"tokens/s over decoding only, prefill excluded; n = 1 pair of runs, so expect noise on a shared "
            f"machine. Setup: {run.plain_setup or run.setup}. The speculative run was streamed to this page, which "
            f"renders in another thread while it decodes; the **k per output shape** tab measures medians over rounds.")
    return "\n\n".join(lines)


def run_document(run: RunResult, timing=None) -> dict:
    """The run as JSON: records, summary, environment and config (what the Download button saves)."""
    from ..core.records import record_to_dict

    from ..envinfo import redact

    return redact(_jsonable({
        "kind": "speculative-playground run",
        "config": {
            "prompt": run.request.prompt,
            "prompt_ids": list(run.prompt_ids),
            "preset": run.request.preset,
            "chat_template": run.request.chat,
            "drafter": run.drafter,
            "k": run.request.k,
            "k_mode": run.request.k_mode,
            "sampling": dataclasses.asdict(run.sampling),
            "max_new_tokens": run.request.max_new_tokens,
        },
        "environment": run.environment,
        "setup": run.setup,
        "records": [record_to_dict(r) for r in run.records],
        "summary": run.summary.to_dict() if run.summary is not None else None,
        "text": run.text,
        "output_check": None if run.check is None else {"is_json": run.check.is_json,
                                                        "schema_valid": run.check.schema_valid,
                                                        "error": run.check.error},
        "plain_summary": run.plain.to_dict() if run.plain is not None else None,
        "plain_gap_s": run.plain_gap_s,
        "measured_speedup": (_ratio(run.summary.tokens_per_s, run.plain.tokens_per_s)
                             if run.plain is not None and run.summary is not None else None),
        "calibration": timing.to_dict() if timing is not None else None,
    }))


DOWNLOADS_KEPT_S = 24 * 3600  # run files older than this are removed when a new one is written


def save_document(doc: dict, stem: str = "run") -> str:
    """Write a JSON document under the temp dir (Gradio serves files from there) and return its path."""
    d = os.path.join(tempfile.gettempdir(), "speculative-playground")
    os.makedirs(d, exist_ok=True)
    cutoff = time.time() - DOWNLOADS_KEPT_S
    for old in os.scandir(d):
        try:
            if old.name.endswith(".json") and old.stat().st_mtime < cutoff:
                os.remove(old.path)
        except OSError:
            pass
    path = os.path.join(d, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    return path


def _figures(records, summary) -> dict:
    from ..core.records import Iteration

    its = [r for r in records if isinstance(r, Iteration)]
    return {"time": charts.time_split_figure(its), "positions": charts.acceptance_by_position_figure(summary),
            "alpha": charts.alpha_figure(its)}


def _get_pair(provider: PairProvider, progress: Progress):
    def say(message):
        _report(progress, None, str(message))

    return provider.get(say)


LOADING_MESSAGE = ("Loading the model pair (first use in this process; the embedded model is dequantized once "
                   "and cached, which takes up to a minute) \u2026")


def _loading_status(provider: PairProvider) -> str | None:
    return None if provider.loaded() else LOADING_MESSAGE


# --- events -----------------------------------------------------------------------------------------------


def _stoppable(what: str):
    """Marks the session when Gradio closes the event's generator (Stop cancelled it), so the event chained
    after it can say so: Gradio runs that only once the cancellation is complete, after the stream's last
    message, so the 'Stopped' line is never overwritten by a late update of the stopped event."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(provider, session, *args, **kwargs):
            session = session if session is not None else new_session()
            session.stopped = None
            provider = provider.for_session(session)  # the pair this tab chose
            try:
                yield from fn(provider, session, *args, **kwargs)
            except GeneratorExit:
                session.stopped = what
                raise

        return wrapper

    return decorate


@dataclass
class StoppedView:
    status: str | None = None
    counters: str | None = None
    figures: dict | None = None
    sweep_status: str | None = None


def stopped_view(session: Session | None) -> StoppedView:
    """What to show after a Stop (nothing when the last event was not stopped)."""
    from ..core.records import summarize

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
                           counters_html(s, run.request.max_new_tokens, running=False), _figures(run.records, s))
    if what == "compare":
        return StoppedView("Stopped the plain run: no measured speed-up this time." + again)
    if what == "calibrate":
        return StoppedView("Calibration stopped: nothing was cached." + again)
    if what == "sweep":
        return StoppedView("Sweep stopped.", sweep_status="Sweep stopped: no result.")
    return StoppedView("Stopped." + again)


@_stoppable("run")
def stream_run(provider: PairProvider, session: Session | None, prompt, preset, chat, drafter, k, decoding,
               temperature, top_k, top_p, max_new_tokens, seed, progress: Progress = None,
               limits=None, k_mode: str | None = "fixed") -> Iterator[RunView]:
    """Speculative decoding of the prompt, streamed: token HTML and counters as records arrive, charts throttled."""
    from ..core.engine import speculative_generate
    from ..envinfo import describe_setup, environment
    from ..inputs.presets import check_output
    from ..limits import Limits
    from ..drafters.registry import make_proposer
    from ..core.records import Iteration, summarize

    limits = limits or Limits.from_env()
    drafters = [name for _, name in provider.drafter_choices()]
    req, sampling = parse_request(prompt, preset, chat, drafter, k, decoding, temperature, top_k, top_p,
                                  max_new_tokens, seed, drafters, limits, k_mode)
    loading = _loading_status(provider)
    if loading:
        yield RunView(session, loading)
    pair = _get_pair(provider, progress)
    ids, preset_obj = resolve_prompt(pair, req)
    _check_prompt_ids(pair, ids, req.max_new_tokens, limits)
    proposer = make_proposer(pair, req.drafter)
    setup = describe_setup(pair)
    run = RunResult(request=req, sampling=sampling, prompt_ids=ids, drafter=proposer.describe(), records=[],
                    summary=None, text="", preset=preset_obj, check=None, setup=setup,
                    environment=environment(pair), finished=False)
    session.run = run  # the session keeps the partial run if the user stops it
    tokenizer = pair.tokenizer
    special = getattr(tokenizer, "all_special_ids", []) if tokenizer is not None else []
    renderer = TokenRenderer(tokenizer, greedy=sampling.greedy, special_ids=special)
    head = (f"Running: drafter {proposer.describe()}, k = {_k_text(req)}, {sampling.describe()}, "
            f"{len(ids)} prompt tokens, up to {req.max_new_tokens} new \u00b7 {setup}")
    yield RunView(session, head + " \u2014 prefill \u2026", tokens="",
                  counters=counters_html(None, req.max_new_tokens, True), figures=_figures([], None),
                  check=check_html(preset_obj, None), prediction=prediction_markdown(session))

    phase = ["prefill"]

    def work(emit, stopped):
        if req.k_mode == "adaptive":
            phase[0] = "calibrating the cost model for adaptive k (once per pair, drafter and context length)"
        controller = _controller(pair, ids, proposer, req, session, provider.calibrations)
        phase[0] = "prefill"
        gen = speculative_generate(pair, ids, proposer=proposer, k=controller, sampling=sampling,
                                   max_new_tokens=req.max_new_tokens)
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
    with Background(work, "playground-run", device_lock(pair.device)) as bg:
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
                    figs, last_chart = _figures(run.records, summary), now
                n_it = summary.target_passes
                yield RunView(session, f"{head} \u2014 iteration {n_it}", tokens=renderer.html(),
                              counters=counters_html(summary, req.max_new_tokens, True), figures=figs)
                last_yield, dirty = now, False
            elif now - last_yield >= HEARTBEAT_S:
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
    doc = run_document(run, session.timing_for(run.drafter, run.prompt_key, req.k + 1))
    done = (f"Done: {summary.new_tokens} new tokens in {summary.target_passes} target passes, finished by "
            f"{summary.finished} \u00b7 drafter {run.drafter}, k = {_k_text(req, summary)}, {sampling.describe()} "
            f"\u00b7 {setup}")
    yield RunView(session, done, tokens=renderer.html(), counters=counters_html(summary, req.max_new_tokens, False),
                  figures=_figures(run.records, summary), check=check_html(preset_obj, run.check),
                  prediction=prediction_markdown(session), doc=doc, download=save_document(doc))


@dataclass
class CompareView:
    session: Session
    status: str
    prediction: str | None = None
    doc: dict | None = None
    download: str | None = None


@_stoppable("compare")
def stream_compare(provider: PairProvider, session: Session | None, progress: Progress = None) -> Iterator[CompareView]:
    """Plain decoding of the last run's prompt and length, right after it; the measured ratio beside the prediction."""
    from ..envinfo import describe_setup
    from ..core.engine import plain_generate
    from ..core.records import summarize

    run = session.run
    if run is None or not run.finished:
        raise PlaygroundError("there is no finished speculative run to compare with: press Run first (the "
                              "'Compare with plain' button runs one and then plain decoding right after)")
    pair = _get_pair(provider, progress)
    records: list = []
    started: list[float] = []

    def work(emit, stopped):
        started.append(time.perf_counter())
        for rec in plain_generate(pair, run.prompt_ids, sampling=run.sampling,
                                  max_new_tokens=run.request.max_new_tokens):
            records.append(rec)
            emit(None)
            if stopped():
                return

    n_max = run.request.max_new_tokens
    with Background(work, "playground-plain", device_lock(pair.device)) as bg:
        last = 0.0
        while not bg.finished:
            bg.poll(timeout=0.25)
            now = time.monotonic()
            if now - last >= 0.5 and not bg.finished:
                n = max(0, len(records) - 1)
                _report(progress, min(1.0, n / n_max), f"plain decoding: {n}/{n_max} tokens")
                yield CompareView(session, f"Plain decoding of the same prompt, for comparison: {n} / {n_max} "
                                           f"tokens \u2026")
                last = now
        bg.raise_error()
    plain = summarize(records)
    run.plain = plain
    run.plain_gap_s = started[0] - run.ended_at if started and run.ended_at else None
    run.plain_setup = describe_setup(pair)
    ratio = _ratio(run.summary.tokens_per_s, plain.tokens_per_s)
    doc = run_document(run, session.timing_for(run.drafter, run.prompt_key, run.request.k + 1))
    status = (f"Compared: speculative {run.summary.tokens_per_s:.1f} tokens/s, plain {plain.tokens_per_s:.1f} tokens/s"
              + (f" \u2192 measured speed-up {ratio:.2f}\u00d7" if ratio else "")
              + " (one adjacent pair of runs, prefill excluded)")
    yield CompareView(session, status, prediction_markdown(session), doc, save_document(doc))


@dataclass
class CalibrateView:
    session: Session
    status: str
    prediction: str | None = None


@_stoppable("calibrate")
def stream_calibrate(provider: PairProvider, session: Session | None, prompt, preset, chat, drafter, k, decoding,
                     temperature, top_k, top_p, max_new_tokens, seed, progress: Progress = None,
                     repeats: int = 12, warmup: int = 3, limits=None) -> Iterator[CalibrateView]:
    """Time the target over n = 1..max(9, k+1) tokens and the drafter per token on the current prompt.

    The result (a lab.Timing) is cached in the session per drafter and prompt."""
    from ..lab.calibration import calibrate
    from ..limits import Limits
    from ..drafters.registry import make_proposer

    limits = limits or Limits.from_env()
    drafters = [name for _, name in provider.drafter_choices()]
    req, _ = parse_request(prompt, preset, chat, drafter, k, decoding, temperature, top_k, top_p, max_new_tokens,
                           seed, drafters, limits)
    loading = _loading_status(provider)
    if loading:
        yield CalibrateView(session, loading)
    pair = _get_pair(provider, progress)
    ids, _ = resolve_prompt(pair, req)
    n_max = max(9, req.k + 1)
    _check_prompt_ids(pair, ids, n_max, limits)  # calibration feeds up to n_max tokens after the prompt
    proposer = make_proposer(pair, req.drafter)
    name = proposer.describe()
    key = prompt_key(ids)
    if session.timing_for(name, key, n_max) is not None:
        yield CalibrateView(session, f"Calibration for this prompt and drafter is already cached in this session "
                                     f"({name}, {len(ids)} prompt tokens).", prediction_markdown(session))
        return

    def work(emit, stopped):
        return calibrate(pair, ids, proposer, n_max=n_max, repeats=repeats, warmup=warmup,
                         progress=_ticker(emit, stopped))

    with Background(work, "playground-calibrate", device_lock(pair.device)) as bg:
        for line in _progress_lines(bg, progress, "Calibrating"):
            yield CalibrateView(session, line)
        bg.raise_error()
    timing = bg.result
    session.timings[(name, key)] = timing
    v = timing.v
    status = (f"Calibrated on this prompt ({len(ids)} tokens): target step {1000 * timing.target_step_s:.1f} ms, "
              f"drafter {1000 * timing.draft_step_s:.1f} ms/token \u2192 c = {timing.c:.3f}, "
              f"v({n_max}) = {v[n_max]:.2f}")
    yield CalibrateView(session, status, prediction_markdown(session))


@dataclass
class SweepView:
    session: Session
    status: str
    figure: Any = None
    table: list | None = None
    summary: str | None = None
    doc: dict | None = None


SWEEP_COLUMNS = ["k", "measured", "min", "max", "\u03b1", "predicted (iid)", "predicted (per-position)",
                 "break-even \u03b1"]


def sweep_rows(result: dict) -> list[list]:
    """The sweep table for display: speed-ups and rates to 3 decimals; a k that can never pay says so."""

    def r3(x):
        return "\u2013" if x is None else round(float(x), 3)

    rows = []
    for row in result.get("table", []):
        never = "break_even_alpha" in row and row["break_even_alpha"] is None  # computed: no alpha pays
        rows.append([row["k"], r3(row["median_ratio"]), r3(row["min_ratio"]), r3(row["max_ratio"]),
                     r3(row.get("alpha")), r3(row.get("predicted_iid")), r3(row.get("predicted_empirical")),
                     "never pays" if never else r3(row.get("break_even_alpha"))])
    return rows


def sweep_summary(result: dict, setup: str, rounds: int, max_new: int) -> str:
    table = result.get("table") or []
    if not table:
        return "No sweep result."
    fixed = [r for r in table if isinstance(r["k"], int)] or table
    best = next((r for r in fixed if r["k"] == result.get("best_k")), max(fixed, key=lambda r: r["median_ratio"]))
    lines = [f"**Recommended k = {best['k']}**: median measured speed-up {best['median_ratio']:.2f}\u00d7 "
             f"(range {best['min_ratio']:.2f}\u2013{best['max_ratio']:.2f} over {rounds} round(s))."]
    if result.get("predicted_best_k") is not None:
        lines.append(f"The cost model, from the per-position acceptance at the largest k and the calibration, "
                     f"predicts k = "
                     f"{result['predicted_best_k']}.")
    for r in table:
        if not isinstance(r["k"], int):  # the adaptive arm of the same rounds
            from ..drafters.adaptive import describe_choices

            lines.append(f"Adaptive k (chosen per iteration: {describe_choices(r.get('k_values') or {})}): {r['median_ratio']:.2f}\u00d7, "
                         f"{r['median_ratio'] / best['median_ratio']:.0%} of the best fixed k.")
    losing = [r["k"] for r in table if r["median_ratio"] < 1.0]
    if losing:
        lines.append(f"Slower than plain decoding (below break-even) at k = {', '.join(map(str, losing))}.")
    lines.append(f"How measured: in each round plain decoding and every k ran back to back in a rotating order, "
                 f"each speculative run divided by the plain run of its round; {max_new} max new tokens, prefill "
                 f"excluded; {setup}.")
    return " ".join(lines)


@_stoppable("sweep")
def stream_sweep(provider: PairProvider, session: Session | None, prompt, preset, chat, drafter, decoding,
                 temperature, top_k, top_p, seed, k_max, rounds, max_new_tokens, progress: Progress = None,
                 sweep_fn: Callable | None = None, limits=None) -> Iterator[SweepView]:
    """k = 1..k_max on the current prompt: measured and predicted speed-up against k, break-even, best k."""
    from ..envinfo import describe_setup
    from ..limits import Limits
    from ..drafters.registry import make_proposer

    drafters = [name for _, name in provider.drafter_choices()]
    k_max = _integer(k_max, "largest k")
    if not 1 <= k_max <= 16:
        raise PlaygroundError(f"the largest k to sweep must be from 1 to 16, got {k_max}")
    rounds = _integer(rounds, "rounds")
    if not 1 <= rounds <= 20:
        raise PlaygroundError(f"rounds must be from 1 to 20, got {rounds}")
    limits = limits or Limits.from_env()
    limits.check_sweep(k_max, rounds)
    req, sampling = parse_request(prompt, preset, chat, drafter, 1, decoding, temperature, top_k, top_p,
                                  max_new_tokens, seed, drafters, limits)
    loading = _loading_status(provider)
    if loading:
        yield SweepView(session, loading)
    pair = _get_pair(provider, progress)
    ids, _ = resolve_prompt(pair, req)
    _check_prompt_ids(pair, ids, req.max_new_tokens, limits)
    name = make_proposer(pair, req.drafter).describe()
    key = prompt_key(ids)
    ks = list(range(1, k_max + 1))
    timing = session.timing_for(name, key, k_max + 1)
    if sweep_fn is None:
        from ..lab.speed import sweep as sweep_fn

    def factory():
        return make_proposer(pair, req.drafter)

    def work(emit, stopped):
        return sweep_fn(pair, ids, factory, ks=ks, rounds=rounds, max_new_tokens=req.max_new_tokens,
                        sampling=sampling, timing=timing, progress=_ticker(emit, stopped))

    yield SweepView(session, f"Sweeping k = 1..{k_max}, {rounds} round(s), {req.max_new_tokens} new tokens per run "
                             f"\u2026", figure=charts.sweep_figure(None))
    with Background(work, "playground-sweep", device_lock(pair.device)) as bg:
        for line in _progress_lines(bg, progress, "Sweep"):
            yield SweepView(session, line)
        bg.raise_error()
    result = bg.result
    session.sweep = result
    if timing is None and isinstance(result.get("timing"), dict):
        restored = timing_from_dict(result["timing"])
        if restored is not None:
            session.timings[(name, key)] = restored
    setup = describe_setup(pair)
    text = sweep_summary(result, setup, rounds, req.max_new_tokens)
    best = result.get("best_k")
    status = f"Sweep done: recommended k = {best} for this prompt and drafter ({name})."
    yield SweepView(session, status, charts.sweep_figure(result), sweep_rows(result), text, _jsonable(result))


def timing_from_dict(d: dict):
    """A lab.Timing back from its to_dict() form (the sweep returns it that way); None if it does not fit."""
    from ..lab.calibration import Timing

    try:
        return Timing(target_step_s=float(d["target_step_s"]),
                      verify_s={int(n): float(s) for n, s in d["verify_s"].items()},
                      draft_step_s=float(d["draft_step_s"]), context_tokens=int(d["context_tokens"]),
                      raw=dict(d.get("raw") or {}), draft_call_s=float(d.get("draft_call_s", 0.0)))
    except (KeyError, TypeError, ValueError):
        return None


def _jsonable(x):
    """Round-trip through JSON (tuples -> lists, non-string keys -> strings; unknown objects -> str)."""
    return json.loads(json.dumps(x, default=lambda o: o.to_dict() if hasattr(o, "to_dict") else str(o)))


@dataclass
class PresetView:
    prompt: str
    max_new_tokens: int | None
    chat: bool
    info: str


def preset_choices(directory=None) -> tuple[list[tuple[str, str]], list[str]]:
    """Dropdown choices (label, name), with a first entry for the user's own prompt; and any preset errors."""
    from ..inputs.presets import load_presets

    presets, errors = load_presets(directory, strict=False)
    choices = [("your own prompt (no preset)", "")]
    choices += [(f"{p.title} \u00b7 {p.kind}", name) for name, p in presets.items()]
    return choices, [str(e) for e in errors]


def load_preset(provider: PairProvider, name, current_prompt: str = "", progress: Progress = None,
                session: Session | None = None) -> PresetView:
    """Fill the prompt box with the exact text the model sees for a preset (with the tokenizer of the pair the
    tab chose), and its max new tokens."""
    from ..inputs.presets import get_preset

    provider = provider.for_session(session)
    if not name:
        return PresetView(current_prompt or "", None, True,
                          "Your own prompt: sent as one user turn of the chat template (untick it to send raw text).")
    preset = get_preset(name)
    pair = _get_pair(provider, progress)
    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so presets cannot be shown as text")
    text = preset.prompt_text(pair.tokenizer)
    checked = ("output checked: valid JSON" + (" against the preset's JSON Schema" if preset.output_schema else "")
               if preset.checks_output else "free text (no output check)")
    info = (f"**{html.escape(preset.title)}** \u00b7 kind `{preset.kind}` \u00b7 {preset.max_new_tokens} max new "
            f"tokens \u00b7 {checked}  \n{html.escape(preset.description)}")
    return PresetView(text, preset.max_new_tokens, False, info)



# --- the pair menu ----------------------------------------------------------------------------------------


@dataclass
class PairView:
    session: Session
    drafters: list  # (label, name) for the drafter radio
    info: str


def pair_choices(provider: PairProvider) -> tuple[list[tuple[str, str]], str, bool]:
    """The pair menu: (label, value) per named pair (the app's own pair first if it is a custom one), the
    current value, and whether other models may be typed in (PLAYGROUND_ALLOW_ANY_MODEL=1)."""
    from ..pairs.registry import PAIRS, ModelPolicy

    if provider.fixed:  # an app built around one loaded pair (tests, embedding): nothing to choose
        name = provider.get().target_name
        return [(name, name)], name, False
    choices = [(f"{p.name} \u00b7 {p.describe()}" + (" (gated)" if p.gated else ""), p.name) for p in PAIRS.values()]
    value = provider.spec.choice
    if value not in PAIRS:
        choices.insert(0, (f"custom \u00b7 {value}", value))
    return choices, value, ModelPolicy.from_env().allow_any


def pair_info(provider: PairProvider) -> str:
    """One line under the pair menu: what the chosen pair is, and whether it is loaded yet."""
    from ..pairs.registry import PAIRS

    if provider.fixed:
        p = provider.get()
        return (f"<span class='small-note'>`{html.escape(p.target_name)}` + "
                f"`{html.escape(p.draft_name or 'no draft model')}` \u00b7 loaded</span>")
    spec = provider.spec
    named = PAIRS.get(spec.choice)
    note = named.note if named is not None else "a custom pair"
    state = "loaded" if provider.loaded() else "loads on the first run (hub models download once)"
    return (f"<span class='small-note'>`{html.escape(spec.target)}` + `{html.escape(spec.draft or 'no draft model')}`"
            f" \u00b7 {html.escape(note)} \u00b7 {state}</span>")


def select_pair(provider: PairProvider, session: Session | None, value) -> PairView:
    """Choose this tab's model pair (it loads on the next event that needs it); the drafters it offers."""
    session = session if session is not None else new_session()
    if provider.fixed:
        if value != provider.get().target_name:
            raise PlaygroundError(f"this app serves one pair, {provider.get().target_name!r}")
        return PairView(session, provider.drafter_choices(), pair_info(provider))
    spec = provider.spec_for(value)
    session.pair = None if spec == provider.spec else spec
    session.timings.clear()  # calibrations, runs and sweeps belong to the pair that made them
    session.run = session.sweep = None
    chosen = provider.for_session(session)
    return PairView(session, chosen.drafter_choices(), pair_info(chosen))
