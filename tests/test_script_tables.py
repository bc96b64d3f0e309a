"""The benchmark scripts' result files draw their docs/results.md tables through scripts/results_tables.py
(issue 45): a small hand-made result of each experiment renders with its figures in the right cells, and one
missing a field the table needs fails with a message that names the file and the field."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from playground.experiments import experiment_named

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("results_tables", ROOT / "scripts" / "results_tables.py")
results_tables = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = results_tables
SPEC.loader.exec_module(results_tables)

SETUP = "cpu (Test CPU), float32, 2 torch threads, oneDNN kernels"
TRUSTED = {"trusted": True, "headline": "trusted", "findings": []}


def _spread(median, low, high, n=5):
    return {"median": median, "min": low, "max": high, "n": n}


def kernels() -> dict:
    per = {"blas": {"1": {"median_ms": 44.0, "min_ms": 41.3, "max_ms": 48.5, "v": 1.0},
                    "2": {"median_ms": 67.2, "min_ms": 63.4, "max_ms": 84.7, "v": 1.53}},
           "onednn": {"1": {"median_ms": 28.4, "min_ms": 27.1, "max_ms": 37.9, "v": 1.0},
                      "2": {"median_ms": 35.3, "min_ms": 32.5, "max_ms": 43.3, "v": 1.24}}}
    return {"experiment": "kernels-blas-onednn", "date": "2026-12-02", "setup": SETUP, "rounds": 15,
            "context_tokens": 128, "sizes": [1, 2], "verdict": TRUSTED, "kernels": per}


def prefill() -> dict:
    row = {"preset": "tool_call", "drafter": "llama.cpp", "target_ms": 534.0, "wall_ms": 1700.0,
           "overlapped": False, "gain_vs_off": None}
    rows = [{**row, "arm": "plain", "e2e_ratio": None, "decode_ratio": None, "drafter_total_ms": None,
             "drafter_not_hidden_ms": None},
            {**row, "arm": "off", "e2e_ratio": _spread(0.91, 0.81, 0.94), "decode_ratio": _spread(2.7, 2.22, 2.9),
             "drafter_total_ms": 1178.0, "drafter_not_hidden_ms": 1178.0},
            {**row, "arm": "shared", "e2e_ratio": _spread(1.83, 1.65, 1.95), "decode_ratio": _spread(2.64, 2.36, 3.03),
             "gain_vs_off": _spread(0.92, 0.76, 1.01), "drafter_total_ms": 6.0, "drafter_not_hidden_ms": 6.0},
            {**row, "arm": "on, llama.cpp 2 thr", "e2e_ratio": _spread(0.89, 0.76, 0.95),
             "decode_ratio": _spread(2.72, 2.23, 2.92), "gain_vs_off": _spread(-0.05, -0.1, 0.02),
             "target_ms": 1122.0, "drafter_total_ms": 1746.0, "drafter_not_hidden_ms": 700.0, "overlapped": True}]
    return {"experiment": "prefill-kv", "date": "2026-12-02", "setup": SETUP, "verdict": TRUSTED,
            "machine": {"other_cores": 0.02}, "k": 8, "max_new_tokens": 64, "rounds": 5,
            "prompt_tokens": {"tool_call": 330}, "rows": rows}


def replay() -> dict:
    controllers = {"adaptive": {"predicted": 2.0, "measured": 2.12, "min": 2.0, "max": 2.2},
                   "heuristic": {"predicted": 1.9, "measured": 2.04, "min": 1.9, "max": 2.1}}
    row = {"preset": "code", "kind": "code", "drafter": "llama.cpp", "k": 16, "exact": True,
           "first_predicted": 2.04, "replay_predicted": 2.08, "calibrations": 5, "measured": 2.17, "min": 2.14,
           "max": 2.29, "ci": [2.14, 2.29], "miss": 0.09, "step_costs": 0.07, "trusted": True, "trust": "trusted",
           "controllers": controllers}
    return {"experiment": "replay-misses", "date": "2026-12-02", "setup": SETUP, "rounds": 5, "elapsed_s": 710.0,
            "verdict": TRUSTED, "rows": [row]}


def overhead() -> dict:
    shares = {"iterations": 100, "draft": 0.45, "verify": 0.55, "rollback": 0.0, "outside": 0.002}
    speeds = {"A headless": {"prose": _spread(43.3, 39.3, 43.9)}, "B browser": {"prose": _spread(41.0, 37.4, 41.6)},
              "C Chromium": {"prose": _spread(38.8, 34.3, 39.9)}}
    return {"experiment": "overhead-streaming", "date": "2026-12-02", "setup": SETUP, "drafter": "llama.cpp",
            "k": 4, "max_new_tokens": 64, "rounds": 5, "presets": ["prose"], "verdict": TRUSTED,
            "other_cores": 0.0, "browser_cores": 0.4, "tokens_per_s": speeds,
            "shares": {"A headless": shares, "B browser": {**shares, "outside": 0.0025}},
            "ratios": {"B / A": {"prose": _spread(0.974, 0.909, 1.016, 15), "all": _spread(0.974, 0.909, 1.016, 15)},
                       "C / A": {"prose": _spread(0.897, 0.807, 0.952, 15), "all": _spread(0.897, 0.807, 0.952, 15)}}}


def suffix_history() -> dict:
    def row(tpp, speedup):
        arms = ("k=4", "k=16")
        return {"tokens_per_pass": dict(zip(arms, tpp)), "speedup": dict(zip(arms, speedup)), "best_k": 16,
                "best_speedup": speedup[1], "interval": [speedup[1] - 0.3, speedup[1] + 0.3]}
    rows = {"suffix": row((4.0, 7.0), (2.5, 4.2)), "suffix (no cache)": row((3.5, 6.25), (2.4, 3.9)),
            "lookup": row((3.9, 8.0), (2.5, 4.7))}
    return {"experiment": "suffix-history", "date": "2026-12-06", "source": "replay.json", "header": "replay (test)",
            "command": None, "arms": ["k=4", "k=16"], "trust": {"suffix": "trusted"},
            "groups": {"json": {"label": "tool call / JSON", "turns": 52, "tokens": 3092, "rows": rows}}}


def suffix_factor() -> dict:
    def cells(tpp, best):
        return {"tokens_per_pass": {"k=4": tpp[0], "k=16": tpp[1]}, "best_k": 16, "best_speedup": best}
    rows = [{"factor": f, "trust": {"suffix": "trusted", "suffix (no cache)": "UNTRUSTWORTHY: x"},
             "drafters": {"suffix": {"json": cells((4.1, t), b), "overall": cells((3.3, t - 2), b - 1)},
                          "lookup": {"json": cells((3.9, 7.9), 5.6), "overall": cells((2.9, 4.3), 3.2)}}}
            for f, t, b in ((1.0, 7.2, 4.7), (4.0, 8.8, 6.1))]
    return {"experiment": "suffix-factor", "date": "2026-12-06", "sources": [], "header": "replay (test)",
            "arms": ["k=4", "k=16"], "commands": [], "rows": rows}


def suffix_bound() -> dict:
    arms = {"lookup": {"8": 5.0, "16": 8.0}, "suffix": {"8": 6.0, "16": 9.0},
            "better of the two (oracle)": {"8": 6.5, "16": 10.0}, "longest copy (oracle)": {"8": 7.0, "16": 12.0}}
    return {"experiment": "suffix-bound", "date": "2026-12-06", "trace": "t.jsonl", "ks": [8, 16], "turns": 3,
            "groups": {"json": {"label": "tool call / JSON", "turns": 2, "tokens_per_pass": arms},
                       "code": {"label": "code", "turns": 0, "tokens_per_pass": {}}}}


def trace_speed() -> dict:
    row = {"drafter": "suffix", "description": "suffix (suffix tree)", "k": 16, "turns": 16, "runs": 48, "median": 5.1, "min": 3.9, "max": 6.3,
           "predicted": 5.0, "costed": 5.2, "tokens_per_pass": 9.4, "c": 0.004, "plain_tokens_per_s": 36.0,
           "trust": "trusted"}
    return {"experiment": "trace-speed", "date": "2026-12-06", "sources": [], "machine": "SmolLM2, Test CPU",
            "turns": ["a turn 1", "z turn 3"], "commands": [],
            "rows": [row, {**row, "drafter": "llama.cpp", "description": "llama.cpp (gguf)", "median": 2.3, "min": 2.0, "max": 2.5, "predicted": None,
                           "c": 0.2512, "trust": "UNTRUSTWORTHY: drift"}]}


def _render(tmp_path, doc: dict) -> str:
    path = tmp_path / f"{doc['experiment']}.json"
    path.write_text(json.dumps(doc))
    return results_tables.render(path)


def _row(text: str, start: str) -> list[str]:
    """The cells of the table row whose first cell starts with `start`."""
    line = next(x for x in text.splitlines() if x.startswith(f"| {start}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_every_script_experiment_is_registered():
    for kind in ("kernels-blas-onednn", "prefill-kv", "replay-misses", "overhead-streaming", "suffix-history",
                 "suffix-factor", "suffix-bound", "trace-speed"):
        experiment = experiment_named(kind)
        assert (ROOT / "scripts" / experiment.script).is_file()
        assert callable(experiment.load("report"))


def test_kernels_table(tmp_path):
    text = _render(tmp_path, kernels())
    assert text.startswith("2026-12-02, " + SETUP) and "15 rounds" in text and "verdict: trusted" in text
    assert _row(text, "2 |") == ["2", "67.2 [63.4-84.7]", "1.53", "35.3 [32.5-43.3]", "1.24", "1.90"]


def test_prefill_table(tmp_path):
    text = _render(tmp_path, prefill())
    assert "k = 8, 64 new tokens, 5 rounds" in text
    assert not any("| plain |" in x for x in text.splitlines())  # the plain runs are the ratios' denominator
    shared = _row(text, "tool_call (330) | llama.cpp | copied")
    assert shared[3:] == ["**1.83 (1.65-1.95)**", "2.64 (2.36-3.03)", "+0.92 (0.76-1.01)", "534 ms", "6 ms"]
    beside = _row(text, "tool_call (330) | llama.cpp | prefilled beside")
    assert beside[2] == "prefilled beside, 2 threads" and beside[-1] == "1746 ms (700 not hidden)"
    assert _row(text, "tool_call (330) | llama.cpp | prefilled, in turn")[5] == "-"


def test_replay_misses_table(tmp_path):
    text = _render(tmp_path, replay())
    assert "predicted: pooled (5)" in text and "(710 s)" in text
    assert _row(text, "code (code)") == ["code (code)", "16", "2.04", "2.08", "2.17 [2.14-2.29]", "+0.09", "+0.07",
                                         "trusted"]
    assert "adaptive / heuristic 1.04-1.04" in text


def test_overhead_table(tmp_path):
    text = _render(tmp_path, overhead())
    assert "k = 4, 64 new tokens" in text and "arm C's browser 0.40" in text
    assert _row(text, "A headless") == ["A headless", "43.3 (39.3-43.9)", "45%", "55%", "0.0%", "0.2%"]
    assert _row(text, "C Chromium")[1:] == ["38.8 (34.3-39.9)", "", "", "", ""]  # no records, no time split
    assert "B / A over the 15 adjacent pairs: median 0.974 (0.909-1.016)" in text
    assert "C / A over the 15 adjacent pairs: median 0.897 (0.807-0.952)" in text


def test_suffix_history_table(tmp_path):
    text = _render(tmp_path, suffix_history())
    assert _row(text, "tool call / JSON (52) | suffix |") == [
        "tool call / JSON (52)", "suffix", "4.00 / 7.00", "2.50 / 4.20", "k=16: 4.20x"]
    assert "tokens per pass, k = 4 / 16" in text and "calibration of suffix: trusted" in text
    assert "at k=16: tool call / JSON: suffix +12%" in text  # 7.00 / 6.25, the cache of earlier responses


def test_suffix_factor_table(tmp_path):
    text = _render(tmp_path, suffix_factor())
    assert _row(text, "4 | suffix |") == ["4", "suffix", "4.10 / 8.80; 6.10x (k=16)", "3.30 / 6.80; 5.10x (k=16)"]
    assert _row(text, "1 | suffix |")[2] == "4.10 / 7.20; 4.70x (k=16)"
    assert _row(text, "- | lookup")[1:] == ["lookup (replayed beside factor 1)", "3.90 / 7.90; 5.60x (k=16)",
                                            "2.90 / 4.30; 3.20x (k=16)"]
    assert "calibrations at factor 4: suffix trusted" in text and "no cache" not in text


def test_suffix_bound_table(tmp_path):
    text = _render(tmp_path, suffix_bound())
    assert _row(text, "tool call / JSON (2)") == ["tool call / JSON (2)", "5.00 / 8.00", "6.00 / 9.00", "6.50 / 10.00",
                                                  "7.00 / 12.00", "1.25x", "1.50x"]
    assert "| code" not in text and "longest copy / lookup, k = 16" in text


def test_trace_speed_table(tmp_path):
    text = _render(tmp_path, trace_speed())
    assert text.startswith("SmolLM2, Test CPU; 2 turns, from a turn 1 to z turn 3")
    assert _row(text, "suffix") == ["suffix", "16", "5.10x (3.90-6.30)", "5.00", "5.20", "9.40", "0.004"]
    assert _row(text, "llama.cpp")[2:4] == ["2.30x (2.00-2.50)", "-"]
    assert "llama.cpp: llama.cpp (gguf); trust: UNTRUSTWORTHY: drift" in text and "trace:" not in text
    assert _render(tmp_path, {**trace_speed(), "trace_note": "2 of 2 turns"}).endswith("\ntrace: 2 of 2 turns")


@pytest.mark.parametrize("make, field", [(kernels, "sizes"), (prefill, "prompt_tokens"), (replay, "elapsed_s"),
                                         (overhead, "shares"), (suffix_history, "arms"), (suffix_factor, "rows"),
                                         (suffix_bound, "ks"), (trace_speed, "turns")])
def test_a_result_missing_a_field_fails_naming_it(tmp_path, make, field):
    doc = make()
    del doc[field]
    with pytest.raises(SystemExit, match=rf"lacks what scripts/\w+\.py's table needs .*'{field}'"):
        _render(tmp_path, doc)


def _names_scripts_import() -> list[tuple[str, str, str]]:
    """(script, module, name) for every `from playground... import name` in scripts/, at any depth of the file."""
    out = []
    for path in sorted((ROOT / "scripts").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "playground":
                out.extend((path.name, node.module, a.name) for a in node.names)
    return out


def _exists(module: str, name: str) -> bool:
    """Whether `from module import name` works: a name in the module, or a submodule of a package."""
    if hasattr(importlib.import_module(module), name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True


def _missing(imports: list[tuple[str, str, str]]) -> list[str]:
    return [f"{script}: from {module} import {name}" for script, module, name in imports if not _exists(module, name)]


def test_every_name_a_script_imports_from_the_package_exists():
    # Scripts run by hand, and no test runs most of them: a name the package dropped (the registry's `get`) broke
    # scripts/replay_feeding.py at import with nobody seeing it.
    imports = _names_scripts_import()
    assert len({script for script, _, _ in imports}) > 15  # the scan reads the scripts
    assert not _missing(imports)
    # power: the import that broke replay_feeding.py is reported, a submodule imported by name is not
    broken = [("replay_feeding.py", "playground.drafters.registry", "get"), ("x.py", "playground", "tables")]
    assert _missing(broken) == ["replay_feeding.py: from playground.drafters.registry import get"]
