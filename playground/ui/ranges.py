"""Typed values out of their range: said on the status line as they are typed, and never used in silence.

A number box (max new tokens, top-k, seed) is checked by the event's request parser (session.parse_request), which
names the field, the range and the value. A slider's box (k, temperature, top-p, the draft confidence stop, the
sweep's largest k and rounds) is clamped by Gradio's page as soon as it loses focus, so the event only ever sees the
bound: `range_check` says so on the status line at once, and `remember_moves` keeps what was typed in a per-tab
gr.State until the value is changed again, so that the next event using it is refused once (`refuse_moved`) with
the range and what the slider moved to, instead of running on the bound with no word. A second press runs it.
"""

from __future__ import annotations

import math

import gradio as gr

from ..errors import PlaygroundError
from .form import Controls
from .markup import READY

# The status-line label of each slider -> the name of its value in an event's controls.
SLIDERS = {"k": "k", "temperature": "temperature", "top-p": "top_p", "the draft confidence stop": "min_confidence",
           "the largest k": "k_max", "rounds": "rounds"}
SAMPLING_ONLY = ("temperature", "top-p")  # read only when sampling


def range_problem(value, label: str, lo: float, hi: float | None, whole: bool = True) -> str | None:
    """What is wrong with a typed number, in words (None when it is fine)."""
    if value is None or value == "":
        return f"{label} is empty: type a number"
    try:
        x = float(value)
    except (TypeError, ValueError):
        return f"{label} must be a number, got {str(value)[:40]!r}"
    bounds = f"from {lo:g} to {hi:g}" if hi is not None else f"{lo:g} or more"
    if not math.isfinite(x) or (whole and not x.is_integer()):
        return f"{label} must be a whole number {bounds}, got {x:g}"
    if x < lo or (hi is not None and x > hi):
        return f"{label} must be {bounds}, got {x:g}"
    return None


def range_check(label: str, lo: float, hi: float | None, whole: bool = True, slider: bool = False):
    """A change listener (preprocess=False: the value as typed, before any clamping or rounding): an error on
    the status line for a value out of range, cleared once the value is fixed. A slider moves to its bound
    after an out-of-range value (Gradio clamps it): that keeps the message, which says where it went."""

    def check(value, status):
        problem = range_problem(value, label, lo, hi, whole)
        if problem:
            if slider and isinstance(value, (int, float)):
                problem += f"; the slider moved to {min(max(value, lo), hi):g}"
            return f"\u26a0 {problem}"
        # The slider's clamp fires a change of its own, at the bound the message names: that one keeps the message
        # (any other in-range value, the other bound included, is a fix and clears it).
        clamped = slider and isinstance(status, str) and isinstance(value, (int, float)) and status.endswith(
            f"the slider moved to {value:g}")
        if isinstance(status, str) and status.startswith(f"\u26a0 {label}") and not clamped:
            return READY
        return gr.skip()

    return check


def remember_moves(check, label: str, lo: float, hi: float):
    """A slider's change listener: `check`'s status line, and the per-tab record (a dict in a gr.State) of a value
    typed out of range and where the slider moved it, kept until the slider is set to another value."""

    def listener(value, status, moved):
        moved = dict(moved or {})
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (value < lo or value > hi):
            moved[label] = (value, min(max(value, lo), hi), lo, hi)
        elif label in moved and moved[label][1] != value:  # set again by hand: what was typed no longer matters
            del moved[label]
        return check(value, status), moved

    return listener


def refuse_moved(moved: dict | None, values: dict, ignore: tuple = ()) -> None:
    """Refuse an event once, naming the range, when a slider it reads was moved from a value typed out of range
    (`values`: the event's controls by name); the record is cleared, so pressing the button again runs it with
    the slider's value."""
    if not moved:
        return
    controls = Controls.of(values)
    sampling = controls.decoding == "sample"
    fixed_k = (controls.k_mode or "fixed") == "fixed"
    for label, name in SLIDERS.items():
        if label not in moved or name not in values or label in ignore:
            continue
        if (label in SAMPLING_ONLY and not sampling) or (label == "k" and not fixed_k):
            continue  # a value this event does not read
        typed, bound, lo, hi = moved.pop(label)
        raise PlaygroundError(f"not run: {label} was typed as {typed:g}, outside {lo:g} to {hi:g}; the slider moved "
                              f"to {bound:g}. Press again to use {bound:g}, or set it")
