"""The target's forward on a CPU, two arms side by side in one run, plain and speculative: transformers'
(DynamicCache) against the static-cache one (core/static.py, what CUDA graphs record on a GPU), or with
`--arms static-before,static` the static step of an earlier commit (`--before`, loaded from git) against today's.

The embedded pair (real weights, so acceptance is real), three presets, every round running each arm's plain
and speculative decode of each preset, the arms alternating A B, B A, ... Each run's decode tokens/s (prefill
excluded), per arm and mode the median over runs with its min-max, and per adjacent pair the ratio static /
first arm (median, min-max): core.static.CPU_TARGET changes only if the static forward is at least as fast. Each
arm's dispatched ops per layer (one 1-token step's ops, the step's own spread over the layers) are printed too.
The draft is the same in both arms (the pair's int8 copy on the lean forward, or prompt lookup): only the target's
forward changes. Run it alone on a quiet machine:

    .venv/bin/python scripts/bench_static.py --threads 2 --rounds 4 --out results/bench_static.json
    .venv/bin/python scripts/bench_static.py --arms static-before,static --before 11e2213 --threads 2 --rounds 4
    .venv/bin/python scripts/bench_static.py --rounds 1 --max-new-tokens 8     # a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import subprocess
import sys

import torch

from playground.core import engine, static
from playground.core.engine import plain_generate, speculative_generate
from playground.core.opcount import count_ops
from playground.core.records import Iteration, Step
from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup, environment
from playground.inputs.presets import get_preset
from playground.lab.trust import MachineMonitor
from playground.pairs.registry import choose_pair, load_choice
from playground.studies.bench_static import ARMS, EXPERIMENT, markdown

PRESETS = ("tool_call", "prose", "code")
KNOWN_ARMS = ("transformers", "static", "static-before")


def static_before(commit: str):
    """core/static.py as it was at `commit`, as a module of the package (its relative imports resolve against
    today's package: the modules it imports must still offer what it used). Loaded from git's copy, not a copy
    kept in the tree: the step it compares against is exactly the one that commit ran."""
    source = subprocess.run(["git", "show", f"{commit}:playground/core/static.py"], capture_output=True, text=True,
                            check=True).stdout
    name = "playground.core._static_before"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    module.__package__ = "playground.core"
    sys.modules[name] = module
    exec(compile(source, f"{commit}:playground/core/static.py", "exec"), module.__dict__)  # noqa: S102
    return module


def arm_pair(base, arm: str):
    return dataclasses.replace(base, target_forward="static" if arm == "static-before" else arm)


def ops_per_layer(pair, arm: str, before) -> float:
    """One 1-token step's dispatched ops (views left out) over the target's layers."""
    make = before.target_lm if arm == "static-before" else static.target_lm
    lm = make(arm_pair(pair, arm), 64)
    lm.feed([1, 2, 3])
    ops = count_ops(lambda: lm.feed([4]))
    return sum(ops.values()) / pair.target.config.num_hidden_layers


def decode_rate(records) -> float:
    """Tokens per second after the prefill (a record's elapsed_s counts from the prefill's end)."""
    decode = [r for r in records if isinstance(r, (Iteration, Step))]
    tokens = sum(len(r.emitted) if isinstance(r, Iteration) else 1 for r in decode)
    return tokens / decode[-1].elapsed_s


def one_run(pair, ids, mode: str, drafter: str, k: int, max_new: int, target_lm=static.target_lm) -> float:
    engine.target_lm = target_lm  # the arm's target forward (the engine builds its target through this name)
    if mode == "plain":
        return decode_rate(plain_generate(pair, ids, max_new_tokens=max_new))
    proposer = make_proposer(pair, drafter)
    return decode_rate(speculative_generate(pair, ids, proposer=proposer, k=k, max_new_tokens=max_new))


def summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--drafter", default="draft", help="draft (the int8 copy) or lookup")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--arms", default=",".join(ARMS), help=f"two of {', '.join(KNOWN_ARMS)}, comma-separated")
    ap.add_argument("--before", default="11e2213", help="the commit whose static step the arm static-before runs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.arms = tuple(a.strip() for a in args.arms.split(","))
    if len(args.arms) != 2 or len(set(args.arms)) != 2 or not set(args.arms) <= set(KNOWN_ARMS):
        ap.error(f"--arms takes two different arms of {', '.join(KNOWN_ARMS)}, got {','.join(args.arms)}")
    return args


def measure(args, base, arms, prompts, makers) -> tuple[dict, dict, object]:
    """Rounds of each preset's plain and speculative runs, the arms alternating A B, B A, ..."""
    rates = {(arm, mode): [] for arm in arms for mode in ("plain", "speculative")}
    ratios = {mode: [] for mode in ("plain", "speculative")}
    pairs = {arm: arm_pair(base, arm) for arm in arms}
    for arm in arms:  # a warm-up run of each arm and mode, untimed
        for mode in ("plain", "speculative"):
            one_run(pairs[arm], prompts[PRESETS[0]], mode, args.drafter, args.k, 8, makers[arm])
    with MachineMonitor() as monitor:
        for r in range(args.rounds):
            order = arms if r % 2 == 0 else tuple(reversed(arms))
            for name, ids in prompts.items():
                for mode in ("plain", "speculative"):
                    got = {arm: one_run(pairs[arm], ids, mode, args.drafter, args.k, args.max_new_tokens, makers[arm])
                           for arm in order}
                    for arm, x in got.items():
                        rates[(arm, mode)].append(x)
                    ratios[mode].append(got[arms[1]] / got[arms[0]])
                    print(f"round {r} {name:10} {mode:11} " + "  ".join(f"{a} {got[a]:6.1f} tok/s" for a in arms)
                          + f"  {arms[1]}/{arms[0]} {ratios[mode][-1]:.3f}", flush=True)
    return rates, ratios, monitor


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    arms = args.arms
    before = static_before(args.before) if "static-before" in arms else None
    makers = {arm: before.target_lm if arm == "static-before" else static.target_lm for arm in arms}
    base = load_choice(choose_pair(pair="embedded"))
    prompts = {name: get_preset(name).prompt_ids(base.tokenizer) for name in PRESETS}
    ops = {arm: ops_per_layer(base, arm, before) for arm in arms}
    print("dispatched ops per layer: " + ", ".join(f"{arm} {n:.1f}" for arm, n in ops.items()), flush=True)
    rates, ratios, monitor = measure(args, base, arms, prompts, makers)
    engine.target_lm = static.target_lm
    result = {
        "experiment": EXPERIMENT, "setup": describe_setup(base), "environment": environment(base).to_dict(),
        "drafter": args.drafter, "k": args.k, "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
        "presets": list(PRESETS), "arms": list(arms), "ops_per_layer": ops,
        "before": args.before if before is not None else None,
        "tokens_per_s": {f"{arm} {mode}": summary(xs) for (arm, mode), xs in rates.items()},
        f"{arms[1]}_over_{arms[0]}": {mode: summary(xs) for mode, xs in ratios.items()},
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
