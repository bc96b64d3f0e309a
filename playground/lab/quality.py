"""Acceptance per output shape, greedy divergence (near-tie or bug?), and whether each acceptance rule keeps
the target's distribution on real models."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from scipy.stats import chisquare

from ..core import cost
from ..core.cached import CachedLM
from ..core.engine import HEADLESS, plain_generate, speculative_generate
from ..core.proposal import RunContext
from ..core.records import Iteration, Step, summarize
from ..core.rules import SAMPLING_RULES, SampleRule
from ..core.sampling import GREEDY, SamplingConfig, probabilities
from ..envinfo import environment
from ..results.quality import (
    AcceptanceResult,
    AcceptanceRow,
    DistributionContext,
    DistributionResult,
    DistributionSummary,
    DivergenceCase,
    DivergenceResult,
    PooledAcceptance,
    RuleSummary,
    RuleTest,
)
from .common import Progress, tick

# --- acceptance: alpha per output shape and k --------------------------------------------------------


def acceptance(pair, prompts: dict[str, tuple[str, Sequence[int], int]], proposer_factory,
               ks: Sequence[int] = (1, 2, 4, 8), sampling: SamplingConfig = GREEDY,
               progress: Progress = None) -> AcceptanceResult:
    """For each prompt (name -> (kind, ids, max_new_tokens)) and k: alpha, per-position acceptance, the
    accepted-length histogram and tokens per target pass, measured and from the iid and empirical models.
    Rows pooled by kind come from the pooled iteration records, not from averaging ratios."""
    rows, by_kind = [], {}
    total, done = len(prompts) * len(ks), 0
    for name, (kind, ids, max_new) in prompts.items():
        for k in ks:
            recs = list(speculative_generate(pair, ids, proposer=proposer_factory(), k=k, sampling=sampling,
                                             max_new_tokens=max_new, options=HEADLESS))
            its = [r for r in recs if isinstance(r, Iteration)]
            rows.append(AcceptanceRow(prompt=name, kind=kind, k=k, **_acceptance_stats(its, k)))
            by_kind.setdefault((kind, k), []).extend(its)
            done += 1
            tick(progress, done / total, f"{name}: k={k}")
    pooled = [PooledAcceptance(kind=kind, k=k, **_acceptance_stats(its, k)) for (kind, k), its in sorted(by_kind.items())]
    return AcceptanceResult(environment=environment(pair), ks=list(ks), sampling=sampling.describe(), rows=rows,
                            pooled=pooled)


def _acceptance_stats(iterations, k: int) -> dict[str, object]:
    """PooledAcceptance's measured fields, by name."""
    # Iterations whose k was cut short by the length limit would bias the per-k statistics: keep full-k ones.
    full = [it for it in iterations if it.k == k and it.proposed]
    s = summarize(full) if full else None
    if s is None or s.alpha is None:
        return {"iterations": 0, "alpha": None}
    positions = [a for a in s.per_position_acceptance if a is not None]
    return {
        "iterations": len(full),
        "alpha": s.alpha,
        "per_position": list(s.per_position_acceptance),
        "histogram": dict(s.accepted_length_histogram),
        "tokens_per_pass": sum(it.n_accepted + 1 for it in full) / len(full),
        "tokens_per_pass_iid": cost.expected_tokens(s.alpha, k),
        "tokens_per_pass_empirical": cost.expected_tokens_empirical(positions, k) if positions else None,
    }


# --- divergence: is a greedy mismatch a near-tie or a bug? ----------------------------------------------


def _spacing(value: float, dtype: torch.dtype) -> float:
    """Distance to the next representable number at `value` in `dtype` (one unit in the last place)."""
    t = torch.tensor(abs(value), dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(float("inf"), dtype=dtype)) - t)


def divergence(pair, prompts: dict[str, Sequence[int]], proposer_factory, ks: Sequence[int] = (1, 2, 3, 4, 6),
               max_new_tokens: int = 64, multi: int = 5, progress: Progress = None) -> DivergenceResult:
    """Greedy speculative against plain greedy. At each first difference, recompute the two competing
    tokens' logits three ways over plain decoding's context: prefill + one-token step, prefill + a
    `multi`-token pass (what verification does), and one full prefill; compare their gap with the
    dtype's spacing at that magnitude and with how much the three recomputations disagree."""
    cases, checked = [], 0
    total, done = len(prompts) * len(ks), 0
    for name, ids in prompts.items():
        plain = [r.token for r in plain_generate(pair, ids, max_new_tokens=max_new_tokens) if isinstance(r, Step)]
        for k in ks:
            spec = [t for r in speculative_generate(pair, ids, proposer=proposer_factory(), k=k,
                                                    max_new_tokens=max_new_tokens, options=HEADLESS)
                    if isinstance(r, Iteration) for t in r.emitted]
            checked += 1
            done += 1
            tick(progress, done / total, f"{name}: k={k}")
            pos = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
            if pos is None:
                continue
            text = (None, None) if pair.tokenizer is None else (pair.tokenizer.decode([plain[pos]]),
                                                                 pair.tokenizer.decode([spec[pos]]))
            cases.append(DivergenceCase(prompt=name, k=k, position=pos, plain_token=plain[pos], spec_token=spec[pos],
                                        plain_text=text[0], spec_text=text[1],
                                        **_recompute(pair, list(ids) + plain[:pos], plain[pos], spec[pos], multi)))
    return DivergenceResult(environment=environment(pair), runs=checked, diverged=len(cases), cases=cases)


def _recompute(pair, context: list[int], a: int, b: int, multi: int) -> dict[str, object]:
    """DivergenceCase's recomputed fields, by name."""
    ways = {}
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed(context[:-1], last_only=True)
    ways["prefill+1"] = lm.feed(context[-1:])[-1]
    m = min(multi, len(context))
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed(context[:-m], last_only=True)
    ways[f"prefill+{m}"] = lm.feed(context[-m:])[-1]
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    ways["full prefill"] = lm.feed(context, last_only=True)[-1]
    gaps = {w: float(row[a] - row[b]) for w, row in ways.items()}
    top = max(float(row.max()) for row in ways.values())
    spacing = _spacing(top, pair.dtype)
    noise = max(abs(float(ways[x][t] - ways[y][t])) for x in ways for y in ways for t in (a, b))
    winners = {w: ("plain" if g > 0 else "speculative" if g < 0 else "tie") for w, g in gaps.items()}
    near_tie = len(set(winners.values())) > 1 or max(abs(g) for g in gaps.values()) <= max(8 * spacing, 2 * noise)
    return {"gaps": gaps, "winners": winners, "top_logit": top, "dtype_spacing": spacing,
            "recompute_disagreement": noise, "verdict": "near-tie" if near_tie else "bug"}


# --- distribution: does each rule keep the target's first-token distribution on real models? -----------


@dataclass(frozen=True)
class DistributionPlan:
    """How `distribution` tests the rules: under `sampling` (None: sampling at temperature 1), `draws` first tokens
    per context, seed and rule, compared over the `top` most likely tokens plus one pooled cell, at the first of
    the prompt and its next `search` greedy tokens where TV(p, q) >= `min_tv`."""

    sampling: SamplingConfig | None = None
    draws: int = 20_000
    seeds: Sequence[int] = (0, 1)
    top: int = 60
    min_tv: float = 0.3
    search: int = 16


def distribution(pair, prompts: dict[str, Sequence[int]], proposer_factory, plan: DistributionPlan = DistributionPlan(),
                 progress: Progress = None) -> DistributionResult:
    """For each prompt, a context where draft and target disagree: the first of the prompt and its next
    `plan.search` greedy tokens where the total-variation distance between p and q (both as sampled: temperature,
    top-k and top-p applied to each) is at least `plan.min_tv`, else the one where it is largest (reported). There,
    `plan.draws` first tokens through each rule (exact and the two wrong ones) are compared with p by chi-square
    over the `plan.top` most likely tokens plus one pooled cell. The power check: a context has power when both
    wrong rules are rejected (p < 0.01) at every seed; a context where they are not is reported as one
    without power, so that a passing exact rule there proves nothing."""
    sampling = plan.sampling or SamplingConfig(do_sample=True)
    results, contexts = [], {}
    total, done = len(prompts) * len(plan.seeds) * len(SAMPLING_RULES), 0
    for name, ids in prompts.items():
        ids, p, q, tv, position = _disagreeing_context(pair, [int(t) for t in ids], proposer_factory, sampling,
                                                       plan.min_tv, plan.search)
        contexts[name] = DistributionContext(position=position, tv_distance_p_q=tv, context_tokens=len(ids))
        p_value = _rule_tester(pair, p, q, plan)
        for seed in plan.seeds:
            for rule_name, rule in SAMPLING_RULES.items():
                results.append(RuleTest(prompt=name, seed=seed, rule=rule_name, p_value=p_value(rule, seed),
                                        tv_distance_p_q=tv, draws=plan.draws))
                done += 1
                tick(progress, done / total, f"{name}: seed {seed}, {rule_name}")
    for name, ctx in contexts.items():
        wrong = [r for r in results if r.prompt == name and r.rule != "exact"]
        ctx.power = bool(wrong) and all(r.p_value < 0.01 for r in wrong)
    return DistributionResult(environment=environment(pair), sampling=sampling.describe(), draws=plan.draws,
                              seeds=list(plan.seeds), min_tv=plan.min_tv, contexts=contexts, results=results,
                              summary=_summary(contexts, results),
                              note="p-values of the exact rule should look uniform; the wrong rules' should be tiny "
                                   "wherever tv_distance_p_q is not small.")


def _rule_tester(pair, p: torch.Tensor, q: torch.Tensor | None, plan: DistributionPlan
                 ) -> Callable[[SampleRule, int], float]:
    """p_value(rule, seed): the chi-square p-value of `plan.draws` first tokens through `rule` (x ~ q proposed, the
    rule decides) against p, over p's `plan.top` most likely tokens plus one pooled cell."""
    draws = plan.draws
    cells = torch.argsort(p, descending=True)[:plan.top]
    expected = torch.cat([p[cells], (1 - p[cells].sum()).clamp(min=0).unsqueeze(0)]).double().cpu().numpy()
    rows = torch.stack([p, p])
    qs = q.unsqueeze(0) if q is not None else None

    def p_value(rule: SampleRule, seed: int) -> float:
        gen = torch.Generator(device=pair.device).manual_seed(seed)
        if q is not None:
            xs = torch.multinomial(q, draws, replacement=True, generator=gen).tolist()
        else:
            xs = [int(torch.argmax(p))] * draws  # a deterministic proposer proposes one token
        counts = torch.zeros(p.shape[0], dtype=torch.long)
        for x in xs:
            v = rule([x], rows, qs, gen)
            counts[x if v.n_accepted == 1 else v.token] += 1
        observed = torch.cat([counts[cells.cpu()], (draws - counts[cells.cpu()].sum()).unsqueeze(0)]).numpy()
        exp = expected * draws
        keep = exp > 0
        return float(chisquare(observed[keep], exp[keep] * observed[keep].sum() / exp[keep].sum()).pvalue)

    return p_value


def _summary(contexts: dict[str, DistributionContext], results: list[RuleTest]) -> DistributionSummary:
    by_rule = {}
    for rule_name in SAMPLING_RULES:
        ps = [r.p_value for r in results if r.rule == rule_name]
        by_rule[rule_name] = RuleSummary(tests=len(ps), below_001=sum(x < 0.01 for x in ps),
                                         below_005=sum(x < 0.05 for x in ps), min_p=min(ps))
    return DistributionSummary.of(contexts_with_power=sum(c.power for c in contexts.values()),
                                  contexts=len(contexts),
                                  without_power=[n for n, c in contexts.items() if not c.power], by_rule=by_rule)


def _disagreeing_context(pair, prompt: list[int], proposer_factory, sampling: SamplingConfig, min_tv: float,
                         search: int):
    """(context, p, q, tv, position): the first context among the prompt and its next `search` greedy tokens
    where TV(p, q) >= min_tv, else the one with the largest TV. q is None for a deterministic proposer."""
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    logits = lm.feed(prompt, last_only=True)[-1]
    ctx, best = list(prompt), None
    for position in range(search + 1):
        p = probabilities(logits.unsqueeze(0), sampling)[0]
        proposer = proposer_factory()
        proposer.begin(ctx, RunContext(sampling, sampling.generator(pair.device), frozenset()))
        q_rows = proposer.propose(ctx, 1).q
        q = q_rows[0] if q_rows is not None else None
        if q is None:  # a point mass: nothing to search for
            return list(ctx), p, None, None, position
        tv = 0.5 * float((p - q).abs().sum())
        if best is None or tv > best[3]:
            best = (list(ctx), p, q, tv, position)
        if tv >= min_tv or position == search:
            break
        nxt = int(torch.argmax(logits))
        if nxt in pair.eos_ids:
            break
        ctx.append(nxt)
        logits = lm.feed([nxt])[-1]
    return best
