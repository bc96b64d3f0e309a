"""The typed results of the calibration and quality experiments: each saves with the keys its file always had,
loads back equal, and a file saved before results were typed (today's keys) still loads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from playground.lab.calibration import Timing
from playground.lab.report import acceptance_table, distribution_table, timing_line, timing_table
from playground.lab.whatif import whatif
from playground.results import load_result
from playground.results.calibration import (
    BatchPredictions,
    BatchResult,
    BatchRow,
    Spread,
    TimingResult,
    TimingSamples,
)
from playground.results.environment import Environment
from playground.results.quality import (
    AcceptanceResult,
    DistributionContext,
    DistributionResult,
    DistributionSummary,
    RuleSummary,
    RuleTest,
)

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
PASSES = {1: [0.010, 0.011, 0.012, 0.010], 2: [0.0105, 0.0112, 0.0121, 0.0104], 3: [0.011, 0.012, 0.013, 0.0108]}


def timing() -> Timing:
    plain = [0.010, 0.0105, 0.0098, 0.0101]
    raw = TimingSamples(target_pass_s=PASSES, plain_step_s=plain, draft_propose_s={1: [0.004] * 4, 4: [0.01] * 4},
                        pass_ratio={n: [x / p for x, p in zip(xs, plain)] for n, xs in PASSES.items()},
                        draft_ratio={1: [0.4] * 4, 4: [1.0] * 4},
                        target_spread={n: Spread.of(xs) for n, xs in PASSES.items()})
    return Timing(target_step_s=0.0101, verify_s={1: 0.0105, 2: 0.011, 3: 0.0115}, draft_step_s=0.002,
                  context_tokens=12, raw=raw, draft_call_s=0.0004, source_s={"lookup": (0.0, 0.0001)})


def saved(result, path: Path) -> dict:
    result.save(path)
    return json.loads(path.read_text())


def test_a_timing_result_saves_todays_keys_and_loads_back_equal(tmp_path):
    t = timing()
    batch = BatchResult(context_tokens=12, batches=[1, 4], n_max=3, repeats=4, threshold=1.25,
                        rows=[BatchRow(batch=b, step_s=0.01 * b, step_per_sequence_s=0.01, v={1: 1.0, 2: 1.1, 3: 1.2},
                                       free_up_to_k=2, spread={1: Spread.of([0.01, 0.011])}) for b in (1, 4)],
                        predictions=BatchPredictions(alpha=0.8, c=t.c, by_batch={1: {1: 1.2, 2: 1.3}, 4: {1: 1.1}}))
    result = t.record(TimingResult, environment=Environment(cpu="x"), memory={"target_bytes": 1}, batch=batch)
    doc = saved(result, tmp_path / "t.json")
    assert doc["experiment"] == "timing" and doc["c"] == t.c and doc["v"]["1"] == t.v[1]
    assert doc["trust"]["headline"] == t.trust.headline() and doc["raw"]["pass_ratio"]["2"] == t.raw.pass_ratio[2]
    assert set(doc) >= set(t.to_dict()) and doc["batch"]["predictions"]["by_batch"]["4"]["1"] == 1.1
    back = load_result(tmp_path / "t.json")
    # the calibration the loaded result measured (what follows from it is computed again, from its samples)
    measured = Timing(target_step_s=back.target_step_s, verify_s=back.verify_s, draft_step_s=back.draft_step_s,
                      context_tokens=back.context_tokens, raw=back.raw, draft_call_s=back.draft_call_s,
                      source_s=back.source_s, sampling=back.sampling)
    assert back == result and measured == t and Timing.from_dict(doc) == t
    assert timing_table(back, "cpu") == timing_table(result, "cpu") and "| 2 | " in timing_table(back, "cpu")
    assert timing_line(back).startswith("target step 10.1 ms; drafter 2.0 ms per token (c = 0.198) + 0.4 ms")


def test_a_timing_file_saved_before_results_were_typed_loads(tmp_path):
    old = {key: value for key, value in timing().to_dict().items() if key != "format"}
    old.update(experiment="timing", environment={}, memory={}, drafter="draft", command="python -m playground timing")
    old["raw"]["target_spread"]["1"] = {"median": 0.01, "min": 0.009, "max": 0.012, "n": 4}
    (tmp_path / "old.json").write_text(json.dumps(old))
    back = load_result(tmp_path / "old.json")
    assert isinstance(back, TimingResult) and back.raw.target_spread[1].max == 0.012 and back.drafter == "draft"
    assert back.verify_s == {1: 0.0105, 2: 0.011, 3: 0.0115} and back.source_s == {"lookup": (0.0, 0.0001)}


def test_a_whatif_and_the_committed_quality_and_forwards_files_load():
    w = whatif(0.3, alpha=0.8, ks=[1, 2])
    assert w.to_dict()["grid"][0]["speedups"]["2"] == w.grid[0].speedups[2]
    for name in ("acceptance-int8", "acceptance-lookup"):
        result = load_result(RESULTS / f"{name}.json")
        assert isinstance(result, AcceptanceResult) and result.pooled[0].histogram
        assert acceptance_table(result, "cpu").startswith("acceptance (cpu; greedy)")
    forwards = load_result(RESULTS / "forwards-llama-3.2-3b-layers4-epyc.json")
    assert forwards.arms["static"].v[17] > 1 and forwards.shape.layers == 4


def distribution_doc() -> dict:
    """A distribution file as saved before results were typed."""
    rule = {"tests": 1, "below_0.01": 0, "below_0.05": 0, "min_p": 0.4}
    return {"experiment": "distribution", "environment": dataclasses.asdict(Environment(cpu="x")), "sampling": "sample T=1", "draws": 200, "seeds": [0],
            "min_tv": 0.3, "contexts": {"a": {"position": 0, "tv_distance_p_q": 0.4, "context_tokens": 3,
                                              "power": False}},
            "results": [{"prompt": "a", "seed": 0, "rule": r, "p_value": 0.4, "tv_distance_p_q": 0.4, "draws": 200}
                        for r in ("exact", "resample-target (wrong)", "keep-draft (wrong)")],
            "summary": {"contexts_with_power": 0, "contexts": 1, "without_power": ["a"], "exact": rule,
                        "resample-target (wrong)": {**rule, "below_0.05": 1}, "keep-draft (wrong)": rule},
            "note": "n", "drafter": "d", "command": "c"}


def test_a_distribution_file_keeps_its_rule_names_and_round_trips(tmp_path):
    (tmp_path / "d.json").write_text(json.dumps(distribution_doc()))
    result = load_result(tmp_path / "d.json")
    assert isinstance(result, DistributionResult) and result.summary.resample_target.below_005 == 1
    assert "without power (a passing exact rule proves nothing there): a" in distribution_table(result, "cpu")
    doc = saved(result, tmp_path / "again.json")
    assert {k: v for k, v in doc.items() if k != "format"} == distribution_doc()
    assert load_result(tmp_path / "again.json") == result


def test_a_distribution_summary_is_built_by_rule_name():
    rule = RuleSummary(tests=2, below_001=1, below_005=2, min_p=0.001)
    summary = DistributionSummary.of(1, 1, [], {"exact": rule, "resample-target (wrong)": rule,
                                                "keep-draft (wrong)": rule})
    assert summary.keep_draft is rule
    result = DistributionResult(sampling="s", draws=1, seeds=[0], min_tv=0.3, results=[RuleTest("a", 0, "exact", 0.5,
                                                                                                None, 1)],
                                contexts={"a": DistributionContext(0, None, 2, True)}, summary=summary)
    assert result.to_dict()["summary"]["keep-draft (wrong)"]["below_0.01"] == 1


@pytest.mark.parametrize("missing", ["c", "raw"])
def test_timing_from_a_dict_takes_the_measured_fields_only(missing):
    doc = {key: value for key, value in timing().to_dict().items() if key != missing}
    t = Timing.from_dict(doc)
    assert t is not None and t.verify_s == timing().verify_s
    assert Timing.from_dict({"target_step_s": 0.01}) is None
