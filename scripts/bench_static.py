"""The target's forward on a CPU: transformers' (DynamicCache, today's default) against the static-cache one
(core/static.py, what CUDA graphs record on a GPU), plain and speculative, side by side in one run (issue 44).

The embedded pair (real weights, so acceptance is real), three presets, every round running each arm's plain
and speculative decode of each preset, the arms alternating A B, B A, ... Each run's decode tokens/s (prefill
excluded), per arm and mode the median over runs with its min-max, and per adjacent pair the ratio static /
transformers (median, min-max): core.static.CPU_TARGET changes only if the static forward is at least as fast.
The draft is the same in both arms (the pair's int8 copy on the lean forward, or prompt lookup): only the target's
forward changes. Run it alone on a quiet machine:

    .venv/bin/python scripts/bench_static.py --threads 2 --rounds 4 --out results/bench_static.json
    .venv/bin/python scripts/bench_static.py --rounds 1 --max-new-tokens 8     # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

import torch

from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import Iteration, Step
from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup, environment
from playground.inputs.presets import get_preset
from playground.lab.trust import MachineMonitor
from playground.pairs.registry import choose_pair, load_choice

PRESETS = ("tool_call", "prose", "code")
ARMS = ("transformers", "static")


def decode_rate(records) -> float:
    """Tokens per second after the prefill (a record's elapsed_s counts from the prefill's end)."""
    decode = [r for r in records if isinstance(r, (Iteration, Step))]
    tokens = sum(len(r.emitted) if isinstance(r, Iteration) else 1 for r in decode)
    return tokens / decode[-1].elapsed_s


def one_run(pair, ids, mode: str, drafter: str, k: int, max_new: int) -> float:
    if mode == "plain":
        return decode_rate(plain_generate(pair, ids, max_new_tokens=max_new))
    proposer = make_proposer(pair, drafter)
    return decode_rate(speculative_generate(pair, ids, proposer=proposer, k=k, max_new_tokens=max_new))


def summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


EXPERIMENT = "static-forward"


def markdown(doc: dict) -> str:
    """The result as the table docs/results.md shows (scripts/results_tables.py draws it from the saved JSON)."""
    head = (f"{doc['setup']}; drafter {doc['drafter']}, k = {doc['k']}, {doc['max_new_tokens']} new tokens, "
            f"{doc['rounds']} rounds x {len(doc['presets'])} presets ({', '.join(doc['presets'])})")
    rows = ["| target forward | plain tok/s [min-max] | speculative tok/s [min-max] |", "|---|---|---|"]
    rate = doc["tokens_per_s"]
    for arm in ARMS:
        cells = [f"{rate[f'{arm} {m}']['median']:.1f} [{rate[f'{arm} {m}']['min']:.1f}-{rate[f'{arm} {m}']['max']:.1f}]"
                 for m in ("plain", "speculative")]
        rows.append(f"| {arm} | {cells[0]} | {cells[1]} |")
    ratio = doc["static_over_transformers"]
    rows.append("| static / transformers, adjacent pairs | " + " | ".join(
        f"{ratio[m]['median']:.3f} [{ratio[m]['min']:.3f}-{ratio[m]['max']:.3f}] (n = {ratio[m]['n']})"
        for m in ("plain", "speculative")) + " |")
    return head + "\n\n" + "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--drafter", default="draft", help="draft (the int8 copy) or lookup")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    base = load_choice(choose_pair(pair="embedded"))
    pairs = {arm: dataclasses.replace(base, target_forward=arm) for arm in ARMS}
    prompts = {name: get_preset(name).prompt_ids(base.tokenizer) for name in PRESETS}
    rates = {(arm, mode): [] for arm in ARMS for mode in ("plain", "speculative")}
    ratios = {mode: [] for mode in ("plain", "speculative")}
    for arm in ARMS:  # a warm-up run of each arm and mode, untimed
        for mode in ("plain", "speculative"):
            one_run(pairs[arm], prompts[PRESETS[0]], mode, args.drafter, args.k, 8)
    with MachineMonitor() as monitor:
        for r in range(args.rounds):
            order = ARMS if r % 2 == 0 else tuple(reversed(ARMS))
            for name, ids in prompts.items():
                for mode in ("plain", "speculative"):
                    got = {arm: one_run(pairs[arm], ids, mode, args.drafter, args.k, args.max_new_tokens)
                           for arm in order}
                    for arm, x in got.items():
                        rates[(arm, mode)].append(x)
                    ratios[mode].append(got["static"] / got["transformers"])
                    print(f"round {r} {name:10} {mode:11} " + "  ".join(f"{a} {got[a]:6.1f} tok/s" for a in ARMS)
                          + f"  static/transformers {ratios[mode][-1]:.3f}", flush=True)
    result = {
        "experiment": EXPERIMENT, "setup": describe_setup(base), "environment": environment(base).to_dict(), "drafter": args.drafter, "k": args.k,
        "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "presets": list(PRESETS),
        "tokens_per_s": {f"{arm} {mode}": summary(xs) for (arm, mode), xs in rates.items()},
        "static_over_transformers": {mode: summary(xs) for mode, xs in ratios.items()},
        "machine": dataclasses.asdict(monitor.load),
        "machine_findings": [f.message for f in monitor.load.findings()],
    }
    for message in result["machine_findings"]:
        print(f"machine: {message}")
    print("\n" + markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
