"""Long contexts on the static forward, both roles (target and draft), on the CPU where CI runs: a 4,000-token
prompt with 200 new tokens, and a conversation whose history passes the first capacity (1,024 positions). Greedy
speculative output equals plain output through the same forward, and plain through it equals transformers'
DynamicCache forward. tests/test_cuda_graphs.py runs the same through the graphs on a lease."""

import random

import pytest
import torch

from playground.core.engine import plain_generate, speculative_generate
from playground.core.static import MIN_CAPACITY, StaticLM
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from tests.tiny import perturbed, tiny_model, tiny_pair, tokens


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float64, max_positions=8192)
    return tiny_pair(target, perturbed(target, 0.05))


def generate(pair, prompt, drafter: str | None, k: int = 4, forward: str = "static", max_new: int = 200):
    pair.target_forward = forward
    try:
        if drafter is None:
            return tokens(plain_generate(pair, prompt, max_new_tokens=max_new)), None
        proposer = (DraftModelProposer(pair.draft, "cpu", None, forward="static") if drafter == "draft"
                    else PromptLookupProposer(3))
        records = list(speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=max_new))
        return tokens(records), proposer
    finally:
        pair.target_forward = None


@pytest.mark.slow
def test_a_4000_token_prompt_with_200_new_tokens_on_both_roles(pair):
    prompt = [random.Random(4).randrange(64) for _ in range(4000)]
    plain, _ = generate(pair, prompt, None)
    assert plain == generate(pair, prompt, None, forward="transformers")[0]
    for drafter, k in (("draft", 4), ("draft", 8), ("lookup", 4)):
        got, proposer = generate(pair, prompt, drafter, k=k)
        assert got == plain, (drafter, k)
        if drafter == "draft":  # the draft's cache was reserved for the run, not grown during it
            assert isinstance(proposer.lm, StaticLM) and proposer.lm.room >= 4200 and proposer.lm.grown == 0


@pytest.mark.slow
def test_a_conversation_whose_history_passes_the_first_capacity(pair):
    """Turn after turn the prompt is the history so far plus a new user turn; by the third it is past 1,024
    tokens, and the models' caches (kept per model between runs) grow to hold it."""
    rng = random.Random(7)
    history: list[int] = []
    drafted = None
    for turn in range(4):
        history += [rng.randrange(64) for _ in range(300)]  # the user's turn
        plain, _ = generate(pair, history, None, max_new=60)
        for drafter, k in (("draft", 3), ("draft", 8), ("lookup", 4)):
            got, proposer = generate(pair, history, drafter, k=k, max_new=60)
            assert got == plain, (turn, drafter, k)
            drafted = proposer if drafter == "draft" else drafted
        history += plain
    assert len(history) > MIN_CAPACITY + 200
    assert isinstance(drafted.lm, StaticLM) and drafted.lm.room > MIN_CAPACITY
