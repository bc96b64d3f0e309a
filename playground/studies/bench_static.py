"""The table of scripts/bench_static.py's result (the lean static forward against transformers' (plain and speculative
tokens/s)), drawn from its saved JSON alone: what that script prints and what docs/*.md show
(scripts/results_tables.py)."""

from __future__ import annotations

ARMS = ("transformers", "static")


EXPERIMENT = "static-forward"


def markdown(doc: dict) -> str:
    """The result as the table docs/results.md shows (scripts/results_tables.py draws it from the saved JSON)."""
    head = (f"{doc['setup']}; drafter {doc['drafter']}, k = {doc['k']}, {doc['max_new_tokens']} new tokens, "
            f"{doc['rounds']} rounds x {len(doc['presets'])} presets ({', '.join(doc['presets'])})")
    rows = ["| target forward | plain tok/s [min-max] | speculative tok/s [min-max] |", "|---|---|---|"]
    rate, arms = doc["tokens_per_s"], doc.get("arms", ARMS)
    ops = doc.get("ops_per_layer")
    if ops:
        rows[0:2] = ["| target forward | ops per layer | plain tok/s [min-max] | speculative tok/s [min-max] |",
                     "|---|---|---|---|"]
    for arm in arms:
        cells = [f"{rate[f'{arm} {m}']['median']:.1f} [{rate[f'{arm} {m}']['min']:.1f}-{rate[f'{arm} {m}']['max']:.1f}]"
                 for m in ("plain", "speculative")]
        rows.append(f"| {arm} | " + (f"{ops[arm]:.1f} | " if ops else "") + f"{cells[0]} | {cells[1]} |")
    ratio = doc[f"{arms[1]}_over_{arms[0]}"]
    rows.append(f"| {arms[1]} / {arms[0]}, adjacent pairs | " + ("| " if ops else "") + " | ".join(
        f"{ratio[m]['median']:.3f} [{ratio[m]['min']:.3f}-{ratio[m]['max']:.3f}] (n = {ratio[m]['n']})"
        for m in ("plain", "speculative")) + " |")
    return head + "\n\n" + "\n".join(rows)
