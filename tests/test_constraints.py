"""Constrained decoding (playground.constraints) in the loop, greedy: a tiny random model whose vocabulary is the
embedded tokenizer's, so the grammar decides what it emits.

Constrained speculative equals constrained plain for every drafter (the int8 and float draft on the lean and static
forwards, lookup, suffix, llama.cpp where installed, and the schema+ drafters) at k in {1, 3, 8} and adaptive, with
the target's cache, the draft's cache and the matcher in step with the committed tokens after every iteration; every
run that completes its value validates against the schema (jsonschema). The presets' schemas are bounded here
(strings of at most 6 characters, one-digit numbers, two items at most: a random model would otherwise write one
string for ever); the embedded model's runs on the presets' own schemas are in test_constraints_presets.py.
"""

from __future__ import annotations

import json

import pytest
import torch
from jsonschema import Draft202012Validator

from playground.constraints.schema import schema_presets
from playground.core import engine
from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.records import FORCED, Iteration, summarize
from playground.core.static import target_lm
from playground.drafters.adaptive import AdaptiveK, CostCurve
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.drafters.schema import SchemaProposer
from playground.drafters.suffix import SuffixProposer
from playground.inputs.presets import get_preset
from playground.pairs.loading import int8_copy
from tests.schema_models import bounded_grammar, embedded_tokenizer, tiny_schema_pair
from tests.tiny import tokens

NEW = 40
CURVE = CostCurve(c=0.3, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)})


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.fixture(scope="module")
def pair(tokenizer):
    return tiny_schema_pair(tokenizer)


@pytest.fixture(scope="module")
def cases(tokenizer):
    """(preset name, prompt ids, bounded grammar, the preset's own schema) for every JSON preset."""
    out = []
    for name in schema_presets():
        preset = get_preset(name)
        grammar = bounded_grammar(name, tokenizer)
        out.append((name, preset.prompt_ids(tokenizer), grammar, preset.output_schema))
    return out


@pytest.fixture(scope="module")
def llama_cpp(tokenizer):
    from playground.drafters.llamacpp_runtime import llama_cpp_available  # the llama.cpp case only

    ok, why = llama_cpp_available()
    if not ok:
        pytest.skip(f"llama.cpp is not available: {why}")
    from playground.drafters.llamacpp import LlamaCppProposer  # loads llama_cpp: only where it is available

    proposer = LlamaCppProposer(tokenizer, vocab_size=len(tokenizer))
    yield proposer
    proposer.close()


def drafter(name: str, pair, request):
    draft32 = pair.draft
    return {
        "draft (lean)": lambda: DraftModelProposer(draft32, "cpu", None, forward="lean"),
        "draft (static)": lambda: DraftModelProposer(draft32, "cpu", None, forward="static"),
        "int8": lambda: DraftModelProposer(int8_copy(pair.target), "cpu", None),
        "lookup": lambda: PromptLookupProposer(3),
        "suffix": lambda: SuffixProposer(),
        "llama.cpp": lambda: request.getfixturevalue("llama_cpp"),
        "schema+lookup": lambda: SchemaProposer(PromptLookupProposer(3), "lookup"),
        "schema+suffix": lambda: SchemaProposer(SuffixProposer(), "suffix"),
        "schema+draft": lambda: SchemaProposer(DraftModelProposer(draft32, "cpu", None, forward="static"), "draft"),
    }[name]()


def draft_lm(proposer):
    inner = getattr(proposer, "inner", proposer)
    return getattr(inner, "lm", None)


DRAFTERS = ["draft (lean)", "draft (static)", "int8", "lookup", "suffix", "llama.cpp", "schema+lookup",
            "schema+suffix", "schema+draft"]


@pytest.mark.parametrize("k", [1, 3, 8, "adaptive"])
@pytest.mark.parametrize("name", DRAFTERS)
def test_constrained_speculative_equals_constrained_plain_with_caches_and_matcher_in_step(
        monkeypatch, pair, tokenizer, cases, request, name, k):
    made = []
    monkeypatch.setattr(engine, "target_lm", lambda *a, **kw: made.append(target_lm(*a, **kw)) or made[-1])
    for preset, prompt, grammar, schema in cases:
        expected = tokens(plain_generate(pair, prompt, max_new_tokens=NEW, constraint=grammar))
        proposer = drafter(name, pair, request)
        controller = AdaptiveK(CURVE, k_max=16) if k == "adaptive" else k
        committed, records = list(prompt), []
        for rec in speculative_generate(pair, prompt, proposer=proposer, k=controller, max_new_tokens=NEW,
                                        options=LoopOptions(constraint=grammar)):
            records.append(rec)
            if not isinstance(rec, Iteration):
                continue
            committed.extend(rec.emitted)
            target = made[-1]
            assert target.tokens == committed[:-1] and target.cache_length() == len(committed) - 1
            draft = draft_lm(proposer)
            if draft is not None:
                assert draft.tokens == committed[: len(draft.tokens)] and len(draft.tokens) < len(committed)
            guide = proposer.ctx.guide
            assert guide.committed == [t for t in committed[len(prompt):] if t not in pair.eos_ids]
        got = tokens(records)
        assert got == expected, (preset, name, k)
        if records[-1].finished == "schema":
            value = json.loads(tokenizer.decode(got, skip_special_tokens=True))
            assert Draft202012Validator(schema).is_valid(value), (preset, value)
        if name.startswith("schema+"):
            assert summarize(records).roles.get(FORCED, 0) > 0  # the schema proposed, and the target kept it


def test_most_bounded_runs_complete_a_valid_value(pair, tokenizer, cases):
    """The equality test has teeth only where the runs reach the grammar's end: most do, and each one's JSON
    validates against the preset's own schema."""
    finished = 0
    for preset, prompt, grammar, schema in cases:
        records = list(speculative_generate(pair, prompt, proposer=SchemaProposer(PromptLookupProposer(3), "lookup"),
                                            k=4, max_new_tokens=NEW, options=LoopOptions(constraint=grammar)))
        if records[-1].finished != "schema":
            continue
        finished += 1
        value = json.loads(tokenizer.decode(tokens(records), skip_special_tokens=True))
        assert Draft202012Validator(schema).is_valid(value), (preset, value)
    assert finished >= len(cases) - 1


def test_the_unconstrained_run_is_not_valid_json(pair, tokenizer, cases):
    """Power of the validity checks: the same random model without the grammar writes no JSON at all."""
    _, prompt, _, _ = cases[0]
    text = tokenizer.decode(tokens(plain_generate(pair, prompt, max_new_tokens=NEW)), skip_special_tokens=True)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_a_schema_drafter_without_a_schema_is_its_inner_drafter(pair, cases):
    _, prompt, _, _ = cases[0]
    inner = tokens(speculative_generate(pair, prompt, proposer=PromptLookupProposer(3), k=3, max_new_tokens=20))
    wrapped = list(speculative_generate(pair, prompt, proposer=SchemaProposer(PromptLookupProposer(3), "lookup"), k=3,
                                        max_new_tokens=20))
    assert tokens(wrapped) == inner and summarize(wrapped).roles.get(FORCED, 0) == 0


def test_the_matcher_rolls_back_to_the_same_masks_and_forces_the_opening(tokenizer, cases):
    """What speculation leans on: a matcher moved over drafted tokens and rolled back allows what it allowed before
    (the guide keeps masks, so the matcher is asked directly here); the opening up to the first free value is
    forced, and no end of sequence is allowed before the value is complete."""
    _, prompt, grammar, _ = cases[0]
    guide = grammar.guide(prompt, len(tokenizer), {tokenizer.eos_token_id})
    forced = guide.forced(prompt)
    opening = tokenizer.decode(forced)
    assert len(opening) >= 7 and '{"name": "'.startswith(opening), opening  # whole tokens only: maybe not the quote
    matcher = grammar.matcher()
    start = matcher.bits().clone()
    assert matcher.consume(forced) == len(forced)
    deeper = matcher.bits().clone()
    matcher.rollback(len(forced))
    assert torch.equal(matcher.bits(), start) and not torch.equal(deeper, start)
    assert matcher.consume([*forced[:1], forced[0]]) == 1  # a refused token is not taken
    assert not guide.allowed(prompt)[tokenizer.eos_token_id]


def test_the_equality_test_catches_verification_rows_masked_alike(monkeypatch, pair, cases):
    """Power of the equality test: verification whose rows are all masked by what the committed tokens allow (not by
    what the grammar allows after each proposal's prefix) is not constrained plain decoding, and the same
    comparison tells them apart (plain steps, one row each, are unchanged by it): the outputs differ, or the loop
    commits a token the grammar refuses and the guide says so."""
    from playground.constraints.guide import Guide, restrict  # the wrong variant's parts: only this test needs them

    def rows_alike(self, tokens, proposal, logits):
        return restrict(logits, self.allowed(tokens).expand(len(proposal) + 1, -1))

    monkeypatch.setattr(Guide, "rows", rows_alike)
    caught = []
    for name, prompt, grammar, _ in cases:
        expected = tokens(plain_generate(pair, prompt, max_new_tokens=NEW, constraint=grammar))
        try:
            got = tokens(speculative_generate(pair, prompt, proposer=SchemaProposer(PromptLookupProposer(3), "lookup"),
                                              k=8, max_new_tokens=NEW, options=LoopOptions(constraint=grammar)))
        except ValueError as e:
            caught.append((name, str(e)))
            continue
        if got != expected:
            caught.append((name, "differs"))
    assert len(caught) == len(cases), caught  # measured: the guide refused a committed token on all four
