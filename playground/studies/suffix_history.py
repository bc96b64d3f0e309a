"""The table of scripts/suffix_history.py's result (what an agent's own history is worth to suffix decoding, per output
shape), drawn from its saved JSON alone: what that script prints and what docs/*.md show
(scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import markdown_table

EXPERIMENT = "suffix-history"


NO_CACHE = " (no cache)"


def _cells(values: dict, arms: list[str]) -> str:
    return " / ".join("-" if values.get(a) is None else f"{values[a]:.2f}" for a in arms)


def _history(doc: dict, group: dict) -> str:
    """What the cache of earlier responses added to each drafter that has a `(no cache)` walk, at the largest k."""
    arm, out = doc["arms"][-1], []
    for drafter, row in group["rows"].items():
        alone = group["rows"].get(drafter + NO_CACHE)
        if drafter.endswith(NO_CACHE) or alone is None:
            continue
        with_, without = row["tokens_per_pass"][arm], alone["tokens_per_pass"][arm]
        if with_ and without:
            out.append(f"{drafter} {with_ / without - 1:+.0%}")
    return ", ".join(out) or "-"


def markdown(doc: dict) -> str:
    """One row per shape and drafter: tokens per pass and predicted speed-up at each k, the best k; then what the
    history added per shape, and the calibrations' verdicts."""
    arms = doc["arms"]
    ks = " / ".join(a[2:] for a in arms)
    rows, history = [], []
    for group in doc["groups"].values():
        for drafter, row in group["rows"].items():
            best = "-" if row["best_k"] is None else f"k={row['best_k']}: {row['best_speedup']:.2f}x"
            rows.append([f"{group['label']} ({group['turns']})", drafter, _cells(row["tokens_per_pass"], arms),
                         _cells(row["speedup"], arms), best])
        history.append(f"{group['label']}: {_history(doc, group)}")
    head = ["shape (turns)", "drafter", f"tokens per pass, k = {ks}", f"predicted speed-up, k = {ks}", "best k"]
    lines = [doc["header"], "", markdown_table(head, rows)]
    lines += ["", f"what the cache of earlier responses added to tokens per pass at {arms[-1]}: " + "; ".join(history)]
    lines += [f"calibration of {d}: {h}" for d, h in doc["trust"].items()]
    return "\n".join(lines)
