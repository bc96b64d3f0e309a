"""The llama.cpp drafter (playground/llamacpp.py) on the embedded pair.

Needs llama-cpp-python (scripts/install_llama_cpp.sh); the module is skipped, saying so, without it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

try:  # skipped only when llama_cpp cannot be imported; any other refusal fails the tests below
    import llama_cpp  # noqa: F401  (after torch, like playground.llamacpp)
except Exception as e:  # noqa: BLE001  not installed, or a build that does not load
    pytest.skip(
        f"llama_cpp is not importable ({type(e).__name__}: {e}); install it with scripts/install_llama_cpp.sh",
        allow_module_level=True,
    )

from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.proposal import RunContext
from playground.core.records import Iteration, summarize
from playground.core.sampling import GREEDY, SamplingConfig, probabilities
from playground.drafters.llamacpp import LlamaCppProposer
from playground.drafters.llamacpp_runtime import llama_cpp_available
from playground.drafters.proposers import HybridProposer
from playground.errors import PlaygroundError
from playground.pairs.loading import load_pair
from tests.test_engine import tokens_of
from tests.test_prefill import prefill_threads_alive

REPO = Path(__file__).resolve().parents[1]

PROMPTS = [
    "Write a Python function that adds two numbers.",
    "Explain in two sentences why the sky is blue.",
]


@pytest.fixture(scope="module")
def pair():
    return load_pair(draft=None, progress=None)


@pytest.fixture(scope="module")
def drafter(pair):
    proposer = LlamaCppProposer(pair.tokenizer, vocab_size=pair.vocab_size)
    yield proposer
    proposer.close()


def chat_ids(pair, text):
    return pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]


def test_llama_cpp_is_available_here():
    ok, why = llama_cpp_available()
    assert ok, why


def test_loads_the_embedded_gguf_with_the_targets_vocabulary(pair, drafter):
    assert drafter.n_vocab == pair.vocab_size == 49152
    assert drafter.uses_draft_model is False
    text = "<|im_start|>user\nHello, wörld! def f(x): return x ** 2<|im_end|>\n"
    assert drafter.tokenize(text) == pair.tokenizer.encode(text, add_special_tokens=False)


def test_a_tokenizer_that_disagrees_is_refused(pair):
    class Shifted:
        """The target's tokenizer with every id moved by one."""

        all_special_tokens = pair.tokenizer.all_special_tokens

        def __len__(self):
            return len(pair.tokenizer)

        def encode(self, text, add_special_tokens=False):
            return [t + 1 for t in pair.tokenizer.encode(text, add_special_tokens=add_special_tokens)]

        def decode(self, ids, **kw):
            return pair.tokenizer.decode(ids, **kw)

    with pytest.raises(PlaygroundError, match="does not tokenize like the target"):
        LlamaCppProposer(Shifted(), vocab_size=pair.vocab_size)


@pytest.mark.parametrize("text", PROMPTS)
def test_greedy_speculative_equals_plain_and_kv_tracks_committed(pair, drafter, text):
    ids = chat_ids(pair, text)
    plain = [r.token for r in list(plain_generate(pair, ids, max_new_tokens=32))[1:]]
    for k in range(1, 9):
        committed = list(ids)
        out = []
        for rec in speculative_generate(pair, ids, proposer=drafter, k=k, max_new_tokens=32):
            if not isinstance(rec, Iteration):
                # after begin: the prompt less its last token, in llama.cpp's memory as we believe
                assert drafter.kv_tokens == committed[:-1]
                assert drafter.kv_length() == len(committed) - 1
                continue
            committed.extend(rec.emitted)
            out.extend(rec.emitted)
            kv = drafter.kv_tokens
            assert drafter.kv_length() == len(kv), f"k={k} iteration {rec.index}"
            assert len(kv) < len(committed) and kv == committed[: len(kv)], f"k={k} iteration {rec.index}"
            if rec.proposed:  # q as the proposer reported it, one value per proposal
                assert rec.q is not None and len(rec.q) == len(rec.proposed)
        assert out == plain, f"k={k}"


def test_rollback_truncates_llama_cpp_memory_and_position(pair, drafter):
    ids = chat_ids(pair, PROMPTS[0])
    ctx = RunContext(GREEDY, torch.Generator().manual_seed(0), frozenset(pair.eos_ids))
    drafter.begin(ids, ctx)
    first = drafter.propose(ids, 5)
    assert len(first) == 5 and drafter.kv_length() == len(ids) + 4
    # Reject everything after the first proposal: the KV keeps the prompt and that proposal ...
    committed = [*ids, first.tokens[0], 0]
    drafter.rollback(committed)
    assert drafter.kv_tokens == committed[:-1] and drafter.kv_length() == len(committed) - 1
    # ... and drafting again from the same state gives the same guesses: nothing stale was left.
    drafter.rollback([*ids])
    assert drafter.kv_length() == len(ids) - 1
    assert drafter.propose(ids, 5).tokens == first.tokens


def test_begin_reuses_the_kv_of_a_shared_prompt_prefix(pair, drafter):
    """A new run whose prompt shares a prefix with the last one prefills only the rest, and drafts what a
    fresh drafter would."""
    a, b = chat_ids(pair, PROMPTS[0]), chat_ids(pair, PROMPTS[1])
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert shared > 3  # the chat template's system turn
    ctx = RunContext(GREEDY, torch.Generator().manual_seed(0), frozenset(pair.eos_ids))
    drafter.begin(a, ctx)
    drafter.propose(a, 4)  # leave proposals in the KV: begin must cut them off
    drafter.begin(b, ctx)
    assert drafter.reused_prefix == shared and drafter.kv_tokens == b[:-1]
    warm = drafter.propose(b, 6).tokens
    drafter.begin(b, ctx)
    assert drafter.reused_prefix == len(b) - 1  # the same prompt again: nothing to prefill
    assert drafter.propose(b, 6).tokens == warm
    fresh = LlamaCppProposer(pair.tokenizer, vocab_size=pair.vocab_size)
    try:
        fresh.begin(b, ctx)
        assert fresh.reused_prefix == 0 and fresh.propose(b, 6).tokens == warm
    finally:
        fresh.close()


def test_proposals_carry_the_warped_distribution_they_were_sampled_from(pair, drafter):
    ids = chat_ids(pair, PROMPTS[1])
    sampling = SamplingConfig(do_sample=True, temperature=0.7, top_k=20, seed=3)
    drafter.begin(ids, RunContext(sampling, sampling.generator(), frozenset()))
    proposal = drafter.propose(ids, 3)
    q = proposal.q
    assert q.shape == (3, pair.vocab_size) and q.dtype == torch.float32
    assert torch.allclose(q.sum(-1), torch.ones(3), atol=1e-4)
    assert all(int((row > 0).sum()) <= 20 for row in q)  # top-k applied, like the target's
    assert all(float(q[i, x]) > 0 for i, x in enumerate(proposal.tokens))


# --- the sampling loop keeps the target's distribution -------------------------------------------


class MemoTarget:
    """The target model, memoized for passes that start from an empty cache (the verification pass
    of a one-token prompt: [prompt token, proposal]). Every number the loop sees is the real target's;
    repeated (prompt, proposal) pairs just skip recomputing it. The drafter and the acceptance rule
    run for real in every run."""

    def __init__(self, model):
        self.model, self.config, self.memo = model, model.config, {}

    def __call__(self, *, input_ids, cache, **kw):
        if cache.get_seq_length() != 0:
            return self.model(input_ids=input_ids, cache=cache, **kw)
        key = (tuple(input_ids[0].tolist()), kw.get("logits_to_keep"))
        if key not in self.memo:
            out = self.model(input_ids=input_ids, cache=cache, **kw)
            filled = getattr(out, "cache", None) or cache
            self.memo[key] = (out.logits, copy.deepcopy(filled))
        logits, filled = self.memo[key]
        return SimpleNamespace(logits=logits, cache=copy.deepcopy(filled))


def _first_token_counts(pair, drafter, prompt_ids, runs, sampling):
    counts = torch.zeros(pair.vocab_size, dtype=torch.long)
    for seed in range(runs):
        run_sampling = dataclasses.replace(sampling, seed=seed)
        # max_new_tokens=2: the first iteration drafts one token (k is capped at remaining - 1)
        recs = speculative_generate(pair, prompt_ids, proposer=drafter, k=1, sampling=run_sampling, max_new_tokens=2)
        first = next(r for r in recs if isinstance(r, Iteration))
        assert len(first.proposed) == 1
        counts[first.emitted[0]] += 1
    return counts


@torch.inference_mode()
def _target_first_token_p(pair, prompt_ids, sampling):
    logits = pair.target.model(input_ids=torch.tensor([prompt_ids])).logits[0, -1, : pair.vocab_size]
    return probabilities(logits.unsqueeze(0), sampling)[0].double()


def test_sampling_loop_keeps_the_targets_first_token_distribution(pair, drafter):
    """Chi-square of the first emitted token of many one-token speculative runs (exact rule, T = 1;
    in the second context top-k 50 as well, which both sides must apply) against the target's
    exact p. One-token prompts: no prefill on either side, and the target's verification pass starts
    from an empty cache, so it can be memoized (MemoTarget)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    memo_pair = dataclasses.replace(pair, target=MemoTarget(pair.target))
    runs, top = 1000, 30
    cases = [("The", SamplingConfig(do_sample=True, temperature=1.0)),
             ("def", SamplingConfig(do_sample=True, temperature=1.0, top_k=50))]
    stats, dof = 0.0, 0
    for word, sampling in cases:
        prompt = pair.tokenizer.encode(word, add_special_tokens=False)
        assert len(prompt) == 1
        p = _target_first_token_p(memo_pair, prompt, sampling)
        counts = _first_token_counts(memo_pair, drafter, prompt, runs, sampling).double()
        cells = torch.argsort(p, descending=True)[:top]  # the top tokens; everything else pooled
        expected = torch.cat([p[cells], (1 - p[cells].sum()).clamp(min=0).reshape(1)]) * runs
        observed = torch.cat([counts[cells], (runs - counts[cells].sum()).reshape(1)])
        small = expected < 5  # chi-square wants >= ~5 expected per cell: pool the small ones too
        if small.any():
            expected = torch.cat([expected[~small], expected[small].sum().reshape(1)])
            observed = torch.cat([observed[~small], observed[small].sum().reshape(1)])
        stats += float(((observed - expected) ** 2 / expected).sum())
        dof += len(expected) - 1
    pvalue = scipy_stats.chi2.sf(stats, dof)
    assert pvalue > 1e-3, f"chi-square {stats:.1f} on {dof} degrees of freedom, p = {pvalue:.2g}"


# --- OpenMP / import order: each in a fresh process that must exit 0 -------------------------------
# Prototypes saw segfaults inside llama.cpp's decode in processes that also imported torch, depending
# on import order; the suspect was two OpenMP runtimes. Each order gets its own process (the loader's
# choice is made once per process): a few hundred propose/rollback cycles with torch's thread pool
# working in between must exit 0, and torch and llama.cpp must be bound to one OpenMP runtime.

STRESS = textwrap.dedent(
    """
    import json, random, sys
    if sys.argv[1] == "torch-first":
        import torch
        import llama_cpp
    else:
        import llama_cpp
        import torch
    from playground.drafters.llamacpp import LlamaCppProposer
    from playground.drafters.llamacpp_runtime import openmp_runtimes
    from playground.core.proposal import RunContext
    from playground.core.sampling import GREEDY, SamplingConfig

    rng = random.Random(0)
    drafter = LlamaCppProposer()  # refuses a process where torch and llama.cpp got two OpenMP runtimes
    print("openmp", json.dumps(openmp_runtimes()), file=sys.stderr)
    committed = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 30, 2, 198, 1, 4093, 198]
    drafter.begin(committed, RunContext(GREEDY, torch.Generator().manual_seed(0)))
    w = torch.randn(512, 512)
    for cycle in range(int(sys.argv[2])):
        proposal = drafter.propose(committed, rng.randint(1, 4))
        w = torch.tanh(w @ w.T / 512)  # torch's own thread pool runs between llama.cpp decodes
        n = rng.randint(0, len(proposal))
        committed += [*proposal.tokens[:n], rng.randrange(49152)]
        if len(committed) > 400:  # start over now and then: exercises begin() on a used context
            committed = committed[:15]
            sampling = SamplingConfig(do_sample=True, temperature=0.8, seed=cycle) if cycle % 2 else GREEDY
            drafter.begin(committed, RunContext(sampling, sampling.generator()))
            continue
        drafter.rollback(committed)
        kv = drafter.kv_tokens
        assert drafter.kv_length() == len(kv) and kv == committed[: len(kv)] and len(kv) < len(committed)
    print("ok", cycle + 1)
    """
)


@pytest.mark.parametrize("order", ["torch-first", "llama_cpp-first"])
def test_propose_rollback_cycles_survive_either_import_order(order):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", STRESS, order, "300"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: killed by that signal)\n{proc.stderr[-3000:]}"
    runtimes = json.loads(proc.stderr.split("openmp ", 1)[1].splitlines()[0])
    # One OpenMP runtime for both (or none in llama.cpp): two would fight over the cores.
    assert runtimes.get("llama.cpp") in (None, runtimes.get("torch")), runtimes
    assert proc.stdout.strip() == "ok 300"


# --- the prefill beside the target's (engine.LoopOptions(overlap_prefill=...)) ----------------------


@pytest.mark.parametrize("text", PROMPTS)
def test_greedy_with_overlap_equals_plain_and_the_run_in_turn(pair, drafter, text):
    ids = chat_ids(pair, text)
    plain = tokens_of(plain_generate(pair, ids, max_new_tokens=24))
    assert drafter.prefill_overlaps and HybridProposer(drafter).prefill_overlaps
    for k in (2, 8):
        runs = {}
        for overlap in (True, False):
            drafter.forget()  # a first call: the whole prompt prefilled, not the prefix kept from the last run
            records = list(speculative_generate(pair, ids, proposer=drafter, k=k, max_new_tokens=24,
                                                options=LoopOptions(overlap_prefill=overlap)))
            prefill = records[0]
            assert prefill.overlapped is overlap and drafter.kv_tokens[: len(ids) - 1] == ids[:-1]
            assert 0 <= prefill.draft_s <= prefill.draft_total_s
            assert summarize(records).prefill_s == prefill.wall_s
            runs[overlap] = tokens_of(records)
        assert runs[True] == runs[False] == plain, f"k={k}"
    drafter.forget()
    hybrid = list(speculative_generate(pair, ids, proposer=HybridProposer(drafter), k=8, max_new_tokens=24,
                                       options=LoopOptions(overlap_prefill=True)))
    assert hybrid[0].overlapped and tokens_of(hybrid) == plain
    assert not prefill_threads_alive()


def test_llama_cpp_prefills_with_its_share_and_drafts_with_the_whole_budget(pair, drafter, monkeypatch):
    ids = chat_ids(pair, PROMPTS[0])
    seen = []  # the context's thread setting at each llama.cpp decode: the prefill's first, then drafting's
    real_eval = type(drafter)._eval

    def eval_(self, tokens, logits):
        seen.append(self._threads_set)
        return real_eval(self, tokens, logits)

    monkeypatch.setattr(type(drafter), "_eval", eval_)
    drafter_threads = max(1, torch.get_num_threads())
    share = drafter_threads + 1  # anything but the whole budget, so that the two can be told apart
    drafter.forget()
    records = list(speculative_generate(pair, ids, proposer=drafter, k=4, max_new_tokens=8, 
                                        options=LoopOptions(prefill_threads=share, overlap_prefill=True)))
    assert records[0].overlapped
    assert seen[0] == share and seen[1:] and set(seen[1:]) == {drafter_threads}
    assert drafter.n_threads == drafter._threads_set == drafter_threads
