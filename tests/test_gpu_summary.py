"""The GPU check's one screen (playground.lab.gpu_summary) from hand-made files: each target met where the figures
meet it, NOT MET where they miss, "not measured" where a file is missing or was timed on a CPU; nothing invented."""

from __future__ import annotations

import json

from playground.lab.gpu_summary import NOT, main, read_inputs, summary_text, targets

GRAPH_CASES = ("test_a_replayed_graph_equals_the_eager_arithmetic[all]",
               "test_greedy_through_graphs_equals_plain_through_graphs[1]",
               "test_greedy_through_graphs_equals_plain_through_graphs[4]",
               "test_graphs_and_transformers_agree_on_the_greedy_output")


def forwards_doc(step_ms: float, floor_ms: float, c: float, v5: float, device: str = "cuda:0") -> dict:
    """A saved `timing --random-weights` result with only what the file must hold, by hand."""
    step = step_ms / 1e3
    v = {"1": 1.0, "2": 1.01, "5": v5, "17": v5 + 0.4}
    arm = {"target_step_s": step, "target_pass_s": {n: x * step for n, x in v.items()}, "v": v,
           "target_step_round_medians_s": [step], "raw": [], "draft_step_s": c * step, "c": c,
           "predicted": {"0.6": {"1": 1.1, "2": 1.2}, "0.8": {"1": 1.4, "3": 1.9}, "0.9": {"4": 2.5}}}
    return {"experiment": "forwards", "format": 2, "context_tokens": 256, "n_max": 17, "rounds": 3, "repeats": 3,
            "alphas": [0.6, 0.8, 0.9], "arms": {"eager": {**arm, "target_step_s": 3 * step}, "graphed": arm},
            "floor": {"bytes": 16_000_000_000, "copy_bandwidth_Bps": 3e12, "step_s": floor_ms / 1e3},
            "seconds": 40.0, "acceptance": "not measured", "device": device, "dtype": "bfloat16",
            "gpu_driver": "580.159.04", "step_kernels": {"unit": "CUDA kernels", "target": 812, "draft": 411}}


def junit(failed: tuple[str, ...] = ()) -> str:
    failure = '<failure message="x"/>'
    cases = "".join(f'<testcase classname="tests.test_cuda_graphs" name="{n}">{failure if n in failed else ""}'
                    "</testcase>" for n in GRAPH_CASES)
    other = '<testcase classname="tests.test_cuda" name="test_greedy_speculative_equals_plain_on_the_gpu[1]"/>'
    return f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{cases}{other}</testsuite></testsuites>'


def write(folder, forwards: dict[str, dict], tests: str | None, preflight: dict | None = None):
    for key, doc in forwards.items():
        (folder / f"forwards_{key}.json").write_text(json.dumps(doc))
    if tests is not None:
        (folder / "tests.xml").write_text(tests)
    if preflight is not None:
        (folder / "preflight.json").write_text(json.dumps(preflight))
    return read_inputs(folder)


PREFLIGHT = {"passed": True, "failed": None, "card": "NVIDIA H100 80GB HBM3", "driver": "580.159.04",
             "torch": "2.11.0+cu130", "transformers": "5.25.0",
             "sdpa": {"target": {"kernel": "_scaled_dot_product_cudnn_attention"},
                      "draft": {"kernel": "_scaled_dot_product_cudnn_attention"}}}


def test_every_target_met_is_marked_met_with_its_figure(tmp_path):
    found = write(tmp_path, {"8b": forwards_doc(7.0, 5.3, c=0.15, v5=1.05),
                             "7b": forwards_doc(6.5, 5.0, c=0.18, v5=1.08),
                             "3b": forwards_doc(3.0, 2.1, c=0.40, v5=1.10)}, junit(), PREFLIGHT)
    marks = {name: (mark, figure) for name, mark, figure in targets(found)}
    assert marks == {
        "8B target step within 1.5x of its weight-streaming floor": ("met", "1.32x"),
        "c <= 0.2 for 8B/1B": ("met", "0.150"),
        "c <= 0.45 for 3B/1B": ("met", "0.400"),
        "v(5) <= 1.15": ("met", "8B/1B 1.050, 7B/0.5B 1.080, 3B/1B 1.100"),
        "greedy equal to plain through the graphs": ("met", "3 of 3 greedy graph tests passed"),
    }
    text = summary_text(found)
    assert "card: NVIDIA H100 80GB HBM3; driver: 580.159.04; torch 2.11.0+cu130; transformers 5.25.0" in text
    assert "target _scaled_dot_product_cudnn_attention" in text
    assert "| 8B/1B | graphed, bfloat16 on cuda:0 | 7.00 ms | 1.32x | 1.000 | 1.050 | 1.450 | 0.150 | 1.90x at k = 3 " \
           "| 812 / 411 |" in text
    assert "4 passed, 0 failed, 0 skipped" in text and NOT not in text.split("\n", 1)[1]  # the first line: acceptance


def test_a_missed_target_reads_not_met_and_a_missing_input_not_measured(tmp_path, capsys):
    found = write(tmp_path, {"8b": forwards_doc(9.0, 5.3, c=0.31, v5=1.22),
                             "3b": forwards_doc(3.0, 2.1, c=0.40, v5=1.10, device="cpu")},
                  junit(failed=(GRAPH_CASES[2],)))
    marks = {name: (mark, figure) for name, mark, figure in targets(found)}
    assert marks["8B target step within 1.5x of its weight-streaming floor"] == ("NOT MET", "1.70x")
    assert marks["c <= 0.2 for 8B/1B"] == ("NOT MET", "0.310")
    assert marks["c <= 0.45 for 3B/1B"] == (NOT, NOT)  # timed on a CPU: not the GPU's figure
    assert marks["v(5) <= 1.15"] == ("NOT MET", "8B/1B 1.220")
    assert marks["greedy equal to plain through the graphs"] == ("NOT MET", "2 of 3 greedy graph tests passed")
    assert main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "card: not measured; driver: 580.159.04" in text  # no preflight file: the driver from the timing's
    assert f"| 7B/0.5B | {NOT} |" in text and f"failed: {GRAPH_CASES[2]}" in text


def test_an_empty_folder_invents_nothing_and_no_folder_is_one_line(tmp_path, capsys):
    assert all(mark == NOT and figure == NOT for _, mark, figure in targets(read_inputs(tmp_path)))
    assert main([str(tmp_path / "absent")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
