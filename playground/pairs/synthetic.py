"""The named pairs' models from their shipped configs, with random weights: step costs without a download.

`configs/` holds the fields of each hub model's config.json that fix its shapes (layers, widths, heads,
vocabulary, rope), a few hundred bytes each. From them: each model's parameter count and bytes (arithmetic, no
model built), a pair's layer and byte ratios (what `pairs` shows), and a model of those shapes with random weights
in a chosen dtype (what `timing --random-weights` times). Timing is real; what random weights propose and accept
means nothing, and nothing here reports it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, PretrainedConfig

from ..errors import PlaygroundError
from .models import ModelPair

CONFIGS = Path(__file__).resolve().parent / "configs"


def config_path(hub_id: str) -> Path:
    return CONFIGS / (str(hub_id).replace("/", "__") + ".json")


def shipped_config(hub_id: str, **changes) -> PretrainedConfig:
    """`hub_id`'s config from the shape fields shipped for it, with `changes` (PlaygroundError when none ships)."""
    path = config_path(hub_id)
    if not path.is_file():
        known = sorted(p.stem.replace("__", "/") for p in CONFIGS.glob("*.json"))
        raise PlaygroundError(f"no shipped config for {hub_id!r}; configs ship for: {', '.join(known)}")
    fields = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    return AutoConfig.for_model(**{**fields, **changes})


def param_count(cfg: PretrainedConfig, layers: int | None = None) -> int:
    """Parameters of a Llama/Qwen2-layout model from its config (embeddings, the untied head, attention with
    Qwen2's q/k/v biases, the SiLU MLP, the norms)."""
    h, inter, vocab = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    bias = cfg.model_type == "qwen2" or getattr(cfg, "attention_bias", False)
    attn = h * heads * head_dim * 2 + h * kv * head_dim * 2 + ((heads + 2 * kv) * head_dim if bias else 0)
    layer = attn + 3 * h * inter + 2 * h
    n = cfg.num_hidden_layers if layers is None else layers
    head = 0 if cfg.tie_word_embeddings else vocab * h
    return vocab * h + head + n * layer + h


@dataclass(frozen=True)
class PairRatios:
    """The draft's layers and weight bytes over the target's (same dtype): on a launch-bound GPU a draft costs about
    its layer ratio, on a bandwidth-bound one about its byte ratio."""

    target_layers: int
    draft_layers: int
    layer_ratio: float
    target_params: int
    draft_params: int
    byte_ratio: float


def pair_ratios(target: str, draft: str) -> PairRatios:
    t, d = shipped_config(target), shipped_config(draft)
    return PairRatios(target_layers=t.num_hidden_layers, draft_layers=d.num_hidden_layers,
                      layer_ratio=d.num_hidden_layers / t.num_hidden_layers, target_params=param_count(t),
                      draft_params=param_count(d), byte_ratio=param_count(d) / param_count(t))


def random_model(hub_id: str, device, dtype: torch.dtype, layers: int | None = None, seed: int = 0, **changes):
    """A causal LM of `hub_id`'s shapes (its first `layers` layers when given; `changes` to its config, such as a
    smaller vocabulary for a test) with N(0, 0.02) weights, built on the meta device and filled where it lives:
    transformers' own initialisation of a billion parameters on two CPU cores took minutes, a fill seconds."""
    # transformers' model classes: imported here, where a model is built, as pairs.loading does at its import
    from transformers import AutoModelForCausalLM

    cfg = shipped_config(hub_id, **changes)
    if layers is not None:
        if not 1 <= layers <= cfg.num_hidden_layers:
            raise PlaygroundError(f"--layers must be from 1 to {cfg.num_hidden_layers} for {hub_id}, got {layers}")
        cfg = shipped_config(hub_id, num_hidden_layers=layers, **changes)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    model = model.to_empty(device=device)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02, generator=gen)
        for name, module in model.named_modules():  # norms start at one, as trained ones are near
            if name.endswith(("norm", "layernorm")):
                module.weight.fill_(1.0)
    with torch.device(device):  # the rotary tables are buffers computed at construction: the meta ones are empty
        model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    return model.eval().requires_grad_(False)


def random_pair(target: str, draft: str | None, device, dtype: torch.dtype, layers: int | None = None) -> ModelPair:
    """A pair of the named models' shapes with random weights. `layers` cuts both to that many layers at most,
    keeping their ratio's sense (the draft to `layers` x its own share of the target's depth, at least one)."""
    t_layers = shipped_config(target).num_hidden_layers
    target_model = random_model(target, device, dtype, layers=min(layers, t_layers) if layers else None)
    draft_model = None
    if draft is not None:
        d_layers = shipped_config(draft).num_hidden_layers
        cut = max(1, round(d_layers * min(layers, t_layers) / t_layers)) if layers else None
        draft_model = random_model(draft, device, dtype, layers=cut, seed=1)
    vocab = min(target_model.config.vocab_size, draft_model.config.vocab_size if draft_model is not None else 1 << 30)
    return ModelPair(
        target=target_model,
        tokenizer=None,
        draft=draft_model,
        device=torch.device(device),
        dtype=dtype,
        target_name=f"{target} (random weights)",
        draft_name=f"{draft} (random weights)" if draft else None,
        vocab_size=vocab,
        eos_ids=frozenset({-1}),
    )
