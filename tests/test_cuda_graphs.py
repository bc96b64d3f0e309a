"""The graphed forward on a GPU (skipped without one; scripts/gpu_check.sh runs it on a lease).

A replayed graph against the same arithmetic run eagerly, the loop through graphs against plain decoding
through graphs and against transformers' forward, rollback inside a graph's buffers, a sampled run, and a
replay from another thread (the app's workers replay what its loader captured).
"""

import copy
import os
import random
import threading

import pytest
import torch

from playground.core.cached import CachedLM
from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration
from playground.core.sampling import SamplingConfig
from playground.core.static import StaticLM
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.pairs.models import ModelPair
from tests.tiny import cut_model, decisive, perturbed, tiny_model, tokens

DEVICE = os.environ.get("PLAYGROUND_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    not DEVICE.startswith("cuda") or not torch.cuda.is_available(),
    reason="needs a CUDA device (set PLAYGROUND_DEVICE=cuda; scripts/gpu_check.sh)",
)
IDS = [3, 17, 42, 5, 9, 33, 8, 61, 7, 7, 2, 19, 40, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23]


def gpu(model, dtype=torch.float32):
    return model.to(DEVICE, dtype)




@pytest.mark.parametrize("rows", ["all", "last"])
def test_a_replayed_graph_equals_the_eager_arithmetic(rows):
    model = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32))
    eager = StaticLM(model, DEVICE, rows=rows, graphs=False)
    want = [eager.feed(c) for c in (IDS[:20], IDS[20:21], IDS[21:23])]
    eager.crop(20)
    want.append(eager.feed(IDS[3:7]))
    graphed = StaticLM(model, DEVICE, rows=rows, graphs=True)
    assert graphed.graph_set is not None and sorted(graphed.graph_set.graphs) == [1, 2, 3, 5, 9, 17]
    got = [graphed.feed(c) for c in (IDS[:20], IDS[20:21], IDS[21:23])]  # a prefill past the buckets, then replays
    graphed.crop(20)  # a rollback moves the length; the next replay overwrites what lay past it
    got.append(graphed.feed(IDS[3:7]))
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def pair_of(target, draft, forward):
    return ModelPair(
        target=target,
        tokenizer=None,
        draft=draft,
        device=torch.device(DEVICE),
        dtype=torch.float32,
        target_name="tiny-target",
        draft_name="tiny-draft",
        target_forward=forward,
    )


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_through_graphs_equals_plain_through_graphs(k):
    target = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32))
    draft = gpu(perturbed(tiny_model(vocab=64, seed=0, dtype=torch.float32), 0.05))
    pair = pair_of(target, draft, "graphed")
    for prompt in ([1, 2, 3, 4, 5], IDS):
        plain = tokens(plain_generate(pair, prompt, max_new_tokens=40))
        proposer = DraftModelProposer(draft, DEVICE, None, forward="graphed")
        records = list(speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=40))
        assert tokens(records) == plain
        assert isinstance(proposer.lm, StaticLM) and proposer.lm.graphed
        assert sum(r.n_accepted for r in records if isinstance(r, Iteration)) > 0
        lookup = list(speculative_generate(pair, prompt, proposer=PromptLookupProposer(3), k=k, max_new_tokens=40))
        assert tokens(lookup) == plain


def test_graphs_and_transformers_agree_on_the_greedy_output():
    target = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32))
    graphed = tokens(plain_generate(pair_of(target, None, "graphed"), IDS[:6], max_new_tokens=40))
    eager = tokens(plain_generate(pair_of(target, None, "transformers"), IDS[:6], max_new_tokens=40))
    assert graphed == eager


def test_a_sampled_run_through_graphs_is_seeded_and_in_the_vocabulary():
    target = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32))
    draft = gpu(perturbed(tiny_model(vocab=64, seed=0, dtype=torch.float32), 0.05))
    pair = pair_of(target, draft, "graphed")
    sampling = SamplingConfig(do_sample=True, temperature=0.9, top_k=20, seed=5)

    def sample():
        proposer = DraftModelProposer(draft, DEVICE, None, forward="graphed")
        return tokens(
            speculative_generate(pair, [1, 2, 3], proposer=proposer, k=4, sampling=sampling, max_new_tokens=30)
        )

    a, b = sample(), sample()
    assert a == b and len(a) == 30 and all(0 <= t < 64 for t in a)


def test_graphs_captured_here_replay_from_a_worker_thread():
    target = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32))
    pair = pair_of(target, None, "graphed")
    here = tokens(plain_generate(pair, IDS[:6], max_new_tokens=20))
    out = {}
    worker = threading.Thread(target=lambda: out.update(t=tokens(plain_generate(pair, IDS[:6], max_new_tokens=20))))
    worker.start()
    worker.join(120)
    assert out.get("t") == here


# --- bf16 at real layer widths, long contexts, a cache that grows: what the lease must prove -----------------------


def test_bf16_graphs_replay_the_eager_arithmetic_at_8b_widths_within_the_stated_tolerance():
    """Each bucket's replay against the float32 forward of the same weights: within 5% of the largest logit (as
    tests/test_static_bf16.py holds the CPU to), and the replay against the same arithmetic run eagerly."""
    model = cut_model("meta-llama/Llama-3.1-8B-Instruct", device=DEVICE)
    reference = copy.deepcopy(model).float()
    context = [(37 * i) % 1024 for i in range(40)]
    for n in (1, 2, 3, 5, 9, 17):
        feed = [(11 * i + 5) % 1024 for i in range(n)]
        ref = CachedLM(reference, DEVICE)
        ref.feed(context)
        want = ref.feed(feed).float()
        eager = StaticLM(model, DEVICE, graphs=False)
        eager.feed(context)
        plain = eager.feed(feed).float()
        graphed = StaticLM(model, DEVICE, graphs=True)
        graphed.feed(context)
        got = graphed.feed(feed).float()
        bound = 0.05 * want.abs().max().item()
        assert (got - want).abs().max().item() <= bound, n
        torch.testing.assert_close(got, plain, rtol=2e-2, atol=bound / 4)


def test_bf16_greedy_through_graphs_equals_plain_with_the_draft_equal_to_the_target():
    model = decisive(cut_model("Qwen/Qwen2.5-7B-Instruct", vocab=128, device=DEVICE), 128)
    pair = pair_of(model, model, "graphed")
    pair.dtype = torch.bfloat16
    for prompt in ([1, 2, 3, 4, 5], [(37 * i) % 128 for i in range(30)]):
        plain = tokens(plain_generate(pair, prompt, max_new_tokens=32))
        for k in (3, 8):
            proposer = DraftModelProposer(model, DEVICE, None, forward="graphed")
            records = list(speculative_generate(pair, prompt, proposer=proposer, k=k, max_new_tokens=32))
            assert tokens(records) == plain, k
            iterations = [r for r in records if isinstance(r, Iteration)]
            assert all(r.n_accepted == len(r.proposed) == k for r in iterations[:-1]), k  # alpha 1


def test_a_4000_token_prompt_and_a_cache_that_grows_through_graphs():
    target = gpu(tiny_model(vocab=64, seed=0, dtype=torch.float32, max_positions=8192))
    draft = gpu(perturbed(tiny_model(vocab=64, seed=0, dtype=torch.float32, max_positions=8192), 0.05))
    pair = pair_of(target, draft, "graphed")
    prompt = [random.Random(4).randrange(64) for _ in range(4000)]
    plain = tokens(plain_generate(pair, prompt, max_new_tokens=200))
    proposer = DraftModelProposer(draft, DEVICE, None, forward="graphed")
    assert tokens(speculative_generate(pair, prompt, proposer=proposer, k=4, max_new_tokens=200)) == plain
    lm = StaticLM(target, DEVICE, graphs=True)  # past its first room mid-run: the graphs are captured again
    first = lm.room
    lm.feed(prompt[: first - 3])
    got = [lm.feed(prompt[i:i + 5]) for i in range(first - 3, first + 12, 5)]  # replays across the growth
    theirs = CachedLM(target, DEVICE)
    theirs.feed(prompt[: first - 3])
    want = [theirs.feed(prompt[i:i + 5]) for i in range(first - 3, first + 12, 5)]
    assert lm.grown == 1 and lm.graph_set is not None
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
