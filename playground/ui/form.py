"""The controls an event hands over, as one typed value. Gradio gives a handler its inputs as a dict keyed by the
components' names (blocks.py names them); `Controls.of` turns that dict into this dataclass once, at the edge,
so that the parsers (session.parse_request, parse_sweep, replay_request.parse_replay) and the range check read
attributes. The values are raw, as typed in the page: the parsers validate them and say what to fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias

Widget: TypeAlias = str | int | float | bool | list | dict | None
"""One control's raw value, as Gradio hands it to a handler: text, a number, a box's tick, a multiple choice's list,
None where it is empty (an API call may send any JSON value, a dict too). The parsers check it."""


@dataclass(frozen=True)
class Controls:
    """Every control an event may read, by its component's name; None where the event does not send it."""

    # the Run tab
    prompt: Widget = None
    preset: Widget = None
    chat: Widget = None
    drafter: Widget = None
    k: Widget = None
    k_mode: Widget = None
    decoding: Widget = None
    temperature: Widget = None
    top_k: Widget = None
    top_p: Widget = None
    seed: Widget = None
    max_new_tokens: Widget = None
    min_confidence: Widget = None
    careful: Widget = None
    constrain: Widget = None
    # the k-per-shape tab (a sweep)
    k_max: Widget = None
    rounds: Widget = None
    # the Replay tab
    source: Widget = None
    trace_file: Widget = None
    presets: Widget = None
    ks: Widget = None
    controllers: Widget = None
    calibration: Widget = None
    first_turns: Widget = None

    @classmethod
    def of(cls, values: Controls | Mapping[str, Widget]) -> Controls:
        """The controls from an event's dict (names the form does not hold are left out), or as given."""
        if isinstance(values, Controls):
            return values
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in names})

    def but(self, **changes) -> Controls:
        """The same controls with `changes` (a parser filling what its event does not send)."""
        return dataclasses.replace(self, **changes)
