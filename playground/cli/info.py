"""The commands that describe rather than run: `presets` (the presets), `pairs` (the named model pairs and
which other models may be loaded) and `info` (the loaded pair, its memory and the environment)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..inputs.presets import load_presets


def cmd_presets() -> int:
    """One line per preset; a preset file that does not load is an error line, and the exit status 1."""
    presets, errors = load_presets(strict=False)
    for name, p in presets.items():
        schema = " (JSON Schema)" if p.output_schema else ""
        print(f"{name:28} {p.kind:10} {p.title}{schema}")
    for err in errors:
        print(f"error: {err}", file=sys.stderr)
    return 1 if errors else 0


def cmd_pairs() -> int:
    # The pair registry and envinfo import torch (seconds): `pairs` and `info` import them when they run, so
    # that `presets`, which reads JSON files only, stays instant.
    from ..pairs.registry import ALLOW_ANY_ENV, DEFAULT_PAIR, PAIR_ENV, ROOTS_ENV, ModelPolicy, pairs_table

    default = os.environ.get(PAIR_ENV, "").strip() or DEFAULT_PAIR
    for row in pairs_table():
        p = row.pair
        mark = "*" if p.name == default else " "
        state = "cached" if row.cached else "downloads on first use"
        where = "GPU only" if p.needs_cuda else p.device
        r = p.ratios
        shape = (f"\n      draft/target: {r.draft_layers}/{r.target_layers} layers ({r.layer_ratio:.2f}), "
                 f"{r.draft_params / 1e9:.2f}B/{r.target_params / 1e9:.2f}B parameters ({r.byte_ratio:.2f})"
                 if r else "")
        print(f"{mark} {p.name:14} {p.target} + {p.draft or 'no draft model'} "
              f"[{p.dtype}, {where}; {state}]{shape}\n      {p.note}")
    policy = ModelPolicy.from_env()
    roots = os.pathsep.join(map(str, policy.roots)) or ("any folder" if policy.allow_any else "none")
    print(f"* the default pair (${PAIR_ENV}). Other hub ids: {'allowed' if policy.allow_any else 'refused'} "
          f"(${ALLOW_ANY_ENV}); local paths inside: {roots} (${ROOTS_ENV})")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from ..envinfo import environment  # on use, as in cmd_pairs
    from .load import pair_from_args  # on use, as in cmd_pairs

    pair = pair_from_args(args)
    print(json.dumps({"environment": environment(pair).to_dict(), "memory": pair.memory_report()}, indent=2))
    return 0
