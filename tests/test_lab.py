"""The experiments on tiny models: structure, bookkeeping and verdicts (no timing assertions)."""

import dataclasses
import itertools
import statistics

import pytest
import torch

from playground import lab
from playground.core import cost
from playground.core.sampling import SamplingConfig
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.errors import PlaygroundError
from playground.lab.calibration import pass_lengths
from playground.lab.common import new_tokens
from playground.lab.fit import predict_from_neighbours
from playground.lab.speed import SpeedRequest, speed, sweep
from tests.tiny import tiny_model, tiny_pair


def factory(pair):
    return lambda: DraftModelProposer(pair.draft, pair.device, pair.vocab_size)


def test_calibrate_measures_every_pass_length(pair64):
    t = lab.calibrate(pair64, [1, 2, 3, 4, 5, 6], factory(pair64)(), lab.CalibrationPlan(n_max=5, repeats=3, warmup=1))
    assert set(t.verify_s) == {1, 2, 3, 4, 5}
    # the unit is plain decoding's step, timed back to back; v(1) is a one-token pass right after a draft
    assert t.target_step_s == sorted(t.raw.plain_step_s)[1] > 0 and len(t.raw.plain_step_s) == 3
    assert t.v_measured[1] == t.verify_s[1] / t.target_step_s
    # the curve predictions use is monotone except where a drop is significant (lab.fit.fit_verify)
    fit = t.verify_fit
    assert fit is not None and fit.measured == pytest.approx(t.v_measured)
    drops = {n for n, _ in fit.drops}
    assert all(t.v[n] <= t.v[n + 1] + 1e-12 for n in range(1, 5) if n not in drops)
    assert t.draft_step_s >= 0 and t.c == t.draft_step_s / t.target_step_s
    assert all(len(xs) == 3 for xs in t.raw.target_pass_s.values())
    # each pass is divided by the plain step of its own repetition; v(n) is the median of those ratios
    plain = t.raw.plain_step_s
    for n in range(1, 6):
        ratios = t.raw.pass_ratio[n]
        assert ratios == [x / p for x, p in zip(t.raw.target_pass_s[n], plain)]
        assert t.v_measured[n] == pytest.approx(statistics.median(ratios))
    assert 0.0 < t.predict(0.8, 3) and t.predict([0.9, 0.8, 0.7], 3) > 0
    assert set(t.to_dict()) >= {"c", "v", "target_step_s", "draft_step_s", "raw"}


def test_calibration_times_every_short_pass_and_a_few_long_ones():
    assert pass_lengths(9) == list(range(1, 10))
    assert pass_lengths(17) == [*range(1, 10), 12, 17]
    assert pass_lengths(3) == [1, 2, 3]


def test_calibrate_leaves_a_model_free_drafter_nearly_free(pair64):
    t = lab.calibrate(pair64, [1, 2, 1, 2, 1, 2], PromptLookupProposer(),
                      lab.CalibrationPlan(n_max=3, repeats=3, warmup=1))
    assert t.c < 0.5


def test_speed_alternates_and_pairs_runs_within_a_round(pair64):
    res = speed(SpeedRequest(pair64, {"a": [1, 2, 3], "b": [4, 5, 6]}, factory(pair64), ks=(1, 3), rounds=3,
                             max_new_tokens=8))
    assert len(res.runs) == 3 * 2 * 2
    orders = {tuple(r.order) for r in res.runs}
    assert len(orders) > 1  # the order rotates
    # plain decoding before the speculative runs and after the last (before every 3 by default), and each run is
    # divided by plain speed interpolated between the plain runs of its prompt and round
    assert all(o[0] == o[-1] == "plain" and o.count("plain") == 2 for o in orders) and res.plain_every == 3
    assert len(res.plain_runs) == 3 * 2 * 2
    # how each run ended, which its prediction needs (lab.fit.stop_limit)
    assert all(r.finished in ("eos", "length") and r.max_new_tokens == 8 for r in res.runs)
    for r in res.runs:
        around = [x.tokens_per_s for x in res.plain_runs if (x.round, x.prompt) == (r.round, r.prompt)]
        assert min(around) - 1e-9 <= r.plain_tokens_per_s <= max(around) + 1e-9
    assert res.drift["a"].plain_tokens_per_s == [
        statistics.median(x.tokens_per_s for x in res.plain_runs if (x.round, x.prompt) == (i, "a"))
        for i in range(3)]
    for row in res.table:
        assert row.n == 6 and row.min_ratio <= row.median_ratio <= row.max_ratio
    assert res.best_k in (1, 3)
    assert set(res.drift) == {"a", "b"}
    assert res.environment.torch_threads >= 1


def test_speed_runs_each_prompt_to_its_own_length(pair64):
    res = speed(SpeedRequest(pair64, {"a": [1, 2, 3], "b": [4, 5, 6]}, factory(pair64), ks=(2,), rounds=1,
                             max_new_tokens={"a": 3, "b": 7}))
    longest = {name: max(max(r.new_tokens, r.plain_new_tokens) for r in res.runs if r.prompt == name)
               for name in ("a", "b")}
    assert longest["a"] <= 3 < longest["b"] <= 7
    assert res.max_new_tokens == {"a": 3, "b": 7}
    assert new_tokens(res.max_new_tokens) == "at most each prompt's own 3-7 new tokens"
    assert new_tokens(8) == "at most 8 new tokens" == new_tokens({"a": 8, "b": 8})
    with pytest.raises(PlaygroundError, match="no max_new_tokens for the prompt 'b'"):
        speed(SpeedRequest(pair64, {"a": [1, 2, 3], "b": [4, 5, 6]}, factory(pair64), ks=(2,), rounds=1,
                           max_new_tokens={"a": 3}))
    with pytest.raises(PlaygroundError, match="whole number >= 1, got 0 for 'a'"):
        speed(SpeedRequest(pair64, {"a": [1, 2, 3]}, factory(pair64), ks=(2,), rounds=1, max_new_tokens={"a": 0}))


def test_sweep_predicts_and_recommends(pair64):
    calls = []
    res = sweep(SpeedRequest(pair64, {"prompt": [1, 2, 3]}, factory(pair64), ks=(1, 2), rounds=1,
                             max_new_tokens=6), progress=lambda f, m: calls.append(f))
    calibration = lab.Timing.from_dict(res.timing)
    assert res.experiment == "sweep" and calibration.c >= 0
    fixed = [row for row in res.table if isinstance(row.k, int)]
    assert [row.k for row in fixed] == [1, 2] and res.table[-1].k == "adaptive"
    for row in fixed:  # a break-even alpha is computed for each (None: no alpha pays)
        even = cost.break_even_alpha(row.k, calibration.c, calibration.v, calibration.overhead)
        assert row.predicted_iid > 0 and row.predicted_empirical > 0
        assert row.break_even_alpha == (None if even is None else pytest.approx(even))
        assert row.miss_empirical == pytest.approx(row.median_ratio - row.predicted_empirical)
        # each run predicted again from the other arms' costs in its round (lab.fit.predict_from_neighbours)
        assert row.predicted_local > 0 and row.miss_local == pytest.approx(row.median_ratio - row.predicted_local)
    k1 = next(x for x in res.runs if x.k == 1)
    others = [x for x in res.runs if x is not k1]
    assert k1.predicted_local == pytest.approx(predict_from_neighbours(k1, others, calibration))
    assert all(x.predicted_local is None for x in res.runs if x.k == "adaptive")
    assert calls and calls[-1] == 1.0 and all(0 <= f <= 1 for f in calls)


def test_acceptance_matches_the_formulas_for_a_perfect_draft(target64):
    pair = tiny_pair(target64, target64)
    res = lab.acceptance(pair, {"p": ("prose", [1, 2, 3], 25)}, factory(pair), ks=(2, 4))
    for row in res.rows:
        assert row.alpha == 1.0
        assert row.tokens_per_pass == row.tokens_per_pass_iid == row.k + 1
    assert {(r.kind, r.k) for r in res.pooled} == {("prose", 2), ("prose", 4)}


def test_distribution_searches_for_a_context_where_p_and_q_differ_under_top_p():
    target = tiny_model(vocab=8, seed=10, layers=1, hidden=16, scale=0.6)
    pair = tiny_pair(target, tiny_model(vocab=8, seed=11, layers=1, hidden=16, scale=0.6))
    sampling = SamplingConfig(do_sample=True, temperature=1.3, top_p=0.9)
    res = lab.distribution(pair, {"a": [1, 5, 2]}, factory(pair),
                           lab.DistributionPlan(sampling=sampling, draws=300, seeds=(0,), top=8))
    ctx = res.contexts["a"]
    assert ctx.tv_distance_p_q >= 0.3 and ctx.context_tokens == 3 + ctx.position
    assert "top-p=0.9" in res.sampling and res.min_tv == 0.3


def test_divergence_finds_none_in_float64(pair64):
    res = lab.divergence(pair64, {"a": [1, 2, 3]}, factory(pair64), ks=(1, 4), max_new_tokens=16)
    assert res.runs == 2 and res.diverged == 0


def test_divergence_verdicts_on_a_real_gap_and_a_tie(pair64):
    ctx = [1, 2, 3, 4, 5]
    with torch.no_grad():
        row = pair64.target(torch.tensor([ctx])).logits[0, -1]
    order = torch.argsort(row, descending=True).tolist()
    clear = lab.quality._recompute(pair64, ctx, order[0], order[-1], multi=3)
    assert clear["verdict"] == "bug" and clear["gaps"]["full prefill"] > 0
    same = lab.quality._recompute(pair64, ctx, order[0], order[0], multi=3)
    assert same["verdict"] == "near-tie"
    assert lab.quality._spacing(1.0, torch.float32) == pytest.approx(2 ** -23)


@pytest.mark.slow
def test_distribution_tells_the_rules_apart_where_p_and_q_differ():
    target = tiny_model(vocab=8, seed=10, layers=1, hidden=16, scale=0.6)
    draft = tiny_model(vocab=8, seed=11, layers=1, hidden=16, scale=0.6)
    pair = tiny_pair(target, draft)
    res = lab.distribution(pair, {"a": [1, 5, 2], "b": [3, 3]}, factory(pair),
                           lab.DistributionPlan(draws=4000, seeds=(0,), top=8))
    # the contexts were picked where draft and target disagree, and the wrong rules fail there: the test has power
    assert all(c.tv_distance_p_q >= 0.3 and c.power for c in res.contexts.values())
    assert res.summary.contexts_with_power == 2 and res.summary.without_power == []
    for r in res.results:
        assert r.tv_distance_p_q > 0.2
        if r.rule == "exact":
            assert r.p_value > 0.001
        else:
            assert r.p_value < 1e-4


def test_pooled_calibrations_take_the_median_of_all_their_samples(pair64):
    from playground.lab.calibration import Timing, pooled
    a = lab.calibrate(pair64, [1, 2, 3, 4, 5, 6], factory(pair64)(), lab.CalibrationPlan(n_max=4, repeats=3, warmup=1))
    b = lab.calibrate(pair64, [1, 2, 3, 4, 5, 6], factory(pair64)(), lab.CalibrationPlan(n_max=4, repeats=4, warmup=1))
    both = pooled([a, b])
    assert both.raw.pooled == 2 and len(both.raw.plain_step_s) == 7
    assert both.target_step_s == sorted(a.raw.plain_step_s + b.raw.plain_step_s)[3]
    for n in (1, 2, 3, 4):
        ratios = a.raw.pass_ratio[n] + b.raw.pass_ratio[n]
        assert both.v_measured[n] == pytest.approx(sorted(ratios)[3])
    assert both.verify_fit is not None  # the pooled samples still carry the monotone fit
    # calibrations saved before the paired ratios pool their seconds' medians, as they were predicted then
    bare = [Timing.from_dict({**t.to_dict(), "raw": {k: v for k, v in t.to_dict()["raw"].items() if "ratio" not in k}})
            for t in (a, b)]
    old = pooled(bare)
    assert not old.raw.pass_ratio
    assert old.verify_s[2] == sorted(a.raw.target_pass_s[2] + b.raw.target_pass_s[2])[3]
    assert pooled([a]) is a
    again = Timing.from_dict(both.to_dict())
    assert again is not None and again.verify_s == both.verify_s and again.c == pytest.approx(both.c)
    other = lab.calibrate(pair64, [1, 2, 3], factory(pair64)(), lab.CalibrationPlan(n_max=4, repeats=3, warmup=1))
    with pytest.raises(ValueError, match="one context length"):
        pooled([a, other])
    with pytest.raises(ValueError, match="at least one"):
        pooled([])


def test_speed_can_start_controllers_afresh_each_round_and_run_between_rounds(pair64, target64):
    timing = lab.calibrate(pair64, [1, 2, 3], factory(pair64)(), lab.CalibrationPlan(n_max=17, repeats=3, warmup=1))
    later = dataclasses.replace(timing, target_step_s=timing.target_step_s * 2)
    timings, seen = {"a": timing}, []

    def between(r):
        seen.append(r)
        timings["a"] = later  # a dict of timings is read again for the predictions made at the end

    res = speed(SpeedRequest(pair64, {"a": [1, 2, 3]}, factory(pair64), ks=(2,), rounds=3, max_new_tokens=8,
                             timing=timings), between_rounds=between)
    assert seen == [0, 1]
    for x in (x for x in res.runs if x.k == 2):
        positions = list(itertools.takewhile(lambda a: a is not None, x.per_position))
        assert x.predicted_empirical == pytest.approx(later.predict(positions, 2, new_tokens=x.new_tokens))
    # A perfect draft where drafting pays: a controller that carries its state drafts deeper in the second round
    # (it remembers a rate near 1); one that starts afresh makes the same first choice every round.
    from playground.lab.calibration import Timing
    perfect = tiny_pair(target64, target64)
    # c = 0.3: a first call at the prior's rate drafts 10, one that remembers a rate near 1 the full 16
    cheap = Timing(target_step_s=1.0, verify_s={n: 1.0 + 0.05 * n for n in range(1, 18)}, draft_step_s=0.3,
                   context_tokens=3)
    firsts = {}
    for memory in ("conversation", "none", "prompt"):
        # sampled, so that the draft's confidence does not stop it (greedy only) and k is the controller's choice
        r = speed(SpeedRequest(perfect, {"a": [1, 2, 3], "b": [4, 5, 6]}, factory(perfect), ks=("adaptive",),
                               rounds=3, max_new_tokens=24, timing=cheap, memory=memory,
                               sampling=SamplingConfig(do_sample=True, seed=0)))
        assert r.memory == memory
        firsts[memory] = {(x.round, x.prompt): x.iterations[0][0] for x in r.runs}
    fresh = firsts["none"][(0, "a")]
    assert set(firsts["none"].values()) == {fresh}  # every run a first call
    # one conversation: prompt b's first run already remembers a's rate, and drafts deeper
    assert firsts["conversation"][(0, "a")] == fresh < firsts["conversation"][(0, "b")]
    # per prompt: each prompt's first round is a first call, its later rounds remember its own runs
    assert firsts["prompt"][(0, "a")] == firsts["prompt"][(0, "b")] == fresh < firsts["prompt"][(1, "b")]
    with pytest.raises(PlaygroundError, match="memory must be one of"):
        speed(SpeedRequest(perfect, {"a": [1, 2, 3]}, factory(perfect), ks=(2,), rounds=1, max_new_tokens=4,
                           memory="tab"))


# The code-edit preset's calibration in the int8 grid of 2026-12-04 (AMD EPYC VM; 3 calibrations pooled, 16
# repetitions): the plain step and the one-token pass of each repetition, in ms.
EDIT_PLAIN = [48.7, 55.9, 46.4, 45.6, 57.0, 45.7, 52.3, 47.3, 71.9, 73.7, 76.5, 70.9, 55.5, 50.8, 53.4, 55.0]
EDIT_PASS_1 = [46.0, 46.3, 47.4, 45.7, 46.4, 46.8, 47.9, 49.3, 73.6, 71.1, 74.7, 65.0, 65.9, 49.7, 47.3, 48.6]


def test_paired_ratios_keep_a_pass_from_reading_cheaper_than_a_step():
    from playground.lab.calibration import _paired
    step = statistics.median(EDIT_PLAIN)
    apart = statistics.median(EDIT_PASS_1) / step  # medians over different moments of a drifting host
    ratios = {1: [x / p for x, p in zip(EDIT_PASS_1, EDIT_PLAIN)]}
    verify, per_token, per_call = _paired(ratios, {1: [0.6, 0.6], 4: [1.5, 1.5]}, step)
    assert apart < 0.9 and 0.95 < verify[1] / step < 1.0
    assert per_token / step == pytest.approx(0.3) and per_call / step == pytest.approx(0.3)


def test_plain_runs_bracket_every_few_speculative_runs():
    from playground.lab.speed import bracketed
    assert bracketed(["k=1", "k=2", "k=3", "k=4"], 3) == ["plain", "k=1", "k=2", "k=3", "plain", "k=4", "plain"]
    assert bracketed(["k=1", "k=2"], 1) == ["plain", "k=1", "plain", "k=2", "plain"]
    for bad in (0, -1, True, 1.5):
        with pytest.raises(PlaygroundError, match="plain_every must be a whole number >= 1"):
            bracketed(["k=1"], bad)


def test_plain_speed_is_interpolated_to_each_speculative_run():
    from types import SimpleNamespace

    from playground.lab.speed.run import plain_at
    # a host slowing steadily: plain steps of 50 ms at t = 0 and 60 ms at t = 10 (40 tokens each)
    early = SimpleNamespace(new_tokens=40, decode_s=40 * 0.050, prefill_s=0.2)
    late = SimpleNamespace(new_tokens=40, decode_s=40 * 0.060, prefill_s=0.4)
    mid = plain_at([(0.0, early), (10.0, late)], 5.0)
    assert mid.decode_s / mid.new_tokens == pytest.approx(0.055) and mid.prefill_s == pytest.approx(0.3)
    assert mid.tokens_per_s == pytest.approx(1 / 0.055)
    assert plain_at([(0.0, early), (10.0, late)], 7.5).decode_s == pytest.approx(40 * 0.0575)
    # before the first or after the last plain run: that run as it was
    assert plain_at([(0.0, early), (10.0, late)], 12.0).decode_s == pytest.approx(late.decode_s)
    assert plain_at([(0.0, early), (10.0, late)], -1.0).decode_s == pytest.approx(early.decode_s)
    # a sampled plain run may stop early: the step time is interpolated, the token count is the nearer run's
    short = SimpleNamespace(new_tokens=20, decode_s=20 * 0.060, prefill_s=0.4)
    near_short = plain_at([(0.0, early), (10.0, short)], 8.0)
    assert near_short.new_tokens == 20 and near_short.decode_s / 20 == pytest.approx(0.058)


def test_a_run_that_ended_on_an_eos_is_predicted_with_its_last_iteration_as_run():
    from playground.core import cost
    from playground.lab.calibration import Timing
    from playground.lab.speed.cells import run_prediction
    from playground.results.speed import SpeedRun
    t = Timing(target_step_s=0.05, verify_s={n: 0.05 * (1 + 0.1 * (n - 1)) for n in range(1, 6)},
               draft_step_s=0.025, context_tokens=10)
    run = SpeedRun(round=0, prompt="p", k=4, per_position=[1.0, 1.0, 1.0, 1.0], new_tokens=26, max_new_tokens=64)
    by_length = run_prediction(dataclasses.replace(run, finished="length"), t)
    by_eos = run_prediction(dataclasses.replace(run, finished="eos"), t)
    assert by_length == pytest.approx(cost.predicted_speedup_finite([1.0] * 4, 4, t.c, t.v, 26))
    assert by_eos == pytest.approx(cost.predicted_speedup_finite([1.0] * 4, 4, t.c, t.v, 26, limit=64))
    assert by_eos < by_length
    assert run_prediction(run, t) == by_length  # saved before runs kept how they ended


def test_a_model_free_drafters_prediction_counts_the_iterations_that_drafted_nothing():
    """A lookup-like run at k = 16: half its iterations find no match and draft nothing, the rest draft 16 and
    keep them all. Priced by the lengths it drafted, the prediction is what its own iterations cost (the costed
    figure, exact here since every drafted token was accepted); the fixed-k walk, which credits every iteration
    16 drafts, overstates it (the wrong variant this replaces)."""
    from playground.drafters.adaptive import CostCurve
    from playground.lab.calibration import Timing
    from playground.lab.schedules import costed_ratio
    from playground.lab.speed.cells import run_prediction, variable_lengths
    from playground.results.speed import SpeedRun
    t = Timing(target_step_s=0.05, verify_s={n: 0.05 * (1 + 0.02 * (n - 1)) for n in range(1, 18)},
               draft_step_s=0.0005, context_tokens=10)
    rows = [[16, 0, 1, 0.0, 0.05, 0.0, 0, None], [16, 16, 17, 0.008, 0.066, 0.0, 16, "lookup"]] * 5
    run = SpeedRun(round=0, prompt="p", k=16, per_position=[1.0] * 16, new_tokens=90, max_new_tokens=90,
                   iterations=rows)
    assert variable_lengths(rows) == {0: 5, 16: 5}
    predicted = run_prediction(run, t)
    assert predicted == pytest.approx(costed_ratio(rows, CostCurve.from_timing(t)), rel=1e-9)
    assert t.predict([1.0] * 16, 16, new_tokens=90) > 1.4 * predicted  # 10.6 against 7.3
    model_rows = [[4, 4, 5, 0.01, 0.05, 0.0, 4, None]] * 4 + [[4, 2, 2, 0.01, 0.05, 0.0, 2, None]]  # an EOS last
    assert variable_lengths(model_rows) is None  # a model drafter: the fixed-k walk prices it, as before
