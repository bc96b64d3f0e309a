"""The text `timing --random-weights` prints (and `report FILE` prints again) for a lab.forwards result."""

from __future__ import annotations

from ..results.calibration import ForwardsResult
from ..tables import markdown_table

V_SHOWN = (2, 3, 5, 9, 17)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _spread(xs) -> str:
    """The per-round medians' max over min: how much the host moved between rounds."""
    xs = [x for x in xs or () if x]
    return f"{max(xs) / min(xs):.2f}x" if len(xs) > 1 else "-"


def _best(predicted: dict[int, float]) -> tuple[int, float]:
    return max(predicted.items(), key=lambda kv: kv[1])


def _arm_rows(result: ForwardsResult) -> list[list[str]]:
    floor = result.floor.step_s
    rows = []
    for arm, a in result.arms.items():
        rows.append([
            arm, _ms(a.target_step_s), _ms(a.target_step_gpu_s), f"{a.target_step_s / floor:.2f}x",
            _ms(a.draft_step_s), f"{a.c:.3f}" if a.c is not None else "-",
            *(f"{a.v[n]:.2f}" if n in a.v else "-" for n in V_SHOWN),
            _spread(a.target_step_round_medians_s),
        ])
    return rows


def _prediction_rows(result: ForwardsResult) -> list[list[str]]:
    rows = []
    for arm, a in result.arms.items():
        if a.predicted is None:
            continue
        cells = []
        for alpha in result.alphas:
            k, x = _best(a.predicted[alpha])
            cells.append(f"{x:.2f}x at k = {k}")
        rows.append([arm, *cells])
    return rows


def forwards_text(result: ForwardsResult, setup: str | None = None) -> str:
    """The result's tables; its own setup line (device, card or CPU, dtype, threads, kernels) before `setup`."""
    setup = result.setup or setup
    shape = result.shape
    cut = shape.layers if shape is not None else None
    f = result.floor
    lines = [
        f"{result.pair or 'the pair'} with random weights"
        + (f", layers cut to {cut}" if cut else "")
        + (f" — {setup}" if setup else "")
        + (f", driver {result.gpu_driver}" if result.gpu_driver else ""),
        ("Acceptance is not measured: random weights propose and accept nothing meaningful. Step costs are real; "
        "the alphas below are assumptions."),
        "",
        markdown_table(["forward", "target step", "on the GPU", "/ floor", "draft step", "c",
                        *(f"v({n})" for n in V_SHOWN), "rounds apart"], _arm_rows(result)),
        "",
        f"floor: {f.bytes / 1e9:.2f} GB read per target step / {f.copy_bandwidth_Bps / 1e9:.0f} GB/s "
        f"(a copy measured here) = {_ms(f.step_s)}"
        + (f"; at the datasheet's {f.datasheet_bandwidth_Bps / 1e9:.0f} GB/s, {_ms(f.datasheet_step_s)}"
           if f.datasheet_step_s else ""),
    ]
    if shape is not None and shape.layer_ratio is not None:
        full = " in the full pair (the cut keeps each model's embedding and head whole)" if cut else ""
        lines.append(f"the draft's layers / the target's{full}: {shape.layer_ratio:.2f}; its weight bytes: "
                     f"{shape.byte_ratio:.2f} (an eager step costs about the first, a bandwidth-bound one the "
                     "second)")
    if result.step_kernels is not None:
        k = result.step_kernels
        lines.append(f"one 1-token step of the static forward, run eagerly, in {k.unit}: target {k.target}"
                     + (f", draft {k.draft}" if k.draft is not None else ""))
    if result.compile_s:
        lines.append("the graphed step compiled by torch.compile before its capture ($PLAYGROUND_COMPILE_STEP=1): "
                     + ", ".join(f"{role} {s:.0f} s" for role, s in result.compile_s.items()))
    rows = _prediction_rows(result)
    if rows:
        lines += ["", "the cost model's predicted speed-up, best k, at an assumed alpha (iid acceptance):", "",
                  markdown_table(["forward", *(f"alpha {a}" for a in result.alphas)], rows)]
    lines.append(f"({result.rounds} rounds x {result.repeats} repeats per arm after a warm-up round, arms "
                 f"alternating; context {result.context_tokens} tokens; {result.seconds:.0f} s)")
    return "\n".join(lines)
