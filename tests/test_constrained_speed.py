"""The constrained-decoding benchmark's core (playground.studies.constrained_speed, issue 55) on a tiny random model whose
vocabulary is the embedded tokenizer's, a few tokens per run: the result's shape, its table, the arms' alternation,
the forced share counted from the records' FORCED roles (not from every drafted token kept), and the check that a
constrained speculative run equals constrained plain."""

from __future__ import annotations

import json

import pytest

from playground.constraints.schema import schema_presets
from playground.core.engine import LoopOptions, speculative_generate
from playground.core.records import ACCEPTED, FORCED, Iteration
from playground.drafters.registry import make_proposer
from playground.errors import PlaygroundError
from playground.experiments import experiment_named
from playground.inputs.presets import get_preset
from playground.studies import constrained_speed as study
from tests.schema_models import bounded_grammar, embedded_tokenizer, tiny_schema_pair

NEW = 12
PRESETS = schema_presets()[:2]


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.fixture(scope="module")
def pair(tokenizer):
    return tiny_schema_pair(tokenizer)


@pytest.fixture(scope="module")
def cases(tokenizer):
    out = []
    for name in PRESETS:
        preset = get_preset(name)
        grammar = bounded_grammar(name, tokenizer)
        out.append(study.Case(name, preset.prompt_ids(tokenizer), grammar, NEW))
    return out


@pytest.fixture(scope="module")
def plan(pair):
    wanted = ["draft", "lookup"]  # the model drafter keeps tokens beside the forced ones; lookup has no model
    return study.Plan(study.partners(pair, wanted), k=4, rounds=2, plain_every=1, mask_walks=1, warmup_tokens=0)


@pytest.fixture(scope="module")
def doc(pair, cases, plan):
    return study.measure(pair, cases, plan)


def test_each_drafter_has_its_schema_partner_and_llama_cpp_needs_the_embedded_target(pair):
    found = study.partners(pair)
    assert found["draft"] == "schema+draft" and found["lookup"] == "schema+lookup"
    assert "llama.cpp" not in found and "hybrid" not in found  # not the embedded target; no schema+ hybrid
    with pytest.raises(PlaygroundError, match="llama.cpp"):
        study.partners(pair, ["llama.cpp"])


def test_arms_alternate_with_plain_pairs_and_rotate_between_rounds(plan):
    first, second = study.arm_order(plan, 0, 0), study.arm_order(plan, 1, 0)
    assert first[:2] == [("plain", False), ("plain", True)] and second[:2] == [("plain", True), ("plain", False)]
    assert first[2:5] == [("draft", False), ("draft", True), ("schema+draft", True)]
    assert second[2:5] == [("lookup", True), ("schema+lookup", True), ("lookup", False)]  # drafters and arms rotate
    assert sorted(first) == sorted(second) and first[-2:] == [("plain", False), ("plain", True)]
    assert sum(1 for a in first if a[0] == "plain") == 2 * (len(plan.partners) + 1)  # plain_every=1: a pair each


def test_the_result_has_every_preset_drafter_and_run(doc, plan):
    arms = len(study.arm_order(plan, 0, 0))
    assert len(doc["runs"]) == plan.rounds * len(PRESETS) * arms
    assert doc["equal_outputs"] == sum(1 for r in doc["runs"] if r["schema"])
    assert doc["calls"] == "first" and doc["environment"]["torch_threads"] >= 1
    assert set(doc["summary"]) == {*PRESETS, "all"}
    for name in PRESETS:
        s = doc["summary"][name]
        assert set(s["drafters"]) == {"draft", "lookup"} and s["best"] in s["drafters"]
        for row in s["drafters"].values():
            for cell in ("free", "constrained", "schema_constrained", "schema_over_alone", "forced_share"):
                assert row[cell]["n"] == plan.rounds and row[cell]["q1"] <= row[cell]["median"] <= row[cell]["q3"]
        assert s["constrained_plain"]["n"] == plan.rounds * (len(plan.partners) + 1)
        assert s["mask_ms"]["n"] > 0 and s["step_ms"]["n"] > 0 and 0 < s["mask_share"]
    json.dumps(doc)  # JSON-ready as it is


def test_the_forced_share_counts_the_forced_roles_only(pair, cases, doc):
    """schema+draft's forced share is the records' FORCED roles over the output tokens, as an independent run counts
    them; a share counting every kept proposal (forced and accepted) would differ, since the draft keeps some."""
    case = cases[0]
    records = [x for x in speculative_generate(pair, case.prompt, proposer=make_proposer(pair, "schema+draft"), k=4,
                                               max_new_tokens=NEW, options=LoopOptions(constraint=case.grammar))
               if isinstance(x, Iteration)]
    roles = [role for x in records for role in x.roles]
    forced, kept = roles.count(FORCED), roles.count(FORCED) + roles.count(ACCEPTED)
    assert 0 < forced < kept, "the test needs forced and accepted tokens both"
    share = doc["summary"][case.name]["drafters"]["draft"]["forced_share"]
    assert share["median"] == share["q1"] == share["q3"] == pytest.approx(forced / len(roles))  # greedy: every round
    assert share["median"] != pytest.approx(kept / len(roles))


def test_the_table_renders_every_row_and_the_goals(doc, tmp_path):
    text = study.markdown(doc)
    for name in PRESETS:
        assert f"| {name} | " in text
        for x in ("draft", "lookup"):
            line = next(x_ for x_ in text.splitlines() if x_.startswith(f"| {name} | {x} |"))
            assert line.count("|") == 8 and "[" in line
    assert text.count("\n| all | ") == 3  # the summary's row and one per drafter
    assert "Mask per token / target step (goal <= 5%)" in text and "schema+X / X" in text
    assert "first call" in text and f"{doc['equal_outputs']} constrained runs, each equal to constrained plain" in text
    path = tmp_path / "constrained-speed-test.json"
    path.write_text(json.dumps(doc))
    assert experiment_named("constrained-speed").load("report")(json.loads(path.read_text())) == text


def test_a_constrained_run_that_differs_from_constrained_plain_is_refused(monkeypatch, pair, cases, plan):
    real = study.emitted

    def wrong(records):  # the schema+ drafters' runs write one token more than they did
        out = real(records)
        return out + [0] if records and isinstance(records[-1], Iteration) and any(
            FORCED in x.roles for x in records if isinstance(x, Iteration)) else out

    monkeypatch.setattr(study, "emitted", wrong)
    with pytest.raises(PlaygroundError, match="other tokens than constrained plain"):
        study.measure(pair, cases[:1], study.Plan(plan.partners, k=4, rounds=1, mask_walks=1, warmup_tokens=0))
