"""Whether a figure may be believed, on the page: the trust verdict (lab.trust) of the prediction, of a Compare
and of a sweep, with each reason and its fix; the prediction panel; what kind of prediction a drafter gets on
every surface (`pricing`: the fixed-k model, or the run's iterations priced per source); and the glossary of the
terms these use.

Strings only (HTML inside Markdown); no gradio here. Every text from a finding is escaped.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from ..core.cost import break_even_alpha, verify_cost
from ..core.records import Iteration, describe_choices
from ..drafters.adaptive import AdaptiveSettings, CostCurve
from ..drafters.registry import drafter_spec, one_cost, source
from ..lab.calibration import CalibrationStore
from ..lab.schedules import costed_ratio, iteration_rows
from ..lab.trust import FAIL, WARN, Finding, MachineLoad, Verdict
from .session import RunResult, Session, is_nearest, stop_text

PRIOR_ALPHA = AdaptiveSettings().prior  # what adaptive k assumes before it has seen a proposal
SWEEP_COLUMNS = ["k", "measured", "min", "max", "\u03b1", "predicted (iid)", "predicted (per position)",
                 "predicted (loop costs)", "break-even \u03b1"]
GLOSSARY = {
    "k": "how many tokens the drafter proposes per iteration; the target checks them all in one pass",
    "\u03b1 (acceptance rate)": "the share of checked proposals the target kept (proposals after a rejection are "
                               "never checked, so they do not count)",
    "iid \u03b1": "the simple cost model: every proposal is kept with the same chance \u03b1, independently",
    "per position": "the finer model: the measured chance of keeping proposal i once proposals 1..i-1 were kept",
    "loop costs": "the per-position prediction with the calibration's step costs set to the level the other k of "
                  "the same round paid in the loop, seconds away (the run's own timing is not read): it follows "
                  "a machine whose speed moves between the calibration and the runs",
    "c": "what the drafter costs per proposed token, in target steps (one target step = what plain decoding pays "
         "per token); a drafter must be far below 1 to pay",
    "v(n)": "what one target pass over n tokens costs, in target steps; checking k proposals is a pass over k + 1",
    "cost per call": "what the drafter costs per iteration beyond its per-token cost c (catching up, set-up), in "
                     "target steps; a calibration measures it",
    "tokens per pass": "new tokens per target pass (verification): the accepted proposals plus the target's "
                       "correction or bonus token; plain decoding makes 1",
    "batch B": "how many sequences one target pass serves together; the loop itself runs batch 1, batched serving "
               "is measured on vLLM",
    "break-even \u03b1": "the acceptance rate at which drafting k tokens is exactly as fast as plain decoding; "
                        "'never pays': no rate is high enough at that k",
    "speed-up": "tokens per second of speculative decoding over plain decoding's, decoding only (prefill excluded)",
    "adjacent runs": "a speculative and a plain run timed right after each other, so a change of speed on the "
                     "machine hits both alike",
    "calibration": "timing the target's passes over 1..17 tokens and the drafter's proposals on this pair and "
                   "context length: the cost model's input (c and v(n))",
    "costed": "a run's own iterations (what each drafted and kept) priced at the calibration's step costs: the "
              "speed-up the run would measure on a machine whose every step cost what the calibration says",
    "confidence stop": "a model drafter stops drafting after a token it gave less than this probability, so k is a "
                       "cap (transformers' assistant stops at 0.4)",
    "adaptive k": "k chosen per iteration by the cost model from the acceptance seen so far; with a model drafter "
                  "and greedy decoding it is a cap (up to 16): the drafter stops where one more proposal no longer "
                  "pays, judged from its own probabilities, so the summary says what was drafted too",
    "noise bound": "how close a prediction equal to each k's true median would come, given how far this sweep's "
                   "runs scatter: a prediction cannot be shown better than that without more rounds",
    "trust verdict": "whether a figure may be believed: it fails when what it is made of moved more than the effect "
                     "it shows (other processes on the cores, rounds that disagree, a noisy or non-physical "
                     "calibration, a drafter slower than the target, a single round)",
}
SINGLE_PAIR = Finding("single-pair", WARN, "one speculative and one plain run, back to back: a single pair shows no "
                      "spread, so noise cannot be told from an effect", "for a figure to rely on, sweep k on the "
                      "'k per output shape' tab (medians over rounds)")


def glossary_html(terms=None) -> str:
    """The terms, in a details element: opens on a tap (touch screens) as well as a click."""
    chosen = [t for t in GLOSSARY if terms is None or t in terms]
    items = "".join(f"<dt>{html.escape(t)}</dt><dd>{html.escape(GLOSSARY[t])}</dd>" for t in chosen)
    return f'<details class="glossary"><summary>What the terms mean</summary><dl>{items}</dl></details>'


def verdict_html(verdict: Verdict, subject: str) -> str:
    """A box: trusted, trusted with warnings, or not to be trusted, with every finding's reason and fix."""
    if not verdict.trusted:
        cls, head = "fail", f"\u2717 {subject}: not to be trusted"
    elif verdict.warnings:
        cls, head = "warn", f"\u26a0 {subject}: trusted, with warnings"
    else:
        cls, head = "ok", f"\u2713 {subject}: trusted (no check failed)"
    items = "".join(
        f'<li class="{f.severity}"><b>{"fails" if f.severity == FAIL else "warning"}:</b> {html.escape(f.message)}'
        f' <span class="fix">\u2014 fix: {html.escape(f.fix)}</span></li>' for f in verdict.findings)
    body = f"<ul>{items}</ul>" if items else ""
    return (f'<div class="trust {cls}" data-trusted="{str(verdict.trusted).lower()}">'
            f'<div class="trust-head">{html.escape(head)}</div>{body}</div>')


def machine_findings(*loads: MachineLoad | None) -> list[Finding]:
    """What lab.trust says of other processes' CPU use over the runs (the worst of them)."""
    loads = [x for x in loads if x is not None]
    if not loads:
        return []
    worst = max(loads, key=lambda x: x.other_cores)
    return MachineLoad(wall_s=sum(x.wall_s for x in loads), other_cores=worst.other_cores,
                       steal=max(x.steal for x in loads), cores=worst.cores, loadavg=worst.loadavg).findings()


def run_load_note(run: RunResult) -> str:
    """For a run's status line: other processes on the cores while a streamed run decoded ('' when none were).
    The page's own browser counts when it runs on this machine: drawing the streamed tokens slows the run on 2
    cores (docs/results.md), which the run's tokens/s and time split then show."""
    load = run.machine
    if load is None or not any(f.check == "machine-load" for f in machine_findings(load)):
        return ""
    return (f" \u00b7 \u26a0 other processes used {load.other_cores:.2f} of the {load.cores} cores during this run "
            "(a browser showing this page on this machine counts): its tokens/s and time split are slowed; Compare "
            "with plain draws the page only when each run ends")


def miss_findings(predicted: float | None, measured: float | None) -> list[Finding]:
    """A prediction and a measurement that disagree: a warning past 25%, a failure past 2x."""
    if not predicted or not measured or predicted <= 0 or measured <= 0:
        return []
    ratio = max(predicted, measured) / min(predicted, measured)
    what = f"the prediction ({predicted:.2f}\u00d7) and the measurement ({measured:.2f}\u00d7)"
    fix = ("read the other findings; calibrate again on a quiet machine and measure over rounds on the "
           "'k per output shape' tab")
    if ratio >= 2.0:
        return [Finding("prediction-miss", FAIL, f"{what} differ {ratio:.1f}-fold: at least one of them is wrong", fix)]
    if ratio >= 1.25:
        return [Finding("prediction-miss", WARN, f"{what} differ by {ratio - 1:.0%}", fix)]
    return []


def compare_verdict(run: RunResult, timing=None, predicted: float | None = None) -> Verdict:
    """A Compare's verdict: one adjacent pair (a warning), other processes on the cores during either run, the
    calibration behind the prediction, and how far prediction and measurement disagree."""
    return Verdict.of([SINGLE_PAIR], machine_findings(run.machine, run.plain_machine),
                      timing.trust if timing is not None else None, miss_findings(predicted, run.measured_speedup))


def context_label(timing) -> str:
    """The context a calibration was timed on, said one way everywhere: its real length and the bucket it serves
    (lab.calibration.CalibrationStore: one calibration per power of two of context length)."""
    n = timing.context_tokens
    return f"{n} tokens of context (the {CalibrationStore.bucket(n)}-token bucket)"


def stand_in_note(timing, context_tokens: int) -> str:
    """'' or the words that label a calibration of another bucket standing in for this context (`is_nearest`)."""
    if not is_nearest(timing, context_tokens):
        return ""
    return (f"the calibration on {context_label(timing)} stands in for this prompt's {context_tokens} tokens; "
            "**Calibrate** times this length")


def cost_inputs(timing, k: int, single_c: bool = True) -> str:
    """The cost model's inputs, in words (a drafter with no model: its sources' costs are in `Pricing.why`)."""
    v = timing.v
    be = break_even_alpha(k, timing.c, v, timing.overhead)
    pays = "never (no \u03b1 is high enough)" if be is None else f"{be:.2f}"
    reps = len(timing.raw.target_pass_s.get(1, []))
    check = (f"checking k = {k} proposals is one pass over {k + 1} tokens, which costs **{verify_cost(v, k + 1):.2f}** "
             f"target steps (v({k + 1}))")
    said = (f"Cost model inputs: the drafter costs **{timing.c:.2f}** target steps per proposed token (c); {check}; "
            f"so drafting at k = {k} pays from \u03b1 = {pays} (break-even \u03b1)." if single_c else
            f"Cost inputs: each source's cost as above; {check}.")
    return f"{said} Calibrated on {context_label(timing)}, {reps} timed repeats per pass length after warm-up."


def per_k_table(timing, alpha: float, k_max: int = 8) -> str:
    rows = ["| k | predicted speed-up | break-even \u03b1 |", "|---:|---:|---:|"]
    for k in range(1, k_max + 1):
        be = break_even_alpha(k, timing.c, timing.v, timing.overhead)
        rows.append(f"| {k} | {timing.predict(alpha, k):.2f}\u00d7 | {'never pays' if be is None else f'{be:.2f}'} |")
    return "\n".join(rows)


def _calibration_only(session: Session) -> list[str]:
    drafter, timing = session.calibration
    said = pricing(drafter, timing)
    if not said.single_c:
        intro = (f"No prediction per k for {html.escape(drafter)} \u2014 {html.escape(said.why, False)}. **Run** it and "
                 "the panel prices the run's own iterations per source (the costed row); **Compare with plain** "
                 "measures it.")
        return [verdict_html(timing.trust, "The calibration"), intro, cost_inputs(timing, 4, single_c=False)]
    last = session.run.summary.alpha if session.run is not None and session.run.summary is not None else None
    if last is not None:
        alpha, whence = last, "the last run's"
    else:
        alpha, whence = PRIOR_ALPHA, "the prior (what adaptive k assumes before it has seen a proposal)"
    intro = (f"Predicted speed-up per k for {html.escape(drafter)} at \u03b1 = {alpha:.2f}, {whence}; **Run** to "
             f"measure \u03b1 on this prompt, **Compare with plain** to measure the speed-up.")
    return [verdict_html(timing.trust, "The calibration"), intro, per_k_table(timing, alpha), cost_inputs(timing, 4)]


def prediction_markdown(session: Session, timing=None) -> str:
    """Predicted speed-up (cost model + `timing`, the calibration found for the run) beside the measured one, the
    trust verdict of both, and how each was measured."""
    run = session.run
    lines = ["#### Predicted against measured"]
    if run is None or not run.finished or run.summary is None:
        if session.calibration is not None:
            return "\n\n".join([*lines, *_calibration_only(session), glossary_html()])
        lines.append("Run speculative decoding, press **Calibrate** to time the target and the drafter for the cost "
                     "model, and **Compare with plain** to measure the speed-up.")
        return "\n\n".join([*lines, glossary_html()])
    s = run.summary
    k = run.request.k
    varying = run.request.k_mode != "fixed"
    rows = ["| | speed-up | from |", "|---|---:|---|"]
    said = pricing(run.request.drafter, timing, run)
    model, costed = _model_prediction(run, timing, said), said.costed
    if varying:
        rows.append(f"| predicted | \u2013 | k was chosen per iteration ({_k_chosen(run)}); the cost model "
                    f"predicts a fixed k (the **k per output shape** tab compares them) |")
    elif timing is not None and run.request.min_confidence is not None:
        rows.append(f"| predicted | \u2013 | {stop_text(run.request.min_confidence)} ({_drafted_text(run)}); the "
                    "fixed-k model drafts all k, so only the costed row below applies |")
    elif timing is not None and not said.single_c:
        rows.append(f"| predicted | \u2013 | {html.escape(said.why, False)} |")
    elif timing is not None:
        positions = [a for a in s.per_position_acceptance if a is not None]
        if s.alpha is not None:
            rows.append(f"| predicted, iid \u03b1 | **{timing.predict(s.alpha, k):.2f}\u00d7** | "
                        f"\u03b1 = {s.alpha:.3f} at k = {k} |")
        if model is not None:
            rows.append(f"| predicted, per-position acceptance | **{model:.2f}\u00d7** | "
                        f"P(accept) by position: {' '.join(f'{a:.2f}' for a in positions)}; "
                        f"{s.new_tokens} tokens, the last iterations clipped as the loop clips them |")
    else:
        rows.append("| predicted | \u2013 | press **Calibrate** (times the target and the drafter: c and v(n)) |")
    if costed is not None:
        rows.append(f"| costed: this run's own iterations | **{costed:.2f}\u00d7** | its {s.target_passes} "
                    "iterations as they went (k drafted, tokens kept), each step at its calibrated cost: no "
                    "acceptance model, so a gap to the prediction is the acceptance model's, a gap to the "
                    "measurement the steps' and the machine's |")
    ratio = run.measured_speedup
    if run.plain is not None:
        rows.append(f"| measured | **{ratio:.2f}\u00d7** | {s.tokens_per_s:.1f} tokens/s speculative, "
                    f"{run.plain.tokens_per_s:.1f} tokens/s plain |" if ratio else "| measured | \u2013 | |")
    else:
        rows.append("| measured | \u2013 | press **Compare with plain** |")
    if run.plain is not None:
        lines.append(verdict_html(compare_verdict(run, timing, compared_prediction(run, timing)), "This comparison"))
    elif timing is not None:
        lines.append(verdict_html(timing.trust, "The prediction's calibration"))
    lines.append("\n".join(rows))
    if note := stand_in_note(timing, len(run.prompt_ids)):
        lines.append(f"Calibration: {note}.")
    if timing is not None and not varying:
        lines.append(cost_inputs(timing, k, said.single_c))
    elif timing is not None and s.alpha is not None and said.single_c:
        lines.append(f"Predicted speed-up per k at this run's \u03b1 = {s.alpha:.2f}, under the same calibration: "
                     "what a fixed k would have given")
        lines.append(per_k_table(timing, s.alpha))
    elif session.calibration is not None:  # no prediction for this run: what the last calibration predicts per k
        lines.extend(_calibration_only(session))
    if run.plain is not None:
        gap = f"{run.plain_gap_s:.2f} s" if run.plain_gap_s is not None else "?"
        lines.append(
            f"How measured: one speculative run and one plain run of the same prompt, length "
            f"({run.request.max_new_tokens} max new tokens) and sampling, back to back (plain started {gap} after "
            f"the speculative run ended); tokens/s over decoding only, prefill excluded; n = 1 pair of runs, so "
            f"expect noise on a shared machine. Setup: {run.plain_setup or run.setup}. {_drawn(run)} The **k per "
            f"output shape** tab measures medians over rounds.")
    lines.append(glossary_html())
    return "\n\n".join(lines)


@dataclass(frozen=True)
class Pricing:
    """How the page predicts a drafter under a calibration, the same wherever it says it (the run's panel after
    Run, Calibrate or Compare, What-if, the sweep's batch lines): the fixed-k model where it fits (`single_c`), else
    no model, `why`, and the run's own iterations priced at each source's cost (`costed`, for either kind)."""

    single_c: bool
    costed: float | None = None
    why: str = ""


def pricing(drafter: str | None, timing=None, run: RunResult | None = None) -> Pricing:
    """The prediction's kind for `drafter` (a registry name) under `timing`. The fixed-k model charges every
    proposal one drafter cost c: it fits a drafter whose declared sources share one cost kind (registry.one_cost)
    and a run whose iterations came from one source. A hybrid copies at a search cost and drafts with a model at c,
    so it gets no model and, once `run` (a finished run of it) exists, that run's iterations priced per source."""
    ran = run if run is not None and run.summary is not None and run.request.drafter == drafter else None
    counts = ran.summary.source_iterations if ran is not None else {}
    costed = costed_speedup(ran, timing) if ran is not None else None
    if one_cost(drafter) and len(counts) <= 1:
        return Pricing(True, costed)
    return Pricing(False, costed, f"no model for this drafter: the model charges every proposal one drafter's c, "
                                  f"and {drafter}'s come from {_source_words(drafter, timing, counts)}; the costed "
                                  "figure prices each source")


def _source_words(drafter, timing, counts: dict) -> str:
    """'lookup (a search: 0.004 target steps a call; 9 iterations), draft (a model: c = 0.38 + 0.065 a call)'."""
    costs = timing.source_costs if timing is not None else {}
    declared = [] if one_cost(drafter) or drafter == "auto" else [s.name for s in drafter_spec(drafter).sources]
    out = []
    for name in dict.fromkeys([*declared, *counts]):
        kind = {"search": "a search", "none": "free", "model": "a model"}.get(getattr(source(name), "cost", ""), "")
        c, call = costs.get(name, (None, None))
        priced = "" if c is None else f"{call:.3f} target steps a call" if not c else f"c = {c:.2f} + {call:.3f} a call"
        bits = [f"{kind}: {priced}" if priced else kind,
                f"{counts[name]} iteration{'s' * (counts[name] != 1)}" if name in counts else ""]
        said = "; ".join(b for b in bits if b)
        out.append(f"{name} ({said})" if said else name)
    return ", ".join(out) or "more than one source"


def _model_prediction(run: RunResult, timing, said: Pricing) -> float | None:
    """The model's prediction of a fixed-k run that drafted every k: its per-position acceptance, at its length
    (None where the model does not fit the drafter: `pricing`)."""
    s = run.summary
    positions = [a for a in s.per_position_acceptance if a is not None]
    if timing is None or run.request.k_mode != "fixed" or run.request.min_confidence is not None or not positions \
            or not said.single_c:
        return None
    return timing.predict(positions, run.request.k, new_tokens=s.new_tokens or None,
                          limit=run.request.max_new_tokens if s.finished == "eos" else None)


def compared_prediction(run: RunResult, timing) -> float | None:
    """The figure a Compare's verdict holds the measurement against: the model's prediction where it applies
    (a fixed k, every k drafted), else the run's own iterations costed."""
    if run.summary is None:
        return None
    said = pricing(run.request.drafter, timing, run)
    model = _model_prediction(run, timing, said)
    return model if model is not None else said.costed


def _drafted_text(run: RunResult) -> str:
    drafting = [len(r.proposed) for r in run.records if isinstance(r, Iteration) and r.k > 0]
    if not drafting:
        return "no iteration drafted"
    return f"{sum(drafting) / len(drafting):.1f} of k = {run.request.k} drafted per iteration on average"


def costed_speedup(run: RunResult, timing) -> float | None:
    """The run's iterations costed under `timing` (lab.schedules.costed_ratio): what a machine that ran every
    step at its calibrated cost would measure for the decisions the run made on the text it got (None without a
    calibration)."""
    if timing is None or run.summary is None:
        return None
    return costed_ratio(iteration_rows(run.records), CostCurve.from_timing(timing))


def _drawn(run: RunResult) -> str:
    if run.streamed:
        return ("The speculative run was streamed to this page while it decoded, the plain run was not: a browser "
                "drawing it on the same cores slows that side alone (press Compare with plain, which draws both at "
                "the end).")
    return ("Both runs showed only their progress while they decoded (tokens and charts were drawn after), so a "
            "browser on the same machine weighs on both alike.")


def _k_chosen(run: RunResult) -> str:
    s = run.summary
    ks = s.k_values if s is not None else {}
    return f"{run.request.k_mode}, chosen: {describe_choices(ks, s.drafted_values)}" if ks else run.request.k_mode
