"""What every printed table shares: a Markdown table, a cell that is "-" for a missing figure, the median of the
figures that are there. Standard library only, so every layer can draw a table (backends may not import the lab,
and lab.common imports torch)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence


def median_of(xs: Iterable) -> float | None:
    """The median of the values that are not None; None if there are none."""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec: str = ".2f") -> str:
    """A figure as a table cell: "-" for None."""
    return "-" if x is None else format(x, spec)


def markdown_table(head: Sequence[str], rows: Iterable[Sequence], escape: bool = False) -> str:
    """A Markdown table; `escape`: each cell made a string and its "|" escaped (a cell that may hold free text)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    if escape:
        rows = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
