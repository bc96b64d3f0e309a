"""The cost model is arithmetic: tested without timing anything."""

import math

import pytest

from playground.core import cost


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_alpha_one_gives_k_plus_one_tokens(k):
    assert cost.expected_tokens(1.0, k) == k + 1
    assert math.isclose(cost.expected_tokens(1 - 1e-12, k), k + 1, rel_tol=1e-6)


@pytest.mark.parametrize("k", [0, 1, 4])
def test_alpha_zero_gives_one_token(k):
    assert cost.expected_tokens(0.0, k) == 1.0


def test_geometric_series_by_hand():
    # 1 + a + a^2 at a = 0.5, k = 2
    assert math.isclose(cost.expected_tokens(0.5, 2), 1.75)


def test_empirical_model_equals_iid_when_acceptance_is_iid():
    for alpha in (0.0, 0.3, 0.85, 1.0):
        for k in range(9):
            assert math.isclose(cost.expected_tokens_empirical([alpha] * 8, k), cost.expected_tokens(alpha, k))


def test_empirical_model_by_hand_and_extension():
    # accepts position 1 with 0.9, position 2 with 0.5: E = 1 + 0.9 + 0.45
    assert math.isclose(cost.expected_tokens_empirical([0.9, 0.5], 2), 2.35)
    # a third position reuses the last measured rate: + 0.45 * 0.5
    assert math.isclose(cost.expected_tokens_empirical([0.9, 0.5], 3), 2.575)


def test_seed_chapter_figure():
    # The seed chapter: c = 0.38 and flat verification give 1.47x at alpha = 0.85, k = 4.
    assert round(cost.predicted_speedup(0.85, 4, 0.38), 2) == 1.47


@pytest.mark.parametrize("k,c", [(1, 0.56), (2, 0.56), (4, 0.3), (6, 0.1)])
def test_break_even_is_where_speedup_is_one(k, c):
    v = {1: 1.0, 2: 1.08, 3: 1.16, 5: 1.6, 7: 1.9}
    a = cost.break_even_alpha(k, c, v)
    assert a is not None
    assert math.isclose(cost.predicted_speedup(a, k, c, v), 1.0, rel_tol=1e-7)
    assert cost.predicted_speedup(min(1.0, a + 0.05), k, c, v) > 1.0
    assert cost.predicted_speedup(max(0.0, a - 0.05), k, c, v) < 1.0


def test_break_even_rises_with_k_and_with_draft_cost():
    assert cost.break_even_alpha(1, 0.5) < cost.break_even_alpha(2, 0.5) < cost.break_even_alpha(4, 0.5)
    assert cost.break_even_alpha(2, 0.2) < cost.break_even_alpha(2, 0.5)


def test_no_break_even_when_the_draft_is_too_expensive():
    assert cost.break_even_alpha(2, 1.0) is None  # 2 draft steps + 1 pass = 3 = k + 1: can never win
    assert cost.break_even_alpha(3, 1.5) is None


def test_free_draft_and_free_verification_break_even_at_zero():
    assert cost.break_even_alpha(4, 0.0) == 0.0


def test_verify_cost_table_interpolates_and_extends_by_last_slope():
    v = {1: 1.0, 3: 1.2, 5: 1.6}
    assert cost.verify_cost(v, 2) == pytest.approx(1.1)
    assert cost.verify_cost(v, 7) == pytest.approx(2.0)
    assert cost.verify_cost([1.0, 1.1], 4) == pytest.approx(1.3)
    assert cost.verify_cost(None, 9) == 1.0
    assert cost.verify_cost(lambda n: 1 + 0.1 * n, 3) == pytest.approx(1.3)


def test_best_k_prefers_plain_when_nothing_pays_and_long_k_when_everything_does():
    assert cost.best_k(0.1, 0.6).k == 0
    assert cost.best_k(1.0, 0.05, k_max=8).k == 8
    choice = cost.best_k(0.85, 0.56, v={1: 1.0, 2: 1.05, 3: 1.1, 5: 1.2, 9: 1.3}, k_max=6)
    assert choice.speedup == max(s for _, s in choice.table)
    assert 1 <= choice.k <= 4


def test_bad_inputs():
    with pytest.raises(ValueError):
        cost.expected_tokens(1.2, 2)
    with pytest.raises(ValueError):
        cost.expected_tokens(0.5, -1)
    with pytest.raises(ValueError):
        cost.iteration_cost(2, -0.1)
    with pytest.raises(ValueError):
        cost.verify_cost(None, 0)


def test_finite_run_clips_its_last_iterations_like_the_loop():
    # alpha = 1, free drafts, flat verification: 38 tokens at k = 8 are 4 passes of 9 and one of 2.
    assert cost.predicted_speedup_finite([1.0], 8, 0.0, None, 38) == pytest.approx(38 / 5)
    # one token is one plain step, whatever k
    assert cost.predicted_speedup_finite([0.9], 4, 0.2, None, 1) == pytest.approx(1.0)
    # a long run approaches the steady state
    steady = cost.predicted_speedup_empirical([0.9, 0.8, 0.7], 3, 0.2, {1: 1, 2: 1.1, 3: 1.2, 4: 1.5}, 0.1)
    long = cost.predicted_speedup_finite([0.9, 0.8, 0.7], 3, 0.2, {1: 1, 2: 1.1, 3: 1.2, 4: 1.5}, 100_000, 0.1)
    assert long == pytest.approx(steady, rel=1e-3)
    # and a short one is slower than the steady state
    assert cost.predicted_speedup_finite([0.9], 6, 0.2, None, 20) < cost.predicted_speedup_empirical([0.9], 6, 0.2)
    with pytest.raises(ValueError):
        cost.predicted_speedup_finite([0.9], 4, 0.2, None, 0)


def test_a_run_that_ends_on_a_stop_token_pays_its_last_iteration_as_the_loop_does():
    v = {n: 1 + 0.1 * (n - 1) for n in range(1, 10)}
    # 26 tokens at k = 4, every proposal accepted: five passes of 5 tokens, then 1 token left.
    cut = 5 * (4 * 0.5 + v[5]) + 1.0  # cut at its length limit: the last token is a plain step
    assert cost.predicted_speedup_finite([1.0], 4, 0.5, v, 26) == pytest.approx(26 / cut)
    assert cost.predicted_speedup_finite([1.0], 4, 0.5, v, 26, limit=26) == pytest.approx(26 / cut)
    # ended on an EOS under a limit of 64: the loop drafted up to the EOS (1 token) and verified 2, no bonus
    eos = 5 * (4 * 0.5 + v[5]) + (0.5 + v[2])
    assert cost.predicted_speedup_finite([1.0], 4, 0.5, v, 26, limit=64) == pytest.approx(26 / eos)
    # the loop clips k to the limit, not to the EOS: 10 tokens under a limit of 12 at k = 8 are a pass of 9,
    # then k = 2 (3 tokens left to the limit), of which the EOS is the first
    assert cost.predicted_speedup_finite([1.0], 8, 0.5, v, 10, limit=12) == pytest.approx(
        10 / ((8 * 0.5 + v[9]) + (0.5 + v[2])))
    assert cost.predicted_speedup_finite([1.0], 8, 0.5, v, 10) == pytest.approx(10 / ((8 * 0.5 + v[9]) + 1.0))


def test_drafting_on_pays_when_its_tokens_beat_what_the_steps_earn_elsewhere():
    flat = {n: 1.0 for n in range(1, 20)}
    # two drafted, both accepted with chance 0.8; the next at 0.9 adds 0.72 tokens for c = 0.3 more steps
    assert cost.drafts_on(0.8, [0.9], 2, 0.3, flat, rate=2.0)  # 0.72 > 2.0 * 0.3
    assert not cost.drafts_on(0.8, [0.9], 2, 0.3, flat, rate=2.5)  # 0.72 < 2.5 * 0.3
    assert not cost.drafts_on(0.0, [1.0] * 8, 2, 0.01, flat, rate=1.0)  # a rejected prefix: nothing to gain
    assert not cost.drafts_on(1.0, [], 16, 0.0, flat, rate=1.0)  # nothing left to draft
    # what was spent does not enter: the same chance and rates decide alike after 1 or 6 proposals
    assert cost.drafts_on(0.5, [0.9], 1, 0.2, flat, rate=2.0) == cost.drafts_on(0.5, [0.9], 6, 0.2, flat, rate=2.0)


def test_drafting_on_looks_past_a_dear_next_pass():
    """A pass over 4 tokens costs 0.6 more than one over 3, one over 5 no more: one proposal more does not pay
    for the jump, two do."""
    v = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.6, 5: 1.6, 6: 2.4}
    assert cost.drafts_on(1.0, [1.0, 1.0], 2, 0.1, v, rate=1.5)  # m = 4: 2 tokens > 1.5 * (0.2 + 0.6)
    assert not cost.drafts_on(1.0, [1.0], 2, 0.1, v, rate=1.5)  # m = 3 only: 1 token < 1.5 * (0.1 + 0.6)
    with pytest.raises(ValueError):
        cost.drafts_on(1.0, [1.2], 2, 0.1, v, rate=1.5)


def test_a_drafter_of_variable_length_is_priced_by_the_lengths_it_drafted():
    """Half the iterations draft nothing (a plain step: 1 token for 1 step), half draft 4, all accepted, c = 0 and
    a flat verification: (1 + 5) tokens over (1 + 1) steps = 3x, where the fixed-k formula, crediting every
    iteration 4 drafts, says 5x. One length only is the fixed-k formula."""
    from playground.core.cost import predicted_speedup_empirical, predicted_speedup_lengths

    assert predicted_speedup_lengths({0: 5, 4: 5}, [1.0] * 4, 0.0) == pytest.approx(3.0)
    assert predicted_speedup_empirical([1.0] * 4, 4, 0.0) == pytest.approx(5.0)
    v = {n: 1.0 + 0.1 * (n - 1) for n in range(1, 18)}
    assert predicted_speedup_lengths({3: 7}, [0.9, 0.8, 0.7], 0.3, v, 0.02) == pytest.approx(
        predicted_speedup_empirical([0.9, 0.8, 0.7], 3, 0.3, v, 0.02))
    with pytest.raises(ValueError, match="no iterations"):
        predicted_speedup_lengths({}, [1.0], 0.0)
