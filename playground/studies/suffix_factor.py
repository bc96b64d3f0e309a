"""The table of scripts/suffix_factor.py's result (suffix decoding's max_spec_factor against tokens per pass), drawn
from its saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import fmt

EXPERIMENT = "suffix-factor"


def _cell(figures: dict | None, arms: list[str]) -> str:
    if figures is None:
        return "-"
    tpp = " / ".join(fmt(figures["tokens_per_pass"].get(a)) for a in arms)
    best = "-" if figures["best_k"] is None else f"{fmt(figures['best_speedup'])}x (k={figures['best_k']})"
    return f"{tpp}; {best}"


def markdown(doc: dict) -> str:
    """One row per factor and drafter whose drafts it changes, then the reference drafters once."""
    arms = doc["arms"]
    ks = " / ".join(a[2:] for a in arms)
    head = (f"| max_spec_factor | drafter | tool call / JSON: tokens per pass, k = {ks}; predicted best "
            f"| all turns: tokens per pass, k = {ks}; predicted best |")
    lines = [doc["header"], "", head, "|---|---|---|---|"]
    for row in doc["rows"]:
        for drafter in ("suffix", "suffix-hybrid"):
            d = row["drafters"].get(drafter, {})
            lines.append(f"| {row['factor']:g} | {drafter} | {_cell(d.get('json'), arms)} | "
                         f"{_cell(d.get('overall'), arms)} |")
    first = doc["rows"][0]
    for drafter in ("lookup", "hybrid"):
        d = first["drafters"].get(drafter)
        if d is not None:
            lines.append(f"| - | {drafter} (replayed beside factor {first['factor']:g}) | {_cell(d.get('json'), arms)} | "
                         f"{_cell(d.get('overall'), arms)} |")
    lines.append("")
    lines += [f"calibrations at factor {row['factor']:g}: " + "; ".join(f"{d} {t.split(':')[0]}"
              for d, t in row["trust"].items() if "(no cache)" not in d) for row in doc["rows"]]
    return "\n".join(lines)
