"""Where decoding time went (issue 14): the time split of runs and iterations on hand-built records, the line the
speed and sweep commands print, the browser's time-split note, and the benchmark's browser arms (Gradio's
event, and a real Chromium) on a tiny pair."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch

from playground.core.records import ACCEPTED, BONUS, CORRECTION, Iteration, Prefill, Step, summarize
from playground.core.timesplit import (
    TimeSplit,
    iteration_splits,
    median_shares,
    percent,
    within_limits,
)
from playground.drafters.registry import make_proposer
from playground.lab.report import experiment_text, time_split_line
from playground.lab.speed import SpeedRequest, speed
from playground.pairs.models import ModelPair
from playground.results import from_document
from playground.results.calibration import WhatifResult, WhatifRow
from playground.results.speed import SpeedRun
from playground.ui import charts, chromium, markup, run_panel, serving
from playground.ui.session import parse_request
from tests.tiny import perturbed, tiny_model, tiny_pair, word_tokenizer

ROOT = Path(__file__).resolve().parent.parent


def it(index, draft, verify, rollback, elapsed, emitted=(1, 2), roles=(ACCEPTED, CORRECTION)):
    return Iteration(index=index, k=2, proposed=(1, 3), n_accepted=1, emitted=emitted, roles=roles, draft_s=draft,
                     verify_s=verify, rollback_s=rollback, elapsed_s=elapsed)


# Iteration walls: 0.10, 0.25 (0.10 of it outside the buckets), 0.10 s; rollback 1.5%, 1.2%, 1.5% of them.
RECORDS = [Prefill(prompt_tokens=4, target_s=0.5, draft_s=0.1),
           it(0, 0.030, 0.0685, 0.0015, 0.10),
           it(1, 0.050, 0.097, 0.003, 0.35),
           it(2, 0.020, 0.0785, 0.0015, 0.45, (5, 6, 7), (ACCEPTED, ACCEPTED, BONUS))]


def test_a_split_is_its_buckets_and_what_is_left_of_the_wall_time():
    s = TimeSplit.of(0.2, 0.7, 0.01, 1.0)
    assert s.outside_s == pytest.approx(0.09)
    assert s.shares() == pytest.approx({"draft": 0.2, "verify": 0.7, "rollback": 0.01, "outside": 0.09})
    assert s.describe() == "draft 0.20 s (20%) \u00b7 verify 0.70 s (70%) \u00b7 rollback 0.01 s (1.0%) \u00b7 outside 0.09 s (9.0%)"
    # clock reads round: buckets a hair over the wall time leave nothing outside, never a negative share
    assert TimeSplit.of(0.5, 0.5, 0.001, 1.0).outside_s == 0.0
    assert all(v is None for v in TimeSplit.of(0, 0, 0, 0).shares().values())
    assert percent(None) == "n/a" and percent(0.012) == "1.2%" and percent(0.5) == "50%"


def test_a_run_split_agrees_with_the_summary_and_its_overhead():
    summary = summarize(RECORDS)
    split = TimeSplit.from_summary(summary)
    assert split.wall_s == pytest.approx(0.45) and split.outside_s == pytest.approx(summary.overhead_s)
    assert split.outside_s == pytest.approx(0.1) and split.shares()["rollback"] == pytest.approx(0.006 / 0.45)


def test_each_iteration_is_split_against_its_own_wall_time():
    splits = iteration_splits(RECORDS)  # the prefill is not an iteration
    assert [s.wall_s for s in splits] == pytest.approx([0.1, 0.25, 0.1])
    assert [s.outside_s for s in splits] == pytest.approx([0.0, 0.1, 0.0], abs=1e-12)
    med = median_shares(splits)
    assert med["outside"] == pytest.approx(0.0, abs=1e-12) and med["verify"] == pytest.approx(0.685)
    assert med["rollback"] == pytest.approx(0.015)
    assert within_limits(med) == {"outside": True, "rollback": False}
    assert within_limits({}) == {"outside": None, "rollback": None}
    assert median_shares([]) == {"draft": None, "verify": None, "rollback": None, "outside": None}
    assert iteration_splits([Step(0, 1, 0.1, 0.1)]) == []


def test_the_speed_result_line_gives_medians_the_worst_run_and_the_limits():
    def run(**seconds):
        return SpeedRun(round=0, prompt="p", k=2, **seconds)

    runs = [run(draft_s=0.3, verify_s=0.66, rollback_s=0.004, decode_s=1.0),  # outside 3.6%
            run(draft_s=0.3, verify_s=0.60, rollback_s=0.005, decode_s=1.0),  # outside 9.5%
            run(draft_s=0.3, verify_s=0.68, rollback_s=0.003, decode_s=1.0),  # outside 1.7%
            run(decode_s=1.0)]  # an old result's row without the buckets: left out
    line = time_split_line(runs)
    assert line.startswith("time split of the 3 speculative runs")
    assert "rollback 0.4% (max 0.5%)" in line and "outside the buckets 3.6% (max 9.5%)" in line
    assert "outside < 5% held, rollback < 1% held" in line
    runs[0].rollback_s = runs[1].rollback_s = 0.02
    assert "rollback < 1% NOT held" in time_split_line(runs)
    assert time_split_line([]) is None and time_split_line([run(decode_s=1.0)]) is None


def test_the_speed_command_prints_the_time_split(target64, drafts64):
    pair = tiny_pair(target64, drafts64["useful"])
    res = speed(SpeedRequest(pair, {"a": [1, 2, 3, 4, 1, 2]}, lambda: make_proposer(pair, "draft"), ks=(2,),
                             rounds=1, max_new_tokens=6))
    text = experiment_text(res, "cpu")
    line = next(x for x in text.splitlines() if x.startswith("time split of the 1 speculative runs"))
    assert "draft " in line and "outside the buckets " in line


# --- the browser --------------------------------------------------------------------------------------------


def test_the_counters_show_the_time_split_in_seconds_and_shares():
    c = markup.counters_html(summarize(RECORDS), 10, running=False)
    for bucket, text in (("draft", "draft 0.10 s (22%)"), ("verify", "verify 0.24 s (54%)"),
                         ("rollback", "rollback 0.01 s (1.3%)"), ("outside", "outside 0.10 s (22%)")):
        assert f'data-bucket="{bucket}"' in c and f"{text}</span>" in c
    assert "time-split" not in markup.counters_html(None, 10, running=True)
    plain = summarize([Prefill(3, 0.1), Step(0, 5, 0.1, 0.1, "length")])
    assert "time-split" not in markup.counters_html(plain, 1, running=False)  # a plain run has one bucket


def as_validated(fig: go.Figure) -> dict:
    """The JSON the browser gets from the figure, and from its copy built with plotly's validation."""
    return json.loads(go.Figure(fig.to_dict()).to_json())


SWEEP = {"experiment": "sweep", "ks": [1, 2, 3, "adaptive"], "rounds": 3, "max_new_tokens": 16, "table": [{"k": k, "median_ratio": r, "min_ratio": r - 0.1, "max_ratio": r + 0.1, "alpha": 0.8,
                    "predicted_iid": r + 0.05, "predicted_empirical": None if k == 3 else r + 0.02}
                   for k, r in [(1, 1.2), (2, 1.4), (3, 1.3)]]
         + [{"k": "adaptive", "median_ratio": 1.35, "min_ratio": 1.3, "max_ratio": 1.4}], "best_k": 2}
WHATIF = WhatifResult(c=0.3, overhead=0.0, alpha=0.7, positions=None, v=None, best_k=3, best_speedup=1.3, grid=[],
                      ks=[1, 2, 3, 4], rows=[WhatifRow(k=k, speedup=1 + 0.1 * k, tokens_per_pass=1.0, iteration_cost=1.0,
                                                       break_even_alpha=None if k == 4 else 0.3) for k in (1, 2, 3, 4)])


def test_every_chart_reaches_the_browser_as_its_validated_copy_would():
    """Charts skip plotly's validation while a run streams (it tripled their cost): the JSON must not change."""
    its = [r for r in RECORDS if isinstance(r, Iteration)]
    figures = [charts.time_split_figure(its), charts.acceptance_by_position_figure(summarize(RECORDS)),
               charts.alpha_figure(its), charts.empty_figure("x"), charts.time_split_figure([]),
               charts.sweep_figure(from_document(SWEEP), {4: {1: 1.1, 2: 1.2}}), charts.sweep_figure(None),
               charts.sweep_figure(from_document({**SWEEP, "table": SWEEP["table"][-1:]})),  # no fixed k: no x range
               charts.whatif_figure(WHATIF, charts.RunPoint(k=2, alpha=0.6, predicted=1.2, measured=1.1))]
    for fig in figures:
        assert json.loads(fig.to_json()) == as_validated(fig)
    assert figures[0].layout.barmode == "stack" and [t.name for t in figures[0].data] == ["draft", "verify",
                                                                                        "rollback"]


WORDS = [f"w{i}" for i in range(63)]
PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"
# The Run event's inputs, by the components' elem_id (what the page sends).
CONTROLS = {"prompt": PROMPT, "preset": "", "chat": True, "drafter": "draft", "k": 3, "decoding": "greedy",
            "temperature": 1.0, "top-k": 0, "top-p": 1.0, "max-new": 12, "seed": 0, "k-mode": "fixed",
            "min-confidence": 0.0, "constrain": False}


@pytest.fixture(scope="module")
def word_pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    return ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")


def test_a_streamed_run_ends_on_its_time_split(word_pair):
    provider = serving.PairProvider(pair=word_pair)
    values = {"prompt": PROMPT, "preset": "", "chat": True, "drafter": "draft", "k": 3, "decoding": "greedy",
              "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 12, "seed": 0}
    views = list(run_panel.stream_run(provider, None, parse_request(values, provider.drafter_names())))
    summary, done = views[-1].session.run.summary, views[-1].counters
    assert 'data-bucket="outside"' in done and f"draft {summary.draft_s:.2f} s" in done


def _bench():
    spec = importlib.util.spec_from_file_location("bench_overhead", ROOT / "scripts" / "bench_overhead.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_benchmarks_browser_arm_drives_the_run_event_through_gradio(word_pair):
    browser = _bench().Browser(word_pair)
    records = browser.run(CONTROLS)
    summary = summarize(records)
    assert summary.new_tokens == 12 and summary.mode == "speculative"
    assert browser.updates >= 2 and browser.events == 1  # at least the first view and the done view
    again = browser.run(CONTROLS)  # a second event on a fresh tab state gives the same tokens (greedy)
    assert [r.emitted for r in again if isinstance(r, Iteration)] == [r.emitted for r in records
                                                                      if isinstance(r, Iteration)]


@pytest.mark.slow
def test_the_benchmarks_chromium_arm_reads_a_run_off_the_page(word_pair):
    bench = _bench()
    if not os.path.exists(chromium.PATH):
        pytest.skip(f"{chromium.PATH} is missing: run scripts/install_browser.sh")
    pytest.importorskip("playwright.sync_api")
    chrome = bench.Chromium(word_pair, k=3, max_new=12, drafter="draft")
    try:
        shown = chrome.run(PROMPT, chat=True)
        again = chrome.run(PROMPT, chat=True)  # the second run waits for its own Done line, not the first's
    finally:
        chrome.close()
    same = summarize(bench.Browser(word_pair).run(CONTROLS))  # arm B, the same controls, after the browser
    assert (shown.new_tokens, shown.target_passes) == (again.new_tokens, again.target_passes) == (
        same.new_tokens, same.target_passes)
    assert shown.tokens_per_s > 0 and again.tokens_per_s > 0
