"""The speculative loop and the plain baseline, as generators of records.

speculative_generate: propose k tokens, verify them in one target pass, accept a prefix by the rule,
roll both caches back; yield one `Iteration` per target pass. plain_generate: one target pass per
token; yield one `Step` each. Both yield a `Prefill` record first, so a reader can count the prompt
pass apart from decoding.

Cache invariant, between iterations: the target's cache holds every committed token except the
last one (the "pending" token, fed at the head of the next verification pass); the draft's cache
holds a prefix of the committed tokens and catches up at its next propose.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from ..errors import PlaygroundError
from .cached import CachedLM
from .clock import Clock
from .prefill import check_overlap, prefill_in_turn, prefill_overlapped, spare_prefill_threads
from .proposal import EMPTY, FORCED_SOURCE, LOOKUP_MAX, Proposal, Proposer, RunContext
from .records import ACCEPTED, BONUS, CORRECTION, FORCED, PLAIN, Iteration, Prefill, Step
from .rules import Decision, SampleRule, accept_greedy, accept_sample
from .sampling import GREEDY, SamplingConfig, choose, probabilities
from .static import target_lm

if TYPE_CHECKING:  # annotations only: the loop reads a loaded pair's fields and loads nothing itself
    from ..pairs.models import ModelPair

K_MAX = 16


class KController(Protocol):
    """Chooses k for each iteration; sees every iteration's record. `FixedK` is the plain setting.

    next_k is told how many tokens the run may still emit and, for a drafter with several sources
    (the hybrid), where the next proposal will come from (`Proposer.next_source`); both may be None.
    Optionally (AdaptiveK): `drafter_stops(bool)`, told once per run whether the drafter stops on its
    confidence, and `drafting_rule(source)`, a per-iteration stop rule the drafter then applies to each
    proposal's probability (RunContext.go_on), which makes k a cap."""

    def next_k(self, remaining: int | None = None, source: str | None = None) -> int: ...

    def observe(self, iteration: Iteration) -> None: ...


class FixedK:
    def __init__(self, k: int):
        self.k = k

    def next_k(self, remaining: int | None = None, source: str | None = None) -> int:
        return self.k

    def observe(self, iteration: Iteration) -> None:
        pass

    def __repr__(self) -> str:
        return f"FixedK({self.k})"


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int):
        raise PlaygroundError(f"k must be an integer from 1 to {K_MAX}, got {k!r}")
    if not 1 <= k <= K_MAX:
        raise PlaygroundError(f"k must be from 1 to {K_MAX}, got {k}")
    return k


def check_min_confidence(value):
    """A draft confidence threshold: None (draft all k) or a probability in [0, 1]."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0):
        raise PlaygroundError(f"the draft confidence threshold is a probability in [0, 1], got {value!r}")
    return value


def check_request(pair: ModelPair, prompt_ids: Sequence[int], max_new_tokens) -> None:
    if len(prompt_ids) == 0:
        raise PlaygroundError("the prompt is empty: type something, or pick a preset")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise PlaygroundError(f"max new tokens must be a positive integer, got {max_new_tokens!r}")
    bad = [t for t in prompt_ids if not 0 <= int(t) < pair.vocab_size]
    if bad:
        raise PlaygroundError(f"prompt token id {bad[0]} is outside the vocabulary (0..{pair.vocab_size - 1})")
    if pair.max_context is not None and len(prompt_ids) + max_new_tokens > pair.max_context:
        raise PlaygroundError(
            f"the prompt is {len(prompt_ids)} tokens and {max_new_tokens} new tokens were asked for, but the "
            f"target's context holds {pair.max_context}; shorten the prompt or ask for fewer tokens"
        )


def _cut(tokens: list[int], roles: list[str], stop_ids: frozenset[int], remaining: int):
    """Stop exactly at an end-of-sequence token or at the length limit; drop whatever follows."""
    for i, t in enumerate(tokens):
        if t in stop_ids:
            return tokens[: i + 1], roles[: i + 1], "eos"
    if len(tokens) >= remaining:
        return tokens[:remaining], roles[:remaining], "length"
    return tokens, roles, None


def _setup(pair, prompt_ids, max_new_tokens, sampling, stop_ids, clock):
    """What both loops start from: a checked request, a clock, the stop tokens, the seeded generator,
    the committed tokens and the target with an empty cache, on the pair's target forward (core.static.target_lm:
    both loops the same one, so a speed ratio compares like with like)."""
    check_request(pair, prompt_ids, max_new_tokens)
    clock = clock or Clock.for_pair(pair)
    stops = frozenset(pair.eos_ids if stop_ids is None else stop_ids)
    generator = sampling.generator(pair.device)
    committed = [int(t) for t in prompt_ids]
    return clock, stops, generator, committed, target_lm(pair, len(committed) + max_new_tokens)


@dataclass(frozen=True)
class LoopOptions:
    """speculative_generate's rarely-set arguments.

    rule: the acceptance rule when sampling (the exact rule by default; the wrong ones exist for the
    distribution test). stop_ids: the tokens that end a run (None: the pair's end-of-sequence ids).
    clock: None: Clock.for_pair. record_probs: p(x) and q(x) of each proposal in its Iteration (hover text).
    overlap_prefill: run the drafter's prompt prefill in a worker thread beside the target's (None: where the
    proposer can, `Proposer.prefill_overlaps`, and cores are left for it, `spare_prefill_threads`);
    prefill_threads: the threads the drafter's prefill uses meanwhile (default: the spare cores, else half of
    torch's, at least one; torch keeps all of its own).
    constraint: a grammar every emitted token keeps to (playground.constraints.grammar.Grammar: `guide(prompt_ids,
    width, stop_ids)` gives the run its constraints.guide.Guide), or None. See `_constrained`."""

    rule: SampleRule = accept_sample
    stop_ids: Sequence[int] | None = None
    clock: Clock | None = None
    record_probs: bool = True
    overlap_prefill: bool | None = None
    prefill_threads: int | None = None
    constraint: object | None = None


DEFAULT_OPTIONS = LoopOptions()
HEADLESS = LoopOptions(record_probs=False)  # what the lab and benchmarks run: no one reads hover text


def speculative_generate(
    pair: ModelPair,
    prompt_ids: Sequence[int],
    *,
    proposer: Proposer,
    k: int | KController = 4,
    sampling: SamplingConfig = GREEDY,
    max_new_tokens: int = 64,
    min_confidence: float | None = None,
    options: LoopOptions = DEFAULT_OPTIONS,
) -> Iterator[Prefill | Iteration]:
    """Speculative decoding of `prompt_ids` with `pair.target`, guesses from `proposer`.

    Greedy decoding uses the greedy rule (output equals plain greedy up to floating-point near-ties);
    sampling uses `options.rule`. k is an int or a KController (adaptive.py). min_confidence: a model drafter
    stops early after a token it gave less than this probability (k is then an upper bound)."""
    check_min_confidence(min_confidence)
    controller = k if hasattr(k, "next_k") else FixedK(check_k(k))
    if proposer.uses_draft_model and pair.draft is None:
        raise PlaygroundError(f"the {proposer.name} drafter needs a draft model, and this pair has none")
    run, prefill = _start(pair, prompt_ids, proposer, controller, sampling, max_new_tokens, min_confidence, options)
    yield prefill
    tell_controller(controller, proposer, sampling)

    produced, index = 0, 0
    while produced < max_new_tokens:
        iteration = _iterate(run, index, max_new_tokens - produced)
        produced += len(iteration.emitted)
        controller.observe(iteration)
        yield iteration
        index += 1
        if iteration.finished:
            return


def _guide(constraint, pair, committed: list[int], stops: frozenset[int]):
    """The run's guide for `constraint` (None: unconstrained), over the target's logits columns."""
    return None if constraint is None else constraint.guide(committed, pair.vocab_size, stops)


@dataclass
class _Run:
    """One speculative run's state between iterations."""

    clock: Clock
    target: CachedLM
    proposer: Proposer
    controller: KController
    ctx: RunContext  # the sampling, generator and stop tokens, shared with the proposer
    committed: list[int]
    start: float  # where decoding's clock starts: the end of the prefill
    rule: SampleRule
    record_probs: bool

    @property
    def guide(self):
        """The constraint's constraints.guide.Guide (the drafters read it as ctx.guide), None: unconstrained."""
        return self.ctx.guide


def _start(pair, prompt_ids, proposer, controller, sampling, max_new_tokens, min_confidence, options: LoopOptions):
    """The checked request, both prefills (overlapped or in turn) and the state decoding starts from."""
    spare = spare_prefill_threads(pair.device)
    overlap = check_overlap(proposer, options.overlap_prefill, options.prefill_threads, spare)
    clock, stops, generator, committed, target = _setup(pair, prompt_ids, max_new_tokens, sampling, options.stop_ids,
                                                        options.clock)

    # The drafter's share is read here, in the caller: torch's thread count is what the target's prefill uses.
    threads = (options.prefill_threads or spare or max(1, torch.get_num_threads() // 2)) if overlap else None
    ctx = RunContext(sampling, generator, stops, min_confidence, prefill_threads=threads,
                     room=len(committed) + max_new_tokens + LOOKUP_MAX,
                     guide=_guide(options.constraint, pair, committed, stops))
    if overlap:
        prefill, start = prefill_overlapped(clock, target, proposer, committed, ctx)
        ctx.prefill_threads = None  # the prefill is over: from here on the drafter runs alone
    else:
        prefill, start = prefill_in_turn(clock, target, proposer, committed, ctx)
    run = _Run(clock, target, proposer, controller, ctx, committed, start, options.rule, options.record_probs)
    return run, prefill


def _iterate(run: _Run, index: int, remaining: int) -> Iteration:
    """One iteration: propose, verify in one target pass, accept, roll both caches back."""
    clock, committed, sampling = run.clock, run.committed, run.ctx.sampling
    t_a = clock.now()
    proposal, k_i = _propose(run, remaining)
    t_b = clock.now()

    # 2. verify: one target pass over the pending token and the proposals -> k + 1 rows
    logits = run.target.feed([committed[-1], *proposal.tokens])
    if run.guide is not None:
        logits = run.guide.rows(committed, proposal.tokens, logits)
    p = None if sampling.greedy else probabilities(logits, sampling)
    decision = _decide(proposal, logits, p, sampling, run.rule, run.ctx.generator)
    t_c = clock.now()

    # 3. accept: accepted proposals, then the target's correction or bonus token
    emitted, roles, finished = _accept(proposal, decision, run.ctx.stop_ids, remaining)
    if run.guide is not None:
        emitted, roles, finished = _complete(run.guide, committed, emitted, roles, finished)
    committed.extend(emitted)
    if run.guide is not None:
        run.guide.commit(committed)

    # 4. roll back: the target keeps the accepted proposals (not its own token, still pending)
    run.target.crop(len(committed) - 1)
    run.proposer.rollback(committed)
    t_d = clock.now()

    probs = (_display_probs(proposal, logits, p, sampling) if run.record_probs and proposal.tokens
             else (None, None))
    return Iteration(
        index=index,
        k=k_i,
        proposed=proposal.tokens,
        n_accepted=decision.n_accepted,
        emitted=tuple(emitted),
        roles=tuple(roles),
        draft_s=t_b - t_a,
        verify_s=t_c - t_b,
        rollback_s=t_d - t_c,
        elapsed_s=clock.now() - run.start,
        p=probs[0],
        q=probs[1],
        sources=proposal.sources,
        finished=finished,
    )


def _propose(run: _Run, remaining: int) -> tuple[Proposal, int]:
    """1. propose: the controller's k, then the drafter's proposal (the drafting time includes choosing k, and
    the hybrid's lookup that says which source the proposal will come from; propose reuses that lookup).
    Proposals beyond remaining - 1 could never be emitted; k = 0 is a plain step."""
    committed = run.committed
    source = run.proposer.next_source(committed) if remaining > 1 else None
    k_i = max(0, min(int(run.controller.next_k(remaining=remaining, source=source)), remaining - 1))
    run.ctx.go_on = drafting_rule(run.controller, source, k_i)
    proposal = run.proposer.propose(committed, k_i) if k_i > 0 else EMPTY
    proposal = _clip(proposal, k_i)
    if run.guide is not None and proposal.tokens:
        proposal = _clip(proposal, run.guide.legal(committed, proposal.tokens))
    return proposal, k_i


def _accept(proposal: Proposal, decision: Decision, stops: frozenset[int], remaining: int):
    """The accepted proposals and the target's own token, with their roles, cut at a stop token or the length
    limit; and why the run finished (None: it goes on)."""
    n = decision.n_accepted
    if not proposal.tokens:
        last_role = PLAIN
    else:
        last_role = BONUS if decision.is_bonus(len(proposal)) else CORRECTION
    sources = proposal.sources or ()
    kept = [FORCED if i < len(sources) and sources[i] == FORCED_SOURCE else ACCEPTED for i in range(n)]
    emitted, roles, finished = _cut([*proposal.tokens[:n], decision.token], [*kept, last_role], stops, remaining)
    if finished is None and len(emitted) >= remaining:
        finished = "length"
    return emitted, roles, finished


def tell_controller(controller, proposer: Proposer, sampling: SamplingConfig) -> None:
    """Tell a controller that can use it (AdaptiveK.drafter_stops) whether the drafter stops on its confidence:
    a model drafter does, where decoding is greedy (its probability of its arg-max is then its own estimate of
    acceptance; a sampled token's probability is not)."""
    tell = getattr(controller, "drafter_stops", None)
    if tell is not None:
        tell(proposer.confidence_stops and sampling.greedy)


def drafting_rule(controller, source: str | None, k: int):
    """The controller's stop rule for this iteration's drafting (AdaptiveK.drafting_rule), if it has one."""
    rule = getattr(controller, "drafting_rule", None)
    return rule(source) if rule is not None and k > 0 else None


def _complete(guide, committed: list[int], emitted: list[int], roles: list[str], finished: str | None):
    """Constrained runs end where the grammar is complete (nothing but an end-of-sequence token may follow): the
    emitted tokens are cut there and the run finishes ("schema"), as a plain run does at the same token."""
    n = guide.complete_at(committed, emitted)
    return (emitted, roles, finished) if n is None else (emitted[:n], roles[:n], "schema")


def _clip(proposal: Proposal, k: int) -> Proposal:
    if len(proposal) <= k:
        return proposal
    q = proposal.q[:k] if proposal.q is not None else None
    sources = proposal.sources[:k] if proposal.sources is not None else None
    return Proposal(proposal.tokens[:k], q, sources)


def _decide(proposal, logits, p, sampling, rule, generator) -> Decision:
    if sampling.greedy:
        return accept_greedy(proposal.tokens, logits)
    return rule(proposal.tokens, p, proposal.q, generator)


def _display_probs(proposal: Proposal, logits, p, sampling):
    """p(x) and q(x) of each proposal, for hover text: as sampled when sampling; softmax at T=1 when greedy."""
    k = len(proposal)
    if p is None:
        p = probabilities(logits[:k], sampling)
    idx = torch.arange(k, device=p.device)
    x = torch.as_tensor(proposal.tokens, dtype=torch.long, device=p.device)
    px = tuple(p[idx, x].tolist())
    qx = tuple(proposal.q[idx, x].tolist()) if proposal.q is not None else None
    return px, qx


def plain_generate(
    pair: ModelPair,
    prompt_ids: Sequence[int],
    *,
    sampling: SamplingConfig = GREEDY,
    max_new_tokens: int = 64,
    stop_ids: Sequence[int] | None = None,
    clock: Clock | None = None,
    constraint=None,
) -> Iterator[Prefill | Step]:
    """The baseline: one target pass per new token, through the same cache and sampling code. constraint: as
    LoopOptions.constraint (each step's logits masked; the run ends where the grammar is complete, "schema")."""
    clock, stops, generator, committed, target = _setup(pair, prompt_ids, max_new_tokens, sampling, stop_ids, clock)
    guide = _guide(constraint, pair, committed, stops)

    t0 = clock.now()
    target.feed(committed[:-1], last_only=True)
    start = clock.now()
    yield Prefill(len(committed), target_s=start - t0)

    for index in range(max_new_tokens):
        t_a = clock.now()
        logits = target.feed([committed[-1]])
        if guide is not None:
            logits = guide.rows(committed, (), logits)
        token = choose(logits[-1], sampling, generator)
        committed.append(token)
        done = guide is not None and token not in stops and guide.complete_at(committed[:-1], [token]) is not None
        if guide is not None:
            guide.commit(committed)
        t_b = clock.now()
        finished = "eos" if token in stops else ("schema" if done else ("length" if index + 1 == max_new_tokens
                                                                         else None))
        yield Step(index, token, t_b - t_a, t_b - start, finished)
        if finished:
            return
