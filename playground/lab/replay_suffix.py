"""The suffix drafters in a replay: their memory of earlier turns.

A live agent's suffix cache holds the responses it wrote before. A replay builds it the same way: one
`SuffixCache` per suffix drafter and arm (k or controller) for the whole trace, grown by that arm's walks turn
by turn in the file's order (each walk begins a run over the turn's prompt and appends the committed tokens, as
a live run does), across conversations. So a walk is the live run that had the same history: replay equals a
live run fed the same earlier turns, iteration by iteration (tests/test_suffix_replay.py). Arms never share a
cache: each must see only the turns before its own.
"""

from __future__ import annotations

from ..core.proposal import Proposer
from ..drafters.suffix import SuffixHybridProposer, SuffixProposer
from ..drafters.suffix_cache import SuffixCache

SUFFIX_DRAFTERS = ("suffix", "suffix-hybrid")


def suffix_cache(memories: dict, drafter: str, label: str) -> SuffixCache | None:
    """The cache of `drafter`'s `label` arm, kept in the replay's `memories` for the whole trace (keyed by the
    class, which no conversation name can equal); None for the other drafters."""
    if drafter not in SUFFIX_DRAFTERS:
        return None
    return memories.setdefault((SuffixCache, drafter, label), SuffixCache())


def suffix_hybrid(model: Proposer, cache: SuffixCache | None) -> SuffixHybridProposer:
    return SuffixHybridProposer(model, SuffixProposer(cache))
