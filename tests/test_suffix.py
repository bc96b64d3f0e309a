"""The suffix drafter (suffix decoding) and its hybrid: the tree's proposals on hand-built sequences, the
cache's limits and eviction, bounded memory, and greedy output equal to plain on tiny random models."""

import random

import pytest

from playground.core.engine import K_MAX, plain_generate, speculative_generate
from playground.core.proposal import RunContext
from playground.core.records import Iteration, Step
from playground.core.sampling import GREEDY
from playground.drafters.adaptive import AdaptiveK, CostCurve
from playground.drafters.proposers import DraftModelProposer
from playground.drafters.registry import make_proposer
from playground.drafters.suffix import SuffixHybridProposer, SuffixProposer
from playground.drafters.suffix_cache import SuffixCache, suffix_tree_available
from playground.errors import PlaygroundError
from tests.test_engine import PROMPTS
from tests.tiny import tiny_pair

OK, WHY = suffix_tree_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)


def ctx(stop=()):
    return RunContext(GREEDY, None, frozenset(stop))


def started(proposer, prompt, stop=()):
    proposer.begin(prompt, ctx(stop))
    return proposer


# -- the tree's proposals --------------------------------------------------------------------------------------
def test_it_proposes_what_followed_the_match_in_the_prompt_as_long_as_the_match():
    p = started(SuffixProposer(max_spec_factor=1.0), [1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3])
    prop = p.propose([1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3], 8)
    assert prop.tokens == (4, 5, 6)  # match "1 2 3" (3 tokens): at most 1.0 x 3 proposed
    assert prop.sources == ("suffix",) * 3
    assert p.last.match_len == 3
    longer = started(SuffixProposer(max_spec_factor=2.0), [1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3])
    assert longer.propose([1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3], 8).tokens == (4, 5, 6, 7, 9, 1)
    assert longer.propose([1, 2, 3, 4, 5, 6, 7, 9, 1, 2, 3], 2).tokens == (4, 5)  # k caps it
    assert started(SuffixProposer(), [1, 2, 3, 4]).propose([1, 2, 3, 4], 8).tokens == ()  # no match


def test_it_takes_the_likeliest_branch_and_stops_below_the_minimum_probability():
    # "7 8" occurs 4 times (the last, the context's end, with nothing after it yet): 1 follows twice, 2 once;
    # after "7 8 1" always 5, then 4 or 0. The longest match is "7 8".
    prompt = [3, 7, 8, 1, 5, 4, 7, 8, 2, 6, 9, 7, 8, 1, 5, 0, 7, 8]
    p = started(SuffixProposer(max_spec_factor=4.0, min_token_prob=0.5), prompt)
    prop = p.propose(prompt, 4)
    assert prop.tokens == (1, 5) and p.last.probs == pytest.approx((0.5, 0.5))  # then 0.25 < 0.5
    strict = started(SuffixProposer(max_spec_factor=4.0, min_token_prob=0.6), prompt)
    assert strict.propose(prompt, 4).tokens == ()  # 0.5 < 0.6: not worth a guess


def test_earlier_responses_in_the_cache_are_proposed_and_a_fresh_cache_has_none():
    cache = SuffixCache()
    cache.add_response([1, 2], [40, 41, 42, 43, 44, 45])
    context = [3, 4, 40, 41, 42]
    assert started(SuffixProposer(cache), context[:2]).propose(context, 3).tokens == (43, 44, 45)
    assert started(SuffixProposer(SuffixCache()), context[:2]).propose(context, 3).tokens == ()


def test_a_run_grows_the_cache_for_the_next_run():
    cache = SuffixCache()
    first = started(SuffixProposer(cache), [1, 2])
    first.rollback([1, 2, 30, 31, 32, 33, 34, 35])  # what the loop calls after each verification
    assert cache.responses == 1 and cache.tokens == 6
    second = started(SuffixProposer(cache), [9])
    assert second.propose([9, 30, 31, 32], 3).tokens == (33, 34, 35)
    assert cache.responses == 2


def test_a_proposal_stops_at_a_stop_token():
    p = started(SuffixProposer(max_spec_factor=4.0), [5, 6, 7, 0, 8, 5, 6], stop=(0,))
    assert p.propose([5, 6, 7, 0, 8, 5, 6], 8).tokens == (7, 0)


# -- the cache's limits --------------------------------------------------------------------------------------
def test_the_oldest_responses_are_evicted_at_the_response_limit_and_the_message_says_so():
    cache = SuffixCache(max_responses=2, max_tokens=1000)
    for i in range(4):
        cache.add_response([1], [100 + 10 * i + j for j in range(5)])
    assert cache.responses == 2 and cache.evicted_responses == 2
    assert "2 older responses evicted to stay within 2 responses" in cache.describe()
    p = started(SuffixProposer(cache), [1])
    assert p.propose([1, 100, 101, 102], 2).tokens == ()  # the first response is gone
    assert p.propose([1, 130, 131, 132], 2).tokens == (133, 134)  # the last one stays


def test_the_token_limit_evicts_too_and_an_oversized_response_is_not_kept():
    cache = SuffixCache(max_responses=100, max_tokens=12)
    cache.add_response([1], list(range(100, 105)))
    cache.add_response([1], list(range(200, 205)))
    cache.add_response([1], list(range(300, 305)))  # 15 tokens > 12: the oldest goes
    assert (cache.responses, cache.tokens, cache.evicted_responses) == (2, 10, 1)
    cache.add_response([1], list(range(400, 420)))  # alone over the limit
    assert cache.truncated == 1 and cache.tokens <= 12
    assert "longer than 12 tokens not kept" in cache.describe()
    cache.clear()
    assert (cache.responses, cache.tokens, cache.evicted_responses) == (0, 0, 0)
    with pytest.raises(PlaygroundError, match="at least one"):
        SuffixCache(max_tokens=0)


def test_memory_stays_bounded_over_many_responses():
    cache = SuffixCache(max_responses=32, max_tokens=3000)
    rng = random.Random(0)
    sizes = []
    for i in range(1500):
        cache.add_response([1, 2, 3], [rng.randrange(5000) for _ in range(rng.randrange(20, 120))])
        assert cache.responses <= 32 and cache.tokens <= 3000
        if i in (300, 1499):
            sizes.append(cache.memory_bytes())
    assert cache.evicted_responses > 1000
    assert sizes[1] < 1.5 * sizes[0], sizes  # full at 300 responses; no growth after 1,200 more


# -- the loop: greedy output equals plain ------------------------------------------------------------------
def greedy_equal(pair, proposer_for, k_for, rounds=2):
    """Run every prompt `rounds` times through the loop, each proposer from proposer_for(cache) over one
    shared cache; assert each output equals plain greedy; return the proposed and accepted counts."""
    cache, proposed, accepted = SuffixCache(), 0, 0
    for _ in range(rounds):
        for prompt in PROMPTS:
            for n in (1, 9, 30):
                recs = list(speculative_generate(pair, prompt, proposer=proposer_for(cache), k=k_for(),
                                                 max_new_tokens=n))
                its = [r for r in recs if isinstance(r, Iteration)]
                plain = [r.token for r in plain_generate(pair, prompt, max_new_tokens=n) if isinstance(r, Step)]
                assert [t for r in its for t in r.emitted] == plain, (prompt, n)
                proposed += sum(len(r.proposed) for r in its)
                accepted += sum(r.n_accepted for r in its)
    return proposed, accepted


def adaptive():
    return AdaptiveK(CostCurve(c=0.0, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, K_MAX + 2)}), k_max=8)


K_SETTINGS = {"k=1": lambda: 1, "k=3": lambda: 3, "k=8": lambda: 8, "adaptive": adaptive,
              "match length": lambda: K_MAX}


@pytest.mark.parametrize("k", K_SETTINGS)
def test_greedy_with_the_suffix_drafter_equals_plain(target64, k):
    pair = tiny_pair(target64)
    proposed, accepted = greedy_equal(pair, lambda cache: SuffixProposer(cache), K_SETTINGS[k])
    assert accepted > 0 and proposed > accepted  # it proposed, some were kept and some rejected


@pytest.mark.parametrize("k", K_SETTINGS)
def test_greedy_with_the_suffix_hybrid_equals_plain(pair64, k):
    def hybrid(cache):
        return SuffixHybridProposer(DraftModelProposer(pair64.draft, "cpu", None), SuffixProposer(cache))

    proposed, accepted = greedy_equal(pair64, hybrid, K_SETTINGS[k])
    assert accepted > 0 and proposed > accepted


def test_the_second_run_of_a_prompt_is_drafted_from_the_first(target64):
    pair, cache, prompt = tiny_pair(target64), SuffixCache(), PROMPTS[0]
    passes = []
    for _ in range(2):
        recs = [r for r in speculative_generate(pair, prompt, proposer=SuffixProposer(cache), k=K_MAX,
                                                max_new_tokens=40) if isinstance(r, Iteration)]
        passes.append(len(recs))
    assert passes[1] < passes[0] / 2, passes  # the whole answer is in the cache the second time
    assert cache.responses == 2


def test_the_hybrid_says_where_each_proposal_came_from(pair64):
    cache = SuffixCache()
    cache.add_response([1], [10, 11, 12, 13, 14, 15, 16, 17])
    hybrid = SuffixHybridProposer(DraftModelProposer(pair64.draft, "cpu", None), SuffixProposer(cache))
    recs = [r for r in speculative_generate(pair64, [10, 11, 12, 13], proposer=hybrid, k=3, max_new_tokens=20)
            if isinstance(r, Iteration) and r.proposed]
    assert recs[0].sources == ("suffix",) * 3 and recs[0].proposed == (14, 15, 16)
    assert {s for r in recs for s in r.sources} <= {"suffix", "draft"}
    assert "draft" in {s for r in recs for s in r.sources}  # past the cached text the model drafts


def test_the_registry_builds_both_over_a_given_cache(pair64):
    cache = SuffixCache()
    assert make_proposer(pair64, "suffix", memory=cache).cache is cache
    hybrid = make_proposer(pair64, "suffix-hybrid", memory=cache)
    assert isinstance(hybrid, SuffixHybridProposer) and hybrid.suffix.cache is cache
    with pytest.raises(PlaygroundError, match="needs a model drafter"):
        make_proposer(tiny_pair(pair64.target), "suffix-hybrid")


def test_calibration_times_the_tree_as_the_hybrids_free_source(pair64):
    from playground import lab

    cache = SuffixCache()
    hybrid = SuffixHybridProposer(DraftModelProposer(pair64.draft, "cpu", None), SuffixProposer(cache))
    timing = lab.calibrate(pair64, [1, 2, 3, 4, 5, 6], hybrid, lab.CalibrationPlan(n_max=3, repeats=2, warmup=1))
    c, search_s = timing.source_s["suffix"]
    assert c == 0.0 and 0.0 < search_s < timing.target_step_s  # microseconds beside a target pass
    assert cache.responses == 0  # the calibration's run produced nothing, so nothing is cached



@pytest.fixture(scope="module")
def ui_provider():
    import torch

    from playground.pairs.models import ModelPair
    from playground.ui import serving
    from tests.test_ui_handlers import WORDS
    from tests.tiny import perturbed, tiny_model, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    pair = ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")
    return serving.PairProvider(pair=pair)


@pytest.mark.parametrize("drafter", ["suffix", "suffix-hybrid"])
def test_a_browser_tab_remembers_its_runs_for_the_suffix_drafters(ui_provider, drafter):
    from playground.ui.session import Session
    from tests.test_ui_handlers import run_to_end

    assert drafter in ui_provider.drafter_names()  # the Run tab offers it
    session, other = Session(), Session()
    statuses, passes = [], []
    for _ in range(2):
        statuses.append(run_to_end(ui_provider, session, drafter=drafter, k=16, max_new=40)[-1].status)
        passes.append(session.run.summary.target_passes)
    assert "the suffix cache holds 1 response" in statuses[0]
    assert "the suffix cache holds 2 responses" in statuses[1]
    assert passes[1] < passes[0] / 2, passes  # the second run drew on the first
    assert other.conversation.memory(drafter).responses == 0  # each tab its own
    assert session.conversation.memory(drafter).responses == 2
    run_to_end(ui_provider, session, drafter="draft", k=3, max_new=8)
    assert session.conversation.memory(drafter).responses == 2  # other drafters leave it alone


def test_forget_empties_the_tabs_suffix_cache(ui_provider):
    from playground.ui import handlers
    from playground.ui.session import Session
    from tests.test_ui_handlers import run_to_end

    session = Session()
    run_to_end(ui_provider, session, drafter="suffix", k=4, max_new=12)
    status, same = handlers.forget_runs(session)
    assert same is session and session.conversation.memory("suffix").responses == 0
    assert "the suffix cache holds 1 response" in status
    assert "holds nothing" in handlers.forget_runs(None)[0]
