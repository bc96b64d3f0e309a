"""python -m playground.preflight: what a GPU lease checks first, in seconds, before it spends minutes.

One line per check; the first that fails stops the preflight with one line saying what is missing (exit status 1):
  imports   the modules the lease's steps import (the playground's timing and summary, the tests' tools);
  versions  Python, torch >= 2.6 (transformers' own floor), transformers >= compat.MIN_TRANSFORMERS, and with
            --wheels DIR each carried wheel the one imported, what it requires installed;
  cuda      a CUDA device (else one line: "no CUDA"), its card, driver, and bf16 native on it;
  cache     a 2-layer tiny Llama fed 3 then 2 tokens through core.cached.CachedLM: its cache holds 5, and its
            logits and the static forward's (core.static.StaticLM) equal transformers' full forward's;
  sdpa      the kernel scaled_dot_product_attention picks at the static forward's shapes (an 8B target verifying 5
            rows, a 1B draft's one-row step, over a 1024-position cache with an additive mask in the model's dtype
            and grouped-query heads; bf16 on CUDA), read from the ops it dispatched.
--device cpu runs every check but the GPU's on a CPU (how CI proves this module); --out FILE saves the findings as
JSON (scripts/gpu_check.sh's summary reads them). Nothing but the standard library and packaging is imported
before the imports check, so a missing package is that check's finding, not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from pathlib import Path

from .kit import CARRY, Failed

MODULES = ("torch", "transformers", "pydantic", "jsonschema", "pytest", "playground.cli.random_timing",
           "playground.lab.gpu_summary", "playground.preflight.checks")


def check_imports() -> str:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise Failed(f"cannot import {name} ({str(e).splitlines()[0]}): {CARRY}") from None
    return f"{len(MODULES)} modules: {', '.join(MODULES)}"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground.preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cuda (default: a lease's check) or cpu (every check but the GPU's, on a CPU)")
    p.add_argument("--wheels", type=Path, default=None, metavar="DIR",
                   help="the folder of carried wheels: each must be the one imported, its requirements installed")
    p.add_argument("--out", type=Path, default=None, metavar="FILE", help="save the findings as JSON")
    return p


def run(args: argparse.Namespace, found: dict) -> None:
    """Every check in order, one line each; raises Failed at the first that fails."""
    if args.wheels is not None and not args.wheels.is_dir():
        raise Failed(f"no wheel folder at {args.wheels}: {CARRY}")
    found["checks"]["imports"] = check_imports()
    print(f"preflight: ok {'imports':<8} {found['checks']['imports']}", flush=True)
    from .checks import CHECKS  # after the imports check, which vouches for what it imports (torch, transformers)

    for name, check in CHECKS:
        found["checks"][name] = check(args, found)
        print(f"preflight: ok {name:<8} {found['checks'][name]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """0 when every check passed; 1 after the one line of the first that failed."""
    args = _parser().parse_args(argv)
    found: dict = {"device": args.device, "passed": False, "failed": None, "checks": {}}
    started = time.perf_counter()
    try:
        run(args, found)
        found["passed"] = True
    except Failed as e:
        found["failed"] = str(e)
    found["seconds"] = round(time.perf_counter() - started, 2)
    print(f"preflight: {found['failed']}" if found["failed"] else f"preflight: passed in {found['seconds']:.1f} s",
          flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(found, indent=1))
    return 0 if found["passed"] else 1
