"""The controls an event hands over, as one typed value. Gradio gives a handler its inputs as a dict keyed by the
components' names (blocks.py names them); `Controls.of` turns that dict into this dataclass once, at the edge,
so that the parsers (session.parse_request, parse_sweep, replay_request.parse_replay) and the range check read
attributes. The values are raw, as typed in the page: the parsers validate them and say what to fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Controls:
    """Every control an event may read, by its component's name; None where the event does not send it."""

    # the Run tab
    prompt: Any = None
    preset: Any = None
    chat: Any = None
    drafter: Any = None
    k: Any = None
    k_mode: Any = None
    decoding: Any = None
    temperature: Any = None
    top_k: Any = None
    top_p: Any = None
    seed: Any = None
    max_new_tokens: Any = None
    min_confidence: Any = None
    careful: Any = None
    constrain: Any = None
    # the k-per-shape tab (a sweep)
    k_max: Any = None
    rounds: Any = None
    # the Replay tab
    source: Any = None
    trace_file: Any = None
    presets: Any = None
    ks: Any = None
    controllers: Any = None
    calibration: Any = None
    first_turns: Any = None

    @classmethod
    def of(cls, values: Controls | Mapping[str, Any]) -> Controls:
        """The controls from an event's dict (names the form does not hold are left out), or as given."""
        if isinstance(values, Controls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in names})

    def but(self, **changes) -> Controls:
        """The same controls with `changes` (a parser filling what its event does not send)."""
        return dataclasses.replace(self, **changes)
