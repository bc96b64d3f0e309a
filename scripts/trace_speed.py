"""Measured speed-ups of several drafters on the same turns of a recorded trace, side by side: one row per drafter
and k from `speed --trace` results (one result per drafter; each measures against plain decoding in its own
adjacent runs, so the ratios compare across results even where the host's speed moved between them).

Per drafter and k: the median of its runs' speed-ups over plain decoding with their range, the calibration's
prediction and the costed figure (the runs' own iterations under the calibration, immune to the host's drift),
accepted tokens per target pass (pooled over the runs), the drafter's cost c (median over the turns'
calibrations) and the result's trust verdict.

    for d in suffix llama.cpp; do .venv/bin/python -m playground speed --trace docs/results/agent-trace-100.jsonl \\
        --shape json --turns 16 --drafter $d --ks 8,16 --threads 2 --out results/trace-$d.json; done
    .venv/bin/python scripts/trace_speed.py results/trace-suffix.json results/trace-llama.cpp.json \\
        --out docs/results/trace-speed-epyc.json
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys

from playground.results import load_result
from playground.results.speed import SpeedResult
from playground.studies.trace_speed import EXPERIMENT, markdown


def _tokens_per_pass(runs: list) -> float | None:
    """Pooled over `runs`: their new tokens over the target passes they took."""
    runs = [r for r in runs if r.tokens_per_pass]
    passes = sum(r.new_tokens / r.tokens_per_pass for r in runs)
    return sum(r.new_tokens for r in runs) / passes if passes else None


def rows_of(result: SpeedResult) -> list[dict]:
    """One row per k of one result (see the module docstring)."""
    cs = [t["c"] for t in result.timing_by_prompt.values() if t.get("c") is not None]
    plain = [r.tokens_per_s for r in result.plain_runs] if result.plain_runs else []
    rows = []
    for row in result.table:
        runs = [r for r in result.runs if r.k == row.k]
        rows.append({"drafter": result.drafter.split(" (")[0], "description": result.drafter, "k": row.k, "turns": len(result.prompts), "runs": row.n,
                     "median": row.median_ratio, "min": row.min_ratio, "max": row.max_ratio,
                     "predicted": row.predicted_empirical, "costed": row.median_costed,
                     "tokens_per_pass": _tokens_per_pass(runs), "c": statistics.median(cs) if cs else None,
                     "plain_tokens_per_s": statistics.median(plain) if plain else None,
                     "trust": result.trust.headline() if result.trust else "no verdict"})
    return rows


def machine_line(result: SpeedResult) -> str:
    """The target, the machine and the threads the runs had."""
    env = result.environment
    bits = [env.pair and env.pair.target, env.gpu or env.cpu, env.pair and env.pair.device,
            f"{env.torch_threads} torch threads" if env.torch_threads else None,
            f"{result.rounds} rounds", result.sampling or "greedy"]
    return ", ".join(str(b) for b in bits if b)


def summarize(results: list[SpeedResult], sources: list[str]) -> dict:
    prompts = {tuple(r.prompts) for r in results}
    if len(prompts) != 1:
        raise SystemExit("trace_speed: the results ran different turns; run each drafter on the same --trace, "
                         "--shape and --turns")
    return {"experiment": EXPERIMENT, "date": datetime.date.today().isoformat(), "sources": sources,
            "machine": machine_line(results[0]), "turns": list(next(iter(prompts))),
            "commands": [r.command for r in results], "rows": [row for r in results for row in rows_of(r)],
            "trace_note": next((r.trace_note for r in results if r.trace_note), None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", help="speed results (speed --trace FILE --out), one per drafter")
    ap.add_argument("--out", required=True, help="the small result to write")
    args = ap.parse_args()
    results = [load_result(p) for p in args.results]
    for path, r in zip(args.results, results):
        if not isinstance(r, SpeedResult):
            raise SystemExit(f"trace_speed: {path} is a {r.experiment} result, not speed")
    doc = summarize(results, args.results)
    from results_tables import save  # scripts/results_tables.py, beside this one

    return save(doc, args.out, markdown)


if __name__ == "__main__":
    sys.exit(main())
