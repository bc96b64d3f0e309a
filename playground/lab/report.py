"""A lab result as text: the tables the lab commands print when they finish, and the Markdown report of a
saved result (`python -m playground report FILE`), so a figure in the README is re-read from the file that
measured it, never copied by hand. Every function here takes a result dict (what an experiment returns
and `--out` saves) and returns text; the tables are Markdown, for the terminal and the README alike."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import TypeAdapter

from ..core.records import describe_choices
from ..core.timesplit import OUTSIDE_LIMIT, ROLLBACK_LIMIT, TimeSplit, median_shares, percent, within_limits
from ..errors import PlaygroundError
from ..experiments import experiment_named, experiments
from ..results import Result, from_document, read_document
from ..results.calibration import TimingRecord, TimingResult
from ..results.environment import Environment
from ..results.quality import AcceptanceResult, DistributionResult, DivergenceResult
from ..results.speed import PeersResult, SpeedResult, SpeedRun, SweepResult
from ..tables import fmt, markdown_table
from .batch import batch_table
from .calibration import Timing
from .common import new_tokens
from .misses import (
    explained_markdown,
    has_local,
    k_label,
    misses_markdown,
    prediction_lines,
    result_cells,
    trust_cell,
)
from .schedules import schedules_lines
from .speed.schema import schema_lines


def _setup_line(doc: Result) -> str:
    """Every result records its environment; not every kind names a drafter."""
    env, drafter = getattr(doc, "environment", None) or Environment(), getattr(doc, "drafter", None)
    pair = env.pair
    bits = [pair and pair.target, f"drafter: {drafter}" if drafter else None, env.gpu or env.cpu,
            pair and pair.device, pair and pair.dtype,
            f"{env.torch_threads} torch threads" if env.torch_threads else None,
            f"torch {env.torch}" if env.torch else None]
    return ", ".join(str(b) for b in bits if b)


def _text(value) -> str:
    """Free text in a table cell: a '|' would end the cell."""
    return str(value).replace("|", "\\|")


# --- speed and sweep -------------------------------------------------------------------------------------


def speed_caption(doc: SpeedResult) -> str:
    """What speed_markdown's fixed-k cells hold."""
    if has_local(doc):
        return "per prompt: measured (predicted from the calibration / from the loop's costs)"
    return "per prompt: measured (empirical prediction)"


def speed_markdown(doc: SpeedResult, kinds: dict[str, str] | None = None) -> str:
    """Prompt x k: measured median ratio (the calibration's empirical prediction, and the loop costs' where the
    result has it: `speed_caption`); then best fixed k, adaptive and heuristic beside it, end to end at the best k,
    and alpha."""
    if not isinstance(doc, SpeedResult):
        raise PlaygroundError(f"a speed or sweep result is needed, this is {getattr(doc, 'experiment', None)!r}")
    fixed = [k for k in doc.ks if isinstance(k, int)]
    schedules = [k for k in doc.ks if not isinstance(k, int)]
    by, prompts = result_cells(doc)
    local = has_local(doc)
    head = ["preset", *(k_label(k) for k in fixed), "best fixed k", *schedules, "end to end at best k", "alpha at best k"]
    rows = []
    for name in prompts:
        cells = []
        for k in fixed:
            r = by[(name, k)]
            predicted = fmt(r.predicted_empirical) + (f" / {fmt(r.predicted_local)}" if local else "")
            cells.append(f"{r.median_ratio:.2f} ({predicted})")
        best = max((by[(name, k)] for k in fixed), key=lambda r: r.median_ratio)
        sched = [f"{by[(name, s)].median_ratio:.2f} ({by[(name, s)].median_ratio / best.median_ratio:.0%} of best)"
                 for s in schedules]
        label = f"{name} ({kinds[name]})" if kinds and name in kinds else name
        rows.append([label, *cells, f"k={best.k}: **{best.median_ratio:.2f}x**", *sched,
                     f"{fmt(best.median_e2e_ratio)}x", fmt(best.alpha, ".3f")])
    return markdown_table(head, rows)


def _split(run: SpeedRun) -> TimeSplit | None:
    """Where a run's decoding time went (None for a run saved without its buckets)."""
    if None in (run.draft_s, run.verify_s, run.rollback_s, run.decode_s):
        return None
    return TimeSplit.of(run.draft_s, run.verify_s, run.rollback_s, run.decode_s)


def time_split_line(runs: Sequence[SpeedRun]) -> str | None:
    """Where the speculative runs' decoding time went, median share per run (every k and schedule), with the
    worst run's share outside the buckets and in rollback, and whether the medians kept their limits."""
    splits = [s for r in runs if (s := _split(r)) is not None and s.wall_s > 0]
    if not splits:
        return None
    med = median_shares(splits)
    worst = {name: max(s.shares()[name] for s in splits) for name in ("outside", "rollback")}
    held = within_limits(med)
    verdict = ", ".join(f"{name} < {limit:.0%} {'held' if held[name] else 'NOT held'}"
                        for name, limit in (("outside", OUTSIDE_LIMIT), ("rollback", ROLLBACK_LIMIT)))
    return (f"time split of the {len(splits)} speculative runs (median share of decode time, max over runs): "
            f"draft {percent(med['draft'])}, verify {percent(med['verify'])}, rollback {percent(med['rollback'])} "
            f"(max {percent(worst['rollback'])}), outside the buckets {percent(med['outside'])} (max "
            f"{percent(worst['outside'])}); {verdict}")


def verdict_lines(doc: SpeedResult | PeersResult) -> list[str]:
    """The experiment's trust verdict, its findings, and the recommendation or why it was withheld."""
    trust = doc.trust
    if not trust:
        return []
    lines = [f"trust: {trust.headline()}"]
    lines += [f"  - {f.severity}: {f.message} (fix: {f.fix})" for f in trust.findings[1:]]
    machine = doc.machine
    if machine:
        lines.append(f"machine: other processes kept {machine.other_cores:.2f} of {machine.cores} cores busy "
                     f"meanwhile; steal {machine.steal:.0%}")
    if isinstance(doc, SpeedResult):
        lines.append(f"recommended k: {doc.recommended_k}" if doc.recommended_k is not None
                     else f"no recommended k: {doc.withheld}")
    return lines


def k_table(doc: SpeedResult) -> str:
    """One row per k over all prompts: median ratio and its spread, alpha, the two predictions; a sweep adds
    the break-even alpha, an adaptive / heuristic arm how often each k was chosen."""
    sweep = isinstance(doc, SweepResult)
    schedules = any(not isinstance(row.k, int) for row in doc.table)
    head = ["k", "median", "min-max", "alpha", "pred iid", "pred emp", "costed", "trust"]
    head += (["break-even alpha"] if sweep else []) + (["k chosen: k\u00d7iterations"] if schedules else [])
    rows = []
    for row in doc.table:
        fixed = isinstance(row.k, int)
        be = row.break_even_alpha
        cells = [str(row.k), f"{row.median_ratio:.2f}", f"{row.min_ratio:.2f}-{row.max_ratio:.2f}",
                 fmt(row.alpha, ".3f"), fmt(row.predicted_iid), fmt(row.predicted_empirical),
                 fmt(row.median_costed), trust_cell(row.trust)]
        if sweep:
            cells.append(("never" if be is None else f"{be:.2f}") if fixed else "-")
        if schedules:
            cells.append("-" if fixed else describe_choices(row.k_values or {}, row.drafted_values))
        rows.append(cells)
    return markdown_table(head, rows)


def _calibration_c(doc: SpeedResult) -> float | None:
    timing = Timing.from_dict(doc.timing) if doc.timing else None
    return timing.c if timing is not None else None


def speed_table(doc: SpeedResult, setup: str, kinds: dict[str, str] | None = None) -> str:
    """What `speed` and `sweep` print: the runs' conditions, the per-k table, the best k, per prompt (speed)
    the prompt x k table, and the prompts whose plain speed drifted between rounds."""
    c = _calibration_c(doc)
    lines = [f"{doc.experiment} ({setup}; {doc.sampling or 'greedy'}; {new_tokens(doc.max_new_tokens)}; {doc.rounds} rounds "
             "of adjacent runs in rotating order" + (f", plain before every {pe} and after the last, interpolated to "
                                                     "each run" if (pe := doc.plain_every) else "")
             + "; ratio = speculative / plain tokens/s, prefill excluded"
             + ("" if c is None else f"; c = {c:.2f}")
             + (f"; schedules' memory: {doc.memory}" if any(isinstance(k, str) for k in doc.ks)
                and doc.memory else "") + ")", "", k_table(doc), ""]
    predicted = doc.predicted_best_k if isinstance(doc, SweepResult) else None
    lines.append(f"best k measured: {doc.best_k}" + (f"; predicted: {predicted}" if predicted is not None else ""))
    split = time_split_line(doc.runs)
    lines += [split] if split else []
    lines += verdict_lines(doc)
    if not isinstance(doc, SweepResult):
        lines += ["", speed_caption(doc), "", speed_markdown(doc, kinds)]
    lines += schedules_lines(doc.schedules)
    if any(r.explained for r in doc.by_prompt or doc.table):
        lines += ["", "why each prediction missed (means over rounds; the parts add up to the miss)", "",
                  explained_markdown(doc)]
        lines += prediction_lines(doc)
    drifted = [(name, d) for name, d in doc.drift.items() if d.flagged]
    if drifted:
        lines.append("")
    lines += [f"note: plain speed on {name} moved {100 * d.spread:.0f}% between rounds (machine drift)"
              for name, d in drifted]
    lines += host_level_lines(doc) + trace_lines(doc) + schema_lines(doc)
    return "\n".join(lines)


def host_level_lines(doc: SpeedResult) -> list[str]:
    """The whole run's plain level per round (from 3 prompts: what judges the figures over every prompt)."""
    host = doc.host_drift
    if host is None:
        return []
    levels = ", ".join(f"{x:.2f}" for x in host.plain_tokens_per_s)
    return [f"plain level over the {len(doc.prompts)} prompts, by round (each prompt against its own median): "
            f"{levels}; moved {host.spread:.0%}" + (" (past the limit)" if host.flagged else "")]


def trace_lines(doc: SpeedResult) -> list[str]:
    """speed --trace: whether the trace's responses are the target's own writing (lab.speed.trace.writing_note)."""
    return [f"trace: {doc.trace_note}"] if doc.trace_note else []


# --- timing ----------------------------------------------------------------------------------------------


def timing_line(t: TimingRecord) -> str:
    """A calibration's step costs in one line (a timing result, or the calibration a speed or sweep predicted from)."""
    return (f"target step {1000 * t.target_step_s:.1f} ms; drafter {1000 * t.draft_step_s:.1f} ms per token "
            f"(c = {t.c:.3f}) + {1000 * t.draft_call_s:.1f} ms per call; v(n) for n = 1..{len(t.v)}: "
            + ", ".join(f"{x:.2f}" for _, x in sorted(t.v.items())))


def timing_table(result: TimingResult, setup: str) -> str:
    """What `timing` prints: the step costs, then v(n) and the pass time over n tokens (median, min-max)."""
    raw = result.raw
    repeats = len(raw.target_pass_s.get(1, []))
    lines = [f"timing ({setup}; context {result.context_tokens} tokens; medians of {repeats})",
             (f"target step {1000 * result.target_step_s:.1f} ms, drafter per token "
              f"{1000 * result.draft_step_s:.1f} ms (c = {result.c:.3f}) + {1000 * result.draft_call_s:.1f} ms "
              "per call"), ""]
    rows = []
    for n, v in sorted(result.v.items()):
        sp = raw.target_spread.get(n)
        rows.append([str(n), f"{v:.2f}"] + (["-", "-"] if sp is None else [
            f"{1000 * sp.median:.1f}", f"{1000 * sp.min:.1f}-{1000 * sp.max:.1f}"]))
    lines.append(markdown_table(["n", "v(n)", "pass over n, ms", "min-max, ms"], rows))
    if result.c > 1:
        lines.append("\nWARNING: the drafter's step is slower than the target's: speculation cannot pay "
                     "(is something paged out or sharing the cores?)")
    fit = result.verify_fit
    if fit is not None and fit.drops:
        lines.append("\nv(n) drops where the samples say it is real (the hardware, not noise): "
                     + ", ".join(f"v({n + 1}) < v({n}) (p = {p:.1g})" for n, p in fit.drops))
    if result.trust is not None:
        lines.append(f"\ntrust: {result.trust.headline()}")
    if result.batch is not None:
        lines += ["", batch_table(result.batch, setup)]
    return "\n".join(lines)


# --- acceptance, divergence, distribution ----------------------------------------------------------------


def acceptance_table(result: AcceptanceResult, setup: str) -> str:
    """Per kind and k, pooled over its prompts: alpha, tokens per pass measured and from the iid and
    empirical models, and acceptance by draft position."""
    rows = []
    for row in result.pooled:
        if row.alpha is None:
            continue
        pos = " ".join("-" if a is None else f"{a:.2f}" for a in row.per_position)
        rows.append([_text(row.kind), str(row.k), f"{row.alpha:.3f}", f"{row.tokens_per_pass:.2f}",
                     f"{row.tokens_per_pass_iid:.2f}", fmt(row.tokens_per_pass_empirical), pos])
    head = ["kind", "k", "alpha", "tok/pass", "iid", "empir.", "per position"]
    return f"acceptance ({setup}; {result.sampling or 'greedy'})\n\n" + markdown_table(head, rows)


def divergence_table(result: DivergenceResult, setup: str) -> str:
    """How many greedy runs differ from plain greedy and, per difference, the competing tokens' logit gaps
    (plain's token minus speculative's) recomputed three ways, beside the dtype's spacing: near-tie or bug."""
    lines = [f"divergence ({setup}): {result.diverged} of {result.runs} greedy runs differ from plain"]
    rows = []
    for c in result.cases:
        gaps = ", ".join(f"{w} {g:+.2e}" for w, g in c.gaps.items())
        rows.append([_text(c.prompt), str(c.k), str(c.position), _text(repr(c.plain_text)),
                     _text(repr(c.spec_text)), gaps, f"{c.dtype_spacing:.1e}", c.verdict])
    if rows:
        head = ["prompt", "k", "at token", "plain", "speculative", "logit gaps", "dtype spacing", "verdict"]
        lines += ["", markdown_table(head, rows)]
    return "\n".join(lines)


def distribution_table(result: DistributionResult, setup: str) -> str:
    """Per context, seed and rule: the chi-square p-value of the first tokens against the target's
    distribution, and TV(p, q) (where it is small no rule can be told apart)."""
    rows = [[_text(r.prompt), str(r.seed), r.rule, f"{r.p_value:.3g}", fmt(r.tv_distance_p_q)]
            for r in result.results]
    text = (f"distribution ({setup}; {result.sampling}; {result.draws} draws per context, seed and "
            f"rule)\n\n" + markdown_table(["prompt", "seed", "rule", "p", "TV(p, q)"], rows))
    if result.contexts:
        crow = [[_text(n), str(c.position), fmt(c.tv_distance_p_q), "yes" if c.power else "NO"]
                for n, c in result.contexts.items()]
        text += (f"\n\ncontexts (the first of the prompt and its greedy continuation with TV >= {result.min_tv}; "
                 "power: both wrong rules rejected at every seed)\n\n"
                 + markdown_table(["prompt", "tokens in", "TV(p, q)", "power"], crow))
        if result.summary.without_power:
            text += ("\n\nwithout power (a passing exact rule proves nothing there): "
                     + ", ".join(result.summary.without_power))
    return text


# --- bench-peers -----------------------------------------------------------------------------------------


def peers_table(doc: PeersResult, setup: str) -> str:
    """Every arm's end-to-end speed as a ratio to transformers' plain generate, then ours against
    transformers' assisted generation with the same draft and k, ratio taken within each round and prompt."""
    rows = [[row.arm, f"{row.median_ratio:.2f}x", f"{row.min_ratio:.2f}-{row.max_ratio:.2f}",
             f"{row.median_tokens_per_s:.1f}", f"{row.outputs_equal}/{row.n}"] for row in doc.table]
    lines = [f"bench-peers ({setup}; greedy; end to end incl. prefill; ratio to transformers' plain generate)", "",
             markdown_table(["arm", "median", "min-max", "tokens/s", "same output"], rows)]
    for h2h, what in ((doc.ours_vs_hf_assisted, "drafting all k"),
                      (doc.ours_vs_hf_assisted_conf, "both stopping below confidence 0.4"),
                      (doc.ours_vs_hf_assisted_own_prefill, "drafting all k, our draft prefilling the prompt itself"),
                      (doc.ours_vs_hf_assisted_conf_transformers_forward,
                       "both stopping below confidence 0.4, our draft on transformers' forward")):
        if h2h:
            lines.append(f"ours / transformers' assisted generation, same draft, k = {doc.k}, {what}, per round "
                         f"and prompt: median {h2h.median:.2f}x [{h2h.min:.2f}-{h2h.max:.2f}], n = {h2h.n}")
    return "\n".join(lines + ([""] + verdict_lines(doc) if doc.trust else []))


# --- one entry for each experiment (declared in playground.experiments) -------------------------------------


def experiment_text(doc: Result, setup: str | None = None, kinds: dict[str, str] | None = None) -> str:
    """The text a lab command prints for its result: its experiment's `table`. `setup`: the line that goes with
    every figure (default: the one the result's environment records); `kinds`: prompt name -> preset kind (speed)."""
    experiment = experiment_named(doc.experiment)
    if experiment is None or experiment.table is None:
        tabled = [e.name for e in experiments() if e.table is not None]
        raise PlaygroundError(f"no table for {doc.experiment!r} results ({', '.join(tabled)})")
    table, setup = experiment.load("table"), setup or _setup_line(doc)
    return table(doc, setup, kinds) if isinstance(doc, SpeedResult) else table(doc, setup)


def report(path: str | Path, brief: bool = False) -> str:
    """A saved result as Markdown: its experiment's `brief` (brief, where it has one), else its `report`, else the
    `table` its command printed. speed / sweep: the prompt x k table and how far the prediction missed (brief: one
    row per k over all prompts, the prediction's score and the schedules); timing: its step costs in one line."""
    doc = read_document(path)
    kind = doc["experiment"]
    experiment = experiment_named(kind)
    script = experiment is not None and experiment.result is None and experiment.name == kind
    doc = doc if script else from_document(doc, str(path))  # a script's result is its plain document
    try:
        for field in ("brief", "report") if brief else ("report",):
            if getattr(experiment, field) is not None:
                return experiment.load(field)(doc)
        return experiment_text(doc)
    except (KeyError, IndexError, TypeError) as e:
        if not script:
            raise
        raise PlaygroundError(f"{path} (a {kind!r} result) lacks what scripts/{experiment.script}'s table needs "
                              f"({type(e).__name__}: {e}); rerun the script with --out") from e


def timing_report(doc: TimingResult) -> str:
    """A saved timing result: its step costs in one line (and its batches' table)."""
    lines = [f"timing \u2014 {_setup_line(doc)}", timing_line(doc)]
    return "\n".join(lines + (["", batch_table(doc.batch, _setup_line(doc))] if doc.batch is not None else []))


def speed_report(doc: SpeedResult) -> str:
    """A saved speed or sweep result in full: the prompt x k table and how far each prediction missed."""
    lines = [f"{doc.experiment} \u2014 {_setup_line(doc)}"]
    if doc.timing:
        lines.append(timing_line(TypeAdapter(TimingRecord).validate_python(doc.timing)))
    split = time_split_line(doc.runs)
    lines += ["", speed_markdown(doc), *(["", split] if split else []), "",
              ("measured - prediction: the calibration's / from the other arms' costs in each round "
               "(\u00b1 the half-width of the cell's median's 90% interval: a miss within it cannot be told "
               "from the runs' noise):"), "", misses_markdown(doc)]
    lines += prediction_lines(doc)
    lines += schedules_lines(doc.schedules)
    if any(r.explained for r in doc.by_prompt or doc.table):
        lines += ["", "why each prediction missed (means over rounds; the parts add up to the miss):", "",
                  explained_markdown(doc)]
    lines += [""] + verdict_lines(doc) if doc.trust else []
    flagged = [f"{n} ({d.spread:.0%})" for n, d in doc.drift.items() if d.flagged]
    if flagged:
        lines.append(f"\nplain speed drifted between rounds beyond the limit on: {', '.join(flagged)}")
    lines += host_level_lines(doc) + trace_lines(doc) + schema_lines(doc)
    return "\n".join(lines)


def speed_brief(doc: SpeedResult) -> str:
    """A grid in a page: the per-k table over all prompts, the best k, how close the predictions came, the
    schedules against the best fixed k, and the verdict (the per-prompt tables are in the full report)."""
    lines = [f"{doc.experiment} \u2014 {_setup_line(doc)}; {doc.rounds} rounds, {len(doc.prompts)} prompt" + "s" * (len(doc.prompts) != 1)]
    if doc.timing:
        lines.append(timing_line(TypeAdapter(TimingRecord).validate_python(doc.timing)))
    lines += ["", "medians over every prompt's rounds:", "", k_table(doc), "", f"best k measured: {doc.best_k}"]
    lines += prediction_lines(doc)
    lines += schedules_lines(doc.schedules) + schema_lines(doc)
    lines += [""] + verdict_lines(doc) if doc.trust else []
    return "\n".join(lines)
