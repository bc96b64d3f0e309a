"""A JSON schema compiled for a tokenizer by llguidance: the grammar a constrained run keeps to.

llguidance was chosen by measurement (scripts/grammar_libraries.py, docs/results/grammar-libraries-*.json,
docs/constraints.md): its mask over SmolLM2's 49,152 tokens costs a fraction of a millisecond beside a target step of
tens, it rolls a matcher back by any number of tokens (speculation needs that after every verification), and its
fast-forward tokens follow its boundary rule: a forced string is never cut mid-token.

Separators are fixed, not flexible: `", "` between items and `": "` after keys, as the presets' few-shot answers
write them (Python's json.dumps), with no other whitespace. A model shown that style keeps it, and a grammar that
allowed any whitespace would force nothing after a comma.

`Grammar(schema, tokenizer)` compiles once (a schema the library cannot compile, or one that allows no output, is a
SchemaError naming the schema); each run asks it for a new `guide` (constraints.guide.Guide) over a fresh matcher.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from importlib.metadata import version

import llguidance
import llguidance.hf
import numpy as np
import torch

from .guide import Guide
from .schema import Schema, SchemaError, schema_from

JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # HF tokenizer -> its llguidance tokenizer
_LOCK = threading.Lock()


def ll_tokenizer(tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of a Hugging Face tokenizer (converted once per tokenizer: it walks the whole vocabulary)."""
    with _LOCK:
        found = _TOKENIZERS.get(tokenizer)
        if found is None:
            try:
                found = llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer))
            except Exception as e:  # noqa: BLE001  the library says why in its own words (an unusual tokenizer)
                raise SchemaError(f"llguidance cannot use this tokenizer: {_line(e)}") from None
            _TOKENIZERS[tokenizer] = found
        return found


def _line(e) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class Matcher:
    """llguidance's matcher as constraints.guide.Matcher asks for it."""

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int):
        self.m, self.n_vocab = matcher, n_vocab

    def bits(self) -> torch.Tensor:
        raw = np.frombuffer(self.m.compute_bitmask(), dtype=np.uint8)
        return torch.from_numpy(np.unpackbits(raw, bitorder="little")[: self.n_vocab].astype(bool))

    def consume(self, tokens: Sequence[int]) -> int:
        return int(self.m.try_consume_tokens(list(tokens)))

    def rollback(self, n: int) -> None:
        if n and not self.m.rollback(n):
            raise RuntimeError(f"llguidance could not roll back {n} tokens: {self.m.get_error()}")

    def accepting(self) -> bool:
        return bool(self.m.is_accepting())

    def ff_tokens(self) -> list[int]:
        return [int(t) for t in self.m.compute_ff_tokens()]


class Grammar:
    """A schema compiled for a tokenizer (see the module docstring). `source`: what constraints.schema_from takes."""

    library = f"llguidance {version('llguidance')}"

    def __init__(self, source, tokenizer):
        self.schema: Schema = schema_from(source)
        self.tokenizer = tokenizer
        self.ll = ll_tokenizer(tokenizer)
        name, value = self.schema.name, self.schema.value
        try:
            self.grammar = llguidance.LLMatcher.grammar_from_json_schema({} if value is True else value,  # true: anything
                                                                         defaults=JSON_OPTIONS)
        except (ValueError, TypeError) as e:
            raise SchemaError(f"{name} cannot be compiled: {_line(e)}") from None
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(self.grammar, self.ll)
        if is_error:
            raise SchemaError(f"{name} cannot be compiled by llguidance: {_line(messages[0] if messages else '')}")
        first = self.matcher()
        if not first.accepting() and not bool(first.bits().any()):
            raise SchemaError(f"{name} allows no output at all (no JSON value satisfies it)")

    @property
    def name(self) -> str:
        return self.schema.name

    def matcher(self) -> Matcher:
        m = llguidance.LLMatcher(self.ll, self.grammar, log_level=0)
        if m.is_error():
            raise SchemaError(f"{self.name} cannot be compiled by llguidance: {_line(m.get_error())}")
        return Matcher(m, len(self.tokenizer))

    def guide(self, prompt_ids: Sequence[int], width: int, stop_ids=()) -> Guide:
        """A new run's guide: a fresh matcher, after `prompt_ids`, over `width` logits columns."""
        return Guide(self.matcher(), len(prompt_ids), width, stop_ids, self.name)

    def describe(self) -> str:
        return f"{self.name} ({self.library}, separators ', ' and ': ')"

    def to_dict(self) -> dict:
        """What a run's document records of its constraint."""
        return {"schema": self.schema.value, "name": self.name, "library": self.library,
                "options": dict(JSON_OPTIONS)}
