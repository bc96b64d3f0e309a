"""End to end, as an agent sees it (issue 14): how the llama.cpp drafter gets the prompt on a first call.

Every speculative run starts from an empty llama.cpp KV (`forget`), as an agent's first call does (otherwise
the drafter keeps the prompt from the previous run and prefills nothing). For each preset and drafter, each
round runs, back to back in an order that rotates from round to round:
  plain      plain decoding;
  off        the drafter prefills the prompt itself, after the target (in turn);
  shared     the drafter copies the prompt's KV from the target's cache (llamacpp_kv; the default);
  on, N thr  the drafter prefills itself beside the target's prefill, llama.cpp on N threads (one arm per
             --prefill-threads value; torch keeps all of its own).
Each speculative run is divided by the plain run of its round. Printed: the end-to-end ratio (prefill counted,
lab.speed.run._e2e), the decode-only ratio, each as median and min-max over rounds, the paired gain of each arm
over "off" (median of the per-round differences of the end-to-end ratio), and the median prefill times: target,
drafter total (its own prefill wall time, or the copy), drafter not hidden (what the run waited for after the
target finished) and the phase's wall time.

    .venv/bin/python scripts/bench_prefill.py --threads 2 --rounds 5 --out docs/results/NAME.json
    .venv/bin/python scripts/bench_prefill.py --rounds 1 --max-new-tokens 8     # a smoke run

`--out` writes the per-row summaries the table is drawn from (medians, min-max, n), with the setup, the
environment and the machine's load; scripts/results_tables.py draws the table from it with `markdown`. `--runs`
writes every run besides.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.records import Prefill, summarize
from playground.drafters.llamacpp import LlamaCppProposer
from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup, environment
from playground.inputs.presets import get_preset
from playground.lab.common import rotated
from playground.lab.speed.run import _e2e
from playground.lab.trust import MachineMonitor, Verdict
from playground.pairs.registry import load_named_pair
from playground.studies.bench_prefill import EXPERIMENT, markdown


def llama_of(proposer) -> LlamaCppProposer:
    """The llama.cpp drafter inside `proposer` (itself, or a hybrid's model drafter)."""
    inner = getattr(proposer, "model", proposer)
    if not isinstance(inner, LlamaCppProposer):
        raise SystemExit(f"{proposer.describe()} does not draft with llama.cpp: this benchmark needs llama-cpp-python "
                         "(bash scripts/install_llama_cpp.sh)")
    return inner


def run_plain(pair, ids, max_new):
    records = list(plain_generate(pair, ids, max_new_tokens=max_new))
    return summarize(records), records[0]


def run_spec(pair, ids, proposer, k, max_new, overlap, threads, share):
    drafter = llama_of(proposer)
    drafter.forget()  # a first call: the drafter has nothing of the prompt
    drafter.share_kv = share
    try:
        records = list(speculative_generate(pair, ids, proposer=proposer, k=k, max_new_tokens=max_new,
                                            options=LoopOptions(record_probs=False, overlap_prefill=overlap,
                                                                prefill_threads=threads)))
    finally:
        drafter.share_kv = True
    if share and not records[0].draft_shared:
        raise SystemExit(f"the drafter did not take the target's KV: {drafter.kv_share_note}")
    return summarize(records), records[0]


def arm_settings(prefill_threads: list[int]) -> dict[str, tuple]:
    """arm -> (overlap_prefill, prefill_threads, share_kv) of its speculative runs."""
    return {"off": (False, None, False), "shared": (False, None, True),
            **{f"on, llama.cpp {t} thr": (True, t, False) for t in prefill_threads}}


def spread(xs) -> dict | None:
    """median, min, max and n of the figures that are there; None when none is."""
    xs = [x for x in xs if x is not None]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None


def ms(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return 1000 * statistics.median(xs) if xs else None


def summarize_rows(runs: list[dict], groups, arms) -> list[dict]:
    """One row per preset, drafter and arm: the ratios' spreads, the gain over "off" and the median prefill ms."""
    rows = []
    for name, d in groups:
        cell = [x for x in runs if x["preset"] == name and x["drafter"] == d]
        off = {x["round"]: x["e2e_ratio"] for x in cell if x["arm"] == "off"}
        for arm in arms:
            xs = [x for x in cell if x["arm"] == arm]
            spec = arm != "plain"
            gain = (spread([x["e2e_ratio"] - off[x["round"]] for x in xs if x["e2e_ratio"] is not None
                            and off.get(x["round"]) is not None]) if arm not in ("plain", "off") else None)
            rows.append({"preset": name, "drafter": d, "arm": arm,
                         "e2e_ratio": spread(x["e2e_ratio"] for x in xs) if spec else None,
                         "decode_ratio": spread(x["decode_ratio"] for x in xs) if spec else None,
                         "gain_vs_off": gain, "target_ms": ms([x["target_s"] for x in xs]),
                         "drafter_total_ms": ms([x["draft_total_s"] for x in xs]) if spec else None,
                         "drafter_not_hidden_ms": ms([x["draft_s"] for x in xs]) if spec else None,
                         "wall_ms": ms([x["wall_s"] for x in xs]), "overlapped": any(x["overlapped"] for x in xs)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch's threads (and llama.cpp's while drafting)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--presets", default="tool_call,prose")
    ap.add_argument("--drafters", default="hybrid,llama.cpp")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--prefill-threads", default=None,
                    help="comma-separated llama.cpp threads beside the target's prefill, one overlap arm each "
                         "(default: 1,2 with 2 or more threads, else 1; the engine's default is threads // 2); "
                         "'none': no overlap arm")
    ap.add_argument("--out", default=None, help="write the result (the table's summaries, setup, machine load) here")
    ap.add_argument("--runs", default=None, help="also write every run here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.prefill_threads == "none":
        prefill_threads = []
    elif args.prefill_threads:
        prefill_threads = [int(t) for t in args.prefill_threads.split(",")]
    else:
        prefill_threads = [1, 2] if args.threads >= 2 else [1]
    pair = load_named_pair("embedded", device="cpu", progress=None)
    prompts = {name: get_preset(name).prompt_ids(pair.tokenizer) for name in args.presets.split(",")}
    drafters = {d: make_proposer(pair, d) for d in args.drafters.split(",")}
    for p in drafters.values():
        llama_of(p)
    setting = arm_settings(prefill_threads)
    arms = ["plain", *setting]

    # Warm-up, untimed: every arm once on the first prompt (the first passes of a process run slow).
    warm = next(iter(prompts.values()))
    run_plain(pair, warm, 4)
    for proposer in drafters.values():
        for arm in setting.values():
            run_spec(pair, warm, proposer, args.k, 4, *arm)

    runs = []
    groups = [(name, d) for name in prompts for d in drafters]
    with MachineMonitor() as m:
        for r in range(args.rounds):
            for g, (name, d) in enumerate(groups):
                results = {}
                for arm in rotated(arms, r + g):
                    if arm == "plain":
                        results[arm] = run_plain(pair, prompts[name], args.max_new_tokens)
                    else:
                        results[arm] = run_spec(pair, prompts[name], drafters[d], args.k, args.max_new_tokens,
                                                *setting[arm])
                plain = results["plain"][0]
                for arm in arms:
                    s, pre = results[arm]
                    row = {"round": r, "preset": name, "drafter": d, "arm": arm,
                           "e2e_ratio": _e2e(s) / _e2e(plain) if _e2e(plain) else None,
                           "decode_ratio": s.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else None,
                           "new_tokens": s.new_tokens, "plain_new_tokens": plain.new_tokens,
                           "target_s": pre.target_s, "draft_total_s": pre.draft_total_s, "draft_s": pre.draft_s,
                           "wall_s": pre.wall_s, "overlapped": pre.overlapped, "shared": pre.draft_shared,
                           "decode_s": s.decode_s}
                    runs.append(row)
                    if arm != "plain":
                        print(f"round {r + 1}, {name}, {d}, {arm}: e2e {row['e2e_ratio']:.2f}x, decode "
                              f"{row['decode_ratio']:.2f}x, prefill {_prefill_line(pre)}", flush=True)

    verdict = Verdict.of(m.load.findings())
    result = {"experiment": EXPERIMENT, "date": time.strftime("%Y-%m-%d"), "setup": describe_setup(pair),
              "environment": environment(pair).to_dict(), "k": args.k, "max_new_tokens": args.max_new_tokens,
              "rounds": args.rounds, "prefill_threads": prefill_threads,
              "prompt_tokens": {name: len(ids) for name, ids in prompts.items()},
              "machine": m.load.to_dict(), "verdict": verdict.to_dict(), "rows": summarize_rows(runs, groups, arms)}
    print("\n" + markdown(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    if args.runs:
        with open(args.runs, "w") as f:
            json.dump({"args": vars(args), "setup": result["setup"], "runs": runs}, f, indent=1)
    return 0


def _prefill_line(pre: Prefill) -> str:
    return (f"target {1000 * pre.target_s:.0f} ms, drafter {1000 * pre.draft_total_s:.0f} ms "
            f"({1000 * pre.draft_s:.0f} not hidden), wall {1000 * pre.wall_s:.0f} ms")


if __name__ == "__main__":
    raise SystemExit(main())
