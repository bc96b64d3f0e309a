"""`whatif`: the cost model's predicted speed-up per k, and over alpha x k, for numbers typed in or a saved
calibration; no model runs."""

from __future__ import annotations

import argparse
import json

from ..errors import PlaygroundError
from ..lab.calibration import Timing
from ..lab.whatif import parse_v, whatif, whatif_text
from ..results import read_document


def cmd_whatif(args: argparse.Namespace) -> int:
    c, overhead, v = args.c, args.overhead, parse_v(args.v)
    if args.calibration:
        doc = read_document(args.calibration)
        timing = Timing.from_dict(doc.get("timing") or doc)
        if timing is None:
            raise PlaygroundError(f"{args.calibration} holds no calibration (a timing, speed or sweep result)")
        c = timing.c if c is None else c
        overhead = timing.overhead if overhead is None else overhead
        v = dict(timing.v) if v is None else v
    if c is None:
        raise PlaygroundError("give the drafter's cost --c (target steps per drafted token) or --calibration FILE")
    try:
        ks = [int(k) for k in args.ks.split(",")]
        positions = None if args.positions is None else [float(a) for a in args.positions.split(",")]
    except ValueError:
        raise PlaygroundError("--ks and --positions are comma-separated numbers") from None
    if any(not 1 <= k <= 16 for k in ks):
        raise PlaygroundError(f"k must be from 1 to 16, got {ks}")
    result = whatif(c, alpha=args.alpha, positions=positions, v=v, overhead=overhead or 0.0, ks=ks)
    print(json.dumps(result, indent=1) if args.json else whatif_text(result))
    return 0
