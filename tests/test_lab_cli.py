"""The lab commands end to end on a tiny local pair (tokenizer + models saved to a temp dir)."""

import dataclasses
import json

import pytest

from playground import lab
from playground.cli import main
from playground.cli.lab import Job
from playground.lab.report import divergence_table, experiment_text, speed_caption, speed_markdown, timing_table
from playground.results import from_document, load_result
from playground.results.calibration import TimingResult
from playground.results.quality import DivergenceCase, DivergenceResult
from playground.results.trust import Finding
from tests.test_models import save
from tests.tiny import tiny_pair


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pair")
    return str(save(tmp, "target", 0)), str(save(tmp, "draft", 1))


def run(dirs, tmp_path, *argv):
    out = tmp_path / "result.json"
    code = main([*argv, "--target", dirs[0], "--draft", dirs[1], "--device", "cpu",
                 "--prompt", "w1 w2 w3 w4 w1 w2 w3", "--out", str(out)])
    assert code == 0
    return json.loads(out.read_text())


def test_timing_command(dirs, tmp_path, capsys):
    res = run(dirs, tmp_path, "timing", "--ks", "1,2")
    assert res["experiment"] == "timing" and set(res["v"]) == {"1", "2", "3"} and res["c"] >= 0
    live = capsys.readouterr().out
    assert "memory" in res and "torch threads" in live
    back = load_result(tmp_path / "result.json")  # the saved file is the typed result, and prints the same table
    setup = live.split("timing (")[1].split("; context")[0]
    assert isinstance(back, TimingResult) and back.drafter and timing_table(back, setup) in live


@pytest.mark.parametrize("cmd", ["speed", "sweep"])
def test_speed_and_sweep_commands(dirs, tmp_path, capsys, cmd):
    ks = "1,2,heuristic" if cmd == "speed" else "1,2"
    res = run(dirs, tmp_path, cmd, "--ks", ks, "--rounds", "2", "--max-new-tokens", "6")
    # speed runs the k given; sweep adds the adaptive controller as one more arm
    assert [row["k"] for row in res["table"]] == ([1, 2, "heuristic"] if cmd == "speed" else [1, 2, "adaptive"])
    assert all(row["predicted_iid"] > 0 for row in res["table"] if isinstance(row["k"], int))
    out = capsys.readouterr().out
    assert "best k measured" in out and "rotating order" in out and "k chosen:" in out
    if cmd == "speed":
        assert "per prompt: measured (predicted from the calibration / from the loop's costs)" in out


@pytest.mark.parametrize("spread", [True, False])
def test_speed_pools_a_calibration_made_between_rounds_unless_told_not_to(dirs, tmp_path, spread):
    flag = () if spread else ("--no-spread-calibration",)
    res = run(dirs, tmp_path, "speed", "--ks", "1,adaptive", "--rounds", "3", "--max-new-tokens", "4", *flag)
    (timing,) = res["timing_by_prompt"].values()
    # one calibration before the rounds, one after each round but the last: their samples pooled
    assert timing["raw"].get("pooled", 1) == (3 if spread else 1)
    assert len(timing["raw"]["plain_step_s"]) == (8 + 2 * 4 if spread else 8)
    assert res["memory"] == "conversation"  # the default scope of the schedules' memory


def test_speed_takes_the_scope_of_the_schedules_memory(dirs, tmp_path):
    res = run(dirs, tmp_path, "speed", "--ks", "1,adaptive", "--rounds", "2", "--max-new-tokens", "4", "--memory", "none")
    assert res["memory"] == "none"
    assert "schedules' memory: none" in experiment_text(from_document(res), "cpu")
    with pytest.raises(SystemExit) as refused:  # argparse names the choices
        main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--memory", "tab"])
    assert refused.value.code == 2


def test_report_rereads_a_saved_result_as_markdown(dirs, tmp_path, capsys):
    res = run(dirs, tmp_path, "speed", "--ks", "1,3,adaptive", "--rounds", "2", "--max-new-tokens", "6")
    assert res["command"].startswith("python -m playground speed --ks 1,3,adaptive") and res["drafter"]
    live = capsys.readouterr().out
    assert main(["report", str(tmp_path / "result.json")]) == 0
    out = capsys.readouterr().out
    # the command's per-prompt table is the report's: one function prints both
    per_prompt = live.split("per prompt: measured (predicted from the calibration / from the loop's costs)")[1]
    per_prompt = per_prompt.strip().split("\n\n")[0]
    assert per_prompt.startswith("| preset |") and per_prompt in out
    row = next(r for r in res["by_prompt"] if r["k"] == 3)
    # the table carries the file's own figures: measured (the calibration's prediction / the loop costs')
    assert f"{row['median_ratio']:.2f} ({row['predicted_empirical']:.2f} / {row['predicted_local']:.2f})" in out
    assert "| preset | k=1 | k=3 | best fixed k | adaptive |" in out and "within 0.05" in out
    # a result saved before the loop-cost prediction existed keeps the calibration's alone, and says so
    drop = lambda rows: [{key: v for key, v in r.items() if key != "predicted_local"} for r in rows]
    older = from_document({**res, "by_prompt": drop(res["by_prompt"]), "table": drop(res["table"])})
    assert speed_caption(older) == "per prompt: measured (empirical prediction)"
    assert f"{row['median_ratio']:.2f} ({row['predicted_empirical']:.2f}) |" in speed_markdown(older)
    # the prediction's score over the fixed-k cells, counted from the file's own misses, live and re-read alike
    misses = [r["miss_empirical"] for r in res["by_prompt"] if isinstance(r["k"], int)]
    score = f"prediction: within 0.05 of the measured median in {sum(abs(m) <= 0.05 for m in misses)} of {len(misses)}"
    assert score in out and score in live
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["report", str(bad)]) == 2
    assert "is not a JSON result file" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "no result file" in capsys.readouterr().err


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_acceptance_divergence_and_distribution_commands(dirs, tmp_path, capsys):
    def run_and_report(*argv):
        res = run(dirs, tmp_path, *argv)
        live = capsys.readouterr().out
        assert main(["report", str(tmp_path / "result.json")]) == 0
        # `report FILE` prints the tables the command printed when it finished
        assert table_lines(capsys.readouterr().out) == table_lines(live)
        return res, live

    res, live = run_and_report("acceptance", "--ks", "1,3", "--max-new-tokens", "8")
    assert res["rows"] and "| kind | k | alpha | tok/pass | iid | empir. | per position |" in live
    res, live = run_and_report("divergence", "--ks", "2", "--max-new-tokens", "8")
    assert res["runs"] == 1 and f"{res['diverged']} of 1 greedy runs differ from plain" in live
    res, live = run_and_report("distribution", "--draws", "200")
    assert {r["rule"] for r in res["results"]} == {"exact", "resample-target (wrong)", "keep-draft (wrong)"}
    # the p-value table, then the contexts table (200 draws are too few for power: it says so)
    assert len(table_lines(live)) == 2 + len(res["results"]) + 2 + len(res["contexts"])
    assert "| prompt | seed | rule | p | TV(p, q) |" in live and "| prompt | tokens in | TV(p, q) | power |" in live


def test_a_divergence_case_is_one_table_row_even_with_a_pipe_in_the_token():
    case = DivergenceCase(prompt="p", k=3, position=5, plain_token=7, spec_token=8, plain_text="a|b", spec_text=" c",
                          verdict="near-tie", gaps={"prefill+1": 1e-6, "full prefill": -2e-6}, winners={},
                          top_logit=3.0, dtype_spacing=1.9e-6, recompute_disagreement=0.0)
    text = divergence_table(DivergenceResult(runs=2, diverged=1, cases=[case]), "cpu")
    assert text.startswith("divergence (cpu): 1 of 2 greedy runs differ from plain")
    head, _, row = table_lines(text)
    assert row == "| p | 3 | 5 | 'a\\|b' | ' c' | prefill+1 +1.00e-06, full prefill -2.00e-06 | 1.9e-06 | near-tie |"
    assert row.replace("\\|", "").count("|") == head.count("|")


def test_bench_peers_runs_transformers_and_ours_side_by_side(target64, drafts64):
    pair = tiny_pair(target64, drafts64["useful"])
    res = lab.peers(pair, {"a": [1, 2, 3]}, k=3, rounds=2, max_new_tokens=10)
    arms = {row.arm for row in res.table}
    assert {"hf plain", "hf assisted k=3", "hf assisted k=3 conf 0.4", "hf assisted heuristic", "ours plain",
            "ours draft k=3", "ours draft k=3 conf 0.4"} <= arms
    # greedy everywhere: every arm reproduces transformers' own plain greedy output (float64 tiny models)
    assert all(row.outputs_equal == row.n for row in res.table)
    for h2h in (res.ours_vs_hf_assisted, res.ours_vs_hf_assisted_conf):
        assert h2h.n == 2 and h2h.min <= h2h.median <= h2h.max
    # what `bench-peers` prints: one row per arm, then ours against transformers' assisted generation
    text = experiment_text(res, "cpu")
    assert text.startswith("bench-peers (cpu; greedy; end to end incl. prefill")
    assert len(table_lines(text)) == 2 + len(res.table) and "| hf plain | 1.00x | 1.00-1.00 |" in text
    assert "same draft, k = 3, drafting all k, per round and prompt: median" in text
    # with a trust verdict, as speed's figures have: two rounds warn (timings of tiny models may add more), and
    # the machine's load is named
    assert Finding("rounds", "warn", "only 2 rounds", "run 3 or more rounds") in res.trust.findings
    assert f"\ntrust: {res.trust.headline()}" in text and "\nmachine: other processes kept" in text


def test_bench_peers_shows_what_copying_the_targets_kv_is_worth(target64):
    """With a draft that copies the target (the int8 draft's case), ours copies the prompt's KV and an extra arm
    prefills it as transformers' assistant does; both reproduce plain greedy."""
    pair = dataclasses.replace(tiny_pair(target64, target64), draft_copies_target=True)
    res = lab.peers(pair, {"a": [1, 2, 3]}, k=3, rounds=1, max_new_tokens=8)
    assert "ours draft k=3 own prefill" in {row.arm for row in res.table}
    assert all(row.outputs_equal == row.n for row in res.table)
    assert res.ours_vs_hf_assisted_own_prefill.n == 1
    assert not res.trust.trusted and "1 round: a single run has no spread" in res.trust.headline()
    assert "our draft prefilling the prompt itself" in experiment_text(res, "cpu")
    # the tiny Llama draft runs on the lean forward; an arm on transformers' own forward shows what that is worth
    assert res.ours_vs_hf_assisted_conf_transformers_forward.n == 1
    assert "our draft on transformers' forward" in experiment_text(res, "cpu")


def test_bad_lab_arguments(dirs, capsys):
    assert main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--ks", "0,3"]) == 2
    assert "integers from 1 to 16, or adaptive / heuristic), got '0,3'" in capsys.readouterr().err
    assert main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--rounds", "0"]) == 2
    assert "--rounds must be >= 1" in capsys.readouterr().err
    assert main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1",
                 "--plain-every", "0"]) == 2
    assert "--plain-every must be >= 1" in capsys.readouterr().err
    # the parser spells out lab.speed.request.PLAIN_EVERY (it imports nothing that loads torch): the two agree
    from playground.cli.entry import build_parser
    from playground.lab.speed import PLAIN_EVERY
    assert build_parser().parse_args(["sweep"]).plain_every == PLAIN_EVERY
    assert main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--ks", "a,b"]) == 2
    assert "comma-separated k values" in capsys.readouterr().err
    assert main(["speed", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--ks",
                 "adaptive"]) == 2
    assert "at least one fixed k" in capsys.readouterr().err
    assert main(["acceptance", "--target", dirs[0], "--draft", "none", "--drafter", "lookup", "--prompt", "w1", "--ks",
                 "2,adaptive"]) == 2
    assert "fixed k values only" in capsys.readouterr().err


def test_speed_and_acceptance_sample_when_asked(dirs, tmp_path, capsys):
    res = run(dirs, tmp_path, "speed", "--ks", "2", "--rounds", "2", "--max-new-tokens", "6", "--sample",
              "--temperature", "0.7", "--top-p", "0.9", "--seed", "3")
    assert res["sampling"] == "sample T=0.7 top-p=0.9 seed=3"
    assert "sample T=0.7 top-p=0.9 seed=3" in capsys.readouterr().out  # the table's header names the decoding
    acc = run(dirs, tmp_path, "acceptance", "--ks", "2", "--max-new-tokens", "6", "--sample", "--top-k", "5")
    assert "top-k=5" in acc["sampling"]
    assert main(["speed", "--sample", "--temperature", "0", "--target", dirs[0], "--draft", dirs[1],
                 "--device", "cpu", "--prompt", "w1 w2"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_timing_at_several_batch_sizes(dirs, tmp_path, capsys):
    res = run(dirs, tmp_path, "timing", "--ks", "1,2", "--batch", "1,4")
    rows = res["batch"]["rows"]
    assert [r["batch"] for r in rows] == [1, 4] and all(set(r["v"]) == {"1", "2", "3"} for r in rows)
    assert all(r["v"]["1"] == 1.0 and 0 <= r["free_up_to_k"] <= 2 for r in rows)
    assert set(res["batch"]["predictions"]["by_batch"]) == {"1", "4"}
    out = capsys.readouterr().out
    assert "| B | step, ms |" in out and "The loop runs batch 1" in out and "trust:" in out
    assert main(["timing", "--batch", "0,2", "--target", dirs[0], "--draft", dirs[1], "--device", "cpu",
                 "--prompt", "w1 w2"]) == 2
    assert "batch sizes" in capsys.readouterr().err


def test_report_reads_a_saved_vllm_sweep_as_vllm_report_does(tmp_path, capsys):
    plan = {"external": None, "model": "m", "presets": [], "ks": [2], "concurrencies": [1], "methods": ["ngram"],
            "rounds": 1, "max_new_tokens": None, "prompt_lookup": [1, 3], "draft": "m", "enforce_eager": True}
    environment = {"playground": "0", "vllm": None, "cpu": "test CPU", "cpu_count": 2, "loadavg_at_start": None,
                   "loadavg_at_end": None}
    doc = {"experiment": "vllm-sweep", "started": "", "cells": [], "servers": [], "plan": plan,
           "environment": environment}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    assert main(["vllm-report", str(path)]) == 0
    direct = capsys.readouterr().out
    assert main(["report", str(path)]) == 0
    assert capsys.readouterr().out.strip() == direct.strip() and "# vLLM sweep" in direct


def test_transformers_assisted_arms_draft_the_k_they_are_given(target64):
    """transformers reads the drafting settings from the assistant's own generation_config; lab.peers sets them
    there for each call (and puts them back), so its "assisted k = 3" verifies 3 proposals a pass."""
    import copy

    import torch

    from playground.lab.peers import _assistant_settings

    draft = copy.deepcopy(target64)  # accepts everything: every pass verifies as many proposals as were drafted
    before = (draft.generation_config.num_assistant_tokens, draft.generation_config.assistant_confidence_threshold)
    lengths = []
    hook = target64.register_forward_pre_hook(lambda m, a, kw: lengths.append(kw["input_ids"].shape[1]),
                                              with_kwargs=True)
    try:
        x = torch.tensor([[1, 2, 3]])
        with torch.inference_mode(), _assistant_settings(draft, {"num_assistant_tokens": 3,
                                                                 "num_assistant_tokens_schedule": "constant",
                                                                 "assistant_confidence_threshold": 1e-9}):
            target64.generate(x, attention_mask=torch.ones_like(x), assistant_model=draft, do_sample=False,
                              max_new_tokens=16, min_new_tokens=16, pad_token_id=0)
    finally:
        hook.remove()
    assert lengths[0] == 3 + 3  # the prompt and the first 3 proposals in one pass
    assert max(lengths[1:]) == 4 and len(lengths) >= 4  # then the last token and 3 proposals, never more
    assert (draft.generation_config.num_assistant_tokens, draft.generation_config.assistant_confidence_threshold) == before
    with _assistant_settings(draft, {"playground_probe": 1}):  # a setting the config did not have ...
        assert draft.generation_config.playground_probe == 1
    assert not hasattr(draft.generation_config, "playground_probe")  # ... is gone again, not left as None


def test_a_lab_job_gives_speed_each_prompts_own_length_and_the_others_the_longest():
    job = Job(args=None, pair=None, ks=(1,), prompts={"sql": ("sql", [1], 16), "prose": ("prose", [2], 96)},
              progress=None, memory={})
    assert job.lengths == {"sql": 16, "prose": 96} and job.max_new == 96


def _results_tables():
    import importlib.util  # the script is not a package module: load it by path, as tests/test_results_doc.py does
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("results_tables", Path(__file__).parents[1] / "scripts" / "results_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_slim_rounding_keeps_a_ratio_near_a_printed_boundary():
    """A calibration measured in CI (c = 2.40349541, 3 decimals printed): rounding its two steps to 6 significant
    digits moved c to 2.4035020 and the printed 2.403 to 2.404, so --slim refused a result whose table it keeps."""
    rounded = _results_tables()._rounded({"draft_step_s": 0.0016598154746389538,
                                          "target_step_s": 0.0006905839998125884})
    assert f"{rounded['draft_step_s'] / rounded['target_step_s']:.3f}" == f"{0.0016598154746389538 / 0.0006905839998125884:.3f}" == "2.403"


def test_a_slimmed_result_draws_the_same_table_and_one_that_would_not_is_refused(dirs, tmp_path, monkeypatch):
    run(dirs, tmp_path, "speed", "--ks", "1,2,adaptive", "--rounds", "2", "--max-new-tokens", "6")
    tables = _results_tables()
    full, slim = tmp_path / "result.json", tmp_path / "slim.json"
    assert main(["report", str(full)]) == 0
    tables.main(["--slim", str(full), str(slim)])
    doc = json.loads(slim.read_text())
    assert all(set(r) <= set(tables.RUN_KEYS) for r in doc["runs"]) and "raw" not in doc["timing"]
    assert slim.stat().st_size < full.stat().st_size / 2
    assert tables.render(slim) == tables.render(full)
    brief = tables.render(slim)  # the docs' form: one row per k over the prompts, not the per-prompt tables
    assert "| adaptive | " in brief and "1 prompt;" not in brief and "; 2 rounds, 1 prompt" in brief
    assert "why each prediction missed" not in brief and "why each prediction missed" in lab.report.report(full)
    # a table that read what was dropped: the slim file is refused and not left behind
    monkeypatch.setattr(tables, "render", lambda p: str(sum(len(r.get("iterations", ())) for r in
                                                                json.loads(p.read_text())["runs"])))
    with pytest.raises(SystemExit, match="needs what --slim drops"):
        tables.slim(full, tmp_path / "refused.json")
    assert not (tmp_path / "refused.json").exists()
