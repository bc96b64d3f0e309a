"""A recorded trace's turns as the prompts of a live lab command (`speed --trace FILE`), each with the history
an agent had when it made that call.

In every run of a turn, a drafter with a memory (DrafterSpec.new_memory) gets a new `Conversation` whose memory
holds the trace's earlier turns' recorded responses in the file's order (every turn before it, whichever turns the
selection keeps), and not the turn's own: the history replay grows turn by turn (lab/replay/suffix.py), so a live
run measures what replay predicts. A new one per run, since a run adds its own response to its memory: the next
round of the same turn must not find its answer there. Only the responses enter the history (a run's prompt tree
is dropped when the next run starts: suffix_cache.py).

That history stands for the agent's only where the recording is the target's own writing: `own_writing` checks
the turns run, greedy, with replay's own exactness check, and `writing_note` says what it found.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ...core.sampling import GREEDY
from ...drafters.conversation import Conversation
from ...drafters.registry import new_memory
from ...errors import PlaygroundError
from ...inputs.traces import Turn, read_trace
from ...limits import Limits
from ..replay.summary import MIN_SHAPE_TOKENS
from ..replay.walk import exactness, target_pass
from ..shapes import SHAPES, segment


@dataclass(frozen=True)
class TraceTurns:
    """The turns chosen from a trace: name -> (main output shape, prompt ids, max new tokens), in file order,
    and name -> the recorded responses of every turn before it."""

    prompts: dict[str, tuple[str, list[int], int]]
    earlier: dict[str, tuple[tuple[int, ...], ...]]
    warnings: tuple[str, ...] = ()
    turns: dict[str, Turn] | None = None  # name -> the chosen turn, as the trace recorded it
    note: str | None = None  # writing_note, where decoding is greedy

    def conversation(self, name: str, drafter: str) -> Conversation:
        """A new conversation whose memory of `drafter` holds the responses before turn `name` (what the agent had
        written by then)."""
        conversation = Conversation()
        for response in self.earlier[name]:
            conversation.remember(drafter, (), response)
        return conversation

    def factory(self, drafter: str, make: Callable[..., object], name: str) -> Callable[[], object] | None:
        """New proposers of `drafter` for turn `name`: `make(memory=...)` with the turn's history for a drafter with
        a memory; None for the others, which need no history."""
        if new_memory(drafter) is None or name not in self.prompts:
            return None
        return lambda: make(memory=self.conversation(name, drafter).memory(drafter))


def trace_turns(pair, path: str | Path, shape: str | None = None, last: int | None = None,
                limits: Limits | None = None) -> TraceTurns:
    """The turns of the trace at `path` to run live: those with at least MIN_SHAPE_TOKENS tokens of `shape`
    (None: every turn), the `last` of them (None: all; the last ones have the most history before them)."""
    if shape is not None and shape not in SHAPES:
        raise PlaygroundError(f"unknown output shape {shape!r}: one of {', '.join(SHAPES)}")
    if last is not None and last < 1:
        raise PlaygroundError(f"--turns must be >= 1, got {last}")
    trace = read_trace(path, pair.tokenizer, pair.eos_ids, limits, pair.max_context)
    warnings = tuple(f"{Path(path).name}: {e}" for e in trace.errors)
    if not trace.turns:
        raise PlaygroundError(f"{Path(path).name} has no turn to run" + (f" ({warnings[0]})" if warnings else ""))
    if len({t.name for t in trace.turns}) != len(trace.turns):
        raise PlaygroundError(f"{Path(path).name} names two turns alike: give each line its own \"id\"")
    shapes = {t.name: _main_shapes(pair, t) for t in trace.turns}
    chosen = [t for t in trace.turns if shape is None or shapes[t.name][shape] >= MIN_SHAPE_TOKENS]
    if not chosen:
        raise PlaygroundError(f"no turn of {Path(path).name} has {MIN_SHAPE_TOKENS} or more tokens of {shape} "
                              f"(its {len(trace.turns)} turns' shapes: {_shape_counts(shapes.values())})")
    chosen = chosen[-last:] if last is not None else chosen
    earlier, seen = {}, []
    keep = {t.name for t in chosen}
    for t in trace.turns:
        if t.name in keep:
            earlier[t.name] = tuple(seen)
        seen.append(t.completion_ids)
    prompts = {t.name: (shapes[t.name].most_common(1)[0][0], list(t.prompt_ids), t.max_new) for t in chosen}
    return TraceTurns(prompts, earlier, warnings, {t.name: t for t in chosen})


def own_writing(pair, trace: TraceTurns, chunk: int = 64) -> dict[str, int | None]:
    """For every turn run: None where its recorded response is what the target writes greedily after its prompt
    (replay's exactness), else the first position where the target's teacher-forced arg-max differs from it."""
    first = {}
    for name, turn in trace.turns.items():
        ex = exactness(turn, target_pass(pair, turn, chunk), GREEDY, shown=1)
        first[name] = None if ex.exact else ex.first_mismatches[0].position
    return first


def writing_note(first: dict[str, int | None]) -> str:
    """One sentence on `own_writing`'s findings, with what to do where the recording is mostly another writer's."""
    own = sum(1 for p in first.values() if p is None)
    text = f"{own} of {len(first)} turns run are the target's own greedy writing"
    differ = sorted((p, n) for n, p in first.items() if p is not None)
    if differ:
        shown = ", ".join(f"{n} from token {p}" for p, n in differ[:3]) + (", ..." if len(differ) > 3 else "")
        text += f"; the recording differs from what it writes in the others ({shown})"
    if 2 * own < len(first):
        text += (": the trace's responses are another writer's, so a drafter that remembers (suffix, suffix-hybrid) "
                 "is measured on a history this target does not repeat; record the trace with the target you "
                 "deploy (scripts/make_trace.py records the embedded one) for what its own history is worth")
    return text


def _main_shapes(pair, turn: Turn) -> Counter:
    return Counter(segment(pair.tokenizer, turn.prompt_ids, turn.completion_ids, pair.eos_ids))


def _shape_counts(counters: Iterable[Counter]) -> str:
    """How many turns have MIN_SHAPE_TOKENS or more tokens of each shape, for the error above."""
    counters = list(counters)
    return ", ".join(f"{s} {sum(c[s] >= MIN_SHAPE_TOKENS for c in counters)}" for s in SHAPES)
