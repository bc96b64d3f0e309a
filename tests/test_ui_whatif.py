"""The What-if tab and the batch lines of the sweep chart, without a browser: every number is lab.whatif's (so
core.cost's), the tab fills from the last calibration and run, marks where the run sits, and says what is
wrong with a bad input in the library's words; the batch timing runs on a tiny pair and feeds the sweep chart."""

from __future__ import annotations

import itertools
from dataclasses import astuple, replace
from types import SimpleNamespace

import gradio as gr
import pytest
import torch

from playground.core.records import summarize
from playground.errors import PlaygroundError
from playground.lab.batch import batch_predictions
from playground.lab.calibration import Timing
from playground.lab.whatif import ALPHAS, parse_v, whatif
from playground.pairs.models import ModelPair
from playground.results.calibration import BatchResult, BatchRow
from playground.ui import batching, charts, measure, serving
from playground.ui.session import RunResult, Session, parse_request
from playground.ui.whatif_view import DEFAULTS, WhatifInputs, error_status, prefill, v_text, whatif_view
from tests.test_ui_handlers import RECORDS, WORDS, request, sweep_request, sweep_result, valid
from tests.tiny import perturbed, tiny_model, word_tokenizer

TIMING = Timing(target_step_s=0.02, verify_s={1: 0.02, 2: 0.0206, 3: 0.0212, 5: 0.024, 9: 0.03, 17: 0.05},
                draft_step_s=0.0071, context_tokens=9, draft_call_s=0.0013)


@pytest.fixture(scope="module")
def provider():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    pair = ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")
    return serving.PairProvider(pair=pair)


def values(**changes) -> WhatifInputs:
    return replace(DEFAULTS, **changes)


def finished_run(k: int = 3, k_mode: str = "fixed", measured_plain_tps: float | None = None) -> RunResult:
    """A finished run of the hand-built records: alpha 0.75 (3 of 4 checked proposals kept) at k = 3."""
    controls = {"prompt": "w1 w2", "preset": "", "chat": False, "drafter": "draft", "k": k, "k_mode": k_mode,
                "decoding": "greedy", "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8, "seed": 0}
    summary = summarize(RECORDS)
    plain = SimpleNamespace(tokens_per_s=measured_plain_tps) if measured_plain_tps else None
    return RunResult(request=parse_request(controls, ["draft"]), prompt_ids=[1, 2], drafter="draft",
                     records=list(RECORDS), summary=summary, text="", preset=None, check=None, setup="cpu",
                     environment={}, finished=True, plain=plain)


# --- the numbers are the library's --------------------------------------------------------------------------


def test_the_default_view_is_the_seeds_cheap_draft_figure_through_the_whatif_path():
    view = whatif_view(None, DEFAULTS)
    expected = whatif(0.38, alpha=0.85, v=None, overhead=0.0, alphas=ALPHAS)
    assert view.doc == expected  # the one call, nothing of our own
    assert round(view.doc.rows[3].speedup, 2) == 1.47  # k = 4: the seed's 1.47x at c = 0.38, alpha = 0.85
    assert "1.47" in view.table and view.status.startswith(f"**Best k = {expected.best_k}**")
    fig = valid(view.figure)
    assert list(fig.data[0].y) == [r.speedup for r in expected.rows] and list(fig.data[0].x) == list(range(1, 17))
    assert any(f"best k = {expected.best_k}" in a.text for a in fig.layout.annotations)
    assert any(s.y0 == 1.0 and s.y1 == 1.0 for s in fig.layout.shapes)  # break-even line


def test_break_even_alpha_rises_with_k_at_the_seeds_cost_ratio_through_the_panel():
    view = whatif_view(None, values(c=0.56))
    be = [r.break_even_alpha for r in view.doc.rows[:6]]
    assert all(a < b for a, b in itertools.pairwise(be)) and all(0 < a < 1 for a in be)
    for r in view.doc.rows[:6]:
        assert f'data-k="{r.k}">{r.break_even_alpha:.2f}</td>' in view.table


def test_every_shown_number_equals_whatifs_for_per_position_acceptance_and_a_measured_v():
    raw = values(acceptance="positions", positions="0.95, 0.9 0.8,0.7", c="0.3", overhead=0.1,
                 v="1:1.0,2:1.05,4:1.6,8:1.9")
    view = whatif_view(None, raw)
    expected = whatif(0.3, positions=[0.95, 0.9, 0.8, 0.7], v=parse_v(raw.v), overhead=0.1, alphas=ALPHAS)
    assert view.doc == expected
    assert list(view.figure.data[0].y) == [r.speedup for r in expected.rows]
    for g in expected.grid:  # the alpha x k map: every cell, as shown
        row = view.grid.split(f'data-alpha="{g.alpha:.4f}"')[1].split("</tr>")[0]
        assert [c.split(">")[1] for c in row.split("<td")[1:]] == [f"{g.speedups[k]:.2f}</td" for k in range(1, 17)]
    assert "per-position acceptance 0.95, 0.90, 0.80, 0.70" in view.status


def test_no_k_pays_for_a_drafter_slower_than_the_target():
    view = whatif_view(None, values(c=1.2, alpha=0.95))
    assert view.doc.best_k == 0 and view.status.startswith("**No k pays**")
    assert "never" in view.table and "no k pays" in view.figure.layout.title.text


# --- bad input: the library's message -----------------------------------------------------------------------


@pytest.mark.parametrize("changes, message", [
    ({"alpha": 1.5}, r"acceptance is a probability in \[0, 1\], got \[1.5\]"),
    ({"alpha": None}, "must be a number"),
    ({"c": -1}, "the draft cost ratio c must be >= 0"),
    ({"c": "cheap"}, "the draft cost ratio c must be a number"),
    ({"overhead": -0.5}, "cost per call must be >= 0"),
    ({"v": "1-1.0"}, "n:cost"),
    ({"v": "1:0"}, "a cost > 0"),
    ({"v": "1:inf"}, "finite"),
    ({"acceptance": "positions", "positions": "0.9, 1.2"}, r"in \[0, 1\], got \[0.9, 1.2\]"),
    ({"acceptance": "positions", "positions": "0.9, lots"}, "got 'lots'"),
    ({"acceptance": "positions", "positions": "  "}, "the box is empty"),
    ({"acceptance": "both"}, "acceptance must be one of"),
])
def test_a_bad_input_is_refused_with_what_to_fix(changes, message):
    with pytest.raises(PlaygroundError, match=message):
        whatif_view(None, values(**changes))


def test_the_error_line_is_the_message_escaped_and_says_what_is_still_shown():
    line = error_status(PlaygroundError("v(n) is a list like '1:1.0', got '<b>'"))
    assert line.startswith("\u26a0 v(n) is a list") and "&lt;b&gt;" in line and "Traceback" not in line
    assert "still show the last inputs that worked" in line


def test_an_alpha_typed_out_of_range_keeps_its_message_once_the_slider_moved_to_its_bound():
    session = Session()
    with pytest.raises(PlaygroundError, match="probability"):
        whatif_view(session, values(alpha=1.5))
    at_bound = whatif_view(session, values(alpha=1))  # Gradio clamps the slider: the next change is at 1
    assert at_bound.status.startswith("\u26a0 acceptance is a probability in [0, 1], got [1.5]: the slider moved to 1")
    assert not whatif_view(session, values(alpha=1)).status.startswith("\u26a0")  # said once


# --- filled from the tab's calibration and run; the run marked ----------------------------------------------


def test_the_tab_fills_from_the_last_calibration_once_and_on_the_button():
    session = Session(calibration=("draft", TIMING))
    changes, line = prefill(session, None)
    assert changes == {"c": round(TIMING.c, 4), "overhead": round(TIMING.overhead, 4), "v": v_text(TIMING.v)}
    assert "this tab's last Calibrate of draft on 9 tokens of context (the 64-token bucket)" in line
    view = whatif_view(session, values(**changes))
    assert view.doc == whatif(changes["c"], alpha=0.85, v=parse_v(changes["v"]), overhead=changes["overhead"],
                              alphas=ALPHAS)
    assert prefill(session, None) == ({}, None)  # nothing new: the user's edits stay
    again, line = prefill(session, None, force="calibration")
    assert again == changes and line.startswith("Filled in")
    _, line = prefill(Session(), None, force="calibration")
    assert line.startswith("No calibration in this tab yet")


def test_without_a_calibrate_the_tab_fills_from_the_sweeps_calibration():
    sweep = sweep_result()
    session = Session(sweep=sweep)
    changes, line = prefill(session, None)
    timing = Timing.from_dict(sweep.timing)
    assert changes["c"] == round(timing.c, 4) == 0.5 and "the last sweep's calibration" in line
    assert prefill(session, None) == ({}, None)


def test_the_last_run_is_marked_where_it_sits_and_fills_alpha():
    session = Session(run=finished_run(k=3, measured_plain_tps=1e-9))
    run = session.run
    changes, line = prefill(session, None)
    assert changes == {"alpha": 0.75, "positions": "1.000, 0.500"} and "from the last run (draft, k = 3)" in line
    view = whatif_view(session, values(alpha=0.62))
    alphas = [g.alpha for g in view.doc.grid]
    assert 0.62 in alphas and len(alphas) == len(ALPHAS) + 1  # the run's 0.75 is a seed row already
    assert '0.620 <span class="tag">what-if</span>' in view.grid and '0.75 <span class="tag">your run</span>' in view.grid
    assert 'class="run"' in view.grid and "your run" in view.grid and "what-if" in view.grid
    cell = view.grid.split('data-alpha="0.7500"')[1].split("</tr>")[0].split("<td")[3]  # k = 3
    assert "you" in cell and "where your last run sits" in cell
    predicted = whatif(0.38, alpha=0.75, ks=[3]).rows[0].speedup
    star = next(t for t in view.figure.data if t.name.startswith("your last run (\u03b1 = 0.75, k = 3)"))
    assert list(star.x) == [3] and list(star.y) == [predicted]
    measured = next(t for t in view.figure.data if t.name == "your last run, measured (Compare)")
    assert list(measured.y) == [run.measured_speedup]
    assert f"Your last run (\u03b1 = 0.75, k = 3): {predicted:.2f}\u00d7 predicted" in view.status
    head = view.table.split("</thead>")[0].split("<th")[5]  # k = 3 in the per-k table's head (after thead, k)
    assert "you" in head and ">3</th>" in head


def test_a_hybrid_run_marks_its_row_but_sits_in_no_cell_of_a_model_it_does_not_have():
    run = finished_run(k=3)
    session = Session(run=replace(run, request=replace(run.request, drafter="hybrid")))
    view = whatif_view(session, DEFAULTS)
    assert "no model for this drafter" in view.status  # as Calibrate and Compare say it (verdicts.pricing)
    assert '0.75 <span class="tag">your run</span>' in view.grid and "where your last run sits" not in view.grid
    assert not any(t.name.startswith("your last run") for t in view.figure.data)


def test_a_run_whose_k_was_chosen_per_iteration_marks_its_row_only():
    session = Session(run=finished_run(k_mode="adaptive"))
    view = whatif_view(session, DEFAULTS)
    assert "your run" in view.grid and "where your last run sits" not in view.grid
    assert "chose k per iteration" in view.status and len(view.figure.data) == 1


# --- the events, as Gradio calls them -----------------------------------------------------------------------


def _fns(demo):
    return list(demo.fns.values())


def test_the_tab_events_and_the_whatif_api(provider):
    from playground.ui import build_ui

    demo = build_ui(provider)
    api = demo.get_api_info()["named_endpoints"]
    assert [p["parameter_name"] for p in api["/whatif"]["parameters"]] == ["c", "alpha", "positions", "v", "overhead"]
    assert [p["parameter_name"] for p in api["/time_batches"]["parameters"]] == ["prompt", "preset", "chat"]
    by_name = {fn.api_name: fn for fn in _fns(demo)}
    assert by_name["time_batches"].concurrency_id == "device:cpu" and by_name["time_batches"].concurrency_limit == 1
    out = by_name["whatif"].fn(0.38, 0.85)
    assert round(out["rows"][3]["speedup"], 2) == 1.47 and out == whatif(0.38, alpha=0.85).to_dict()
    positions = by_name["whatif"].fn(0.3, None, "0.9, 0.8", "1:1.0,4:1.5", 0.1)
    assert positions == whatif(0.3, positions=[0.9, 0.8], v={1: 1.0, 4: 1.5}, overhead=0.1).to_dict()
    with pytest.raises(gr.Error, match="probability"):
        by_name["whatif"].fn(0.38, 1.5)
    with pytest.raises(gr.Error, match="not both"):
        by_name["whatif"].fn(0.38, 0.8, "0.9")
    with pytest.raises(gr.Error, match="c must be a number"):
        by_name["whatif"].fn(None, 0.8)
    # the tab's own listener (private, no queue): raw values in, the view out; a bad value -> the line only
    recompute = next(fn for fn in _fns(demo) if fn.name == "recompute")
    assert recompute.api_visibility == "private" and not recompute.queue and not recompute.preprocess
    status, fig, table, _ = recompute.fn(None, *astuple(DEFAULTS))
    assert status.startswith("**Best k") and "1.47" in table and fig.data[0].y[3] == whatif(0.38, alpha=0.85).rows[3].speedup
    status, *rest = recompute.fn(None, *astuple(values(v="1-1.0")))
    assert status.startswith("\u26a0 v(n) is a list like") and all(isinstance(x, type(gr.skip())) for x in rest)
    fill = next(fn for fn in _fns(demo) if fn.name == "fill" and fn.targets and fn.targets[0][1] == "select")
    out = fill.fn(Session(calibration=("draft", TIMING)), *astuple(DEFAULTS))
    assert out[3] == round(TIMING.c, 4) and out[6].startswith("Filled in") and out[7].startswith("**Best k")


# --- batch > 1 ----------------------------------------------------------------------------------------------


def fake_batch(n_max: int = 5) -> BatchResult:
    return BatchResult(n_max=n_max, batches=[1, 4, 8], threshold=1.25, repeats=4, context_tokens=9, setup="cpu", rows=[
        BatchRow(batch=b, step_s=0.02 * b ** 0.5, step_per_sequence_s=0.02 / b ** 0.5, free_up_to_k=4 // b,
                 v={n: 1.0 + (n - 1) * 0.02 * b for n in range(1, n_max + 1)}) for b in (1, 4, 8)])


def test_batch_lines_come_from_batch_predictions_at_the_sweeps_alpha_and_cost():
    sweep, batch = sweep_result(), fake_batch(n_max=4)  # passes up to 4 tokens: k <= 3
    curves = batching.batch_curves(sweep, batch)
    timing = Timing.from_dict(sweep.timing)
    for k in (1, 2, 3):
        expected = batch_predictions(batch, timing.c, 0.8, timing.overhead, ks=[k])
        assert {b: curves[b][k] for b in (1, 4, 8)} == {b: expected[b][k] for b in (1, 4, 8)}
    assert all(4 not in by_k for by_k in curves.values())  # beyond the timed passes: not drawn
    assert batching.batch_curves(None, batch) is None and batching.batch_curves(sweep, None) is None
    fig = valid(charts.sweep_figure(sweep, curves))
    margin = [a for a in fig.layout.annotations if a.xref == "paper" and a.x == 1.0]
    assert {"batch 1", "batch 4", "batch 8", "break-even"} <= {a.text for a in margin}
    lo, hi = fig.layout.yaxis.range
    px = sorted((a.y - lo) / (hi - lo) * 210 + (a.yshift or 0) for a in margin)
    assert all(b - a >= charts.LABEL_PX - 1e-9 for a, b in itertools.pairwise(px))  # pushed apart, none on another
    assert [t.name for t in fig.data][:3] == ["measured (median)", "predicted (iid \u03b1)", "predicted (per position)"]
    assert all(not t.showlegend for t in fig.data if t.name.startswith("predicted at batch"))


def test_time_batches_on_a_tiny_pair_keeps_the_result_and_the_sweep_draws_it(provider):
    session = Session()
    views = list(batching.stream_batch(provider, session, request(provider), repeats=1, warmup=0))
    final = views[-1]
    assert final.status.startswith("Timed batches 1, 4, 8 on") and "nearly free" in final.status
    assert [r.batch for r in session.batch.rows] == [1, 4, 8] and session.batch.n_max == batching.N_MAX
    assert final.figure is None and "Sweep k to see" in final.note and "The loop itself runs batch 1" in final.note
    assert "vLLM" in final.note and "| B | step, ms |" in final.note
    assert session.batch_status.startswith("Timed batches")
    swept = list(measure.stream_sweep(provider, session, sweep_request(provider, 4, 1, 8),
                                      sweep_fn=lambda *a, **kw: sweep_result()))[-1]
    names = [t.name for t in swept.figure.data]
    assert {"predicted at batch 1", "predicted at batch 4", "predicted at batch 8"} <= set(names)
    assert "draws the predicted speed-up at each batch size" in batching.batch_note(session)


def test_a_stopped_batch_timing_keeps_nothing_and_says_so(provider):
    from playground.ui import handlers

    session = Session()
    gen = batching.stream_batch(provider, session, request(provider), repeats=50, warmup=0)
    assert next(gen).status.startswith("Timing batches 1, 4, 8 on")
    gen.close()  # what Stop does: Gradio closes the event's generator
    assert session.stopped == "batch" and session.batch is None
    assert handlers.stopped_view(session).status.startswith("Batch timing stopped: nothing was kept.")
