"""Adaptive k under an uncertain acceptance rate: the expected products over a Beta posterior (cost.py) and what
they change in the controller against the point estimate's products (a first call drafts deep when its prior is
high; many observations make the two agree; a remembered rate is as certain as the count it rests on)."""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from playground.core import cost
from playground.drafters.adaptive import AdaptiveK, CostCurve
from tests.test_adaptive import it


def point_estimates(ctl, source=None):
    """What the controller's estimates would be at the pooled rate's point estimate: each position's rate shrunk
    towards alpha (the AdaptiveK docstring), with no expectation over alpha's posterior."""
    w, (reached, accepted) = ctl.settings.position_weight, ctl._counts(source)
    return [(a + ctl.alpha(source) * w) / (r + w) for r, a in zip(reached, accepted)]


def point_choice(ctl, curve):
    """The steady k (rule 1) on the point estimate."""
    return cost.best_k(point_estimates(ctl), curve.c, curve.v, k_max=ctl.k_max, overhead=curve.overhead).k


def expected_product(u, s, a, b):
    """E[prod_i (u_i + s_i x)] for x ~ Beta(a, b), by numerical integration (scipy), for comparison."""
    def f(x):
        return math.prod(ui + si * x for ui, si in zip(u, s)) * stats.beta.pdf(x, a, b)
    return integrate.quad(f, 0, 1, limit=200)[0]


@pytest.mark.parametrize("seed", range(6))
def test_the_rates_multiply_to_the_expected_products(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 17))
    s = rng.uniform(0.1, 1.0, k)
    u = rng.uniform(0, 1, k) * (1 - s)  # u + s x <= 1 for x in [0, 1], as a shrunk acceptance is
    a, b = rng.uniform(0.5, 30), rng.uniform(1.0, 10)  # b >= 1 keeps the density bounded for quad
    rates = cost.expected_rates_beta(u, s, a, b)
    assert len(rates) == k and all(0 <= r <= 1 for r in rates)
    for j in range(1, k + 1):
        assert math.prod(rates[:j]) == pytest.approx(expected_product(u[:j], s[:j], a, b), rel=1e-6)
    assert rates[0] == pytest.approx(u[0] + s[0] * a / (a + b))  # the first position: its mean, unchanged


def test_a_certain_rate_gives_the_plain_products():
    u, s = [0.1, 0.0, 0.3], [0.8, 1.0, 0.5]
    assert cost.expected_rates_beta(u, s, 3.0, 0.0) == pytest.approx([0.9, 1.0, 0.8])  # x = 1
    assert cost.expected_rates_beta(u, s, 0.0, 2.0) == pytest.approx([0.1, 0.0, 0.0])  # x = 0: nothing after a 0
    # a very tight Beta around 0.7: the products of the means
    rates = cost.expected_rates_beta(u, s, 0.7e7, 0.3e7)
    assert rates == pytest.approx([ui + si * 0.7 for ui, si in zip(u, s)], rel=1e-5)
    with pytest.raises(ValueError, match="a \\+ b > 0"):
        cost.expected_rates_beta(u, s, 0.0, 0.0)


def test_uncertainty_lifts_the_deep_positions_above_the_point_estimate():
    # nothing observed, prior 0.9 with the weight of 2 observations: E[alpha^j] against 0.9^j
    rates = AdaptiveK(CostCurve(c=0.1, v={1: 1.0}), k_max=16).estimates()
    products = list(itertools.accumulate(rates, lambda x, y: x * y))
    moments = [stats.beta(1.8, 0.2).moment(j) for j in range(1, 17)]
    assert products == pytest.approx(moments, rel=1e-9)
    assert products[0] == pytest.approx(0.9) and products[15] > 2.5 * 0.9 ** 16


CHEAP_RISING = CostCurve(c=0.12, v={n: 1.0 + 0.04 * (n - 1) for n in range(1, 18)})  # a cheap drafter, v rising


def test_a_first_call_drafts_deep_with_a_high_prior_and_shallow_with_a_low_one():
    uncertain = AdaptiveK(CHEAP_RISING)
    assert point_estimates(uncertain) == pytest.approx([0.9] * 16)  # nothing observed: the prior everywhere
    assert uncertain.next_k() >= 12 > point_choice(uncertain, CHEAP_RISING)
    # a low prior (a memory of a poor drafter): still shallow, or plain, either way
    low = {"adaptive": {None: 0.3}}
    assert AdaptiveK(CHEAP_RISING, memory=low).next_k() <= 2


def test_many_observations_make_the_two_estimates_agree():
    pattern = [4, 4, 2, 4, 0, 4, 3, 4]  # accepted of k = 4: about 0.8 per proposal
    uncertain = AdaptiveK(CHEAP_RISING, k_max=8)
    for n in pattern * 6:
        uncertain.observe(it(4, n))
    assert uncertain.estimates()[:4] == pytest.approx(point_estimates(uncertain)[:4], abs=0.01)
    assert uncertain.choice().k == point_choice(uncertain, CHEAP_RISING)


COSTLY = CostCurve(c=0.67, v={n: 1.0 + 0.06 * (n - 1) for n in range(1, 18)})  # an int8 draft's c here


def test_a_remembered_rate_is_as_certain_as_the_count_it_rests_on():
    memory: dict = {}
    first = AdaptiveK(COSTLY, memory=memory)
    for n in [2, 2, 1, 2, 2, 2, 2, 2, 2, 2]:
        first.observe(it(2, n))
    assert memory["adaptive"][None] == pytest.approx(first.alpha())
    assert memory["adaptive_evidence"][None] == pytest.approx(sum(first.counts[None][0]))
    assert memory["adaptive_evidence"][None] > 10
    # the same rate without its count: as wide as a fresh prior, and bet on deep
    bare = AdaptiveK(COSTLY, memory={"adaptive": dict(memory["adaptive"])})
    narrow = AdaptiveK(COSTLY, memory=memory)
    assert narrow.estimates()[0] == pytest.approx(bare.estimates()[0])  # the same mean
    assert math.prod(narrow.estimates()) < math.prod(bare.estimates())  # a narrower spread
    assert narrow.next_k() < bare.next_k()
    assert narrow.decisions[-1] <= point_choice(narrow, COSTLY) + 2  # close to the point estimate's choice


def test_a_remembered_rate_weighs_in_the_mean_as_the_prior_weight():
    """Only the posterior's width takes the remembered count: in the mean the remembered rate weighs as w_p
    observations, so a new text's own observations outweigh it within a few iterations."""
    free = CostCurve(c=0.0, v={n: 1.0 + 0.08 * (n - 1) for n in range(1, 18)})  # prompt lookup: c = 0
    memory: dict = {}
    first = AdaptiveK(free, memory=memory)
    for obs in [(16, 1), (12, 12), (12, 12)]:
        first.observe(it(*obs))
    assert memory["adaptive_evidence"][None] > 2
    again = AdaptiveK(free, memory={k: dict(v) for k, v in memory.items()})
    p = memory["adaptive"][None]
    assert again.alpha() == pytest.approx(p)  # before any observation: the remembered rate
    again.observe(it(16, 1))  # the second call opens with an early miss
    assert again.alpha() == pytest.approx((1 + p * 2) / (2 + 2))
