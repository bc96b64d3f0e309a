"""`timing --random-weights`: a named pair's step costs from its shipped configs, without downloading it.

The pair is built on the chosen device with random weights (playground.pairs.synthetic), timed on each forward
(playground.lab.forwards) and reported with the weight-streaming floor and the cost model's predicted speed-ups at
assumed alphas. On a GPU host this answers "would this pair pay here?" in a minute, before a 16 GB download."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import replace

import torch

from ..envinfo import environment
from ..errors import PlaygroundError
from ..lab.forwards import time_forwards
from ..lab.forwards_report import forwards_text
from ..pairs.kernels import choose_kernels
from ..pairs.models import resolve_device, resolve_dtype
from ..pairs.registry import EMBEDDED_HUB, get_pair_spec
from ..pairs.synthetic import pair_ratios, random_pair
from ..results.calibration import PairShape
from .progress import progress_bar

EMBEDDED_WORDS = ("embedded", "int8")


def _hub_ids(args: argparse.Namespace) -> tuple[str, str | None]:
    """The target's and the draft's hub ids: the named pair's, changed by --target / --draft (shipped configs
    only; the embedded model is SmolLM2-135M-Instruct, and its int8 draft is timed as that model)."""
    if args.pair is None and args.target is None:
        raise PlaygroundError("--random-weights needs --pair NAME (see `python -m playground pairs`) or --target "
                              "HUB_ID of a shipped config")
    spec = get_pair_spec(args.pair) if args.pair else None
    target = args.target or spec.target
    draft = args.draft if args.draft is not None else (spec.draft if spec else None)
    target = EMBEDDED_HUB if target in EMBEDDED_WORDS else target
    draft = None if draft in (None, "none") else (EMBEDDED_HUB if draft in EMBEDDED_WORDS else draft)
    return target, draft


def _device_and_dtype(args: argparse.Namespace) -> tuple[torch.device, torch.dtype]:
    device = resolve_device(args.device or "auto")  # refuses CUDA on a machine without it, in words
    return device, resolve_dtype(args.dtype or "auto", device)


def _n_max(ks: str | None) -> int:
    """The longest pass timed: max(--ks) + 1, else 17 (k up to 16)."""
    if not ks:
        return 17
    try:
        values = [int(k) for k in ks.split(",")]
    except ValueError:
        raise PlaygroundError(f"--ks with --random-weights takes fixed k values from 1 to 16, got {ks!r}") from None
    if not all(1 <= k <= 16 for k in values):
        raise PlaygroundError(f"--ks with --random-weights takes k values from 1 to 16, got {ks!r}")
    return max(values) + 1


def cmd_random_timing(args: argparse.Namespace) -> int:
    """Build, time, print (and with --out save) the random-weight pair's step costs."""
    if args.threads is not None:
        if args.threads < 1:
            raise PlaygroundError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    target, draft = _hub_ids(args)
    device, dtype = _device_and_dtype(args)
    if args.rounds < 1 or args.repeats < 1:
        raise PlaygroundError("--rounds and --repeats must be >= 1")
    if not 1 <= args.context <= 4096:
        raise PlaygroundError(f"--context must be from 1 to 4096 tokens, got {args.context}")
    arms = tuple(a.strip() for a in args.arms.split(",")) if args.arms else None
    if args.batch:
        raise PlaygroundError("--batch times a loaded pair's batched passes; leave it out with --random-weights")
    n_max = _n_max(args.ks)
    print(f"# building {target} + {draft or 'no draft'} with random weights on {device}, {dtype}"
          + (f", {args.layers} layers at most" if args.layers else ""), file=sys.stderr)
    pair = random_pair(target, draft, device, dtype, layers=args.layers)
    kernels = {}
    if device.type == "cpu":  # the linear layers' kernels, chosen as a loaded pair's are (pairs/kernels.py)
        for role, model in (("target", pair.target), ("draft", pair.draft)):
            if model is not None:
                kernels[role] = choose_kernels(model, getattr(args, "kernels", None))
    result = time_forwards(pair, arms=arms, context=args.context, n_max=n_max, rounds=args.rounds,
                           repeats=args.repeats, progress=progress_bar())
    ratios = pair_ratios(target, draft) if draft else None
    env = environment()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else env.cpu
    chosen = {k.kernels for k in kernels.values()}
    named = f", {'/'.join(sorted(chosen))} kernels" if chosen else ""
    dtype_name = str(dtype).replace("torch.", "")
    result = replace(
        result, pair=args.pair or target, target=target, draft=draft, device=str(device), dtype=dtype_name,
        environment=env, kernels={role: k.to_dict() for role, k in kernels.items()},
        shape=PairShape(layers=args.layers, target_layers=pair.target.config.num_hidden_layers,
                        draft_layers=pair.draft.config.num_hidden_layers if pair.draft is not None else None,
                        layer_ratio=ratios.layer_ratio if ratios else None,
                        byte_ratio=ratios.byte_ratio if ratios else None),
        command="python -m playground " + shlex.join(getattr(args, "argv", []) or []),
        setup=f"{device} ({where}), {dtype_name}, {torch.get_num_threads()} torch threads{named}")
    print(forwards_text(result))
    if args.out:
        result.save(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0
