"""What the app serves from, shared by every browser tab: the model pairs it has loaded, and the device.

Each pair is loaded once per process, on first use, under a lock (`PairCache`, `MODEL_CACHE`), with the cost
curves measured on it; `PairProvider` is what an event asks for its pair. The engine runs in a worker thread that
hands its records over a queue (`Background`), so the time the UI spends rendering is never inside the engine's
clock (a generator that yields to the UI would count the UI's work as decoding time). Stopping a run closes the
consuming generator, which tells the worker to stop at its next record; a per-device lock (`device_lock`) makes
the next event's worker wait for it, so two runs never share the device. Per-user state never lives here: it is in
each tab's `Session` (ui/session.py).
"""

from __future__ import annotations

import dataclasses
import functools
import html
import os
import queue
import threading
import time
from collections.abc import Callable

from ..drafters.registry import PairFacts, drafters
from ..errors import PlaygroundError
from ..lab.calibration import CalibrationStore
from ..pairs.models import EMBEDDED_NAME, ModelPair, release_memory
from ..pairs.registry import (
    ALLOW_ANY_ENV,
    PAIRS,
    ModelPolicy,
    PairChoice,
    Placement,
    choose_pair,
    load_choice,
    pair_name_of,
    parse_custom,
)
from .session import new_session

HEARTBEAT_S = 0.5  # a status update at least this often, so a Stop never waits on a silent generator
AUTO_LABEL = "auto"


def drafter_help(choices) -> str:
    """The drafter menu's help, behind a fold (`choices`: the menu's (label, name) pairs): what "auto" picks and what
    each drafter in the menu proposes, in the registry's words (DrafterSpec.description), so every one is explained."""
    specs = {s.name: s for s in drafters()}
    said = {AUTO_LABEL: "the first this pair can run of " + ", else ".join(s.label for s in drafters() if s.auto)}
    said.update((specs[n].label, specs[n].description) for _, n in choices if n in specs)
    items = "".join(f"<dt>{html.escape(label)}</dt><dd>{html.escape(text)}</dd>" for label, text in said.items())
    return f'<details class="glossary"><summary>What each drafter does</summary><dl>{items}</dl></details>'


# --- which pair ---------------------------------------------------------------------------------------------


def choice_from_env(env=None, pair: str | None = None, custom: tuple | None = None) -> PairChoice:
    """The pair the app serves. From the environment: PLAYGROUND_PAIR (a named pair, playground.pairs; default
    'embedded'), PLAYGROUND_TARGET / PLAYGROUND_DRAFT (override its target / draft; 'none' for model-free
    drafters only), PLAYGROUND_DEVICE, PLAYGROUND_DTYPE ('auto' default), PLAYGROUND_DEVICE_MAP. Or the named
    `pair`, or a `custom` (target, draft), chosen in the app, with the environment's device, dtype and device
    map. Which models may load is checked when the pair loads (playground.pairs.ModelPolicy), not here."""
    env = os.environ if env is None else env
    if pair is None and custom is None:
        target, draft = env.get("PLAYGROUND_TARGET") or None, env.get("PLAYGROUND_DRAFT")
        pair = env.get("PLAYGROUND_PAIR") or None
    else:
        target, draft = custom if custom is not None else (None, None)
        draft = "none" if custom is not None and draft is None else draft
    placement = Placement(device=env.get("PLAYGROUND_DEVICE") or None, dtype=env.get("PLAYGROUND_DTYPE") or None,
                          device_map=env.get("PLAYGROUND_DEVICE_MAP") or None)
    return choose_pair(pair=pair, target=target, draft=draft, placement=placement, env=env, check=False)


def menu_value(choice: PairChoice) -> str:
    """A pair's value in the app's pair menu: its name, or 'TARGET, DRAFT'."""
    return choice.name or pair_name_of(choice.target, choice.draft) or f"{choice.target}, {choice.draft or 'none'}"


def pair_key(choice: PairChoice) -> PairChoice:
    """What identifies a loaded pair: the models and where they run. The name is a label: two choices that
    differ only in it are the same pair."""
    return dataclasses.replace(choice, name=None)


def same_pair(a: PairChoice | None, b: PairChoice | None) -> bool:
    return a is not None and b is not None and pair_key(a) == pair_key(b)


# --- the model cache ----------------------------------------------------------------------------------------


class PairCache:
    """The process-wide model cache: one ModelPair per pair (`pair_key`), loaded lazily under a lock, and the
    cost curves measured on it, kept while it stays loaded.

    Shared by every session (models are read-only during decoding). `load`, when given, replaces the
    policy-checked loader (`playground.pairs.registry.load_choice`) and takes models.load_pair's signature."""

    def __init__(self, load=None, max_pairs: int | None = None):
        self._lock = threading.Lock()
        self._pairs: dict[PairChoice, ModelPair] = {}
        self._calibrations: dict[PairChoice, CalibrationStore] = {}
        self._loading: dict[PairChoice, float] = {}  # what is loading now, since when (the health check reads it)
        self._load = load
        # At most this many pairs stay loaded (least recently used goes first): two hub pairs may not fit one
        # GPU together. PLAYGROUND_MAX_LOADED_PAIRS, default 1.
        if max_pairs is None:
            try:
                max_pairs = int(os.environ.get("PLAYGROUND_MAX_LOADED_PAIRS", "1"))
            except ValueError:
                max_pairs = 1
        self._max_pairs = max(1, max_pairs)

    def loaded(self, choice: PairChoice) -> bool:
        return pair_key(choice) in self._pairs

    def status(self) -> dict:
        """What is loaded and what is loading (for how long): the health check's answer. Reads without the lock,
        which a load holds for minutes: copies of two small dicts, so at worst a moment old."""
        now = time.monotonic()
        return {"loaded": [menu_value(c) for c in list(self._pairs)],
                "loading": [{"pair": menu_value(c), "seconds": round(now - t)} for c, t in list(self._loading.items())]}

    def get(self, choice: PairChoice, progress: Callable[[str], None] | None = None):
        key = pair_key(choice)
        with self._lock:
            pair = self._pairs.pop(key, None)
            if pair is None:
                if len(self._pairs) >= self._max_pairs:
                    while len(self._pairs) >= self._max_pairs:
                        dropped = next(iter(self._pairs))
                        self._pairs.pop(dropped)
                        self._calibrations.pop(dropped, None)
                    release_memory()  # a run still holding the dropped pair keeps it until it ends
                self._loading[key] = time.monotonic()
                try:
                    pair = self._load_pair(choice, progress)
                finally:
                    self._loading.pop(key, None)
            self._pairs[key] = pair  # most recently used last
            return pair

    def _load_pair(self, choice: PairChoice, progress):
        if self._load is None:  # the policy and gated-model checks, then models.load_pair
            return load_choice(choice, progress)
        extra = {"device_map": choice.device_map} if choice.device_map else {}
        return self._load(choice.target, choice.draft, device=choice.device, dtype=choice.dtype, progress=progress,
                          **extra)

    def calibrations(self, choice: PairChoice) -> CalibrationStore:
        """The cost curves measured on this pair, shared by every tab (see lab.CalibrationStore)."""
        with self._lock:
            return self._calibrations.setdefault(pair_key(choice), CalibrationStore())


MODEL_CACHE = PairCache()


class PairProvider:
    """What the UI asks for its pair: a choice served from the shared cache, or a fixed pair (tests)."""

    def __init__(self, choice: PairChoice | None = None, pair=None, cache: PairCache | None = None):
        self.choice = choice if choice is not None else choice_from_env()
        self._pair = pair
        self._cache = cache if cache is not None else MODEL_CACHE
        self._own_calibrations = CalibrationStore() if pair is not None else None

    def loaded(self) -> bool:
        return self._pair is not None or self._cache.loaded(self.choice)

    @property
    def fixed(self) -> bool:
        """Built around one loaded pair (tests): the pair menu has nothing to choose."""
        return self._pair is not None

    def for_session(self, session) -> PairProvider:
        """The provider of the pair a tab chose in the pair menu (the same shared cache), or this one."""
        chosen = getattr(session, "pair", None)
        if self._pair is not None or chosen is None or same_pair(chosen, self.choice):
            return self
        return PairProvider(choice=chosen, cache=self._cache)

    def choice_for(self, value) -> PairChoice:
        """The pair of a pair-menu value: a named pair, this provider's own choice, or a typed 'TARGET, DRAFT'
        (only with PLAYGROUND_ALLOW_ANY_MODEL=1; paths only inside PLAYGROUND_MODEL_ROOTS)."""
        if not isinstance(value, str) or not value.strip():
            raise PlaygroundError(f"choose a model pair: one of {', '.join(PAIRS)}")
        value = value.strip()
        if value == menu_value(self.choice):
            return self.choice
        if value in PAIRS:
            return choice_from_env(pair=value)
        policy = ModelPolicy.from_env()
        if not policy.allow_any:
            raise PlaygroundError(f"unknown model pair {value[:200]!r}; choose one of {', '.join(PAIRS)} (other "
                                  f"models can be typed in only when the app runs with {ALLOW_ANY_ENV}=1)")
        target, draft = parse_custom(value)
        policy.check(target, "target")
        policy.check(draft, "draft")
        return choice_from_env(custom=(target, draft))

    def get(self, progress: Callable[[str], None] | None = None):
        if self._pair is not None:
            return self._pair
        return self._cache.get(self.choice, progress)

    @property
    def calibrations(self) -> CalibrationStore:
        """The pair's calibrations, shared by the tabs that use it."""
        return self._own_calibrations if self._pair is not None else self._cache.calibrations(self.choice)

    @property
    def has_draft(self) -> bool:
        if self._pair is not None:
            return self._pair.draft is not None
        return self.choice.draft is not None

    @property
    def device(self) -> str:
        return str(self._pair.device) if self._pair is not None else self.choice.device

    @property
    def embedded_target(self) -> bool:
        if self._pair is not None:
            return self._pair.target_name == EMBEDDED_NAME
        return self.choice.target == "embedded"

    def drafter_choices(self) -> list[tuple[str, str]]:
        """(label, name): 'auto' first (playground.drafters.registry.default_drafter picks at run time), then
        each declared drafter (playground.drafters.registry) this pair can use. Availability that needs an
        import (llama-cpp-python) is checked when a run asks for it, with a message saying how to install it."""
        facts = PairFacts(self.has_draft, self.embedded_target, check_installs=False)
        return [(AUTO_LABEL, "auto"), *((s.label, s.name) for s in drafters() if s.available(facts)[0])]

    def drafter_names(self) -> list[str]:
        """The drafters a request on this pair may name."""
        return [name for _, name in self.drafter_choices()]


# --- running work off the consuming thread ------------------------------------------------------------------


class Stopped(Exception):
    """Raised inside background work when the consumer was closed (the user pressed Stop)."""


_DONE = object()
_DEVICE_LOCKS: dict[str, threading.Lock] = {}
_DEVICE_LOCKS_GUARD = threading.Lock()


def device_lock(device) -> threading.Lock:
    """One lock per device, held by whatever computes on it (shared hardware, not per-user state).

    Gradio's queue already runs one model event at a time per device; this lock also covers the moment
    after a Stop, when the cancelled event's worker may still be finishing its current iteration while
    the next queued event starts: the next worker waits for it instead of overlapping it."""
    with _DEVICE_LOCKS_GUARD:
        return _DEVICE_LOCKS.setdefault(str(device), threading.Lock())


class Background:
    """Runs `work(emit, stopped)` in a thread (holding the device lock, if given); the consuming
    generator polls what it emits.

    Used as a context manager. Leaving the block normally joins the finished thread. Leaving it by
    GeneratorExit (Gradio closing the generator when Stop cancels the event) sets the stop flag and
    returns at once: the close may run on the server's event loop, which must not wait for an
    iteration to finish. The worker stops at its next record and releases the device lock."""

    def __init__(self, work: Callable[[Callable[[object], None], Callable[[], bool]], object], name: str = "playground",
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
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, re-raised there
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


def stoppable(what: str):
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


def get_pair(provider: PairProvider):
    """The provider's pair, loading it here if need be (events that can wait use progress.load_with_progress instead)."""
    return provider.get()
