"""The app under load, stopped and abandoned: launched in this process on a loopback port with a tiny model pair
whose forward passes are slowed (a sleep per pass, so runs last long enough to overlap and to be stopped), driven
by gradio_client and by raw HTTP.

- 8 concurrent clients, each a short run, against a queue of QUEUE_SIZE waiting events: every client either gets
  its run or Gradio's "Queue is full" answer; nothing crashes; the server still answers; no worker thread is left;
  the process's memory returns to its baseline (within MEMORY_TOLERANCE: the clients, their threads and the
  sessions' state live in this same process). Prints served / rejected / p50 / p95 latency.
- job.cancel() (what Stop does for an API client) and a closed tab (the page's event stream dropped mid-run)
  stop the run at its next iteration, free the device lock, and the next run starts cleanly.
- The bad-input table's rows through the API: a clear error message, and the app keeps serving.
"""

from __future__ import annotations

import gc
import inspect
import json
import statistics
import threading
import time
import uuid

import psutil
import pytest
import torch

from playground.limits import Limits
from playground.pairs.models import ModelPair
from playground.ui import serving
from tests.tiny import perturbed, tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]
PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"
CONTROLS = {"preset": "", "chat": True, "drafter": "draft", "k": 3, "decoding": "greedy", "temperature": 1.0,
            "top_k": 0, "top_p": 1.0, "seed": 0}
CLIENTS = 8
QUEUE_SIZE = 3
SHORT_RUN = 16  # new tokens per client's run
PASS_S = {"sleep": 0.004}  # seconds added to every forward pass (raised while a run is to be stopped)
MEMORY_TOLERANCE = 64 * 2**20


@pytest.fixture(scope="module")
def slow_pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    draft = perturbed(target, noise=0.015)
    # on the embedding, which every forward runs (transformers', the static and the lean one)
    hooks = [m.model.embed_tokens.register_forward_pre_hook(lambda *_: time.sleep(PASS_S["sleep"]))
             for m in (target, draft)]
    yield ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=draft, eos_ids=frozenset({63}),
                    target_name="tiny-target", draft_name="tiny-draft")
    for h in hooks:
        h.remove()


@pytest.fixture(scope="module")
def app(launch_app, slow_pair):
    from playground.ui import build_ui

    demo = build_ui(serving.PairProvider(pair=slow_pair), limits=Limits(queue_size=QUEUE_SIZE))
    return launch_app(demo), demo


@pytest.fixture(scope="module")
def client(app):
    from gradio_client import Client

    c = Client(app[0], verbose=False)
    yield c
    c.close()


def run_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("playground-")]


def wait_for_workers(timeout: float) -> float:
    """Seconds until no engine worker thread is left (raises if one outlives `timeout`)."""
    t0 = time.monotonic()
    for t in run_workers():
        t.join(max(0.0, timeout - (time.monotonic() - t0)))
    assert not run_workers(), [t.name for t in run_workers()]
    return time.monotonic() - t0


def device_lock_is_free() -> bool:
    lock = serving.device_lock("cpu")
    if lock.acquire(timeout=5):
        lock.release()
        return True
    return False


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def short_run(client, n=SHORT_RUN, **changes):
    return client.predict(prompt=PROMPT, max_new_tokens=n, api_name="/run", **{**CONTROLS, **changes})


def test_eight_concurrent_clients_are_served_or_told_the_queue_is_full(app):
    from gradio_client import Client
    from gradio_client.utils import QueueError

    clients = [Client(app[0], verbose=False) for _ in range(CLIENTS)]
    try:
        assert short_run(clients[0])[0].startswith(f"Done: {SHORT_RUN} new tokens")  # warm-up, then the baseline
        baseline = rss()
        barrier = threading.Barrier(CLIENTS)
        results: list = [None] * CLIENTS

        def one(i):
            barrier.wait()
            t0 = time.perf_counter()
            try:
                status = short_run(clients[i])[0]
                results[i] = ("served", time.perf_counter() - t0, status)
            except QueueError as e:
                results[i] = ("rejected", time.perf_counter() - t0, str(e))
            except Exception as e:  # noqa: BLE001 - anything else is a failure of the test, reported below
                results[i] = ("failed", time.perf_counter() - t0, repr(e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(CLIENTS)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        wall = time.perf_counter() - t0
        served = [r for r in results if r and r[0] == "served"]
        rejected = [r for r in results if r and r[0] == "rejected"]
        latencies = sorted(r[1] for r in served)
        p50 = statistics.median(latencies)
        p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]
        print(f"\nload: {CLIENTS} concurrent clients, queue size {QUEUE_SIZE}, {SHORT_RUN} new tokens each: "
              f"served {len(served)}, rejected {len(rejected)} (queue full), p50 {p50:.2f} s, p95 {p95:.2f} s, "
              f"all done in {wall:.2f} s")
        assert len(served) + len(rejected) == CLIENTS, results
        assert served and all(r[2].startswith(f"Done: {SHORT_RUN} new tokens") for r in served), served
        assert all("Queue is full" in r[2] for r in rejected), rejected
        assert len(served) >= QUEUE_SIZE  # the waiting room was used before anyone was turned away

        # still serving, cleanly: no worker left behind, the device free, memory back near its baseline
        assert wait_for_workers(10) < 10 and device_lock_is_free()
        assert short_run(clients[-1], n=4)[0].startswith("Done: 4 new tokens")
        grown = rss() - baseline
        print(f"load: memory {grown / 2**20:+.1f} MiB against the baseline after the warm-up run "
              f"(tolerance {MEMORY_TOLERANCE / 2**20:.0f} MiB)")
        assert grown < MEMORY_TOLERANCE
    finally:  # each close waits up to 1 s for its heartbeat thread: close them side by side
        closers = [threading.Thread(target=c.close) for c in clients]
        for t in closers:
            t.start()
        for t in closers:
            t.join()


@pytest.fixture
def slower():
    PASS_S["sleep"] = 0.03  # a 200-token run now lasts several seconds: long enough to stop it mid-way
    yield
    PASS_S["sleep"] = 0.004


def test_cancel_through_the_api_stops_the_run_at_its_next_iteration(client, slower):
    job = client.submit(prompt=PROMPT, max_new_tokens=200, api_name="/run", **CONTROLS)
    for out in job:
        if "iteration" in out[0]:  # the run is under way
            break
    t0 = time.monotonic()
    assert job.cancel()
    took = wait_for_workers(5)
    print(f"\ncancel: the engine thread ended {time.monotonic() - t0:.2f} s after job.cancel()")
    assert took < 3 and device_lock_is_free()
    t1 = time.monotonic()
    assert short_run(client, n=8)[0].startswith("Done: 8 new tokens")  # the next run starts cleanly
    assert time.monotonic() - t1 < 20


def test_a_closed_tab_stops_its_run_and_frees_the_worker(app, client, slower):
    """What a browser does when its tab closes: its event stream (GET /gradio_api/queue/data) disconnects. Gradio
    marks the session's running event dead, closes its generator at the next update, and the engine thread stops
    at its next record."""
    import httpx

    with httpx.Client(timeout=30) as http:
        messages = raw_run(http, *app, max_new_tokens=200)
        updates = 0
        for message in messages:
            updates += message.get("msg") == "process_generating"
            if updates >= 3:
                break
        assert run_workers(), "the run should still be going when the tab closes"
        messages.close()  # the tab closes: its event stream's connection is dropped mid-run
        t0 = time.monotonic()
    took = wait_for_workers(8)
    print(f"\nclosed tab: the engine thread ended {time.monotonic() - t0:.2f} s after the page's stream closed")
    assert took < 6 and device_lock_is_free()
    assert short_run(client, n=8)[0].startswith("Done: 8 new tokens")


def raw_run(http, url, demo, **changes):
    """A /run event as the browser's page sends it (join the queue, then read its event stream), with the JSON
    written by Python's json module, which can carry what gradio_client cannot (NaN, lone surrogates).
    Yields the stream's messages; leaving the loop early drops the stream, as a closed tab does."""
    fn_index, fn = next((i, fn) for i, fn in demo.fns.items() if fn.api_name == "run")
    session_hash = uuid.uuid4().hex[:11]
    values = {"session": None, "prompt": PROMPT, "max_new_tokens": 8, **CONTROLS, **changes}
    # the event's inputs in order, named as the event function's parameters; any other control at its default
    names = [p for p in inspect.signature(fn.fn).parameters if p != "progress"]
    data = [values.get(name, block.value) for name, block in zip(names, fn.inputs, strict=True)]
    body = {"data": data, "fn_index": fn_index, "event_data": None, "trigger_id": None, "session_hash": session_hash}
    r = http.post(f"{url}gradio_api/queue/join", content=json.dumps(body), headers={"Content-Type": "application/json"})
    r.raise_for_status()
    with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session_hash}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                yield json.loads(line[5:])


@pytest.mark.parametrize("changes, message", [
    ({"prompt": "w1 \ud800"}, "the prompt is not valid UTF-8 text: a lone surrogate U+D800 at character 3"),
    ({"decoding": "sample", "temperature": float("nan")}, "temperature must be a finite number, got nan"),
])
def test_what_only_a_raw_client_can_send_is_a_clear_error_too(app, client, changes, message):
    import httpx

    with httpx.Client(timeout=30) as http:
        done = [m for m in raw_run(http, *app, **changes) if m.get("msg") == "process_completed"]
    assert done and done[-1]["success"] is False
    assert message in json.dumps(done[-1]["output"], ensure_ascii=False)
    assert short_run(client, n=4)[0].startswith("Done: 4 new tokens")


API_ROWS = [
    # our own checks
    ({"prompt": "   "}, "the prompt is empty"),
    ({"prompt": "w1\x00w2"}, "control character (U+0000) at character 2"),
    ({"prompt": " ".join(["w7"] * 250)}, "context holds 256"),
    ({"k": 2.5}, "k must be a whole number"),
    ({"preset": "no-such-preset"}, "no-such-preset"),  # Gradio: not one of the dropdown's choices
    # the sliders' ranges: Gradio's own checks (each names the value and the bound) ...
    ({"k": 0}, "less than minimum"),
    ({"decoding": "sample", "temperature": 0.0}, "less than minimum"),
    ({"decoding": "sample", "top_p": 1.5}, "greater than maximum"),
    # ... the number boxes': the request parser's, which the page's status line shows too (field, range, value)
    ({"max_new_tokens": 5000}, "max new tokens must be from 1 to"),
    ({"decoding": "sample", "top_k": -1}, "top-k must be an integer"),
    ({"seed": -1}, "seed must be between 0"),
]


@pytest.mark.parametrize("changes, message", API_ROWS, ids=[m for _, m in API_ROWS])
def test_bad_input_through_the_api_is_a_clear_error_and_the_app_keeps_serving(client, changes, message):
    from gradio_client.exceptions import AppError

    args = {"prompt": PROMPT, "max_new_tokens": 8, **CONTROLS, **changes}
    with pytest.raises(AppError) as e:
        client.predict(api_name="/run", **args)
    assert message in str(e.value)
    assert short_run(client, n=4)[0].startswith("Done: 4 new tokens")
