"""What an agent's runs carry from one to the next: a `Conversation`.

One per browser tab, lab speed arm, replayed arm and trace turn run live. It holds

- each drafter's memory of earlier runs, made on first use by its DrafterSpec.new_memory (None for a stateless
  drafter) and handed to its build as the `memory` option; drafters declaring the same factory share one (a tab's
  suffix, suffix-hybrid and schema+suffix runs grow one suffix tree);
- the k controllers' state (adaptive.make_controller's `memory`), per key (a drafter, a trace's conversation);
- calibrations (the browser's: (drafter, prompt key) -> lab.Timing).

It is an object passed to whoever runs, never a module global. This module imports nothing heavy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from .registry import make_proposer, new_memory


class Conversation:
    """The memories, controller states and calibrations of one agent's runs (the module docstring)."""

    def __init__(self):
        self._memories: dict = {}  # a DrafterSpec.new_memory factory -> the memory it made
        self.controllers: dict = {}  # key -> a controller's state
        self.timings: dict = {}  # key -> a calibration

    def memory(self, drafter: str):
        """`drafter`'s memory of this conversation's earlier runs, made on first use; None for a stateless drafter."""
        factory = new_memory(drafter)
        if factory is None:
            return None
        if factory not in self._memories:
            self._memories[factory] = factory()
        return self._memories[factory]

    def proposer(self, pair, drafter: str, **options):
        """A new proposer of `drafter` (registry.make_proposer) over this conversation's memory of it."""
        return make_proposer(pair, drafter, memory=self.memory(drafter), **options)

    def controller(self, key: Hashable = None) -> dict:
        """The state a k controller under `key` carries from run to run (adaptive.make_controller's `memory`)."""
        return self.controllers.setdefault(key, {})

    def remember(self, drafter: str, prompt_ids: Sequence[int], response_ids: Sequence[int]) -> None:
        """Keep a turn run elsewhere (a recorded trace's) in `drafter`'s memory, as if it had run here."""
        memory = self.memory(drafter)
        if memory is not None:
            memory.add_response(prompt_ids, response_ids)

    def describe(self, drafter: str) -> str | None:
        """What `drafter`'s memory holds, in a sentence for a status line; None for a stateless drafter, or one
        that has not run in this conversation (nothing is made to be described)."""
        memory = self._memories.get(new_memory(drafter))
        return memory.describe() if memory is not None else None

    def forget(self) -> str:
        """Empty every drafter's memory; what they held before, in a sentence."""
        held = "; ".join(m.describe() for m in self._memories.values())
        for memory in self._memories.values():
            memory.clear()
        return held or "the drafters' memory holds nothing"
