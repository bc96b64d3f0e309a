"""A `vllm-sweep` result as Markdown: the setup (command, CPU, vLLM, thread budget, load), the servers' startup
times, one row per (preset, method, k, concurrency) with the measured speed-up beside the predicted one and
the miss, and the n-gram cross-check against our lookup. Rounds are summarised by their median."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

from ..errors import PlaygroundError


def load_sweep(path: str | Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PlaygroundError(f"no result file at {str(path)!r}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlaygroundError(f"{path} is not a JSON result file ({e})") from None
    if not isinstance(doc, dict) or doc.get("experiment") != "vllm-sweep":
        raise PlaygroundError(f"{path} is not a vllm-sweep result (its 'experiment' is not 'vllm-sweep')")
    return doc


def _f(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _table(head, rows) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows])


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _hist(h) -> str:
    return "-" if not h else " ".join(str(n) for n in h)


def setup_text(doc: dict) -> str:
    env, plan = doc.get("environment", {}), doc.get("plan", {})
    budgets = {json.dumps(s.get("thread_budget"), sort_keys=True) for s in doc.get("servers", [])}
    lines = [f"- command: `{doc.get('command', '(not recorded)')}`",
             f"- CPU: {env.get('cpu')} ({env.get('cpu_count')} cores); {env.get('vllm')}; playground {env.get('playground')}",
             f"- model: {plan.get('model')}, float32, {'--enforce-eager' if plan.get('enforce_eager') else 'compiled (default)'}",
             (f"- load average (1, 5, 15 min) at start {env.get('loadavg_at_start')}, at end {env.get('loadavg_at_end')}; "
             "after each batch in the JSON (`loadavg`); the client's threads (one per concurrent request, mostly "
             "waiting on the socket) share the machine with the servers")]
    for b in sorted(budgets):
        b = json.loads(b)
        if not b:
            continue  # a running (external) server: its threads are not known here
        lines.append(f"- thread budget: vLLM's worker on cores {b.get('worker_cores')}, front end on {b.get('reserved_cpus')}, "
                     f"{b.get('torch_threads')} torch thread(s) (VLLM_CPU_OMP_THREADS_BIND={b.get('omp_bind')})")
    return "\n".join(lines)


def startup_table(doc: dict) -> str:
    rows = []
    for s in doc.get("servers", []):
        spec = s.get("spec")
        label = "plain" if not spec else f"{spec['method']} k={spec['num_speculative_tokens']}"
        mode = "running (external)" if s.get("external") else "eager" if s.get("enforce_eager") else "compiled"
        rows.append([label + (f" at {s['url']}" if s.get("external") else ""), mode, _f(s.get("startup_s"), ".1f")])
    return _table(["server", "mode", "startup s"], rows)


def cells_table(doc: dict) -> str:
    groups = defaultdict(list)
    for c in doc.get("cells", []):
        groups[(c["preset"], c["kind"], c["method"], c["k"], c["concurrency"])].append(c)
    rows = []
    for (preset, kind, method, k, conc), cs in groups.items():
        measured = _median([c["speedup"] for c in cs])
        predicted = _median([c.get("predicted_speedup") for c in cs])
        miss = measured / predicted - 1 if measured and predicted else None
        rows.append([preset, kind, method, k, conc,
                     _f(_median([c["plain"]["tokens_per_s"] for c in cs]), ".1f"),
                     _f(_median([c["spec"]["tokens_per_s"] for c in cs]), ".1f"),
                     _f(measured), _f(predicted), _pct(miss),
                     _f(_median([c["plain"]["aggregate_tokens_per_s"] for c in cs]), ".1f"),
                     _f(_median([c["spec"]["aggregate_tokens_per_s"] for c in cs]), ".1f"),
                     _f(_median([c["aggregate_speedup"] for c in cs])),
                     _f(_median([c["spec"]["mean_acceptance_length"] for c in cs])),
                     _f(_median([c["spec"]["alpha"] for c in cs])),
                     _hist(cs[0]["spec"]["vllm_histogram"]),
                     _f(_median([c.get("v_k_plus_1") for c in cs])),
                     "yes" if all(c["outputs_equal"] for c in cs) else "NO",
                     sum(c["spec"]["merged_chunks"] + c["plain"]["merged_chunks"] for c in cs), len(cs)])
    head = ["preset", "kind", "method", "k", "conc", "plain tok/s", "spec tok/s", "measured x", "predicted x", "miss",
            "plain agg tok/s", "spec agg tok/s", "agg x", "accept len", "alpha", "histogram (0..k accepted)",
            "v(k+1)", "same output", "merged chunks", "rounds"]
    return _table(head, rows)


def crosscheck_table(doc: dict) -> str:
    rows = []
    for c in doc.get("cells", []):
        x = c.get("crosscheck")
        if not x:
            continue
        rep, ours, vl, loop = x["vllm_replayed"], x["our_lookup"], x["vllm_reported"] or {}, x.get("our_loop")
        rows.append([c["preset"], x["k"], f"{x['prompt_lookup_min']}..{x['prompt_lookup_max']}",
                     f"{vl.get('accepted')}/{vl.get('drafted')} in {vl.get('verify_steps')}",
                     "yes" if rep["reproduces_vllm"] else f"no ({rep['check']})",
                     f"{ours['accepted']}/{ours['drafted']} in {ours['verify_steps']}",
                     _f(vl.get("mean_acceptance_length")), _f(ours["mean_acceptance_length"]),
                     f"{x['contexts_proposing_differently']}/{x['contexts']}",
                     "-" if not loop else f"{loop['accepted']}/{loop['drafted']} in {loop['verify_steps']}"
                     + ("" if loop["same_output_as_vllm"] else " (other output)")])
    if not rows:
        return "(no n-gram cells)"
    return _table(["preset", "k", "n-gram", "vLLM accepted/drafted in steps", "replay reproduces vLLM",
                   "our lookup accepted/drafted in steps", "vLLM accept len", "ours accept len",
                   "contexts where the rules differ", "our loop, run (accepted/drafted in steps)"], rows)


NOTE = ("Per request: median decode tokens/s (prefill excluded). Aggregate: all tokens over the batch's wall time. "
        "Predicted: the cost model with v(k+1) from the engine's own step times (docs/vllm.md). Miss = measured / "
        "predicted - 1. Histogram: vLLM's acceptance histograms summed over the batch's requests.")


def report_text(doc: dict) -> str:
    return "\n\n".join([
        "# vLLM sweep", setup_text(doc), "## Server startup", startup_table(doc),
        "## Plain against speculative vLLM (same concurrency, adjacent runs)",
        NOTE,
        cells_table(doc),
        "## Our prompt lookup against vLLM's n-gram (greedy, the same output replayed)", crosscheck_table(doc)]) + "\n"
