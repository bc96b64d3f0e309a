"""The sweep's words: its verdict, its recommended k (or why none), its table rows and its summary, built from the
lab's sweep result so that they agree with each other and with the chart (charts.sweep_figure). No gradio here."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..core.records import describe_choices
from ..lab.misses import noise_bound, noise_line
from ..lab.speed.schema import schema_cells
from ..results.speed import SpeedRow, SweepResult
from ..results.trust import FAIL, Verdict
from ..tables import markdown_table
from .session import SWEEP_K_MAX
from .verdicts import glossary_html, miss_findings, pricing, verdict_html

PREDICTIONS: dict[str, Callable[[SpeedRow], float | None]] = {
    "iid \u03b1": lambda r: r.predicted_iid, "per position": lambda r: r.predicted_empirical,
    "loop costs": lambda r: r.predicted_local}  # the chart's predicted curves (charts.sweep_figure), by name
SINGLE_C = ("iid \u03b1", "per position")  # the models that charge every proposal one drafter's c


def fit_to_drafter(result: SweepResult, drafter: str) -> tuple[SweepResult, list[str]]:
    """The result as the tab shows it for `drafter` (named in it, for the batch lines and What-if), and the
    predictions it leaves out: a drafter with several sources (a hybrid) copies at a search cost and drafts with a
    model at c (verdicts.pricing), so the single-c predictions are dropped (no model for this drafter) and only the
    loop-cost prediction, priced from the runs' own iterations, is drawn and said."""
    result.drafter = drafter
    if pricing(drafter).single_c:
        return result, []
    for row in result.table:
        row.predicted_iid = row.predicted_empirical = None
    return result, list(SINGLE_C)


def _fixed(result: SweepResult) -> list[SpeedRow]:
    return [r for r in result.table if isinstance(r.k, int)]


def sweep_verdict(result: SweepResult) -> Verdict | None:
    """The sweep's overall verdict (None for a result from before verdicts existed): the lab's, failed as well
    where a prediction on the chart is 2x or more from the measured median of its k."""
    if result.trust is None:
        return None
    misses = [replace(f, message=f"k = {r.k}: {f.message}") for r in _fixed(result)
              for predicted in (r.predicted_iid, r.predicted_empirical)
              for f in miss_findings(predicted, r.median_ratio) if f.severity == FAIL]
    return Verdict.of(result.trust, misses[:1])


def recommendation(result: SweepResult) -> tuple[int | None, str | None]:
    """(recommended k, None) or (None, why there is none): never a k from a failed verdict (the lab's
    `recommended_k` / `withheld`), and never a k that measured slower than plain decoding."""
    if result.trust is not None:
        k, withheld = result.recommended_k, result.withheld
    else:  # a result without a verdict: its best measured k
        k, withheld = result.best_k, None
    if k is None:
        return None, withheld or "the sweep measured no fixed k"
    row = next((r for r in result.table if r.k == k), None)
    if row is not None and row.median_ratio < 1.0:
        return None, (f"no k beat plain decoding (the best, k = {k}, measured {row.median_ratio:.2f}\u00d7): "
                      f"decode without drafting here, or use a faster drafter")
    verdict = sweep_verdict(result)
    if verdict is not None and not verdict.trusted:  # a prediction 2x from its measurement (sweep_verdict)
        return None, f"the verdict failed: {verdict.failures[0].message}"
    return k, None


def _never_pays(row: SpeedRow) -> bool:
    """A sweep's fixed k whose break-even alpha was computed and none pays."""
    return isinstance(row.k, int) and row.break_even_alpha is None


def sweep_rows(result: SweepResult) -> list[list]:
    """The sweep table for display: speed-ups and rates to 3 decimals; a k that can never pay says so."""

    def r3(x):
        return "\u2013" if x is None else round(float(x), 3)

    return [[row.k, r3(row.median_ratio), r3(row.min_ratio), r3(row.max_ratio), r3(row.alpha),
             r3(row.predicted_iid), r3(row.predicted_empirical), r3(row.predicted_local),
             "never pays" if _never_pays(row) else r3(row.break_even_alpha)] for row in result.table]


def predicted_peaks(result: SweepResult) -> dict[str, int]:
    """The k at which each predicted curve on the chart peaks, by the curve's name."""
    fixed = _fixed(result)
    out = {}
    for name, predicted in PREDICTIONS.items():
        drawn = [r for r in fixed if predicted(r) is not None]
        if drawn:
            out[name] = max(drawn, key=predicted).k
    return out


def _prediction_line(result: SweepResult, best: int, verdict: Verdict | None) -> str | None:
    """Where the chart's predicted curves peak, beside the measured best; the verdict is named only when it
    holds a prediction miss."""
    peaks = predicted_peaks(result)
    if not peaks:
        return None
    where = (f"k = {next(iter(peaks.values()))}" if len(set(peaks.values())) == 1 else
             ", ".join(f"k = {k} ({name})" for name, k in peaks.items()))
    missed = verdict is not None and any(f.check.startswith("prediction-miss") for f in verdict.findings)
    agree = "as measured" if set(peaks.values()) == {best} else f"the measurement peaks at k = {best}"
    return (f"The cost model's predictions peak at {where}{', ' if agree.startswith('as') else '; '}{agree}"
            + (" (the verdict names the miss)." if missed else "."))


def _edge_line(result: SweepResult, k: int, k_max: int) -> str | None:
    """Say so when the best k is the largest swept, and offer a wider sweep (with what adaptive k chose)."""
    fixed = _fixed(result)
    if not fixed or k != max(r.k for r in fixed) or k >= k_max:
        return None
    adaptive = next((r for r in result.table if not isinstance(r.k, int)), None)
    deeper = [int(x) for x in (adaptive.k_values if adaptive else None) or {} if str(x).isdigit() and int(x) > k]
    chose = f"; adaptive k chose up to {max(deeper)}" if deeper else ""
    return (f"k = {k} is the largest k swept, so a larger one may be faster{chose}: sweep again with a larger "
            f"'Largest k' (up to {k_max}).")


def sweep_summary(result: SweepResult, setup: str, rounds: int, max_new: int, k_max: int = SWEEP_K_MAX,
                  no_model: Sequence[str] = ()) -> str:
    """The verdict, one lead sentence (what to use, how sure, why), where the predictions peak and whether the
    best k is the sweep's edge; the rest (adaptive k, losses, misses, noise, how measured) behind a fold. The
    sentences agree with each other and with the chart. `no_model`: the predictions left out for the drafter
    (fit_to_drafter)."""
    table = result.table
    if not table:
        return "No sweep result."
    fixed = _fixed(result) or table
    verdict = sweep_verdict(result)
    k, why_not = recommendation(result)
    best = max(fixed, key=lambda r: r.median_ratio)
    out = [verdict_html(verdict, "This sweep")] if verdict is not None else []
    sure = "trusted" if verdict is None or verdict.trusted and not verdict.findings else "trusted, with warnings"
    if k is not None:
        row = next(r for r in fixed if r.k == k)
        lead = [(f"**Recommended k = {k}**: {row.median_ratio:.2f}\u00d7 plain decoding's speed, the best median of "
                 f"{rounds} round(s) ({sure}).")]
    else:
        lead = [f"**No recommended k**: {html.escape(why_not)}."]
        if best.median_ratio >= 1.0 and "beat plain" not in why_not:
            lead.append(f"The best measured k was {best.k} ({best.median_ratio:.2f}\u00d7); not a "
                        f"recommendation while the verdict fails.")
        elif "beat plain" not in why_not:
            lead.append(f"And no k beat plain decoding (the best, k = {best.k}, measured "
                        f"{best.median_ratio:.2f}\u00d7).")
    if no_model:
        lead.append(f"No {' or '.join(no_model)} prediction: no model for this drafter (lookup and a model "
                    f"drafter cost differently).")
    lead += [x for x in (_prediction_line(result, best.k, verdict),
                         _edge_line(result, k if k is not None else best.k, k_max)) if x]
    out.append(" ".join(lead))
    held = schema_table(result)
    if held:
        out.append(held)
    out.append(f"<details class='sweep-more'><summary>Adaptive k, losses, noise and how it was measured</summary>\n\n"
               f"{' '.join(_detail_lines(result, fixed, k, best, setup, max_new))}\n\n</details>")
    out.append(glossary_html(["k", "\u03b1 (acceptance rate)", "iid \u03b1", "per position", "loop costs",
                              "break-even \u03b1", "speed-up", "adjacent runs", "noise bound", "trust verdict"]))
    return "\n\n".join(out)


def schema_table(result: SweepResult) -> str | None:
    """With "Constrain to the schema": each k's constrained runs beside its free ones, in the summary's narrow column
    (the CLI's report words it at full width: lab.speed.schema.schema_lines); None without."""
    cells = [[k, f"{ratio}\u00d7", span, f"{free} \u2192 {held}", forced]
             for k, ratio, span, free, held, forced in schema_cells(result)]
    if not cells:
        return None
    return (f"**Constrained** to {html.escape(result.schema or 'the schema')}, each run again right after its free "
            "one: the speed-up over constrained plain decoding (its range over rounds), tokens per target pass free "
            "\u2192 constrained, and the share of tokens the schema forced.\n\n"
            + markdown_table(["k", "speed-up", "range", "tokens/pass", "forced"], cells))


def _detail_lines(result: SweepResult, fixed: list[SpeedRow], k: int | None, best: SpeedRow, setup: str,
                  max_new: int) -> list[str]:
    lines = []
    ref = next((r for r in fixed if r.k == k), best)
    costed = next(iter(result.schedules), None)  # lab.schedules: one entry, the sweep's one prompt
    for r in result.table:
        if not isinstance(r.k, int):  # the adaptive arm of the same rounds
            line = (f"Adaptive k (chosen per iteration: {describe_choices(r.k_values or {}, r.drafted_values)}): "
                    f"{r.median_ratio:.2f}\u00d7, {r.median_ratio / ref.median_ratio:.0%} of "
                    f"{'the recommended' if k is not None else 'the best measured'} k")
            if r.median_costed is not None and costed is not None and costed.adaptive_of_best is not None:
                line += (f"; its own iterations costed under the calibration, without the host's noise: "
                         f"{r.median_costed:.2f}\u00d7, {costed.adaptive_of_best:.0%} of the best fixed k "
                         f"costed the same way (k = {costed.best_fixed.k})")
            lines.append(line + ".")
    losing = [str(r.k) for r in fixed if r.median_ratio < 1.0]
    if losing:
        lines.append(f"Slower than plain decoding at k = {', '.join(losing)}.")
    never = [str(r.k) for r in fixed if _never_pays(r)]
    if never:
        lines.append(f"With these step costs the cost model says k = {', '.join(never)} can never pay.")
    explained = ref.explained
    if explained:
        lines.append(f"Where the prediction missed at k = {ref.k} (measured \u2212 predicted = "
                     f"{explained.miss:+.2f}\u00d7): step costs {explained.step_costs:+.2f}, acceptance model "
                     f"{explained.acceptance:+.2f}, overhead {explained.overhead:+.2f}.")
    if (bound := noise_bound(result.runs)) is not None:  # what any prediction could score on this sweep's scatter
        said = html.escape(noise_line(bound))
        lines.append(said[0].upper() + said[1:] + ".")
    spreads = [f.message for r in fixed for f in (r.trust.findings if r.trust else ()) if f.check == "spread"]
    if spreads:
        lines.append("Rounds disagree: " + "; ".join(html.escape(m) for m in spreads) + ".")
    every = result.plain_every  # None in results saved with one plain run per round
    divided = (f"with plain decoding before every {every} of them and after the last, each speculative run divided "
               "by plain decoding's speed at its moment, interpolated between the plain runs around it" if every else
               "each speculative run divided by the plain run of its round")
    lines.append(f"How measured: in each round every k ran back to back in a rotating order, {divided}; "
                 f"{max_new} max new tokens, prefill excluded; {setup}.")
    return lines
