"""Acceptance rules on hand-built inputs whose answer is known, and on synthetic distributions."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from playground.core.rules import (
    Decision,
    accept_greedy,
    accept_keep_draft,
    accept_resample_target,
    accept_sample,
    residual,
)

# Six tokens; p and q disagree a lot (total variation 0.5), so a wrong rule has to show.
P = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.30, 0.10], dtype=torch.float64)
Q = torch.tensor([0.40, 0.30, 0.05, 0.10, 0.05, 0.10], dtype=torch.float64)


def one_hot_logits(best: list[int], vocab: int = 6) -> torch.Tensor:
    logits = torch.zeros(len(best), vocab)
    for i, b in enumerate(best):
        logits[i, b] = 5.0
    return logits


class TestGreedy:
    def test_all_accepted_gives_bonus(self):
        assert accept_greedy([1, 2, 3], one_hot_logits([1, 2, 3, 4])) == Decision(3, 4)

    def test_first_mismatch_gives_correction(self):
        assert accept_greedy([1, 5, 3], one_hot_logits([1, 2, 3, 4])) == Decision(1, 2)

    def test_first_token_rejected(self):
        assert accept_greedy([0], one_hot_logits([2, 4])) == Decision(0, 2)

    def test_no_proposals_is_a_plain_step(self):
        assert accept_greedy([], one_hot_logits([3])) == Decision(0, 3)

    def test_bonus_flag(self):
        assert Decision(3, 4).is_bonus(3) and not Decision(1, 2).is_bonus(3)


def test_residual_is_normalised_positive_part():
    r = residual(P, Q, proposal=0)
    expected = torch.clamp(P - Q, min=0)
    assert torch.allclose(r, expected / expected.sum())
    assert r[0] == 0 and r[1] == 0  # where q >= p the residual is empty


def test_residual_of_deterministic_proposal_removes_it():
    r = residual(P, None, proposal=2)
    assert r[2] == 0
    expected = P.clone()
    expected[2] = 0
    assert torch.allclose(r, expected / expected.sum())


def first_tokens(rule, p, q, n, seed, deterministic_x=None):
    """Draw n first tokens through `rule` at a single position: x ~ q proposed, then the rule decides."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.stack([p, p])  # row 0 checks the proposal, row 1 would give the bonus
    counts = np.zeros(len(p), dtype=np.int64)
    for _ in range(n):
        if deterministic_x is None:
            x = int(torch.multinomial(q, 1, generator=gen))
            v = rule([x], rows, q.unsqueeze(0), gen)
        else:
            x = deterministic_x
            v = rule([x], rows, None, gen)
        counts[x if v.n_accepted == 1 else v.token] += 1
    return counts


def chi2_pvalue(counts, p):
    expected = p.numpy() * counts.sum()
    return chisquare(counts, expected).pvalue


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_rule_keeps_the_target_distribution(seed):
    counts = first_tokens(accept_sample, P, Q, 20_000, seed)
    assert chi2_pvalue(counts, P) > 0.001


def test_exact_rule_with_a_deterministic_proposal_keeps_the_target_distribution():
    counts = first_tokens(accept_sample, P, None, 20_000, seed=3, deterministic_x=4)
    assert chi2_pvalue(counts, P) > 0.001


@pytest.mark.parametrize("rule", [accept_resample_target, accept_keep_draft])
def test_wrong_rules_fail_the_same_test(rule):
    counts = first_tokens(rule, P, Q, 20_000, seed=0)
    assert chi2_pvalue(counts, P) < 1e-6


def test_draft_equal_to_target_accepts_every_proposal():
    gen = torch.Generator().manual_seed(0)
    rows = P.repeat(5, 1)
    for _ in range(500):
        props = torch.multinomial(P, 4, replacement=True, generator=gen).tolist()
        v = accept_sample(props, rows, P.repeat(4, 1), gen)
        assert v.n_accepted == 4


def test_acceptance_rate_is_sum_of_min_p_q():
    """P(accept) = sum_x min(p(x), q(x)) (= 1 - total variation distance)."""
    gen = torch.Generator().manual_seed(5)
    rows = torch.stack([P, P])
    n, accepted = 20_000, 0
    for _ in range(n):
        x = int(torch.multinomial(Q, 1, generator=gen))
        accepted += accept_sample([x], rows, Q.unsqueeze(0), gen).n_accepted
    expected = float(torch.minimum(P, Q).sum())  # 0.5
    assert abs(accepted / n - expected) < 4 * (expected * (1 - expected) / n) ** 0.5


def test_rules_are_reproducible_with_a_seeded_generator():
    a = first_tokens(accept_sample, P, Q, 300, seed=9)
    b = first_tokens(accept_sample, P, Q, 300, seed=9)
    assert (a == b).all()


def test_draw_follows_the_weights_and_never_draws_a_zero_one(monkeypatch):
    """The one-token sampler every rule, drafter and plain step uses (core.sampling.draw: an inverse CDF, in place
    of torch.multinomial): chi-square against the weights, top-k style zeros, an unnormalised residual."""
    from playground.core.sampling import draw

    g = torch.Generator().manual_seed(3)
    w = torch.rand(40, generator=g)
    w[torch.randperm(40, generator=g)[:15]] = 0.0  # zeros inside and, likely, at the end
    w[-1] = 0.0
    n = 20_000
    counts = np.bincount([draw(w * 3.7, g) for _ in range(n)], minlength=40)  # weights need not sum to 1
    assert counts[(w == 0).numpy()].sum() == 0
    keep = (w > 0).numpy()
    expected = (w / w.sum()).double().numpy()[keep]
    expected = expected / expected.sum() * n
    assert chisquare(counts[keep], expected).pvalue > 1e-3
    # u * total rounding up to the total: the last token with weight, not a zero-weight one after it
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.ones(1, dtype=torch.float64))
    assert draw(torch.tensor([0.2, 0.8, 0.0, 0.0]), g) == 1
