"""The table of scripts/bench_kernels.py's result (a CPU fp32 pass over n tokens on BLAS against oneDNN), drawn from
its saved JSON alone: what that script prints and what docs/*.md show (scripts/results_tables.py)."""

from __future__ import annotations

from ..tables import markdown_table

EXPERIMENT = "kernels-blas-onednn"


def markdown(doc: dict) -> str:
    """The table docs/results.md shows, drawn from the saved result alone (scripts/results_tables.py)."""
    head = (f"{doc['date']}, {doc['setup']}; {doc['rounds']} rounds, {doc['context_tokens']}-token context; "
            f"verdict: {doc['verdict']['headline']}")
    b, o = doc["kernels"]["blas"], doc["kernels"]["onednn"]
    rows = [[n, f"{b[n]['median_ms']:.1f} [{b[n]['min_ms']:.1f}-{b[n]['max_ms']:.1f}]", f"{b[n]['v']:.2f}",
             f"{o[n]['median_ms']:.1f} [{o[n]['min_ms']:.1f}-{o[n]['max_ms']:.1f}]", f"{o[n]['v']:.2f}",
             f"{b[n]['median_ms'] / o[n]['median_ms']:.2f}"] for n in map(str, doc["sizes"])]
    return head + "\n\n" + markdown_table(["n", "BLAS ms [min-max]", "v(n) BLAS", "oneDNN ms [min-max]", "v(n) oneDNN",
                                            "BLAS / oneDNN"], rows)
