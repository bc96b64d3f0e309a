"""Tuning suffix decoding's length factor (`max_spec_factor`: a draft is at most that many times the length of
the match it follows) on a trace: one replay per factor, then one table of them side by side.

Tune on a trace the reported results do not use (`make_trace.py --agent --first-task 30`), then report on the
committed one. A replay at factor F runs in this script's process with `suffix.MAX_SPEC_FACTOR` set to F (the
suffix drafters' default); each result names its factor in its drafters' descriptions, where the table reads it.

    .venv/bin/python scripts/make_trace.py --agent --first-task 30 --turns 100 --conversations 30 --tokens 96 \\
        --out results/tune-trace.jsonl
    for f in 1 2 4 8; do .venv/bin/python scripts/suffix_factor.py --factor $f -- replay results/tune-trace.jsonl \\
        --drafter suffix --drafter lookup --drafter suffix-hybrid --drafter hybrid --ks 4,8,16 --controllers "" \\
        --threads 2 --records none --out results/tune-f$f.json; done
    .venv/bin/python scripts/suffix_factor.py results/tune-f*.json --out docs/results/suffix-factor-epyc.json
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys

from playground.studies.suffix_factor import EXPERIMENT, markdown

SHOWN = {"json": "tool call / JSON", "overall": "all turns"}


def factor_of(descriptions: dict) -> float:
    """The factor a replay's suffix drafter ran with, from its description ('length <= F x match')."""
    found = re.search(r"length <= ([0-9.]+) x match", descriptions.get("suffix", ""))
    if found is None:
        raise SystemExit("suffix_factor: a replay without the suffix drafter (--drafter suffix)")
    return float(found.group(1))


def row_of(factor: float, doc: dict) -> dict:
    """One factor's figures: per shape shown and drafter, tokens per pass per k and the best predicted speed-up."""
    cells = {}
    for shape in SHOWN:
        group = doc["groups"].get(shape)
        if group is None:
            continue
        for drafter, row in group["rows"].items():
            if drafter.endswith("(no cache)"):
                continue
            cells.setdefault(drafter, {})[shape] = {"tokens_per_pass": row["tokens_per_pass"],
                                                     "best_k": row["best_k"], "best_speedup": row["best_speedup"]}
    return {"factor": factor, "drafters": cells, "trust": doc["trust"]}


def _run_one(factor: float, argv: list[str]) -> int:
    from playground.cli import main as playground_main
    from playground.drafters import suffix

    if factor <= 0:
        raise SystemExit(f"suffix_factor: --factor must be > 0, got {factor}")
    suffix.MAX_SPEC_FACTOR = factor
    return playground_main(argv)


def _table(paths: list[str], out: str) -> int:
    import suffix_history  # scripts/suffix_history.py, beside this script (its folder is on sys.path when run)

    from playground.results import load_result

    docs = []
    for path in paths:
        result = load_result(path)
        docs.append((factor_of(result.drafter_descriptions), suffix_history.summarize(result, path)))
    docs.sort(key=lambda x: x[0])
    first = docs[0][1]
    doc = {"experiment": EXPERIMENT, "date": datetime.date.today().isoformat(), "sources": paths,
           "header": first["header"], "arms": first["arms"], "commands": [d["command"] for _, d in docs],
           "rows": [row_of(f, d) for f, d in docs]}
    from results_tables import save  # scripts/results_tables.py, beside this one

    return save(doc, out, markdown)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factor", type=float, help="run the playground command after -- at this factor")
    ap.add_argument("--out", help="with replay results: the table's small result to write")
    ap.add_argument("rest", nargs="*", help="replay results (the table), or after -- a playground command")
    args = ap.parse_args()
    if args.factor is not None:
        return _run_one(args.factor, args.rest)
    if not args.rest or not args.out:
        raise SystemExit("suffix_factor: give --factor F -- COMMAND, or replay results and --out")
    return _table(args.rest, args.out)


if __name__ == "__main__":
    sys.exit(main())
