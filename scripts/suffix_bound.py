"""How far any choice between suffix decoding and prompt lookup could go on a trace: accepted tokens per target
pass of each, and of an oracle that takes, at every pass, whichever of the two proposals the target keeps more of.

The oracle knows the answer, so no drafter can be it: it bounds what a rule that picks between the two (a
hybrid of model-free drafters, a better score) could gain over prompt lookup. Counts only, greedy: a pass
keeps the longest prefix of the proposal that equals the recorded completion there, plus the target's own
token, so the figures do not depend on the machine. The recorded completion stands for the target's output
(replay reports how many turns are exactly that); the suffix cache grows turn by turn in the file's order,
as replay grows it.

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
from playground.lab.replay_summary import MIN_SHAPE_TOKENS
from playground.lab.shapes import LABELS, SHAPES, segment
from playground.pairs.registry import load_named_pair

EXPERIMENT = "suffix-bound"
ARMS = ("lookup", "suffix", "better of the two (oracle)")


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


def measure(pair, path: str, ks: list[int]) -> dict:
    trace = read_trace(path, pair.tokenizer, pair.eos_ids, None, pair.max_context)
    shapes = [segment(pair.tokenizer, t.prompt_ids, t.completion_ids, pair.eos_ids) for t in trace.turns]
    ctx = RunContext(GREEDY, GREEDY.generator("cpu"), pair.eos_ids)
    passes = {}  # (arm, k) -> passes per turn
    for k in ks:
        for arm in ARMS:
            cache = SuffixCache()  # one per arm and k, grown in the file's order
            passes[(arm, k)] = [walk(t, k, SuffixProposer(cache), ctx, arm) for t in trace.turns]
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


def markdown(doc: dict) -> str:
    """Per shape: tokens per pass of lookup, suffix and the oracle at each k, and the oracle's gain over lookup."""
    ks = " / ".join(str(k) for k in doc["ks"])
    head = (f"| shape (turns) | lookup, k = {ks} | suffix | better of the two (oracle) | oracle / lookup, k = "
            f"{doc['ks'][-1]} |")
    lines = [f"{doc['trace']}: {doc['turns']} turns, counts (greedy; the recorded completions)", "", head,
             "|---|---|---|---|---|"]
    for g in doc["groups"].values():
        if not g["turns"]:
            continue
        cells = [" / ".join(f"{g['tokens_per_pass'][arm][str(k)]:.2f}" for k in doc["ks"]) for arm in ARMS]
        last = str(doc["ks"][-1])
        gain = g["tokens_per_pass"][ARMS[2]][last] / g["tokens_per_pass"]["lookup"][last]
        lines.append(f"| {g['label']} ({g['turns']}) | {' | '.join(cells)} | {gain:.2f}x |")
    return "\n".join(lines)


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
