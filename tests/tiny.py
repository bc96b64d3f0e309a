"""Tiny random causal LMs (and a word-level tokenizer) for fast, offline tests of the loop."""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from playground.core.records import Iteration, Step
from playground.pairs import synthetic
from playground.pairs.models import ModelPair


def tiny_model(vocab: int = 64, seed: int = 0, layers: int = 2, hidden: int = 32, scale: float = 0.5,
               dtype=torch.float64, max_positions: int = 256) -> LlamaForCausalLM:
    """A random Llama. `scale` is the init std: large enough that next-token distributions are peaked
    and differ between seeds (the default 0.02 gives nearly uniform ones, where tests have no power)."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        initializer_range=scale, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    return LlamaForCausalLM(cfg).to(dtype).eval()


def perturbed(model: LlamaForCausalLM, noise: float, seed: int = 1) -> LlamaForCausalLM:
    """A copy of `model` with Gaussian noise on every weight: a draft that agrees often but not always."""
    gen = torch.Generator().manual_seed(seed)
    draft = copy.deepcopy(model)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * noise)
    return draft


def tiny_pair(target, draft=None, eos_ids=(), max_context=None) -> ModelPair:
    return ModelPair(target=target, tokenizer=None, draft=draft, eos_ids=frozenset(eos_ids),
                     max_context=max_context, dtype=next(target.parameters()).dtype,
                     target_name="tiny-target", draft_name="tiny-draft" if draft is not None else None)


def tokens(records) -> list[int]:
    """The token ids a run emitted, in order: an Iteration's emitted tokens, a plain Step's token."""
    return [t for r in records for t in (r.emitted if isinstance(r, Iteration) else (r.token,) if isinstance(r, Step)
                                         else ())]


def word_tokenizer(words: list[str], eos: str = "<eos>", extra: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate([*words, eos, *extra])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, unk_token=words[0])


def cut_model(hub_id: str, vocab: int = 1024, device="cpu") -> torch.nn.Module:
    """A named model's layer shapes (playground/pairs/configs) with random bf16 weights, cut to 2 layers and `vocab`
    tokens (the vocabulary is no layer width; a smaller one only makes the head cheaper)."""
    return synthetic.random_model(hub_id, device, torch.bfloat16, layers=2, vocab_size=vocab, bos_token_id=None,
                                  eos_token_id=None, pad_token_id=None)


def decisive(model, vocab: int) -> torch.nn.Module:
    """`model` with a head that names one next token by a wide margin: embeddings N(0, 1) (50x the random init, so
    a position's own embedding outweighs what its layers add) and the head a permutation of them, so the next token
    is a fixed function of the current one, cycling through the vocabulary. Random bf16 logits are nearly flat and
    tie often (they move in steps of 1/32 near 4), and kernels may round a row otherwise when it is fed among
    others: there a greedy comparison would test the rounding, not the loop."""
    # a permutation (5 is prime to the vocabulary's size)
    order = ((torch.arange(vocab) * 5 + 3) % vocab).to(model.lm_head.weight.device)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(50.0)
        model.lm_head.weight.copy_(model.model.embed_tokens.weight[order])
    return model
