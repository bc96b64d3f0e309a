"""The text `timing --random-weights` prints (and `report FILE` prints again) for a lab.forwards result."""

from __future__ import annotations

from .common import markdown_table

V_SHOWN = (2, 3, 5, 9, 17)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _spread(xs) -> str:
    """The per-round medians' max over min: how much the host moved between rounds."""
    xs = [x for x in xs or () if x]
    return f"{max(xs) / min(xs):.2f}x" if len(xs) > 1 else "-"


def _best(predicted: dict) -> tuple[str, float]:
    k, x = max(predicted.items(), key=lambda kv: kv[1])
    return k, x


def _arm_rows(doc: dict) -> list[list[str]]:
    floor = doc["floor"]["step_s"]
    rows = []
    for arm, a in doc["arms"].items():
        v = a["v"]
        rows.append([
            arm, _ms(a["target_step_s"]), _ms(a.get("target_step_gpu_s")), f"{a['target_step_s'] / floor:.2f}x",
            _ms(a.get("draft_step_s")), f"{a['c']:.3f}" if "c" in a else "-",
            *(f"{v[str(n)]:.2f}" if str(n) in v else "-" for n in V_SHOWN),
            _spread(a.get("target_step_round_medians_s")),
        ])
    return rows


def _prediction_rows(doc: dict) -> list[list[str]]:
    rows = []
    for arm, a in doc["arms"].items():
        if "predicted" not in a:
            continue
        cells = []
        for alpha in doc["alphas"]:
            k, x = _best(a["predicted"][str(alpha)])
            cells.append(f"{x:.2f}x at k = {k}")
        rows.append([arm, *cells])
    return rows


def forwards_text(doc: dict, setup: str | None = None) -> str:
    """The result's tables; its own setup line (device, card or CPU, dtype, threads, kernels) before `setup`."""
    setup = doc.get("setup") or setup
    shape = doc.get("shape") or {}
    f = doc["floor"]
    lines = [
        f"{doc.get('pair', 'the pair')} with random weights"
        + (f", layers cut to {shape['layers']}" if shape.get("layers") else "")
        + (f" — {setup}" if setup else "")
        + (f", driver {doc['gpu_driver']}" if doc.get("gpu_driver") else ""),
        ("ACCEPTANCE IS NOT MEASURED: random weights propose and accept nothing meaningful. Step costs are real; "
        "the alphas below are assumptions."),
        "",
        markdown_table(["forward", "target step", "on the GPU", "/ floor", "draft step", "c",
                        *(f"v({n})" for n in V_SHOWN), "rounds apart"], _arm_rows(doc)),
        "",
        f"floor: {f['bytes'] / 1e9:.2f} GB read per target step / {f['copy_bandwidth_Bps'] / 1e9:.0f} GB/s "
        f"(a copy measured here) = {_ms(f['step_s'])}"
        + (f"; at the datasheet's {f['datasheet_bandwidth_Bps'] / 1e9:.0f} GB/s, {_ms(f['datasheet_step_s'])}"
           if f.get("datasheet_step_s") else ""),
    ]
    if shape.get("layer_ratio") is not None:
        full = " in the full pair (the cut keeps each model's embedding and head whole)" if shape.get("layers") else ""
        lines.append(f"the draft's layers / the target's{full}: {shape['layer_ratio']:.2f}; its weight bytes: "
                     f"{shape['byte_ratio']:.2f} (an eager step costs about the first, a bandwidth-bound one the "
                     "second)")
    rows = _prediction_rows(doc)
    if rows:
        lines += ["", "the cost model's predicted speed-up, best k, at an assumed alpha (iid acceptance):", "",
                  markdown_table(["forward", *(f"alpha {a}" for a in doc["alphas"])], rows)]
    lines.append(f"({doc['rounds']} rounds x {doc['repeats']} repeats per arm after a warm-up round, arms "
                 f"alternating; context {doc['context_tokens']} tokens; {doc['seconds']:.0f} s)")
    return "\n".join(lines)
