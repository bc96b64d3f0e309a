"""A big replay is announced before it runs: the turns and tokens it would replay, what the caps skipped, and an
estimate of the time, with the offer of its first N turns (the tab's 'First turns'). No gradio here.

The estimate times one teacher-forced target pass over the first turn (`probe_seconds_per_token`, under the device
lock, a second or so) and scales it by the trace's tokens; a model drafter about doubles the passes. It is an
order of magnitude for deciding whether to wait, and said to be one ("about").
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..drafters import registry
from ..lab.replay import target_chunks
from ..limits import ENV_VARS, Limits
from .progress import clock_text

BIG_S = 120.0  # a replay estimated to take longer is announced first
OFFER_S = 60.0  # the first N turns offered instead take about this long
BIG_TURNS = 200  # ... and so is one of more turns than this, whatever the estimate


def tokens_of(turns: Sequence) -> int:
    return sum(len(t.prompt_ids) + len(t.completion_ids) for t in turns)


def probe_seconds_per_token(pair, turn, chunk: int) -> float:
    """Seconds per token of one target pass over `turn` (its prompt and completion, `chunk` tokens at a time)."""
    started = time.perf_counter()
    for _ in target_chunks(pair, turn.prompt_ids, turn.completion_ids, chunk):
        pass
    return (time.perf_counter() - started) / max(1, len(turn.prompt_ids) + len(turn.completion_ids))


def estimate_seconds(turns: Sequence, seconds_per_token: float, drafter: str) -> float:
    spec = registry.drafter_spec(drafter) if drafter in registry.names() else None
    model = spec is not None and spec.replay != "live"  # a model drafter's own pass over the text
    return tokens_of(turns) * seconds_per_token * (2.0 if model else 1.2)


def announcement(turns: Sequence, skipped_turns: int, refused: int, seconds: float, limits: Limits) -> str | None:
    """The status line that stops a big replay before it starts (None when it is not big): turns, tokens and the
    estimate first, then what the caps skipped and the offer of the first N turns."""
    if seconds <= BIG_S and len(turns) <= BIG_TURNS:
        return None
    n = len(turns)
    offer = max(1, min(n - 1, int(n * OFFER_S / seconds))) if seconds > 0 else n
    skipped = (f"{skipped_turns} turns past the cap of {limits.max_replay_turns} ({ENV_VARS['max_replay_turns']}) "
               f"skipped" if skipped_turns else f"the cap is {limits.max_replay_turns} turns")
    bad = f", {refused} lines refused (e.g. over {limits.max_replay_tokens} tokens a turn)" if refused else ""
    return (f"\u26a0 Not started: {n} turns, {tokens_of(turns):,} tokens, about {clock_text(seconds)} \u00b7 {skipped}"
            f"{bad} \u00b7 press Run replay again to replay all {n}, or set First turns to {offer} (about "
            f"{clock_text(seconds * offer / n)})")
