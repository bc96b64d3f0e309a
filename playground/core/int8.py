"""The int8 draft's linear layers: one row's output that does not depend on the other rows fed with it.

torch.ao's dynamic int8 product quantizes its input with one scale over every row it is given, so the same token
gives other logits when it is fed alone than beside another (a two-token catch-up after a fully accepted draft):
the draft's proposals then depend on how the schedule chunked its feeds, and two schedules over the same prompt
draw different proposals from the same prefix.

`RowInt8Linear` keeps the same int8 weights (per output channel) and, for a feed of a few rows, multiplies the
activations in bfloat16 with them (`torch._weight_int8pack_mm`, weight-only int8): nothing is scaled across rows,
and each row's result is bitwise that of the row fed alone (tests/test_int8.py checks it on the machine it runs
on). Why by hand (the house prefers a maintained library): torch.ao's dynamic product has no per-row activation
scale, torch's `_int_mm` on this CPU took 10x as long as it, and torchao's int8 configs were slower than the fp32
target here (loading.int8_copy). A whole draft step is 4% slower (docs/results.md, "The int8 draft's rows fed
independently"), and at 330 rows (a prompt) 2x slower than a float product: a long feed, which no schedule chunks
differently (a prompt is fed whole), keeps torch.ao's product.
"""

from __future__ import annotations

import torch

SHORT_FEED = 8  # rows up to which the weight-only product runs: catch-ups (1-2 rows) and short replays, not a prompt


class RowInt8Linear(torch.nn.Module):
    """A dynamically quantized linear layer (`quantized`, torch.ao's) that runs feeds of at most SHORT_FEED rows
    as bfloat16 activations times its int8 weights, row by row independent; longer feeds through `quantized`."""

    def __init__(self, quantized: torch.nn.Module):
        super().__init__()
        weight = quantized.weight()
        self.quantized = quantized
        self.in_features, self.out_features = quantized.in_features, quantized.out_features
        # the per-channel int8 rows as they are (symmetric: torch.ao's per-channel weight zero points are 0)
        self.register_buffer("int8", weight.int_repr().contiguous(), persistent=False)
        self.register_buffer("scales", weight.q_per_channel_scales().to(torch.bfloat16), persistent=False)
        bias = quantized.bias()
        self.register_buffer("bias_", None if bias is None else bias.detach().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows > SHORT_FEED:
            return self.quantized(x)
        y = torch._weight_int8pack_mm(x.reshape(rows, self.in_features).to(torch.bfloat16), self.int8, self.scales)
        y = y.to(x.dtype)
        if self.bias_ is not None:
            y = y + self.bias_
        return y.reshape(*x.shape[:-1], self.out_features)

    def bias(self) -> torch.Tensor | None:  # as torch.ao's quantized linear layers answer it (lean.fused asks)
        return self.bias_

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, short feeds up to {SHORT_FEED} rows"


def why_not_rowwise(quantized: torch.nn.Module) -> str | None:
    """None when `quantized` (torch.ao's dynamic quantized linear) can become a RowInt8Linear, else why not."""
    weight = quantized.weight()
    if weight.qscheme() not in (torch.per_channel_affine, torch.per_channel_symmetric):
        return "its weights are not quantized per channel"
    if bool(weight.q_per_channel_zero_points().any()):
        return "its weights' zero points are not 0"
    if quantized.in_features % 8:
        # torch 2.13's CPU kernel reads the input 8 columns at a time and checks nothing: other widths gave wrong
        # products (4, 12, 36, 100) or a segmentation fault (30, 33, 34) here, so they are never tried
        return f"its input width {quantized.in_features} is not a multiple of 8"
    return _kernel_error(quantized.in_features, quantized.out_features)


_CHECKED: dict[tuple[int, int], str | None] = {}  # (in, out) -> the kernel's error on that shape, checked once


def _kernel_error(n_in: int, n_out: int) -> str | None:
    """The weight-only product against the same arithmetic in float32 on random values of this shape, once per
    shape: a kernel that computes wrong on this CPU (see why_not_rowwise) is found here, not in a draft's
    proposals."""
    if (n_in, n_out) not in _CHECKED:
        g = torch.Generator().manual_seed(0)
        w = torch.randint(-127, 128, (n_out, n_in), dtype=torch.int8, generator=g)
        scales = (torch.rand(n_out, generator=g) + 0.5).to(torch.bfloat16)
        x = torch.randn(3, n_in, generator=g).to(torch.bfloat16)
        want = x.float() @ (w.float() * scales.float()[:, None]).t()
        got = torch._weight_int8pack_mm(x, w, scales).float()
        err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
        _CHECKED[(n_in, n_out)] = None if err < 2e-2 else \
            f"torch's weight-only int8 product is off by {err:.0%} at this shape on this CPU"
    return _CHECKED[(n_in, n_out)]


def rowwise(model: torch.nn.Module, skip: tuple[str, ...] = ("lm_head",)) -> int:
    """Replace `model`'s torch.ao dynamic quantized linear layers (but those named in `skip`) by RowInt8Linear
    where they can be; the number replaced. The lm_head is skipped: the lean forward feeds it one row, where
    torch.ao's product is already row-independent and faster (0.85 ms against 2.4 ms at one row here)."""
    # torch.ao is deprecated and warns when imported: imported where an int8 copy is built, not at import time
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

    targets = []
    for name, m in model.named_modules():
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        # a RowInt8Linear's own torch.ao layer (its long feeds) is not replaced again
        if type(m) is DynamicQuantLinear and type(owner) is not RowInt8Linear and child not in skip \
                and why_not_rowwise(m) is None:
            targets.append((owner, child, m))
    for owner, child, m in targets:
        setattr(owner, child, RowInt8Linear(m))
    return len(targets)


def row_independent(model: torch.nn.Module) -> bool:
    """Whether every linear layer of `model` gives a row what it gives that row fed alone at the feed sizes a
    drafter's steps and catch-ups use: all RowInt8Linear but the lm_head (which the lean forward feeds one row)."""
    # torch.ao is deprecated and warns when imported: imported where a model is asked about, not at import time
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

    inner = {id(m.quantized) for m in model.modules() if type(m) is RowInt8Linear}  # their own long-feed layers
    rows = False
    for name, m in model.named_modules():
        if type(m) is RowInt8Linear:
            rows = True
        elif isinstance(m, torch.nn.Linear):
            return False  # a float product: rows rounded by whichever kernel the feed's size picks
        elif type(m) is DynamicQuantLinear and id(m) not in inner and name.rpartition(".")[2] != "lm_head":
            return False
    return rows
