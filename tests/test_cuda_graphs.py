"""The graphed forward on a GPU (skipped without one; scripts/gpu_check.sh runs it on a lease).

A replayed graph against the same arithmetic run eagerly, the loop through graphs against plain decoding
through graphs and against transformers' forward, rollback inside a graph's buffers, a sampled run, and a
replay from another thread (the app's workers replay what its loader captured).
"""

import os
import threading

import pytest
import torch

from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration, Step
from playground.core.sampling import SamplingConfig
from playground.core.static import StaticLM
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.pairs.models import ModelPair
from tests.tiny import perturbed, tiny_model

DEVICE = os.environ.get("PLAYGROUND_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    not DEVICE.startswith("cuda") or not torch.cuda.is_available(),
    reason="needs a CUDA device (set PLAYGROUND_DEVICE=cuda; scripts/gpu_check.sh)",
)
IDS = [3, 17, 42, 5, 9, 33, 8, 61, 7, 7, 2, 19, 40, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23]


def gpu(model, dtype=torch.float32):
    return model.to(DEVICE, dtype)


def tokens(records):
    return [
        t
        for r in records
        for t in (r.emitted if isinstance(r, Iteration) else (r.token,) if isinstance(r, Step) else ())
    ]


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
