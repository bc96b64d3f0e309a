"""Constrained sampling keeps the grammar-conditional distribution of the target: p and q are both masked and
renormalised before the exact rule.

Nine-token byte-level tokenizers (what llguidance reads, as it reads SmolLM2's) and two small schemas: an integer,
whose first token is free among several legal ones (the first draft position decides), and a string, whose first
token is forced (the quote: the second draft position decides, as every masked first proposal is kept). A random
draft puts much of its mass on tokens the grammar refuses. The loop's first three tokens at k = 2 (both proposals
drafted in the first iteration) are compared by chi-square with the exact joint distribution, enumerated over the
legal tokens with the target's masked, renormalised probabilities. The same harness fails the variant that masks
only the target's p (the draft samples its unmasked q; the loop cuts the proposal at its first refused token) and
the variant that masks q at the first draft position only: the test has power at every draft position. Measured
(these 6,000 seeds): p = 0.26 and 0.74 for the exact rule, against 7.0e-7 and 3.8e-10 for the target-only mask
(caught after 1,500 and 4,500 runs: a wrong variant stops once caught) and 4.9e-6 for q masked at the first position
only (all 6,000).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from playground.constraints.grammar import Grammar
from playground.constraints.guide import restrict
from playground.core.engine import LoopOptions, speculative_generate
from playground.core.records import Iteration
from playground.core.sampling import SamplingConfig, probabilities
from playground.drafters.proposers import DraftModelProposer
from tests.test_engine import first_catch
from tests.tiny import tiny_model, tiny_pair

EOS = 8
SCENARIOS = {  # name: (vocabulary, the tokenizer's merges, schema); <eos> last, token 8
    "free first position": (["1", "2", "3", "12", "23", "-", "x", "y", "<eos>"], [("1", "2"), ("2", "3")],
                            {"type": "integer", "minimum": -99, "maximum": 999}),
    "forced first position": (['"', "a", "b", "c", 'a"', 'b"', 'c"', "x", "<eos>"], [("a", '"'), ("b", '"'), ("c", '"')],
                              {"enum": ["a", "b", "c", "aa", "ab", "ba", "bc", "ca", "cc"]}),
}
PROMPT = [7, 1, 2]
N = 3


def tiny_tokenizer(vocab: list[str], merges) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(vocab)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(vocab=9, seed=10, layers=1, hidden=16, scale=0.6)
    draft = tiny_model(vocab=9, seed=11, layers=1, hidden=16, scale=0.6)
    return tiny_pair(target, draft, eos_ids=(EOS,))


def exact_joint(pair, grammar) -> dict[tuple[int, ...], float]:
    """The target's distribution of the loop's first N tokens under the grammar: each step's probabilities masked by
    what the grammar allows and renormalised; a sequence ends where the grammar is complete or at an end of
    sequence."""
    guide = grammar.guide(PROMPT, 9, {EOS})
    out, frontier = {}, [((), 1.0)]
    sampling = SamplingConfig(do_sample=True)
    with torch.no_grad():
        while frontier:
            seq, mass = frontier.pop()
            if len(seq) == N or (seq and (seq[-1] == EOS or guide.done([*PROMPT, *seq]))):
                out[seq] = out.get(seq, 0.0) + mass
                continue
            logits = pair.target(torch.tensor([[*PROMPT, *seq]])).logits[0, -1]
            p = probabilities(restrict(logits, guide.allowed([*PROMPT, *seq])).unsqueeze(0), sampling)[0]
            frontier.extend(((*seq, x), mass * float(p[x])) for x in range(9) if p[x] > 0)
    return out


class TargetOnlyMask(DraftModelProposer):
    """WRONG: the draft samples its unmasked q; only the target's p is masked (the loop still cuts the proposal at
    its first token the grammar refuses)."""

    def propose(self, tokens, k):
        guide, self.ctx.guide = self.ctx.guide, None
        try:
            return super().propose(tokens, k)
        finally:
            self.ctx.guide = guide


class _FirstPositionOnly:
    def __init__(self, guide, committed: int):
        self.guide, self.committed = guide, committed

    def allowed(self, tokens):
        mask = self.guide.allowed(tokens)
        return mask if len(tokens) <= self.committed else torch.ones_like(mask)


class MaskFirstPositionOnly(DraftModelProposer):
    """WRONG past the first draft position only: q is masked for the first proposal, unmasked after it."""

    def propose(self, tokens, k):
        guide = self.ctx.guide
        self.ctx.guide = _FirstPositionOnly(guide, len(tokens))
        try:
            return super().propose(tokens, k)
        finally:
            self.ctx.guide = guide


def loop_counts(pair, grammar, proposer_class, seeds: range, judged: Counter) -> Counter:
    counts = Counter()
    proposer = proposer_class(pair.draft, "cpu", None, forward="lean")
    options = LoopOptions(constraint=grammar, record_probs=False)
    for seed in seeds:
        records = [r for r in speculative_generate(pair, PROMPT, proposer=proposer, k=2, max_new_tokens=N,
                                                   sampling=SamplingConfig(do_sample=True, seed=seed), options=options)
                   if isinstance(r, Iteration)]
        counts[tuple(t for r in records for t in r.emitted)] += 1
        judged.update((len(r.proposed), r.n_accepted) for r in records[:1])
    return counts


def chi2(counts: Counter, joint: dict) -> float:
    assert set(counts) <= set(joint), set(counts) - set(joint)  # nothing the grammar forbids was ever emitted
    keys = sorted(joint)
    total = sum(counts.values())
    expected = [joint[key] * total for key in keys]
    observed = [counts.get(key, 0) for key in keys]
    big = [i for i, e in enumerate(expected) if e >= 5]
    small = [i for i in range(len(keys)) if i not in big]
    obs = [observed[i] for i in big] + ([sum(observed[i] for i in small)] if small else [])
    exp = [expected[i] for i in big] + ([sum(expected[i] for i in small)] if small else [])
    scale = sum(obs) / sum(exp)  # the expected counts sum to the runs up to round-off
    return chisquare(obs, [e * scale for e in exp]).pvalue


RUNS = 6000
CASES = [  # (scenario, variant, exact): each wrong variant where its error decides the first three tokens
    ("free first position", DraftModelProposer, True),
    ("free first position", TargetOnlyMask, False),
    ("forced first position", DraftModelProposer, True),
    ("forced first position", TargetOnlyMask, False),
    ("forced first position", MaskFirstPositionOnly, False),
]
# A wrong variant is checked after each quarter of the runs and stops once caught (tests/test_engine.first_catch),
# except the subtlest: caught only near the full 6,000 runs (p = 4.9e-6), where a threshold split over four looks
# (2.5e-6) would miss it.
LOOKS = {MaskFirstPositionOnly: 1}


@pytest.mark.slow
@pytest.mark.parametrize("scenario, variant, exact", CASES,
                         ids=[f"{s}: {v.__name__}{'' if e else ' (wrong)'}" for s, v, e in CASES])
def test_constrained_sampling_keeps_the_grammar_conditional_distribution(pair, scenario, variant, exact):
    vocab, merges, schema = SCENARIOS[scenario]
    grammar = Grammar(schema, tiny_tokenizer(vocab, merges))
    joint = exact_joint(pair, grammar)
    judged = Counter()
    if exact:  # both proposals drafted (masked q drafts only legal tokens) and the second often judged
        pvalue = chi2(loop_counts(pair, grammar, variant, range(RUNS), judged), joint)
        print(f"{variant.__name__}: p = {pvalue:.3g}, first iterations (drafted, accepted): {sorted(judged.items())}")
        assert sum(n for (drafted, _), n in judged.items() if drafted == 2) == RUNS
        assert sum(n for (drafted, accepted), n in judged.items() if drafted == 2 and accepted >= 1) >= RUNS // 5
        assert pvalue > 0.001
    else:
        looks = LOOKS.get(variant, 4)
        pvalue, used = first_catch(lambda seeds: loop_counts(pair, grammar, variant, seeds, judged),
                                   lambda counts: chi2(counts, joint), RUNS, alpha=1e-5, looks=looks)
        print(f"{variant.__name__}: caught after {used} runs, p = {pvalue:.3g}")
        assert pvalue < 1e-5 / looks
