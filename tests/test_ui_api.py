"""The playground through its API: the app launched in-process on a loopback port, driven by
gradio_client, streaming a short run on the embedded pair."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

PROMPT = "Name three colours of the rainbow."
CONTROLS = {"preset": "", "chat": True, "drafter": "draft", "k": 4, "decoding": "greedy", "temperature": 1.0,
            "top_k": 0, "top_p": 1.0, "seed": 0}
RUN_OUTPUTS = ["status", "tokens", "counters", "time_plot", "pos_plot", "alpha_plot", "check", "prediction",
               "run_json", "download"]


@pytest.fixture(scope="module")
def client(launch_app):
    from gradio_client import Client

    from playground.ui import build_ui

    return Client(launch_app(build_ui(calibrate_repeats=3)), verbose=False)


def test_the_api_lists_every_event(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert {"/run", "/compare", "/calibrate", "/sweep", "/load_preset", "/whatif", "/time_batches"} <= names


def test_run_streams_and_returns_the_records_and_summary(client):
    job = client.submit(prompt=PROMPT, max_new_tokens=16, api_name="/run", **CONTROLS)
    streamed = list(job)  # one item per update the run yielded
    final = dict(zip(RUN_OUTPUTS, job.result()))
    assert len(streamed) >= 3
    assert final["status"].startswith("Done:"), final["status"]
    doc = final["run_json"]
    records = doc["records"]
    assert records[0]["type"] == "Prefill" and records[0]["prompt_tokens"] == len(doc["config"]["prompt_ids"])
    iterations = [r for r in records if r["type"] == "Iteration"]
    summary = doc["summary"]
    new_tokens = sum(len(r["emitted"]) for r in iterations)
    assert summary["mode"] == "speculative" and summary["new_tokens"] == new_tokens
    assert new_tokens == 16 or summary["finished"] == "eos"
    assert summary["target_passes"] == len(iterations) and 0 <= summary["alpha"] <= 1
    assert all(r["p"] is not None and len(r["p"]) == len(r["proposed"]) for r in iterations if r["proposed"])
    assert doc["config"]["k"] == 4 and doc["environment"]["pair"]["draft"].startswith("int8")
    assert final["tokens"].count('class="tok ') == new_tokens
    assert 'data-counter="alpha"' in final["counters"]
    assert final["download"] and final["download"].endswith(".json")

    cmp = client.predict(api_name="/compare")
    status, prediction, doc2, _ = cmp
    assert status.startswith("Compared:"), status
    assert doc2["plain_summary"]["mode"] == "plain" and doc2["measured_speedup"] > 0
    assert "adjacent" in status and "n = 1 pair" in prediction

    status, prediction = client.predict(prompt=PROMPT, max_new_tokens=16, api_name="/calibrate", **CONTROLS)
    assert status.startswith("Calibrated"), status
    assert "predicted, iid" in prediction


def test_bad_input_returns_a_clear_error_and_the_app_keeps_serving(client):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="the prompt is empty"):
        client.predict(prompt="   ", max_new_tokens=8, api_name="/run", **CONTROLS)
    with pytest.raises(AppError, match="no finished speculative run|prompt is empty"):
        # a fresh session has no run to compare with
        from gradio_client import Client

        Client(client.src, verbose=False).predict(api_name="/compare")
    with pytest.raises(AppError, match="less than minimum"):
        client.predict(prompt=PROMPT, max_new_tokens=8, api_name="/run", **{**CONTROLS, "k": 0})
    # still serving
    prompt, max_new, chat, info = client.predict(preset="tool_call", prompt="", api_name="/load_preset")
    assert "<|im_start|>" in prompt and max_new > 0 and chat is False and "tool_call" in info


def test_sweep_through_the_api_uses_the_lab_and_recommends_a_k(client):
    status, _figure, table, summary, result = client.predict(
        prompt=PROMPT, preset="", chat=True, drafter="draft", decoding="greedy", temperature=1.0, top_k=0, top_p=1.0,
        seed=0, k_max=2, rounds=1, max_new_tokens=6, api_name="/sweep")
    assert status.startswith("Sweep done"), status
    # k = 1..k_max, then the adaptive controller in the same rounds
    assert [row["k"] for row in result["table"]] == [1, 2, "adaptive"] and result["best_k"] in (1, 2)
    fixed = [row for row in result["table"] if isinstance(row["k"], int)]
    assert all(row["predicted_iid"] > 0 for row in fixed)  # the sweep's own calibration fed the model
    # one round has no spread: the verdict fails, so the best measured k is no recommendation (lab.trust)
    assert result["trust"]["trusted"] is False and result["recommended_k"] is None and result["withheld"]
    assert "1 round" in result["withheld"] and "no recommended k" in status
    assert "No recommended k" in summary and "Recommended k =" not in summary and "prefill excluded" in summary
    assert "Adaptive k (chosen per iteration:" in summary
    # and what its decisions were worth with the host's noise taken out (lab.schedules)
    costed = result["schedules"][0]
    assert f"{costed['adaptive_of_best']:.0%} of the best fixed k costed the same way" in summary
    assert [str(r[0]) for r in table["data"]] == ["1", "2", "adaptive"]


def test_whatif_through_the_api_is_the_cost_models_and_refuses_bad_numbers(client):
    from gradio_client.exceptions import AppError

    from playground.lab.whatif import whatif

    doc = client.predict(c=0.38, alpha=0.85, api_name="/whatif")  # no model runs
    assert round(doc["rows"][3]["speedup"], 2) == 1.47  # the seed's figure, through the what-if path
    assert [r["speedup"] for r in doc["rows"]] == [r.speedup for r in whatif(0.38, alpha=0.85).rows]
    per_position = client.predict(c=0.3, positions="0.95, 0.9, 0.8", v="1:1.0,4:1.6", overhead=0.05,
                                  api_name="/whatif")
    assert per_position["alpha"] is None and per_position["positions"] == [0.95, 0.9, 0.8]
    with pytest.raises(AppError, match=r"acceptance is a probability in \[0, 1\]"):
        client.predict(c=0.38, alpha=1.5, api_name="/whatif")
    with pytest.raises(AppError, match="n:cost"):
        client.predict(c=0.38, alpha=0.8, v="1-1.0", api_name="/whatif")
