"""speed / sweep --schema (playground.lab.speed.schema): every arm also run constrained, right after its free run,
with the drafter's schema+ variant, divided by constrained plain decoding; per k the constrained speed-up, tokens
per pass constrained and free, and the forced share, in the result, the printed table and the saved file; the
command line's refusals. A tiny random model whose vocabulary is the embedded tokenizer's."""

from __future__ import annotations

import argparse

import pytest

from playground.cli import main
from playground.cli.lab import Job
from playground.constraints.grammar import Grammar
from playground.constraints.schema import Schema
from playground.core.engine import LoopOptions, speculative_generate
from playground.core.records import summarize
from playground.drafters.registry import make_proposer
from playground.inputs.presets import get_preset
from playground.lab.report import experiment_text
from playground.lab.speed import SpeedRequest, speed, sweep
from playground.lab.speed.schema import SCHEMA, constrained_drafter
from playground.results import load_result
from tests.schema_models import bounded, embedded_tokenizer, tiny_schema_pair

NEW = 40


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.fixture(scope="module")
def pair(tokenizer):
    return tiny_schema_pair(tokenizer, keep_tokenizer=True)


@pytest.fixture(scope="module")
def measured(pair, tokenizer):
    grammar = Grammar(Schema(bounded(get_preset("tool_call").output_schema), "bounded tools"), tokenizer)
    prompt = get_preset("tool_call").prompt_ids(tokenizer)
    request = SpeedRequest(pair, {"call": prompt}, lambda: make_proposer(pair, "lookup"), ks=(1, 4), rounds=2,
                           max_new_tokens=NEW, constraint=grammar,
                           constrained_proposer=lambda: make_proposer(pair, "schema+lookup"))
    return grammar, prompt, speed(request)


def test_each_arm_runs_constrained_right_after_its_free_run(measured):
    _, _, res = measured
    assert res.schema == "bounded tools"
    for run in res.runs:
        free = [a for a in run.order if not a.endswith(SCHEMA)]
        assert run.order == [a for arm in free for a in (arm, arm + SCHEMA)]
        assert free[0] == free[-1] == "plain"
    assert len(res.plain_runs) == 2 * 2  # the constrained plain runs are not the free arms' plain runs


@pytest.mark.parametrize("k", [1, 4])
def test_the_constrained_figures_are_the_schema_drafters_constrained_run(measured, pair, k):
    grammar, prompt, res = measured
    live = summarize(list(speculative_generate(pair, prompt, proposer=make_proposer(pair, "schema+lookup"), k=k,
                                               max_new_tokens=NEW, options=LoopOptions(constraint=grammar))))
    free = summarize(list(speculative_generate(pair, prompt, proposer=make_proposer(pair, "lookup"), k=k,
                                               max_new_tokens=NEW)))
    assert live.forced_share > 0 and live.finished == "schema"
    runs = [r for r in res.runs if r.k == k]
    for r in runs:
        c = r.schema
        assert (c.tokens_per_pass, c.forced_share, c.new_tokens, c.finished) == \
            (live.tokens_per_pass, live.forced_share, live.new_tokens, "schema")
        assert r.tokens_per_pass == free.tokens_per_pass
        assert c.ratio == pytest.approx(c.spec_tokens_per_s / c.plain_tokens_per_s)
    row = next(row for row in res.table if row.k == k)
    cell = row.schema
    assert (cell.tokens_per_pass, cell.free_tokens_per_pass, cell.forced_share, cell.n) == \
        (live.tokens_per_pass, free.tokens_per_pass, live.forced_share, 2)
    assert cell.min_ratio <= cell.median_ratio <= cell.max_ratio


def test_the_table_and_the_saved_result_carry_the_constrained_columns(measured, tmp_path):
    _, _, res = measured
    text = experiment_text(res, "tiny")
    assert "constrained to bounded tools" in text
    row = next(row for row in res.table if row.k == 4)
    c = row.schema
    line = next(x for x in text.splitlines() if x.startswith("| 4 | ") and "%" in x)
    assert line == (f"| 4 | {c.median_ratio:.2f} | {c.min_ratio:.2f}-{c.max_ratio:.2f} | "
                    f"{c.free_tokens_per_pass:.2f} | {c.tokens_per_pass:.2f} | {c.forced_share:.0%} |")
    path = tmp_path / "speed.json"
    res.save(path)
    back = load_result(path)
    assert back.schema == res.schema and back.table[1].schema == c and back.runs[0].schema == res.runs[0].schema


def test_without_a_schema_nothing_changes(pair):
    res = speed(SpeedRequest(pair, {"a": [1, 2, 3]}, lambda: make_proposer(pair, "lookup"), ks=(2,), rounds=1,
                             max_new_tokens=4))
    assert res.schema is None and all(r.schema is None and SCHEMA not in "".join(r.order) for r in res.runs)
    assert res.table[0].schema is None and "constrained to" not in experiment_text(res, "tiny")


def test_the_constrained_arms_run_the_drafters_schema_variant(pair):
    assert constrained_drafter(pair, "lookup") == "schema+lookup"
    assert constrained_drafter(pair, "schema+draft") == "schema+draft"
    assert constrained_drafter(pair, "hybrid") == "hybrid"  # no schema+ variant: it runs as itself
    args = argparse.Namespace(schema="tool_call", drafter="draft", max_ngram=3)
    job = Job(args=args, pair=pair, ks=(1,), prompts={}, progress=lambda *a: None, memory={})
    options = job.schema_options()
    assert options["constraint"].name == "the tool_call preset's schema"
    made = options["constrained_proposer"]()
    assert made.name.startswith("schema+") and made.inner_source == "draft"  # the draft model, its schema+ variant
    assert Job(args=argparse.Namespace(schema=None), pair=pair, ks=(1,), prompts={}, progress=None,
               memory={}).schema_options() == {}


def test_a_bad_schema_or_one_with_a_trace_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "tools.json"
    bad.write_text("{not json")
    for cmd in ("speed", "sweep"):  # refused before any pair loads (there is none at this path)
        assert main([cmd, "--target", str(tmp_path / "no-model"), "--prompt", "w1", "--schema", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert "schema file tools.json: not valid JSON" in err and len(err.splitlines()) == 1
    assert main(["speed", "--target", str(tmp_path / "no-model"), "--trace", str(bad), "--schema", "tool_call"]) == 2
    assert "--schema constrains presets or a prompt, not a --trace's turns" in capsys.readouterr().err


def test_a_sweep_runs_every_arm_constrained_too_the_adaptive_one_included(measured, pair):
    grammar, prompt, _ = measured
    res = sweep(SpeedRequest(pair, {"call": prompt}, lambda: make_proposer(pair, "lookup"), ks=(1, 2), rounds=1,
                             max_new_tokens=NEW, constraint=grammar,
                             constrained_proposer=lambda: make_proposer(pair, "schema+lookup")))
    assert [row.k for row in res.table] == [1, 2, "adaptive"]
    assert all(row.schema is not None and row.schema.forced_share > 0 for row in res.table)
    assert res.schema == "bounded tools" and "constrained to bounded tools" in experiment_text(res, "tiny")
