"""The table of scripts/trace_speed.py's result (a trace's turns run by `speed --trace`, one row per drafter and k),
drawn from its saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import fmt, markdown_table

EXPERIMENT = "trace-speed"


def markdown(doc: dict) -> str:
    """One row per drafter and k; then each result's trust verdict, and whether the turns are the target's own."""
    rows = [[r["drafter"], str(r["k"]), f"{fmt(r['median'])}x ({fmt(r['min'])}-{fmt(r['max'])})", fmt(r["predicted"]),
             fmt(r["costed"]), fmt(r["tokens_per_pass"]), fmt(r["c"], ".3f")] for r in doc["rows"]]
    lines = [f"{doc['machine']}; {len(doc['turns'])} turns, from {doc['turns'][0]} to {doc['turns'][-1]}", "",
             markdown_table(["drafter", "k", "measured speed-up, median (range)", "predicted", "costed",
                             "tokens per pass", "c"], rows), ""]
    seen = {}
    for r in doc["rows"]:
        seen.setdefault(r["drafter"], (r.get("description", r["drafter"]), r["trust"]))
    lines += [f"{d}: {what}; trust: {t}" for d, (what, t) in seen.items()]
    if doc.get("trace_note"):  # results saved before speed checked the recording have none
        lines.append(f"trace: {doc['trace_note']}")
    return "\n".join(lines)
