"""The progress every long command shows on stderr (the lab commands, replay, vllm-sweep); it imports nothing
heavy, so a command's module can take it at once."""

from __future__ import annotations

import sys
from collections.abc import Callable


def progress_bar(every_tick: bool = False) -> Callable[[float, str], None]:
    """Progress on stderr, the same for every command: a bar redrawn in place on a terminal, else a line per 10%
    (`every_tick`: a line per tick, as vllm-sweep's few long steps want)."""
    tty = sys.stderr.isatty()
    last = [-1]

    def show(fraction: float, message: str) -> None:
        pct = int(fraction * 100)
        if tty:
            bar = "#" * (pct // 4) + "." * (25 - pct // 4)
            sys.stderr.write(f"\r[{bar}] {pct:3d}% {message[:60]:60}")
            if fraction >= 1:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif every_tick or pct // 10 != last[0]:
            last[0] = pct // 10
            print(f"[{pct:3d}%] {message}", file=sys.stderr)

    return show
