"""The static-cache forward (core/static.py) on the CPU: the arithmetic a CUDA graph records, checked where CI runs.

Its sliced way and its captured way (positions, ids and the returned row read from device buffers, attention
over the whole capacity under a mask, feeds padded to a bucket) against transformers' forward; the loop through
it exact for every drafter, several k and adaptive k, with the caches' invariants after every iteration; its
takeover and capacity rules; the device-side draft loop (one read per proposal) equal to the per-token one,
greedy and sampled.
"""

import pytest
import torch

from playground.core import engine, static
from playground.core.cached import CachedLM
from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration
from playground.core.sampling import SamplingConfig
from playground.core.static import BUCKETS, StaticLM, capacity_for, draft_model_lm, resolve_forward, target_lm
from playground.drafters.adaptive import AdaptiveK, CostCurve
from playground.drafters.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer
from playground.errors import PlaygroundError
from tests.tiny import perturbed, tiny_model, tiny_pair, tokens

IDS = [3, 17, 42, 5, 9, 33, 8, 61, 7, 7, 2, 19, 40]




@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab=64, seed=0, dtype=torch.float64)


def test_the_sliced_forward_equals_transformers_across_feeds_and_a_rollback(model):
    ours, theirs = StaticLM(model, "cpu"), CachedLM(model, "cpu")
    for chunk in (IDS[:6], IDS[6:7], IDS[7:10]):
        torch.testing.assert_close(ours.feed(chunk), theirs.feed(chunk), rtol=1e-10, atol=1e-10)
    ours.crop(7)
    theirs.crop(7)
    torch.testing.assert_close(ours.feed(IDS[10:]), theirs.feed(IDS[10:]), rtol=1e-10, atol=1e-10)
    assert ours.tokens == theirs.tokens == IDS[:7] + IDS[10:] and ours.cache_length() == 10


@pytest.mark.parametrize("rows", ["all", "last"])
def test_the_captured_arithmetic_equals_the_sliced_one_with_padded_buckets(model, rows):
    """What a graph replays, run eagerly: each feed padded to its bucket with junk ids, the row to return read
    from a buffer; the real rows' logits and the next feed's must not see the padding."""
    sliced = [StaticLM(model, "cpu", rows=rows).feed(IDS[:5])]
    lm = StaticLM(model, "cpu", rows=rows)  # takes the model's cache over
    sliced += [lm.feed(IDS[:5]), lm.feed(IDS[5:8]), lm.feed(IDS[8:9])]
    captured = []
    lm2 = StaticLM(model, "cpu", rows=rows)
    with torch.inference_mode():
        for start, chunk in ((0, IDS[:5]), (0, IDS[:5]), (5, IDS[5:8]), (8, IDS[8:9])):
            bucket = next(b for b in BUCKETS if b >= len(chunk))
            padded = torch.tensor(chunk + [63] * (bucket - len(chunk)))
            out = lm2._eager_captured(padded, start)
            lm2.cache_state.last.fill_(len(chunk) - 1)  # the real last row, as a replay sets it
            out = lm2._captured(bucket, padded) if rows == "last" else out[: len(chunk)]
            captured.append(out)
    for a, b in zip(sliced, captured, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)


def drafters(pair):
    return {
        "draft (lean)": lambda: DraftModelProposer(pair.draft, "cpu", None, forward="lean"),
        "draft (static)": lambda: DraftModelProposer(pair.draft, "cpu", None, forward="static"),
        "lookup": lambda: PromptLookupProposer(3),
        "hybrid": lambda: HybridProposer(DraftModelProposer(pair.draft, "cpu", None, forward="static")),
    }


@pytest.fixture(scope="module")
def pair(model):
    return tiny_pair(model, perturbed(model, 0.05))


PROMPTS = ([1, 2, 3, 4, 5], [10, 11, 12, 13, 10, 11, 12, 13, 10, 11])
CURVE = CostCurve(c=0.3, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)})


@pytest.mark.parametrize("k", [1, 3, 8, "adaptive"])
@pytest.mark.parametrize("name", ["draft (lean)", "draft (static)", "lookup", "hybrid"])
def test_greedy_through_the_static_target_equals_plain_with_the_caches_in_step(monkeypatch, pair, name, k):
    made = []
    monkeypatch.setattr(engine, "target_lm", lambda *a, **kw: made.append(target_lm(*a, **kw)) or made[-1])
    pair.target_forward = "static"
    try:
        for prompt in PROMPTS:
            expected = tokens(plain_generate(pair, prompt, max_new_tokens=40))
            assert isinstance(made[-1], StaticLM)
            proposer = drafters(pair)[name]()
            controller = AdaptiveK(CURVE, k_max=16) if k == "adaptive" else k
            committed, got = list(prompt), []
            for rec in speculative_generate(pair, prompt, proposer=proposer, k=controller, max_new_tokens=40):
                if not isinstance(rec, Iteration):
                    continue
                committed.extend(rec.emitted)
                got.extend(rec.emitted)
                target = made[-1]
                assert target.tokens == committed[:-1] and target.cache_length() == len(committed) - 1
                draft = getattr(proposer, "lm", None) or getattr(getattr(proposer, "model", None), "lm", None)
                if draft is not None:
                    assert draft.tokens == committed[: len(draft.tokens)] and len(draft.tokens) < len(committed)
                    assert draft.cache_length() == len(draft.tokens)
            assert got == expected, (name, k, prompt)
    finally:
        pair.target_forward = None


def run(pair, forward, sampling, draft_forward):
    pair.target_forward = forward
    try:
        proposer = DraftModelProposer(pair.draft, "cpu", None, forward=draft_forward)
        records = list(speculative_generate(pair, [4, 8, 15, 16], proposer=proposer, k=4, sampling=sampling,
                                            max_new_tokens=30))
        return tokens(records), [r.proposed for r in records if isinstance(r, Iteration)]
    finally:
        pair.target_forward = None


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(do_sample=True, temperature=1.2, seed=7)],
                         ids=["greedy", "sampled"])
def test_the_device_side_draft_loop_proposes_and_draws_as_the_per_token_one(pair, sampling):
    """The static draft feeds its tokens back as device ids and reads them once per proposal; in float64 its
    proposals, and with them every draw from the seeded generator, are the per-token lean draft's."""
    base = run(pair, "transformers", sampling, "lean")
    ours = run(pair, "static", sampling, "static")
    assert ours == base
    assert sum(len(p) for p in base[1]) > 20  # proposals were drafted (several per iteration), so this compared them


def test_a_newer_run_takes_the_cache_over_and_the_older_one_is_refused(model):
    first = StaticLM(model, "cpu")
    first.feed(IDS[:4])
    second = StaticLM(model, "cpu")
    second.feed(IDS[:2])
    with pytest.raises(PlaygroundError, match="another run took over"):
        first.feed(IDS[4:5])


def test_capacity_grows_in_chunks_keeping_what_the_cache_holds(model):
    """A reservation and a feed past the room both grow the cache (to the next power of two), and the grown cache
    holds what the old one held: the logits after growing equal transformers' over the same context."""
    lm = StaticLM(model, "cpu")
    lm.reserve(3000)
    assert lm.cache_state.capacity == capacity_for(3000) == 4096 and lm.room == 4096 - BUCKETS[-1]
    small = StaticLM(model, "cpu")  # takes the model's cache over: the room it finds is the 4096 one
    assert small.room == 4096 - BUCKETS[-1] and small.grown == 0
    static.release(model)
    lm, theirs = StaticLM(model, "cpu"), CachedLM(model, "cpu")
    first = lm.room
    context = [(7 * i) % 64 for i in range(first - 2)]
    lm.feed(context)
    theirs.feed(context)
    assert lm.grown == 0
    torch.testing.assert_close(lm.feed(IDS[:5]), theirs.feed(IDS[:5]), rtol=1e-9, atol=1e-9)  # past the first room
    assert lm.grown == 1 and lm.room == capacity_for(first + 3) - BUCKETS[-1] > first
    lm.crop(first - 1)
    theirs.crop(first - 1)
    torch.testing.assert_close(lm.feed(IDS[5:9]), theirs.feed(IDS[5:9]), rtol=1e-9, atol=1e-9)
    assert lm.cache_length() == theirs.cache_length() == first + 3
    lm.reserve(3 * first)  # after feeds too: it grows and keeps what it holds
    assert lm.grown == 2 and lm.room >= 3 * first
    torch.testing.assert_close(lm.feed(IDS[9:10]), theirs.feed(IDS[9:10]), rtol=1e-9, atol=1e-9)
    static.release(model)


def test_choosing_a_forward(model, monkeypatch):
    gelu = tiny_model(vocab=64, seed=1)
    gelu.config.hidden_act = "gelu"
    assert resolve_forward("auto", model, "cpu") == static.CPU_TARGET
    assert resolve_forward("auto", gelu, "cpu") == "transformers"  # the static forward does not run it
    with pytest.raises(PlaygroundError, match="cannot run this model: not a SiLU MLP"):
        resolve_forward("static", gelu, "cpu")
    with pytest.raises(PlaygroundError, match="needs a CUDA device"):
        resolve_forward("graphed", model, "cpu")
    with pytest.raises(PlaygroundError, match="must be one of"):
        resolve_forward("fast", model, "cpu")
    monkeypatch.setattr(model, "hf_device_map", {"model.layers.0": 0, "lm_head": 1}, raising=False)
    assert resolve_forward("auto", model, "cuda") == "transformers"  # split across GPUs: transformers' own
    monkeypatch.delattr(model, "hf_device_map")
    assert resolve_forward("auto", model, "cuda") == "graphed"
    monkeypatch.setenv(static.TARGET_FORWARD_ENV, "static")
    assert isinstance(target_lm(tiny_pair(model), 50), StaticLM)
    monkeypatch.setenv(static.TARGET_FORWARD_ENV, "transformers")
    assert isinstance(target_lm(tiny_pair(model), 50), CachedLM)
    assert isinstance(draft_model_lm(model, "cpu", forward="static"), StaticLM)
    with pytest.raises(PlaygroundError, match="needs a CUDA device"):
        draft_model_lm(model, "cpu", forward="graphed")


@pytest.mark.parametrize("rows", ["all", "last"])
def test_the_captured_step_traces_whole_for_torch_compile(model, rows):
    """What $PLAYGROUND_COMPILE_STEP=1 compiles before a graph records it: traced whole (fullgraph: no break a
    capture would split), with the cache writes landing in the cache itself, the logits and keys equal to the
    eager step's (aot_eager: the same trace and functionalisation inductor gets, without its slow codegen)."""
    lm = StaticLM(model, "cpu", rows=rows)
    lm.feed(IDS[:5])
    cache = lm.cache_state
    with torch.inference_mode():
        cache.ids[0, :3] = torch.tensor(IDS[5:8])
        cache.start.fill_(5)
        cache.last.fill_(2)
        want, kv = lm._captured(3).clone(), cache.kv[:, 5:8].clone()
        cache.kv[:, 5:8].zero_()
        got = static.step_function(lm, "aot_eager")(3)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cache.kv[:, 5:8], kv, rtol=0, atol=0)
    assert kv.abs().sum() > 0
    static.release(model)
