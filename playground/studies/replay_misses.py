"""The table of scripts/replay_misses.py's result (replay's predicted speed-up against the speed measured at its k),
drawn from its saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

TOLERANCE = 0.05


CONTROLLERS = ("adaptive", "heuristic")


EXPERIMENT = "replay-misses"


def _controllers_line(rows: list[dict]) -> str:
    """The controllers against the best fixed k and against each other, in the same rounds (min-max over cells)."""
    def span(xs, fmt):
        return f"{min(xs):{fmt}}-{max(xs):{fmt}}"
    shares = {c: [r["controllers"][c]["measured"] / r["measured"] for r in rows] for c in CONTROLLERS}
    pair = [r["controllers"]["adaptive"]["measured"] / r["controllers"]["heuristic"]["measured"] for r in rows]
    return ("the controllers, in the same rounds: " + ", ".join(f"{c} {span(shares[c], '.0%')} of the best fixed k"
                                                               for c in CONTROLLERS)
            + f"; adaptive / heuristic {span(pair, '.2f')} per preset")


def markdown(doc: dict) -> str:
    """The table docs/results.md shows, drawn from the saved result alone (scripts/results_tables.py)."""
    rows = doc["rows"]
    drafters = sorted({r["drafter"] for r in rows})
    pools = sorted({r["calibrations"] for r in rows})
    head = (f"{doc['date']}, {doc['setup']}; drafter {', '.join(drafters)}, {doc['rounds']} rounds, calibrations "
            f"pooled: {', '.join(map(str, pools))}; {sum(r['trusted'] for r in rows)} of {len(rows)} cells trusted; "
            f"machine: {doc['verdict']['headline']} ({doc['elapsed_s']:.0f} s)")
    lines = [(f"| preset (kind) | replay's k | predicted: first calibration | predicted: pooled ({pools[-1]}) | "
             "measured median [min-max] | miss (pooled) | of the miss: step costs | verdict |"),
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        who = f" {r['drafter']}" if len(drafters) > 1 else ""
        pooled_n = f" ({r['calibrations']})" if len(pools) > 1 else ""
        lines.append(f"| {r['preset']} ({r['kind']}){who} | {r['k']}{'' if r['exact'] else ' (estimate)'} | "
                     f"{r['first_predicted']:.2f} | {r['replay_predicted']:.2f}{pooled_n} | "
                     f"{r['measured']:.2f} [{r['min']:.2f}-{r['max']:.2f}] | {r['miss']:+.2f} | "
                     + (f"{r['step_costs']:+.2f}" if r["step_costs"] is not None else "-")
                     + f" | {'trusted' if r['trusted'] else r['trust']} |")
    judged = [r for r in rows if (r["ci"][1] - r["ci"][0]) / 2 <= TOLERANCE]
    tail = (f"within {TOLERANCE}: {sum(abs(r['miss']) <= TOLERANCE for r in rows)} of {len(rows)} cells; of the "
            f"{len(judged)} whose median is known to +-{TOLERANCE} (half its 90% interval), "
            f"{sum(abs(r['miss']) <= TOLERANCE for r in judged)}; prediction inside the median's interval: "
            f"{sum(r['ci'][0] <= r['replay_predicted'] <= r['ci'][1] for r in rows)} of {len(rows)}")
    return head + "\n\n" + "\n".join(lines) + "\n\n" + tail + "\n\n" + _controllers_line(rows)
