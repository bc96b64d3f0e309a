"""A `vllm-sweep` result as Markdown: the setup (command, CPU, vLLM, thread budget, load), the servers' startup
times, one row per (preset, method, k, concurrency) with the measured speed-up beside the predicted one and
the miss, and the n-gram cross-check against our lookup. Rounds are summarised by their median."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from ..errors import PlaygroundError
from ..results import load_result
from ..results.vllm import ThreadBudget, VllmCell, VllmReported, VllmSweepResult
from ..tables import fmt, markdown_table, median_of


def load_sweep(path: str | Path) -> VllmSweepResult:
    result = load_result(path)
    if not isinstance(result, VllmSweepResult):
        raise PlaygroundError(f"{path} is not a vllm-sweep result (its 'experiment' is not 'vllm-sweep')")
    return result


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _hist(h) -> str:
    return "-" if not h else " ".join(str(n) for n in h)


def _budget_key(b: ThreadBudget) -> str:
    """The order the budgets were always listed in: their JSON with sorted keys."""
    return json.dumps(asdict(b), sort_keys=True)


def setup_text(doc: VllmSweepResult) -> str:
    env, plan = doc.environment, doc.plan
    # A running (external) server's threads are not known here: it has no budget.
    budgets = sorted({s.thread_budget for s in doc.servers if s.thread_budget}, key=_budget_key)
    lines = [f"- command: `{doc.command or '(not recorded)'}`",
             f"- CPU: {env.cpu} ({env.cpu_count} cores); {env.vllm}; playground {env.playground}",
             f"- model: {plan.model}, float32, {'--enforce-eager' if plan.enforce_eager else 'compiled (default)'}",
             (f"- load average (1, 5, 15 min) at start {env.loadavg_at_start}, at end {env.loadavg_at_end}; "
             "after each batch in the JSON (`loadavg`); the client's threads (one per concurrent request, mostly "
             "waiting on the socket) share the machine with the servers")]
    for b in budgets:
        lines.append(f"- thread budget: vLLM's worker on cores {b.worker_cores}, front end on {b.reserved_cpus}, "
                     f"{b.torch_threads} torch thread(s) (VLLM_CPU_OMP_THREADS_BIND={b.omp_bind})")
    return "\n".join(lines)


def startup_table(doc: VllmSweepResult) -> str:
    rows = []
    for s in doc.servers:
        spec = s.spec  # vLLM's speculative config: vLLM's keys
        label = "plain" if not spec else f"{spec['method']} k={spec['num_speculative_tokens']}"
        mode = "running (external)" if s.external else "eager" if s.enforce_eager else "compiled"
        rows.append([label + (f" at {s.url}" if s.external else ""), mode, fmt(s.startup_s, ".1f")])
    return markdown_table(["server", "mode", "startup s"], rows, escape=True)


def _cells_row(cs: list[VllmCell]) -> list:
    """One row of the cells table: the rounds of one (preset, kind, method, k, concurrency), by their medians."""
    first = cs[0]
    measured = median_of([c.speedup for c in cs])
    predicted = median_of([c.predicted_speedup for c in cs])
    miss = measured / predicted - 1 if measured and predicted else None
    return [first.preset, first.kind, first.method, first.k, first.concurrency,
            fmt(median_of([c.plain.tokens_per_s for c in cs]), ".1f"),
            fmt(median_of([c.spec.tokens_per_s for c in cs]), ".1f"),
            fmt(measured), fmt(predicted), _pct(miss),
            fmt(median_of([c.plain.aggregate_tokens_per_s for c in cs]), ".1f"),
            fmt(median_of([c.spec.aggregate_tokens_per_s for c in cs]), ".1f"),
            fmt(median_of([c.aggregate_speedup for c in cs])),
            fmt(median_of([c.spec.mean_acceptance_length for c in cs])),
            fmt(median_of([c.spec.alpha for c in cs])),
            _hist(first.spec.vllm_histogram),
            fmt(median_of([c.v_k_plus_1 for c in cs])),
            "yes" if all(c.outputs_equal for c in cs) else "NO",
            sum(c.spec.merged_chunks + c.plain.merged_chunks for c in cs), len(cs)]


def cells_table(doc: VllmSweepResult) -> str:
    """One row per (preset, kind, method, k, concurrency), and per output mode when --structured measured the
    JSON presets constrained to their schema too (two more columns: free or constrained, the output's validity)."""
    groups: dict[tuple, list[VllmCell]] = defaultdict(list)
    for c in doc.cells:
        groups[(c.preset, c.kind, c.method, c.k, c.concurrency, c.structured)].append(c)
    head = ["preset", "kind", "method", "k", "conc", "plain tok/s", "spec tok/s", "measured x", "predicted x", "miss",
            "plain agg tok/s", "spec agg tok/s", "agg x", "accept len", "alpha", "histogram (0..k accepted)",
            "v(k+1)", "same output", "merged chunks", "rounds"]
    if not doc.plan.structured:
        return markdown_table(head, [_cells_row(cs) for cs in groups.values()], escape=True)
    rows = [[*_cells_row(cs)[:5], "constrained" if cs[0].structured else "free", _valid(cs), *_cells_row(cs)[5:]]
            for cs in groups.values()]
    table = markdown_table([*head[:5], "output", "valid JSON", *head[5:]], rows, escape=True)
    return "\n\n".join([table, *doc.structured_refused.values()])


def _valid(cs: list[VllmCell]) -> str:
    said = [c.schema_valid for c in cs if c.schema_valid is not None]
    return "-" if not said else f"{sum(said)}/{len(said)}"


NOT_REPORTED = VllmReported(None, None, None, None, None)  # a response without speculative metrics


def crosscheck_table(doc: VllmSweepResult) -> str:
    rows = []
    for c in doc.cells:
        x = c.crosscheck
        if not x:
            continue
        rep, ours, loop = x.vllm_replayed, x.our_lookup, x.our_loop
        vl = x.vllm_reported or NOT_REPORTED
        rows.append([c.preset, x.k, f"{x.prompt_lookup_min}..{x.prompt_lookup_max}",
                     f"{vl.accepted}/{vl.drafted} in {vl.verify_steps}",
                     "yes" if rep.reproduces_vllm else f"no ({rep.check})",
                     f"{ours.accepted}/{ours.drafted} in {ours.verify_steps}",
                     fmt(vl.mean_acceptance_length), fmt(ours.mean_acceptance_length),
                     f"{x.contexts_proposing_differently}/{x.contexts}",
                     "-" if not loop else f"{loop.accepted}/{loop.drafted} in {loop.verify_steps}"
                     + ("" if loop.same_output_as_vllm else " (other output)")])
    if not rows:
        return "(no n-gram cells)"
    return markdown_table(["preset", "k", "n-gram", "vLLM accepted/drafted in steps", "replay reproduces vLLM",
                           "our lookup accepted/drafted in steps", "vLLM accept len", "ours accept len",
                           "contexts where the rules differ", "our loop, run (accepted/drafted in steps)"],
                          rows, escape=True)


NOTE = ("Per request: median decode tokens/s (prefill excluded). Aggregate: all tokens over the batch's wall time. "
        "Predicted: the cost model with v(k+1) from the engine's own step times (docs/vllm.md). Miss = measured / "
        "predicted - 1. Histogram: vLLM's acceptance histograms summed over the batch's requests.")


def report_text(doc: VllmSweepResult) -> str:
    return "\n\n".join([
        "# vLLM sweep", setup_text(doc), "## Server startup", startup_table(doc),
        "## Plain against speculative vLLM (same concurrency, adjacent runs)",
        NOTE,
        cells_table(doc),
        "## Our prompt lookup against vLLM's n-gram (greedy, the same output replayed)", crosscheck_table(doc)]) + "\n"
