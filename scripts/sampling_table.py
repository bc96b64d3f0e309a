"""The sampling table: how much acceptance and speed-up drop under sampling, and whether the prediction holds.

One `lab.speed` experiment per drafter and decoding (greedy; T = 0.7 and T = 1.0, each with top-p 0.9 and with
top-p off), on one preset per kind, fixed k and adaptive k, with the prediction beside each figure. Each drafter is
calibrated once per preset and decoding, under that decoding: a sampled step does more than a greedy one (the
warpers, softmax and, with top-p, a sort over the vocabulary, on the target's verified rows and on each of the
drafter's proposals, and plain decoding's draw). A greedy calibration leaves that work out (with it, measured
sampled speed-ups fell 0.1-0.2 below the prediction: docs/results.md, "Sampling"). Printed: per preset kind and decoding, for each drafter, alpha, tokens per target pass, the measured
median speed-up with its min-max over rounds, the empirical prediction, and the trust verdict of the experiment.
Every result is saved under --out-dir (JSON, as `speed --out` writes it; `python -m playground report FILE` reads
each). Run it alone on the machine:

    .venv/bin/python scripts/sampling_table.py --threads 2 --rounds 3 --k 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from playground.core.sampling import GREEDY, SamplingConfig
from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup
from playground.inputs.presets import get_preset, preset_names
from playground.lab.calibration import CalibrationPlan, calibrate
from playground.lab.speed import SpeedRequest, speed
from playground.pairs.registry import load_named_pair
from playground.tables import markdown_table

DECODINGS = {
    "greedy": GREEDY,
    "T=0.7 top-p=0.9": SamplingConfig(do_sample=True, temperature=0.7, top_p=0.9, seed=0),
    "T=0.7": SamplingConfig(do_sample=True, temperature=0.7, seed=0),
    "T=1.0 top-p=0.9": SamplingConfig(do_sample=True, temperature=1.0, top_p=0.9, seed=0),
    "T=1.0": SamplingConfig(do_sample=True, temperature=1.0, seed=0),
}


def one_per_kind() -> list[str]:
    seen: dict[str, str] = {}
    for name in preset_names():
        seen.setdefault(get_preset(name).kind, name)
    return list(seen.values())


def _cell(doc: dict, prompt: str, k) -> dict:
    return next(r for r in doc["by_prompt"] if r["prompt"] == prompt and r["k"] == k)


def _tokens_per_pass(doc: dict, prompt: str, k) -> float | None:
    xs = sorted(x["tokens_per_pass"] for x in doc["runs"] if x["prompt"] == prompt and x["k"] == k
                and x.get("tokens_per_pass") is not None)
    return xs[len(xs) // 2] if xs else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=4, help="the fixed k (adaptive k runs beside it)")
    ap.add_argument("--drafters", default="llama.cpp,draft,lookup")
    ap.add_argument("--presets", default=None, help="comma-separated (default: one per kind)")
    ap.add_argument("--decodings", default=",".join(DECODINGS), help=f"a subset of: {', '.join(DECODINGS)}")
    ap.add_argument("--out-dir", default="results/sampling")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    decodings = [d.strip() for d in args.decodings.split(",")]
    unknown = [d for d in decodings if d not in DECODINGS]
    if unknown:
        ap.error(f"unknown decoding {unknown[0]!r}")
    pair = load_named_pair("embedded", device="cpu", progress=None)
    names = args.presets.split(",") if args.presets else one_per_kind()
    prompts = {n: get_preset(n).prompt_ids(pair.tokenizer) for n in names}
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"# {describe_setup(pair)} | k = {args.k} and adaptive | {args.rounds} rounds | presets: {', '.join(names)}",
          flush=True)
    results: dict[tuple[str, str], dict] = {}
    started = time.perf_counter()
    for drafter in args.drafters.split(","):
        for decoding in decodings:
            timings = {n: calibrate(pair, ids, make_proposer(pair, drafter), CalibrationPlan(n_max=17, sampling=DECODINGS[decoding]))
                       for n, ids in prompts.items()}
            doc = speed(SpeedRequest(pair, prompts, lambda d=drafter: make_proposer(pair, d), ks=(args.k, "adaptive"),
                                     rounds=args.rounds, max_new_tokens=64, sampling=DECODINGS[decoding],
                                     timing=timings)).to_dict()
            results[(drafter, decoding)] = doc
            slug = f"{drafter}_{decoding}".replace("=", "").replace(", ", "_").replace(" ", "").replace(".", "")
            (out / f"{slug}.json").write_text(json.dumps(doc, indent=1, default=str))
            print(f"{drafter}, {decoding}: {doc['trust']['headline']} ({time.perf_counter() - started:.0f} s so far)",
                  file=sys.stderr, flush=True)
    drafters = args.drafters.split(",")
    head = ["preset (kind)", "decoding"]
    for d in drafters:
        head += [f"{d}: alpha", f"{d}: tokens/pass", f"{d}: k={args.k} measured [min-max] (predicted)",
                 f"{d}: adaptive"]
    rows = []
    for name in names:
        for decoding in decodings:
            row = [f"{name} ({get_preset(name).kind})", decoding]
            for d in drafters:
                doc = results[(d, decoding)]
                c, a = _cell(doc, name, args.k), _cell(doc, name, "adaptive")
                pred = c.get("predicted_empirical")
                row += [f"{c['alpha']:.2f}" if c.get("alpha") is not None else "-",
                        f"{_tokens_per_pass(doc, name, args.k):.2f}",
                        f"{c['median_ratio']:.2f} [{c['min_ratio']:.2f}-{c['max_ratio']:.2f}]"
                        f" ({pred:.2f})" if pred is not None else f"{c['median_ratio']:.2f}",
                        f"{a['median_ratio']:.2f} [{a['min_ratio']:.2f}-{a['max_ratio']:.2f}]"]
            rows.append(row)
    print(markdown_table(head, rows))
    print("\ntrust per experiment:")
    for (d, decoding), doc in results.items():
        print(f"- {d}, {decoding}: {doc['trust']['headline']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
