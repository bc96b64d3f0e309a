"""Property tests (hypothesis) of the loop on tiny random float64 models.

For random k (1..8), prompts and their lengths, drafters (a perturbed draft model, a perfect one, an unrelated
one, prompt lookup with a random n-gram length), end-of-sequence tokens (one that occurs in the output, at a
random position, or none) and max_new_tokens, after every iteration:
  - the target's cache holds exactly the committed tokens but the last, and the draft's a prefix of them
    (the tokens each cache says it holds and the length the DynamicCache itself reports);
  - greedy speculative output equals plain greedy output token for token, and stops exactly at the first
    EOS or at max_new_tokens; sampling keeps the same cache invariant and stopping rule.
Examples are derandomized (the same ones on every run, no example database) and few enough for < 60 s on
two cores; `deadline=None` because a shared machine's timing is not what is tested here.
"""

from __future__ import annotations

from typing import ClassVar
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from playground.core import engine, static
from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.records import Iteration, Step
from playground.core.sampling import SamplingConfig
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer, lookup
from tests.tiny import tiny_pair

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
DRAFTERS = ["useful", "perfect", "useless", "lookup"]
VOCAB = 64


class Recorder:
    """Every target model-with-cache the engine creates (core.static.target_lm: the static forward on a CPU by
    default), so the test can look inside the target's cache."""

    made: ClassVar[list] = []

    @staticmethod
    def target_lm(*a, **kw):
        lm = static.target_lm(*a, **kw)
        Recorder.made.append(lm)
        return lm


def make_proposer(drafts, drafter: str, max_ngram: int):
    if drafter == "lookup":
        return PromptLookupProposer(max_ngram=max_ngram)
    return DraftModelProposer(drafts[drafter], "cpu", None)


def run_checking_caches(pair, prompt, proposer, k, max_new, sampling, stop_ids):
    """The speculative run's tokens and records, asserting the cache invariant after every iteration."""
    Recorder.made = []
    committed = list(prompt)
    records = []
    with mock.patch.object(engine, "target_lm", Recorder.target_lm):
        for rec in speculative_generate(pair, prompt, proposer=proposer, k=k, sampling=sampling,
                                        max_new_tokens=max_new, options=LoopOptions(stop_ids=stop_ids)):
            records.append(rec)
            if not isinstance(rec, Iteration):
                continue
            committed.extend(rec.emitted)
            target = Recorder.made[0]
            assert target.tokens == committed[:-1]
            assert target.cache_length() == len(committed) - 1
            if isinstance(proposer, DraftModelProposer):
                draft = proposer.lm
                assert draft.tokens == committed[: len(draft.tokens)] and len(draft.tokens) < len(committed)
                assert draft.cache_length() == len(draft.tokens)
            assert rec.k <= k and len(rec.emitted) <= rec.k + 1
    return committed[len(prompt):], records


def check_stopping(tokens, records, max_new, stops):
    """At most max_new tokens; an EOS only as the last token (finished by eos), else exactly max_new (by length)."""
    assert 1 <= len(tokens) <= max_new
    assert not any(t in stops for t in tokens[:-1])
    if tokens[-1] in stops:
        assert records[-1].finished == "eos"
    else:
        assert len(tokens) == max_new and records[-1].finished == "length"


run_cases = dict(
    k=st.integers(1, 8),
    prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=48),
    drafter=st.sampled_from(DRAFTERS),
    max_ngram=st.integers(1, 4),
    max_new=st.integers(1, 40),
    eos_at=st.one_of(st.none(), st.integers(0, 39)),
)


@settings(max_examples=150, **SETTINGS)
@given(**run_cases)
def test_greedy_equals_plain_and_both_caches_hold_the_committed_length(target64, drafts64, k, prompt, drafter,
                                                                       max_ngram, max_new, eos_at):
    pair = tiny_pair(target64, drafts64["useful"])
    free = [r.token for r in plain_generate(pair, prompt, max_new_tokens=max_new, stop_ids=())
            if isinstance(r, Step)]
    # an EOS that occurs in the output (at a random position), or none
    stops = (free[eos_at],) if eos_at is not None and eos_at < len(free) else ()
    expected = free[: free.index(stops[0]) + 1] if stops else free
    assert [r.token for r in plain_generate(pair, prompt, max_new_tokens=max_new, stop_ids=stops)
            if isinstance(r, Step)] == expected

    proposer = make_proposer(drafts64, drafter, max_ngram)
    tokens, records = run_checking_caches(pair, prompt, proposer, k, max_new, SamplingConfig(), stops)
    assert tokens == expected, (drafter, k, max_new, stops)
    check_stopping(tokens, records, max_new, stops)


@settings(max_examples=60, **SETTINGS)
@given(**run_cases, seed=st.integers(0, 2**16), temperature=st.sampled_from([0.7, 1.0, 1.5]),
       top_k=st.sampled_from([0, 5]), top_p=st.sampled_from([1.0, 0.9]))
def test_sampling_keeps_the_cache_invariant_and_stops_exactly(target64, drafts64, k, prompt, drafter, max_ngram,
                                                              max_new, eos_at, seed, temperature, top_k, top_p):
    pair = tiny_pair(target64, drafts64["useful"])
    sampling = SamplingConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    stops = (eos_at % VOCAB,) if eos_at is not None else ()  # a token id that may or may not come up
    proposer = make_proposer(drafts64, drafter, max_ngram)
    tokens, records = run_checking_caches(pair, prompt, proposer, k, max_new, sampling, stops)
    check_stopping(tokens, records, max_new, stops)
    again, _ = run_checking_caches(pair, prompt, make_proposer(drafts64, drafter, max_ngram), k, max_new, sampling,
                                   stops)
    assert again == tokens  # the seed fixes the run


@settings(max_examples=300, **SETTINGS)
@given(tokens=st.lists(st.integers(0, 3), min_size=0, max_size=60), k=st.integers(0, 8),
       max_ngram=st.integers(1, 4))
def test_prompt_lookup_proposes_what_followed_the_latest_longest_match(tokens, k, max_ngram):
    got = lookup(tokens, k, max_ngram)
    assert len(got) <= k
    if not got:
        return
    n_tokens = len(tokens)
    # some n-gram length n: the trailing n tokens occurred earlier, at a start s, and `got` followed it
    found = [(n, s) for n in range(min(max_ngram, n_tokens - 1), 0, -1) for s in range(n_tokens - n - 1, -1, -1)
             if tokens[s:s + n] == tokens[n_tokens - n:] and tokens[s + n:s + n + k] == got]
    assert found
    n, s = found[0]
    # longest n first, and the most recent match for it
    assert not any(tokens[s2:s2 + n2] == tokens[n_tokens - n2:]
                   for n2 in range(n + 1, min(max_ngram, n_tokens - 1) + 1) for s2 in range(n_tokens - n2))
    assert not any(tokens[s2:s2 + n] == tokens[n_tokens - n:] for s2 in range(s + 1, n_tokens - n))
