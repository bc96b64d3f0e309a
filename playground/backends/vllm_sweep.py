"""The `vllm-sweep` experiment: presets x method x k x concurrency on real vLLM servers, plain against
speculative at the same concurrency in adjacent runs, with the cost model's prediction beside each figure.

One plain server runs for the whole sweep, and one speculative server per (method, k) (vllm_server says why);
only one is measured at a time. Per preset and server a warm-up request runs first (it also fills the prefix
cache, so every measured request's prefill is a cache hit on both arms). A batch of concurrency c is c
identical greedy requests sent at once; per request tokens/s is the decode rate (prefill excluded, as the
playground's own), aggregate tokens/s is all completion tokens over the batch's wall time.

The prediction (playground.core.cost), with every input measured on the engine's own steps:
  u, the unit:  the plain server's median step gap (time between consecutive chunks) at concurrency c;
  v(k+1):       the speculative server's median gap of verify steps / u (a verify step checks up to k drafts
                and, for a draft model, runs the drafter too: vLLM does not split the two, so c = 0 and v
                holds both; n-gram's drafting is CPU work inside the step as well);
  v(1):         its median gap of steps without a draft (n-gram found no match) / u;
  E:            expected tokens per verify step from the measured per-position acceptance (the empirical
                model), f the share of decode steps that verified drafts;
  predicted speed-up = (f E + (1 - f)) / (f v(k+1) + (1 - f) v(1)).
v comes from the same runs as the measured speed-up, so the prediction checks the cost model's
decomposition (tokens per step x step cost); the miss is what it leaves out (prefill, scheduling, spread).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import __version__
from ..core import cost
from ..envinfo import cpu_name
from ..errors import PlaygroundError
from ..inputs.presets import Preset, check_output
from ..results.vllm import (
    ServedArmFigures,
    ThreadBudget,
    VllmCell,
    VllmEnvironment,
    VllmPlanRecord,
    VllmPrediction,
    VllmServerRecord,
    VllmSweepResult,
)
from ..tables import median_of
from .vllm_client import VllmClient, VllmClientError, json_schema_format
from .vllm_ngram import compare_lookup, run_our_loop
from .vllm_server import METHODS, SpecConfig, VllmServer, draft_model, installed_versions, ngram, suffix
from .vllm_steps import ServedRequest

Progress = Callable[[float, str], None] | None
SWEEP_METHODS = ("ngram", "draft_model", "suffix")  # the methods whose servers the sweep can start alone
EOS_IDS = (2,)  # the embedded SmolLM2's end of sequence, where our lookup stops a proposal


@dataclass
class SweepPlan:
    model: Path
    presets: Sequence[Preset]
    ks: Sequence[int] = (1, 2, 4, 8)
    concurrencies: Sequence[int] = (1, 4)
    methods: Sequence[str] = ("ngram",)
    rounds: int = 1
    max_new_tokens: int | None = None  # default: each preset's own
    lookup_min: int = 1
    lookup_max: int = 3
    draft: Path | None = None  # draft_model's draft (default: the model itself)
    suffix_factor: float | None = None  # suffix's suffix_decoding_max_spec_factor (None: vLLM's default, 1)
    enforce_eager: bool = True
    venv: str | Path | None = None  # vLLM's venv (default: VllmServer's)
    server_options: dict = field(default_factory=dict)  # passed to VllmServer (kv_cache_gib, env, ...)
    # (plain URL, speculative URL, the latter's config): measure running servers (a GPU host, a Ray cluster)
    # instead of starting them; methods and ks are then the config's.
    external: tuple[str, str, SpecConfig] | None = None
    structured: bool = False  # JSON presets measured constrained to their schema too (vLLM's structured outputs)

    def check(self) -> None:
        if not self.presets:
            raise PlaygroundError("vllm-sweep needs at least one preset")
        if bad := [m for m in self.methods if m not in SWEEP_METHODS]:
            others = [m for m in METHODS if m not in SWEEP_METHODS]
            raise PlaygroundError(f"vllm-sweep methods are {', '.join(SWEEP_METHODS)}; got {', '.join(bad)} ("
                                  f"{', '.join(others)} need a trained head: start such a server yourself and "
                                  "measure it with --plain-url, --spec-url and --spec)")
        if self.suffix_factor is not None and not self.suffix_factor > 0:
            raise PlaygroundError(f"--suffix-factor must be > 0, got {self.suffix_factor}")
        if not self.ks or any(not 1 <= k <= 16 for k in self.ks):
            raise PlaygroundError(f"k values are integers 1..16, got {list(self.ks)}")
        if not self.concurrencies or any(not 1 <= c <= 64 for c in self.concurrencies):
            raise PlaygroundError(f"concurrencies are integers 1..64, got {list(self.concurrencies)}")
        if self.rounds < 1:
            raise PlaygroundError(f"rounds must be >= 1, got {self.rounds}")

    def spec(self, method: str, k: int) -> SpecConfig:
        if method == "ngram":
            return ngram(k, self.lookup_min, self.lookup_max)
        if method == "suffix":
            return suffix(k, self.suffix_factor)
        if method == "draft_model":
            return draft_model(k, self.draft or self.model)
        raise PlaygroundError(f"vllm-sweep starts {', '.join(SWEEP_METHODS)} servers, not {method}")

    def record(self) -> VllmPlanRecord:
        return VllmPlanRecord(external=list(self.external[:2]) if self.external else None, model=str(self.model),
                              presets=[p.name for p in self.presets], ks=list(self.ks),
                              concurrencies=list(self.concurrencies), methods=list(self.methods), rounds=self.rounds,
                              max_new_tokens=self.max_new_tokens, prompt_lookup=[self.lookup_min, self.lookup_max],
                              draft=str(self.draft or self.model), enforce_eager=self.enforce_eager,
                              suffix_factor=self.suffix_factor, structured=self.structured)

    def formats(self, preset: Preset) -> list[dict | None]:
        """The response formats a preset's cells run under: free, and with `structured` its schema (a JSON
        preset's: a ReAct preset's schema is its action input's, not the whole output's)."""
        if self.structured and preset.output_format == "json" and isinstance(preset.output_schema, dict):
            return [None, json_schema_format(preset.output_schema, preset.name)]
        return [None]


@dataclass(frozen=True)
class ServedBatch:
    """`concurrency` identical requests sent at once: their ServedRequests, the batch's wall time, the load after."""

    requests: list[ServedRequest]
    wall_s: float
    loadavg: list[float] | None


def prompt_ids(client: VllmClient, preset: Preset) -> list[int]:
    """The preset's prompt as the server's tokenizer renders it (its chat template for chat presets)."""
    if preset.is_chat:
        return client.tokenize(messages=[dict(m) for m in preset.messages])
    return client.tokenize(preset.prompt)


def run_batch(client: VllmClient, ids: Sequence[int], concurrency: int, max_tokens: int,
              response_format: dict | None = None) -> ServedBatch:
    """`concurrency` identical greedy requests at once; their ServedRequests and the batch's wall time."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(client.run, list(ids), max_tokens=max_tokens, response_format=response_format)
                   for _ in range(concurrency)]
        requests = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    return ServedBatch(requests, wall, _loadavg())


def arm_figures(batch: ServedBatch) -> ServedArmFigures:
    reqs = batch.requests
    rates = [r.tokens_per_s for r in reqs if r.tokens_per_s]
    tokens = sum(r.completion_tokens for r in reqs)
    verify_gaps = [g for r in reqs for g in r.step_seconds(verify=True)]
    other_gaps = [g for r in reqs for g in r.step_seconds(verify=False)]
    spec = [m for r in reqs if (m := r.spec_metrics)]
    hist: list[int] = []
    for s in spec:
        h = s.acceptance_histogram or []
        hist = [a + b for a, b in zip(hist + [0] * (len(h) - len(hist)), h + [0] * (len(hist) - len(h)))]
    first = reqs[0]
    return ServedArmFigures(
        tokens_per_s=median_of(rates), tokens_per_s_all=rates, aggregate_tokens_per_s=tokens / batch.wall_s,
        completion_tokens=[r.completion_tokens for r in reqs], wall_s=batch.wall_s,
        ttft_s=median_of([r.ttft_s for r in reqs]), step_s=median_of(verify_gaps + other_gaps),
        verify_step_s=median_of(verify_gaps), plain_step_s=median_of(other_gaps),
        verify_share=sum(len(r.verify_steps) for r in reqs) / max(1, sum(len(r.steps) - 1 for r in reqs)),
        merged_chunks=sum(r.merged_chunks for r in reqs), chunks=sum(r.chunks for r in reqs),
        schedule=sorted({r.schedule for r in reqs}), vllm_histogram=hist or None,
        mean_acceptance_length=_mean([s.mean_acceptance_length for s in spec if s.num_spec_steps]),
        alpha=_mean([r.alpha for r in reqs if r.alpha is not None]),
        draft_acceptance_rate=_mean([s.draft_acceptance_rate for s in spec if s.num_draft_tokens]),
        per_position_acceptance=list(first.per_position_acceptance),
        accepted_match_vllm=all(r.accepted == (m.num_accepted_draft_tokens if (m := r.spec_metrics) else 0)
                                for r in reqs),
        vllm_mean_itl_ms=median_of([r.server_metrics.get("mean_itl_ms") for r in reqs]),
        loadavg=batch.loadavg, text=first.text, token_ids=list(first.token_ids))


def predict(k: int, plain: ServedArmFigures, spec: ServedArmFigures) -> VllmPrediction:
    """The cost model's speed-up from the engine's own step times (module docstring)."""
    u, verify, other = plain.step_s, spec.verify_step_s, spec.plain_step_s
    positions = [p for p in spec.per_position_acceptance if p is not None]
    f = spec.verify_share
    if not u or not positions or verify is None:
        return VllmPrediction(predicted_speedup=None, why="no verify steps or no step times")
    v_k = verify / u
    v_1 = (other / u) if other else 1.0
    e = cost.expected_tokens_empirical(positions, min(k, len(positions)))
    step_cost = f * cost.iteration_cost(min(k, len(positions)), c=0.0, v={min(k, len(positions)) + 1: v_k}) \
        + (1 - f) * v_1
    return VllmPrediction(predicted_speedup=(f * e + (1 - f)) / step_cost, v_k_plus_1=v_k, v_1=v_1,
                          expected_tokens=e, verify_share=f, c=0.0)


@dataclass
class _Sweeping:
    """What the sweep's loop carries from arm to arm."""

    plan: SweepPlan
    units: int
    tick_to: Progress
    our_pair: object
    done: int = 0
    warm: set = field(default_factory=set)
    cells: list[VllmCell] = field(default_factory=list)
    refused: dict = field(default_factory=dict)  # preset -> why the servers refused its constrained requests

    def tick(self, message: str) -> None:
        if self.tick_to is not None:
            self.tick_to(min(1.0, self.done / self.units), message)


def run_sweep(plan: SweepPlan, progress: Progress = None, log: Callable[[str], None] = print,
              our_pair=None) -> VllmSweepResult:
    """The sweep's result. `our_pair`: a loaded ModelPair of the same model, to run our own loop
    with our lookup on each n-gram cross-check's prompt as well (vllm_ngram.run_our_loop)."""
    plan.check()
    started, environment = time.strftime("%Y-%m-%dT%H:%M:%S%z"), _environment(plan)
    arms = [plan.external[2]] if plan.external else [plan.spec(m, k) for m in plan.methods for k in plan.ks]
    formats = sum(len(plan.formats(p)) for p in plan.presets)
    run = _Sweeping(plan, len(arms) * formats * len(plan.concurrencies) * plan.rounds, progress, our_pair)
    servers: list[VllmServerRecord] = []
    run.tick("starting the plain vLLM server")
    with _serving(plan, None, servers, log) as plain_url:
        plain = VllmClient(plain_url, timeout=300)
        prompts = {p.name: prompt_ids(plain, p) for p in plan.presets}
        for spec_cfg in arms:
            run.tick(f"starting {spec_cfg.label}")
            with _serving(plan, spec_cfg, servers, log) as spec_url:
                spec = VllmClient(spec_url, timeout=300, spec=spec_cfg)
                for preset in plan.presets:
                    for fmt in plan.formats(preset):
                        _preset_cells(run, (plain, spec), spec_cfg, preset, prompts[preset.name], fmt, log)
    run.tick("done")
    return VllmSweepResult(started=started, plan=plan.record(), servers=servers,
                           environment=replace(environment, loadavg_at_end=_loadavg()), cells=run.cells,
                           structured_refused=run.refused)


def _preset_cells(run: _Sweeping, clients, spec_cfg: SpecConfig, preset: Preset, ids: Sequence[int],
                  fmt: dict | None, log) -> None:
    """A preset's cells against one speculative server, free or under `fmt` (a preset whose constrained request the
    servers refuse, a schema their grammar backend cannot compile, is said once, in the log and the result, and
    its constrained cells are not run)."""
    plan, (plain, spec) = run.plan, clients
    max_new = plan.max_new_tokens or preset.max_new_tokens
    if fmt is not None and preset.name in run.refused:
        run.done += len(plan.concurrencies) * plan.rounds
        return
    try:
        for client, key in ((plain, ("plain", preset.name, fmt is not None)),
                            (spec, (spec_cfg.label, preset.name, fmt is not None))):
            if key not in run.warm:  # warm-up: first-request costs, the prompt in the prefix cache, the grammar
                client.run(ids, max_tokens=8, response_format=fmt)
                run.warm.add(key)
    except VllmClientError as e:
        if fmt is None:
            raise
        run.refused[preset.name] = f"the vLLM server refused a request constrained to {preset.name}'s schema: {e}"
        log(f"# {run.refused[preset.name]}")
        run.done += len(plan.concurrencies) * plan.rounds
        return
    for c in plan.concurrencies:
        for r in range(plan.rounds):
            run.tick(f"{preset.name} {spec_cfg.label}{' constrained' if fmt else ''} c={c} round {r + 1}")
            order = (plain, spec) if r % 2 == 0 else (spec, plain)  # alternate who goes first
            batches = {cl: run_batch(cl, ids, c, max_new, fmt) for cl in order}
            check = r == 0 and c == min(plan.concurrencies) and fmt is None
            run.cells.append(_cell(preset, spec_cfg, c, r, ids, (batches[plain], batches[spec]),
                                   run.our_pair if check else False, structured=fmt is not None))
            run.done += 1


@contextmanager
def _serving(plan: SweepPlan, spec_cfg: SpecConfig | None, servers: list[VllmServerRecord], log) -> Iterator[str]:
    """The URL of a server for `spec_cfg`: one started here (and stopped after), or the one given (external)."""
    label = spec_cfg.label if spec_cfg else "plain server"
    if plan.external:
        url = plan.external[1] if spec_cfg else plan.external[0]
        VllmClient(url, timeout=30).check()  # reachable and serving something, or a clear error now
        servers.append(VllmServerRecord(url=url, external=True, spec=spec_cfg.to_dict() if spec_cfg else None))
        log(f"# {label}: the running server at {url}")
        yield url
        return
    with VllmServer(plan.model, spec_cfg, venv=plan.venv,
                    **dict(plan.server_options, enforce_eager=plan.enforce_eager)) as server:
        record = _server_record(server)
        servers.append(record)
        b = record.thread_budget
        log(f"# {label}: {server.startup_s:.1f} s to start, threads worker cores {b.worker_cores}, front end "
            f"{b.reserved_cpus}, torch threads {b.torch_threads} (VLLM_CPU_OMP_THREADS_BIND={b.omp_bind})")
        yield server.url


def _server_record(server: VllmServer) -> VllmServerRecord:
    return VllmServerRecord(url=server.url, pid=server.pid, model=str(server.model),
                            served_model_name=server.name, spec=server.spec.to_dict() if server.spec else None,
                            enforce_eager=server.enforce_eager, dtype=server.dtype,
                            max_model_len=server.max_model_len, kv_cache_gib=server.kv_cache_gib,
                            startup_s=server.startup_s, thread_budget=ThreadBudget(**server.thread_budget),
                            log=str(server.log_path))


def _cell(preset: Preset, spec_cfg: SpecConfig, c: int, r: int, ids: Sequence[int],
          batches: tuple[ServedBatch, ServedBatch], crosscheck, structured: bool = False) -> VllmCell:
    """One cell from its (plain, speculative) batches, plain first in even rounds; `crosscheck`: False, or None / a
    pair (also our own loop on the pair) to cross-check n-gram."""
    plain, spec = arm_figures(batches[0]), arm_figures(batches[1])
    speedup = _ratio(spec.tokens_per_s, plain.tokens_per_s)
    prediction = predict(spec_cfg.k, plain, spec)
    p = prediction.predicted_speedup
    x = None
    if spec_cfg.method == "ngram" and crosscheck is not False:  # our lookup against vLLM's n-gram, same output
        req = batches[1].requests[0]
        lo, hi = spec_cfg.prompt_lookup_min, spec_cfg.prompt_lookup_max
        x = compare_lookup(ids, list(req.token_ids), spec_cfg.k, lo, hi, req.spec_metrics, stop_ids=EOS_IDS)
        if crosscheck is not None:
            x = replace(x, our_loop=run_our_loop(crosscheck, ids, spec_cfg.k, lo, hi, req.completion_tokens,
                                                 req.token_ids))
    return VllmCell(preset=preset.name, kind=preset.kind, method=spec_cfg.method, k=spec_cfg.k,
                    spec_config=spec_cfg.to_dict(), concurrency=c, round=r,
                    first_arm="plain" if r % 2 == 0 else "spec", prompt_tokens=len(ids),
                    plain=plain, spec=spec, outputs_equal=plain.token_ids == spec.token_ids, speedup=speedup,
                    aggregate_speedup=_ratio(spec.aggregate_tokens_per_s, plain.aggregate_tokens_per_s),
                    **asdict(prediction), miss=(speedup / p - 1) if p and speedup else None, crosscheck=x,
                    structured=structured, schema_valid=_schema_valid(preset, spec.text))


def _schema_valid(preset: Preset, text: str) -> bool | None:
    """Whether the output's JSON satisfies the preset's schema (None: the preset has none to check)."""
    judged = check_output(preset, text) if preset.output_schema is not None else None
    return None if judged is None else judged.ok


def _environment(plan: SweepPlan) -> VllmEnvironment:
    vllm = "the running servers' (external)" if plan.external else installed_versions(plan.venv)
    return VllmEnvironment(playground=__version__, vllm=vllm, cpu=cpu_name(), cpu_count=os.cpu_count(),
                           loadavg_at_start=_loadavg())


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _ratio(a, b):
    return a / b if a and b else None
