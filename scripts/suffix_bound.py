"""How far any choice between suffix decoding and prompt lookup could go on a trace: accepted tokens per target
pass of each, of an oracle that takes, at every pass, whichever of the two proposals the target keeps more of,
and of an oracle that copies, at every pass, the longest stretch of what comes next that the trace holds
anywhere before it (earlier turns' prompts and responses, this turn's prompt and output so far).

The oracles know the answer, so no drafter can be either: the first bounds what a rule that picks between the
two (a hybrid of model-free drafters, a better score) could gain over prompt lookup; the second bounds every
drafter that proposes a copy of text the trace showed it (lookup, a suffix tree over any history, any mix of
them). Counts only, greedy: a pass keeps the longest prefix of the proposal that equals the recorded
completion there, plus the target's own token, so the figures do not depend on the machine. The recorded
completion stands for the target's output (replay reports how many turns are exactly that); the suffix cache
grows turn by turn in the file's order, as replay grows it.

    .venv/bin/python scripts/suffix_bound.py docs/results/agent-trace-100.jsonl --out docs/results/suffix-bound.json
    .venv/bin/python scripts/suffix_bound.py playground/traces/agent_sample.jsonl --out docs/results/suffix-bound-sample.json
"""

from __future__ import annotations

import argparse
import datetime
import sys

from playground.core.proposal import RunContext
from playground.core.sampling import GREEDY
from playground.drafters.proposers import lookup
from playground.drafters.suffix import SuffixProposer
from playground.drafters.suffix_cache import SuffixCache
from playground.inputs.traces import read_trace
from playground.lab.replay.summary import MIN_SHAPE_TOKENS
from playground.lab.shapes import LABELS, SHAPES, segment
from playground.pairs.registry import load_named_pair
from playground.studies.suffix_bound import ARMS, COPY, EXPERIMENT, markdown

GAP = chr(1)  # between the texts copy_walk searches, so that no copy runs from one into the next


def _kept(proposal, completion, i: int) -> int:
    """Tokens a greedy pass keeps: the proposal's prefix that is the completion from i, then the target's own."""
    a = 0
    while a < len(proposal) and i + a < len(completion) and proposal[a] == completion[i + a]:
        a += 1
    return min(a + 1, len(completion) - i)


def walk(turn, k: int, suffix: SuffixProposer, ctx: RunContext, arm: str) -> int:
    """The target passes one arm (ARMS: lookup, suffix or the oracle) takes over the turn's completion. Every arm
    grows its suffix cache with the committed tokens (rollback), so the lookup arm's cache is the others'."""
    completion, tokens, i, passes = list(turn.completion_ids), list(turn.prompt_ids), 0, 0
    suffix.begin(tokens, ctx)
    while i < len(completion):
        kk = min(k, len(completion) - i - 1)
        kept = []
        if kk and arm != "suffix":
            kept.append(_kept(lookup(tokens, kk, 3), completion, i))
        if kk and arm != "lookup":
            kept.append(_kept(suffix.propose(tokens, kk).tokens, completion, i))
        n = max(kept, default=1)  # no proposal (the last token): a plain step
        tokens += completion[i:i + n]
        i, passes = i + n, passes + 1
        suffix.rollback(tokens)
    return passes


def _text(ids) -> str:
    """Token ids as one character each (ids + 256 stay below the surrogates for any vocabulary under 55,000), so
    that str.find, in C, finds token sequences and never a match that starts inside a token."""
    return "".join(chr(t + 256) for t in ids)


def copy_walk(turn, k: int, earlier: str) -> int:
    """The target passes the copying oracle takes over the turn: at every pass, the longest prefix (up to k) of
    the rest of the completion found in `earlier` (the trace's texts before this turn) or in this turn's
    tokens so far, then the target's own token. Binary search on the length: a stretch found, its prefixes are."""
    answer, n = _text(turn.completion_ids), len(turn.completion_ids)
    haystack, i, passes = earlier + GAP + _text(turn.prompt_ids), 0, 0
    while i < n:
        lo, hi = 0, min(k, n - i - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if answer[i:i + mid] in haystack:  # one character a token: the text's slice is the tokens'
                lo = mid
            else:
                hi = mid - 1
        haystack += answer[i:i + lo + 1]  # what this pass wrote is there for the next
        i, passes = i + lo + 1, passes + 1
    return passes


def copy_passes(turns, k: int) -> list[int]:
    """copy_walk over every turn, each seeing the prompts and completions of the turns before it in the file."""
    out, earlier = [], ""
    for t in turns:
        out.append(copy_walk(t, k, earlier))
        earlier += GAP + _text(t.prompt_ids) + GAP + _text(t.completion_ids)
    return out


def measure(pair, path: str, ks: list[int]) -> dict:
    trace = read_trace(path, pair.tokenizer, pair.eos_ids, None, pair.max_context)
    shapes = [segment(pair.tokenizer, t.prompt_ids, t.completion_ids, pair.eos_ids) for t in trace.turns]
    ctx = RunContext(GREEDY, GREEDY.generator("cpu"), pair.eos_ids)
    passes = {}  # (arm, k) -> passes per turn
    for k in ks:
        for arm in ARMS:
            cache = SuffixCache()  # one per arm and k, grown in the file's order
            passes[(arm, k)] = (copy_passes(trace.turns, k) if arm == COPY else
                                [walk(t, k, SuffixProposer(cache), ctx, arm) for t in trace.turns])
    groups = {}
    for shape in (*SHAPES, None):
        chosen = [j for j, s in enumerate(shapes) if shape is None or s.count(shape) >= MIN_SHAPE_TOKENS]
        tokens = sum(len(trace.turns[j].completion_ids) for j in chosen)
        groups[shape or "overall"] = {
            "label": LABELS[shape] if shape else "all turns", "turns": len(chosen),
            "tokens_per_pass": {arm: {str(k): tokens / sum(passes[(arm, k)][j] for j in chosen) for k in ks}
                                for arm in ARMS} if chosen else {}}
    return {"experiment": EXPERIMENT, "date": datetime.date.today().isoformat(), "trace": path, "ks": ks,
            "turns": len(trace.turns), "groups": groups}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="a JSONL trace (as replay reads it)")
    ap.add_argument("--ks", default="8,16", help="comma-separated k values (default 8,16)")
    ap.add_argument("--out", required=True, help="the small result to write")
    args = ap.parse_args()
    ks = [int(x) for x in args.ks.split(",")]
    doc = measure(load_named_pair("embedded", device="cpu", progress=None), args.trace, ks)
    from results_tables import save  # scripts/results_tables.py, beside this one

    return save(doc, args.out, markdown)


if __name__ == "__main__":
    sys.exit(main())
