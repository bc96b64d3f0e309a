"""The preflight's checks after its imports' (playground.preflight runs them in order; each returns its one line of
findings, or raises kit.Failed with the line that stops the preflight). Imported only once the imports check has
passed: this module imports torch, transformers and the playground's forwards at its top."""

from __future__ import annotations

import argparse
import platform

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version
from transformers import LlamaConfig, LlamaForCausalLM

from ..compat import MIN_TRANSFORMERS, transformers_problem
from ..core.cached import CachedLM
from ..core.static import MIN_CAPACITY, StaticLM, release
from ..core.step import Shapes
from ..lab.forwards import gpu_driver
from ..lab.profiled import Profiled, profiled
from ..pairs.synthetic import shipped_config
from .kit import CARRY, Failed, carried_problems

MIN_TORCH = "2.6"  # transformers 5 disables itself below it
CAPACITY = MIN_CAPACITY  # the static cache's first capacity: what a 256-token context's timing attends over
SDPA_SHAPES = (("target", "meta-llama/Llama-3.1-8B-Instruct", 5), ("draft", "meta-llama/Llama-3.2-1B-Instruct", 1))
"""(role, model whose heads are used, rows fed): an 8B target verifying k = 4, a 1B draft's one-token step."""
FUSED = ("_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward", "_efficient_attention_forward")
IDS = (3, 17, 42, 5, 9)


def check_versions(args: argparse.Namespace, found: dict) -> str:
    found.update(python=platform.python_version(), torch=torch.__version__, transformers=transformers.__version__)
    if Version(Version(torch.__version__).base_version) < Version(MIN_TORCH):
        raise Failed(f"torch {torch.__version__} is older than {MIN_TORCH}, transformers' own floor")
    problem = transformers_problem(transformers.__version__)
    if problem is not None:
        raise Failed(f"{problem}: {CARRY}")
    carried = ""
    if args.wheels is not None:
        problems = carried_problems(args.wheels)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise Failed(f"{problems[0]}{more}: carry what it needs (scripts/gpu_image/wheels.txt)")
        carried = f"; the {len(list(args.wheels.glob('*.whl')))} carried wheels imported, their requirements met"
    return (f"python {found['python']}, torch {torch.__version__}, transformers {transformers.__version__} "
            f"(>= {MIN_TRANSFORMERS}){carried}")


def check_cuda(args: argparse.Namespace, found: dict) -> str:
    if args.device == "cpu":
        return "skipped (--device cpu)"
    if not torch.cuda.is_available():
        raise Failed(f"no CUDA: torch {torch.__version__} sees no GPU here, and this check needs one")
    card = torch.cuda.get_device_name(0)
    found.update(card=card, driver=gpu_driver(), cuda=torch.version.cuda,
                 bf16_native=torch.cuda.is_bf16_supported(including_emulation=False))
    if not found["bf16_native"]:
        raise Failed(f"bf16 is not native on {card}, and the lease's timings run in bf16")
    major, minor = torch.cuda.get_device_capability(0)
    return f"{card} (sm_{major}{minor}), driver {found['driver']}, CUDA {torch.version.cuda}, bf16 native"


def _tiny_llama(device: torch.device) -> LlamaForCausalLM:
    """2 layers, grouped-query heads, a wide init: peaked logits, so a feed that lost its context shows."""
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      initializer_range=0.5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device, torch.float32).eval()


def check_cache(args: argparse.Namespace, found: dict) -> str:
    device = torch.device(args.device)
    model = _tiny_llama(device)
    with torch.inference_mode():
        full = model(input_ids=torch.tensor([IDS], device=device)).logits[0].float()
        lm = CachedLM(model, device)
        lm.feed(IDS[:3])
        cont = lm.feed(IDS[3:]).float()
        static = StaticLM(model, device, rows="all", graphs=False).feed(list(IDS)).float()
        release(model)
    if lm.cache_length() != len(IDS):
        raise Failed(f"transformers {transformers.__version__}'s forward kept {lm.cache_length()} of {len(IDS)} fed "
                     f"tokens in its cache, so it ran without one: {CARRY}")
    tolerance = 1e-3 * max(1.0, full.abs().max().item())
    errors = {"cached": (cont - full[3:]).abs().max().item(), "static": (static - full).abs().max().item()}
    found["cache_errors"] = errors
    for name, err in errors.items():
        if err > tolerance:
            raise Failed(f"the {name} forward's logits differ from transformers' full forward by {err:.3g} "
                         f"(tolerance {tolerance:.3g})")
    return (f"the cache holds {lm.cache_length()} of {len(IDS)} fed; logits off transformers' by "
            f"{errors['cached']:.1e} (cached), {errors['static']:.1e} (static), tolerance {tolerance:.1e}")


def sdpa_run(heads: int, kv_heads: int, head_dim: int, rows: int, device: torch.device, dtype) -> Profiled:
    """What one scaled_dot_product_attention runs at the static forward's shapes and strides (core.step): q the
    rotated rows' heads [1, heads, rows, D] (a view of [rows, heads + 2 kv heads, D]), keys and values views of
    one [CAPACITY, 2, kv heads, D] slab, an additive mask [rows, CAPACITY] in `dtype`, enable_gqa (after a first
    call, which may choose and load its kernel)."""
    gen = torch.Generator(device=device).manual_seed(0)
    qkv = torch.randn(rows, heads + 2 * kv_heads, head_dim, device=device, dtype=dtype, generator=gen)
    slab = torch.randn(CAPACITY, 2, kv_heads, head_dim, device=device, dtype=dtype, generator=gen)
    q = qkv[:, :heads].transpose(0, 1)[None]
    k, v = (slab[:, i].transpose(0, 1)[None] for i in (0, 1))
    seen = torch.arange(CAPACITY, device=device)[None, :] <= torch.arange(256, 256 + rows, device=device)[:, None]
    mask = torch.zeros(rows, CAPACITY, device=device, dtype=dtype).masked_fill(~seen, float("-inf"))
    with torch.inference_mode():
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return profiled(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), device)


def sdpa_kernel(ran: Profiled) -> str:
    """The attention op among those dispatched ("math": no fused one), and the CUDA kernels launched."""
    fused = [n for n in ran.ops if n in FUSED]
    said = fused[0] if fused else f"math ({', '.join(dict.fromkeys(ran.ops))})"
    if ran.kernels:
        said += f" [{len(ran.kernels)} kernels: {', '.join(k[:60] for k in dict.fromkeys(ran.kernels))}]"
    return said


def check_sdpa(args: argparse.Namespace, found: dict) -> str:
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    found["sdpa"], said = {}, []
    for role, hub_id, rows in SDPA_SHAPES:
        s = Shapes(shipped_config(hub_id))
        ran = sdpa_run(s.heads, s.kv_heads, s.head_dim, rows, device, dtype)
        kernel = sdpa_kernel(ran)
        found["sdpa"][role] = {"kernel": kernel, "ops": list(ran.ops), "cuda_kernels": list(ran.kernels),
                               "dtype": str(dtype).removeprefix("torch."),
                               "q": [1, s.heads, rows, s.head_dim],
                               "kv": [1, s.kv_heads, CAPACITY, s.head_dim]}
        said.append(f"{role} q {found['sdpa'][role]['q']} kv {found['sdpa'][role]['kv']}: {kernel}")
    return f"{str(dtype).removeprefix('torch.')}, an additive mask, enable_gqa; " + "; ".join(said)


CHECKS = (("versions", check_versions), ("cuda", check_cuda), ("cache", check_cache), ("sdpa", check_sdpa))
