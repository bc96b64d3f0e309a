"""The vLLM servers the tests share (tests/conftest.py starts them once per session, on first use): what they
are, and the constants both tests/test_vllm.py and tests/test_ui_vllm.py use.

Four servers, side by side (an idle vLLM server takes no CPU): plain, n-gram k=4 and suffix decoding k=8 (all
with the metrics flags the client needs), and a bare n-gram server without them (the bad-input case). Skipped, saying why, only where
scripts/setup_vllm.sh has not run (PLAYGROUND_SKIP_VLLM=1).
"""

from __future__ import annotations

import threading

import pytest

from playground.backends import VllmServer, vllm_available
from playground.backends.vllm_server import ngram, suffix

AVAILABLE, WHY = vllm_available()
needs_vllm = pytest.mark.skipif(not AVAILABLE, reason=f"vLLM is not set up: {WHY}")
COPY = ("Repeat exactly: The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
        "Repeat:")
NGRAM = ngram(4, 1, 3)
SUFFIX = suffix(8, 4.0)  # the playground's own suffix drafter's factor


def start_servers(model_dir, logs):
    """Start the three servers at once; yield {name: VllmServer}; stop them all after (also when one failed)."""
    if not AVAILABLE:
        pytest.skip(f"vLLM is not set up: {WHY}")
    # All but "plain" run the engine core in the server's own process (vLLM's V1 multiprocessing off): one
    # interpreter importing torch and vLLM per server instead of three, 21 s to healthy alone against 33 s on the
    # AMD EPYC, and four start at once on two cores. The stream and the metrics the client reads are the same; the
    # OpenMP binding (the log's thread budget) is made only in a separate engine process, so "plain" keeps vLLM's
    # default for the test that reads it.
    quick = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    made = {"plain": VllmServer(model_dir, None, kv_cache_gib=1, log_path=logs / "plain.log"),
            "ngram": VllmServer(model_dir, NGRAM, kv_cache_gib=1, log_path=logs / "ngram.log", env=quick),
            "suffix": VllmServer(model_dir, SUFFIX, kv_cache_gib=1, log_path=logs / "suffix.log", env=quick),
            # Neither metrics flag: what the client must refuse with a message.
            "bare": VllmServer(model_dir, ngram(2), kv_cache_gib=1, log_path=logs / "bare.log", metrics_flags=False,
                               env=quick)}
    errors = []

    def start(server):
        try:
            server.start()
        except Exception as e:  # noqa: BLE001 (reported below, with the other servers stopped)
            errors.append(e)

    threads = [threading.Thread(target=start, args=(s,)) for s in made.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if errors:
            raise errors[0]
        yield made
    finally:
        for s in made.values():
            s.stop()
