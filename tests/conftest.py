import os

import pytest
import torch

from playground.backends.vllm_server import free_port
from tests.tiny import perturbed, tiny_model, tiny_pair

# --- two workers (`make test`: pytest-xdist with --dist loadfile, then the vLLM tests alone) ------------------------
# The tests that use the vLLM servers are marked `vllm_servers`: `make test` runs the rest on two workers (a file's
# tests on one worker, so its module-scoped fixtures are built once) and then these in one process. The four
# servers hold about 13 GiB while they run: beside two workers' models they ran a 24 GiB machine out of memory.


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "vllm_servers" in item.fixturenames:
            item.add_marker(pytest.mark.vllm_servers)


WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
SHARE = max(1, (os.cpu_count() or 1) // WORKERS)
"""The cores one worker may keep busy: with two workers on two cores, a second torch thread (or a subprocess's
default of one per core) spins against the other worker's and can run 10x slower."""


@pytest.fixture(autouse=True, scope="session")
def _subprocess_threads():
    # What the tests start (the CLI, llama.cpp's stress run, the packaged copy) takes its OpenMP threads from here.
    if WORKERS == 1:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", str(SHARE))
        yield


@pytest.fixture(scope="module")
def embedded_threads():
    """Up to two torch threads for a module that runs the embedded model (it runs faster on two), within this
    worker's share of the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(2, SHARE))
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # Tiny models are dominated by per-op overhead; one thread is faster and immune to a busy neighbour.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True, scope="session")
def _temp_models_allowed(tmp_path_factory):
    # Tests save tiny models under pytest's temp folder and load them through the CLI: allow that folder the
    # way an operator allows theirs (playground.pairs: local paths only inside PLAYGROUND_MODEL_ROOTS).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path_factory.getbasetemp()))
        mp.delenv("PLAYGROUND_ALLOW_ANY_MODEL", raising=False)
        mp.delenv("PLAYGROUND_PAIR", raising=False)
        yield


@pytest.fixture(scope="session")
def target64():
    return tiny_model(vocab=64, seed=0)


@pytest.fixture(scope="session")
def drafts64(target64):
    """A useful draft (noisy copy), a perfect draft (the target itself) and a useless one (unrelated)."""
    return {
        "useful": perturbed(target64, noise=0.015),
        "perfect": target64,
        "useless": tiny_model(vocab=64, seed=123),
    }


@pytest.fixture(scope="session")
def pair64(target64, drafts64):
    return tiny_pair(target64, drafts64["useful"])


@pytest.fixture(scope="module")
def launch_app():
    """Launch a playground Blocks in this process on a free loopback port through playground.ui.launch (as app.py
    does; always on 127.0.0.1, whatever GRADIO_SERVER_NAME says); returns its URL. Every app launched here is
    closed after the module."""
    launched = []

    def launch_(demo) -> str:
        from playground.ui import launch

        _, url, _ = launch(demo, server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True,
                           quiet=True)
        launched.append(demo)
        assert url.startswith("http://127.0.0.1:"), url
        return url

    yield launch_
    for demo in launched:
        demo.close()


# --- the vLLM servers: one set per session, shared by tests/test_vllm.py and tests/test_ui_vllm.py -----------


@pytest.fixture(scope="session")
def vllm_model_dir():
    from playground.pairs.loading import ensure_embedded_safetensors  # only for the vLLM tests: keeps conftest light

    return ensure_embedded_safetensors(progress=None)


@pytest.fixture(scope="session")
def vllm_servers(vllm_model_dir, tmp_path_factory):
    """{"plain", "ngram", "suffix", "bare"}: VllmServers (tests/vllm_servers.py), started on first use, stopped at the end."""
    from tests.vllm_servers import start_servers  # only for the vLLM tests: keeps conftest light

    yield from start_servers(vllm_model_dir, tmp_path_factory.mktemp("vllm"))
