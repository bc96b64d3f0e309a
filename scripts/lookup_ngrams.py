"""How prompt lookup's n-gram sizes and match choice change what it copies, on the embedded target.

For each preset (one per kind, as the lab picks them) and each lookup setting, one greedy run at k = 8
with the lookup drafter: target passes, tokens per pass over the whole run (iterations where lookup
found nothing count as plain steps), the share of iterations that proposed anything, and alpha. Lookup
costs no model call, so fewer passes is the speed-up up to the verification cost v(9) / v(1).

"earliest" takes the oldest occurrence of the trailing n-gram instead of the most recent one (what a
search from the start of the context finds first).

    .venv/bin/python scripts/lookup_ngrams.py [--threads 2] [--k 8]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

import torch

from playground.core.engine import HEADLESS, speculative_generate
from playground.core.proposal import EMPTY, Proposal
from playground.core.records import Iteration, summarize
from playground.drafters.proposers import PromptLookupProposer, lookup
from playground.inputs.presets import chosen_presets
from playground.pairs.registry import choose_pair, load_choice


class EarliestLookup(PromptLookupProposer):
    """Prompt lookup that copies after the oldest match of the trailing n-gram (for comparison only)."""

    def propose(self, tokens: Sequence[int], k: int) -> Proposal:
        n_tokens = len(tokens)
        for n in range(min(self.max_ngram, n_tokens - 1), self.min_ngram - 1, -1):
            pattern = list(tokens[n_tokens - n:])
            for start in range(n_tokens - n):
                if list(tokens[start:start + n]) == pattern:
                    cont = list(tokens[start + n:start + n + k])
                    if cont:
                        return Proposal(tuple(cont))
        return EMPTY


SETTINGS = {
    "n=1": lambda: PromptLookupProposer(max_ngram=1, min_ngram=1),
    "n=1..2": lambda: PromptLookupProposer(max_ngram=2, min_ngram=1),
    "n=1..3 (default)": lambda: PromptLookupProposer(max_ngram=3, min_ngram=1),
    "n=2..3 (hybrid)": lambda: PromptLookupProposer(max_ngram=3, min_ngram=2),
    "n=2..4": lambda: PromptLookupProposer(max_ngram=4, min_ngram=2),
    "n=3..4": lambda: PromptLookupProposer(max_ngram=4, min_ngram=3),
    "n=1..3, earliest": lambda: EarliestLookup(max_ngram=3, min_ngram=1),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    assert lookup([1, 2, 3, 1, 2], 2, 2) == [3, 1]  # the library's lookup, most recent match first
    pair = load_choice(choose_pair(), progress=None)
    presets = chosen_presets(None)  # one per kind
    print(f"prompt lookup at k = {args.k}, greedy, {pair.target_name}; cells: tokens per target pass "
          "(share of iterations that proposed, alpha)")
    print("| preset | " + " | ".join(SETTINGS) + " |")
    print("|---|" + "---|" * len(SETTINGS))
    per_setting: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for preset in presets:
        ids = preset.prompt_ids(pair.tokenizer)
        cells = []
        for name, make in SETTINGS.items():
            recs = list(speculative_generate(pair, ids, proposer=make(), k=args.k,
                                             max_new_tokens=preset.max_new_tokens, options=HEADLESS))
            s = summarize(recs)
            its = [r for r in recs if isinstance(r, Iteration)]
            share = sum(1 for r in its if r.proposed) / len(its)
            per_setting[name].append(s.tokens_per_pass)
            alpha = "-" if s.alpha is None else f"{s.alpha:.2f}"
            cells.append(f"{s.tokens_per_pass:.2f} ({share:.0%}, {alpha})")
        print(f"| {preset.name} ({preset.kind}) | " + " | ".join(cells) + " |")
    print("| median | " + " | ".join(f"{statistics.median(v):.2f}" for v in per_setting.values()) + " |")


if __name__ == "__main__":
    main()
