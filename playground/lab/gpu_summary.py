"""The one screen a GPU lease ends with: `python -m playground.lab.gpu_summary OUT` (scripts/gpu_check.sh runs it).

It reads what the check wrote in OUT (preflight.json, the `timing --random-weights` results and the CUDA tests'
tests.xml) and shows, per pair shape, the graphed target's step against its weight-streaming floor, v(n), the
draft's c and the predicted speed-up, and each target of the graphed path marked met, NOT MET or not measured.
Anything missing reads "not measured": nothing is filled in.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PlaygroundError
from ..results import load_result
from ..results.calibration import CUDA_KERNELS, ForwardsArm, ForwardsResult
from ..tables import markdown_table

NOT = "not measured"
ALPHA = 0.8
SHAPES = (("8b", "8B/1B", "llama-3.1-8b"), ("7b", "7B/0.5B", "qwen2.5-7b"), ("3b", "3B/1B", "llama-3.2-3b"))
"""(file key: forwards_KEY.json, the shape's name, the pair timed)."""
GRAPH_TESTS = "test_cuda_graphs"
FLOOR_RATIO, C_8B, C_3B, V5 = 1.5, 0.2, 0.45, 1.15


@dataclass
class TestCounts:
    """The graph tests' outcomes in a JUnit file, all of them and the greedy ones (greedy equal to plain)."""

    passed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def greedy(self, outcome: str) -> list[str]:
        return [n for n in getattr(self, outcome) if "greedy" in n]


@dataclass
class Inputs:
    preflight: dict | None = None
    forwards: dict[str, ForwardsResult] = field(default_factory=dict)
    tests: TestCounts | None = None
    unreadable: list[str] = field(default_factory=list)  # files there but not readable, with why


def read_tests(path: Path) -> TestCounts:
    counts = TestCounts()
    for case in ET.parse(path).getroot().iter("testcase"):
        if GRAPH_TESTS not in (case.get("classname") or ""):
            continue
        outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                   else "skipped" if case.find("skipped") is not None else "passed")
        getattr(counts, outcome).append(case.get("name", "?"))
    return counts


def read_inputs(folder: Path) -> Inputs:
    found = Inputs()
    try:
        if (folder / "preflight.json").is_file():
            found.preflight = json.loads((folder / "preflight.json").read_text())
        if (folder / "tests.xml").is_file():
            found.tests = read_tests(folder / "tests.xml")
    except (json.JSONDecodeError, ET.ParseError) as e:
        found.unreadable.append(f"{e}")
    for key, _, _ in SHAPES:
        path = folder / f"forwards_{key}.json"
        if path.is_file():
            try:
                result = load_result(path)
            except PlaygroundError as e:
                found.unreadable.append(str(e))
                continue
            if isinstance(result, ForwardsResult):
                found.forwards[key] = result
    return found


def arm_of(result: ForwardsResult) -> tuple[str, ForwardsArm]:
    """The loop's path: graphed where timed, else static, else the first arm."""
    name = next((a for a in ("graphed", "static") if a in result.arms), next(iter(result.arms)))
    return name, result.arms[name]


def _num(x: float | None, fmt: str) -> str:
    return NOT if x is None else format(x, fmt)


def _pair_row(label: str, result: ForwardsResult | None) -> list[str]:
    if result is None:
        return [label, NOT, *[""] * 8]
    name, a = arm_of(result)
    best = max(a.predicted[ALPHA].items(), key=lambda kv: kv[1]) if a.predicted and ALPHA in a.predicted else None
    k = result.step_kernels
    kernels = (f"{k.target} / {k.draft if k.draft is not None else '-'}" if k is not None and k.unit == CUDA_KERNELS
               else NOT)
    return [label, f"{name}, {result.dtype or '?'} on {result.device or '?'}", f"{a.target_step_s * 1e3:.2f} ms",
            f"{a.target_step_s / result.floor.step_s:.2f}x", *(_num(a.v.get(n), ".3f") for n in (1, 5, 17)),
            _num(a.c, ".3f"), f"{best[1]:.2f}x at k = {best[0]}" if best else NOT, kernels]


def _gpu(result: ForwardsResult | None) -> bool:
    return result is not None and (result.device or "").startswith("cuda")


def _mark(ok: bool | None) -> str:
    return NOT if ok is None else "met" if ok else "NOT MET"


def targets(found: Inputs) -> list[tuple[str, str, str]]:
    """(target, met / NOT MET / not measured, the figures behind it). Only results timed on CUDA count."""
    gpu = {key: r for key, r in found.forwards.items() if _gpu(r)}
    out = []
    r8 = gpu.get("8b")
    ratio = arm_of(r8)[1].target_step_s / r8.floor.step_s if r8 else None
    out.append((f"8B target step within {FLOOR_RATIO}x of its weight-streaming floor", _mark(
        None if ratio is None else ratio <= FLOOR_RATIO), _num(ratio, ".2f") + ("x" if ratio is not None else "")))
    for key, label, limit in (("8b", "8B/1B", C_8B), ("3b", "3B/1B", C_3B)):
        c = arm_of(gpu[key])[1].c if key in gpu else None
        out.append((f"c <= {limit} for {label}", _mark(None if c is None else c <= limit), _num(c, ".3f")))
    v5 = {label: arm_of(gpu[key])[1].v.get(5) for key, label, _ in SHAPES if key in gpu}
    v5 = {label: v for label, v in v5.items() if v is not None}
    out.append((f"v(5) <= {V5}", _mark(all(v <= V5 for v in v5.values()) if v5 else None),
                ", ".join(f"{label} {v:.3f}" for label, v in v5.items()) or NOT))
    t = found.tests
    ran = (len(t.greedy("passed")) + len(t.greedy("failed"))) if t else 0
    greedy_ok = None if not ran else not t.greedy("failed")
    out.append(("greedy equal to plain through the graphs", _mark(greedy_ok),
                f"{len(t.greedy('passed'))} of {ran} greedy graph tests passed" if ran else NOT))
    return out


def _header(found: Inputs) -> list[str]:
    pre = found.preflight or {}
    first = next(iter(found.forwards.values()), None)
    env = first.environment if first is not None else None
    card = pre.get("card") or (env.gpu if env is not None and env.gpu else None)
    driver = pre.get("driver") or (first.gpu_driver if first is not None else None)
    torch_v = pre.get("torch") or (env.torch if env is not None and env.torch else None)
    transformers_v = pre.get("transformers") or (env.transformers if env is not None and env.transformers else None)
    sdpa = pre.get("sdpa") or {}
    lines = [(f"card: {card or NOT}; driver: {driver or NOT}; torch {torch_v or NOT}; transformers "
              f"{transformers_v or NOT}"),
             "attention kernel at the captured shapes (preflight): "
             + ("; ".join(f"{role} {s['kernel']}" for role, s in sdpa.items()) if sdpa else NOT)]
    if pre and not pre.get("passed"):
        lines.append(f"preflight failed: {pre.get('failed')}")
    return lines


def summary_text(found: Inputs) -> str:
    t = found.tests
    graphs = (f"{len(t.passed)} passed, {len(t.failed)} failed, {len(t.skipped)} skipped"
              + (f" (failed: {', '.join(t.failed)})" if t.failed else "")) if t else NOT
    rows = [_pair_row(label, found.forwards.get(key)) for key, label, _ in SHAPES]
    lines = ["== the GPU check's summary (random weights, so acceptance is not measured: the alpha is assumed)",
             *_header(found), "",
             markdown_table(["shape", "forward", "target step", "/ floor", "v(1)", "v(5)", "v(17)", "c",
                             f"speed-up at alpha {ALPHA}", "kernels per step (target / draft)"], rows), "",
             f"exactness through the graphs ({GRAPH_TESTS}.py): {graphs}", "",
             markdown_table(["target", "", "measured"], [list(t) for t in targets(found)])]
    lines += [f"unreadable: {u}" for u in found.unreadable]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m playground.lab.gpu_summary", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="the check's results folder ($OUT of scripts/gpu_check.sh)")
    args = p.parse_args(argv)
    if not args.folder.is_dir():
        print(f"error: no results folder at {args.folder}", file=sys.stderr)
        return 2
    print(summary_text(read_inputs(args.folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
