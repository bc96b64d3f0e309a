"""The table of scripts/suffix_bound.py's result (how far copying can go on a trace: lookup, suffix and the oracles),
drawn from its saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

EXPERIMENT = "suffix-bound"


COPY = "longest copy (oracle)"  # walked by copy_passes; the other arms by walk


ARMS = ("lookup", "suffix", "better of the two (oracle)", COPY)


def markdown(doc: dict) -> str:
    """Per shape: tokens per pass of each arm at each k, and each oracle's gain over lookup at the largest k."""
    ks, last = " / ".join(str(k) for k in doc["ks"]), str(doc["ks"][-1])
    head = (f"| shape (turns) | lookup, k = {ks} | {' | '.join(ARMS[1:])} | "
            + " | ".join(f"{arm.split(' (')[0]} / lookup, k = {last}" for arm in ARMS[2:]) + " |")
    lines = [f"{doc['trace']}: {doc['turns']} turns, counts (greedy; the recorded completions)", "", head,
             "|---" * (2 * len(ARMS) - 1) + "|"]
    for g in doc["groups"].values():
        if not g["turns"]:
            continue
        per_pass = g["tokens_per_pass"]
        cells = [" / ".join(f"{per_pass[arm][str(k)]:.2f}" for k in doc["ks"]) for arm in ARMS]
        gains = [f"{per_pass[arm][last] / per_pass['lookup'][last]:.2f}x" for arm in ARMS[2:]]
        lines.append(f"| {g['label']} ({g['turns']}) | {' | '.join(cells + gains)} |")
    return "\n".join(lines)
