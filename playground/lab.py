"""Experiments: timing calibration, acceptance, speed and k sweeps, built on the one loop.

Every experiment reuses `speculative_generate` / `plain_generate` and their records; nothing here
re-implements speculative decoding. Each returns a plain dict (JSON-ready) that records the
environment and the raw measurements, so a result can be re-read and re-plotted without re-running.

Speed is only ever compared in adjacent runs: plain and speculative runs alternate, in an order that
rotates from round to round, and ratios are taken within a round, then medians over rounds are quoted.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from . import cost
from .cached import CachedLM
from .clock import Clock
from .engine import plain_generate, speculative_generate
from .envinfo import environment
from .records import summarize
from .sampling import GREEDY, SamplingConfig

Progress = Callable[[float, str], None] | None


def _tick(progress: Progress, fraction: float, message: str) -> None:
    if progress is not None:
        progress(min(1.0, max(0.0, fraction)), message)


def _spread(xs: Sequence[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


@dataclass(frozen=True)
class Timing:
    """Step costs measured in one calibration: what the cost model needs (c, v(n) and the drafter's
    fixed cost per call)."""

    target_step_s: float  # median target pass over 1 new token, back to back as plain decoding runs
    verify_s: dict[int, float]  # median target pass over n new tokens right after a draft, n = 1..n_max
    draft_step_s: float  # median per-token cost of the drafter (slope of propose(k) time in k)
    context_tokens: int
    raw: dict = field(default_factory=dict)
    draft_call_s: float = 0.0  # what a propose() costs beyond k per-token steps (catching up, set-up)
    # A drafter with several proposal sources (the hybrid): the seconds per token and per call of each
    # source other than the model drafter timed above, e.g. {"lookup": (0.0, 0.0002)}.
    source_s: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def c(self) -> float:
        return self.draft_step_s / self.target_step_s

    @property
    def v(self) -> dict[int, float]:
        return {n: s / self.target_step_s for n, s in self.verify_s.items()}

    @property
    def overhead(self) -> float:
        """The drafter's fixed cost per iteration, in target steps."""
        return self.draft_call_s / self.target_step_s

    @property
    def source_costs(self) -> dict[str, tuple[float, float]]:
        """Per proposal source, (c, overhead) in target steps; "draft" is the model drafter."""
        out = {name: (step / self.target_step_s, call / self.target_step_s) for name, (step, call) in self.source_s.items()}
        if out:
            out.setdefault("draft", (self.c, self.overhead))
        return out

    def mixed(self, source_iterations: dict[str, int] | None) -> tuple[float, float]:
        """(c, overhead) averaged over the sources a run's proposing iterations came from."""
        costs = self.source_costs
        counts = {s: n for s, n in (source_iterations or {}).items() if s in costs and n > 0}
        if not costs or not counts:
            return self.c, self.overhead
        total = sum(counts.values())
        return (sum(costs[s][0] * n for s, n in counts.items()) / total,
                sum(costs[s][1] * n for s, n in counts.items()) / total)

    def predict(self, alpha_or_positions, k: int, new_tokens: int | None = None,
                source_iterations: dict[str, int] | None = None) -> float:
        """Predicted speed-up over plain decoding: iid alpha or per-position acceptance (empirical).
        With `new_tokens`, for a run of that length (its last iterations clipped as the loop clips them).
        With `source_iterations` ({source: proposing iterations}), a hybrid's cost is the mix of its sources'."""
        c, overhead = self.mixed(source_iterations)
        if new_tokens is not None:
            positions = ([alpha_or_positions] if isinstance(alpha_or_positions, (int, float))
                         else alpha_or_positions)
            return cost.predicted_speedup_finite(positions, k, c, self.v, new_tokens, overhead)
        if isinstance(alpha_or_positions, (int, float)):
            return cost.predicted_speedup(alpha_or_positions, k, c, self.v, overhead)
        return cost.predicted_speedup_empirical(alpha_or_positions, k, c, self.v, overhead)

    def to_dict(self) -> dict:
        return {
            "target_step_s": self.target_step_s,
            "verify_s": {str(n): s for n, s in self.verify_s.items()},
            "draft_step_s": self.draft_step_s,
            "draft_call_s": self.draft_call_s,
            "c": self.c,
            "overhead": self.overhead,
            "v": {str(n): x for n, x in self.v.items()},
            "context_tokens": self.context_tokens,
            "source_s": {name: list(x) for name, x in self.source_s.items()},
            "source_costs": {name: list(x) for name, x in self.source_costs.items()},
            "raw": self.raw,
        }


def calibrate(pair, prompt_ids: Sequence[int], proposer, n_max: int = 9, repeats: int = 12, warmup: int = 3,
              progress: Progress = None) -> Timing:
    """Time the target over n = 1..n_max new tokens after a real prompt, and the drafter per call and token.

    The two are timed in the alternation the loop has (draft, then a target pass, then both roll
    back), because on a CPU that shares its cores between two runtimes (torch's and llama.cpp's
    thread pools) each side runs slower right after the other than back to back: timing them apart
    predicted speed-ups 20-30% too high here. Every n gets the same context; the drafter alternates
    between propose(1) and propose(4), and its per-token cost is the slope, its fixed cost per call
    the rest of propose(1). A hybrid drafter is timed by its sources: its model drafter as above, its
    prompt lookup apart (a search of the context, no model), so that each source has its own cost.
    """
    from .proposers import LOOKUP_MAX, HybridProposer, RunContext, lookup

    clock = Clock.for_pair(pair)
    prompt = [int(t) for t in prompt_ids]
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed(prompt[:-1], last_only=True)
    base = len(lm)
    filler = prompt[-n_max:] if len(prompt) >= n_max else (prompt * n_max)[:n_max]
    ctx = RunContext(GREEDY, GREEDY.generator(pair.device), frozenset())
    hybrid = proposer if isinstance(proposer, HybridProposer) else None
    if hybrid is not None:
        proposer = hybrid.model
    proposer.begin(prompt, ctx)
    samples: dict[int, list[float]] = {n: [] for n in range(1, n_max + 1)}
    drafts: dict[int, list[float]] = {1: [], 4: []}
    total = (warmup + repeats) * n_max
    done = 0
    for rep in range(warmup + repeats):
        for n in range(1, n_max + 1):
            kd = 1 if (n + rep) % 2 else 4
            # Two unseen tokens, as after an iteration whose proposals were all accepted (the drafter
            # never ran its own last proposal, and the bonus token is new): what a call costs at high alpha.
            proposer.rollback(prompt[:-1])
            t0 = clock.now()
            proposer.propose(prompt, kd)
            t1 = clock.now()
            proposer.rollback(prompt)
            t2 = clock.now()
            lm.feed(filler[:n])
            t3 = clock.now()
            lm.crop(base)
            if rep >= warmup:
                samples[n].append(t3 - t2)
                drafts[kd].append(t1 - t0)
            done += 1
            _tick(progress, done / total, f"timing the target over {n} tokens and the drafter")
    # Plain decoding's step, timed as plain decoding runs: target passes back to back, nothing in
    # between. It is the unit of the cost model (what a token costs without speculation), and it is
    # cheaper than a pass right after the drafter ran (here by 5-8%), which the v(n) above include.
    plain = []
    for rep in range(warmup + repeats):
        t0 = clock.now()
        lm.feed(filler[:1])
        t1 = clock.now()
        lm.crop(base)
        if rep >= warmup:
            plain.append(t1 - t0)
    verify = {n: statistics.median(xs) for n, xs in samples.items()}
    one, four = statistics.median(drafts[1]), statistics.median(drafts[4])
    per_token = max(0.0, (four - one) / 3)
    source_s = {}
    if hybrid is not None:
        # A lookup's cost is its search, whatever k: one number per call (in the run it is made once per
        # iteration, for next_source, and reused by propose).
        searches = []
        for _ in range(warmup + repeats):
            t0 = clock.now()
            lookup(prompt, LOOKUP_MAX, hybrid.max_ngram, hybrid.min_ngram)
            searches.append(clock.now() - t0)
        source_s["lookup"] = (0.0, statistics.median(searches[warmup:]))
    return Timing(
        target_step_s=statistics.median(plain),
        verify_s=verify,
        draft_step_s=per_token,
        draft_call_s=max(0.0, one - per_token),
        source_s=source_s,
        context_tokens=len(prompt),
        raw={"target_pass_s": {str(n): xs for n, xs in samples.items()}, "plain_step_s": plain,
             "draft_propose_s": {str(k): xs for k, xs in drafts.items()},
             "target_spread": {str(n): _spread(xs) for n, xs in samples.items()}},
    )


# --- speed: plain against speculative, in adjacent runs ----------------------------------------------


def _run_plain(pair, prompt, sampling, max_new):
    return summarize(plain_generate(pair, prompt, sampling=sampling, max_new_tokens=max_new))


def _run_spec(pair, prompt, proposer_factory, k, sampling, max_new, timing=None, min_confidence=None, memory=None):
    from .adaptive import CostCurve, make_controller

    curve = CostCurve.from_timing(timing) if timing is not None else None
    controller = make_controller(k, curve, memory=memory)
    return summarize(speculative_generate(pair, prompt, proposer=proposer_factory(), k=controller, sampling=sampling,
                                          max_new_tokens=max_new, record_probs=False, min_confidence=min_confidence))


def speed(pair, prompts: dict[str, Sequence[int]], proposer_factory, ks: Sequence[int | str] = (1, 2, 3, 4, 6),
          rounds: int = 3, max_new_tokens: int = 64, sampling: SamplingConfig = GREEDY,
          timing: Timing | dict[str, Timing] | None = None,
          drift_warning: float = 0.15, min_confidence: float | None = None, progress: Progress = None) -> dict:
    """Measured speed-up of speculative over plain decoding per prompt and k, with the prediction beside it.

    In each round, for each prompt, plain and every k run back to back in an order that rotates from
    round to round; each speculative run is divided by the plain run of the same prompt and round.
    Quoted: the median ratio over rounds (and prompts). A prompt whose plain speed moved by more than
    `drift_warning` between rounds is flagged: its ratios are still adjacent, but read them with care.
    A k may also be "adaptive" (needs `timing`) or "heuristic" (transformers' schedule), see adaptive.py.
    `timing`: one calibration for every prompt, or one per prompt name (a longer context costs more per
    step, on both sides, so per-prompt calibrations predict better).
    """
    timing_of = (lambda name: timing.get(name)) if isinstance(timing, dict) else (lambda name: timing)
    arms = ["plain", *[f"k={k}" for k in ks]]
    # A schedule's state carries from run to run of its arm (see adaptive.py), as it would from one call
    # of an agent to the next on the same pair and drafter.
    memories: dict[str, dict] = {arm: {} for arm in arms}
    runs = []
    total = rounds * len(prompts) * len(arms)
    done = 0
    for r in range(rounds):
        for p_index, (name, prompt) in enumerate(prompts.items()):
            order = _rotated(arms, r + p_index)
            results = {}
            for arm in order:
                if arm == "plain":
                    s = _run_plain(pair, prompt, sampling, max_new_tokens)
                else:
                    setting = arm[2:]
                    s = _run_spec(pair, prompt, proposer_factory, int(setting) if setting.isdigit() else setting,
                                  sampling, max_new_tokens, timing_of(name), min_confidence, memories[arm])
                results[arm] = s
                done += 1
                _tick(progress, done / total, f"round {r + 1}/{rounds}, {name}: {arm}")
            for k in ks:
                s, p = results[f"k={k}"], results["plain"]
                runs.append({
                    "round": r, "prompt": name, "k": k, "order": order,
                    "plain_tokens_per_s": p.tokens_per_s, "spec_tokens_per_s": s.tokens_per_s,
                    "ratio": s.tokens_per_s / p.tokens_per_s if p.tokens_per_s else None,
                    "e2e_ratio": _e2e(s) / _e2e(p) if _e2e(p) else None,
                    "alpha": s.alpha, "per_position": list(s.per_position_acceptance),
                    "tokens_per_pass": s.tokens_per_pass, "new_tokens": s.new_tokens,
                    "plain_new_tokens": p.new_tokens,
                    "draft_s": s.draft_s, "verify_s": s.verify_s, "rollback_s": s.rollback_s,
                    "decode_s": s.decode_s, "plain_decode_s": p.decode_s,
                    "k_values": {str(kk): n for kk, n in s.k_values.items()},
                    "source_iterations": s.source_iterations,
                    "prefill_s": s.prefill_s, "plain_prefill_s": p.prefill_s,
                })
    table = [_speed_row(k, [x for x in runs if x["k"] == k], timing_of) for k in ks]
    by_prompt = [{"prompt": name, **_speed_row(k, [x for x in runs if x["k"] == k and x["prompt"] == name], timing_of)}
                 for name in prompts for k in ks]
    drift = {}
    for name in prompts:
        plain_speeds = [x["plain_tokens_per_s"] for x in runs if x["prompt"] == name and x["k"] == ks[0]]
        lo, hi = min(plain_speeds), max(plain_speeds)
        drift[name] = {"plain_tokens_per_s": plain_speeds, "spread": (hi - lo) / hi if hi else 0.0,
                       "flagged": hi > 0 and (hi - lo) / hi > drift_warning}
    best = _best_fixed(table)
    return {"experiment": "speed", "environment": environment(pair), "ks": list(ks), "rounds": rounds,
            "max_new_tokens": max_new_tokens, "sampling": sampling.describe(), "prompts": list(prompts),
            "min_confidence": min_confidence,
            "table": table, "best_k": best["k"], "by_prompt": by_prompt, "best_k_by_prompt": {
                name: _best_fixed([r for r in by_prompt if r["prompt"] == name])["k"] for name in prompts},
            "drift": drift, "runs": runs,
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
           "n": len(rows), "alpha": statistics.median(alphas) if alphas else None}
    if isinstance(k, str):  # adaptive / heuristic: k varies by iteration; show how it was spread
        spread: dict[str, int] = {}
        for x in rows:
            for kk, n in x.get("k_values", {}).items():
                spread[kk] = spread.get(kk, 0) + n
        row["k_values"] = dict(sorted(spread.items(), key=lambda kv: int(kv[0])))
    elif rows and timing_of(rows[0]["prompt"]) is not None and row["alpha"] is not None:
        # iid: the seed chapter's steady-state formula from the median alpha. empirical: each run's
        # per-position acceptance, for a run of its length (see cost.predicted_speedup_finite), median.
        row["predicted_iid"] = statistics.median(timing_of(x["prompt"]).predict(row["alpha"], k, source_iterations=
                                                 x.get("source_iterations")) for x in rows)
        preds = []
        for x in rows:
            positions = _reached(x["per_position"])
            if positions:
                preds.append(timing_of(x["prompt"]).predict(positions, k, new_tokens=x["new_tokens"],
                                                            source_iterations=x.get("source_iterations")))
        row["predicted_empirical"] = statistics.median(preds) if preds else None
        if row["predicted_empirical"] is not None:
            row["miss_empirical"] = row["median_ratio"] - row["predicted_empirical"]
    return row


def _rotated(arms: list[str], shift: int) -> list[str]:
    """The arms in an order that moves by one from round to round (and prompt to prompt), so drift on
    a shared machine does not always hit the same arm."""
    shift %= len(arms)
    return arms[shift:] + arms[:shift]


def _reached(per_position: Sequence[float | None]) -> list[float]:
    """Per-position acceptance up to the first position never reached."""
    out = []
    for a in per_position:
        if a is None:
            break
        out.append(a)
    return out


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


def now_stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def set_threads(threads: int | None) -> int:
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def sweep(pair, prompt_ids: Sequence[int], proposer_factory, ks: Sequence[int] = tuple(range(1, 9)), rounds: int = 2,
          max_new_tokens: int = 64, sampling: SamplingConfig = GREEDY, timing: Timing | None = None,
          adaptive: bool = True, min_confidence: float | None = None, name: str = "prompt",
          progress: Progress = None) -> dict:
    """k = 1..8 on one prompt: measured speed-up (adjacent runs) and predicted, break-even alpha, best k;
    with `adaptive`, the adaptive controller runs as one more arm of the same rounds."""
    from .engine import K_MAX

    fixed = [k for k in ks if isinstance(k, int)]
    if timing is None:  # adaptive may draft up to K_MAX: time verification that far
        timing = calibrate(pair, prompt_ids, proposer_factory(), n_max=(K_MAX if adaptive else max(fixed)) + 1,
                           progress=(lambda f, m: _tick(progress, 0.2 * f, m)) if progress else None)
    arms = [*ks, "adaptive"] if adaptive and "adaptive" not in ks else list(ks)
    result = speed(pair, {name: prompt_ids}, proposer_factory, ks=arms, rounds=rounds,
                   max_new_tokens=max_new_tokens, sampling=sampling, timing=timing, min_confidence=min_confidence,
                   progress=(lambda f, m: _tick(progress, 0.2 + 0.8 * f, m)) if progress else None)
    for row in result["table"]:
        if isinstance(row["k"], int):
            row["break_even_alpha"] = cost.break_even_alpha(row["k"], timing.c, timing.v, timing.overhead)
    positions = _pooled_positions([x for x in result["runs"] if x["k"] == max(fixed)])
    if positions:  # the per-position acceptance seen at the deepest k, through the empirical model
        choice = cost.best_k(positions, timing.c, timing.v, k_max=max(fixed), overhead=timing.overhead)
        result["predicted_best_k"] = choice.k
    result["experiment"] = "sweep"
    return result


# --- acceptance: alpha per output shape and k --------------------------------------------------------


def acceptance(pair, prompts: dict[str, tuple[str, Sequence[int], int]], proposer_factory,
               ks: Sequence[int] = (1, 2, 4, 8), sampling: SamplingConfig = GREEDY, progress: Progress = None) -> dict:
    """For each prompt (name -> (kind, ids, max_new_tokens)) and k: alpha, per-position acceptance, the
    accepted-length histogram and tokens per target pass, measured and from the iid and empirical models.
    Rows pooled by kind come from the pooled iteration records, not from averaging ratios."""
    from .records import Iteration

    rows, by_kind = [], {}
    total, done = len(prompts) * len(ks), 0
    for name, (kind, ids, max_new) in prompts.items():
        for k in ks:
            recs = list(speculative_generate(pair, ids, proposer=proposer_factory(), k=k, sampling=sampling,
                                             max_new_tokens=max_new, record_probs=False))
            its = [r for r in recs if isinstance(r, Iteration)]
            rows.append({"prompt": name, "kind": kind, "k": k, **_acceptance_stats(its, k)})
            by_kind.setdefault((kind, k), []).extend(its)
            done += 1
            _tick(progress, done / total, f"{name}: k={k}")
    pooled = [{"kind": kind, "k": k, **_acceptance_stats(its, k)} for (kind, k), its in sorted(by_kind.items())]
    return {"experiment": "acceptance", "environment": environment(pair), "ks": list(ks),
            "sampling": sampling.describe(), "rows": rows, "pooled": pooled}


def _acceptance_stats(iterations, k: int) -> dict:
    # Iterations whose k was cut short by the length limit would bias the per-k statistics: keep full-k ones.
    full = [it for it in iterations if it.k == k and it.proposed]
    s = summarize(full) if full else None
    if s is None or s.alpha is None:
        return {"iterations": 0, "alpha": None}
    positions = [a for a in s.per_position_acceptance if a is not None]
    return {
        "iterations": len(full),
        "alpha": s.alpha,
        "per_position": list(s.per_position_acceptance),
        "histogram": {str(n): c for n, c in s.accepted_length_histogram.items()},
        "tokens_per_pass": sum(it.n_accepted + 1 for it in full) / len(full),
        "tokens_per_pass_iid": cost.expected_tokens(s.alpha, k),
        "tokens_per_pass_empirical": cost.expected_tokens_empirical(positions, k) if positions else None,
    }


# --- divergence: is a greedy mismatch a near-tie or a bug? ----------------------------------------------


def _spacing(value: float, dtype: torch.dtype) -> float:
    """Distance to the next representable number at `value` in `dtype` (one unit in the last place)."""
    t = torch.tensor(abs(value), dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(float("inf"), dtype=dtype)) - t)


def divergence(pair, prompts: dict[str, Sequence[int]], proposer_factory, ks: Sequence[int] = (1, 2, 3, 4, 6),
               max_new_tokens: int = 64, multi: int = 5, progress: Progress = None) -> dict:
    """Greedy speculative against plain greedy. At each first difference, recompute the two competing
    tokens' logits three ways over plain decoding's context: prefill + one-token step, prefill + a
    `multi`-token pass (what verification does), and one full prefill; compare their gap with the
    dtype's spacing at that magnitude and with how much the three recomputations disagree."""
    from .records import Iteration, Step

    cases, checked = [], 0
    total, done = len(prompts) * len(ks), 0
    for name, ids in prompts.items():
        plain = [r.token for r in plain_generate(pair, ids, max_new_tokens=max_new_tokens) if isinstance(r, Step)]
        for k in ks:
            spec = [t for r in speculative_generate(pair, ids, proposer=proposer_factory(), k=k,
                                                    max_new_tokens=max_new_tokens, record_probs=False)
                    if isinstance(r, Iteration) for t in r.emitted]
            checked += 1
            done += 1
            _tick(progress, done / total, f"{name}: k={k}")
            pos = next((i for i, (a, b) in enumerate(zip(plain, spec)) if a != b), None)
            if pos is None:
                continue
            cases.append({"prompt": name, "k": k, "position": pos, "plain_token": plain[pos],
                          "spec_token": spec[pos], **_recompute(pair, list(ids) + plain[:pos], plain[pos], spec[pos],
                                                                multi)})
    for case in cases:
        if pair.tokenizer is not None:
            case["plain_text"] = pair.tokenizer.decode([case["plain_token"]])
            case["spec_text"] = pair.tokenizer.decode([case["spec_token"]])
    return {"experiment": "divergence", "environment": environment(pair), "runs": checked,
            "diverged": len(cases), "cases": cases}


def _recompute(pair, context: list[int], a: int, b: int, multi: int) -> dict:
    ways = {}
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed(context[:-1], last_only=True)
    ways["prefill+1"] = lm.feed(context[-1:])[-1]
    m = min(multi, len(context))
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    lm.feed(context[:-m], last_only=True)
    ways[f"prefill+{m}"] = lm.feed(context[-m:])[-1]
    lm = CachedLM(pair.target, pair.device, pair.vocab_size)
    ways["full prefill"] = lm.feed(context, last_only=True)[-1]
    gaps = {w: float(row[a] - row[b]) for w, row in ways.items()}
    top = max(float(row.max()) for row in ways.values())
    spacing = _spacing(top, pair.dtype)
    noise = max(abs(float(ways[x][t] - ways[y][t])) for x in ways for y in ways for t in (a, b))
    winners = {w: ("plain" if g > 0 else "speculative" if g < 0 else "tie") for w, g in gaps.items()}
    near_tie = len(set(winners.values())) > 1 or max(abs(g) for g in gaps.values()) <= max(8 * spacing, 2 * noise)
    return {"gaps": gaps, "winners": winners, "top_logit": top, "dtype_spacing": spacing,
            "recompute_disagreement": noise, "verdict": "near-tie" if near_tie else "bug"}


# --- distribution: does each rule keep the target's first-token distribution on real models? -----------


def distribution(pair, prompts: dict[str, Sequence[int]], proposer_factory, sampling: SamplingConfig | None = None,
                 draws: int = 20_000, seeds: Sequence[int] = (0, 1), top: int = 60, progress: Progress = None) -> dict:
    """For each context: the target's next-token distribution p and the drafter's q (as sampled), then
    `draws` first tokens through each rule (exact and the two wrong ones), compared with p by chi-square
    over the `top` most likely tokens plus one pooled cell. The total-variation distance between p and q
    is reported per context: where it is small, no rule can be told apart (the test has no power)."""
    from scipy.stats import chisquare

    from .proposers import RunContext
    from .rules import SAMPLING_RULES
    from .sampling import probabilities

    sampling = sampling or SamplingConfig(do_sample=True)
    results = []
    total, done = len(prompts) * len(seeds) * len(SAMPLING_RULES), 0
    for name, ids in prompts.items():
        ids = [int(t) for t in ids]
        lm = CachedLM(pair.target, pair.device, pair.vocab_size)
        p = probabilities(lm.feed(ids, last_only=True)[-1:], sampling)[0]
        proposer = proposer_factory()
        proposer.begin(ids, RunContext(sampling, sampling.generator(pair.device), frozenset()))
        q_rows = proposer.propose(ids, 1).q
        q = q_rows[0] if q_rows is not None else None
        tv = 0.5 * float((p - q).abs().sum()) if q is not None else None
        cells = torch.argsort(p, descending=True)[:top]
        expected = torch.cat([p[cells], (1 - p[cells].sum()).clamp(min=0).unsqueeze(0)]).double().cpu().numpy()
        rows = torch.stack([p, p])
        for seed in seeds:
            for rule_name, rule in SAMPLING_RULES.items():
                gen = torch.Generator(device=pair.device).manual_seed(seed)
                if q is not None:
                    xs = torch.multinomial(q, draws, replacement=True, generator=gen).tolist()
                else:
                    xs = [int(torch.argmax(p))] * draws  # a deterministic proposer proposes one token
                counts = torch.zeros(p.shape[0], dtype=torch.long)
                qs = q.unsqueeze(0) if q is not None else None
                for x in xs:
                    v = rule([x], rows, qs, gen)
                    counts[x if v.n_accepted == 1 else v.token] += 1
                observed = torch.cat([counts[cells.cpu()], (draws - counts[cells.cpu()].sum()).unsqueeze(0)]).numpy()
                exp = expected * draws
                keep = exp > 0
                pvalue = float(chisquare(observed[keep], exp[keep] * observed[keep].sum() / exp[keep].sum()).pvalue)
                results.append({"prompt": name, "seed": seed, "rule": rule_name, "p_value": pvalue,
                                "tv_distance_p_q": tv, "draws": draws})
                done += 1
                _tick(progress, done / total, f"{name}: seed {seed}, {rule_name}")
    summary = {}
    for rule_name in SAMPLING_RULES:
        ps = [r["p_value"] for r in results if r["rule"] == rule_name]
        summary[rule_name] = {"tests": len(ps), "below_0.01": sum(x < 0.01 for x in ps),
                              "below_0.05": sum(x < 0.05 for x in ps), "min_p": min(ps)}
    return {"experiment": "distribution", "environment": environment(pair), "sampling": sampling.describe(),
            "draws": draws, "seeds": list(seeds), "results": results, "summary": summary,
            "note": "p-values of the exact rule should look uniform; the wrong rules' should be tiny wherever "
                    "tv_distance_p_q is not small."}


# --- peers: our loop against transformers' own assisted generation, side by side ----------------------


def peers(pair, prompts: dict[str, Sequence[int]], k: int = 4, rounds: int = 3, max_new_tokens: int = 64,
          max_ngram: int = 3, progress: Progress = None) -> dict:
    """Our loop against transformers' `generate` on the same pair, prompts, k and greedy decoding.

    Arms: plain generate; generate(assistant_model=draft) with k constant and with the "heuristic"
    schedule (its transient variant, so no state leaks between runs); generate(prompt_lookup_num_tokens=k);
    and ours: plain, draft model at k, prompt lookup at k. `generate` cannot report its prefill apart,
    so every arm here is timed end to end (prefill included), and ratios are to plain `generate` in the
    same round. The order of arms rotates from round to round.
    """
    from .proposers import DraftModelProposer, PromptLookupProposer
    from .records import Iteration, Step

    clock = Clock.for_pair(pair)
    eos = sorted(pair.eos_ids)
    gen_kwargs = dict(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos or None,
                      pad_token_id=eos[0] if eos else 0)

    def hf(ids, **extra):
        x = torch.tensor([list(ids)], device=pair.device)
        with torch.inference_mode():
            out = pair.target.generate(x, attention_mask=torch.ones_like(x), **gen_kwargs, **extra)
        return out[0, x.shape[1]:].tolist()

    def ours(ids, proposer=None, min_confidence=None):
        if proposer is None:
            recs = list(plain_generate(pair, ids, max_new_tokens=max_new_tokens))
            return [r.token for r in recs if isinstance(r, Step)]
        recs = list(speculative_generate(pair, ids, proposer=proposer, k=k, max_new_tokens=max_new_tokens,
                                         record_probs=False, min_confidence=min_confidence))
        return [t for r in recs if isinstance(r, Iteration) for t in r.emitted]

    arms: dict[str, Callable] = {"hf plain": lambda ids: hf(ids)}
    if pair.draft is not None:
        # transformers stops drafting after a token the assistant gave less than its confidence threshold
        # (default 0.4); a threshold of 0 reads as unset and leaves that default on (measured: variable
        # candidate lengths, 85 draft passes where k = 4 would take 136). 1e-9 is "never stop"; each
        # transformers arm has our arm with the same policy beside it.
        arms[f"hf assisted k={k}"] = lambda ids: hf(ids, assistant_model=pair.draft, num_assistant_tokens=k,
                                                     num_assistant_tokens_schedule="constant",
                                                     assistant_confidence_threshold=1e-9)
        arms[f"hf assisted k={k} conf 0.4"] = lambda ids: hf(ids, assistant_model=pair.draft, num_assistant_tokens=k,
                                                              num_assistant_tokens_schedule="constant",
                                                              assistant_confidence_threshold=0.4)
        arms["hf assisted heuristic"] = lambda ids: hf(ids, assistant_model=pair.draft, num_assistant_tokens=k,
                                                        num_assistant_tokens_schedule="heuristic_transient")
    arms[f"hf prompt-lookup k={k}"] = lambda ids: hf(ids, prompt_lookup_num_tokens=k, max_matching_ngram_size=max_ngram)
    arms["ours plain"] = lambda ids: ours(ids)
    if pair.draft is not None:
        arms[f"ours draft k={k}"] = lambda ids: ours(ids, DraftModelProposer(pair.draft, pair.device, pair.vocab_size))
        arms[f"ours draft k={k} conf 0.4"] = lambda ids: ours(
            ids, DraftModelProposer(pair.draft, pair.device, pair.vocab_size), min_confidence=0.4)
    arms[f"ours prompt-lookup k={k}"] = lambda ids: ours(ids, PromptLookupProposer(max_ngram))
    from .models import EMBEDDED_NAME

    if pair.target_name == EMBEDDED_NAME:  # our fastest drafter here, which transformers cannot run
        from .llamacpp import llama_cpp_available
        from .proposers import make_proposer

        if llama_cpp_available()[0]:
            arms[f"ours llama.cpp k={k}"] = lambda ids: ours(ids, make_proposer(pair, "llama.cpp"))

    names = list(arms)
    for ids in prompts.values():  # warm-up: one untimed pass of every arm
        for fn in arms.values():
            fn(ids)
        break
    runs = []
    total, done = rounds * len(prompts) * len(names), 0
    for r in range(rounds):
        for p_index, (pname, ids) in enumerate(prompts.items()):
            order = _rotated(names, r + p_index)
            timed = {}
            for arm in order:
                t0 = clock.now()
                toks = arms[arm](ids)
                t1 = clock.now()
                timed[arm] = (len(toks), t1 - t0, toks)
                done += 1
                _tick(progress, done / total, f"round {r + 1}/{rounds}, {pname}: {arm}")
            base_n, base_s, base_toks = timed["hf plain"]
            for arm, (n, s, toks) in timed.items():
                runs.append({"round": r, "prompt": pname, "arm": arm, "tokens": n, "seconds": s,
                             "tokens_per_s": n / s, "ratio_to_hf_plain": (n / s) / (base_n / base_s),
                             "same_output_as_hf_plain": toks == base_toks})
    table = []
    for arm in names:
        rows = [x for x in runs if x["arm"] == arm]
        ratios = [x["ratio_to_hf_plain"] for x in rows]
        table.append({"arm": arm, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
                      "max_ratio": max(ratios), "median_tokens_per_s": statistics.median(x["tokens_per_s"] for x in rows),
                      "outputs_equal": sum(x["same_output_as_hf_plain"] for x in rows), "n": len(rows)})
    # The goal this benchmark checks: our loop against transformers' assisted generation with the same
    # draft model and k, ratio taken within each round and prompt.
    def head_to_head(ours_arm, hf_arm):
        xs = []
        for r in range(rounds):
            for pname in prompts:
                by = {x["arm"]: x for x in runs if x["round"] == r and x["prompt"] == pname}
                a, b = by.get(ours_arm), by.get(hf_arm)
                if a and b:
                    xs.append(a["tokens_per_s"] / b["tokens_per_s"])
        return _spread(xs) if xs else None

    vs_assisted = head_to_head(f"ours draft k={k}", f"hf assisted k={k}")
    vs_assisted_conf = head_to_head(f"ours draft k={k} conf 0.4", f"hf assisted k={k} conf 0.4")
    return {"experiment": "peers", "environment": environment(pair), "k": k, "rounds": rounds,
            "ours_vs_hf_assisted": vs_assisted, "ours_vs_hf_assisted_conf": vs_assisted_conf,
            "max_new_tokens": max_new_tokens, "timed": "end to end, prefill included", "table": table, "runs": runs}
