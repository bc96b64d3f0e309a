"""What the schema is worth (issue 55): constrained decoding on the JSON presets, on this CPU, with the embedded pair.

Per JSON preset (those whose output schema can constrain the whole output), in adjacent runs on the same prompt:
plain decoding free and under the schema, and for each drafter X with a schema+X partner (lookup, suffix, the draft
model, llama.cpp where installed): X free, X under the schema, schema+X under the schema. Quoted (medians with
their interquartile range): the forced share of schema+X's output, the mask's time per token against a target step
(goal <= 5%), constrained over free plain tokens/s, each drafter's speed-ups free and constrained side by side, and
schema+X over X (goal: >= 1). Every run is a conversation's first call (new proposers: the suffix drafters start
with an empty cache), greedy, and every constrained run must equal constrained plain (checked). The measurement is
playground/studies/constrained_speed.py; its `markdown` draws docs/constraints.md's table from the --out JSON.

    .venv/bin/python scripts/constrained_speed.py --threads 2 --out docs/results/constrained-speed-epyc.json
    .venv/bin/python scripts/constrained_speed.py --quick          # a smoke run: 1 round, 1 preset, 16 tokens

The full run (4 presets, 3 rounds, k = 8, four drafters: 18 runs per preset and round) should take 5-8 minutes on the
2-core AMD EPYC VM when it is quiet (a target step of 30-45 ms; the outputs end on their own after 25-41 tokens, at
the schema's end or the end-of-sequence token, well inside the presets' 64-80). Run it alone: on 2026-12-07, with
other work keeping 1.4 of the 2 cores busy, steps took 250-450 ms and the --quick run alone took 9 minutes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.constraints.grammar import Grammar
from playground.constraints.schema import schema_presets
from playground.inputs.presets import get_preset
from playground.lab.common import set_threads
from playground.pairs.registry import load_named_pair
from playground.studies.constrained_speed import Case, Plan, markdown, measure, partners

QUICK_TOKENS = 16


def cases(tokenizer, names: list[str], max_new: int | None) -> list[Case]:
    """Each preset's prompt, its schema compiled for the tokenizer, and its own length limit (or `max_new`)."""
    out = []
    for name in names:
        preset = get_preset(name)
        out.append(Case(name, preset.prompt_ids(tokenizer), Grammar(name, tokenizer),
                        max_new or preset.max_new_tokens))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="torch's threads (default 2: the VM's cores)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--presets", default=None, help="comma-separated (default: every JSON preset)")
    ap.add_argument("--drafters", default=None,
                    help="comma-separated drafters X, each run with schema+X (default: every one with a partner)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--plain-every", type=int, default=2, help="a pair of plain runs before every N drafters")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: each preset's own")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: 1 round of the first preset, {QUICK_TOKENS} new tokens, one mask walk")
    ap.add_argument("--out", type=Path, help="write the result JSON here (and print its table)")
    args = ap.parse_args(argv)
    names = args.presets.split(",") if args.presets else schema_presets()
    rounds, max_new, walks = args.rounds, args.max_new_tokens, 3
    if args.quick:
        names, rounds, max_new, walks = names[:1], 1, max_new or QUICK_TOKENS, 1
    set_threads(args.threads)
    started = time.perf_counter()
    pair = load_named_pair("embedded", device="cpu", progress=None)
    plan = Plan(partners(pair, args.drafters.split(",") if args.drafters else None), k=args.k, rounds=rounds,
                plain_every=args.plain_every, mask_walks=walks)
    print(f"drafters: {', '.join(f'{x} and {p}' for x, p in plan.partners.items())}; presets: {', '.join(names)}",
          flush=True)
    doc = measure(pair, cases(pair.tokenizer, names, max_new), plan, progress=lambda m: print(m, flush=True))
    doc["command"] = "scripts/constrained_speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"took {time.perf_counter() - started:.0f} s", flush=True)
    if args.out:
        from results_tables import save  # scripts/results_tables.py, beside this one

        return save(doc, args.out, markdown)
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
