"""The table of scripts/grammar_libraries.py's result (the grammar libraries compared on the embedded tokenizer and
the JSON presets' schemas), drawn from its saved JSON alone: what docs/constraints.md shows (results_tables)."""

from __future__ import annotations

from ..tables import markdown_table

EXPERIMENT = "grammar-libraries"


def _span(values, fmt: str = ".2f") -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def _row(name: str, lib: dict, first: str) -> list[str]:
    masks = lib.get("mask_ms") or {}
    medians, means = [m["median"] for m in masks.values()], [m["mean"] for m in masks.values()]
    rolls = lib.get("rollback") or {}
    rollback = "yes" if rolls and all(rolls.values()) else ("no" if rolls else "-")
    forced = (lib.get("forced_at_start") or {}).get(first) or "-"
    return [f"{name} {lib.get('version', '')}", lib.get("tokenizer", "-"), _span((lib.get("compile_ms") or {}).values()),
            f"{_span(medians, '.3f')} / {_span(means, '.3f')}", rollback, f"`{forced}`"]


def markdown(doc: dict) -> str:
    """One row per library: over the presets, the compile time and the mask's time per token (ranges), whether
    every matcher rolled back, and what it forces at the start of the first preset's answer."""
    first = doc["presets"][0]
    env = doc.get("environment") or {}
    head = (f"{env.get('cpu', 'cpu')}, {env.get('torch_threads', '?')} torch threads; presets "
            f"{', '.join(doc['presets'])}; the mask as a bool tensor over the tokenizer's vocabulary")
    return head + "\n\n" + markdown_table(
        ["library", "the tokenizer", "compile (ms)", "mask per token, median / mean (ms)", "rolls back",
         f"forced at the start ({first})"], [_row(name, lib, first) for name, lib in doc["libraries"].items()])
