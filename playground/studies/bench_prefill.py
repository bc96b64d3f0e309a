"""The table of scripts/bench_prefill.py's result (where the drafter's prompt KV comes from (prefilled in turn, beside,
or copied from the target)), drawn from its saved JSON alone: what that script prints and what docs/*.md show
(scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import markdown_table

EXPERIMENT = "prefill-kv"


def _label(arm: str) -> str:
    if arm == "off":
        return "prefilled, in turn (off)"
    if arm == "shared":
        return "copied from the target"
    threads = arm.split()[2]  # "on, llama.cpp N thr"
    return f"prefilled beside, {threads} thread{'' if threads == '1' else 's'}"


def _cell(x: dict | None, sign: str = "") -> str:
    return "-" if x is None else f"{x['median']:{sign}.2f} ({x['min']:.2f}-{x['max']:.2f})"


def markdown(doc: dict) -> str:
    """The table docs/results.md shows, drawn from the saved result alone (scripts/results_tables.py)."""
    head = (f"{doc['date']}, {doc['setup']}; verdict: {doc['verdict']['headline']} (other processes "
            f"{doc['machine']['other_cores']:.2f} cores); k = {doc['k']}, {doc['max_new_tokens']} new tokens, "
            f"{doc['rounds']} rounds, greedy, a first call (drafter KV empty); median (min-max) of speculative / "
            "plain of the same round; gain: median per-round difference to \"off\"; prefill: median ms")
    rows = []
    for r in doc["rows"]:
        if r["arm"] == "plain":
            continue
        e2e = _cell(r["e2e_ratio"])
        drafter = f"{r['drafter_total_ms']:.0f} ms"
        if r["overlapped"]:
            drafter += f" ({r['drafter_not_hidden_ms']:.0f} not hidden)"
        rows.append([f"{r['preset']} ({doc['prompt_tokens'][r['preset']]})", r["drafter"], _label(r["arm"]),
                     f"**{e2e}**" if r["arm"] == "shared" else e2e, _cell(r["decode_ratio"]),
                     _cell(r["gain_vs_off"], "+"), f"{r['target_ms']:.0f} ms", drafter])
    return head + "\n\n" + markdown_table(["preset (prompt tokens)", "drafter", "drafter's prompt", "end to end",
                                            "decode only", "gain vs off", "target prefill", "drafter prefill"], rows)
