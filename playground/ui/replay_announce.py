"""The Replay tab's status lines, what happens now first and the detail last, so that a line folded behind
"more" (markup.fold) still shows it. No gradio here.

A big replay is announced before it runs (`announcement`), with the offer of its first N turns first, then the
estimate of the time: one teacher-forced target pass over the first turn (`probe_seconds_per_token`, under the
device lock, a second or so) scaled by the trace's tokens, a model drafter about doubling the passes. It is an
order of magnitude for deciding whether to wait, and said to be one ("about").
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from ..core.engine import K_MAX
from ..drafters import registry
from ..lab.replay import target_chunks
from ..limits import ENV_VARS, Limits
from ..results.replay import ReplayResult
from .progress import Tracker, clock_text
from .replay_view import edge_note, estimate_note, replay_recommendation

BIG_S = 120.0  # a replay estimated to take longer is announced first
OFFER_S = 60.0  # the first N turns offered instead take about this long
BIG_TURNS = 200  # ... and so is one of more turns than this, whatever the estimate
PROBE_TOKENS = 20_000  # a trace of more tokens is timed before it runs
ESTIMATING = "Estimating the replay's time: one target pass over the first turn \u2026"


class ReplayTracker(Tracker):
    """A Tracker whose line leads with what happens now: '{phase} {now} ({share done, time left in the phase, time
    since the event began})', then the rest of the message, the step among `phases`, and what the replay is. A
    message puts what happens now before ' \u00b7 ' (lab.replay's 'turn 3 of 34 \u00b7 weather: lookup k=2')."""

    def __init__(self, what: str, started: float, phases: Sequence[str]):
        super().__init__(what, started)
        self.phases = list(phases)

    def line(self) -> str:
        now = time.monotonic()
        doing, _, detail = self.message.partition(" \u00b7 ") if self.fraction is not None else ("", "", "")
        shown = [*self.numbers(), clock_text(now - self.started)]
        phase = self.phase or self.phases[0]
        step = (f"step {self.phases.index(phase) + 1} of {len(self.phases)}"
                if len(self.phases) > 1 and phase in self.phases else "")
        parts = [f"{phase} {doing}".strip() + f" ({', '.join(shown)})", detail, step, self.what]
        return " \u00b7 ".join(p for p in parts if p) + " \u2026"


def tokens_of(turns: Sequence) -> int:
    return sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)


def probe_seconds_per_token(pair, turn, chunk: int) -> float:
    """Seconds per token of one target pass over `turn` (its prompt and completion, `chunk` tokens at a time)."""
    started = time.perf_counter()
    for _ in target_chunks(pair, turn.prompt_ids, turn.completion_ids, chunk):
        pass
    return (time.perf_counter() - started) / max(1, len(turn.prompt_ids) + len(turn.completion_ids))


def is_big(turns: Sequence) -> bool:
    """A replay to time and perhaps announce before it runs."""
    return len(turns) > BIG_TURNS or tokens_of(turns) > PROBE_TOKENS


def estimate_seconds(turns: Sequence, seconds_per_token: float, drafter: str) -> float:
    spec = registry.drafter_spec(drafter) if drafter in registry.names() else None
    model = spec is not None and spec.replay != "live"  # a model drafter's own pass over the text
    return tokens_of(turns) * seconds_per_token * (2.0 if model else 1.2)


def announcement(turns: Sequence, skipped_turns: int, refused: int, seconds: float, limits: Limits) -> str | None:
    """The status line that stops a big replay before it starts (None when it is not big): what to do first (the
    offer of the first N turns, or all of them), then the estimate, the tokens and what the caps skipped."""
    if seconds <= BIG_S and len(turns) <= BIG_TURNS:
        return None
    n = len(turns)
    offer = max(1, min(n - 1, int(n * OFFER_S / seconds))) if seconds > 0 else n
    skipped = (f"{skipped_turns} turns past the cap of {limits.max_replay_turns} ({ENV_VARS['max_replay_turns']}) "
               f"skipped" if skipped_turns else f"the cap is {limits.max_replay_turns} turns")
    bad = f", {refused} lines refused (e.g. over {limits.max_replay_tokens} tokens a turn)" if refused else ""
    return (f"\u26a0 Not started: set First turns to {offer} (about {clock_text(seconds * offer / n)}), or press Run "
            f"replay again for all {n} turns (about {clock_text(seconds)}) \u00b7 {tokens_of(turns):,} tokens \u00b7 "
            f"{skipped}{bad}")


def done_status(result: ReplayResult, drafter: str, seconds: float) -> str:
    """'Replay done: recommended k = 4 for all tokens with ...' (or why none), the turns and the time; a
    recommendation at the largest k replayed says so beside the k."""
    k, why = replay_recommendation(result.summary.overall)
    edge = f" (k = {max(result.ks)} is the largest replayed: try 1-{K_MAX})" if edge_note(result) else ""
    head = (f"Replay done: recommended k = {k}{edge} for all tokens with {drafter}" if k is not None
            else f"Replay done: no recommended k with {drafter}{edge} \u2014 {html.escape(why)}")
    exact = sum(1 for t in result.turns if t.exact)
    bad = f", {len(result.errors)} not replayed (listed below)" if result.errors else ""
    kind = " (estimates)" if estimate_note(result) else ""
    return f"{head}{kind} \u00b7 {len(result.turns)} turns ({exact} exact){bad} \u00b7 {clock_text(seconds)}"
