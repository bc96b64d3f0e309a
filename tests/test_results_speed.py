"""The speed, sweep and peers results as files: each saves and loads back equal, and a file saved before results
were typed (format 1: today's keys, no `format`) loads and reports."""

from __future__ import annotations

import json

import pytest

from playground import lab
from playground.drafters.proposers import DraftModelProposer
from playground.lab.report import report
from playground.lab.speed import SpeedRequest, speed, sweep
from playground.results import FORMAT, load_result
from playground.results.speed import PeersResult, SpeedResult, SweepResult
from playground.results.trust import Verdict
from tests.tiny import tiny_pair


def factory(pair):
    return lambda: DraftModelProposer(pair.draft, pair.device, pair.vocab_size)


@pytest.mark.parametrize("kind", ["speed", "sweep"])
def test_a_speed_or_sweep_result_round_trips_through_its_file(pair64, tmp_path, kind):
    request = SpeedRequest(pair64, {"a": [1, 2, 3]}, factory(pair64), ks=(1, 2, "heuristic"), rounds=2,
                           max_new_tokens=6)
    result = speed(request) if kind == "speed" else sweep(request)
    path = tmp_path / f"{kind}.json"
    result.save(path)
    doc = json.loads(path.read_text())
    assert doc["experiment"] == kind and doc["format"] == FORMAT
    assert doc["trust"]["headline"] == result.trust.headline()  # a reader of the file sees the verdict
    back = load_result(path)
    assert type(back) is (SpeedResult if kind == "speed" else SweepResult) and back == result
    assert isinstance(back.trust, Verdict) and back.runs[0].iterations == result.runs[0].iterations


def test_a_peers_result_round_trips_through_its_file(target64, drafts64, tmp_path):
    result = lab.peers(tiny_pair(target64, drafts64["useful"]), {"a": [1, 2, 3]}, k=2, rounds=1, max_new_tokens=4)
    result.save(tmp_path / "peers.json")
    back = load_result(tmp_path / "peers.json")
    assert isinstance(back, PeersResult) and back == result and back.ours_vs_hf_assisted.n == 1


TRUST = {"trusted": True, "headline": "trusted, with warnings: only 2 rounds",
         "findings": [{"check": "rounds", "severity": "warn", "message": "only 2 rounds", "fix": "run 3 or more rounds"}]}
ROW = {"k": 2, "median_ratio": 1.31, "min_ratio": 1.2, "max_ratio": 1.4, "median_e2e_ratio": 1.2, "n": 2,
       "alpha": 0.81, "median_costed": 1.3, "predicted_iid": 1.25, "predicted_empirical": 1.28,
       "miss_empirical": 0.03, "spread": 0.2, "explained": None, "trust": TRUST}
ADAPTIVE = {"k": "adaptive", "median_ratio": 1.4, "min_ratio": 1.3, "max_ratio": 1.5, "median_e2e_ratio": 1.3, "n": 2,
            "alpha": 0.8, "median_costed": 1.35, "k_values": {"2": 6, "3": 4}, "drafted_values": {"2": 6, "3": 4},
            "spread": 0.2, "trust": TRUST}
RUN = {"round": 0, "prompt": "prose", "k": 2, "order": ["plain", "k=2", "k=adaptive", "plain"],
       "plain_tokens_per_s": 20.0, "spec_tokens_per_s": 26.0, "ratio": 1.3, "alpha": 0.8, "per_position": [0.9, 0.7],
       "tokens_per_pass": 2.4, "new_tokens": 24, "plain_new_tokens": 24, "draft_s": 0.2, "verify_s": 0.7,
       "rollback_s": 0.001, "decode_s": 0.95, "plain_decode_s": 1.2, "k_values": {"2": 10}, "drafted_values": {"2": 10},
       "prefill_s": 0.1, "plain_prefill_s": 0.1, "iterations": [[2, 2, 3, 0.02, 0.07, 0.0]] * 10,
       "predicted_empirical": 1.28, "costed": 1.3}


def old_speed_file() -> dict:
    """A speed result as saved before results were typed, and before runs kept how they ended or what they
    drafted (six-entry iterations), before plain_every and the prediction from the loop's costs."""
    return {"experiment": "speed", "trust": TRUST, "recommended_k": 2, "withheld": None,
            "environment": {"cpu": "test CPU", "pair": {"target": "tiny", "device": "cpu"}},
            "ks": [2, "adaptive"], "rounds": 2, "max_new_tokens": 24, "sampling": "greedy", "prompts": ["prose"],
            "table": [ROW, ADAPTIVE], "best_k": 2, "by_prompt": [{"prompt": "prose", **ROW},
                                                                 {"prompt": "prose", **ADAPTIVE}],
            "best_k_by_prompt": {"prose": 2},
            "drift": {"prose": {"plain_tokens_per_s": [20.0, 20.5], "spread": 0.025, "flagged": False}},
            "runs": [RUN, {**RUN, "round": 1, "ratio": 1.32}], "plain_runs": [
                {"round": 0, "prompt": "prose", "tokens_per_s": 20.0}], "drafter": "draft", "command": "speed"}


def test_an_old_speed_file_loads_and_reports(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old_speed_file()))
    result = load_result(path)
    assert isinstance(result, SpeedResult) and result.plain_every is None and result.runs[0].finished is None
    assert result.trust.headline() == TRUST["headline"] and result.table[1].k_values == {"2": 6, "3": 4}
    text = report(path)
    assert text.startswith("speed \u2014 tiny, drafter: draft, test CPU, cpu")
    assert "| prose | 1.31 (1.28) | k=2: **1.31x** | 1.40 (107% of best) | 1.20x | 0.810 |" in text
    assert "trust: trusted, with warnings: only 2 rounds" in text and "recommended k: 2" in text


def test_an_old_peers_file_loads(tmp_path):
    path = tmp_path / "peers.json"
    path.write_text(json.dumps({
        "experiment": "peers", "trust": TRUST, "environment": {}, "k": 3, "rounds": 2, "max_new_tokens": 8,
        "ours_vs_hf_assisted": {"median": 1.5, "min": 1.4, "max": 1.6, "n": 2}, "ours_vs_hf_assisted_conf": None,
        "timed": "end to end, prefill included",
        "table": [{"arm": "hf plain", "median_ratio": 1.0, "min_ratio": 1.0, "max_ratio": 1.0,
                   "median_tokens_per_s": 50.0, "outputs_equal": 2, "n": 2}], "runs": []}))
    text = report(path)
    assert "| hf plain | 1.00x | 1.00-1.00 | 50.0 | 2/2 |" in text
    assert "drafting all k, per round and prompt: median 1.50x [1.40-1.60], n = 2" in text
