"""Status lines for the work an event waits on: what is happening, the time since the event began (over every
phase, never reset), and an estimate of the time left from the speed so far. A worker thread (serving.Background)
emits progress ticks (`ticker`) and phase starts (`phase`); a `Tracker` reads them from its output and writes the
status line.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator

from .serving import HEARTBEAT_S, Background, PairChoice, PairProvider, Stopped

MIN_ELAPSED_S = 2.0  # no estimate of the time left before this much of a phase has run ...
MIN_FRACTION = 0.04  # ... and this share of it is done: the first cycles include warm-up
EXPECTED_UNTIL = 0.25  # a phase's expected length, where one is known, stands until this share of it is done


def clock_text(seconds: float) -> str:
    """'7 s', '2 min 05 s', '1 h 03 min'."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def eta_text(elapsed: float, fraction: float | None, expected_s: float | None = None) -> str | None:
    """'~40 s left': from the phase's `expected_s` (what a calibration says it takes) while less than
    EXPECTED_UNTIL of it is done and it has not run over, else from how long the done `fraction` took (the first
    runs, slowed by warm-up, would say minutes for a sweep of seconds); None until a fair estimate can be made."""
    if expected_s is not None and (fraction is None or fraction < EXPECTED_UNTIL) and elapsed < expected_s:
        return f"~{clock_text(expected_s - elapsed)} left (from the calibration)"
    if fraction is None or not MIN_FRACTION <= fraction < 1.0 or elapsed < MIN_ELAPSED_S:
        return None
    return f"~{clock_text(elapsed * (1.0 - fraction) / fraction)} left"


def ticker(emit, stopped):
    """A lab progress callback: reports through the worker's queue, and aborts when the consumer stopped."""

    def tick(fraction: float, message: str) -> None:
        if stopped():
            raise Stopped()
        emit(("progress", float(fraction), str(message)))

    return tick


def phase(emit, label: str, expected_s: float | None = None) -> None:
    """Tell the consumer a new phase of the work begins (its estimate of the time left starts over, from
    `expected_s` where the phase's length is known)."""
    emit(("phase", label, time.monotonic(), expected_s))


class Tracker:
    """What a worker said about its progress, as one status line."""

    def __init__(self, what: str, started: float, message: str = "starting", about: str = ""):
        self.what, self.started, self.about = what, started, about
        self.phase, self.phase_started, self.expected_s = "", time.monotonic(), None
        self.fraction: float | None = None
        self.message = message
        self.ticked = False  # set by `take` when a tick or a phase arrived

    def take(self, items: list) -> list:
        """Consume the progress items among `items`; return the others (a run's records)."""
        rest = []
        self.ticked = False
        for x in items:
            if isinstance(x, tuple) and x and x[0] == "progress":
                _, self.fraction, self.message = x
                self.ticked = True
            elif isinstance(x, tuple) and x and x[0] == "phase":
                _, self.phase, self.phase_started, self.expected_s = x
                self.fraction, self.message, self.ticked = None, "starting", True
            else:
                rest.append(x)
        return rest

    def numbers(self) -> list[str]:
        """The share of the phase done and the time left in it, as far as they are known."""
        done = [f"{100 * self.fraction:.0f}%"] if self.fraction is not None else []
        left = eta_text(time.monotonic() - self.phase_started, self.fraction, self.expected_s)
        return done + ([left] if left else [])

    def doing(self) -> str:
        """What the work does now: the phase, its last message, the share done and the time left."""
        extra = f" ({', '.join(self.numbers())})" if self.numbers() else ""
        return f"{self.phase}: {self.message}{extra}" if self.phase else f"{self.message}{extra}"

    def line(self) -> str:
        """What happens now, its numbers and the time since the event began first (markup.fold keeps them in
        sight), then `about`, the detail."""
        head = f"{self.what} \u2014 {self.phase}" if self.phase else self.what
        shown = ", ".join([*self.numbers(), clock_text(time.monotonic() - self.started)])
        return f"{head}: {self.message} ({shown})" + (f" \u00b7 {self.about}" if self.about else "") + " \u2026"


def progress_lines(bg: Background, tracker: Tracker) -> Iterator[str]:
    """Status lines while `bg` runs: on progress ticks (at most ~3 a second) and a heartbeat otherwise."""
    last = 0.0
    while not bg.finished:
        tracker.take(bg.poll(timeout=0.2))
        now = time.monotonic()
        if not bg.finished and now - last >= (0.3 if tracker.ticked else HEARTBEAT_S):
            yield tracker.line()
            last = now


def mapped(gen, to_view: Callable):
    """`yield from gen`, each item turned into a view by `to_view`; returns what `gen` returns."""
    try:
        while True:
            try:
                item = next(gen)
            except StopIteration as e:
                return e.value
            yield to_view(item)
    finally:
        gen.close()


def loading_message(choice: PairChoice, now: str = "") -> str:
    """What is loading (the chosen pair), and what that involves, for the status line; `now` (how long it has
    loaded, what the loader said last) goes first, where a folded line still shows it."""
    what = choice.describe()
    if choice.target == "embedded":
        how = ("the first load in this process dequantizes the embedded model once and caches it, about 30-40 s on "
               "2 cores; later loads take a few seconds")
    else:
        how = "from the Hugging Face cache, or downloaded from the hub the first time (that needs the network)"
    return f"Loading the model pair{now} {what}: {how}"


def load_with_progress(provider: PairProvider, started: float) -> Generator[str, None, object]:
    """The provider's pair (`pair = yield from load_with_progress(...)`): at once when loaded, else loaded in a worker
    thread while status lines say what loads, what the loader said last, and for how long."""
    if provider.loaded():
        return provider.get()
    said = ""

    def work(emit, stopped):
        return provider.get(lambda message: emit(("said", str(message))))

    yield f"{loading_message(provider.choice)} \u2026"
    with Background(work, "playground-load") as bg:
        while not bg.finished:
            said = next((x[1].strip() for x in reversed(bg.poll(timeout=HEARTBEAT_S))
                         if isinstance(x, tuple) and x[0] == "said"), said)
            if not bg.finished:
                now = f", {clock_text(time.monotonic() - started)} so far \u00b7" + (f" {said[:160]} \u00b7" if said else "")
                yield f"{loading_message(provider.choice, now)} \u2026"
        bg.raise_error()
    return bg.result
