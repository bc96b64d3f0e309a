"""The model pair a command runs on, chosen by its --pair / --target / --draft / --device / --dtype /
--device-map / --kernels / --threads arguments and loaded with its progress and memory warnings on stderr; and the
decoding its --greedy / --sample and warper arguments ask for."""

from __future__ import annotations

import argparse
import os
import sys

import torch

from ..core.sampling import SamplingConfig
from ..errors import PlaygroundError
from ..pairs.models import ModelPair
from ..pairs.registry import Placement, choose_pair, load_choice


def pair_from_args(args: argparse.Namespace, quiet: bool = False) -> ModelPair:
    """The pair the arguments name; `quiet`: without the loading progress."""
    if args.threads is not None:
        if args.threads < 1:
            raise PlaygroundError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    placement = Placement(device=args.device, dtype=args.dtype,
                          device_map=args.device_map or os.environ.get("PLAYGROUND_DEVICE_MAP"),
                          kernels=getattr(args, "kernels", None))
    choice = choose_pair(pair=args.pair, target=args.target, draft=args.draft, placement=placement)
    say = (lambda m: print(m, file=sys.stderr)) if not quiet else None
    pair = load_choice(choice, progress=say)
    for warning in pair.memory_report().get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return pair


def sampling_of(args: argparse.Namespace) -> SamplingConfig:
    """The decoding a command was asked for (--greedy / --sample and the warpers); checked by SamplingConfig."""
    return SamplingConfig(do_sample=args.sample, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          seed=args.seed)
