"""A sampling replay of one turn: per-position expected acceptance along the recorded text and fixed-k walks in
expectation (walk.expected_walk). Always an estimate: a sampled run's accepted tokens are draws, not the
recorded ones, so its later contexts differ from the text replayed here.

Model drafters: at completion position t, the exact rule accepts a draft token with probability
beta_t = sum_x min(p_t(x), q_t(x)), p and q the target's and the drafter's distributions after the recorded text
before t, warped alike (playground.core.sampling); q from the drafter's own propose, fed one token at a time.
Prompt lookup, like every model-free drafter (DrafterSpec.replay "live"), proposes deterministically: its j-th
proposal from position i is accepted with p_{i+j}(x_j), known while the proposals before it are the recorded tokens
(the target's distribution after another text is not computed); past that it counts as rejected, so its figure is a
lower bound. The hybrid takes lookup's where
lookup finds a match (its min n-gram of 2), the model drafter's otherwise, as HybridProposer decides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ...core.proposal import LOOKUP_MAX, RunContext
from ...core.sampling import probabilities
from ...drafters import registry
from ...drafters.adaptive import CostCurve
from ...drafters.proposers import lookup
from ...drafters.registry import DRAFT, HYBRID_WALK, LOOKUP, make_proposer
from ...errors import PlaygroundError
from ...inputs.traces import Turn
from ...results.replay import ExpectedDrafter, ExpectedWalk, ReplayedTurn
from ..shapes import segment
from .options import ReplayOptions, TraceMemory
from .walk import (
    TargetPass,
    drafter_pass,
    exactness,
    expected_acceptance,
    expected_walk,
    prompt_cache,
    replayed_turn,
    shape_costs,
    summarize_rows,
    target_chunks,
)


def lookups(prompt_ids: Sequence[int], completion_ids: Sequence[int], max_ngram: int, min_ngram: int,
            stop_ids) -> list[list[int]]:
    """Per completion position i, what prompt lookup proposes after the recorded text before i (up to LOOKUP_MAX
    tokens, cut after an end-of-sequence token as the proposers cut it)."""
    committed, out = [int(t) for t in prompt_ids], []
    for t in completion_ids:
        found = lookup(committed, LOOKUP_MAX, max_ngram, min_ngram)
        for j, x in enumerate(found):
            if x in stop_ids:
                found = found[: j + 1]
                break
        out.append(found)
        committed.append(int(t))
    return out


def proposals_along(proposer, prompt_ids: Sequence[int], completion_ids: Sequence[int], ctx: RunContext
                    ) -> list[list[int]]:
    """Per completion position i, what a model-free drafter (DrafterSpec.replay "live") proposes after the recorded
    text before i (up to LOOKUP_MAX tokens): for prompt lookup, `lookups` with its own n-grams."""
    committed, out = [int(t) for t in prompt_ids], []
    proposer.begin(committed, ctx)
    for t in completion_ids:
        out.append(list(proposer.propose(committed, LOOKUP_MAX).tokens))
        committed.append(int(t))
        proposer.rollback(committed)  # as after a verification: the committed text is the recorded one
    return out


def _needed(found: list[list[int]], completion: Sequence[int]) -> dict[int, list[tuple[int, int, int]]]:
    """position t -> [(start i, proposal index j, token x)] whose p_t(x) a lookup walk needs: j = 0, and every j
    whose earlier proposals are the recorded tokens."""
    need: dict[int, list[tuple[int, int, int]]] = {}
    for i, xs in enumerate(found):
        for j, x in enumerate(xs):
            t = i + j
            if t >= len(completion):
                break
            need.setdefault(t, []).append((i, j, x))
            if x != completion[t]:
                break
    return need


def replay_sampled_turn(pair, turn: Turn, options: ReplayOptions, memory: TraceMemory,
                        progress: Callable[[str], None]) -> ReplayedTurn:
    """Everything a sampling replay reports about one turn (see the module docstring)."""
    drafters, sampling, max_ngram = options.drafters, options.sampling, options.max_ngram
    remembering = [d for d in drafters if registry.new_memory(d) is not None]  # proposals hang on earlier turns
    if remembering:
        raise PlaygroundError(f"{', '.join(remembering)} replays for greedy decoding only")
    completion = [int(t) for t in turn.completion_ids]
    length = min(turn.max_new, len(completion))
    stops = frozenset(pair.eos_ids)
    kinds = {d: registry.drafter_spec(d).replay for d in drafters}
    inner = registry.model_drafter(pair)  # what a hybrid wraps
    models = sorted({d if kinds[d] == "pass" else inner for d in drafters if kinds[d] != "live"} - {None})
    prompt = prompt_cache(pair, turn.prompt_ids)  # what a live prefill leaves, for drafters that copy it
    found = {}  # model-free proposals (a hybrid's: its lookup's) along the text, per drafter
    for d in drafters:
        if kinds[d] == "live":
            ctx = RunContext(sampling, sampling.generator(pair.device), stops, target_kv=prompt)
            found[d] = proposals_along(make_proposer(pair, d, max_ngram=max_ngram), turn.prompt_ids, completion, ctx)
        elif kinds[d] == HYBRID_WALK:
            hybrid = make_proposer(pair, d, max_ngram=max_ngram)
            found[d] = lookups(turn.prompt_ids, completion, hybrid.max_ngram, hybrid.min_ngram, stops)
    need = {d: _needed(f, completion) for d, f in found.items()}
    got = {d: [[0.0] * len(xs) for xs in f] for d, f in found.items()}
    gens = {name: drafter_pass(make_proposer(pair, name, max_ngram=max_ngram), turn.prompt_ids, completion,
                               RunContext(sampling, sampling.generator(pair.device), stops, target_kv=prompt))
            for name in models}
    beta: dict[str, list[float]] = {name: [] for name in models}
    tp = TargetPass([], [], [], [], pair.dtype)
    for a, logits in target_chunks(pair, turn.prompt_ids, completion, options.limits.replay_chunk_tokens, prompt):
        summarize_rows(logits, completion[a: a + logits.shape[0]], tp)
        p = probabilities(logits, sampling)
        for name, gen in gens.items():
            qs = [next(gen)[1] for _ in range(p.shape[0])]
            beta[name] += expected_acceptance(p, _stack(qs)).tolist()
        for m, positions in need.items():
            for t in range(a, a + p.shape[0]):
                for i, j, x in positions.get(t, ()):
                    got[m][i][j] = float(p[t - a, x])
    progress("target and drafter passes")
    shapes = segment(pair.tokenizer, turn.prompt_ids, completion, pair.eos_ids)
    entries = {}
    for drafter in drafters:
        timing = options.timing_of(drafter, turn.prompt_ids) if options.timing_of is not None else None
        curve = CostCurve.from_timing(timing) if timing is not None else None
        model = None if kinds[drafter] == "live" else drafter if kinds[drafter] == "pass" else inner
        accept, drafted, source = _model_of(kinds[drafter], model, beta, found.get(drafter), got.get(drafter))
        entry = ExpectedDrafter(timing=memory.timing_index(drafter, timing), exact=False, agreement=beta.get(model),
                                walks={})
        for k in options.ks:
            ew = expected_walk(accept, drafted, source, k, length, curve)
            entry.walks[f"k={k}"] = ExpectedWalk(
                arm=f"k={k}", new_tokens=length, expected=True, iterations=ew.iterations, histogram=ew.histogram,
                per_position=ew.per_position, cost=ew.cost, predicted_speedup=ew.predicted_speedup,
                shapes=shape_costs(shapes[:length], ew.token_cost))
            progress(f"{drafter} k={k}")
        entries[drafter] = entry
    return replayed_turn(turn, exactness(turn, tp, sampling), shapes, entries)


def _stack(rows) -> torch.Tensor:
    return torch.stack([r.float() for r in rows])


def _model_of(kind: str, model: str | None, beta: dict, f: list | None, g: list | None):
    """(accept(i), drafted(i, k_i), source(i)) of one drafter for expected_walk: a model drafter's (kind "pass"),
    a model-free one's ("live": its proposals `f` and their acceptance probabilities `g`) or a hybrid's (its
    lookup's where it matches, else the model drafter's)."""
    if kind == "pass":
        b = beta[model]
        return (lambda i: b[i: i + LOOKUP_MAX]), (lambda i, k: k), (lambda i: None)

    def known(i):
        """The acceptance probabilities of the proposals from i, up to the first off the recorded text."""
        return g[i][: len(g[i])]

    if kind == "live":
        return known, (lambda i, k: min(k, len(f[i]))), (lambda i: None)
    b = beta[model]
    return ((lambda i: known(i) if f[i] else b[i: i + LOOKUP_MAX]),
            (lambda i, k: min(k, len(f[i])) if f[i] else k),
            (lambda i: LOOKUP.name if f[i] else DRAFT.name))
