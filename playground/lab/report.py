"""Markdown tables from saved lab results (`--out FILE`), so a figure in the README is re-read from the
file that measured it, never copied by hand: `python -m playground report FILE`."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import PlaygroundError


def load_result(path: str | Path) -> dict:
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise PlaygroundError(f"no result file at {str(path)!r}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlaygroundError(f"{path} is not a JSON result file ({e})") from None
    if not isinstance(doc, dict) or "experiment" not in doc:
        raise PlaygroundError(f"{path} is not a lab result (no 'experiment' field)")
    return doc


def _setup_line(doc: dict) -> str:
    env = doc.get("environment", {})
    pair = env.get("pair") or {}
    bits = [pair.get("target"), f"drafter: {doc['drafter']}" if doc.get("drafter") else None,
            env.get("gpu") or env.get("cpu"), pair.get("device"), pair.get("dtype"),
            f"{env.get('torch_threads')} torch threads" if env.get("torch_threads") else None,
            f"torch {env.get('torch')}" if env.get("torch") else None,
            f"llama-cpp-python {env['llama_cpp']}" if env.get("llama_cpp") else None]
    return ", ".join(str(b) for b in bits if b)


def _label(k) -> str:
    return f"k={k}" if isinstance(k, int) else str(k)


def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def _cells(doc: dict) -> tuple[dict, list[str]]:
    """A speed / sweep result's rows by (prompt, k), and its prompts in order."""
    rows = doc.get("by_prompt") or [{"prompt": "prompt", **r} for r in doc["table"]]
    return {(r["prompt"], r["k"]): r for r in rows}, doc.get("prompts") or sorted({r["prompt"] for r in rows})


def speed_markdown(doc: dict, kinds: dict[str, str] | None = None) -> str:
    """Prompt x k: measured median ratio (empirical prediction); then best fixed k, adaptive and heuristic
    beside it, end to end at the best k, and alpha."""
    if doc.get("experiment") not in ("speed", "sweep"):
        raise PlaygroundError(f"a speed or sweep result is needed, this is {doc.get('experiment')!r}")
    ks = doc["ks"]
    fixed = [k for k in ks if isinstance(k, int)]
    schedules = [k for k in ks if not isinstance(k, int)]
    by, prompts = _cells(doc)
    head = ["preset", *(_label(k) for k in fixed), "best fixed k", *schedules, "end to end at best k", "alpha at best k"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in prompts:
        cells = []
        for k in fixed:
            r = by[(name, k)]
            cells.append(f"{r['median_ratio']:.2f} ({_fmt(r.get('predicted_empirical'))})")
        best = max((by[(name, k)] for k in fixed), key=lambda r: r["median_ratio"])
        sched = []
        for s in schedules:
            r = by[(name, s)]
            sched.append(f"{r['median_ratio']:.2f} ({r['median_ratio'] / best['median_ratio']:.0%} of best)")
        label = f"{name} ({kinds[name]})" if kinds and name in kinds else name
        out.append("| " + " | ".join([label, *cells, f"k={best['k']}: **{best['median_ratio']:.2f}x**", *sched,
                                      f"{_fmt(best.get('median_e2e_ratio'))}x", _fmt(best.get("alpha"), ".3f")]) + " |")
    return "\n".join(out)


def misses_markdown(doc: dict) -> str:
    """How far the empirical prediction missed the measured ratio, per prompt and k (measured - predicted)."""
    ks = [k for k in doc["ks"] if isinstance(k, int)]
    by, prompts = _cells(doc)
    head = ["preset", *(_label(k) for k in ks), "within 0.05"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in prompts:
        misses = [by[(name, k)].get("miss_empirical") for k in ks]
        within = sum(1 for m in misses if m is not None and abs(m) <= 0.05)
        out.append("| " + " | ".join([name, *(_fmt(m, "+.2f") for m in misses), f"{within}/{len(ks)}"]) + " |")
    return "\n".join(out)


def timing_line(doc: dict) -> str:
    t = doc.get("timing") or doc
    v = t.get("v", {})
    return (f"target step {1000 * t['target_step_s']:.1f} ms; drafter {1000 * t['draft_step_s']:.1f} ms per token "
            f"(c = {t['c']:.3f}) + {1000 * t.get('draft_call_s', 0.0):.1f} ms per call; v(n) for n = 1..{len(v)}: "
            + ", ".join(f"{x:.2f}" for _, x in sorted(v.items(), key=lambda kv: int(kv[0]))))


def report(path: str | Path) -> str:
    doc = load_result(path)
    lines = [f"{doc['experiment']} — {_setup_line(doc)}"]
    if doc["experiment"] in ("speed", "sweep"):
        if doc.get("timing"):
            lines.append(timing_line(doc))
        lines += ["", speed_markdown(doc), "", "measured - empirical prediction:", "", misses_markdown(doc)]
        flagged = [n for n, d in doc.get("drift", {}).items() if d.get("flagged")]
        if flagged:
            lines.append(f"\nplain speed drifted > 15% between rounds on: {', '.join(flagged)}")
    elif doc["experiment"] == "timing":
        lines.append(timing_line(doc))
    else:
        raise PlaygroundError(f"no report for {doc['experiment']!r} results yet (speed, sweep, timing)")
    return "\n".join(lines)
