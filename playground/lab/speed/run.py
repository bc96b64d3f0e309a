"""Speed's run: `speed` (plain against speculative decoding in adjacent runs, with the cost model's prediction
beside each figure) and `sweep` (the k sweep of one prompt)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ...core import cost
from ...core.engine import K_MAX, plain_generate
from ...core.records import RunSummary, summarize
from ...drafters.conversation import Conversation
from ...envinfo import environment
from ...errors import PlaygroundError
from ...results.speed import PlainRun, SpeedResult, SpeedRun, SweepResult
from ...results.trust import MachineLoad, Verdict
from ...run import RunSpec, prepare
from ..calibration import CalibrationPlan, Timing, calibrate, pass_lengths
from ..common import Progress, rotated, tick
from ..schedules import compare, iteration_rows
from ..trust import MachineMonitor, recommend
from .cells import best_fixed, drift_by_prompt, host_level, judge, predict_runs, speed_row, verdicts
from .request import SpeedRequest
from .schema import SCHEMA, constrained_run, interleaved

# --- speed: plain against speculative, in adjacent runs ----------------------------------------------

MEMORY_SCOPES = ("conversation", "prompt", "none")  # what a schedule's state carries over between runs (speed())


def bracketed(arms: Sequence[str], every: int) -> list[str]:
    """The speculative `arms` with a "plain" run before every `every` of them and after the last."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise PlaygroundError(f"plain_every must be a whole number >= 1, got {every!r}")
    out: list[str] = []
    for i, arm in enumerate(arms):
        if i % every == 0:
            out.append("plain")
        out.append(arm)
    return [*out, "plain"]


@dataclass(frozen=True)
class _Plain:
    """Plain decoding as it ran at a moment between two plain runs: what `speed` divides a speculative run by."""

    new_tokens: int
    decode_s: float
    prefill_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0


def plain_at(plains: Sequence[tuple[float, object]], when: float) -> _Plain:
    """Plain decoding at `when` (a perf_counter time), from the plain runs (midpoint time, summary) of one prompt
    and round: the step time and prefill of the runs just before and after it, interpolated linearly in time
    (a host drifting steadily between them cancels), or the one run on a side where the other has none."""
    before = [x for x in plains if x[0] <= when]
    after = [x for x in plains if x[0] > when]
    (ta, a), (tb, b) = before[-1] if before else after[0], after[0] if after else before[-1]
    w = (when - ta) / (tb - ta) if tb > ta else 0.0
    step = lambda x: x.decode_s / x.new_tokens if x.new_tokens else 0.0
    near = a if w <= 0.5 else b
    return _Plain(near.new_tokens, near.new_tokens * ((1 - w) * step(a) + w * step(b)),
                  (1 - w) * a.prefill_s + w * b.prefill_s)


class _Arms:
    """Each arm's `Conversation` (its schedule's state), carried over between runs as far as the request's
    `memory` says: one per arm, one per arm and prompt, or a new one per run."""

    def __init__(self, scope: str):
        if scope not in MEMORY_SCOPES:
            raise PlaygroundError(f"memory must be one of {', '.join(MEMORY_SCOPES)}, got {scope!r}")
        self.scope, self.held = scope, {}

    def of(self, arm: str, name: str) -> Conversation:
        if self.scope == "none":
            return Conversation()
        key = arm if self.scope == "conversation" else (arm, name)
        if key not in self.held:
            self.held[key] = Conversation()
        return self.held[key]


def _run_plain(request: SpeedRequest, prompt: Sequence[int], max_new: int, held: bool = False) -> RunSummary:
    """held: constrained to the request's schema."""
    return summarize(plain_generate(request.pair, prompt, sampling=request.sampling, max_new_tokens=max_new,
                                    constraint=request.constraint if held else None))


def _run_spec(request: SpeedRequest, name: str, k: int | str, max_new: int, timing: Timing | None,
              conversation: Conversation, held: bool = False) -> tuple[RunSummary, list]:
    """The run's summary and its iterations as compact rows (k, accepted, emitted, draft_s, verify_s,
    rollback_s, drafted, source): what lab.fit needs to fit the step costs the loop really paid, and
    lab.schedules to cost the run's decisions. held: constrained to the request's schema, with its proposer.
    It runs through playground.run, as generate and the browser do, with this arm's proposer and calibration."""
    proposer = (request.constrained_proposer or request.proposer_factory)() if held else request.proposer(name)
    spec = RunSpec(drafter=proposer.describe(), k=k, sampling=request.sampling, max_new_tokens=max_new, chat=None,
                   prompt_ids=request.prompts[name], min_confidence=request.min_confidence,
                   schema=request.constraint if held else None, headless=True)
    run = prepare(request.pair, spec, conversation, proposer=proposer, timing=timing)
    for _ in run.records():
        pass
    return summarize(run.kept), iteration_rows(run.kept)


def speed(request: SpeedRequest, progress: Progress = None,
          between_rounds: Callable[[int], None] | None = None) -> SpeedResult:
    """Measured speed-up of speculative over plain decoding per prompt and k, with the prediction beside it.

    In each round, for each prompt, every k runs back to back in an order that rotates from round to round,
    with a plain run before every `plain_every` of them and after the last (`bracketed`); each speculative run is
    divided by plain decoding interpolated to its moment between the plain runs around it (`plain_at`).
    Quoted: the median ratio over rounds (and prompts). A prompt whose plain speed (the median of a round's plain
    runs) moved by more than `drift_warning` between rounds ((max - min) / median) fails its figures: its ratios
    are still adjacent, but the machine changed under them. From 3 prompts on, the figures over every prompt fail
    when the host's level moved so (cells.host_level), and one prompt's drift only warns them.
    `between_rounds(r)` runs after round r but the last (a calibration to pool, say). See SpeedRequest for the rest."""
    lengths = _lengths(request.prompts, request.max_new_tokens)
    memories = _Arms(request.memory)
    monitor = MachineMonitor().__enter__()
    runs, plain_runs = _measure(request, lengths, memories, progress, between_rounds)
    load = monitor.stop()
    predict_runs(request, runs)
    return _result(request, lengths, runs, plain_runs, load)


def _measure(request: SpeedRequest, lengths: dict[str, int], memories: _Arms, progress: Progress,
             between_rounds: Callable[[int], None] | None) -> tuple[list[SpeedRun], list[PlainRun]]:
    """Every round: each prompt's arms in their rotated, bracketed order."""
    arms = [f"k={k}" for k in request.ks]
    runs, plain_runs = [], []
    total = request.rounds * len(request.prompts) * len(bracketed(arms, request.plain_every))
    total *= 2 if request.constraint is not None else 1
    done = 0

    def ran(r: int, name: str, arm: str) -> None:
        nonlocal done
        done += 1
        tick(progress, done / total, f"round {r + 1}/{request.rounds}, {name}: {arm}")

    for r in range(request.rounds):
        if r and between_rounds is not None:
            between_rounds(r - 1)
        for p_index, name in enumerate(request.prompts):
            order = bracketed(rotated(arms, r + p_index), request.plain_every)
            order = interleaved(order) if request.constraint is not None else order
            spec, plain = _prompt_round(request, r, name, order, lengths[name], memories, ran)
            runs += spec
            plain_runs += plain
    return runs, plain_runs


def _prompt_round(request: SpeedRequest, r: int, name: str, order: list[str], length: int, memories: _Arms,
                  ran: Callable[[int, str, str], None]) -> tuple[list[SpeedRun], list[PlainRun]]:
    """One prompt's runs of round `r`, in `order`, each speculative run divided by plain decoding at its moment."""
    prompt = request.prompts[name]
    results, iterations, plains, plain_runs = {}, {}, {False: [], True: []}, []
    for arm in order:
        start = time.perf_counter()
        free, held = arm.removesuffix(SCHEMA), arm.endswith(SCHEMA)  # held: constrained (schema.py)
        if free == "plain":
            summary = _run_plain(request, prompt, length, held)
            plains[held].append(((start + time.perf_counter()) / 2, summary))
            if not held:
                plain_runs.append(PlainRun(round=r, prompt=name, tokens_per_s=summary.tokens_per_s))
        else:
            setting = free[2:]
            summary, rows = _run_spec(request, name, int(setting) if setting.isdigit() else setting, length,
                                      request.timing_of(name), memories.of(arm, name), held)
            iterations[arm] = rows
            results[arm] = (summary, (start + time.perf_counter()) / 2)
        ran(r, name, arm)
    runs = []
    for k in request.ks:
        s, mid = results[f"k={k}"]
        p = plain_at(plains[False], mid)
        held = results.get(f"k={k}{SCHEMA}")
        runs.append(SpeedRun(
            round=r, prompt=name, k=k, order=order,
            plain_tokens_per_s=p.tokens_per_s, spec_tokens_per_s=s.tokens_per_s,
            ratio=s.tokens_per_s / p.tokens_per_s if p.tokens_per_s else None,
            e2e_ratio=_e2e(s) / _e2e(p) if _e2e(p) else None,
            alpha=s.alpha, per_position=list(s.per_position_acceptance),
            tokens_per_pass=s.tokens_per_pass, new_tokens=s.new_tokens,
            max_new_tokens=length, finished=s.finished, plain_new_tokens=p.new_tokens,
            draft_s=s.draft_s, verify_s=s.verify_s, rollback_s=s.rollback_s,
            decode_s=s.decode_s, plain_decode_s=p.decode_s,
            k_values={str(kk): n for kk, n in s.k_values.items()},
            drafted_values={str(kk): n for kk, n in s.drafted_values.items()},
            source_iterations=s.source_iterations, prefill_s=s.prefill_s, plain_prefill_s=p.prefill_s,
            iterations=iterations[f"k={k}"],
            schema=constrained_run(held[0], plain_at(plains[True], held[1])) if held is not None else None))
    return runs, plain_runs


def _result(request: SpeedRequest, lengths: dict[str, int], runs: list[SpeedRun], plain_runs: list[PlainRun],
            load: MachineLoad) -> SpeedResult:
    """The tables over every prompt and per prompt, their verdicts, and the recommendation."""
    prompts, ks = list(request.prompts), list(request.ks)
    model_of = request.timing_of if request.min_confidence is None else (lambda name: None)  # no fixed-k model under a stop
    table = [speed_row(k, [x for x in runs if x.k == k], model_of) for k in ks]
    by_prompt = [speed_row(k, [x for x in runs if x.k == k and x.prompt == name], model_of, prompt=name)
                 for name in prompts for k in ks]
    drift = drift_by_prompt(request, plain_runs)
    host = host_level(request, drift)
    overall, own = verdicts(request, drift, host, load)
    for row in table + by_prompt:
        judge(row, [x for x in runs if x.k == row.k and row.prompt in (None, x.prompt)],
              overall if row.prompt is None else own[row.prompt])
    best = best_fixed(table)
    advice = recommend(best.k, Verdict.of(overall, best.trust))
    first = request.timing_of(prompts[0])
    return SpeedResult(
        trust=overall, machine=load, recommended_k=advice.recommended_k, withheld=advice.withheld,
        environment=environment(request.pair), ks=ks, rounds=request.rounds,
        max_new_tokens=request.max_new_tokens if isinstance(request.max_new_tokens, int) else lengths,
        sampling=request.sampling.describe(), prompts=prompts, min_confidence=request.min_confidence,
        memory=request.memory, table=table, best_k=best.k, by_prompt=by_prompt,
        best_k_by_prompt={name: best_fixed([r for r in by_prompt if r.prompt == name]).k for name in prompts},
        drift=drift, host_drift=host, schedules=compare(runs, prompts, ks), runs=runs, plain_runs=plain_runs,
        plain_every=request.plain_every, timing=first.to_dict() if first else None,
        timing_by_prompt={n: request.timing[n].to_dict() for n in prompts if n in request.timing}
        if isinstance(request.timing, Mapping) else None,
        schema=getattr(request.constraint, "name", None))


def _e2e(summary) -> float:
    """End-to-end tokens/s: the prompt's prefill (target and drafter) counted in."""
    total = summary.prefill_s + summary.decode_s
    return summary.new_tokens / total if total > 0 else 0.0


def _lengths(prompts: Mapping[str, Sequence[int]], max_new_tokens: int | Mapping[str, int]) -> dict[str, int]:
    """{prompt name: its length limit in new tokens}, from one limit or one per name (every name needs one)."""
    if isinstance(max_new_tokens, Mapping):
        missing = [name for name in prompts if name not in max_new_tokens]
        if missing:
            raise PlaygroundError(f"no max_new_tokens for the prompt {missing[0]!r}")
        lengths = {name: max_new_tokens[name] for name in prompts}
    else:
        lengths = dict.fromkeys(prompts, max_new_tokens)
    for name, n in lengths.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise PlaygroundError(f"max_new_tokens must be a whole number >= 1, got {n!r} for {name!r}")
    return lengths


def _pooled_positions(rows: list[SpeedRun]) -> list[float]:
    """Median per-position acceptance over runs (positions never reached in a run are skipped)."""
    if not rows:
        return []
    width = max(len(x.per_position) for x in rows)
    out = []
    for i in range(width):
        vals = [x.per_position[i] for x in rows if i < len(x.per_position) and x.per_position[i] is not None]
        if not vals:
            break
        out.append(statistics.median(vals))
    return out


def sweep(request: SpeedRequest, adaptive: bool = True, progress: Progress = None) -> SweepResult:
    """k = 1..8 on the request's one prompt: measured speed-up (adjacent runs) and predicted, break-even alpha,
    best k; with `adaptive`, the adaptive controller runs as one more arm of the same rounds. Without a calibration
    (`request.timing`), it calibrates first, under the request's sampling."""
    if len(request.prompts) != 1:
        raise PlaygroundError(f"a sweep runs one prompt, got {len(request.prompts)}")
    (name, prompt_ids), = request.prompts.items()
    max_new = _lengths(request.prompts, request.max_new_tokens)[name]
    fixed = [k for k in request.ks if isinstance(k, int)]
    arms = [*request.ks, "adaptive"] if adaptive and "adaptive" not in request.ks else list(request.ks)
    n_max = (K_MAX if adaptive else max(fixed)) + 1  # adaptive may draft up to K_MAX: time verification that far
    timing = request.timing_of(name)
    # The progress bar's share of each phase, in target passes (the unit both phases spend their time in):
    # a calibration runs (warm-up + repeats) x lengths cycles of a draft and a pass; a run about one pass a token.
    cal_passes = 0 if timing is not None else 2 * (3 + 12) * len(pass_lengths(n_max))
    share = cal_passes / (cal_passes + request.rounds * len(bracketed(arms, request.plain_every)) * max_new)
    if timing is None:
        timing = calibrate(request.pair, prompt_ids, request.proposer(name),
                           CalibrationPlan(n_max=n_max, sampling=request.sampling),
                           progress=(lambda f, m: tick(progress, share * f, m)) if progress else None)
    result = speed(replace(request, ks=arms, timing=timing),
                   progress=(lambda f, m: tick(progress, share + (1 - share) * f, m)) if progress else None)
    for row in result.table:
        if isinstance(row.k, int):
            row.break_even_alpha = cost.break_even_alpha(row.k, timing.c, timing.v, timing.overhead)
    positions = _pooled_positions([x for x in result.runs if x.k == max(fixed)])
    best = None
    if positions and request.min_confidence is None:  # the per-position acceptance at the deepest k, through the model
        best = cost.best_k(positions, timing.c, timing.v, k_max=max(fixed), overhead=timing.overhead).k
    return SweepResult(**vars(result), predicted_best_k=best)
