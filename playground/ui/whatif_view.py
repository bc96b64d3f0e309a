"""The What-if tab's content (no gradio here): the cost model's predictions for numbers typed in, no model run.

`parse_inputs` only parses the panel's raw values (the range checks are the library's: alpha in [0, 1], c >= 0,
v(n) as 'n:cost'); `whatif_view` lays out every number the tab shows from one `lab.whatif.whatif()` call (the
chart, the per-k table, the best k, the map of predicted speed-up over alpha x k with the tab's last run marked);
`prefill` fills the panel from the tab's last calibration and run, each once when it is new. Nothing is computed
here but layout.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from ..errors import PlaygroundError
from ..lab.calibration import Timing
from ..lab.whatif import ALPHAS, parse_v, whatif
from ..results.calibration import WhatifResult
from . import charts
from .batching import sweep_timing
from .charts import RunPoint
from .form import Widget
from .markup import fold
from .session import Session, _number, run_timing
from .verdicts import GLOSSARY, Pricing, context_label, pricing

if TYPE_CHECKING:
    import plotly.graph_objects as go

MODES = {"iid": "iid \u03b1", "positions": "per position"}


@dataclass(frozen=True)
class WhatifInputs:
    """The panel's inputs as typed (any of them may be what the user typed: text, None, out of range), in the
    order the events take them."""

    acceptance: Widget = "iid"  # "iid" or "positions"
    alpha: Widget = 0.85
    positions: Widget = "0.95, 0.9, 0.85, 0.8"
    c: Widget = 0.38
    overhead: Widget = 0.0
    v: Widget = "flat"


@dataclass(frozen=True)
class WhatifQuestion:
    """The inputs parsed: lab.whatif.whatif's arguments (either `alpha` or `positions`)."""

    c: float
    overhead: float
    v: dict[int, float] | None
    alpha: float | None = None
    positions: list[float] | None = None


# A cheap draft (c = 0.38, every pass one target step): 1.47x at alpha = 0.85, k = 4.
DEFAULTS = WhatifInputs()
FIELDS = tuple(f.name for f in fields(WhatifInputs))
START_NOTE = ("Starts from an example cheap draft (c = 0.38, flat v(n), \u03b1 = 0.85): after a "
              "**Calibrate** or a **Run** this tab fills in its own numbers when you open it.")
SEP = " \u00b7 "
STALE = "the chart and the tables still show the last inputs that worked"


@dataclass(frozen=True)
class RunMark:
    """Where the tab's last finished run sits: its alpha, its k (None when k was chosen per iteration)."""

    alpha: float
    k: int | None
    positions: tuple[float, ...]
    measured: float | None  # its Compare's measured speed-up, if any
    drafter: str
    priced: Pricing  # the kind of prediction its drafter gets (verdicts.pricing): a hybrid has no model


@dataclass
class WhatifView:
    status: str
    figure: go.Figure
    table: str  # HTML: per k
    grid: str  # HTML: alpha x k
    doc: WhatifResult  # lab.whatif.whatif's result


def run_mark(session: Session | None, store=None) -> RunMark | None:
    """The tab's last finished run, priced under the calibration behind it (the pair's `store` or the tab's)."""
    run = session.run if session is not None else None
    if run is None or not run.finished or run.summary is None or run.summary.alpha is None:
        return None
    positions = []
    for a in run.summary.per_position_acceptance:  # up to the first position never reached
        if a is None:
            break
        positions.append(a)
    k = run.request.k if run.request.k_mode == "fixed" else None
    return RunMark(run.summary.alpha, k, tuple(positions), run.measured_speedup, run.drafter,
                   pricing(run.request.drafter, run_timing(session, store), run))


# --- the inputs ---------------------------------------------------------------------------------------------


def parse_positions(text) -> list[float]:
    """'0.95, 0.9 0.8' -> [0.95, 0.9, 0.8] (the library checks each is in [0, 1])."""
    example = "a list like '0.95, 0.9, 0.8' (P(accept) at draft positions 1, 2, 3, ...)"
    parts = [p for p in re.split(r"[,;\s]+", text if isinstance(text, str) else "") if p]
    if not parts:
        raise PlaygroundError(f"per-position acceptance is {example}; the box is empty")
    try:
        return [float(p) for p in parts]
    except ValueError:
        bad = next(p for p in parts if not _is_float(p))
        raise PlaygroundError(f"per-position acceptance is {example}, got {bad[:20]!r}") from None


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_verify(text) -> dict[int, float] | None:
    """The v(n) box through the library's parser ('flat', or '1:1.0,2:1.05,4:1.6'), every cost finite."""
    if text is not None and not isinstance(text, str):
        raise PlaygroundError(f"v(n) is 'flat' or a list like '1:1.0,2:1.05,4:1.6', got {text!r}")
    v = parse_v(text)
    if v is not None and not all(math.isfinite(x) for x in v.values()):
        raise PlaygroundError("v(n) needs a finite cost for every pass length")
    return v


def parse_inputs(values: WhatifInputs) -> WhatifQuestion:
    """The panel's values -> the arguments of lab.whatif.whatif."""
    mode = values.acceptance or "iid"
    if mode not in MODES:
        raise PlaygroundError(f"acceptance must be one of {', '.join(MODES)}, got {mode!r}")
    c = _number(values.c, "the draft cost ratio c")
    overhead = _number(values.overhead, "the drafter's cost per call")
    v = parse_verify(values.v)
    if mode == "iid":
        return WhatifQuestion(c, overhead, v, alpha=_number(values.alpha, "\u03b1"))
    return WhatifQuestion(c, overhead, v, positions=parse_positions(values.positions))


# --- the view -----------------------------------------------------------------------------------------------


SAME = 5e-4  # two alphas closer than this share a row of the map (the panel takes a run's alpha to 3 decimals)


def _row_of(alphas, a: float | None) -> float | None:
    """The map's row for alpha `a`: the one within SAME of it (None when there is none, or no `a`)."""
    return next((b for b in alphas if a is not None and abs(a - b) < SAME), None)


def _grid_alphas(alpha: float | None, mark: RunMark | None) -> list[float]:
    """The seed's alphas, plus the what-if alpha and the last run's alpha as rows of their own (one row when
    they are the same to 3 decimals: the what-if's, so that the row and the chart agree)."""
    out = list(ALPHAS)
    for a in (alpha, mark.alpha if mark is not None else None):
        if a is not None and 0.0 <= a <= 1.0 and _row_of(out, a) is None:
            out.append(a)
    return sorted(out)


def whatif_view(session: Session | None, values: WhatifInputs, store=None) -> WhatifView:
    """Everything the tab shows for these inputs (raises PlaygroundError with what to fix); `store`: the pair's
    calibrations, which price the last run.

    An alpha typed outside [0, 1] gets the library's message; the slider then moves to its bound (Gradio clamps
    it) and the next view, at that bound, keeps the message and says where the slider went."""
    q = parse_inputs(values)
    mark = run_mark(session, store)
    alpha = q.alpha
    try:
        result = whatif(q.c, alpha=q.alpha, positions=q.positions, v=q.v, overhead=q.overhead,
                        alphas=_grid_alphas(alpha, mark))
    except PlaygroundError as e:
        if session is not None and alpha is not None and not 0.0 <= alpha <= 1.0:
            session.whatif_refused = (str(e), min(max(alpha, 0.0), 1.0))
        raise
    except ValueError as e:  # core.cost's own checks, in words already
        raise PlaygroundError(str(e)) from None
    refused = session.whatif_refused if session is not None else None
    if session is not None:
        session.whatif_refused = None
    point = None
    if mark is not None and mark.k is not None and mark.k in result.ks and mark.priced.single_c:
        at = _row_of([g.alpha for g in result.grid], mark.alpha)
        row = next(g for g in result.grid if g.alpha == at)
        point = RunPoint(k=mark.k, alpha=mark.alpha, predicted=row.speedups[mark.k], measured=mark.measured)
    status = _status(result, mark, point)
    if refused is not None and alpha == refused[1]:
        status = f"\u26a0 {html.escape(refused[0])}: the slider moved to {alpha:g}, and these numbers are for it. {status}"
    return WhatifView(fold(status), charts.whatif_figure(result, point), per_k_html(result, mark),
                      grid_html(result, mark), result)


def describe_inputs(result: WhatifResult) -> str:
    what = (f"iid \u03b1 = {result.alpha:.2f}" if result.alpha is not None
            else "per-position acceptance " + ", ".join(f"{a:.2f}" for a in result.positions))
    v = "flat" if result.v is None else f"from {len(result.v)} pass lengths"
    return f"{what}; c = {result.c:.3f}, cost per call {result.overhead:.3f}, v(n) {v}"


def _status(result: WhatifResult, mark: RunMark | None, point: RunPoint | None) -> str:
    if result.best_k:
        head = f"**Best k = {result.best_k}**: predicted {result.best_speedup:.2f}\u00d7"
    else:
        best = max(result.rows, key=lambda r: r.speedup)
        head = (f"**No k pays**: the best is {best.speedup:.2f}\u00d7 at k = {best.k}, below plain decoding; "
                f"a cheaper drafter (smaller c) or a higher \u03b1 would change that")
    line = f"{head} ({describe_inputs(result)}). Predictions of the cost model, not measurements."
    if mark is not None and not mark.priced.single_c:  # as the run's panel says it (verdicts.pricing)
        costed = "" if mark.priced.costed is None else f"; its own iterations costed: {mark.priced.costed:.2f}\u00d7"
        measured = f", {mark.measured:.2f}\u00d7 measured by Compare" if mark.measured else ""
        line += f" Your last run (\u03b1 = {mark.alpha:.2f}): {html.escape(mark.priced.why, False)}{costed}{measured}."
    elif point is not None:
        line += (f" Your last run (\u03b1 = {mark.alpha:.2f}, k = {mark.k}): {point.predicted:.2f}\u00d7 predicted "
                 f"with these costs" + (f", {mark.measured:.2f}\u00d7 measured by Compare." if mark.measured else "."))
    elif mark is not None:
        line += f" Your last run (\u03b1 = {mark.alpha:.2f}) chose k per iteration: its row is marked in the map."
    return line


def error_status(e: PlaygroundError) -> str:
    return fold(f"\u26a0 {html.escape(str(e))} \u2014 {STALE}.")


def _tip(term: str, extra: str = "") -> str:
    return html.escape((GLOSSARY.get(term, "") + extra).strip(), quote=True)


def _shade(x: float) -> str:
    """A cell's class by its predicted speed-up: slower than plain, or how much faster."""
    if x < 1.0:
        return "lose"
    return "g1" if x < 1.25 else "g2" if x < 1.5 else "g3" if x < 2.0 else "g4"


def per_k_html(result: WhatifResult, mark: RunMark | None) -> str:
    """Per k: predicted speed-up, tokens per target pass, break-even alpha and the iteration's cost."""
    rows, best = result.rows, result.best_k
    run_k = mark.k if mark is not None else None

    def head(r):
        cls = " ".join(c for c, on in (("best", r.k == best), ("you", r.k == run_k)) if on)
        tip = "best k" if r.k == best else ("your last run's k" if r.k == run_k else "")
        return f'<th class="{cls}" title="{tip}">{r.k}</th>' if cls else f'<th>{r.k}</th>'

    lines = [
        ("speed-up (\u00d7)", _tip("speed-up", " (predicted by the cost model)"),
         lambda r: (f"{r.speedup:.2f}", _shade(r.speedup))),
        ("tokens / pass", _tip("tokens per pass"), lambda r: (f"{r.tokens_per_pass:.2f}", "")),
        ("break-even \u03b1", _tip("break-even \u03b1"),
         lambda r: ("never" if r.break_even_alpha is None else f"{r.break_even_alpha:.2f}",
                    "never" if r.break_even_alpha is None else "")),
        ("cost / iteration", html.escape("k \u00b7 c + v(k + 1) + cost per call, in target steps", quote=True),
         lambda r: (f"{r.iteration_cost:.2f}", "")),
    ]
    out = ['<div class="whatif-scroll"><table class="whatif-table" data-table="per-k">',
           '<thead><tr><th class="name" title="' + _tip("k") + '">k</th>' + "".join(head(r) for r in rows)
           + "</tr></thead><tbody>"]
    for name, tip, cell in lines:
        cells = []
        for r in rows:
            text, cls = cell(r)
            cls = " ".join(c for c in (cls, "best" if r.k == best else "", "you" if r.k == run_k else "") if c)
            attr = f' class="{cls}"' if cls else ""
            cells.append(f'<td{attr} data-k="{r.k}">{text}</td>')
        out.append(f'<tr><th class="name" title="{tip}">{name}</th>{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def grid_html(result: WhatifResult, mark: RunMark | None) -> str:
    """The table of predicted speed-up over alpha x k, the best k of each alpha in bold, the
    what-if alpha's row and the last run's row labelled, and the run's own cell outlined (where the model prices
    its drafter)."""
    ks = result.ks
    corner = _tip("\u03b1 (acceptance rate)", "; k: " + GLOSSARY["k"])
    out = ['<div class="whatif-scroll"><table class="whatif-table whatif-grid" data-table="grid">',
           f'<thead><tr><th class="name" title="{corner}">\u03b1 \u2572 k</th>'
           + "".join(f"<th>{k}</th>" for k in ks) + "</tr></thead><tbody>"]
    alphas = [g.alpha for g in result.grid]
    run_row, my_row = _row_of(alphas, mark.alpha if mark is not None else None), _row_of(alphas, result.alpha)
    for g in result.grid:
        a, speedups = g.alpha, g.speedups
        top = max(ks, key=lambda k: speedups[k])
        is_run, is_mine = a == run_row, a == my_row
        tags = [t for t, on in (("what-if", is_mine), ("your run", is_run)) if on]
        label = (f"{a:.2f}" if a in ALPHAS else f"{a:.3f}") + (f' <span class="tag">{SEP.join(tags)}</span>' if tags
                                                                else "")
        cls = " ".join(c for c, on in (("mine", is_mine), ("run", is_run)) if on)
        cells = []
        for k in ks:
            x = speedups[k]
            here = is_run and mark.k == k and mark.priced.single_c  # a hybrid has no cell in a one-c model
            cell_cls = " ".join(c for c in (_shade(x), "top" if k == top and x > 1.0 else "", "you" if here else "")
                                if c)
            tip = f"\u03b1 = {a:.2f}, k = {k}: {x:.3f}\u00d7 predicted"
            if here:
                tip += " \u2014 where your last run sits"
            cells.append(f'<td class="{cell_cls}" title="{html.escape(tip, quote=True)}">{x:.2f}</td>')
        out.append(f'<tr class="{cls}" data-alpha="{a:.4f}"><th class="name">{label}</th>{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


# --- where the tab's numbers start from ---------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    timing: Timing
    whence: str
    token: object  # what identifies it between events (the tab fills from one calibration once)
    drafter: str | None  # its drafter's registry name (verdicts.pricing); None: a sweep saved without one


def last_calibration(session: Session | None, store) -> Found | None:
    """The tab's last Calibrate, else the calibration behind its last run's prediction, else its sweep's."""
    if session is None:
        return None
    if session.calibration is not None:
        drafter, t = session.calibration
        return Found(t, f"this tab's last Calibrate of {drafter} on {context_label(t)}", session.calibration, drafter)
    t = run_timing(session, store)
    if t is not None:
        drafter = session.run.request.drafter
        return Found(t, f"the calibration of {drafter} behind the last run, on {context_label(t)}", t, drafter)
    sweep = session.sweep
    t = sweep_timing(sweep)
    if t is not None:
        return Found(t, f"the last sweep's calibration, on {context_label(t)}", sweep, sweep.drafter)
    return None


def v_text(v: Mapping[int, float]) -> str:
    return ",".join(f"{n}:{x:.3f}" for n, x in sorted(v.items()))


def prefill(session: Session, store, force: str | None = None) -> tuple[dict, str | None]:
    """(values to put in the panel, the line that says where they came from; None: nothing new to say).

    Without `force`, what is new since the tab was last filled: a calibration (c, v(n), cost per call) and a
    finished run (alpha, per-position acceptance). `force` ("calibration" or "run", the buttons) fills from
    that one even if it was used before, and says so when there is none."""
    found, mark = last_calibration(session, store), run_mark(session, store)
    seen_cal, seen_run = session.whatif_from or (None, None)
    values, filled, notes = {}, [], []
    if found is not None and (force == "calibration" or (force is None and found.token is not seen_cal)):
        t, said = found.timing, pricing(found.drafter, found.timing)
        values.update(c=round(t.c, 4), overhead=round(t.overhead, 4), v=v_text(t.v))
        whose = "" if said.single_c else f" of {found.drafter}'s model drafter alone ({said.why})"
        filled.append(f"c = {t.c:.3f}, the cost per call and v(n){html.escape(whose, quote=False)} from "
                      f"{html.escape(found.whence, quote=False)}")
        seen_cal = found.token
    elif force == "calibration":
        notes.append("No calibration in this tab yet: press **Calibrate** (it times c and v(n) on this pair and "
                     "prompt); the values stay as they are.")
    if mark is not None and (force == "run" or (force is None and session.run is not seen_run)):
        values.update(alpha=round(mark.alpha, 3))
        if mark.positions:
            values.update(positions=", ".join(f"{a:.3f}" for a in mark.positions))
        k = f"k = {mark.k}" if mark.k is not None else "k chosen per iteration"
        filled.append(f"\u03b1 = {mark.alpha:.3f} and the per-position acceptance from the last run "
                      f"({html.escape(mark.drafter, quote=False)}, {k})")
        seen_run = session.run
    elif force == "run":
        notes.append("No finished run in this tab yet: press **Run**; \u03b1 stays as it is.")
    session.whatif_from = (seen_cal, seen_run)
    if filled:
        notes.insert(0, "Filled in: " + "; ".join(filled) + ". Change anything: the numbers follow at once.")
    return values, " ".join(notes) or None
