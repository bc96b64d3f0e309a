"""Which matrix kernels a CPU model's linear layers run on: BLAS (torch's default; MKL in the x86 wheels) or
oneDNN. "auto" times both on the loaded model and keeps the faster, because which wins depends on the CPU.

Why this exists: on a 2-core AMD EPYC MKL's fp32 GEMM with a few rows took the embedded target's pass over 2 and 3
tokens to 1.65x and 2.04x a one-token step, so small k could not pay and the calibrated v(n) was not monotone;
oneDNN's inner product on the same weights stayed near one step (docs/results.md, "Kernels: BLAS against oneDNN";
scripts/bench_kernels.py). The logits differ by about 1e-4 (another summation order), as between batch shapes.

Plain and speculative runs use the same kernels (they share the model), so every ratio stays like for like; the
choice and the probe's timings travel with every result (`ModelPair.describe().kernels`).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..core.cached import CachedLM
from ..errors import PlaygroundError

KERNELS = ("auto", "blas", "onednn")
KERNELS_ENV = "PLAYGROUND_KERNELS"
# auto keeps BLAS (torch's default) unless oneDNN is at least this much faster over the probe's passes.
MARGIN = 0.05
PROBE_SIZES = (1, 5)  # a plain step and a k = 4 verification
PROBE_CONTEXT = 64
PROBE_ROUNDS = 3


def resolve_kernels(kernels: str | None, env=None) -> str:
    """`kernels`, else $PLAYGROUND_KERNELS, else auto; a clear error for anything else."""
    env = os.environ if env is None else env
    value = (kernels if kernels is not None else env.get(KERNELS_ENV, "")).strip().lower() or "auto"
    if value not in KERNELS:
        raise PlaygroundError(f"unknown kernels {value!r}; choose one of {', '.join(KERNELS)}")
    return value


@dataclass(frozen=True)
class KernelChoice:
    """What a model's linear layers run on, and why."""

    kernels: str  # "blas" or "onednn"
    asked: str  # what was asked for: auto, blas or onednn
    reason: str
    probe_ms: dict = field(default_factory=dict)  # {"blas": {n: ms}, "onednn": {n: ms}} when auto measured

    def to_dict(self) -> dict:
        return {
            "kernels": self.kernels,
            "asked": self.asked,
            "reason": self.reason,
            "probe_ms": {k: {str(n): round(ms, 2) for n, ms in v.items()} for k, v in self.probe_ms.items()},
        }


class OneDnnLinear(torch.nn.Module):
    """An nn.Linear whose weight is held in oneDNN's layout and multiplied by oneDNN.

    Written by hand because torch has no public fp32 oneDNN linear but `torch.utils.mkldnn.MkldnnLinear`, a
    TorchScript module that converts every input to oneDNN's layout and back (a third slower a step).
    `mkldnn._linear_pointwise` is the op Inductor's CPU backend lowers linears to. Inference only (no autograd)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = linear.weight.detach().to_mkldnn()
        self.bias = None if linear.bias is None else linear.bias.detach().clone()
        self.shares_weight = False  # True when the dense weight lives on in the model (a tied lm_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.contiguous(), self.packed, self.bias, "none", [], "")

    def add_to(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + self(x) in one op (oneDNN's post-op add), as the static step adds a layer's residual."""
        return torch.ops.mkldnn._linear_pointwise.binary(x.contiguous(), residual, self.packed, self.bias, "add")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, oneDNN"


def _linears(model: torch.nn.Module):
    """(parent, attribute name, module) for every dense nn.Linear of the model."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is torch.nn.Linear:  # exactly: quantized and already swapped linears stay
                yield parent, name, child


def eligible(model: torch.nn.Module) -> str | None:
    """Why oneDNN cannot be used for `model` (None when it can)."""
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return "this torch build has no oneDNN linear"
    params = list(model.parameters())
    if not params or any(p.device.type != "cpu" for p in params):
        return "oneDNN kernels are for models on the CPU"
    if any(p.dtype != torch.float32 for p in params):
        return "oneDNN kernels are used for fp32 models only"
    if not any(True for _ in _linears(model)):
        return "the model has no linear layers to swap"
    return None


class Swap:
    """The model's linear layers, swappable between their BLAS and oneDNN forms (both kept until `keep`)."""

    def __init__(self, model: torch.nn.Module):
        self.sites = [(parent, name, child) for parent, name, child in _linears(model)]
        self.onednn = [OneDnnLinear(child) for _, _, child in self.sites]

    def use(self, kernels: str) -> None:
        for (parent, name, dense), fast in zip(self.sites, self.onednn):
            setattr(parent, name, fast if kernels == "onednn" else dense)

    def keep(self, kernels: str, model: torch.nn.Module) -> None:
        """Settle on `kernels` and let the other form's weights go."""
        self.use(kernels)
        if kernels == "onednn":
            kept = {p.data_ptr() for p in model.parameters()}
            for (_, _, dense), fast in zip(self.sites, self.onednn):
                fast.shares_weight = dense.weight.data_ptr() in kept
        self.sites, self.onednn = [], []


def time_kernels(
    model: torch.nn.Module,
    swap: Swap,
    sizes=PROBE_SIZES,
    rounds: int = PROBE_ROUNDS,
    context_tokens: int = PROBE_CONTEXT,
) -> dict[str, dict[int, list[float]]]:
    """Seconds of a pass over each of `sizes` tokens after a `context_tokens`-token prompt, per kernel, `rounds`
    times; the two kernels alternate within each round, so that a drifting machine moves both alike. Leaves the
    model on oneDNN (the last timed): settle it with `swap.keep`."""
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, max(vocab, 2), (context_tokens,), generator=gen).tolist()
    times: dict[str, dict[int, list[float]]] = {"blas": {}, "onednn": {}}
    lms = {}
    for kernels in times:  # warm-up: the first passes of each kernel allocate and pack
        swap.use(kernels)
        lm = lms[kernels] = CachedLM(model, "cpu")
        lm.feed(context, last_only=True)
        for n in sizes:
            lm.feed(context[:n])
            lm.crop(context_tokens)
    for _ in range(rounds):
        for kernels, per in times.items():
            swap.use(kernels)
            lm = lms[kernels]
            for n in sizes:
                t0 = time.perf_counter()
                lm.feed(context[-n:])
                per.setdefault(n, []).append(time.perf_counter() - t0)
                lm.crop(context_tokens)
    return times


def choose_kernels(
    model: torch.nn.Module, kernels: str | None = "auto", progress: Callable[[str], None] | None = None
) -> KernelChoice:
    """Put `model`'s linear layers on the kernels asked for (auto: the faster on this machine) and say why."""
    asked = resolve_kernels(kernels)
    if asked == "blas":
        return KernelChoice("blas", asked, "asked for")
    why_not = eligible(model)
    if why_not is not None:
        if asked == "onednn":
            raise PlaygroundError(f"kernels 'onednn' asked for, but {why_not}")
        return KernelChoice("blas", asked, why_not)
    swap = Swap(model)
    if asked == "onednn":
        swap.keep("onednn", model)
        return KernelChoice("onednn", asked, "asked for")
    if progress:
        progress("Timing BLAS and oneDNN kernels on this machine (about a second) ...")
    try:
        probe = {
            k: {n: statistics.median(xs) * 1e3 for n, xs in per.items()} for k, per in time_kernels(model, swap).items()
        }
    except RuntimeError as e:  # an op this build or CPU lacks: stay on torch's default
        swap.keep("blas", model)
        return KernelChoice("blas", asked, f"oneDNN failed on this machine: {str(e).splitlines()[0][:200]}")
    total = {k: sum(v.values()) for k, v in probe.items()}
    sizes = "+".join(str(n) for n in PROBE_SIZES)
    if total["onednn"] < (1 - MARGIN) * total["blas"]:
        chosen, how = "onednn", "faster"
    else:
        chosen, how = "blas", f"not {MARGIN:.0%} faster"
    swap.keep(chosen, model)
    reason = (
        f"oneDNN {how} than BLAS on passes over {sizes} tokens: {total['onednn']:.1f} ms against "
        f"{total['blas']:.1f} ms (medians of {PROBE_ROUNDS}, alternating)"
    )
    return KernelChoice(chosen, asked, reason, probe)


def onednn_weights(model: torch.nn.Module, shared: bool = True):
    """The oneDNN-held weights of a model (they live outside .parameters()); `shared`: also the copies of a weight
    the model still holds densely (a tied lm_head's), which take memory but are no parameters of their own."""
    for m in model.modules():
        if isinstance(m, OneDnnLinear) and (shared or not m.shares_weight):
            yield m.packed
