"""Plotly figures of a run and of a k sweep, from the records and the lab's result dicts.

Every function returns a plotly `Figure` (no gradio here). `empty_figure` is what each `gr.Plot` shows
before its first update, so plotly.js is loaded by the time a run streams its first chart.

Figures are built as one dict and turned into a Figure in a single constructor call, with no plotly
template: plotly's incremental update methods and its templates cost tens of milliseconds per figure,
and charts are rebuilt while a run streams, on the same CPU (and GIL) the run is being timed on. For the
same reason the constructor skips plotly's property validation (three times the cost of everything else),
on a spec written as validation would leave it (no None-valued property, no empty shapes or annotations,
the "none" template resolved), so what reaches the browser is the JSON a validated figure gives
(tests/test_overhead.py checks every chart against its validated copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio

from ..core.records import Iteration, RunSummary
from ..core.timesplit import BUCKETS
from ..results.calibration import WhatifResult
from ..results.speed import SweepResult
from .sweep_words import PREDICTIONS, recommendation


@dataclass(frozen=True)
class Palette:
    """The charts' colours, one per thing drawn (the time split's buckets, accepted tokens, the measured line and
    the predictions)."""

    draft: str = "#6366f1"  # indigo
    verify: str = "#f59e0b"  # amber
    rollback: str = "#ef4444"  # red
    accepted: str = "#16a34a"
    measured: str = "#0f766e"
    iid: str = "#6366f1"
    empirical: str = "#db2777"
    local: str = "#ca8a04"  # the per-position prediction at the loop's costs (lab.fit.predict_from_neighbours)


COLOURS = Palette()
HEIGHT = 260
EMPTY_HEIGHT = 110
LABEL_PX = 15  # the height of a margin label: two labels closer than this are pushed apart
BATCH_COLOURS = {1: "#0284c7", 4: "#d97706", 8: "#be123c"}  # the sweep's predicted lines at batch B
MAX_BARS = 200  # iterations drawn in the time-split chart (the latest ones); beyond that bars are unreadable


def _axis(title: str, **extra) -> dict:
    axis = {"title": {"text": title, "font": {"size": 11, "color": "#4b5563"}}, "gridcolor": "#eef0f3",
            "zeroline": False, "linecolor": "#d1d5db", "showline": True, "ticks": "outside", "tickcolor": "#d1d5db",
            "ticklen": 3, "automargin": True}
    axis.update(extra)
    return axis


_NO_TEMPLATE = pio.templates["none"].to_plotly_json()  # what validation makes of template="none"


def _as_validated(x):
    """A spec as plotly's validation leaves it: a property set to None is no property at all."""
    if isinstance(x, dict):
        return {k: _as_validated(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (dict, list, tuple)):
        return [_as_validated(v) for v in x]
    return x


@dataclass(frozen=True)
class Axes:
    """A chart's axis titles, and what each axis sets beyond the house style (`_axis`)."""

    x: str
    y: str
    xaxis: dict | None = None
    yaxis: dict | None = None


def _figure(data: list, title: str, axes: Axes, height: int = HEIGHT, shapes=(), annotations=(),
            **layout) -> go.Figure:
    spec_layout = {
        "template": _NO_TEMPLATE,
        "title": {"text": title, "x": 0.0, "xanchor": "left", "y": 0.97, "yanchor": "top",
                  "font": {"size": 12.5, "color": "#111827"}},
        "height": height,
        "margin": {"l": 44, "r": 10, "t": 52, "b": 38},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": {"size": 11, "color": "#374151", "family": "Inter, system-ui, sans-serif"},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1.0,
                   "font": {"size": 10}, "bgcolor": "rgba(0,0,0,0)"},
        "hoverlabel": {"font": {"size": 11}},
        "xaxis": _axis(axes.x, **(axes.xaxis or {})),
        "yaxis": _axis(axes.y, **(axes.yaxis or {})),
    }
    if shapes:
        spec_layout["shapes"] = list(shapes)
    if annotations:
        spec_layout["annotations"] = list(annotations)
    spec_layout.update(layout)
    if spec_layout.get("template") == "none":
        spec_layout["template"] = _NO_TEMPLATE
    return go.Figure(_as_validated({"data": data, "layout": spec_layout}), _validate=False)


def _hline(y: float, colour: str, dash: str = "dot", width: float = 1.0) -> dict:
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
            "line": {"color": colour, "dash": dash, "width": width}}


def _note(text: str, x, y, xref="paper", yref="y", **extra) -> dict:
    note = {"text": text, "x": x, "y": y, "xref": xref, "yref": yref, "showarrow": False,
            "font": {"size": 10, "color": "#374151"}, "bgcolor": "rgba(255,255,255,0.85)"}
    note.update(extra)
    return note


def _integer_ticks(x: Sequence[int]) -> dict:
    """Whole-number ticks (iterations), about ten of them at most."""
    span = (max(x) - min(x)) if x else 0
    return {"tick0": 1, "dtick": max(1, -(-span // 10))}


def empty_figure(title: str, message: str = "no data yet", height: int = EMPTY_HEIGHT) -> go.Figure:
    return _figure([], title, Axes("", "", {"visible": False}, {"visible": False}), height=height,
                   margin={"l": 10, "r": 10, "t": 30, "b": 10},
                   annotations=[_note(message, 0.5, 0.4, yref="paper", font={"size": 11.5, "color": "#9ca3af"})])


def time_split_figure(iterations: Sequence[Iteration]) -> go.Figure:
    """Drafting / verification / rollback per iteration, as stacked bars (milliseconds)."""
    title = "Time per iteration (ms)"
    if not iterations:
        return empty_figure(title)
    shown = list(iterations)[-MAX_BARS:]
    x = [it.index + 1 for it in shown]
    timed = BUCKETS[:3]  # the buckets an iteration times (draft, verify, rollback; `outside` is the run's rest)
    data = [
        {"type": "bar", "x": x, "y": [1000 * getattr(it, f"{name}_s") for it in shown], "name": name,
         "marker": {"color": getattr(COLOURS, name)},
         "hovertemplate": f"iteration %{{x}}<br>{name} %{{y:.1f}} ms<extra></extra>"}
        for name in timed
    ]
    if len(shown) < len(iterations):
        title += f" \u2014 last {len(shown)} of {len(iterations)}"
    return _figure(data, title, Axes("iteration", "ms", _integer_ticks(x)), height=230, barmode="stack",
                   bargap=0.15)


def acceptance_by_position_figure(summary: RunSummary | None) -> go.Figure:
    """P(proposal i accepted | proposals 1..i-1 accepted), with how often each position was reached."""
    title = "Acceptance by draft position"
    if summary is None or not summary.per_position_acceptance:
        return empty_figure(title, "no proposals yet")
    rates = summary.per_position_acceptance
    reached = list(summary.per_position_reached)
    x = list(range(1, len(rates) + 1))
    data = [{"type": "bar", "x": x, "y": list(rates), "name": "P(accept | reached)",  # None: never reached, no bar
             "marker": {"color": COLOURS.accepted}, "customdata": reached,
             "text": [f"n={n}" if n else "not reached" for n in reached], "textposition": "outside",
             "textfont": {"size": 9},
             "cliponaxis": False,
             "hovertemplate": "position %{x}<br>accepted %{y:.2f} of the %{customdata} times reached<extra></extra>"}]
    shapes, notes = [], []
    if summary.alpha is not None:
        shapes.append(_hline(summary.alpha, "#374151"))
        notes.append(_note(f"\u03b1 = {summary.alpha:.2f}", 1.0, summary.alpha, xanchor="right", yanchor="top"))
    return _figure(data, title, Axes("draft position", "acceptance", {"dtick": 1}, {"range": [0, 1.18]}),
                   shapes=shapes, annotations=notes, showlegend=False)


def alpha_figure(iterations: Sequence[Iteration]) -> go.Figure:
    """Running alpha (accepted / evaluated so far) over iterations, with each iteration's own rate."""
    title = "\u03b1 over iterations"
    drafting = [it for it in iterations if it.proposed]
    if not drafting:
        return empty_figure(title, "no proposals yet")
    x, running, own = [], [], []
    acc = ev = 0
    for it in drafting:
        acc += it.n_accepted
        ev += it.evaluated
        x.append(it.index + 1)
        running.append(acc / ev)
        own.append(it.n_accepted / it.evaluated)
    data = [
        {"type": "scatter", "x": x, "y": own, "mode": "markers", "name": "this iteration",
         "marker": {"size": 5, "color": "#9ca3af"},
         "hovertemplate": "iteration %{x}<br>accepted / evaluated %{y:.2f}<extra></extra>"},
        {"type": "scatter", "x": x, "y": running, "mode": "lines", "name": "running \u03b1",
         "line": {"color": COLOURS.accepted, "width": 2.5},
         "hovertemplate": "iteration %{x}<br>running \u03b1 %{y:.3f}<extra></extra>"},
    ]
    return _figure(data, title, Axes("iteration", "\u03b1", _integer_ticks(x), {"range": [-0.05, 1.05]}))


def _spread_labels(labels: list[tuple[float, str, str]], lo: float, hi: float, plot_px: float) -> list[dict]:
    """Margin labels (y, text, colour) at the right of the plot, pushed apart vertically so none overlaps."""
    per_px = (hi - lo) / plot_px if hi > lo else 0.0
    notes, last_px = [], None
    for y, text, colour in sorted(labels):
        px = (y - lo) / per_px if per_px else 0.0
        shift = 0.0
        if last_px is not None and px - last_px < LABEL_PX:
            shift = last_px + LABEL_PX - px
        last_px = px + shift
        notes.append(_note(text, 1.0, y, xanchor="left", yanchor="middle", xshift=6, yshift=shift,
                           font={"size": 10, "color": colour}, bgcolor="rgba(255,255,255,0)"))
    return notes


def sweep_figure(result: SweepResult | None, batch: dict[int, dict[int, float]] | None = None) -> go.Figure:
    """Measured (median, min-max bars) and predicted speed-up against k, the break-even line, adaptive k's
    measured speed-up, and the recommended k (none when the trust verdict failed, or no k beat plain).
    `batch`: {B: {k: predicted speed-up}} (ui/batching.py), drawn as one labelled line per batch size."""
    title = "Speed-up over plain decoding against k"
    if not result or not result.table:
        return empty_figure(title, "run a sweep to fill this chart", height=150)
    rows = [r for r in result.table if isinstance(r.k, int)]  # fixed k; a schedule is a line across
    schedules = [r for r in result.table if not isinstance(r.k, int)]
    ks = [r.k for r in rows]
    data = [{
        "type": "scatter", "x": ks, "y": [r.median_ratio for r in rows], "mode": "lines+markers",
        "name": "measured (median)", "line": {"color": COLOURS.measured, "width": 2.5}, "marker": {"size": 8},
        "error_y": {"type": "data", "symmetric": False, "array": [r.max_ratio - r.median_ratio for r in rows],
                    "arrayminus": [r.median_ratio - r.min_ratio for r in rows], "thickness": 1.2, "width": 4,
                    "color": COLOURS.measured},
        "hovertemplate": "k=%{x}<br>measured %{y:.2f}\u00d7<extra></extra>",
    }]
    # The predictions are often within a few percent of each other: drawn a little apart, in different
    # dashes and markers, so each stays visible (the hover text gives the k each point belongs to).
    for curve, colour, dash, symbol, dx in (("iid \u03b1", COLOURS.iid, "dot", "circle-open", -0.12),
                                             ("per position", COLOURS.empirical, "dash", "diamond", 0.12),
                                             ("loop costs", COLOURS.local, "longdash", "square-open", 0.24)):
        name, predicted = f"predicted ({curve})", PREDICTIONS[curve]
        pts = [(r.k, predicted(r)) for r in rows if predicted(r) is not None]
        if pts:
            data.append({"type": "scatter", "x": [p[0] + dx for p in pts], "y": [p[1] for p in pts],
                         "customdata": [p[0] for p in pts], "mode": "lines+markers", "name": name,
                         "marker": {"size": 7, "symbol": symbol, "color": colour},
                         "line": {"color": colour, "dash": dash, "width": 1.6},
                         "hovertemplate": f"k=%{{customdata}}<br>{name} %{{y:.2f}}\u00d7<extra></extra>"})
    labels = [(1.0, "break-even", "#4b5563")]
    shapes = [_hline(1.0, "#6b7280", width=1.2)]
    for r in schedules:  # adaptive k: one measured figure, whatever k it chose per iteration
        y = r.median_ratio
        data.append({"type": "scatter", "x": [min(ks) - 0.35, max(ks) + 0.35] if ks else [0, 1], "y": [y, y],
                     "mode": "lines", "name": f"{r.k} k, measured ({y:.2f}\u00d7)",
                     "line": {"color": "#9333ea", "width": 1.5, "dash": "dashdot"},
                     "hovertemplate": f"{r.k} k: measured %{{y:.2f}}\u00d7<extra></extra>"})
        labels.append((y, f"{r.k} {y:.2f}\u00d7", "#9333ea"))
    for b, by_k in sorted((batch or {}).items()):
        pts = sorted((k, y) for k, y in by_k.items() if k in ks)
        if not pts:
            continue
        colour = BATCH_COLOURS.get(b, "#64748b")
        data.append({"type": "scatter", "x": [p[0] for p in pts], "y": [p[1] for p in pts], "mode": "lines+markers",
                     "name": f"predicted at batch {b}", "showlegend": False, "marker": {"size": 4, "color": colour},
                     "line": {"color": colour, "dash": "dot", "width": 1.4},
                     "hovertemplate": f"k=%{{x}}<br>predicted at batch {b}: %{{y:.2f}}\u00d7<extra></extra>"})
        labels.append((pts[-1][1], f"batch {b}", colour))
    values = [1.0] + [r.median_ratio for r in schedules] + [r.max_ratio for r in rows] + \
        [r.min_ratio for r in rows] + [predicted(r) for r in rows for predicted in PREDICTIONS.values()] + \
        [y for by_k in (batch or {}).values() for y in by_k.values()]
    values = [v for v in values if v is not None]
    lo, hi = min(0.0, min(values)), max(values) * 1.12
    height = 360
    notes = _spread_labels(labels, lo, hi, height - 150)
    best, _ = recommendation(result)
    if best is not None:
        shapes.append({"type": "line", "xref": "x", "x0": best, "x1": best, "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": COLOURS.measured, "width": 1.5, "dash": "dash"}, "opacity": 0.6})
        notes.append(_note(f"recommended k = {best}", best, 1.0, xref="x", yref="paper", xanchor="center",
                           yanchor="bottom", yshift=2, font={"size": 10.5, "color": COLOURS.measured}))
    else:
        title += " \u2014 no recommended k (see the verdict)"
    axes = Axes("k (proposals per iteration)", "speed-up (\u00d7)",
                {"dtick": 1, "range": [min(ks) - 0.5, max(ks) + 0.5] if ks else None}, {"range": [lo, hi]})
    return _figure(data, title, axes, height=height, shapes=shapes, annotations=notes,
                   margin={"l": 48, "r": 104, "t": 58, "b": 40},
                   legend={"orientation": "h", "yanchor": "top", "y": -0.22, "xanchor": "left", "x": 0.0,
                           "font": {"size": 10}, "bgcolor": "rgba(0,0,0,0)"})


@dataclass(frozen=True)
class RunPoint:
    """Where the tab's last run sits on the what-if chart: its k, its alpha, the speed-up predicted there with the
    chart's costs, and its Compare's measured one (None without a Compare)."""

    k: int
    alpha: float
    predicted: float
    measured: float | None = None


def whatif_figure(result: WhatifResult, mark: RunPoint | None = None) -> go.Figure:
    """The what-if's predicted speed-up against k (lab.whatif's rows), the break-even line, the best k, and
    where the tab's last run sits (`mark`, at the run's own alpha)."""
    rows = result.rows
    ks, ys = [r.k for r in rows], [r.speedup for r in rows]
    iid = result.alpha is not None
    name = f"predicted, iid \u03b1 = {result.alpha:.2f}" if iid else "predicted, per-position acceptance"
    never = ["never pays" if r.break_even_alpha is None else f"{r.break_even_alpha:.2f}" for r in rows]
    colour = COLOURS.iid if iid else COLOURS.empirical
    data = [{"type": "scatter", "x": ks, "y": ys, "mode": "lines+markers", "name": name, "customdata": never,
             "line": {"color": colour, "width": 2.2}, "marker": {"size": 6, "color": colour},
             "hovertemplate": "k=%{x}<br>predicted %{y:.2f}\u00d7<br>break-even \u03b1 %{customdata}<extra></extra>"}]
    values = [1.0, *ys]
    if mark is not None:
        data.append({"type": "scatter", "x": [mark.k], "y": [mark.predicted], "mode": "markers",
                     "name": f"your last run (\u03b1 = {mark.alpha:.2f}, k = {mark.k}), predicted",
                     "marker": {"size": 13, "symbol": "star", "color": "#f59e0b", "line": {"color": "#78350f",
                                                                                           "width": 1}},
                     "hovertemplate": "your last run, k=%{x}<br>predicted %{y:.2f}\u00d7 with these costs"
                                      "<extra></extra>"})
        values.append(mark.predicted)
        if mark.measured:
            data.append({"type": "scatter", "x": [mark.k], "y": [mark.measured], "mode": "markers",
                         "name": "your last run, measured (Compare)",
                         "marker": {"size": 10, "symbol": "diamond", "color": COLOURS.measured},
                         "hovertemplate": "your last run, k=%{x}<br>measured %{y:.2f}\u00d7<extra></extra>"})
            values.append(mark.measured)
    lo, hi = min(0.0, min(values)), max(values) * 1.15
    height = 330
    shapes = [_hline(1.0, "#6b7280", width=1.2)]
    notes = _spread_labels([(1.0, "break-even", "#4b5563")], lo, hi, height - 140)
    title = "What if: predicted speed-up against k"
    if result.best_k:
        best = result.best_k
        shapes.append({"type": "line", "xref": "x", "x0": best, "x1": best, "yref": "paper", "y0": 0, "y1": 1,
                       "line": {"color": colour, "width": 1.3, "dash": "dash"}, "opacity": 0.6})
        notes.append(_note(f"best k = {best} ({result.best_speedup:.2f}\u00d7)", best, 1.0, xref="x", yref="paper",
                           xanchor="center", yanchor="bottom", yshift=2, font={"size": 10.5, "color": colour}))
    else:
        title += " \u2014 no k pays"
    axes = Axes("k (proposals per iteration)", "predicted speed-up (\u00d7)",
                {"dtick": 1, "range": [min(ks) - 0.6, max(ks) + 0.6]}, {"range": [lo, hi]})
    return _figure(data, title, axes, height=height, shapes=shapes, annotations=notes, margin={"l": 48, "r": 92, "t": 58, "b": 40},
                   legend={"orientation": "h", "yanchor": "top", "y": -0.24, "xanchor": "left", "x": 0.0,
                           "font": {"size": 10}, "bgcolor": "rgba(0,0,0,0)"})
