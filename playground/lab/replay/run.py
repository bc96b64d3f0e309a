"""Replay's run: `replay_turns` over recorded turns, and the turns it takes (`preset_turns`, `text_turn`,
`greedy_turn`); the package's docstring (playground.lab.replay) says what a replay is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...core.cached import CachedLM
from ...core.engine import plain_generate
from ...core.lean import copy_lm
from ...core.proposal import RunContext
from ...core.records import Step, summarize
from ...core.sampling import GREEDY
from ...drafters import registry
from ...drafters.adaptive import CostCurve, make_controller
from ...drafters.proposers import DraftModelProposer
from ...drafters.registry import DRAFT, HYBRID_WALK, make_proposer
from ...envinfo import environment
from ...errors import PlaygroundError
from ...inputs.presets import get_preset
from ...inputs.text import encode_prompt
from ...inputs.traces import Turn
from ...limits import Limits
from ...results.replay import (
    DrafterTrust,
    LineError,
    ReplayedTurn,
    ReplayResult,
    SchemaWorth,
    SimulatedIteration,
    SimulatedWalk,
    SkippedWalk,
    TurnError,
    WalkedDrafter,
    arm_label,
)
from ..calibration import CalibrationStore
from ..common import Progress, tick
from ..shapes import segment
from .options import ReplayOptions, TraceMemory
from .sampling import replay_sampled_turn
from .schema import constrained_walks, grammar_of, schema_worth
from .suffix import alone, alone_entry, with_alone
from .summary import summarize_replay
from .walk import (
    PassProposer,
    TargetPass,
    exactness,
    prompt_cache,
    replay_context,
    replayed_turn,
    shape_costs,
    shared_exact,
    shared_pass,
    target_pass,
    walk,
    walk_costs,
)

_COMPUTED = "simulated: these iterations were computed from teacher-forced passes over the recorded text, not run; "
SIMULATED = _COMPUTED + ("their timings are 0, and a model drafter's proposals stop at the first one the target rejects "
                         "(a live drafter drafts all k; 'drafted' counts those)")
SIMULATED_STOP = _COMPUTED + "their timings are 0; a model drafter drafted as a live one does, up to its confidence stop"


# --- turns whose completion is the target's own greedy output ---------------------------------------------------


def greedy_turn(pair, name: str, prompt_ids: Sequence[int], max_new_tokens: int, origin: str,
                kind: str | None = None) -> Turn:
    """A turn whose completion is generated once by plain greedy decoding of the target."""
    tokens = [r.token for r in plain_generate(pair, prompt_ids, max_new_tokens=max_new_tokens) if isinstance(r, Step)]
    return Turn(name, tuple(int(t) for t in prompt_ids), tuple(tokens), origin, name, max_new_tokens, kind)


def preset_turns(pair, names: Sequence[str], max_new_tokens: int | None = None) -> list[Turn]:
    presets = [get_preset(n) for n in names]
    return [greedy_turn(pair, p.name, p.prompt_ids(pair.tokenizer), max_new_tokens or p.max_new_tokens, "preset",
                        p.kind) for p in presets]


def text_turn(pair, text: str, max_new_tokens: int = 64) -> Turn:
    return greedy_turn(pair, "text", encode_prompt(pair.tokenizer, text), max_new_tokens, "text")


# --- proposers ---------------------------------------------------------------------------------------------------


class _SharedPrefillDraft(DraftModelProposer):
    """The pair's draft model drafter, its prompt prefill computed once per turn and copied into every walk: the
    values a fresh begin() computes (one deterministic forward), without paying for it again each walk."""

    def __init__(self, base: DraftModelProposer):
        super().__init__(base.model, base.device, base.vocab_size, base.name, copies_target=base.takes_target_kv,
                         forward=base.forward)
        self._prefilled: tuple | None = None

    def begin(self, prompt_ids, ctx) -> None:
        key = tuple(int(t) for t in prompt_ids[:-1])
        if self._prefilled is None or self._prefilled[0] != key:
            super().begin(prompt_ids, ctx)
            self._prefilled = (key, copy_lm(self.lm))
            return
        self.ctx = ctx
        self.lm = copy_lm(self._prefilled[1])  # the cache only: the model is shared, never copied


class _Proposers:
    """The proposers of one turn, walked as each drafter's declaration says (DrafterSpec.replay): a live one per
    walk, or (shared) a model drafter's read from the shared pass."""

    def __init__(self, pair, turn: Turn, max_ngram: int, shared: frozenset[str], preds: dict[str, list[int]],
                 target: list[int] | None = None, confs: dict[str, list[tuple[float, float]]] | None = None):
        self.pair, self.turn, self.max_ngram, self.shared, self.preds = pair, turn, max_ngram, shared, preds
        self.target, self.confs = target, confs or {}
        self._drafts: dict[str, _SharedPrefillDraft] = {}

    def model_name(self, drafter: str) -> str | None:
        """The model drafter behind `drafter` (None for a model-free one, or a hybrid with none to wrap)."""
        spec = registry.drafter_spec(drafter)
        if spec.replay == HYBRID_WALK:
            return registry.model_drafter(self.pair)
        return drafter if spec.model else None

    def _model(self, name: str, live: bool = False):
        if name in self.shared and not live:
            return PassProposer(name, len(self.turn.prompt_ids), self.target, self.preds[name],
                                uses_draft_model=registry.drafter_spec(name).draft_model, conf=self.confs.get(name))
        if name in self._drafts:
            return self._drafts[name]
        proposer = make_proposer(self.pair, name, max_ngram=self.max_ngram)
        if isinstance(proposer, DraftModelProposer):  # a torch draft model: its prefill computed once per turn
            proposer = self._drafts[name] = _SharedPrefillDraft(proposer)
        return proposer

    def get(self, drafter: str, live: bool = False, memory=None):  # live: a model drafter fed live where walks
        spec = registry.drafter_spec(drafter)  # share a pass; memory: its arm's (TraceMemory.arm), None if it has none
        if spec.replay == "live":
            return make_proposer(self.pair, drafter, max_ngram=self.max_ngram, memory=memory)
        if spec.replay == HYBRID_WALK:
            inner = self.model_name(drafter)
            if inner is None:
                raise PlaygroundError(f"the {drafter} drafter needs a model drafter (llama.cpp or a draft model)")
            return make_proposer(self.pair, drafter, max_ngram=self.max_ngram, model=self._model(inner, live),
                                 memory=memory)
        return self._model(drafter, live)


# --- one turn ------------------------------------------------------------------------------------------------------


def _walked(w, curve, shapes: list[str], records: str, label: str) -> SimulatedWalk:
    s = summarize(w.records)
    costs = walk_costs(w, curve)
    total = sum(costs[0]) if costs else None
    out = SimulatedWalk(
        arm=label, iterations=s.target_passes, new_tokens=s.new_tokens, tokens_per_pass=s.tokens_per_pass,
        alpha=s.alpha, per_position=list(s.per_position_acceptance),
        histogram={str(n): c for n, c in s.accepted_length_histogram.items()},
        k_values={str(k): n for k, n in s.k_values.items()}, source_iterations=s.source_iterations,
        k_sequence=[it.k for it in w.records], drafted=sum(w.drafted), finished=s.finished, cost=total,
        predicted_speedup=s.new_tokens / total if total else None,
        shapes=shape_costs(shapes[: s.new_tokens], costs[1] if costs else None))
    if records == "full":
        out.records = [SimulatedIteration(**vars(it), drafted=d) for it, d in zip(w.records, w.drafted)]
    elif records == "compact":
        out.records = [(it.k, d, it.n_accepted, len(it.emitted), it.sources[0] if it.sources else None)
                       for it, d in zip(w.records, w.drafted)]
    return out


def _chunking_differs(w, pred: list[int], completion) -> list[int]:
    """Positions where a live-fed model drafter proposed another token than the shared one-token pass did after
    the same text: compared while the iteration's proposals so far are the recorded tokens (after one that is
    not, the live drafter's context is its own proposal, which the pass never saw)."""
    out, pos = [], 0
    for it in w.records:
        if it.proposed and (not it.sources or it.sources[0] == DRAFT.name):
            for i, x in enumerate(it.proposed):
                if pos + i >= len(pred):
                    break
                if pred[pos + i] != x:
                    out.append(pos + i)
                if x != completion[pos + i]:
                    break
        pos += len(it.emitted)
    return out


@dataclass
class _Passes:
    """One greedy turn's passes, shared by its drafters' walks: the target's, the model drafters' shared ones
    (`preds`), which of those the walks read (`shared`) and where that equals live feeding (`exact_shared`)."""

    turn: Turn
    target: TargetPass
    prompt: CachedLM
    shapes: list[str]
    proposers: _Proposers
    preds: dict[str, list[int]]
    shared: frozenset[str]
    exact_shared: frozenset[str]
    exact: bool


def replay_greedy_turn(pair, turn: Turn, options: ReplayOptions, memory: TraceMemory,
                       progress: Callable[[str], None]) -> ReplayedTurn:
    """Everything `replay_turns` reports about one greedy turn (see the module docstring)."""
    prompt = prompt_cache(pair, turn.prompt_ids)  # what a live prefill leaves, for drafters that copy it
    tp = target_pass(pair, turn, options.limits.replay_chunk_tokens, prompt)
    progress("target pass")
    ex = exactness(turn, tp, GREEDY)
    shapes = segment(pair.tokenizer, turn.prompt_ids, turn.completion_ids, pair.eos_ids)
    probe = _Proposers(pair, turn, options.max_ngram, frozenset(), {})
    models = sorted({m for d in options.drafters if (m := probe.model_name(d)) is not None})
    preds: dict[str, list[int]] = {}
    confs: dict[str, list[tuple[float, float]]] = {}  # the drafter's probabilities there (adaptive k's stop rule)
    for name in models:  # the shared one-token pass: the agreement sequence, and a shared-pass walk's proposals
        ctx = RunContext(GREEDY, GREEDY.generator(pair.device), frozenset(pair.eos_ids), target_kv=prompt)
        preds[name], confs[name] = shared_pass(make_proposer(pair, name, max_ngram=options.max_ngram),
                                               turn.prompt_ids, turn.completion_ids, ctx)
        progress(f"{name} pass")
    exact_shared = shared_exact(pair)  # shared where it equals live, or the text is not the target's; never on a stop
    shared = frozenset() if options.min_confidence is not None else frozenset(
        m for m in models
        if options.feeding == "shared" or not ex.exact or (options.feeding == "auto" and m in exact_shared))
    passes = _Passes(turn, tp, prompt, shapes, _Proposers(pair, turn, options.max_ngram, shared, preds, tp.argmax,
                                                          confs), preds, shared, exact_shared, ex.exact)
    drafters: dict[str, WalkedDrafter] = {}
    for drafter in options.drafters:
        entry = _walk_drafter(pair, passes, drafter, options, memory, drafters, progress)
        drafters[drafter] = entry  # after its walks with no cache (suffix.py): the file's order
    out = with_worth(pair, turn, replayed_turn(turn, ex, shapes, drafters))
    if out.schema_worth is not None and out.schema_worth.note is None:  # the recording keeps to its schema
        grammar = grammar_of(turn, pair.tokenizer)
        out.schema_worth.exact = constrained_walks(pair, passes, grammar, options, memory, drafters)
    return out


def with_worth(pair, turn: Turn, out: ReplayedTurn) -> ReplayedTurn:
    """`out` with its schema's worth (schema.schema_worth), where the turn carries a schema."""
    grammar = grammar_of(turn, pair.tokenizer)
    if grammar is not None:
        out.schema_worth = grammar if isinstance(grammar, SchemaWorth) else schema_worth(
            grammar, turn.prompt_ids, turn.completion_ids, pair.eos_ids, out.shapes)
    return out


def _walk_drafter(pair, p: _Passes, drafter: str, options: ReplayOptions, memory: TraceMemory,
                  drafters: dict[str, WalkedDrafter], progress: Callable[[str], None]) -> WalkedDrafter:
    """One drafter's walks over one turn, every k and controller; a suffix drafter's with no cache go into
    `drafters` beside it."""
    turn = p.turn
    timing = options.timing_of(drafter, turn.prompt_ids) if options.timing_of is not None else None
    curve = CostCurve.from_timing(timing) if timing is not None else None
    model = p.proposers.model_name(drafter)
    entry = WalkedDrafter(timing=memory.timing_index(drafter, timing),
                          exact=p.exact and (model not in p.shared or model in p.exact_shared),
                          feeding=None if model is None else ("shared pass" if model in p.shared else "live"),
                          agreement=([int(x == t) for x, t in zip(p.preds[model], p.target.argmax)]
                                     if model in p.preds else None),
                          walks={}, chunking_differs={})
    if p.exact and model in p.shared and model not in p.exact_shared:
        entry.estimate_reason = (f"{model}'s proposals from one shared pass fed one token at a time; a live run feeds "
                                 "it two at once after a fully accepted iteration, which can change its proposals")
    for arm in [*options.ks, *options.controllers]:
        label = arm_label(arm)
        if arm == "adaptive" and curve is None:
            entry.walks[label] = SkippedWalk(label, "adaptive k needs a calibration (timing_of)")
            continue
        conversation = memory.arm(drafter, label)
        controller = make_controller(arm, curve, memory=conversation.controller(turn.conversation))
        ctx = replay_context(GREEDY, pair.device, pair.eos_ids, options.min_confidence)
        ctx.target_kv = p.prompt
        live = arm == "adaptive" and entry.exact and model in p.shared  # the module docstring
        proposer = p.proposers.get(drafter, live, conversation.memory(drafter))
        w = walk(turn.prompt_ids, turn.completion_ids, p.target.argmax, proposer, controller, turn.max_new, ctx)
        entry.walks[label] = _walked(w, curve, p.shapes, options.records, label)
        for name, cache in alone(drafter):  # a drafter with a memory again, with none (suffix.py)
            ctl = make_controller(arm, curve, memory=memory.arm(name, label).controller(turn.conversation))
            w = walk(turn.prompt_ids, turn.completion_ids, p.target.argmax, p.proposers.get(drafter, live, cache),
                     ctl, turn.max_new, ctx)
            alone_entry(drafters, entry, name).walks[label] = _walked(w, curve, p.shapes, options.records, label)
        if model in p.preds and model not in p.shared:
            entry.chunking_differs[label] = _chunking_differs(w, p.preds[model], turn.completion_ids)
        progress(f"{drafter} {label}")
    return entry


def calibration_contexts(turns: Sequence[Turn], how: str) -> dict[int, tuple[int, ...]]:
    """The prompts a replay calibrates on, by context-length bucket (CalibrationStore.bucket): with how="once" one,
    the turn of median prompt length; with "bucket" the first turn of every bucket the turns fall in."""
    bucket = CalibrationStore.bucket
    if how == "once":
        median = sorted(turns, key=lambda t: len(t.prompt_ids))[len(turns) // 2].prompt_ids
        return {bucket(len(median)): median}
    firsts: dict[int, tuple[int, ...]] = {}
    for t in turns:
        firsts.setdefault(bucket(len(t.prompt_ids)), t.prompt_ids)
    return firsts


def _check_turn(pair, turn: Turn, limits: Limits) -> None:
    if not turn.prompt_ids or not turn.completion_ids:
        raise PlaygroundError(f"{turn.name}: the prompt and the completion must both hold tokens")
    limits.check_replay_tokens(len(turn.prompt_ids), len(turn.completion_ids))
    bad = [t for t in (*turn.prompt_ids, *turn.completion_ids) if not 0 <= t < pair.vocab_size]
    if bad:
        raise PlaygroundError(f"{turn.name}: token id {bad[0]} is outside the vocabulary (0..{pair.vocab_size - 1})")
    if pair.max_context is not None and len(turn.prompt_ids) + turn.max_new > pair.max_context:
        raise PlaygroundError(f"{turn.name}: {len(turn.prompt_ids)} + {turn.max_new} tokens do not fit the target's "
                              f"context of {pair.max_context}")
    if turn.max_new > len(turn.completion_ids) and turn.completion_ids[-1] not in pair.eos_ids:
        raise PlaygroundError(f"{turn.name}: max_new_tokens {turn.max_new} is past the recorded completion "
                              f"({len(turn.completion_ids)} tokens, not ended by an end-of-sequence token)")


def replay_turns(pair, turns: Sequence[Turn], options: ReplayOptions | None = None,
                 progress: Progress = None) -> ReplayResult:
    """Replay `turns` with every drafter, k and controller of `options`; the typed result (see the module
    docstring; no options: the defaults). A turn that cannot be replayed is listed among the errors, and the rest
    is replayed."""
    options = (options or ReplayOptions()).resolved(pair)
    steps = len(turns) * (1 + len(options.drafters) * (len(options.ks) + len(options.controllers))
                          + sum(s.model for s in registry.drafters()))
    done = [0]

    def step(i: int, turn_name: str) -> Callable[[str], None]:
        def say(what: str) -> None:  # what happens now, then ' · ' and the detail (a status line folds the detail)
            done[0] += 1
            tick(progress, done[0] / steps, f"turn {i} of {len(turns)} \u00b7 {turn_name}: {what}")
        return say

    memory = TraceMemory()
    out_turns: list[ReplayedTurn] = []
    errors: list[LineError | TurnError] = [LineError(e.line, e.field, e.message) for e in options.errors]
    replay_turn = replay_greedy_turn if options.sampling.greedy else replay_sampled_turn
    for i, turn in enumerate(turns, 1):
        try:
            _check_turn(pair, turn, options.limits)
            replayed = replay_turn(pair, turn, options, memory, step(i, turn.name))
            out_turns.append(replayed if replayed.schema_worth is not None else with_worth(pair, turn, replayed))
        except PlaygroundError as e:
            errors.append(TurnError(turn.name, "(turn)", str(e)))
    tick(progress, 1.0, "done")
    timings = {d: [t.to_dict() for t in ts.items] for d, ts in memory.timings.items()}
    trust = {d: _trust(ts.items) for d, ts in memory.timings.items()}
    drafters = with_alone(options.drafters, trust)  # a suffix drafter's walks with no cache, beside it
    arms = [arm_label(k) for k in options.ks] + list(options.controllers)
    return ReplayResult(
        environment=environment(pair), sampling=options.sampling.describe(), feeding=options.feeding,
        ks=list(options.ks), controllers=list(options.controllers), drafters=drafters, max_ngram=options.max_ngram,
        limits={k: v for k, v in options.limits.to_dict().items() if "replay" in k},
        min_confidence=options.min_confidence, records=options.records,
        records_note=SIMULATED if options.min_confidence is None else SIMULATED_STOP, turns=out_turns,
        errors=errors, timings=timings, trust=trust, summary=summarize_replay(out_turns, arms, drafters, trust))


def _trust(timings: list) -> DrafterTrust:
    """A drafter's calibrations' verdict: trusted when every one is; the first failure's headline otherwise."""
    verdicts = [t.trust for t in timings]
    bad = [v for v in verdicts if not v.trusted]
    if not verdicts:
        return DrafterTrust(False, "no calibration: no speed-up can be predicted")
    return DrafterTrust(not bad, (bad[0] if bad else verdicts[0]).headline())
