"""Where a run's decoding time went: drafting, verification, rollback, and the time outside those three buckets.

The engine times the three buckets of each iteration (`Iteration.draft_s`, `verify_s`, `rollback_s`) and when the
iteration ended (`elapsed_s`, from the start of decoding). Whatever is left of the wall time is "outside": the
loop's own bookkeeping (building the record, the k controller's `observe`), and whatever the consumer of the
generator does between one iteration's end and the next one's start. In a headless run that is nothing; a
consumer that renders in the same thread puts its whole rendering there; one in another thread (the browser's,
ui/serving.Background) costs only by sharing the cores and the GIL, in every bucket alike.

Pure arithmetic on records and summaries (no torch, no timing here): the CLI, the browser and the benchmark
(scripts/bench_overhead.py) read the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..tables import median_of
from .records import Iteration, RunSummary

BUCKETS = ("draft", "verify", "rollback", "outside")
OUTSIDE_LIMIT = 0.05  # the time outside the buckets should stay under this share of an iteration ...
ROLLBACK_LIMIT = 0.01  # ... and a rollback under this one


@dataclass(frozen=True)
class TimeSplit:
    """Seconds per bucket of some stretch of decoding (a run, or one iteration) and its wall time."""

    draft_s: float
    verify_s: float
    rollback_s: float
    wall_s: float

    @classmethod
    def of(cls, draft_s: float, verify_s: float, rollback_s: float, wall_s: float) -> TimeSplit:
        return cls(float(draft_s), float(verify_s), float(rollback_s), float(wall_s))

    @classmethod
    def from_summary(cls, summary: RunSummary) -> TimeSplit:
        return cls.of(summary.draft_s, summary.verify_s, summary.rollback_s, summary.decode_s)

    @property
    def outside_s(self) -> float:
        """Wall time not in any bucket (never negative: clock reads round)."""
        return max(0.0, self.wall_s - self.draft_s - self.verify_s - self.rollback_s)

    def seconds(self) -> dict[str, float]:
        return {"draft": self.draft_s, "verify": self.verify_s, "rollback": self.rollback_s,
                "outside": self.outside_s}

    def shares(self) -> dict[str, float | None]:
        """Each bucket's share of the wall time (None for all when no time passed)."""
        return {name: (s / self.wall_s if self.wall_s > 0 else None) for name, s in self.seconds().items()}

    def describe(self, sep: str = " \u00b7 ") -> str:
        """'draft 0.52 s (31%) · verify 1.01 s (60%) · rollback 0.01 s (0.6%) · outside 0.14 s (8.4%)'."""
        shares = self.shares()
        return sep.join(f"{name} {s:.2f} s ({percent(shares[name])})" for name, s in self.seconds().items())


def percent(x: float | None) -> str:
    """A share as a percentage, with a decimal below 10% (where the 5% and 1% limits are read)."""
    if x is None:
        return "n/a"
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def iteration_splits(records: Iterable) -> list[TimeSplit]:
    """One split per iteration: its buckets against its own wall time (from the previous iteration's end, or
    from the start of decoding for the first)."""
    out, last = [], 0.0
    for r in records:
        if isinstance(r, Iteration):
            out.append(TimeSplit.of(r.draft_s, r.verify_s, r.rollback_s, r.elapsed_s - last))
            last = r.elapsed_s
    return out


def median_shares(splits: Sequence[TimeSplit]) -> dict[str, float | None]:
    """The median share of each bucket over splits (iterations, or runs)."""
    return {name: median_of(s.shares()[name] for s in splits) for name in BUCKETS}


def within_limits(shares: dict[str, float | None]) -> dict[str, bool | None]:
    """Whether the outside and rollback shares held their limits (None where unknown)."""
    outside, rollback = shares.get("outside"), shares.get("rollback")
    return {"outside": None if outside is None else outside < OUTSIDE_LIMIT,
            "rollback": None if rollback is None else rollback < ROLLBACK_LIMIT}
