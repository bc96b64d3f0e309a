"""Speed: plain against speculative decoding in adjacent runs, with the cost model's prediction beside
each figure; the k sweep of one prompt."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core import cost
from ..core.engine import K_MAX, plain_generate, speculative_generate
from ..core.records import summarize
from ..core.sampling import GREEDY, SamplingConfig
from ..drafters.adaptive import CostCurve, make_controller
from ..envinfo import environment
from ..errors import PlaygroundError
from .calibration import CalibrationPlan, Timing, calibrate, pass_lengths
from .common import Progress, rotated, tick
from .fit import explain_cell, predict_from_neighbours, reached, stop_limit
from .schedules import compare, costed_ratio, iteration_rows
from .trust import (
    MachineMonitor,
    TrustLimits,
    Verdict,
    check_calibration,
    check_drift,
    check_local_prediction,
    check_prediction,
    check_rounds,
    check_sampling,
    check_spread,
    recommend,
    relative_spread,
)

# --- speed: plain against speculative, in adjacent runs ----------------------------------------------

MEMORY_SCOPES = ("conversation", "prompt", "none")  # what a schedule's state carries over between runs (speed())


# A plain run before every PLAIN_EVERY speculative runs of a prompt and after the last (speed(), `plain_every`).
# With one plain run per prompt and round, a speculative run 10 runs from it (half a minute on the AMD EPYC VM)
# was divided by a plain speed the host had since left: in the two grids of 2026-12-04 the standard deviation of
# measured / predicted grew from 0.07-0.08 for runs beside the plain run to 0.16-0.22 eight or nine runs from it.
PLAIN_EVERY = 3


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


def _plain_at(plains: Sequence[tuple[float, object]], when: float) -> _Plain:
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


def _run_plain(pair, prompt, sampling, max_new):
    return summarize(plain_generate(pair, prompt, sampling=sampling, max_new_tokens=max_new))


def _run_spec(pair, prompt, proposer_factory, k, sampling, max_new, timing=None, min_confidence=None, memory=None):
    """The run's summary and its iterations as compact rows (k, accepted, emitted, draft_s, verify_s,
    rollback_s, drafted, source): what lab.fit needs to fit the step costs the loop really paid, and
    lab.schedules to cost the run's decisions."""
    curve = CostCurve.from_timing(timing) if timing is not None else None
    controller = make_controller(k, curve, memory=memory)
    records = list(speculative_generate(pair, prompt, proposer=proposer_factory(), k=controller, sampling=sampling,
                                        max_new_tokens=max_new, record_probs=False, min_confidence=min_confidence))
    return summarize(records), iteration_rows(records)


def speed(pair, prompts: dict[str, Sequence[int]], proposer_factory, ks: Sequence[int | str] = (1, 2, 3, 4, 6),
          rounds: int = 3, max_new_tokens: int | Mapping[str, int] = 64, sampling: SamplingConfig = GREEDY,
          timing: Timing | dict[str, Timing] | None = None,
          drift_warning: float = 0.15, min_confidence: float | None = None, progress: Progress = None,
          memory: str = "conversation", between_rounds: Callable[[int], None] | None = None,
          plain_every: int = PLAIN_EVERY) -> dict:
    """Measured speed-up of speculative over plain decoding per prompt and k, with the prediction beside it.

    In each round, for each prompt, every k runs back to back in an order that rotates from round to round,
    with a plain run before every `plain_every` of them and after the last (`bracketed`); each speculative run is
    divided by plain decoding interpolated to its moment between the plain runs around it (`_plain_at`).
    Quoted: the median ratio over rounds (and prompts). A prompt whose plain speed (the median of a round's plain
    runs) moved by more than `drift_warning` between rounds ((max - min) / median) fails the verdict: its ratios
    are still adjacent, but the machine changed under them.
    A k may also be "adaptive" (needs `timing`) or "heuristic" (transformers' schedule), see adaptive.py.
    `timing`: one calibration for every prompt, or one per prompt name (a longer context costs more per
    step, on both sides, so per-prompt calibrations predict better). A calibration timed under another
    decoding than `sampling` (Timing.sampling) is flagged: its prediction leaves out (or counts) the sampling
    work of each pass. `memory` says what a schedule's state (adaptive.py) carries over: "conversation" (the
    default) from every run of its arm to the next, across prompts and rounds, as from one call of an agent to the
    next on one pair and drafter, so a prompt's figures depend on the prompt before it; "prompt" from one round to
    the next of the same prompt only (a figure per output shape, whatever the order); "none": every run a first
    call, as replay predicts it. `between_rounds(r)` runs after round r but the last (a calibration to pool, say);
    `timing`, when a dict, is read again for the predictions made at the end. `max_new_tokens`: one length for
    every prompt, or one per prompt name (each preset's own).
    """
    lengths = _lengths(prompts, max_new_tokens)
    timing_of = (lambda name: timing.get(name)) if isinstance(timing, dict) else (lambda name: timing)
    arms = [f"k={k}" for k in ks]
    if memory not in MEMORY_SCOPES:
        raise PlaygroundError(f"memory must be one of {', '.join(MEMORY_SCOPES)}, got {memory!r}")
    memories: dict = {}

    def memory_of(arm: str, name: str) -> dict:
        if memory == "none":
            return {}
        return memories.setdefault(arm if memory == "conversation" else (arm, name), {})

    runs, plain_runs = [], []
    total = rounds * len(prompts) * len(bracketed(arms, plain_every))
    done = 0
    monitor = MachineMonitor().__enter__()
    for r in range(rounds):
        if r and between_rounds is not None:
            between_rounds(r - 1)
        for p_index, (name, prompt) in enumerate(prompts.items()):
            order = bracketed(rotated(arms, r + p_index), plain_every)
            results, iterations, plains = {}, {}, []
            for arm in order:
                start = time.perf_counter()
                if arm == "plain":
                    summary = _run_plain(pair, prompt, sampling, lengths[name])
                    plains.append(((start + time.perf_counter()) / 2, summary))
                    plain_runs.append({"round": r, "prompt": name, "tokens_per_s": summary.tokens_per_s})
                else:
                    setting = arm[2:]
                    summary, iterations[arm] = _run_spec(
                        pair, prompt, proposer_factory, int(setting) if setting.isdigit() else setting, sampling,
                        lengths[name], timing_of(name), min_confidence, memory_of(arm, name))
                    results[arm] = (summary, (start + time.perf_counter()) / 2)
                done += 1
                tick(progress, done / total, f"round {r + 1}/{rounds}, {name}: {arm}")
            for k in ks:
                s, mid = results[f"k={k}"]
                p = _plain_at(plains, mid)
                runs.append({
                    "round": r, "prompt": name, "k": k, "order": order,
                    "plain_tokens_per_s": p.tokens_per_s, "spec_tokens_per_s": s.tokens_per_s,
                    "ratio": s.tokens_per_s / p.tokens_per_s if p.tokens_per_s else None,
                    "e2e_ratio": _e2e(s) / _e2e(p) if _e2e(p) else None,
                    "alpha": s.alpha, "per_position": list(s.per_position_acceptance),
                    "tokens_per_pass": s.tokens_per_pass, "new_tokens": s.new_tokens,
                    "max_new_tokens": lengths[name], "finished": s.finished,
                    "plain_new_tokens": p.new_tokens,
                    "draft_s": s.draft_s, "verify_s": s.verify_s, "rollback_s": s.rollback_s,
                    "decode_s": s.decode_s, "plain_decode_s": p.decode_s,
                    "k_values": {str(kk): n for kk, n in s.k_values.items()},
                    "drafted_values": {str(kk): n for kk, n in s.drafted_values.items()},
                    "source_iterations": s.source_iterations,
                    "prefill_s": s.prefill_s, "plain_prefill_s": p.prefill_s,
                    "iterations": iterations[f"k={k}"],
                })
    load = monitor.stop()
    for x in runs:
        t = timing_of(x["prompt"])
        # The fixed-k model drafts every k; under a confidence stop it would charge drafts that never ran, so
        # such a run gets no prediction from it (its costed figure, above, counts what was drafted).
        x["predicted_empirical"] = _run_prediction(x, t) if min_confidence is None else None
        x["costed"] = costed_ratio(x["iterations"], CostCurve.from_timing(t) if t is not None else None)
        x["predicted_local"] = (predict_from_neighbours(x, _neighbours(runs, x), t)
                                if t is not None and min_confidence is None else None)
    model_of = timing_of if min_confidence is None else (lambda name: None)  # no fixed-k model under a stop
    table = [_speed_row(k, [x for x in runs if x["k"] == k], model_of) for k in ks]
    by_prompt = [{"prompt": name, **_speed_row(k, [x for x in runs if x["k"] == k and x["prompt"] == name], model_of)}
                 for name in prompts for k in ks]
    drift = {}
    for name in prompts:
        plain_speeds = [statistics.median(x["tokens_per_s"] for x in plain_runs if x["prompt"] == name and x["round"] == r)
                        for r in range(rounds)]
        moved = relative_spread(plain_speeds)  # as the verdict measures it, so the two never disagree
        drift[name] = {"plain_tokens_per_s": plain_speeds, "spread": moved, "flagged": moved > drift_warning}
    limits = TrustLimits(drift=drift_warning)
    overall = Verdict.of(check_rounds(rounds), load.findings(),
                         *(check_drift(name, drift[name]["plain_tokens_per_s"], limits, load) for name in prompts),
                         *(check_calibration(t) for name in prompts if (t := timing_of(name)) is not None),
                         *(check_sampling(t, sampling.timing_label()) for name in prompts
                           if (t := timing_of(name)) is not None))
    for row in table + by_prompt:
        _judge(row, [x for x in runs if x["k"] == row["k"] and row.get("prompt") in (None, x["prompt"])], overall)
    best = _best_fixed(table)
    return {"experiment": "speed", "trust": overall.to_dict(), "machine": load.to_dict(),
            **recommend(best["k"], Verdict.of(overall, Verdict.from_dict(best["trust"]))), "environment": environment(pair), "ks": list(ks), "rounds": rounds,
            "max_new_tokens": max_new_tokens if isinstance(max_new_tokens, int) else lengths, "sampling": sampling.describe(), "prompts": list(prompts),
            "min_confidence": min_confidence, "memory": memory,
            "table": table, "best_k": best["k"], "by_prompt": by_prompt, "best_k_by_prompt": {
                name: _best_fixed([r for r in by_prompt if r["prompt"] == name])["k"] for name in prompts},
            "drift": drift, "schedules": compare(runs, list(prompts), ks), "runs": runs, "plain_runs": plain_runs,
            "plain_every": plain_every,
            "timing": first.to_dict() if (first := timing_of(next(iter(prompts)))) else None,
            "timing_by_prompt": {n: timing[n].to_dict() for n in prompts if n in timing}
            if isinstance(timing, dict) else None}


def _best_fixed(rows: list[dict]) -> dict:
    """The row of the fixed k with the highest median ratio (adaptive / heuristic rows are not a k to pick)."""
    fixed = [r for r in rows if isinstance(r["k"], int)] or rows
    return max(fixed, key=lambda r: r["median_ratio"])


def _e2e(summary) -> float:
    """End-to-end tokens/s: the prompt's prefill (target and drafter) counted in."""
    total = summary.prefill_s + summary.decode_s
    return summary.new_tokens / total if total > 0 else 0.0


def _speed_row(k: int, runs: list[dict], timing_of: Callable[[str], Timing | None]) -> dict:
    """Medians over the runs of one k (all prompts, or one): measured ratio, prediction beside it and
    how far the empirical prediction missed (measured - predicted)."""
    rows = [x for x in runs if x["ratio"] is not None]
    alphas = [x["alpha"] for x in rows if x["alpha"] is not None]
    e2e = [x["e2e_ratio"] for x in rows if x.get("e2e_ratio") is not None]
    row = {"k": k, "median_ratio": statistics.median(x["ratio"] for x in rows),
           "min_ratio": min(x["ratio"] for x in rows), "max_ratio": max(x["ratio"] for x in rows),
           "median_e2e_ratio": statistics.median(e2e) if e2e else None,
           "n": len(rows), "alpha": statistics.median(alphas) if alphas else None,
           "median_costed": statistics.median(costed) if (costed := [x["costed"] for x in rows
                                                                       if x.get("costed") is not None]) else None}
    if isinstance(k, str):  # adaptive / heuristic: k varies by iteration; show how it was spread
        for name in ("k_values", "drafted_values"):
            spread: dict[str, int] = {}
            for x in rows:
                for kk, n in x.get(name, {}).items():
                    spread[kk] = spread.get(kk, 0) + n
            row[name] = dict(sorted(spread.items(), key=lambda kv: int(kv[0])))
    elif rows and timing_of(rows[0]["prompt"]) is not None and row["alpha"] is not None:
        # iid: the seed chapter's steady-state formula from the median alpha. empirical: each run's
        # per-position acceptance, for a run of its length (see cost.predicted_speedup_finite), median.
        row["predicted_iid"] = statistics.median(timing_of(x["prompt"]).predict(row["alpha"], k, source_iterations=
                                                 x.get("source_iterations")) for x in rows)
        preds = [x["predicted_empirical"] for x in rows if x.get("predicted_empirical") is not None]
        row["predicted_empirical"] = statistics.median(preds) if preds else None
        if row["predicted_empirical"] is not None:
            row["miss_empirical"] = row["median_ratio"] - row["predicted_empirical"]
        local = [x["predicted_local"] for x in rows if x.get("predicted_local") is not None]
        if local:  # the calibration's costs set to the level the other arms paid around each run (lab.fit)
            row["predicted_local"] = statistics.median(local)
            row["miss_local"] = row["median_ratio"] - row["predicted_local"]
    return row


def _neighbours(runs: list[dict], run: dict) -> list[dict]:
    """The other arms' runs of `run`'s prompt and round: seconds from it, on the host as it was then."""
    return [x for x in runs if x is not run and x["prompt"] == run["prompt"] and x["round"] == run["round"]]


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


def _run_prediction(run: dict, timing: Timing | None) -> float | None:
    """The empirical prediction for one fixed-k run: its per-position acceptance, for a run of its length."""
    positions = reached(run["per_position"])
    if timing is None or not isinstance(run["k"], int) or not positions:
        return None
    return timing.predict(positions, run["k"], new_tokens=run["new_tokens"],
                          source_iterations=run.get("source_iterations"), limit=stop_limit(run))


def _judge(row: dict, runs: list[dict], overall: Verdict) -> None:
    """The cell's verdict (its spread, on top of what holds for the whole experiment) and, for a fixed k,
    its miss split into step costs, acceptance model and overhead (lab.fit)."""
    ratios = [x["ratio"] for x in runs if x["ratio"] is not None]
    label = f"k={row['k']}" + (f" on {row['prompt']}" if row.get("prompt") else "")
    row["spread"] = (row["max_ratio"] - row["min_ratio"]) if runs else None
    missed = []
    if isinstance(row["k"], int):
        paired = [(x, x["predicted_empirical"]) for x in runs if x.get("predicted_empirical") is not None]
        row["explained"] = explain_cell([x for x, _ in paired], row["k"], [p for _, p in paired]) if paired else None
        missed = [*check_prediction(label, row.get("miss_empirical"), row["explained"]),
                  *check_local_prediction(label, row.get("miss_local"))]
    row["trust"] = Verdict.of(overall, check_spread(label, ratios), missed).to_dict()


def _pooled_positions(rows: list[dict]) -> list[float]:
    """Median per-position acceptance over runs (positions never reached in a run are skipped)."""
    if not rows:
        return []
    width = max(len(x["per_position"]) for x in rows)
    out = []
    for i in range(width):
        vals = [x["per_position"][i] for x in rows if i < len(x["per_position"]) and x["per_position"][i] is not None]
        if not vals:
            break
        out.append(statistics.median(vals))
    return out


def sweep(pair, prompt_ids: Sequence[int], proposer_factory, ks: Sequence[int] = tuple(range(1, 9)), rounds: int = 2,
          max_new_tokens: int = 64, sampling: SamplingConfig = GREEDY, timing: Timing | None = None,
          adaptive: bool = True, min_confidence: float | None = None, name: str = "prompt",
          progress: Progress = None, plain_every: int = PLAIN_EVERY) -> dict:
    """k = 1..8 on one prompt: measured speed-up (adjacent runs) and predicted, break-even alpha, best k;
    with `adaptive`, the adaptive controller runs as one more arm of the same rounds. Without `timing`, it
    calibrates first, under `sampling`."""
    fixed = [k for k in ks if isinstance(k, int)]
    arms = [*ks, "adaptive"] if adaptive and "adaptive" not in ks else list(ks)
    n_max = (K_MAX if adaptive else max(fixed)) + 1  # adaptive may draft up to K_MAX: time verification that far
    # The progress bar's share of each phase, in target passes (the unit both phases spend their time in):
    # a calibration runs (warm-up + repeats) x lengths cycles of a draft and a pass; a run about one pass a token.
    cal_passes = 0 if timing is not None else 2 * (3 + 12) * len(pass_lengths(n_max))
    share = cal_passes / (cal_passes + rounds * len(bracketed(arms, plain_every)) * max_new_tokens)
    if timing is None:
        timing = calibrate(pair, prompt_ids, proposer_factory(), CalibrationPlan(n_max=n_max, sampling=sampling),
                           progress=(lambda f, m: tick(progress, share * f, m)) if progress else None)
    result = speed(pair, {name: prompt_ids}, proposer_factory, ks=arms, rounds=rounds,
                   max_new_tokens=max_new_tokens, sampling=sampling, timing=timing, min_confidence=min_confidence,
                   progress=(lambda f, m: tick(progress, share + (1 - share) * f, m)) if progress else None,
                   plain_every=plain_every)
    for row in result["table"]:
        if isinstance(row["k"], int):
            row["break_even_alpha"] = cost.break_even_alpha(row["k"], timing.c, timing.v, timing.overhead)
    positions = _pooled_positions([x for x in result["runs"] if x["k"] == max(fixed)])
    if positions and min_confidence is None:  # the per-position acceptance at the deepest k, through the model
        choice = cost.best_k(positions, timing.c, timing.v, k_max=max(fixed), overhead=timing.overhead)
        result["predicted_best_k"] = choice.k
    result["experiment"] = "sweep"
    return result
