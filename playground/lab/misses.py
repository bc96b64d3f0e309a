"""How far the predictions missed a speed or sweep result's measured ratios: the per-cell table, the scores, the
miss split into its parts; and the small cell helpers lab.report shares."""

from __future__ import annotations

from .common import markdown_table
from .fit import prediction_score


def k_label(k) -> str:
    return f"k={k}" if isinstance(k, int) else str(k)


def fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def result_cells(doc: dict) -> tuple[dict, list[str]]:
    """A speed / sweep result's rows by (prompt, k), and its prompts in order."""
    rows = doc.get("by_prompt") or [{"prompt": "prompt", **r} for r in doc["table"]]
    return {(r["prompt"], r["k"]): r for r in rows}, doc.get("prompts") or sorted({r["prompt"] for r in rows})


def trust_cell(trust: dict | None) -> str:
    if not trust:
        return "-"
    if not trust["trusted"]:
        return "UNTRUSTED"
    return "ok (warn)" if trust["findings"] else "ok"


def misses_markdown(doc: dict) -> str:
    """How far each prediction missed the measured ratio, per prompt and k (measured - predicted): the
    calibration's, then (where the result has it) the one from the other arms' costs in each round, with the
    cell's min-max spread; and per prompt how many cells each put within 0.05."""
    ks = [k for k in doc["ks"] if isinstance(k, int)]
    by, prompts = result_cells(doc)
    keys = [key for key in ("miss_empirical", "miss_local") if any(r.get(key) is not None for r in by.values())]
    keys = keys or ["miss_empirical"]
    head = ["preset", *(k_label(k) for k in ks), "within 0.05"]
    rows = []
    for name in prompts:
        cells = [by[(name, k)] for k in ks]
        within = [sum(1 for c in cells if c.get(key) is not None and abs(c[key]) <= 0.05) for key in keys]
        shown = [" / ".join(fmt(c.get(key), "+.2f") for key in keys)
                 + (f" (\u00b1{fmt(c['spread'])})" if c.get("spread") is not None else "") for c in cells]
        rows.append([name, *shown, " / ".join(f"{n}/{len(ks)}" for n in within)])
    return markdown_table(head, rows)


def prediction_lines(doc: dict) -> list[str]:
    """After a blank line, how close each prediction came over a result's fixed-k cells (lab.fit.prediction_score):
    the calibration's ("miss_empirical"), then the one from the other arms' costs in each run's round
    ("miss_local")."""
    by, prompts = result_cells(doc)
    cells = [{"prompt": name, **by[(name, k)]} for name in prompts for k in doc["ks"]
             if isinstance(k, int) and (name, k) in by]
    lines = []
    for key, what in (("miss_empirical", "prediction"),
                      ("miss_local", "prediction from the other arms' costs in each round")):
        if (score := prediction_score(cells, key=key)) is None:
            continue
        w, p = score["within"], score["past"]
        lines.append(f"{what}: within {w} of the measured median in {score['close']} of {score['cells']} cells, in "
                     f"{score['sharp_close']} of the {score['sharp']} whose half-spread is at most {w}; largest miss "
                     f"{score['worst_miss']:+.2f} ({score['worst_prompt']}, k={score['worst_k']}); {score['far']} past "
                     f"{p}, {score['far'] - score['loose']} of them flagged in their cells")
    if not lines and doc.get("min_confidence") is not None:
        lines.append("prediction: none at a fixed k under a confidence stop (the model drafts every k); the costed "
                     "column counts what was drafted")
    return ["", *lines] if lines else []


def explained_markdown(doc: dict) -> str:
    """Per prompt and fixed k: the miss (measured - predicted, means over rounds) split into step costs (the
    loop's own against the calibration's), the acceptance model and the time outside the three buckets,
    with the cell's spread and the loop's overhead and rollback shares of decoding time."""
    ks = [k for k in doc["ks"] if isinstance(k, int)]
    by, prompts = result_cells(doc)
    head = ["preset", "k", "miss", "spread", "step costs", "acceptance", "overhead", "outside buckets", "rollback",
            "c in loop", "trust"]
    rows = []
    for name in prompts:
        for k in ks:
            r = by[(name, k)]
            ex = r.get("explained")
            if not ex:
                continue
            rows.append([name, str(k), f"{ex['miss']:+.2f}", fmt(r.get("spread")), f"{ex['step_costs']:+.2f}",
                         f"{ex['acceptance']:+.2f}", f"{ex['overhead']:+.2f}", fmt(ex["outside_buckets_share"], ".1%"),
                         fmt(ex["rollback_share"], ".1%"), fmt(ex["loop_c"]), trust_cell(r.get("trust"))])
    return markdown_table(head, rows)
