"""The panels' content, as HTML and Markdown strings (and the run's charts), built from records, summaries
and the session; no gradio here. Every piece of text from a model, a preset or a user is escaped."""

from __future__ import annotations

import html

from ..core.cost import break_even_alpha, verify_cost
from ..core.records import Iteration
from ..drafters.adaptive import describe_choices
from ..pairs.registry import PAIRS
from . import charts
from .serving import PairProvider, menu_value
from .session import RunRequest, Session

LOADING_MESSAGE = ("Loading the model pair (first use in this process; the embedded model is dequantized once "
                   "and cached, which takes up to a minute) \u2026")
SWEEP_COLUMNS = ["k", "measured", "min", "max", "\u03b1", "predicted (iid)", "predicted (per-position)",
                 "break-even \u03b1"]


def loading_status(provider: PairProvider) -> str | None:
    """The status line while the pair loads (None when it is loaded already)."""
    return None if provider.loaded() else LOADING_MESSAGE


def pair_info(provider: PairProvider) -> str:
    """One line under the pair menu: what the chosen pair is, and whether it is loaded yet."""
    if provider.fixed:
        p = provider.get()
        return (f"<span class='small-note'>`{html.escape(p.target_name)}` + "
                f"`{html.escape(p.draft_name or 'no draft model')}` \u00b7 loaded</span>")
    choice = provider.choice
    named = PAIRS.get(menu_value(choice))
    note = named.note if named is not None else "a custom pair"
    state = "loaded" if provider.loaded() else "loads on the first run (hub models download once)"
    return (f"<span class='small-note'>`{html.escape(choice.target)}` + "
            f"`{html.escape(choice.draft or 'no draft model')}` \u00b7 {html.escape(note)} \u00b7 {state}</span>")


def k_text(req: RunRequest, summary=None) -> str:
    """'4', or 'adaptive (chosen: 2x3 16x5)' once a run says which k it used."""
    if req.k_mode == "fixed":
        return str(req.k)
    if summary is None or not summary.k_values:
        return req.k_mode
    return f"{req.k_mode} (chosen: {describe_choices(summary.k_values)})"


def figures(records, summary) -> dict:
    """The run tab's three charts: {"time": ..., "positions": ..., "alpha": ...}."""
    its = [r for r in records if isinstance(r, Iteration)]
    return {"time": charts.time_split_figure(its), "positions": charts.acceptance_by_position_figure(summary),
            "alpha": charts.alpha_figure(its)}


def counters_html(summary, max_new_tokens: int | None, running: bool, prefill_s: float | None = None) -> str:
    """The live counters: iterations, alpha, tokens per target pass, tokens/s, elapsed."""
    s = summary
    n_it = s.target_passes if s else 0
    alpha = "\u2013" if s is None or s.alpha is None else f"{s.alpha:.2f}"
    tpp = "\u2013" if not s or not s.target_passes else f"{s.tokens_per_pass:.2f}"
    tps = "\u2013" if not s or not s.decode_s else f"{s.tokens_per_s:.1f}"
    elapsed = "\u2013" if not s else f"{s.decode_s:.2f} s"
    new = f"{s.new_tokens if s else 0}" + (f" / {max_new_tokens}" if max_new_tokens else "")
    cards = [
        ("iterations", "Iterations", str(n_it), "target passes (verification) so far"),
        ("alpha", "\u03b1 acceptance", alpha, ("accepted / evaluated proposals (proposals after a rejection "
                                              "were never evaluated, so they do not count)")),
        ("tokens_per_pass", "Tokens / target pass", tpp, "new tokens per verification pass (plain decoding: 1)"),
        ("tokens_per_s", "Tokens / s", tps, "new tokens / decode time, prefill excluded"),
        ("elapsed", "Decode time", elapsed, "wall time since decoding started (prefill excluded)"),
        ("new_tokens", "New tokens", new, "tokens generated / max new tokens"),
    ]
    state = "running" if running else "done"
    out = [f'<div class="counters {state}">']
    for key, label, value, tip in cards:
        out.append(f'<div class="counter" data-counter="{key}" title="{html.escape(tip, quote=True)}">'
                   f'<div class="value">{html.escape(value)}</div><div class="label">{html.escape(label)}</div></div>')
    out.append("</div>")
    if s is not None and s.prefill_s:
        out.append(f'<div class="counters-note">prefill {s.prefill_s:.2f} s ({s.prompt_tokens} prompt tokens), '
                   f"not counted in tokens/s</div>")
    return "".join(out)


def check_html(preset, check) -> str:
    """The verdict on a preset's output: valid JSON? valid against the schema? (and why not)."""
    if preset is None or not preset.checks_output:
        return ""
    if check is None:
        return '<div class="check pending">Output check: waiting for the run to finish</div>'

    def badge(ok, yes, no, unknown="not checked"):
        if ok is None:
            return f'<span class="badge na">\u2013 {unknown}</span>'
        text = "\u2714 " + yes if ok else "\u2718 " + no
        return f'<span class="badge {"ok" if ok else "bad"}">{text}</span>'

    parts = [f'<div class="check"><b>Output check</b> ({html.escape(preset.name)}, {preset.output_format}): ',
             badge(check.is_json, "valid JSON", "not valid JSON"), " ",
             badge(check.schema_valid if check.is_json else None, "valid against the schema",
                   "not valid against the schema", "schema not checked")]
    if check.error:
        parts.append(f'<div class="check-error">{html.escape(check.error)}</div>')
    parts.append("</div>")
    return "".join(parts)


def prediction_markdown(session: Session) -> str:
    """Predicted speed-up (cost model + calibration) beside the measured one, saying how each was measured."""
    run = session.run
    lines = ["#### Predicted against measured"]
    if run is None or not run.finished or run.summary is None:
        lines.append("Run speculative decoding, press **Calibrate** to time the target and the drafter on the "
                     "current prompt, and **Compare with plain** to measure the speed-up.")
        return "\n\n".join(lines)
    s = run.summary
    k = run.request.k
    varying = run.request.k_mode != "fixed"
    timing = None if varying else session.timing_for(run.drafter, run.prompt_key, k + 1)
    rows = ["| | speed-up | from |", "|---|---:|---|"]
    if varying:
        rows.append(f"| predicted | \u2013 | k was chosen per iteration ({k_text(run.request, s)}); the cost model "
                    f"predicts a fixed k (the **k per output shape** tab compares them) |")
    elif timing is not None:
        positions = [a for a in s.per_position_acceptance if a is not None]
        if s.alpha is not None:
            rows.append(f"| predicted, iid \u03b1 | **{timing.predict(s.alpha, k):.2f}\u00d7** | "
                        f"\u03b1 = {s.alpha:.3f} at k = {k} |")
        if positions:
            rows.append(f"| predicted, per-position acceptance | "
                        f"**{timing.predict(positions, k, new_tokens=s.new_tokens or None):.2f}\u00d7** | "
                        f"P(accept) by position: {' '.join(f'{a:.2f}' for a in positions)}; "
                        f"{s.new_tokens} tokens, the last iterations clipped as the loop clips them |")
    else:
        rows.append("| predicted | \u2013 | press **Calibrate** (times c and v(n) on this prompt) |")
    if run.plain is not None:
        ratio = run.measured_speedup
        rows.append(f"| measured | **{ratio:.2f}\u00d7** | {s.tokens_per_s:.1f} tokens/s speculative, "
                    f"{run.plain.tokens_per_s:.1f} tokens/s plain |" if ratio else "| measured | \u2013 | |")
    else:
        rows.append("| measured | \u2013 | press **Compare with plain** |")
    lines.append("\n".join(rows))
    if timing is not None:
        v = timing.v
        be = break_even_alpha(k, timing.c, v)
        vs = ", ".join(f"{verify_cost(v, n):.2f}" for n in range(1, k + 2))
        lines.append(
            f"Cost model inputs: c = {timing.c:.3f} (drafter step / target step), v(n) for n = 1..{k + 1}: {vs}; "
            f"break-even \u03b1 at k = {k}: {'never pays' if be is None else f'{be:.2f}'}. Calibrated on this "
            f"prompt ({timing.context_tokens} tokens of context): median of "
            f"{len(timing.raw.get('target_pass_s', {}).get('1', []))} timed repeats after warm-up.")
    if run.plain is not None:
        gap = f"{run.plain_gap_s:.2f} s" if run.plain_gap_s is not None else "?"
        lines.append(
            f"How measured: one speculative run and one plain run of the same prompt, length "
            f"({run.request.max_new_tokens} max new tokens) and sampling, back to back (plain started {gap} after "
            f"the speculative run ended); "
            f"tokens/s over decoding only, prefill excluded; n = 1 pair of runs, so expect noise on a shared "
            f"machine. Setup: {run.plain_setup or run.setup}. The speculative run was streamed to this page, which "
            f"renders in another thread while it decodes; the **k per output shape** tab measures medians over rounds.")
    return "\n\n".join(lines)


def sweep_rows(result: dict) -> list[list]:
    """The sweep table for display: speed-ups and rates to 3 decimals; a k that can never pay says so."""

    def r3(x):
        return "\u2013" if x is None else round(float(x), 3)

    rows = []
    for row in result.get("table", []):
        never = "break_even_alpha" in row and row["break_even_alpha"] is None  # computed: no alpha pays
        rows.append([row["k"], r3(row["median_ratio"]), r3(row["min_ratio"]), r3(row["max_ratio"]),
                     r3(row.get("alpha")), r3(row.get("predicted_iid")), r3(row.get("predicted_empirical")),
                     "never pays" if never else r3(row.get("break_even_alpha"))])
    return rows


def sweep_summary(result: dict, setup: str, rounds: int, max_new: int) -> str:
    table = result.get("table") or []
    if not table:
        return "No sweep result."
    fixed = [r for r in table if isinstance(r["k"], int)] or table
    best = next((r for r in fixed if r["k"] == result.get("best_k")), max(fixed, key=lambda r: r["median_ratio"]))
    lines = [(f"**Recommended k = {best['k']}**: median measured speed-up {best['median_ratio']:.2f}\u00d7 "
              f"(range {best['min_ratio']:.2f}\u2013{best['max_ratio']:.2f} over {rounds} round(s)).")]
    if result.get("predicted_best_k") is not None:
        lines.append(f"The cost model, from the per-position acceptance at the largest k and the calibration, "
                     f"predicts k = {result['predicted_best_k']}.")
    for r in table:
        if not isinstance(r["k"], int):  # the adaptive arm of the same rounds
            lines.append(f"Adaptive k (chosen per iteration: {describe_choices(r.get('k_values') or {})}): "
                         f"{r['median_ratio']:.2f}\u00d7, {r['median_ratio'] / best['median_ratio']:.0%} of the best "
                         f"fixed k.")
    losing = [r["k"] for r in table if r["median_ratio"] < 1.0]
    if losing:
        lines.append(f"Slower than plain decoding (below break-even) at k = {', '.join(map(str, losing))}.")
    lines.append(f"How measured: in each round plain decoding and every k ran back to back in a rotating order, "
                 f"each speculative run divided by the plain run of its round; {max_new} max new tokens, prefill "
                 f"excluded; {setup}.")
    return " ".join(lines)
