"""The distribution actually sampled from.

Temperature, top-k and top-p are transformers' own logits warpers, applied in the same way to the
target's and the draft's logits: the exact acceptance rule is only exact for the distributions that
are really sampled, so both sides must be warped identically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from ..errors import PlaygroundError


@dataclass(frozen=True)
class SamplingConfig:
    """Greedy decoding (`do_sample=False`) or sampling with temperature / top-k / top-p.

    top_k = 0 and top_p = 1.0 switch those filters off. The seed drives one `torch.Generator`
    per run, so a run is reproducible for a fixed configuration."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.do_sample, bool):
            raise PlaygroundError(f"do_sample must be true or false, got {self.do_sample!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise PlaygroundError(f"seed must be an integer, got {self.seed!r}")
        if not 0 <= self.seed < 2**63:
            raise PlaygroundError(f"seed must be between 0 and 2**63 - 1, got {self.seed}")
        if not self.do_sample:
            return
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise PlaygroundError(
                f"temperature must be a finite number > 0 when sampling, got {t!r} (use greedy decoding for "
                "temperature 0)"
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise PlaygroundError(f"top-k must be an integer >= 0 (0 switches it off), got {self.top_k!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or not 0 < p <= 1:
            raise PlaygroundError(f"top-p must be in (0, 1] (1 switches it off), got {p!r}")

    @property
    def greedy(self) -> bool:
        return not self.do_sample

    def describe(self) -> str:
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k={self.top_k}")
        if self.top_p < 1:
            parts.append(f"top-p={self.top_p:g}")
        return "sample " + " ".join(parts) + f" seed={self.seed}"

    def timing_label(self) -> str:
        """The decoding as a step's cost depends on it: `describe()` without the seed ("greedy", "sample T=0.7
        top-p=0.9"). A calibration (lab.calibration.Timing.sampling) is labelled with it: the seed changes which
        token is drawn, not what the warpers, softmax and draw cost, so one calibration serves every seed."""
        return self.describe().rsplit(" seed=", 1)[0]

    def warpers(self) -> LogitsProcessorList:
        procs = LogitsProcessorList()
        if self.greedy:
            return procs
        if self.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(self.temperature)))
        if self.top_k:
            procs.append(TopKLogitsWarper(int(self.top_k)))
        if self.top_p < 1.0:
            procs.append(TopPLogitsWarper(float(self.top_p)))
        return procs

    def generator(self, device: torch.device | str = "cpu") -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed)


GREEDY = SamplingConfig()


def probabilities(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Rows of logits [n, V] -> the distributions sampled from [n, V], in float32.

    For greedy decoding this is the plain softmax (temperature 1), used only for display."""
    scores = logits.float()
    warpers = sampling.warpers()
    if warpers:
        # These warpers look only at the scores; the input_ids argument is a placeholder of the right batch size.
        dummy = torch.zeros((scores.shape[0], 1), dtype=torch.long, device=scores.device)
        scores = warpers(dummy, scores)
    return torch.softmax(scores, dim=-1)


def choose(logits_row: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> int:
    """Pick the next token from one row of logits: the arg-max, or a draw from the warped distribution."""
    if sampling.greedy:
        return int(torch.argmax(logits_row))
    return draw(probabilities(logits_row.unsqueeze(0), sampling)[0], generator)


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One index drawn from a vector of non-negative weights (a distribution, or a residual not yet normalised):
    the first index whose running sum exceeds u * total, u uniform in [0, 1), sums in float64; a zero weight
    is never drawn.

    By hand rather than `torch.multinomial(probs, 1)`, which on the CPU took 1.9 ms a draw over SmolLM2's
    49,152 tokens against 0.08 ms for this (Intel Xeon, 2 threads, torch 2.13): with sampling, every drafted
    token and every iteration draws once, beside a draft step of ~10 ms and a target step of ~35 ms."""
    return int(draw_tensor(probs, generator))


def draw_tensor(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`draw`'s index as a 0-d tensor on the device of `probs`, read by no host (a graphed draft feeds it back)."""
    cdf = torch.cumsum(probs, 0, dtype=torch.float64)
    u = torch.rand(1, generator=generator, dtype=torch.float64, device=probs.device) * cdf[-1:]
    # u * total can round up to the total itself: then the last index with weight, never a zero one after it
    last = torch.searchsorted(cdf, cdf[-1:])
    return torch.minimum(torch.searchsorted(cdf, u, right=True), last)[0]
