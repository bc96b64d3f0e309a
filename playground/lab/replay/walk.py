"""The mechanics of a replay: teacher-forced passes over prompt + recorded completion, and the walk that turns
them into the iterations a live run would have had.

Greedy decoding. An iteration that starts at completion position i proposes up to k tokens; the target keeps
them while each is its arg-max after the text before it, and an accepted proposal IS the recorded token there
(when the completion is the target's own greedy output), so the target's arg-max at every position, from one
teacher-forced pass (`target_pass`), decides every iteration of every k. `walk` runs the engine's loop
(core.engine.speculative_generate) with that pass in place of the verification: the same k clipping near the
length limit and at an end-of-sequence token, the same controller and proposer calls.

With live feeding the proposer is the real one: a model drafter's logits may depend on how its cache was fed, by
much more than rounding (llama.cpp's batched decode against one token at a time: up to 1.3 logits at 330 tokens of
context), so only the live feeding reproduces the live proposals of such a drafter. A `ReplayContext` stops it
right after its first proposal the target rejects (a live drafter drafts all k and throws the rest away; what it
keeps is the same), or where a draft confidence stop does. A shared-pass walk reads a model drafter's proposals
from one shared pass instead (`drafter_pass`: its own propose, one token at a time); where that equals the live
walks is `shared_exact` (playground.lab.replay's docstring). A completion the target did not write is walked from
the shared pass (`PassProposer`): draft/target agreement, an estimate. A walk with a guide (ctx.guide) is a
constrained run's, as the engine's: proposals cut at the first token the grammar refuses, kept forced tokens role
FORCED, the end where the grammar is complete (schema.py).

Sampling. Per position, the exact rule accepts a draft token with probability sum_x min(p(x), q(x)) under the
same warpers (`expected_acceptance`); `expected_walk` runs the iterations in expectation along the recorded
text: an estimate (the accepted tokens of a sampled run need not be the recorded ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.cached import CachedLM
from ...core.engine import _clip, _complete, _cut, drafting_rule, tell_controller  # the engine's own: no drift
from ...core.proposal import EMPTY, FORCED_SOURCE, Proposal, Proposer, RunContext, top_two
from ...core.records import ACCEPTED, BONUS, CORRECTION, FORCED, PLAIN, Iteration
from ...core.sampling import SamplingConfig
from ...drafters.adaptive import CostCurve
from ...drafters.registry import drafters
from ...results.replay import Mismatch, ReplayedTurn, ShapeCost, TurnShapes
from ..quality import _spacing  # the dtype spacing the divergence experiment compares logit gaps with
from ..shapes import runs


@dataclass
class ReplayContext(RunContext):
    """A RunContext whose `confident` stops a model drafter right after the first proposal that differs from
    `expected` (the target's tokens there): both model drafters call it after every proposal when
    min_confidence is set (the walk sets 0.0). `stopped`: the last propose was cut short by it.
    With a `threshold` (a replay of a run with a draft confidence stop) it stops the drafter where a live run's
    context would, at the first proposal below it, not at a rejected one (how far a live drafter goes on costs)."""

    expected: list[int] = field(default_factory=list)
    cursor: int = 0
    stopped: bool = False
    threshold: float | None = None

    def expect(self, tokens: Sequence[int]) -> None:
        self.expected, self.cursor, self.stopped = list(tokens), 0, False

    def confident(self, probs: torch.Tensor, token: int) -> bool:
        if self.threshold is not None or self.go_on is not None:  # stop where the live run's stops would
            return super().confident(probs, token)  # min_confidence is the threshold, or 0.0: never below it
        i, self.cursor = self.cursor, self.cursor + 1
        ok = i < len(self.expected) and int(token) == self.expected[i]
        self.stopped = self.stopped or not ok
        return ok


def replay_context(sampling: SamplingConfig, device, stop_ids, min_confidence: float | None = None) -> ReplayContext:
    """The walk's context; `min_confidence`: the draft confidence stop of the run replayed (None: drafts all k)."""
    return ReplayContext(sampling, sampling.generator(device), frozenset(stop_ids),
                         min_confidence=0.0 if min_confidence is None else min_confidence, threshold=min_confidence)


class PassProposer(Proposer):
    """A model drafter's greedy proposals read from a shared pass (`drafter_pass`): at completion position t, its
    arg-max `pred[t]` after the recorded text before t. It proposes while they agree with the target's arg-max
    `target[t]` after the same text and stops after the first that does not: what follows a rejected proposal
    is never kept. On a completion the target did not write this is draft/target agreement on that text (an
    accepted proposal may differ from the recorded token; the walk goes on along the recorded text)."""

    def __init__(self, name: str, prompt_len: int, target: Sequence[int], pred: Sequence[int],
                 uses_draft_model: bool = False, conf: Sequence[tuple[float, float]] | None = None):
        self.name, self.prompt_len, self.target, self.pred = name, prompt_len, list(target), list(pred)
        self.uses_draft_model = uses_draft_model
        # conf[t]: the drafter's probability of pred[t] in the pass and the highest it gave any other token. With
        # it, a stop rule of the context (ctx.go_on) is applied to those, past a rejected proposal too (along the
        # recorded text: an estimate of what the drafter, fed its own proposal there, would have been sure of).
        self.conf = list(conf) if conf is not None else None
        self.confidence_stops = self.conf is not None

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        j = len(tokens) - self.prompt_len
        out: list[int] = []
        for i in range(k):
            t = j + i
            if t >= len(self.pred):
                break
            x = self.pred[t]
            out.append(x)
            if x in self.ctx.stop_ids:
                break
            if self.conf is not None and self.ctx.go_on is not None:
                if not self.ctx.go_on(*self.conf[t]):
                    break
                continue
            if x != self.target[t]:
                if i + 1 < k and isinstance(self.ctx, ReplayContext):
                    self.ctx.stopped = True  # a live drafter would have gone on drafting
                break
        return Proposal(tuple(out)) if out else EMPTY


# --- passes ---------------------------------------------------------------------------------------------------


@dataclass
class TargetPass:
    """The target's teacher-forced arg-max at every completion position, the top-2 logit gap there, the top
    logit, the recorded token's logit and the dtype's spacing at the top (a gap within a few spacings is a
    floating-point near-tie)."""

    argmax: list[int]
    gap: list[float]
    top: list[float]
    recorded: list[float]
    dtype: torch.dtype

    def spacing(self, t: int) -> float:
        return _spacing(self.top[t], self.dtype)


def prompt_cache(pair, prompt_ids: Sequence[int]) -> CachedLM:
    """The target after the prompt but its last token, exactly what a live run's prefill leaves (RunContext.target_kv:
    a drafter that copies the target's KV copies it from here): one pass, as the engine's prefill makes it, since
    a pass in chunks rounds differently (the int8 draft's confidence on the copied KV moved across a stop
    threshold with a 256-token chunk). It keeps one row of logits, so nothing bounds it by chunks."""
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed([int(t) for t in prompt_ids[:-1]], last_only=True)
    return lm


def target_chunks(pair, prompt_ids: Sequence[int], completion_ids: Sequence[int], chunk: int,
                  prompt: CachedLM | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """(first completion position, logits [n, V]) for the target after the recorded text, `chunk` positions at a
    time, so no more than chunk x V logits are held at once; the prompt is `prompt_cache`'s (or `prompt`, left
    unchanged)."""
    if prompt is None:
        lm = prompt_cache(pair, prompt_ids)
    else:
        lm = CachedLM(pair.target, pair.device, pair.vocab_size)
        lm.load(prompt.cache, prompt.tokens)
    seq = [int(t) for t in (*prompt_ids, *completion_ids)]
    head = len(prompt_ids) - 1
    feed = seq[head: head + len(completion_ids)]
    for a in range(0, len(feed), chunk):
        yield a, lm.feed(feed[a: a + chunk]).float()


def summarize_rows(logits: torch.Tensor, recorded: Sequence[int], into: TargetPass) -> None:
    """Append one chunk's rows to `into`: arg-max, top-2 gap, top logit and the recorded token's logit."""
    top = torch.topk(logits, 2, dim=-1)
    into.argmax += top.indices[:, 0].tolist()
    into.gap += (top.values[:, 0] - top.values[:, 1]).tolist()
    into.top += top.values[:, 0].tolist()
    rows = torch.arange(logits.shape[0], device=logits.device)
    into.recorded += logits[rows, torch.as_tensor(list(recorded), device=logits.device)].tolist()


def target_pass(pair, turn, chunk: int, prompt: CachedLM | None = None) -> TargetPass:
    """The target's teacher-forced pass over `turn`'s recorded completion, summarized row by row (`chunk` rows of
    logits at a time; the prompt as target_chunks takes it)."""
    tp = TargetPass([], [], [], [], pair.dtype)
    for a, logits in target_chunks(pair, turn.prompt_ids, turn.completion_ids, chunk, prompt):
        summarize_rows(logits, turn.completion_ids[a: a + logits.shape[0]], tp)
    return tp


def drafter_pass(proposer: Proposer, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                 ctx: RunContext) -> Iterator[tuple[int, torch.Tensor | None]]:
    """(proposal, q row) at every completion position: the drafter's own propose(., 1) after the recorded text,
    fed one token at a time (the shared pass, and the q of a sampling replay)."""
    committed = [int(t) for t in prompt_ids]
    proposer.begin(committed, ctx)
    for t in completion_ids:
        proposal = proposer.propose(committed, 1)
        yield (proposal.tokens[0] if proposal.tokens else -1), (proposal.q[0] if proposal.q is not None else None)
        committed.append(int(t))
        proposer.rollback(committed)


def shared_pass(proposer: Proposer, prompt_ids: Sequence[int], completion_ids: Sequence[int],
                ctx: RunContext) -> tuple[list[int], list[tuple[float, float]]]:
    """`drafter_pass`'s proposals, the drafter's probability of each and the highest it gave another token (0, 0
    where it proposed nothing), a row at a time: the rows of a long completion would not fit in memory."""
    preds, confs = [], []
    for x, q in drafter_pass(proposer, prompt_ids, completion_ids, ctx):
        preds.append(x)
        confs.append(top_two(q, x) if q is not None and x >= 0 else (0.0, 0.0))
    return preds, confs


def shared_exact(pair) -> frozenset[str]:
    """The model drafters whose shared-pass walks equal their live-fed ones on this pair, as each declares
    (DrafterSpec.pass_exact): llama.cpp (measured: playground.lab.replay's docstring) and a draft model the lean
    forward runs on row-independent int8 products (the embedded pair's int8 copy), whose logits for a token do not
    depend on what was fed beside it (core.int8; bitwise in tests/test_int8.py)."""
    return frozenset(s.name for s in drafters() if s.model and s.pass_exact is not None and s.pass_exact(pair))


def expected_acceptance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Per row, the exact rule's acceptance probability of a draft token drawn from q: sum_x min(p(x), q(x))."""
    return torch.minimum(p.float(), q.float().to(p.device)).sum(dim=-1)


@dataclass
class Exactness:
    """Whether a turn replays exactly, and if not why (the fields of its ReplayedTurn of the same names)."""

    exact: bool
    estimate_reason: str | None
    mismatches: int
    first_mismatches: list[Mismatch]


def exactness(turn, tp: TargetPass, sampling: SamplingConfig, shown: int = 5) -> Exactness:
    """Whether the turn replays exactly: greedy, and the target's teacher-forced arg-max is the recorded token at
    every position. Mismatches are listed with the logit gap between the two tokens and the dtype's spacing."""
    bad = [t for t, (a, c) in enumerate(zip(tp.argmax, turn.completion_ids)) if a != c]
    cases = [Mismatch(position=t, recorded=int(turn.completion_ids[t]), target=tp.argmax[t],
                      logit_gap=tp.top[t] - tp.recorded[t], dtype_spacing=tp.spacing(t),
                      near_tie=tp.top[t] - tp.recorded[t] <= 8 * tp.spacing(t)) for t in bad[:shown]]
    if not sampling.greedy:
        why = "sampling: expected acceptance along the recorded text, an estimate"
    elif bad:
        why = (f"the completion is not the target's greedy output at {len(bad)} of {len(tp.argmax)} positions "
               f"(first at {bad[0]}): draft/target agreement on this text, an estimate")
    else:
        why = None
    return Exactness(why is None, why, len(bad), cases)


def replayed_turn(turn, ex: Exactness, shapes: list[str], drafters: dict) -> ReplayedTurn:
    """A turn's part of the result: the turn, its exactness, its tokens' shapes and its drafters' walks."""
    return ReplayedTurn(**turn.to_dict(), **vars(ex), drafters=drafters,
                        shapes=TurnShapes([tuple(r) for r in runs(shapes)],
                                          {s: shapes.count(s) for s in sorted(set(shapes))}))


def shape_costs(shapes: Sequence[str], per_token: Sequence[float] | None) -> dict[str, ShapeCost]:
    """Per shape of a walk's tokens (`shapes`, one per token emitted): its tokens and the cost they carried
    (`per_token`: each token's share; None without a calibration)."""
    out: dict[str, list] = {}
    for t, shape in enumerate(shapes):
        entry = out.setdefault(shape, [0, 0.0 if per_token else None])
        entry[0] += 1
        if per_token:
            entry[1] += per_token[t]
    return {shape: (n, cost) for shape, (n, cost) in out.items()}


# --- the walk -------------------------------------------------------------------------------------------------


@dataclass
class Walk:
    records: list[Iteration]
    drafted: list[int]  # per iteration: the proposals a live drafter makes (k for a model drafter, see `walk`)
    decisions: list[int] = field(default_factory=list)


def walk(prompt_ids: Sequence[int], completion_ids: Sequence[int], target: Sequence[int], proposer: Proposer,
         controller, max_new_tokens: int, ctx: ReplayContext) -> Walk:
    """The iterations of a greedy run over the recorded completion, as speculative_generate runs them, with the
    target's arg-max `target` (one per completion position) in place of its verification pass. Acceptance is
    agreement with it; the tokens committed are the recorded ones (equal, when the completion is the target's own
    greedy output). Records carry zero timings. A model proposer stopped by the ReplayContext holds the decided
    proposals only (the accepted ones and the first rejected one); `drafted` says k for it, what a live drafter
    drafts (less only if it proposed an end-of-sequence token after the rejected one, not known here)."""
    completion = [int(t) for t in completion_ids]
    committed = [int(t) for t in prompt_ids]
    proposer.begin(committed, ctx)
    tell_controller(controller, proposer, ctx.sampling)
    stops = ctx.stop_ids
    records, drafted = [], []
    produced, index = 0, 0
    while produced < max_new_tokens:
        remaining = max_new_tokens - produced
        source = proposer.next_source(committed) if remaining > 1 else None
        k_i = max(0, min(int(controller.next_k(remaining=remaining, source=source)), remaining - 1))
        guide, skip = ctx.guide, len(ctx.guide.forced(committed)[:k_i]) if ctx.guide is not None else 0
        ctx.expect(target[produced + skip: produced + k_i])  # a model drafter drafts after the schema's forced tokens
        ctx.go_on = drafting_rule(controller, source, k_i)
        proposal = _clip(proposer.propose(committed, k_i), k_i) if k_i > 0 else EMPTY
        if guide is not None and proposal.tokens:  # cut at the first token the grammar refuses, as the engine does
            proposal = _clip(proposal, guide.legal(committed, proposal.tokens))
        tokens, sources = proposal.tokens, proposal.sources or ()
        n = 0
        while n < len(tokens) and produced + n < len(target) and tokens[n] == target[produced + n]:
            n += 1
        last = PLAIN if not tokens else (BONUS if n == len(tokens) else CORRECTION)
        kept = [FORCED if i < len(sources) and sources[i] == FORCED_SOURCE else ACCEPTED for i in range(n)]
        emitted, roles, finished = _cut(completion[produced: produced + n + 1], [*kept, last], stops, remaining)
        if guide is not None:  # a constrained run ends where the grammar is complete ("schema")
            emitted, roles, finished = _complete(guide, committed, emitted, roles, finished)
            guide.commit([*committed, *emitted])
        if not emitted:
            raise RuntimeError(f"the replay ran past the recorded completion at position {produced}")
        committed.extend(emitted)
        produced += len(emitted)
        if finished is None and produced >= max_new_tokens:
            finished = "length"
        proposer.rollback(committed)
        drafted.append(k_i if (ctx.stopped and len(tokens) < k_i) else len(tokens))
        iteration = Iteration(index=index, k=k_i, proposed=tokens, n_accepted=n, emitted=tuple(emitted),
                              roles=tuple(roles), draft_s=0.0, verify_s=0.0, rollback_s=0.0, elapsed_s=0.0,
                              sources=proposal.sources, finished=finished)
        controller.observe(iteration)
        records.append(iteration)
        index += 1
        if finished:
            break
    return Walk(records, drafted, list(getattr(controller, "decisions", [])))


def walk_costs(w: Walk, curve: CostCurve | None) -> tuple[list[float], list[float]] | None:
    """(cost per iteration, cost per emitted token: each token its iteration's cost shared equally)."""
    if curve is None:
        return None
    per_it, per_token = [], []
    for it, drafted in zip(w.records, w.drafted):
        c = curve.iteration_cost(it.k, drafted, it.sources[0] if it.sources else None)
        per_it.append(c)
        per_token += [c / len(it.emitted)] * len(it.emitted)
    return per_it, per_token


# --- sampling: the walk in expectation -------------------------------------------------------------------------


@dataclass
class Expectation:
    """A walk in expectation: iterations, accepted-length histogram and per-position acceptance (expected values),
    cost in target steps and each token's share of it (None without a calibration)."""

    iterations: float
    histogram: dict[str, float]
    per_position: list[float | None]
    cost: float | None
    predicted_speedup: float | None
    token_cost: list[float] | None


def expected_walk(accept: Callable[[int], Sequence[float]], drafted: Callable[[int, int], int],
                  source: Callable[[int], str | None], k: int, length: int, curve: CostCurve | None) -> Expectation:
    """A fixed-k run over `length` recorded tokens in expectation. accept(i): acceptance probabilities of the
    successive proposals of an iteration starting at position i, as far as they are known (a proposal past them
    counts as rejected); drafted(i, k_i): the proposals a live drafter makes there; source(i): whose they are.
    k is clipped to the tokens left as the engine clips it."""
    visit = np.zeros(length + 1)
    visit[0] = 1.0
    token_cost = np.zeros(length)
    hist = np.zeros(k + 1)
    reached, kept = np.zeros(k), np.zeros(k)
    iterations = total = 0.0
    for i in range(length):
        w = visit[i]
        if w <= 0.0:
            continue
        k_i = max(0, min(k, length - i - 1))
        m = drafted(i, k_i) if k_i else 0
        a = list(accept(i))[: min(k_i, m)] if m else []
        c = curve.iteration_cost(k_i, m, source(i)) if curve is not None else 0.0
        survive = np.cumprod([1.0, *a])  # survive[j] = P(the first j proposals accepted)
        for j in range(len(a) + 1):
            pj = survive[j] - (survive[j + 1] if j < len(a) else 0.0)
            if pj <= 0.0:
                continue
            nxt = min(i + j + 1, length)
            visit[nxt] += w * pj
            token_cost[i: nxt] += w * pj * c / (nxt - i)
            if m:
                hist[j] += w * pj
                for t in range(min(j + 1, len(a))):  # positions evaluated: the accepted ones and the first rejected
                    reached[t] += w * pj
                    kept[t] += w * pj if t < j else 0.0
        iterations += w
        total += w * c
    return Expectation(iterations=float(iterations),
                       histogram={str(j): float(x) for j, x in enumerate(hist) if x > 1e-12},
                       per_position=[float(kp / r) if r > 0 else None for kp, r in zip(kept, reached)],
                       cost=float(total) if curve is not None else None,
                       predicted_speedup=float(length / total) if curve is not None and total > 0 else None,
                       token_cost=token_cost.tolist() if curve is not None else None)
