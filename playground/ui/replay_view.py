"""The Replay tab's content (no gradio here): every panel of a replay's result (playground.lab.replay), built
from the `ReplayResult` alone (the request is parsed in replay_request.py).

`replay_figure` draws predicted speed-up against k, one line per output shape with turns (and all tokens), each
labelled in the right margin, the labels placed apart; a star at a shape's recommended k, the overall one drawn as
the sweep chart draws its recommended k. The summary's recommendation (lab.replay.summary) is shown as the sweep's
is (sweep_words.recommendation): never from an untrusted calibration, and never a k predicted slower than plain
decoding. What a schema is worth is replay_schema_view.py's.
"""

from __future__ import annotations

import html
from dataclasses import replace

from ..core.cost import break_even_alpha
from ..core.engine import K_MAX
from ..lab.calibration import Timing
from ..lab.shapes import SHAPES
from ..results.replay import (
    ExpectedWalk,
    LineError,
    ReplayResult,
    ShapeSummary,
    SimulatedIteration,
    SimulatedWalk,
    SkippedWalk,
    TurnError,
    WalkedDrafter,
)
from . import charts
from .charts import Axes, _figure, _hline, _note  # the house chart builders, so this chart looks like the others
from .render import records_html
from .replay_schema_view import schema_html
from .verdicts import glossary_html, verdict_html

SHORT = {"json": "JSON / tool call", "code": "code", "copied": "copied text", "prose": "prose", None: "all tokens"}
COLOURS = {"json": "#4f46e5", "code": "#d97706", "copied": "#16a34a", "prose": "#db2777", None: "#111827"}
LABEL_GAP_PX = 17  # margin labels' centres at least this far apart (a 10 px label is about 15 px tall)
HEIGHT = 360
EMPTY_TOKENS = '<span class="placeholder">Run a replay: a turn\'s tokens show here, coloured by what would have been ' \
               'accepted at the chosen k.</span>'


# --- reading the result ----------------------------------------------------------------------------------------


def _shapes(result: ReplayResult) -> list[tuple[str | None, ShapeSummary]]:
    """(shape, its summary) for the shapes with turns, then (None, all tokens)."""
    summary = result.summary
    out = [(s, summary.shapes[s]) for s in SHAPES if summary.shapes[s].turns]
    return out + [(None, summary.overall)]


def replay_recommendation(shape: ShapeSummary) -> tuple[int | None, str | None]:
    """(recommended k, None) or (None, why not): the summary's, and never a k predicted slower than plain."""
    rec = shape.recommendation
    if rec.recommended_k is None:
        return None, rec.withheld or "no k could be predicted"
    if rec.speedup is not None and rec.speedup < 1.0:
        return None, (f"no k is predicted to beat plain decoding (the best, k = {rec.k}, "
                      f"{rec.speedup:.2f}\u00d7): decode without drafting here, or use a faster drafter")
    return rec.recommended_k, None


def timings(result: ReplayResult, drafter: str) -> list[Timing]:
    return [t for d in result.timings.get(drafter, []) if (t := Timing.from_dict(d)) is not None]


def break_even(timing: Timing, k: int) -> float | None:
    return break_even_alpha(k, timing.c, timing.v, timing.overhead)


def _alpha_text(x: float | None) -> str:
    return "never pays" if x is None else f"{x:.2f}"


def _walk(result: ReplayResult, turn: int, drafter: str | None, arm: str):
    """A turn's walk of one drafter and arm (None where it was not walked)."""
    entry = result.turns[turn].drafters.get(drafter) if drafter is not None else None
    return entry.walks.get(arm) if entry is not None else None


def _iterations(w) -> list[SimulatedIteration]:
    """A walk's simulated iterations, kept whole (--records full: the tab's own replays)."""
    records = w.records if isinstance(w, SimulatedWalk) else None
    return [r for r in records or [] if isinstance(r, SimulatedIteration)]


def pooled_alpha(result: ReplayResult, drafter: str, arm: str) -> float | None:
    """Accepted over evaluated proposals, over every turn's simulated iterations of this arm."""
    acc = ev = 0
    for i in range(len(result.turns)):
        for r in _iterations(_walk(result, i, drafter, arm)):
            acc += r.n_accepted
            ev += r.evaluated
    return acc / ev if ev else None


def estimate_note(result: ReplayResult) -> str | None:
    """Why the figures are estimates (None when every turn replays exactly)."""
    turns = result.turns
    if not result.sampling.startswith("greedy"):
        return ("**Estimates**: a sampling replay gives the expected acceptance along the recorded text "
                "(sum min(p, q) per position), not a run's draws.")
    inexact = [t for t in turns if not t.exact]
    if not inexact:
        return None
    return (f"**Estimates**: {len(inexact)} of {len(turns)} turns are not the target's own greedy output, so their "
            f"figures are how often the drafter agrees with the target on that text, not a run's acceptance (turns "
            f"from presets, which the target wrote, replay exactly).")


# --- the panels ------------------------------------------------------------------------------------------------


def place_labels(labels: list[tuple[float, str, str]], lo: float, hi: float, plot_px: float) -> list[dict]:
    """Margin labels (y, text, colour) at the right of the plot, pushed apart so none overlaps and kept inside
    the plot's height (a crowd at the top is moved down as a block)."""
    items = sorted(labels)
    per_px = (hi - lo) / plot_px if hi > lo else 1.0
    want = [(y - lo) / per_px for y, _, _ in items]
    placed: list[float] = []
    for px in want:
        placed.append(max(px, placed[-1] + LABEL_GAP_PX) if placed else max(px, LABEL_GAP_PX / 2))
    top = plot_px - LABEL_GAP_PX / 2 - 2
    if placed and placed[-1] > top:
        placed[-1] = top
        for i in range(len(placed) - 2, -1, -1):
            placed[i] = min(placed[i], placed[i + 1] - LABEL_GAP_PX)
    return [_note(text, 1.0, y, xanchor="left", yanchor="middle", xshift=6, yshift=p - w,
                  font={"size": 10, "color": colour}, bgcolor="rgba(255,255,255,0)")
            for (y, text, colour), p, w in zip(items, placed, want)]


def replay_figure(result: ReplayResult | None, drafter: str | None = None):
    """Predicted speed-up against k per output shape (see the module docstring)."""
    title = "Predicted speed-up against k, per output shape"
    if result is None or not result.turns:
        return charts.empty_figure(title, "run a replay to fill this chart", height=150)
    drafter = drafter or result.drafters[0]
    if estimate_note(result):
        title += " (estimates)"
    ks, cal = result.ks, timings(result, drafter)
    be = [_alpha_text(break_even(cal[0], k)) if cal else "no calibration" for k in ks]
    data, labels, values, shapes = [], [], [1.0], [_hline(1.0, "#6b7280", width=1.2)]
    for shape, s in _shapes(result):
        row = s.drafters.get(drafter)
        speedup = row.speedup if row is not None else {}
        pts = [(k, speedup.get(f"k={k}"), b) for k, b in zip(ks, be) if speedup.get(f"k={k}")]
        if not pts:
            continue
        colour, name = COLOURS[shape], SHORT[shape]
        overall = shape is None
        data.append({"type": "scatter", "x": [p[0] for p in pts], "y": [p[1] for p in pts], "mode": "lines+markers",
                     "name": name, "customdata": [p[2] for p in pts],
                     "line": {"color": colour, "width": 3 if overall else 1.8, "dash": "solid" if overall else "dot"},
                     "marker": {"size": 7 if overall else 5, "color": colour},
                     "hovertemplate": f"k=%{{x}}<br>{name} ({s.turns} turns): predicted %{{y:.2f}}\u00d7"
                                      f"<br>break-even \u03b1 %{{customdata}}<extra></extra>"})
        values += [p[1] for p in pts]
        k, _ = replay_recommendation(s)
        y = speedup.get(f"k={k}") if k is not None else None
        if y is not None:
            data.append({"type": "scatter", "x": [k], "y": [y], "mode": "markers", "name": f"{name}: recommended",
                         "marker": {"size": 13, "symbol": "star", "color": colour, "line": {"color": "white",
                                                                                           "width": 1}},
                         "hovertemplate": f"{name}: recommended k = {k}, %{{y:.2f}}\u00d7<extra></extra>"})
        labels.append((pts[-1][1], name + (f" k={k}" if y is not None else ""), colour))
    if not data:
        return charts.empty_figure(title, "no calibration: no speed-up could be predicted", height=150)
    lo, hi = 0.0, max(values) * 1.15
    notes = place_labels([*labels, (1.0, "plain decoding", "#4b5563")], lo, hi, HEIGHT - 58 - 40 - 24)
    best, _ = replay_recommendation(result.summary.overall)
    if best is not None:
        shapes.append({"type": "line", "xref": "x", "x0": best, "x1": best, "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": COLOURS[None], "width": 1.3, "dash": "dash"}, "opacity": 0.5})
        notes.append(_note(f"recommended k = {best}", best, 1.0, xref="x", yref="paper", xanchor="center",
                           yanchor="bottom", yshift=2, font={"size": 10.5, "color": COLOURS[None]}))
    else:
        title += " \u2014 no recommended k"
    axes = Axes("k (proposals per iteration)", "predicted speed-up (\u00d7)",
                {"tickvals": ks, "range": [min(ks) - 0.5, max(ks) + 0.5]}, {"range": [lo, hi]})
    return _figure(data, title, axes, height=HEIGHT, shapes=shapes, annotations=notes, showlegend=False,
                   margin={"l": 48, "r": 128, "t": 58, "b": 40})


def _interval(iv) -> str:
    return "\u2013" if not iv else f"{iv[0]:.2f}\u2013{iv[1]:.2f}"


def edge_note(result: ReplayResult) -> str | None:
    """Say so when a recommended k, overall or a shape's, is the largest k replayed (a larger one may be faster),
    naming the shapes and offering the range up to K_MAX; None when no recommendation sits at the edge."""
    top = max(result.ks)
    if top >= K_MAX:
        return None
    at_edge = [SHORT[shape] if shape is not None else "all tokens" for shape, s in _shapes(result)
               if replay_recommendation(s)[0] == top]
    if replay_recommendation(result.summary.overall)[0] == top and "all tokens" not in at_edge:
        at_edge.insert(0, "all tokens")
    if not at_edge:
        return None
    return (f"k = {top} is the largest k replayed and the recommendation for {', '.join(at_edge)}, so a larger k "
            f"may be faster: replay again with k values 1-{K_MAX}.")


def replay_recommendation_html(result: ReplayResult, drafter: str) -> str:
    """The overall recommendation (prominent), the per-shape table, the calibrations' verdicts, what is estimated."""
    o = result.summary.overall
    k, why = replay_recommendation(o)
    rec = o.recommendation
    conf = f"{result.summary.confidence:.0%}"
    estimate = estimate_note(result)
    if k is not None:
        head = (f"\u2713 Recommended k = {k} with {drafter}: predicted {rec.speedup:.2f}\u00d7 over plain decoding "
                f"({conf} interval {_interval(rec.interval)} over {o.turns} turns)"
                + (" \u2014 an estimate" if estimate else ""))
        cls = "ok"
    else:
        best = (f" The best predicted was k = {rec.k} ({rec.speedup:.2f}\u00d7"
                f"{', an estimate' if estimate else ''})." if rec.k is not None else "")
        head, cls = f"\u2717 No recommended k: {why}.{best}", "warn"
    if result.min_confidence is not None:
        head += f" (model drafters stopped below confidence {result.min_confidence:g}, as in a run with that stop)"
    out = [(f'<div class="trust {cls}" id="replay-recommendation" data-recommended="{k if k is not None else ""}">'
           f'<div class="trust-head">{html.escape(head)}</div></div>')]
    rows = [('<div class="whatif-scroll"><table class="whatif-table" data-table="shapes"><thead><tr>'
            '<th class="name">shape</th><th>turns (exact)</th><th>tokens</th><th>best k</th><th>predicted</th>'
            f'<th>{conf} interval</th><th class="name">recommended k</th></tr></thead><tbody>')]
    for shape, s in _shapes(result):
        r = s.drafters.get(drafter)
        sk, swhy = replay_recommendation(s)
        swhy = "the reason above" if swhy == why and shape is not None else swhy
        best_k = "\u2013" if r is None or r.best_k is None else str(r.best_k)
        best = "\u2013" if r is None or r.best_speedup is None else f"{r.best_speedup:.2f}\u00d7"
        verdict = f"<b>k = {sk}</b>" if sk is not None else f"none: {html.escape(swhy)}"
        rows.append(f'<tr data-shape="{shape or "all"}"><th class="name">{html.escape(SHORT[shape])}</th>'
                    f'<td>{s.turns} ({r.exact_turns if r else 0})</td><td>{s.tokens}</td><td>{best_k}</td>'
                    f'<td>{best}</td><td>{_interval(r.interval if r else None)}</td>'
                    f'<td class="name" style="text-align:left;white-space:normal">{verdict}</td></tr>')
    out.append("".join(rows) + "</tbody></table></div>")
    edge = edge_note(result)
    if edge:
        out.append(f'<p class="small-note" id="replay-edge">{html.escape(edge)}</p>')
    if estimate:
        out.append(f"<p class='small-note'>{_md_bold(estimate)}</p>")
    for t in timings(result, drafter):
        out.append(verdict_html(t.trust, f"The {drafter} calibration on {t.context_tokens} tokens of context"))
    if not timings(result, drafter):
        out.append('<div class="trust fail"><div class="trust-head">\u2717 No calibration: no speed-up could be '
                   "predicted</div></div>")
    return "\n".join(out)


def _md_bold(text: str) -> str:
    """Escape, then the one piece of Markdown these notes use: **bold**."""
    parts = html.escape(text).split("**")
    return "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))


def replay_per_k_html(result: ReplayResult, drafter: str) -> str:
    """Per k (and controller): predicted speed-up per shape, the replayed alpha, the break-even alpha."""
    shapes = _shapes(result)
    cal = timings(result, drafter)
    head = ['<th class="name">k</th>'] + [f"<th>{html.escape(SHORT[s])}</th>" for s, _ in shapes]
    head += ['<th title="accepted / evaluated proposals over every turn">replayed \u03b1</th>']
    head += [f'<th title="the acceptance rate at which this k is as fast as plain decoding, from the calibration on '
             f'{t.context_tokens} tokens of context">break-even \u03b1 ({t.context_tokens} tokens)</th>' for t in cal]
    rows = [(f'<div class="whatif-scroll"><table class="whatif-table" data-table="replay-per-k"><thead><tr>'
            f'{"".join(head)}</tr></thead><tbody>')]
    for arm in result.arms:
        k = int(arm[2:]) if arm.startswith("k=") else None
        cells = []
        for _, s in shapes:
            row = s.drafters.get(drafter)
            x = row.speedup.get(arm) if row is not None else None
            cls = "" if x is None else ("lose" if x < 1 else "g1" if x < 1.25 else "g2" if x < 1.5 else "g3")
            cells.append(f'<td class="{cls}">{"–" if x is None else f"{x:.2f}×"}</td>')
        a = pooled_alpha(result, drafter, arm)
        cells.append(f"<td>{'–' if a is None else f'{a:.2f}'}</td>")
        cells += [f"<td>{_alpha_text(break_even(t, k)) if k is not None else '–'}</td>" for t in cal]
        name = f"k = {k}" if k is not None else f"{arm} k"
        rows.append(f'<tr data-arm="{arm}"><th class="name">{name}</th>{"".join(cells)}</tr>')
    rows.append("</tbody></table></div>")
    note = ("<p class='small-note'>Predicted speed-up over plain decoding from the calibration (decode only, prefill "
            "excluded): a shape's is its tokens over the cost they carried, pooled over its turns. Drafting at k pays "
            "where the replayed \u03b1 is above the break-even \u03b1 (the cost model with the calibration's c, v(n) "
            "and cost per call).</p>")
    return "".join(rows) + note + schema_html(result, drafter) + glossary_html([
        "k", "\u03b1 (acceptance rate)", "break-even \u03b1", "speed-up", "calibration"])


def errors_markdown(errors: list[LineError | TurnError]) -> str:
    if not errors:
        return ""
    lines = [f"**{len(errors)} line(s) or turn(s) were not replayed** (the rest was):"]
    for e in errors[:50]:
        lines.append(f"- {html.escape(e.where)}, field `{html.escape(e.field)}`: {html.escape(e.message)}")
    if len(errors) > 50:
        lines.append(f"- \u2026 and {len(errors) - 50} more (in the result JSON)")
    return "\n".join(lines)


def turn_choices(result: ReplayResult) -> list[tuple[str, int]]:
    out = []
    for i, t in enumerate(result.turns):
        tokens = t.shapes.tokens
        main = max(tokens.items(), key=lambda kv: kv[1])[0] if tokens else "?"
        out.append((f"{t.name} \u00b7 {t.completion_tokens} tokens \u00b7 mostly {SHORT.get(main, main)}", i))
    return out


def arm_choices(result: ReplayResult) -> list[tuple[str, str]]:
    return [(f"k = {a[2:]}" if a.startswith("k=") else f"{a} k", a) for a in result.arms]


def default_arm(result: ReplayResult) -> str:
    overall = result.summary.overall
    k, _ = replay_recommendation(overall)
    k = k if k is not None else overall.recommendation.k
    return f"k={k}" if k is not None and f"k={k}" in result.arms else result.arms[0]


def token_view(result: ReplayResult | None, drafter: str | None, turn, arm, tokenizer=None,
               special_ids=()) -> tuple[str, str]:
    """(the turn's note, its token HTML) at one arm: what would have been accepted, corrected, bonus."""
    if result is None or not result.turns:
        return "", EMPTY_TOKENS
    i = turn if isinstance(turn, int) and 0 <= turn < len(result.turns) else 0
    t = result.turns[i]
    arm = arm if arm in result.arms else default_arm(result)
    w = _walk(result, i, drafter, arm)
    label = f"k = {arm[2:]}" if arm.startswith("k=") else f"{arm} k"
    name = html.escape(t.name)
    if w is None or isinstance(w, SkippedWalk):
        return f"**{name}**, {label}: {html.escape(w.skipped if w is not None else 'not replayed')}", ""
    if isinstance(w, ExpectedWalk) or w.records is None:
        return (f"**{name}**, {label}: a sampling replay computes expectations, not iterations: no token view "
                f"(expected tokens per pass and acceptance by position are in the result JSON)"), ""
    speed = "" if w.predicted_speedup is None else f", predicted {w.predicted_speedup:.2f}\u00d7"
    alpha = "" if w.alpha is None else f", \u03b1 = {w.alpha:.2f}"
    runs = ", ".join(f"{a}\u2013{b - 1} {SHORT.get(s, s)}" for a, b, s in t.shapes.runs)
    entry = t.drafters.get(drafter) if drafter is not None else None
    exact = ("exact: the target's own greedy output" if entry is not None and entry.exact
             else f"an estimate: {t.estimate_reason or 'see the result JSON'}")
    note = (f"**{name}**, {label}: {w.new_tokens} tokens in {w.iterations} target passes "
            f"({w.tokens_per_pass:.2f} per pass){alpha}{speed} \u00b7 {html.escape(exact)} \u00b7 tokens "
            f"{html.escape(runs)} \u00b7 <span class='small-note'>{html.escape(result.records_note)}</span>")
    return note, records_html(_iterations(w), tokenizer, greedy=True, special_ids=special_ids)


def public_doc(result: ReplayResult) -> dict:
    """The result for the JSON panel and the API: every figure, without the per-iteration records (the token view
    reads those from the tab's state)."""
    def bare(entry):
        if not isinstance(entry, WalkedDrafter):
            return entry
        return replace(entry, walks={a: replace(w, records=None) if isinstance(w, SimulatedWalk) else w
                                     for a, w in entry.walks.items()})

    turns = [replace(t, drafters={d: bare(e) for d, e in t.drafters.items()}) for t in result.turns]
    return {**replace(result, turns=turns).to_dict(),
            "records_left_out": "per-iteration records are left out here; the tab's token view shows them"}
