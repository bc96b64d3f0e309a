"""The drafters with a memory (DrafterSpec.new_memory: the suffix drafters) in a replay: their earlier turns.

A live agent's suffix cache holds the responses it wrote before. A replay builds it the same way: one memory per
drafter and arm (k or controller) for the whole trace (its arm's `Conversation`, options.TraceMemory.arm),
grown by that arm's walks turn by turn in the file's order (each walk begins a run over the turn's prompt and
appends the committed tokens, as a live run does), across conversations. So a walk is the live run that had the
same history: replay equals a live run fed the same earlier turns, iteration by iteration
(tests/test_suffix_replay.py). Arms never share a memory: each must see only the turns before its own.

What the history was worth: every arm of such a drafter is walked a second time over an empty memory, as the
drafter `NAME (no cache)` beside it (with its drafter's calibration), which the report pools per output shape like
any drafter. A turn's prompt still holds its own conversation's earlier turns (the run's own tree sees them either
way): the cache adds the other conversations' responses, and what a prompt no longer quotes.
"""

from __future__ import annotations

import dataclasses

from ...drafters.registry import new_memory
from ...results.replay import DrafterTrust, WalkedDrafter

ALONE = " (no cache)"


def alone(drafter: str) -> list[tuple[str, object]]:
    """For a drafter with a memory, the walk to add with no memory of earlier responses: (its name, an empty memory);
    else none."""
    factory = new_memory(drafter)
    return [(drafter + ALONE, factory())] if factory is not None else []


def alone_entry(drafters: dict[str, WalkedDrafter], entry: WalkedDrafter, name: str) -> WalkedDrafter:
    """The turn's entry for the walks of `name` (with no cache), with its drafter's `entry`'s fields."""
    if name not in drafters:
        drafters[name] = dataclasses.replace(entry, walks={}, chunking_differs={})
    return drafters[name]


def with_alone(drafters: list[str], trust: dict[str, DrafterTrust]) -> list[str]:
    """The drafters with the walks with no cache named among them, each after its drafter; `trust` gets their
    drafter's calibration verdict."""
    names = []
    for d in drafters:
        names.append(d)
        if new_memory(d) is not None:
            names.append(d + ALONE)
            if d in trust:
                trust[d + ALONE] = trust[d]
    return names
