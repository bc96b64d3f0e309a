"""The what-if map: the cost model's numbers laid out per k and over alpha x k, through the same functions;
the seed chapter's figures reproduced through this path."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from playground.cli import main
from playground.core import cost
from playground.errors import PlaygroundError
from playground.lab.whatif import parse_v, whatif
from playground.results import load_result
from playground.results.calibration import WhatifResult


def test_the_seed_chapters_cheap_draft_figure():
    # c = 0.38, verification one target step: 1.47x at alpha = 0.85, k = 4
    doc = whatif(0.38, alpha=0.85, ks=[4])
    assert round(doc.rows[0].speedup, 2) == 1.47


def test_the_break_even_alpha_rises_with_k_at_the_seeds_cost_ratio():
    rows = whatif(0.56, alpha=0.85, ks=[1, 2, 4, 6]).rows
    be = [r.break_even_alpha for r in rows]
    assert all(a < b for a, b in itertools.pairwise(be))
    assert all(0 < a < 1 for a in be)


def test_every_number_is_the_cost_models():
    v = {1: 1.0, 2: 1.05, 4: 1.6, 8: 1.9}
    doc = whatif(0.3, positions=[0.95, 0.9, 0.8, 0.7], v=v, overhead=0.1, ks=[1, 3, 8])
    for row in doc.rows:
        k = row.k
        assert row.speedup == cost.predicted_speedup_empirical([0.95, 0.9, 0.8, 0.7], k, 0.3, v, 0.1)
        assert row.break_even_alpha == cost.break_even_alpha(k, 0.3, v, 0.1)
    for g in doc.grid:
        assert g.speedups[3] == cost.predicted_speedup(g.alpha, 3, 0.3, v, 0.1)


def test_a_drafter_slower_than_the_target_never_pays():
    doc = whatif(1.2, alpha=0.95, ks=[1, 2, 4])
    assert doc.best_k == 0 and all(r.break_even_alpha is None for r in doc.rows)


@pytest.mark.parametrize("kwargs, message", [
    ({"c": 0.3}, "either an acceptance rate"),
    ({"c": 0.3, "alpha": 1.5}, "probability"),
    ({"c": -1, "alpha": 0.5}, "draft cost ratio"),
])
def test_bad_numbers_are_refused(kwargs, message):
    with pytest.raises(PlaygroundError, match=message):
        whatif(**kwargs)


def test_v_is_parsed_or_refused():
    assert parse_v("1:1.0,4:1.6") == {1: 1.0, 4: 1.6} and parse_v("flat") is None
    with pytest.raises(PlaygroundError, match="n:cost"):
        parse_v("1-1.0")


def test_the_command_line_prints_the_table_and_json(capsys, tmp_path):
    assert main(["whatif", "--alpha", "0.85", "--c", "0.38", "--ks", "1,4"]) == 0
    out = capsys.readouterr().out
    assert "| 4 | 1.47 |" in out and "best k: 4" in out and "alpha x k" in out
    calib = tmp_path / "t.json"
    calib.write_text(json.dumps({"experiment": "timing", "target_step_s": 0.04, "verify_s": {"1": 0.04, "2": 0.044},
                                 "draft_step_s": 0.012, "context_tokens": 10}))
    assert main(["whatif", "--alpha", "0.9", "--calibration", str(calib), "--ks", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["c"] == pytest.approx(0.3) and doc["v"]["2"] == pytest.approx(1.1)
    assert main(["whatif", "--alpha", "0.9"]) == 2
    assert "--c" in capsys.readouterr().err


def test_a_whatif_result_round_trips_and_the_committed_one_loads(tmp_path):
    result = whatif(0.3, positions=[0.9, 0.8], v={1: 1.0, 4: 1.5}, overhead=0.1, ks=[1, 4])
    result.save(tmp_path / "w.json")
    back = load_result(tmp_path / "w.json")
    assert back == result and back.grid[0].speedups[4] == result.grid[0].speedups[4]
    saved = load_result(Path(__file__).resolve().parents[1] / "docs" / "results" / "whatif-int8-epyc.json")
    assert isinstance(saved, WhatifResult) and saved.v[17] == 2.07 and saved.grid[0].speedups[1] > 0
