"""Adaptive k's settings against the heuristic schedule and the best fixed k, through replay (issue 14).

Replay is deterministic: given one calibration per drafter, every controller's iterations over a preset's greedy
output follow from the recorded text (lab.replay), so settings can be compared on identical costs and identical
acceptance, without the noise of live runs. For every drafter and preset: the replayed predicted speed-up of the
best fixed k (1..16), of transformers' heuristic schedule, and of adaptive k under each settings variant, on a
first call (no memory) and on a second call of the same conversation (the controllers' memory from the first).
Printed: per variant, adaptive / heuristic and adaptive / best fixed k, per preset and their minimum. What is
compared is the cost model's prediction (its step costs from this machine's calibration, named in the header),
not a measurement: confirm a chosen setting with `python -m playground speed` (live, adjacent rounds).

The default variants are the defaults and, one at a time, each rule switched off (see AdaptiveK's docstring) by a
setting, or for the near-tie prior (confidence.prior) by a module constant patched during its replay: what each rule
is worth. The memory's worth is each second call's figure against its first call's (the same text without memory).

    .venv/bin/python scripts/tune_adaptive.py --threads 2
    .venv/bin/python scripts/tune_adaptive.py --drafters llama.cpp --presets tool_call,prose   # a short run
    .venv/bin/python scripts/tune_adaptive.py --drafters draft --variant "slow forgetting=decay:0.95"
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import sys
import time
from unittest import mock

import torch

from playground.drafters import adaptive, confidence
from playground.drafters.registry import make_proposer
from playground.envinfo import describe_setup
from playground.errors import PlaygroundError
from playground.inputs.presets import preset_names
from playground.lab.calibration import CalibrationPlan, calibrate
from playground.lab.replay import ReplayOptions
from playground.lab.replay import run as replay_mod
from playground.pairs.registry import load_named_pair
from playground.results.replay import ReplayResult, SkippedWalk
from playground.studies.tune_adaptive import EXPERIMENT, rules_markdown
from playground.tables import markdown_table

_DEFAULTS = adaptive.DEFAULT_SETTINGS
VARIANTS = {
    "defaults": _DEFAULTS,
    "no optimism (rule 2)": dataclasses.replace(_DEFAULTS, optimism=0.0),
    "no stop rule (rule 4)": dataclasses.replace(_DEFAULTS, confidence=False),
    "no near-tie prior (rule 4)": _DEFAULTS,  # PATCHES below
}
# Rules no setting switches off: confidence.py's constants patched while the variant replays. With TIE = 0 no margin
# is a near-tie, so every unlearnt bin's prior is max(margin, rate) (confidence.prior).
PATCHES = {"no near-tie prior (rule 4)": {"TIE": 0.0}}


def patched(variant: str):
    """A context in which confidence.py's constants are as `variant` needs them (PATCHES), restored after."""
    changes = PATCHES.get(variant)
    return mock.patch.multiple(confidence, **changes) if changes else contextlib.nullcontext()


def replay_controllers(pair, turns, drafter, timing, ks, controllers, settings):
    """replay_turns() with adaptive k built from `settings` (replay builds its controllers with module defaults)."""
    def factory(arm, curve=None, k_max=adaptive.K_MAX, memory=None):
        if arm == "adaptive":
            return adaptive.AdaptiveK(curve, k_max=k_max, settings=settings, memory=memory)
        return adaptive.make_controller(arm, curve, k_max=k_max, memory=memory)

    saved = replay_mod.make_controller
    replay_mod.make_controller = factory  # the one hook replay has into its controllers; restored below
    try:
        return replay_mod.replay_turns(pair, turns, ReplayOptions(drafters=[drafter], ks=ks, controllers=controllers,
                                                                  timing_of=lambda d, ids: timing, records="none"))
    finally:
        replay_mod.make_controller = saved


def speedups(result: ReplayResult, drafter: str):
    """{(turn name, arm): predicted speed-up} of a replay result."""
    return {(t.name, arm): None if isinstance(w, SkippedWalk) else w.predicted_speedup for t in result.turns
            for arm, w in t.drafters[drafter].walks.items()}


def _commit() -> str:
    """The checkout's commit, so a saved table names the code that replayed it."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def parse_variant(text: str) -> tuple[str, adaptive.AdaptiveSettings]:
    """"NAME=field:value,field:value" -> (NAME, the default settings with those fields replaced)."""
    name, sep, fields = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a variant is NAME=field:value,..., got {text!r}")
    known = [f.name for f in dataclasses.fields(adaptive.AdaptiveSettings)]
    changes = {}
    for item in filter(None, fields.split(",")):
        key, _, value = item.partition(":")
        if key not in known:
            raise argparse.ArgumentTypeError(f"no setting {key!r}; the settings are {', '.join(known)}")
        kind = type(getattr(adaptive.DEFAULT_SETTINGS, key))
        try:
            changes[key] = BOOLEANS[value.lower()] if kind is bool else kind(value)
        except (KeyError, ValueError):
            raise argparse.ArgumentTypeError(f"{key} takes a {kind.__name__}, got {value!r}") from None
    try:
        return name, dataclasses.replace(adaptive.DEFAULT_SETTINGS, **changes)
    except (ValueError, PlaygroundError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def print_rule_effects(out: dict) -> None:
    """Per variant, what dropping its rule does to adaptive k's replayed speed-up against the defaults: the largest
    loss and gain over every turn and drafter (a rule that moves nothing anywhere is not earning its place)."""
    for v in next(iter(out.values()))["adaptive"]:
        if v == "defaults":
            continue
        changes = sorted((d["adaptive"][v][t] / d["adaptive"]["defaults"][t] - 1.0, t, drafter)
                         for drafter, d in out.items() for t in d["adaptive"][v])
        (low, lt, ld), (high, ht, hd) = changes[0], changes[-1]
        print(f"{v} against the defaults: largest loss {low:+.1%} ({lt}, {ld}), largest gain {high:+.1%} ({ht}, {hd})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--drafters", default="llama.cpp,draft,lookup,hybrid")
    ap.add_argument("--presets", default=None, help="comma-separated (default: all)")
    ap.add_argument("--json", default=None, help="also write every figure here")
    ap.add_argument("--variant", action="append", type=parse_variant, default=[],
                    help="NAME=field:value,... (repeatable): compare the defaults with these instead of VARIANTS")
    args = ap.parse_args()
    variants = {"defaults": adaptive.DEFAULT_SETTINGS, **dict(args.variant)} if args.variant else VARIANTS
    torch.set_num_threads(args.threads)
    pair = load_named_pair("embedded", device="cpu", progress=None)
    names = args.presets.split(",") if args.presets else preset_names()
    print(f"# {describe_setup(pair)} | presets: {', '.join(names)}", flush=True)
    started = time.perf_counter()
    firsts = replay_mod.preset_turns(pair, names)
    # the second call: the same turn again in the same conversation, so the controllers start from their memory
    turns = [t for first in firsts for t in (first, dataclasses.replace(first, name=first.name + " #2"))]
    median = sorted(firsts, key=lambda t: len(t.prompt_ids))[len(firsts) // 2]
    out, rows = {}, []
    for drafter in args.drafters.split(","):
        timing = calibrate(pair, median.prompt_ids, make_proposer(pair, drafter), CalibrationPlan(n_max=17))
        print(f"{drafter}: c = {timing.c:.3f}, v(2) = {timing.v[2]:.2f}, v(9) = {timing.v[9]:.2f}, "
              f"v(17) = {timing.v[17]:.2f} ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        base = speedups(replay_controllers(pair, turns, drafter, timing, range(1, 17), ("heuristic",),
                                           adaptive.DEFAULT_SETTINGS), drafter)
        per_variant = {}
        for name, s in variants.items():
            with patched(name):
                per_variant[name] = speedups(replay_controllers(pair, turns, drafter, timing, [1], ("adaptive",), s),
                                             drafter)
        out[drafter] = {"timing": timing.to_dict(), "fixed_and_heuristic": {f"{t}|{a}": x for (t, a), x in base.items()},
                        "adaptive": {v: {t: x for (t, a), x in d.items() if a == "adaptive"}
                                     for v, d in per_variant.items()}}
        for t in turns:
            fixed = {a: x for (n, a), x in base.items() if n == t.name and a.startswith("k=") and x is not None}
            best = max(fixed, key=lambda a: (fixed[a], -int(a[2:])))
            heur = base[(t.name, "heuristic")]
            row = [t.name, drafter, f"{best}: {fixed[best]:.2f}", f"{heur:.2f}"]
            for v in variants:
                a = per_variant[v][(t.name, "adaptive")]
                row.append(f"{a:.2f} ({a / heur:.0%} of heur., {a / fixed[best]:.0%} of best)")
            rows.append(row)
        print(f"{drafter} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
    print(markdown_table(["turn", "drafter", "best fixed k", "heuristic", *variants], rows))
    for v in variants:
        for call in ("first", "second"):
            vs_h, vs_b = [], []
            for drafter, d in out.items():
                fh = d["fixed_and_heuristic"]
                for t in turns:
                    if (" #2" in t.name) != (call == "second"):
                        continue
                    a = d["adaptive"][v][t.name]
                    fixed = [x for key, x in fh.items() if key.startswith(t.name + "|k=") and x is not None]
                    vs_h.append(a / fh[f"{t.name}|heuristic"])
                    vs_b.append(a / max(fixed))
            print(f"{v}, {call} calls: adaptive / heuristic median {statistics.median(vs_h):.3f} "
                  f"(min {min(vs_h):.3f}); adaptive / best fixed k median {statistics.median(vs_b):.3f} "
                  f"(min {min(vs_b):.3f})")
    print_rule_effects(out)
    if args.json:
        doc = {"experiment": EXPERIMENT, "setup": describe_setup(pair), "commit": _commit(), "drafters": out}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(rules_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
