"""Step costs fitted from the loop's own records, and the monotone verification curve, on synthetic data
whose answer is known."""

from __future__ import annotations

import random

import pytest

from playground.lab.fit import explain_run, fit_loop, fit_verify


def jittered(x, rng, n=12, rel=0.03):
    return [x * (1 + rng.uniform(-rel, rel)) for _ in range(n)]


def test_a_noisy_dip_is_fitted_monotone():
    rng = random.Random(0)
    # v(3) measured a hair below v(2): noise (the samples overlap), so the fit flattens it
    samples = {1: jittered(1.0, rng), 2: jittered(1.10, rng), 3: jittered(1.09, rng), 4: jittered(1.6, rng)}
    fit = fit_verify(samples, unit_s=1.0)
    assert not fit.drops
    vs = [fit.v[n] for n in sorted(fit.v)]
    assert vs == sorted(vs) and (2 in fit.flattened or 3 in fit.flattened)
    assert fit.v[4] == pytest.approx(fit.measured[4])  # the kernel switch's jump up is kept


def test_a_real_drop_is_kept_and_flagged():
    rng = random.Random(1)
    # a pass over 3 tokens clearly slower than over 4 (what one CPU's kernel choice does): not noise
    samples = {2: jittered(1.6, rng), 3: jittered(1.86, rng), 4: jittered(1.49, rng), 5: jittered(1.37, rng)}
    fit = fit_verify(samples, unit_s=1.0)
    assert [n for n, _ in fit.drops] == [3, 4] and all(p < 0.01 for _, p in fit.drops)
    assert fit.v[3] == pytest.approx(fit.measured[3]) and fit.v[4] < fit.v[3]


def test_fit_loop_recovers_the_drafters_cost_per_token_and_per_call():
    rng = random.Random(2)
    unit, c, call = 0.04, 0.25, 0.1
    rows = []
    for _ in range(40):
        k = rng.randint(1, 8)
        draft = (call + c * k) * unit * (1 + rng.uniform(-0.01, 0.01))
        rows.append([k, k, k + 1, draft, (1 + 0.05 * k) * unit, 0.0])
    fit = fit_loop(rows, unit)
    assert fit.c == pytest.approx(c, rel=0.05) and fit.overhead == pytest.approx(call, abs=0.02)
    assert fit.c_se is not None and fit.c_se < 0.01
    assert fit.verify.v[5] == pytest.approx(1.2, rel=0.01) and fit.iterations == 40


def test_plain_steps_do_not_count_as_drafting():
    assert fit_loop([[0, 0, 1, 0.0, 0.04, 0.0]], 0.04) is None


def test_the_three_parts_of_a_miss_add_up():
    unit = 0.04
    its = [[4, 3, 4, 0.05, 0.06, 0.001]] * 10
    run = {"iterations": its, "plain_new_tokens": 40, "plain_decode_s": 40 * unit, "new_tokens": 40,
           "decode_s": sum(r[3] + r[4] + r[5] for r in its) * 1.03, "per_position": [0.9, 0.8, 0.8, 0.5],
           "ratio": 1.3}
    ex = explain_run(run, 4, predicted=1.5)
    assert ex["step_costs"] + ex["acceptance"] + ex["overhead"] == pytest.approx(1.3 - 1.5)
    assert ex["outside_buckets_share"] == pytest.approx(1 - 1 / 1.03)
    assert ex["overhead"] < 0  # time outside the buckets can only cost


def test_prediction_score_counts_close_cells_overall_and_among_the_sharp_ones():
    from playground.lab.fit import prediction_score

    flagged = {"trusted": False}
    cells = [
        {"prompt": "a", "k": 1, "miss_empirical": 0.03, "spread": 0.06},  # close, sharp
        {"prompt": "a", "k": 2, "miss_empirical": -0.08, "spread": 0.08},  # sharp, not close
        {"prompt": "b", "k": 1, "miss_empirical": 0.04, "spread": 0.40},  # close, too noisy to count as sharp
        {"prompt": "b", "k": 2, "miss_empirical": -0.20, "spread": 0.50, "trust": flagged},  # past 0.15, flagged
        {"prompt": "c", "k": 4, "miss_empirical": 0.16, "spread": 0.30, "trust": {"trusted": True}},  # past, trusted
        {"prompt": "c", "k": 5, "miss_empirical": None, "spread": 0.1},  # no prediction: not a cell
        {"prompt": "d", "k": 3, "miss_empirical": 0.40, "spread": 0.9,  # past, trusted, its miss named: flagged
         "trust": {"trusted": True, "findings": [{"check": "prediction-miss", "severity": "warn"}]}},
    ]
    score = prediction_score(cells)
    assert (score["cells"], score["close"], score["sharp"], score["sharp_close"], score["far"], score["loose"]) == \
        (6, 2, 2, 1, 3, 1)
    assert (score["worst_prompt"], score["worst_k"], score["worst_miss"]) == ("d", 3, 0.40)
    assert prediction_score([{"miss_empirical": None}]) is None
