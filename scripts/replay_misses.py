"""Replay's prediction against live runs, per preset: the table of misses issue 16 asks for.

Per preset and drafter: one calibration on the preset's prompt (the full one lab.speed uses, passes up to 17
tokens), a replay of the target's own greedy output for k = 1..16 (exact: the walks are the live run's
iterations), the k replay recommends for that turn (its best predicted speed-up), then `lab.speed` at that k:
--rounds rounds of adjacent plain and speculative runs, the measured median ratio with its min-max. The miss is
measured - predicted; a cell whose own spread (max - min over rounds) is wider than twice the tolerance cannot
show a miss within it, and is counted apart. speed's own empirical prediction (the per-position formula on the
live run) is printed beside replay's (the sum of the replayed iterations' costs), so that a miss can be told
apart from the acceptance model (the two predictions differ) and from step costs (both miss alike). Run it alone:

    .venv/bin/python scripts/replay_misses.py --threads 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup
from playground.inputs.presets import get_preset, preset_names
from playground.lab.calibration import calibrate
from playground.lab.replay import preset_turns, replay
from playground.lab.report import markdown_table
from playground.lab.speed import speed
from playground.pairs.registry import load_named_pair

TOLERANCE = 0.05
CONTROLLERS = ("adaptive", "heuristic")


def best_arm(turn_doc: dict, drafter: str) -> tuple[int, float]:
    walks = turn_doc["drafters"][drafter]["walks"]
    fixed = [(int(a[2:]), w["predicted_speedup"]) for a, w in walks.items()
             if a.startswith("k=") and w.get("predicted_speedup") is not None]
    return max(fixed, key=lambda kv: (kv[1], -kv[0]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--drafters", default="llama.cpp", help="comma-separated (default llama.cpp)")
    ap.add_argument("--presets", default=None, help="comma-separated (default: all)")
    ap.add_argument("--out", default=None, help="write every row and the speed results as JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_named_pair("embedded", device="cpu", progress=None)
    names = args.presets.split(",") if args.presets else preset_names()
    print(f"# {describe_setup(pair)} | {args.rounds} rounds | presets: {', '.join(names)}", flush=True)
    rows, docs, started = [], [], time.perf_counter()
    for drafter in args.drafters.split(","):
        for name in names:
            preset = get_preset(name)
            turn = preset_turns(pair, [name])[0]
            timing = calibrate(pair, turn.prompt_ids, make_proposer(pair, drafter), n_max=17)
            rep = replay(pair, [turn], drafters=[drafter], ks=range(1, 17), controllers=CONTROLLERS,
                         timing_of=lambda d, ids, t=timing: t, records="none")
            tdoc = rep["turns"][0]
            k, predicted = best_arm(tdoc, drafter)
            live = speed(pair, {name: list(turn.prompt_ids)}, lambda d=drafter: make_proposer(pair, d), ks=(k, *CONTROLLERS),
                         rounds=args.rounds, max_new_tokens=preset.max_new_tokens, timing=timing)
            cell = live["table"][0]
            walks = tdoc["drafters"][drafter]["walks"]
            controllers = {c: {"predicted": walks[c].get("predicted_speedup"), "measured": row_c["median_ratio"],
                               "min": row_c["min_ratio"], "max": row_c["max_ratio"]}
                           for c, row_c in zip(CONTROLLERS, live["table"][1:])}
            spread = cell["max_ratio"] - cell["min_ratio"]
            row = {"preset": name, "kind": preset.kind, "drafter": drafter, "k": k, "exact": tdoc["exact"],
                   "replay_predicted": predicted, "speed_predicted": cell.get("predicted_empirical"),
                   "measured": cell["median_ratio"], "min": cell["min_ratio"], "max": cell["max_ratio"],
                   "spread": spread, "miss": cell["median_ratio"] - predicted,
                   "trusted": live["trust"]["trusted"], "trust": live["trust"]["headline"], "controllers": controllers}
            rows.append(row)
            docs.append({"row": row, "speed": live, "timing": timing.to_dict()})
            print(f"{drafter} {name}: k={k} predicted {predicted:.2f}, measured {row['measured']:.2f} "
                  f"[{row['min']:.2f}-{row['max']:.2f}] ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
    head = ["preset (kind)", "drafter", "replay's k", "replay predicted", "measured median [min-max]", "miss",
            "speed's prediction", "trust"]
    table = [[f"{r['preset']} ({r['kind']})", r["drafter"], str(r["k"]) + ("" if r["exact"] else " (estimate)"),
              f"{r['replay_predicted']:.2f}", f"{r['measured']:.2f} [{r['min']:.2f}-{r['max']:.2f}]",
              f"{r['miss']:+.2f}", f"{r['speed_predicted']:.2f}" if r["speed_predicted"] is not None else "-",
              "trusted" if r["trusted"] else r["trust"]] for r in rows]
    print(markdown_table(head, table))
    head2 = ["preset (kind)", "drafter", "best k: measured (replay predicted)",
             *[f"{c}: measured [min-max] (replay predicted), share of best k" for c in CONTROLLERS]]
    table2 = [[f"{r['preset']} ({r['kind']})", r["drafter"], f"k={r['k']}: {r['measured']:.2f} ({r['replay_predicted']:.2f})",
               *[f"{x['measured']:.2f} [{x['min']:.2f}-{x['max']:.2f}] ({x['predicted']:.2f}), "
                 f"{x['measured'] / r['measured']:.0%}" for x in (r["controllers"][c] for c in CONTROLLERS)]]
              for r in rows]
    print("\nthe controllers, measured in the same rounds:\n" + markdown_table(head2, table2))
    judged = [r for r in rows if r["spread"] <= 2 * TOLERANCE]
    within = [r for r in judged if abs(r["miss"]) <= TOLERANCE]
    print(f"\nwithin {TOLERANCE}: {len(within)} of {len(judged)} cells whose spread allows it "
          f"({len(rows) - len(judged)} wider than {2 * TOLERANCE:.2f} over rounds); "
          f"within {TOLERANCE} of all cells: {sum(abs(r['miss']) <= TOLERANCE for r in rows)} of {len(rows)}")
    if args.out:
        Path(args.out).write_text(json.dumps(docs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
