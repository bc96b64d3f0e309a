"""Our loop against transformers' own assisted generation and prompt lookup, side by side."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch

from ..core.clock import Clock
from ..core.engine import HEADLESS, plain_generate, speculative_generate
from ..core.lean import supports
from ..core.records import Iteration, Step
from ..drafters.llamacpp import llama_cpp_available
from ..drafters.proposers import DraftModelProposer, PromptLookupProposer
from ..drafters.registry import shared_llama_cpp
from ..envinfo import environment
from ..pairs.models import EMBEDDED_NAME, ModelPair
from ..results.calibration import Spread
from ..results.speed import PeersResult, PeersRow, PeersRun
from ..results.trust import Verdict
from .common import Progress, rotated, tick
from .trust import MachineMonitor, check_drift, check_rounds, check_spread


@contextmanager
def _assistant_settings(model, settings: dict):
    """Set the assistant's drafting settings for one generate() call, then put the old ones back.

    transformers' AssistedCandidateGenerator reads num_assistant_tokens, its schedule and the confidence
    threshold from the assistant model's own generation_config (it deep-copies assistant_model.generation_config,
    generation/candidate_generator.py); the same names passed to the target's generate() never reach it, and the
    assistant drafts up to its default 20 a round, stopping below confidence 0.4."""
    cfg = model.generation_config if settings else None
    missing = object()
    saved = {name: getattr(cfg, name, missing) for name in settings} if cfg is not None else {}
    for name, value in settings.items():
        setattr(cfg, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:  # as it was: without the setting
                delattr(cfg, name)
            else:
                setattr(cfg, name, value)


def peers(pair: ModelPair, prompts: dict[str, Sequence[int]], k: int = 4, rounds: int = 3, max_new_tokens: int = 64,
          max_ngram: int = 3, progress: Progress = None) -> PeersResult:
    """Our loop against transformers' `generate` on the same pair, prompts, k and greedy decoding.

    Arms: plain generate; generate(assistant_model=draft) with k constant and with the "heuristic"
    schedule (its transient variant, so no state leaks between runs); generate(prompt_lookup_num_tokens=k);
    and ours: plain, draft model at k, prompt lookup at k. `generate` cannot report its prefill apart,
    so every arm here is timed end to end (prefill included), and ratios are to plain `generate` in the
    same round. The order of arms rotates from round to round."""
    arms = _arms(pair, k, max_new_tokens, max_ngram)
    for ids in prompts.values():  # warm-up: one untimed pass of every arm
        for fn in arms.values():
            fn(ids)
        break
    monitor = MachineMonitor().__enter__()  # other processes on the cores while the arms are timed
    runs = _timed_rounds(Clock.for_pair(pair), arms, prompts, rounds, progress)
    load = monitor.stop()
    # The goal this benchmark checks: our loop against transformers' assisted generation with the same
    # draft model and k, ratio taken within each round and prompt (keyed by the result's fields).
    pairs = {"ours_vs_hf_assisted": (f"ours draft k={k}", f"hf assisted k={k}"),
             "ours_vs_hf_assisted_conf": (f"ours draft k={k} conf 0.4", f"hf assisted k={k} conf 0.4"),
             "ours_vs_hf_assisted_own_prefill": (f"ours draft k={k} own prefill", f"hf assisted k={k}"),
             "ours_vs_hf_assisted_conf_transformers_forward": (f"ours draft k={k} conf 0.4 transformers' forward",
                                                               f"hf assisted k={k} conf 0.4")}
    head_to_head = {key: _per_round(runs, prompts, rounds, *arms_) for key, arms_ in pairs.items()}
    # The verdict speed's figures get: rounds, other processes, the divisor (transformers' plain generate)
    # moving between rounds, and each ours / assisted ratio's spread over the rounds of one prompt (prompts
    # differ for real: prose and a tool call are not noise around one figure).
    hf_plain = {p: [x.tokens_per_s for x in runs if x.arm == "hf plain" and x.prompt == p] for p in prompts}
    trust = Verdict.of(check_rounds(rounds), load.findings(),
                       *(check_drift(p, xs, load=load) for p, xs in hf_plain.items()),
                       *(check_spread(f"{' / '.join(pairs[key])} on {p}", xs)
                         for key, by_prompt in head_to_head.items() for p, xs in by_prompt.items()))
    pooled = {key: Spread.of(xs) if (xs := [x for xs in by_prompt.values() for x in xs]) else None
              for key, by_prompt in head_to_head.items()}
    return PeersResult(trust=trust, machine=load, environment=environment(pair), k=k, rounds=rounds, **pooled,
                       max_new_tokens=max_new_tokens, table=[_row(runs, arm) for arm in arms], runs=runs)


def _arms(pair: ModelPair, k: int, max_new_tokens: int, max_ngram: int) -> dict[str, Callable[[Sequence[int]], list]]:
    """Every arm by name: a function from prompt ids to the tokens it generated."""
    eos = sorted(pair.eos_ids)
    gen_kwargs = dict(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos or None,
                      pad_token_id=eos[0] if eos else 0)

    def hf(ids, assistant: dict | None = None, **extra):
        x = torch.tensor([list(ids)], device=pair.device)
        with torch.inference_mode(), _assistant_settings(pair.draft, assistant or {}):
            out = pair.target.generate(x, attention_mask=torch.ones_like(x), **gen_kwargs,
                                       **({"assistant_model": pair.draft} if assistant else {}), **extra)
        return out[0, x.shape[1]:].tolist()

    def ours(ids, proposer=None, min_confidence=None):
        if proposer is None:
            recs = list(plain_generate(pair, ids, max_new_tokens=max_new_tokens))
            return [r.token for r in recs if isinstance(r, Step)]
        recs = list(speculative_generate(pair, ids, proposer=proposer, k=k, max_new_tokens=max_new_tokens,
                                         options=HEADLESS, min_confidence=min_confidence))
        return [t for r in recs if isinstance(r, Iteration) for t in r.emitted]

    arms: dict[str, Callable] = {"hf plain": lambda ids: hf(ids)}
    if pair.draft is not None:
        # transformers stops drafting after a token the assistant gave less than its confidence threshold; 1e-9 is
        # "never stop" (0 reads as unset and leaves the default, 0.4). Each transformers arm has our arm with the
        # same policy beside it.
        arms[f"hf assisted k={k}"] = lambda ids: hf(ids, {"num_assistant_tokens": k, "num_assistant_tokens_schedule":
                                                          "constant", "assistant_confidence_threshold": 1e-9})
        arms[f"hf assisted k={k} conf 0.4"] = lambda ids: hf(ids, {"num_assistant_tokens": k,
                                                                   "num_assistant_tokens_schedule": "constant",
                                                                   "assistant_confidence_threshold": 0.4})
        arms["hf assisted heuristic"] = lambda ids: hf(ids, {"num_assistant_tokens": k,
                                                             "num_assistant_tokens_schedule": "heuristic_transient"})
    arms[f"hf prompt-lookup k={k}"] = lambda ids: hf(ids, prompt_lookup_num_tokens=k, max_matching_ngram_size=max_ngram)
    arms["ours plain"] = lambda ids: ours(ids)
    if pair.draft is not None:
        # As the playground runs it: a draft that is a quantized copy of the target copies the target's prompt KV
        # (transformers' assistant prefills the prompt itself); the "own prefill" arm shows what that is worth.
        # Our drafter runs a Llama draft through its lean forward (core/lean.py); the "transformers' forward" arm
        # runs it through the model's own, as transformers' assistant does, to show what that part is worth.
        def draft(copies=pair.draft_copies_target, forward="auto"):
            return DraftModelProposer(pair.draft, pair.device, pair.vocab_size, copies_target=copies, forward=forward)

        arms[f"ours draft k={k}"] = lambda ids: ours(ids, draft())
        arms[f"ours draft k={k} conf 0.4"] = lambda ids: ours(ids, draft(), min_confidence=0.4)
        if supports(pair.draft) is None:
            arms[f"ours draft k={k} conf 0.4 transformers' forward"] = lambda ids: ours(
                ids, draft(forward="transformers"), min_confidence=0.4)
        if pair.draft_copies_target:
            arms[f"ours draft k={k} own prefill"] = lambda ids: ours(ids, draft(False))
    arms[f"ours prompt-lookup k={k}"] = lambda ids: ours(ids, PromptLookupProposer(max_ngram))
    if pair.target_name == EMBEDDED_NAME and llama_cpp_available()[0]:  # ours fastest, which transformers cannot run
        arms[f"ours llama.cpp k={k}"] = lambda ids: ours(ids, shared_llama_cpp(pair))
    return arms


def _timed_rounds(clock: Clock, arms: dict[str, Callable], prompts: dict[str, Sequence[int]], rounds: int,
                  progress: Progress) -> list[PeersRun]:
    """Every arm on every prompt in every round, in an order that rotates, each timed end to end and set
    against transformers' plain generate of its round and prompt."""
    names = list(arms)
    runs = []
    total, done = rounds * len(prompts) * len(names), 0
    for r in range(rounds):
        for p_index, (pname, ids) in enumerate(prompts.items()):
            timed = {}
            for arm in rotated(names, r + p_index):
                t0 = clock.now()
                toks = arms[arm](ids)
                t1 = clock.now()
                timed[arm] = (len(toks), t1 - t0, toks)
                done += 1
                tick(progress, done / total, f"round {r + 1}/{rounds}, {pname}: {arm}")
            base_n, base_s, base_toks = timed["hf plain"]
            for arm, (n, s, toks) in timed.items():
                runs.append(PeersRun(round=r, prompt=pname, arm=arm, tokens=n, seconds=s, tokens_per_s=n / s,
                                     ratio_to_hf_plain=(n / s) / (base_n / base_s),
                                     same_output_as_hf_plain=toks == base_toks))
    return runs


def _row(runs: list[PeersRun], arm: str) -> PeersRow:
    rows = [x for x in runs if x.arm == arm]
    ratios = [x.ratio_to_hf_plain for x in rows]
    return PeersRow(arm=arm, median_ratio=statistics.median(ratios), min_ratio=min(ratios), max_ratio=max(ratios),
                    median_tokens_per_s=statistics.median(x.tokens_per_s for x in rows),
                    outputs_equal=sum(x.same_output_as_hf_plain for x in rows), n=len(rows))


def _per_round(runs: list[PeersRun], prompts: dict[str, Sequence[int]], rounds: int, ours_arm: str,
               hf_arm: str) -> dict[str, list[float]]:
    """Ours against transformers' arm in each round, per prompt."""
    out = {}
    for pname in prompts:
        for r in range(rounds):
            by = {x.arm: x for x in runs if x.round == r and x.prompt == pname}
            a, b = by.get(ours_arm), by.get(hf_arm)
            if a and b:
                out.setdefault(pname, []).append(a.tokens_per_s / b.tokens_per_s)
    return out
