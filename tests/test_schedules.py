"""Schedules compared on their own iterations (lab.schedules): the costed figure, same-decision detection, and the
speed result and report that carry them."""

import json

import pytest

from playground.drafters.adaptive import CostCurve
from playground.drafters.proposers import DraftModelProposer
from playground.lab.calibration import Timing
from playground.lab.fit import fit_loop
from playground.lab.misses import known_to
from playground.lab.report import experiment_text, report
from playground.lab.schedules import compare, costed_ratio, decisions, schedules_rows, summary_line
from playground.lab.speed import SpeedRequest, speed
from playground.results.speed import SpeedRun
from tests.tiny import tiny_model, tiny_pair

CURVE = CostCurve(c=0.5, v={1: 1.0, 2: 1.2, 3: 1.3, 4: 1.4, 5: 1.5}, overhead=0.1, sources={"lookup": (0.0, 0.02)})


def row(k, accepted, emitted, drafted=None, source=None):
    """A compact iteration row as lab.speed keeps it (times are irrelevant to the costed figure)."""
    return [k, accepted, emitted, 0.01, 0.02, 0.0, k if drafted is None else drafted, source]


def test_costed_ratio_is_the_runs_tokens_over_the_steps_its_iterations_cost():
    rows = [row(3, 3, 4), row(0, 0, 1), row(2, 1, 2)]
    steps = (3 * 0.5 + 0.1 + 1.4) + 1.0 + (2 * 0.5 + 0.1 + 1.3)
    assert costed_ratio(rows, CURVE) == pytest.approx(7 / steps)
    # a confidence stop drafts fewer than k: the drafter paid for what it drafted, the target verified that
    assert costed_ratio([row(4, 2, 3, drafted=2)], CURVE) == pytest.approx(3 / (2 * 0.5 + 0.1 + 1.3))
    # a hybrid's lookup proposals cost its own (c, overhead)
    assert costed_ratio([row(4, 4, 5, source="lookup")], CURVE) == pytest.approx(5 / (0.02 + 1.5))
    # rows saved without the drafted count and source: k drafted by the drafter's own source
    assert costed_ratio([r[:6] for r in rows], CURVE) == pytest.approx(7 / steps)
    assert costed_ratio(rows, None) is None and costed_ratio([], CURVE) is None


def run(prompt, k, r, ratio, rows, curve=CURVE):
    return SpeedRun(prompt=prompt, k=k, round=r, ratio=ratio, iterations=rows, costed=costed_ratio(rows, curve))


def test_schedules_with_the_same_decisions_cost_the_same_and_the_measured_gap_is_called_noise():
    deep = [row(4, 4, 5), row(4, 4, 5), row(3, 1, 2)]
    shallow = [row(2, 0, 1)] * 4
    runs = []
    for r in range(3):
        runs += [run("p", 2, r, 1.5, shallow), run("p", 4, r, 1.9, deep),
                 run("p", "adaptive", r, 1.8 + 0.01 * r, deep), run("p", "heuristic", r, 2.0, deep)]
    (entry,) = compare(runs, ["p"], [2, 4, "adaptive", "heuristic"])
    vs = entry.adaptive_vs_heuristic
    assert vs.same_decisions and vs.costed == 1.0
    assert vs.measured == pytest.approx(1.81 / 2.0)  # the host's noise, which the costed figure does not carry
    assert entry.best_fixed.k == 4 and entry.adaptive_of_best == pytest.approx(1.0)
    line = summary_line([entry])
    assert "same k in every iteration on 1 of 1 prompts" in line and "lowest 1.000 (p)" in line


def test_schedules_with_different_decisions_are_told_apart_by_their_costs():
    deep, shallow = [row(4, 4, 5), row(4, 4, 5)], [row(1, 1, 2)] * 5
    runs = [run("p", 4, 0, 1.9, deep), run("p", "adaptive", 0, 1.2, shallow), run("p", "heuristic", 0, 1.9, deep)]
    (entry,) = compare(runs, ["p"], [4, "adaptive", "heuristic"])
    vs = entry.adaptive_vs_heuristic
    assert not vs.same_decisions
    assert vs.costed == pytest.approx(costed_ratio(shallow, CURVE) / costed_ratio(deep, CURVE)) and vs.costed < 1
    assert decisions(shallow) == ((1, 1),) * 5


def test_adaptive_against_the_heuristic_is_given_round_by_round_where_their_walks_differ():
    deep, shallow = [row(4, 4, 5), row(4, 4, 5)], [row(1, 1, 2)] * 5
    runs = [run("p", 4, 0, 1.9, deep), run("p", "heuristic", 0, 1.9, deep), run("p", "adaptive", 0, 1.2, shallow),
            run("p", 4, 1, 1.9, deep), run("p", "heuristic", 1, 1.9, shallow), run("p", "adaptive", 1, 1.9, deep)]
    (entry,) = compare(runs, ["p"], [4, "adaptive", "heuristic"])
    vs = entry.adaptive_vs_heuristic
    behind = costed_ratio(shallow, CURVE) / costed_ratio(deep, CURVE)
    assert vs.costed_by_round == pytest.approx([behind, 1 / behind]) and vs.rounds_level_or_ahead == 1
    assert not vs.same_decisions
    _, rows = schedules_rows([entry])
    assert f"(costed {behind:.2f}-{1 / behind:.2f} by round; level or ahead in 1 of 2)" in rows[0][-1]


def test_the_loop_fit_verifies_what_was_drafted_not_k():
    rows = [[4, 2, 3, 0.02, 0.03, 0.0, 2, None], [4, 4, 5, 0.04, 0.05, 0.0, 4, None], [4, 0, 0, 0.001, 0.01, 0.0, 0, None]]
    fitted = fit_loop(rows, 0.01)
    assert set(fitted.verify.measured) == {3, 5}  # passes over 2 + 1 and 4 + 1 tokens; nothing drafted: not a pass
    assert fitted.c == pytest.approx((0.04 - 0.02) / 0.01 / 2)


def test_speed_costs_every_runs_decisions_and_the_report_prints_the_schedules(tmp_path):
    target = tiny_model(vocab=64, seed=1)
    perfect = tiny_pair(target, target)  # every proposal accepted: the iterations follow from k and the length alone
    cheap = Timing(target_step_s=1.0, verify_s={n: 1.0 + 0.05 * n for n in range(1, 18)}, draft_step_s=0.1,
                   context_tokens=3)
    res = speed(SpeedRequest(perfect, {"a": [1, 2, 3]},
                             lambda: DraftModelProposer(perfect.draft, perfect.device, perfect.vocab_size),
                             ks=(4, "adaptive", "heuristic"), rounds=2, max_new_tokens=24, timing=cheap,
                             memory="none"))
    curve = CostCurve.from_timing(cheap)
    for x in res.runs:
        assert x.costed == pytest.approx(costed_ratio(x.iterations, curve))
        if x.k == 4 and x.new_tokens == 24:  # 4 iterations of 5 tokens, then k = 3 for the last 4
            assert x.costed == pytest.approx(24 / (4 * (0.4 + 1.25) + (0.3 + 1.2)))
    (entry,) = res.schedules
    # by hand: the heuristic drafts 16 (transformers' 20, capped) and every proposal is accepted, so it stays at 16;
    # the 7 tokens left take k = 6. Adaptive made the same decisions when its (k, drafted) rows are these too.
    assert all(decisions(x.iterations) == ((16, 16), (6, 6)) for x in res.runs if x.k == "heuristic")
    same = all([(int(r[0]), int(r[6])) for r in x.iterations] == [(16, 16), (6, 6)]
               for x in res.runs if x.k == "adaptive")
    assert entry.adaptive_vs_heuristic.same_decisions is same
    assert {r.k: r.median_costed is not None for r in res.table} == {4: True, "adaptive": True, "heuristic": True}
    text = experiment_text(res, "tiny")
    assert "schedules: costed" in text and "adaptive / heuristic, costed" in text and "| costed |" in text
    saved = tmp_path / "speed.json"
    res.save(saved)
    assert json.loads(saved.read_text())["schedules"][0]["adaptive_vs_heuristic"]["same_decisions"] is same
    reread = report(saved)
    assert "adaptive / heuristic, costed" in reread  # a saved result re-read prints them too
    # both predictions' misses per cell, with how closely its median is known, and a score line for each
    row = next(r for r in res.by_prompt if r.k == 4)
    known = known_to(res.runs)[(row.prompt, 4)]
    assert f"{row.miss_empirical:+.2f} / {row.miss_local:+.2f} (\u00b1{known:.2f})" in reread
    assert "\nprediction: within 0.05" in reread and "\nprediction from the other arms' costs" in reread
