"""Helpers every experiment shares: progress ticks, the rotating run order, thread budget."""

from __future__ import annotations

from collections.abc import Callable

import torch

Progress = Callable[[float, str], None] | None


def tick(progress: Progress, fraction: float, message: str) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)), message)


def rotated(arms: list[str], shift: int) -> list[str]:
    """The arms in an order that moves by one from round to round (and prompt to prompt), so drift on
    a shared machine does not always hit the same arm."""
    shift %= len(arms)
    return arms[shift:] + arms[:shift]


def set_threads(threads: int | None) -> int:
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def new_tokens(limit: int | dict[str, int]) -> str:
    """A run's length limit as a header says it: one for every prompt, or each prompt's own (a dict)."""
    low, high = (min(limit.values()), max(limit.values())) if isinstance(limit, dict) else (limit, limit)
    return f"at most {low} new tokens" if low == high else f"at most each prompt's own {low}-{high} new tokens"
