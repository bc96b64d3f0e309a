"""The table of scripts/tune_adaptive.py's result (what switching each of adaptive k's rules off does to its replayed
speed-up), drawn from its saved JSON alone: what that script prints and what docs/*.md show
(scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import markdown_table

EXPERIMENT = "adaptive-rules"


KEEP = 0.01  # a rule earns its place when switching it off costs at least 1% on some turn


def rules_markdown(doc: dict) -> str:
    """What switching each rule off does to adaptive k's replayed speed-up against the defaults: per drafter the
    largest loss and the largest gain over the turns, then the largest loss anywhere (its drafter and turn), and
    whether the rule earns its place (a loss of at least KEEP somewhere). The table docs/results.md shows
    (scripts/results_tables.py draws it from the JSON)."""
    drafters = doc["drafters"]
    variants = [v for v in next(iter(drafters.values()))["adaptive"] if v != "defaults"]
    head = ["rule switched off", *(f"{d}: loss / gain" for d in drafters), "largest loss (drafter, turn)", "kept"]
    rows = []
    for v in variants:
        cells, changes = [], []
        for drafter, d in drafters.items():
            base = d["adaptive"]["defaults"]
            mine = sorted((d["adaptive"][v][t] / base[t] - 1.0, drafter, t) for t in base)
            cells.append(f"{min(mine[0][0], 0.0):+.1%} / {max(mine[-1][0], 0.0):+.1%}")
            changes += mine
        low, drafter, turn = min(changes)
        rows.append([v, *cells, f"{low:+.1%} ({drafter}, {turn})" if low < 0 else "none", "yes" if -low >= KEEP else "no"])
    setup = f"{doc['setup']}; commit {doc['commit']}; every preset, a first and a second call of each"
    return setup + "\n\n" + markdown_table(head, rows)
