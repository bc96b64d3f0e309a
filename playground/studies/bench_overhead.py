"""The table of scripts/bench_overhead.py's result (what streaming tokens to a browser costs the loop), drawn from its
saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

from ..core.timesplit import BUCKETS, percent

EXPERIMENT = "overhead-streaming"


def markdown(doc: dict) -> str:
    """The table docs/results.md shows, drawn from the saved result alone (scripts/results_tables.py)."""
    presets = doc["presets"]
    head = (f"{doc['date']}, {doc['setup']}; drafter {doc['drafter']}, k = {doc['k']}, {doc['max_new_tokens']} new "
            f"tokens, greedy, {doc['rounds']} rounds; machine: {doc['verdict']['headline']} (other processes "
            f"{doc['other_cores']:.2f} cores" + (f", arm C's browser {doc['browser_cores']:.2f}" if
                                                   doc["browser_cores"] is not None else "") + ")")
    lines = ["| arm | decode tokens/s: " + " | ".join(presets) + " | " + " | ".join(BUCKETS) + " |",
             "|---|" + "---|" * (len(presets) + len(BUCKETS))]
    for arm, per in doc["tokens_per_s"].items():
        rates = [f"{x['median']:.1f} ({x['min']:.1f}-{x['max']:.1f})" for x in (per[n] for n in presets)]
        share = doc["shares"].get(arm)
        split = [percent(share[b]) if share else "" for b in BUCKETS]
        lines.append(f"| {ARM_LABELS.get(arm, arm)} | " + " | ".join(rates + split) + " |")
    pairs = [f"- {label} over the {r['all']['n']} adjacent pairs: median {r['all']['median']:.3f} "
             f"({r['all']['min']:.3f}-{r['all']['max']:.3f})" for label, r in doc["ratios"].items()]
    return head + "\n\n" + "\n".join(lines) + "\n\n" + "\n".join(pairs)


ARM_LABELS = {"A headless": "A headless", "B browser": "B Gradio's event, no browser",
              "C Chromium": "C Chromium on the same cores"}
