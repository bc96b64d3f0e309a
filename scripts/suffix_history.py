"""What an agent's own history is worth to suffix decoding, per output shape, from a replay of a multi-turn trace.

A replay result (`replay FILE --out`) holds every walk of every turn, megabytes for a 100-turn trace. This keeps
what the docs' table needs, per output shape (the replay summary's turn selection, `turns_of`) and per drafter:
accepted tokens per target pass (the turns' tokens over their passes; counts, so the machine's load does not move them), the predicted speed-up of each k
from the calibration (the replay summary's), the best k, and what the cache of earlier responses added (a
drafter against its `(no cache)` walk).

    .venv/bin/python -m playground replay docs/results/agent-trace-100.jsonl --drafter suffix --drafter lookup \\
        --drafter suffix-hybrid --drafter hybrid --drafter llama.cpp --drafter draft --ks 4,8,16 --controllers "" \\
        --threads 2 --records none --out results/replay-agent100.json
    .venv/bin/python scripts/suffix_history.py results/replay-agent100.json --out docs/results/suffix-history-epyc.json
"""

from __future__ import annotations

import argparse
import datetime
import sys

from playground.lab.replay.report import header
from playground.lab.replay.summary import turns_of
from playground.lab.shapes import LABELS, SHAPES
from playground.results import load_result
from playground.results.replay import ReplayResult, SimulatedWalk
from playground.studies.suffix_history import EXPERIMENT, markdown


def tokens_per_pass(turns: list, drafter: str, arm: str) -> float | None:
    """Pooled over `turns`: the tokens `drafter`'s walk `arm` emitted over the target passes it took."""
    walks = [w for t in turns if (e := t.drafters.get(drafter)) is not None
             and isinstance(w := e.walks.get(arm), SimulatedWalk)]
    passes = sum(w.iterations for w in walks)
    return sum(w.new_tokens for w in walks) / passes if passes else None


def _group(result: ReplayResult, shape: str | None, summary, arms: list[str]) -> dict:
    turns = turns_of(result.turns, shape)  # the turns the summary's speed-ups of this shape pool
    rows = {}
    for drafter, row in summary.drafters.items():
        rows[drafter] = {"tokens_per_pass": {a: tokens_per_pass(turns, drafter, a) for a in arms},
                         "speedup": {a: row.speedup.get(a) for a in arms},
                         "best_k": row.best_k, "best_speedup": row.best_speedup, "interval": row.interval}
    return {"label": LABELS[shape] if shape else "all turns", "turns": summary.turns, "tokens": summary.tokens,
            "rows": rows}


def summarize(result: ReplayResult, source: str) -> dict:
    """The small result docs/results keeps (see the module docstring)."""
    arms = [a for a in result.arms if a.startswith("k=")]
    summary = result.summary
    groups = {s: _group(result, s, summary.shapes[s], arms) for s in SHAPES if summary.shapes[s].turns}
    groups["overall"] = _group(result, None, summary.overall, arms)
    return {"experiment": EXPERIMENT, "date": datetime.date.today().isoformat(), "source": source,
            "header": header(result), "command": result.command, "arms": arms, "groups": groups,
            "trust": {d: t.headline for d, t in result.trust.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("replay", help="a replay result (replay FILE --out)")
    ap.add_argument("--out", required=True, help="the small result to write")
    args = ap.parse_args()
    result = load_result(args.replay)
    if not isinstance(result, ReplayResult):
        raise SystemExit(f"suffix_history: {args.replay} is a {result.experiment} result, not a replay")
    doc = summarize(result, args.replay)
    from results_tables import save  # scripts/results_tables.py, beside this one

    return save(doc, args.out, markdown)


if __name__ == "__main__":
    sys.exit(main())
