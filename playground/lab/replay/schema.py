"""What a turn's schema is worth in a replay: the share of its recorded output the grammar forces, and the
schema+ drafters' constrained walks beside the free ones. A turn carries a schema when its trace line declares
`tools` and the turn is one tool call (inputs.traces).

Forced share (`schema_worth`): a fresh matcher (constraints.guide) walks the recorded output, its end-of-sequence
token aside (a constrained run ends where the grammar is complete), as the schema+ drafters propose: the grammar's
fast-forward tokens that agree with the recorded ones are forced and walked past; elsewhere (or where the target
spelled a forced string otherwise: its own token wins) the walk moves one recorded token. A recording the grammar
refuses, or one that does not complete it, has no share, and the note says where.

Constrained walks (`constrained_walks`, greedy, where the recording keeps to the schema): the target's
teacher-forced pass masked row by row by what the grammar allows (`masked_argmax`), then each drafter that has a
schema+ variant walked again through the engine's constrained loop (walk.walk) with the masked arg-max as the
verification; a model drafter is fed live (a live constrained run masks its logits too). Where the recording is
the masked target's greedy output (`SchemaWorth.exact`) the walk is the live constrained run's. A remembering
drafter (suffix decoding) is not walked constrained: its cache holds the free walk's turns, and a second walk
would see its own turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...constraints.guide import restrict
from ...constraints.schema import Schema, SchemaError
from ...core.records import summarize
from ...core.sampling import GREEDY
from ...drafters import registry
from ...drafters.adaptive import CostCurve, make_controller
from ...drafters.schema import SchemaProposer
from ...results.replay import ConstrainedWalk, SchemaWorth, SkippedWalk, TurnShapes, WalkedDrafter, arm_label
from .walk import replay_context, target_chunks, walk, walk_costs

if TYPE_CHECKING:
    from ...constraints.grammar import Grammar


def grammar_of(turn, tokenizer) -> Grammar | SchemaWorth | None:
    """The turn's schema compiled for the tokenizer; a SchemaWorth with the note where it cannot be; None: none."""
    if turn.schema is None:
        return None
    try:
        # llguidance loads on use: every lab command imports this module, and the GPU image carries no llguidance
        from ...constraints.grammar import Grammar

        return Grammar(Schema(turn.schema, turn.schema_name or "the turn's schema"), tokenizer)
    except SchemaError as e:
        return SchemaWorth(0, 0, None, {}, note=str(e))


def _shape_list(shapes: TurnShapes, n: int) -> list[str]:
    out = ["prose"] * n
    for start, end, shape in shapes.runs:
        end = min(end, n)
        out[start:end] = [shape] * max(0, end - start)
    return out


def forced_positions(grammar: Grammar, prompt_ids: Sequence[int], out: Sequence[int],
                     stops=frozenset()) -> tuple[list[int], str | None]:
    """The positions of `out` (an output, no end-of-sequence token) the grammar forces, walked as the module
    docstring says; and why there are none to count (the output leaves the grammar, or stops before its end)."""
    guide = grammar.guide(prompt_ids, max(len(grammar.tokenizer), max(out, default=0) + 1), stops)
    committed, forced, i = [int(t) for t in prompt_ids], [], 0
    while i < len(out):
        ff = guide.forced(committed)
        m = 0
        while m < len(ff) and i + m < len(out) and ff[m] == out[i + m]:
            m += 1
        chunk = [int(t) for t in out[i: i + max(m, 1)]]
        legal = guide.legal(committed, chunk)
        if legal < len(chunk):
            return [], f"the recorded output leaves {grammar.name} at token {i + legal} of {len(out)}"
        forced += range(i, i + m)
        committed += chunk
        guide.commit(committed)
        i += len(chunk)
    if not guide.matcher.accepting():
        return [], f"the recorded output stops before {grammar.name} is complete"
    return forced, None


def schema_worth(grammar: Grammar, prompt_ids: Sequence[int], completion_ids: Sequence[int], stop_ids,
                 shapes: TurnShapes) -> SchemaWorth:
    """The forced share of the recorded output under `grammar` (the module docstring), per shape too."""
    stops = frozenset(int(t) for t in stop_ids)
    out = [int(t) for t in completion_ids]
    if out and out[-1] in stops:
        out.pop()
    forced, note = forced_positions(grammar, prompt_ids, out, stops)
    if note is not None:
        return SchemaWorth(len(out), 0, None, {}, note=note)
    per = _shape_list(shapes, len(out))
    by_shape: dict[str, list[int]] = {}
    for shape in per:
        by_shape.setdefault(shape, [0, 0])[0] += 1
    for t in forced:
        by_shape[per[t]][1] += 1
    return SchemaWorth(len(out), len(forced), len(forced) / len(out) if out else None, by_shape)


def schema_variant(drafter: str) -> str | None:
    """The schema+ drafter walked constrained beside `drafter` (None: none, or a remembering drafter's)."""
    name = registry.schema_variant(drafter)
    return None if name is None or registry.new_memory(drafter) is not None else name


def masked_argmax(pair, turn, grammar: Grammar, chunk: int, prompt=None) -> list[int]:
    """The target's arg-max at every completion position, its row masked by what the grammar allows after the
    recorded text before it (the recording must keep to the grammar: schema_worth says whether it does)."""
    guide = grammar.guide(turn.prompt_ids, pair.vocab_size, pair.eos_ids)
    done, out = [int(t) for t in turn.prompt_ids], []
    for a, logits in target_chunks(pair, turn.prompt_ids, turn.completion_ids, chunk, prompt):
        for r in range(logits.shape[0]):
            out.append(int(restrict(logits[r], guide.allowed(done)).argmax()))
            done.append(int(turn.completion_ids[a + r]))
            if done[-1] not in guide.stop_ids:
                guide.commit(done)
    return out


def constrained_walks(pair, p, grammar: Grammar, options, memory, drafters: dict[str, WalkedDrafter]) -> bool:
    """Each drafter's constrained walks (schema+ the drafter, every arm), into its entry's `constrained`. `p`: the
    turn's passes (replay._Passes: turn, prompt, proposers). Whether the recording, its end-of-sequence
    token aside, is the masked target's greedy output."""
    turn = p.turn
    target = masked_argmax(pair, turn, grammar, options.limits.replay_chunk_tokens, p.prompt)
    held = [int(t) for t in turn.completion_ids if int(t) not in pair.eos_ids]
    for drafter, entry in drafters.items():
        name = drafter in registry.names() and schema_variant(drafter)
        if not name:
            continue
        timing = options.timing_of(drafter, turn.prompt_ids) if options.timing_of is not None else None
        curve = CostCurve.from_timing(timing) if timing is not None else None
        source = registry.drafter_spec(name).sources[-1]
        entry.constrained = {}
        for arm in [*options.ks, *options.controllers]:
            label = arm_label(arm)
            if arm == "adaptive" and curve is None:
                entry.constrained[label] = SkippedWalk(label, "adaptive k needs a calibration (timing_of)")
                continue
            controller = make_controller(arm, curve, memory=memory.arm(name, label).controller(turn.conversation))
            ctx = replay_context(GREEDY, pair.device, pair.eos_ids, options.min_confidence)
            ctx.target_kv, ctx.guide = p.prompt, grammar.guide(turn.prompt_ids, pair.vocab_size, pair.eos_ids)
            proposer = SchemaProposer(p.proposers.get(drafter, True), source, name)  # live: its logits masked
            w = walk(turn.prompt_ids, turn.completion_ids, target, proposer, controller, turn.max_new, ctx)
            entry.constrained[label] = _constrained(w, curve, label, name)
    return target[: len(held)] == held


def _constrained(w, curve: CostCurve | None, label: str, name: str) -> ConstrainedWalk:
    s = summarize(w.records)
    costs = walk_costs(w, curve)
    total = sum(costs[0]) if costs else None
    return ConstrainedWalk(arm=label, drafter=name, iterations=s.target_passes, new_tokens=s.new_tokens,
                           tokens_per_pass=s.tokens_per_pass, forced=s.roles.get("forced", 0), finished=s.finished,
                           cost=total, predicted_speedup=s.new_tokens / total if total else None)
