"""The Run tab's panels' content, as HTML and Markdown strings (and the run's charts), built from records, summaries
and the session; no gradio here. Every piece of text from a model, a preset or a user is escaped. The trust
verdicts, the prediction panel and the sweep's summary are in verdicts.py."""

from __future__ import annotations

import html
from dataclasses import dataclass

import plotly.graph_objects as go

from ..core.records import Iteration, describe_choices, prefill_note
from ..core.timesplit import BUCKETS, TimeSplit, percent
from ..pairs.registry import PAIRS
from . import charts
from .serving import PairProvider, menu_value
from .session import RunRequest, stop_text

READY = "Ready: press **Run**."
STATUS_CHARS = 120  # a status line's visible words; the rest opens from "more"
FOLD_AT = (" \u00b7 ", " \u2014 ", ". ", "; ", " (", ": ", ", ", " ")  # where a long line is cut, the best first


def fold(line, limit: int = STATUS_CHARS):
    """A status line of at most `limit` visible characters: a longer one keeps its first part, cut after a whole
    part (at ' · ', then ' — ', '; ', ...; never inside brackets or a bold span), and puts the rest in a "more"
    fold that opens on a tap or a click (its text is also the fold's hover title). Anything but a string (a
    gr.skip) is returned as it is."""
    if not isinstance(line, str) or len(line) <= limit or "<details" in line:
        return line
    head = line[:limit - 6]
    cut = next((c for sep in FOLD_AT for c in _cuts(head, sep, limit // 3)), None)
    if cut is None:  # no separator outside brackets: before the bracket (or bold span) still open at the limit
        cut = _opened(head)
    if not cut:
        return line
    rest = line[cut:].lstrip(" \u00b7;:,")
    rest = rest.removeprefix("\u2014 ")
    return (f"{line[:cut]} <details class='status-more' title='{html.escape(rest, quote=True)}'>"
            f"<summary>more</summary>{rest}</details>")


def _cuts(head: str, sep: str, least: int):
    """Where `head` may be cut at `sep`, the last first: past `least` and outside every bracket and bold span."""
    at = head.rfind(sep)
    while at >= least:
        cut = at + (sep == ". ")  # a sentence keeps its full stop
        if _opened(head[:cut]) == cut:
            yield cut
        at = head.rfind(sep, 0, at)


def _opened(text: str) -> int:
    """Where the first bracket or bold span still open at the end of `text` opens (len(text) when none is)."""
    opened: list[int] = []
    bold = None
    for i, ch in enumerate(text):
        if text.startswith("**", i) and (i == 0 or text[i - 1] != "*"):
            bold = i if bold is None else None
        elif ch in "([{":
            opened.append(i)
        elif ch in ")]}" and opened:
            opened.pop()
    return min([*opened[:1], *([bold] if bold is not None else []), len(text)])


def pair_info(provider: PairProvider) -> str:
    """One line under the pair menu: what the chosen pair is, where it runs, and whether it is loaded yet."""
    if provider.fixed:
        p = provider.get()
        return (f"<span class='small-note'>`{html.escape(p.target_name)}` + "
                f"`{html.escape(p.draft_name or 'no draft model')}` \u00b7 device `{html.escape(provider.device)}` "
                f"\u00b7 loaded</span>")
    choice = provider.choice
    named = PAIRS.get(menu_value(choice))
    note = named.note if named is not None else "a custom pair"
    state = "loaded" if provider.loaded() else "loads on the first run (hub models download once)"
    return (f"<span class='small-note'>`{html.escape(choice.target)}` + "
            f"`{html.escape(choice.draft or 'no draft model')}` \u00b7 device `{html.escape(choice.device)}`, dtype "
            f"`{html.escape(choice.dtype)}` \u00b7 {html.escape(note)} \u00b7 {state}</span>")


def k_text(req: RunRequest, summary=None) -> str:
    """'4', or 'adaptive (chosen: 2x3 16x5)' once a run says which k it used; with a confidence stop, which."""
    stop = f", {stop_text(req.min_confidence)}" if req.min_confidence is not None else ""
    if req.k_mode == "fixed":
        return f"{req.k}{stop}"
    if summary is None or not summary.k_values:
        return f"{req.k_mode}{stop}"
    return f"{req.k_mode} (chosen: {describe_choices(summary.k_values, summary.drafted_values)}){stop}"


def constraint_text(run, summary=None) -> str:
    """'' for an unconstrained run; ', constrained to <schema>' while it runs; with its summary, how many of its
    tokens the schema forced."""
    if run.constraint is None:
        return ""
    if summary is None:
        return f", constrained to {run.constraint.name}"
    return (f" \u00b7 constrained to {run.constraint.name}: the schema forced {summary.roles.get('forced', 0)} of "
            f"{summary.new_tokens} tokens")


@dataclass(frozen=True)
class RunFigures:
    """The Run tab's three charts (plotly figures)."""

    time: go.Figure  # where each iteration's time went
    positions: go.Figure  # acceptance by position
    alpha: go.Figure  # acceptance per iteration


def figures(records, summary) -> RunFigures:
    """The Run tab's three charts, drawn from a run's records and summary."""
    its = [r for r in records if isinstance(r, Iteration)]
    return RunFigures(time=charts.time_split_figure(its), positions=charts.acceptance_by_position_figure(summary),
                      alpha=charts.alpha_figure(its))


def cards_html(cards, state: str) -> str:
    """A row of counter cards: (key, label, value, tip) each; `state` is "running" or "done"."""
    return "".join([f'<div class="counters {state}">', *(
        f'<div class="counter" data-counter="{key}" title="{html.escape(tip, quote=True)}">'
        f'<div class="value">{html.escape(value)}</div><div class="label">{html.escape(label)}</div></div>'
        for key, label, value, tip in cards), "</div>"])


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
    out = [cards_html(cards, "running" if running else "done")]
    split = time_split_html(s)
    if split:
        out.append(split)
    if s is not None and s.prefill_s:
        note = html.escape(prefill_note(s))
        out.append(f'<div class="counters-note">prefill {s.prefill_s:.2f} s ({s.prompt_tokens} prompt tokens'
                   f"{'; ' + note if note else ''}), not counted in tokens/s</div>")
    return "".join(out)


SPLIT_HELP = dict(zip(BUCKETS, (  # the time split's buckets, in core.timesplit's order: draft, verify, ...
    "proposing: the drafter's calls, and choosing k",
    "the target's verification passes and the acceptance rule",
    "cutting both caches back to the accepted tokens",
    ("decode time in none of the three: the loop's own bookkeeping, and what streaming to this page "
     "costs the run (the rendering shares the cores with it)"),
), strict=True))


def time_split_html(summary) -> str:
    """Where the decode time went: draft / verify / rollback / outside the three, each in seconds and as a
    share of the decode time ('' before the first iteration, and for a plain run)."""
    if summary is None or summary.mode != "speculative" or not summary.decode_s:
        return ""
    split = TimeSplit.from_summary(summary)
    shares = split.shares()
    parts = [f'<span class="split" data-bucket="{name}" title="{html.escape(SPLIT_HELP[name], quote=True)}">'
             f"{name} {seconds:.2f} s ({percent(shares[name])})</span>" for name, seconds in split.seconds().items()]
    return '<div class="counters-note time-split">decode time: ' + " \u00b7 ".join(parts) + "</div>"


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
