"""What a calibration times, as the loop runs it: the target's pass over n new tokens right after the drafter's
proposal, and plain decoding's step, under the run's decoding (lab.calibration.calibrate puts them together)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..core.clock import Clock
from ..core.proposal import RunContext
from ..core.sampling import SamplingConfig, choose, probabilities
from ..core.static import target_lm
from ..results.calibration import Spread, TimingSamples
from .common import Progress, tick


def target_pass(lm, ids: Sequence[int], sampling: SamplingConfig) -> None:
    """A verifying pass as speculative_generate makes it: the target over the tokens, then, when sampling, the
    distributions over its rows (warpers and softmax; with top-p a sort over the vocabulary). The acceptance
    rule that follows in the loop (a few comparisons and at most one draw) is left out: it is small."""
    logits = lm.feed(ids)
    if not sampling.greedy:
        probabilities(logits, sampling)


def plain_step(lm, ids: Sequence[int], sampling: SamplingConfig, generator) -> None:
    """A step as plain_generate makes it: the target over one token, then, when sampling, the draw (`choose`:
    the warped distribution and a multinomial). Greedy's arg-max is left out, as it always was: it is small."""
    logits = lm.feed(ids)
    if not sampling.greedy:
        choose(logits[-1], sampling, generator)


class CalibrationBench:
    """What a calibration times: the target's forward as the loop runs it (static and graphed on CUDA) over the
    prompt, and the model drafter begun on the prompt under the plan's sampling."""

    def __init__(self, pair, prompt_ids: Sequence[int], drafter, n_max: int, sampling: SamplingConfig):
        self.clock = Clock.for_pair(pair)
        self.prompt = [int(t) for t in prompt_ids]
        self.sampling, self.drafter = sampling, drafter
        self.lm = target_lm(pair, len(self.prompt) + n_max)
        self.lm.feed(self.prompt[:-1], last_only=True)
        self.base = len(self.lm)
        self.filler = self.prompt[-n_max:] if len(self.prompt) >= n_max else (self.prompt * n_max)[:n_max]
        self.ctx = RunContext(sampling, sampling.generator(pair.device), frozenset())
        drafter.begin(self.prompt, self.ctx)

    def draft_then_pass(self, n: int, kd: int) -> tuple[float, float]:
        """(seconds of propose(kd), of the target's pass over n tokens right after), both rolled back. Two
        unseen tokens before the proposal, as after an iteration whose proposals were all accepted (the drafter
        never ran its own last proposal, and the bonus token is new): what a call costs at high alpha."""
        clock, prompt = self.clock, self.prompt
        self.drafter.rollback(prompt[:-1])
        t0 = clock.now()
        self.drafter.propose(prompt, kd)
        t1 = clock.now()
        self.drafter.rollback(prompt)
        t2 = clock.now()
        target_pass(self.lm, self.filler[:n], self.sampling)
        t3 = clock.now()
        self.lm.crop(self.base)
        return t1 - t0, t3 - t2

    def plain_step(self) -> float:
        """Plain decoding's step, timed as plain decoding runs: target passes back to back, nothing in between
        (the first of two follows the drafter and is not timed). It is the unit of the cost model (what a token
        costs without speculation), and it is cheaper than a pass right after the drafter ran, which the v(n)
        include. Timed once in every repetition, beside the passes, so that the unit sees the machine the passes
        saw (timed in one burst after them on a shared host, it read v(1) as 0.79 and predictions missed by 0.85)."""
        plain_step(self.lm, self.filler[:1], self.sampling, self.ctx.generator)
        self.lm.crop(self.base)
        t0 = self.clock.now()
        plain_step(self.lm, self.filler[:1], self.sampling, self.ctx.generator)
        unit = self.clock.now() - t0
        self.lm.crop(self.base)
        return unit


def time_cycles(bench: CalibrationBench, lengths: Sequence[int], warmup: int, repeats: int,
                progress: Progress) -> TimingSamples:
    """`warmup` untimed cycles, then `repeats` timed ones: in each, every pass length after a propose(1) or propose(4) (alternating by length and
    cycle), then a plain step. The samples of the timed cycles, and each over its own cycle's plain step (see
    _paired)."""
    passes: dict[int, list[float]] = {n: [] for n in lengths}
    pass_ratio: dict[int, list[float]] = {n: [] for n in lengths}
    drafts: dict[int, list[float]] = {1: [], 4: []}
    draft_ratio: dict[int, list[float]] = {1: [], 4: []}
    plain: list[float] = []
    total = (warmup + repeats) * len(lengths)
    for rep in range(warmup + repeats):
        timed, proposals = {}, []
        for i, n in enumerate(lengths):
            kd = 1 if (n + rep) % 2 else 4
            proposed, timed[n] = bench.draft_then_pass(n, kd)
            proposals.append((kd, proposed))
            tick(progress, (rep * len(lengths) + i + 1) / total, f"timing the target over {n} tokens and the drafter")
        unit = bench.plain_step()
        if rep < warmup:
            continue
        plain.append(unit)
        for n, x in timed.items():
            passes[n].append(x)
            pass_ratio[n].append(x / unit)
        for kd, x in proposals:
            drafts[kd].append(x)
            draft_ratio[kd].append(x / unit)
    return TimingSamples(target_pass_s=passes, plain_step_s=plain, draft_propose_s=drafts, pass_ratio=pass_ratio,
                         draft_ratio=draft_ratio, target_spread={n: Spread.of(xs) for n, xs in passes.items()})


def search_seconds(bench: CalibrationBench, hybrid, warmup: int, repeats: int) -> float:
    """A lookup's (or the suffix tree's) cost is its search, whatever k: one number per call (in the run it is
    made once per iteration, for next_source, and reused by propose)."""
    search, searches = hybrid.searcher(bench.prompt, bench.ctx), []
    for _ in range(warmup + repeats):
        t0 = bench.clock.now()
        search()
        searches.append(bench.clock.now() - t0)
    return statistics.median(searches[warmup:])
