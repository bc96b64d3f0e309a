"""The cost model: arithmetic only, no timing, no torch.

Units: one plain target step (a target pass over 1 token) costs 1.
  c      the draft's step cost relative to the target's step (draft step / target step)
  v(n)   a target pass over n tokens relative to the target's step (a plain step, v(1) ~ 1; a pass right
         after the drafter ran can cost a little more: lab.calibrate measures both). Verification of k
         proposals is a pass over k + 1 tokens (the pending token plus the proposals).
  alpha  the probability that a proposal is accepted, given the ones before it were.

An iteration emits E tokens for a cost of k*c + v(k + 1) (+ a per-iteration overhead o, e.g. the
rollback), where plain decoding would emit 1 token per unit, so the predicted speed-up is
E / (k*c + v(k+1) + o).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

VerifyCost = Callable[[int], float] | Mapping[int, float] | Sequence[float] | None


def verify_cost(v: VerifyCost, n: int) -> float:
    """v(n): from a callable, a mapping {n: cost}, a sequence [v(1), v(2), ...], or None (flat: 1).

    A measured table is extended past its last entry by the slope of its last two points, so a
    prediction at a k beyond the calibration never pretends verification got free."""
    if n < 1:
        raise ValueError(f"a target pass covers at least 1 token, got n={n}")
    if v is None:
        return 1.0
    if callable(v):
        return float(v(n))
    if isinstance(v, Mapping) and n in v:  # the usual case, without copying the table
        return float(v[n])
    table = dict(v) if isinstance(v, Mapping) else {i + 1: x for i, x in enumerate(v)}
    if not table:
        return 1.0
    if n in table:
        return float(table[n])
    known = sorted(table)
    if n < known[0]:
        return float(table[known[0]])
    lo = max(m for m in known if m < n)
    hi = [m for m in known if m > n]
    if hi:  # interpolate between neighbours
        h = hi[0]
        return float(table[lo] + (table[h] - table[lo]) * (n - lo) / (h - lo))
    if len(known) == 1:
        return float(table[lo])
    a, b = known[-2], known[-1]
    slope = max(0.0, (table[b] - table[a]) / (b - a))
    return float(table[b] + slope * (n - b))


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per iteration with k proposals and iid acceptance alpha: (1 - alpha^(k+1)) / (1 - alpha)."""
    _check_alpha(alpha)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_empirical(per_position: Sequence[float], k: int) -> float:
    """Expected tokens per iteration from measured per-position acceptance.

    per_position[i] is P(proposal i+1 accepted | proposals 1..i accepted). E = 1 + sum_j prod_{i<=j} a_i.
    Positions beyond the measured ones reuse the last measured rate. Equals `expected_tokens` when
    every entry is the same alpha."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k and not per_position:
        raise ValueError("no per-position acceptance measured")
    total, survive = 1.0, 1.0
    for j in range(k):
        a = per_position[min(j, len(per_position) - 1)]
        _check_alpha(a)
        survive *= a
        total += survive
    return total


def expected_rates_beta(offsets: Sequence[float], slopes: Sequence[float], a: float, b: float) -> list[float]:
    """Per-position rates r_1..r_k whose running products are expectations over an uncertain pooled rate x.

    Position i's acceptance is u_i + s_i x (offsets u, slopes s, both >= 0) and x ~ Beta(a, b) (a, b >= 0,
    a + b > 0; b = 0 puts x at 1, a = 0 at 0). Returns r_j = E[P_j] / E[P_(j-1)] with P_j = prod_(i<=j) (u_i + s_i x),
    so that prod_(i<=j) r_i = E[P_j]: what the expected tokens of an iteration need. With an uncertain rate this is
    more than the product of the means (Jensen: E[x^j] > E[x]^j), which is what makes deep drafting worth trying
    when little has been observed. Written out because it is exact and O(k^2) (P_j is a polynomial in x and
    E[x^n] = prod_(t<n) (a + t) / (a + b + t)); scipy's Beta moments refuse b = 0."""
    if not (a >= 0 and b >= 0 and a + b > 0):
        raise ValueError(f"need a, b >= 0 with a + b > 0, got a={a}, b={b}")
    moments = [1.0]
    for t in range(len(offsets)):
        moments.append(moments[-1] * (a + t) / (a + b + t))
    poly, previous, rates = [1.0], 1.0, []
    for u, s in zip(offsets, slopes):
        nxt = [0.0] * (len(poly) + 1)
        for i, coef in enumerate(poly):  # (sum_i coef_i x^i) (u + s x); every coefficient stays >= 0
            nxt[i] += coef * u
            nxt[i + 1] += coef * s
        poly = nxt
        expected = sum(coef * m for coef, m in zip(poly, moments))
        rates.append(min(1.0, expected / previous) if previous > 0 else 0.0)
        previous = expected
    return rates


def iteration_cost(k: int, c: float, v: VerifyCost = None, overhead: float = 0.0) -> float:
    """Cost of one iteration in target steps: k draft steps plus one target pass over k + 1 tokens."""
    if c < 0:
        raise ValueError(f"draft cost ratio c must be >= 0, got {c}")
    return k * c + verify_cost(v, k + 1) + overhead


def predicted_speedup(alpha: float, k: int, c: float, v: VerifyCost = None, overhead: float = 0.0) -> float:
    """Speed-up over plain decoding (tokens per second ratio) under iid acceptance alpha."""
    return expected_tokens(alpha, k) / iteration_cost(k, c, v, overhead)


def predicted_speedup_empirical(
    per_position: Sequence[float], k: int, c: float, v: VerifyCost = None, overhead: float = 0.0
) -> float:
    return expected_tokens_empirical(per_position, k) / iteration_cost(k, c, v, overhead)


def predicted_speedup_lengths(lengths: Mapping[int, float], per_position: Sequence[float], c: float,
                              v: VerifyCost = None, overhead: float = 0.0) -> float:
    """Speed-up over plain decoding of a drafter whose proposals vary in length, from how often it drafted each
    length (`lengths`: {tokens drafted: iterations}) and the per-position acceptance.

    The fixed-k formulas charge every iteration k drafts and credit it k chances; a model-free drafter proposes
    nothing where it finds no match and fewer than k where its match is short, and per-position acceptance does not
    fall when an iteration drafts nothing (those positions are never reached). So each length is priced as it
    runs: d drafted tokens emit expected_tokens_empirical(per_position, d) (1 for d = 0, a plain step) for
    iteration_cost(d) target steps, and the speed-up is all the expected tokens over all the steps."""
    total = sum(lengths.values())
    if total <= 0:
        raise ValueError("no iterations to price")
    tokens = sum(n * expected_tokens_empirical(per_position, int(d)) for d, n in lengths.items())
    steps = sum(n * iteration_cost(int(d), c, v, overhead) for d, n in lengths.items())
    return tokens / steps


def predicted_speedup_finite(per_position: Sequence[float], k: int, c: float, v: VerifyCost, new_tokens: int,
                             overhead: float = 0.0, limit: int | None = None) -> float:
    """Speed-up over plain decoding for a run of `new_tokens` tokens, as the loop runs it.

    The steady-state formulas assume every iteration drafts k; a finite run clips k to the tokens still
    wanted (the loop never drafts what it could not emit), so its last iterations are shorter: with every
    proposal accepted, a 40-token answer at k = 8 takes passes of 9, 9, 9, 9 and 4 tokens, 8 per pass,
    not 9. This walks the run in expectation:
    k_i = min(k, remaining - 1) (0 = a plain step), E(k_i) tokens for k_i*c + v(k_i + 1) + overhead
    target steps, until `new_tokens` are out; plain decoding pays one step per token.

    `limit`: the run's length limit, for a run that ended on a stop token before it (an EOS). The loop cannot
    see that end coming: it clips k to the limit, not to the stop token, and its last iteration drafts up to the
    stop token (a drafter stops there) and gets no bonus token after it, so r tokens cost r*c + v(r + 1) (on a
    grid where most runs ended on an EOS this halved the cells' mean miss)."""
    if new_tokens < 1:
        raise ValueError(f"a run has at least 1 new token, got {new_tokens}")
    stop = limit is not None and limit > new_tokens
    end = limit if stop else new_tokens
    remaining, spent = float(new_tokens), 0.0
    while remaining > 1e-9:
        k_i = max(0, min(k, math.ceil(end - new_tokens + remaining - 1e-9) - 1))
        if k_i == 0:
            gained, step = 1.0, 1.0
        elif stop and remaining <= k_i + 1e-9:  # the stop token within reach: drafted up to it, no bonus
            gained, step = remaining, iteration_cost(math.ceil(remaining - 1e-9), c, v, overhead)
        else:
            gained = expected_tokens_empirical(per_position, k_i)
            step = iteration_cost(k_i, c, v, overhead)
        spent += step
        remaining -= min(gained, remaining)
    return new_tokens / spent


def break_even_alpha(k: int, c: float, v: VerifyCost = None, overhead: float = 0.0, tol: float = 1e-10) -> float | None:
    """The alpha at which speculation with k proposals exactly matches plain decoding.

    None when it cannot pay at any alpha (the iteration costs more than k + 1 plain steps).
    Expected tokens rise monotonically in alpha, so bisection finds the single crossing."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    cost = iteration_cost(k, c, v, overhead)
    if cost >= k + 1:
        return None
    if cost <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < cost:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class KChoice:
    k: int
    speedup: float
    table: tuple[tuple[int, float], ...]  # (k, predicted speed-up) for every k considered


def best_k(
    alpha: float | Sequence[float], c: float, v: VerifyCost = None, k_max: int = 8, overhead: float = 0.0
) -> KChoice:
    """The k in 0..k_max with the highest predicted speed-up (k = 0 is plain decoding: 1.0).

    alpha is an iid rate or a per-position acceptance sequence (the empirical model)."""
    rows = [(0, 1.0)]
    for k in range(1, k_max + 1):
        if isinstance(alpha, (int, float)):
            s = predicted_speedup(alpha, k, c, v, overhead)
        else:
            s = predicted_speedup_empirical(alpha, k, c, v, overhead)
        rows.append((k, s))
    k, s = max(rows, key=lambda r: (r[1], -r[0]))  # ties go to the smaller k
    return KChoice(k, s, tuple(rows))


def drafts_on(reached: float, rates: Sequence[float], drafted: int, c: float, v: VerifyCost, rate: float) -> bool:
    """Mid-iteration: whether drafting past the `drafted` proposals made so far pays.

    reached: the chance that all of them are accepted; rates: the conditional acceptance of the positions after
    them (as many as may still be drafted); rate: the tokens per target step the drafting earns on the whole (the
    steady choice's speed-up). Drafting on to m > drafted proposals adds sum_{j=1..m-drafted} reached *
    prod(rates[:j]) expected tokens for (m - drafted) * c + v(m + 1) - v(drafted + 1) more steps. In the long run
    an iteration's steps are worth `rate` tokens each wherever they are spent (renewal reward), so drafting on
    pays when some m adds more tokens than `rate` times its steps; what was spent already does not enter."""
    base, gain, survive = verify_cost(v, drafted + 1), 0.0, reached
    for extra, a in enumerate(rates, start=1):
        _check_alpha(a)
        survive *= a
        gain += survive
        if gain > rate * (extra * c + verify_cost(v, drafted + extra + 1) - base):
            return True
    return False


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"an acceptance rate is in [0, 1], got {alpha}")
