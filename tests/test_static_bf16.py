"""The static forward in bfloat16 at real layer widths, on the CPU: what a GPU lease runs, proven where CI runs.

Random weights of the Llama-3.1-8B and Qwen2.5-7B layer shapes (hidden 4096 / 3584, GQA 32:8 / 28:4, Qwen2's
q/k/v biases), cut to 2 layers and a 1,024-token vocabulary (the vocabulary is no layer width; it only makes the
head cheaper). The tolerance: bf16 keeps 8 bits of mantissa, so a logit near 5 moves in steps of 1/32; against a
float32 forward of the same weights the static forward's logits must stay within 5% of the largest logit (8 of
those steps) at every bucket length, as transformers' own bf16 forward does (both are printed on failure).
"""

import copy

import pytest
import torch

from playground.core.cached import CachedLM
from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration
from playground.core.static import BUCKETS, StaticLM, release
from playground.drafters.proposers import DraftModelProposer
from tests.tiny import cut_model, decisive, tiny_pair, tokens

VOCAB = 1024  # tests.tiny.cut_model's default
CONTEXT = [(37 * i) % VOCAB for i in range(40)]
TOLERANCE = 0.05  # of the largest logit of the float32 forward


@pytest.fixture(scope="module")
def llama8b():
    return cut_model("meta-llama/Llama-3.1-8B-Instruct")


def logits_after(lm, context, feed, start=None):
    lm.feed(context)
    if start is not None:  # the wrong variant: the feed written at other positions than the context's end
        lm.written = start
    return lm.feed(feed).float()


@pytest.mark.slow
def test_bf16_static_forward_matches_float32_within_the_stated_tolerance_at_every_bucket(llama8b):
    reference = copy.deepcopy(llama8b).float()
    for n in BUCKETS:
        feed = [(11 * i + 5) % VOCAB for i in range(n)]
        want = logits_after(CachedLM(reference, "cpu"), CONTEXT, feed)
        bound = TOLERANCE * want.abs().max().item()
        ours = (logits_after(StaticLM(llama8b, "cpu"), CONTEXT, feed) - want).abs().max().item()
        theirs = (logits_after(CachedLM(llama8b, "cpu"), CONTEXT, feed) - want).abs().max().item()
        assert ours <= bound and theirs <= bound, (n, ours, theirs, bound)
        # what the captured arithmetic runs (padded to the bucket, inputs from the device buffers) agrees too
        lm = StaticLM(llama8b, "cpu")
        lm.feed(CONTEXT)
        with torch.inference_mode():
            captured = lm._eager_captured(torch.tensor(feed), len(CONTEXT)).float()
        assert (captured - want).abs().max().item() <= bound, n
    # power: the same feed written three positions off (a rollback that moved the length wrongly) is out of bounds
    off = (logits_after(StaticLM(llama8b, "cpu"), CONTEXT, feed, start=len(CONTEXT) - 3) - want).abs().max().item()
    assert off > bound, (off, bound)
    release(llama8b)




@pytest.mark.slow
def test_bf16_greedy_speculative_equals_plain_with_the_draft_equal_to_the_target():
    """Through the static forward in bf16 at real layer widths, the loop with the draft equal to the target
    accepts every proposal (alpha 1) and emits plain greedy's tokens: verification feeds of 4 and 9 rows, the
    draft's device-side steps, the caches' lengths after every iteration (the numerics are the test above's)."""
    vocab = 128
    model = decisive(cut_model("Qwen/Qwen2.5-7B-Instruct", vocab=vocab), vocab)
    pair = tiny_pair(model, model)
    pair.target_forward = "static"
    for prompt in ([1, 2, 3, 4, 5], [x % vocab for x in CONTEXT[:30]]):
        plain = tokens(plain_generate(pair, prompt, max_new_tokens=32))
        assert len(set(plain)) > 16  # the cycle moves through the vocabulary: not one token repeated
        for k in (3, 8):
            proposer = DraftModelProposer(model, "cpu", None, forward="static")
            records = list(speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=32))
            assert tokens(records) == plain, k
            iterations = [r for r in records if isinstance(r, Iteration)]
            assert all(r.n_accepted == len(r.proposed) == k for r in iterations[:-1]), k
            assert proposer.lm.cache_length() == len(proposer.lm.tokens) < len(prompt) + 32
    release(model)
