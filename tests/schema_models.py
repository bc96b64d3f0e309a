"""What the constrained-decoding tests share: the embedded tokenizer (a vocabulary llguidance reads as it reads
SmolLM2's), a tiny random pair over that vocabulary, and `bounded`, which keeps a preset's schema short enough for a
random model to complete."""

from __future__ import annotations

from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer
from playground.pairs.models import ModelPair
from tests.tiny import perturbed, tiny_model


def embedded_tokenizer():
    return load_tokenizer(ensure_embedded_safetensors(progress=None))


def tiny_schema_pair(tokenizer, keep_tokenizer: bool = False) -> ModelPair:
    """A tiny random target over `tokenizer`'s vocabulary and a noisy copy as its draft; `keep_tokenizer`: the pair
    carries the tokenizer (what replay and the lab read), else none (the loop needs none)."""
    target = tiny_model(vocab=len(tokenizer), seed=3, hidden=32, scale=0.5, max_positions=1024)
    return ModelPair(target=target, tokenizer=tokenizer if keep_tokenizer else None, draft=perturbed(target, 0.05),
                     eos_ids=frozenset({tokenizer.eos_token_id}), target_name="tiny", draft_name="tiny-draft")


def bounded_grammar(preset_name: str, tokenizer):
    """The preset's output schema, bounded, compiled for `tokenizer`."""
    from playground.constraints.grammar import Grammar  # loads llguidance: only the tests that constrain a run
    from playground.constraints.schema import Schema
    from playground.inputs.presets import get_preset

    return Grammar(Schema(bounded(get_preset(preset_name).output_schema), f"bounded {preset_name}"), tokenizer)


def bounded(schema):
    """`schema` with every free string at most 6 characters, every number one digit (1..9) and every array at most
    two items: a random model then completes a value in a few tokens. What validates here validates against it."""
    if isinstance(schema, list):
        return [bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: bounded(v) for k, v in schema.items()}
    kind = out.get("type")
    if kind == "string" and "enum" not in out and "const" not in out:
        out["maxLength"] = 6
    if kind in ("number", "integer"):
        out.update(type="integer", minimum=1, maximum=9)
        out.pop("exclusiveMinimum", None)
    if kind == "array":
        out["maxItems"] = 2
    return out
