"""Constrained runs of the embedded model on every JSON preset's own schema, and the schemas a constraint refuses.

Every constrained run's output validates against its preset's schema (jsonschema), greedy and sampled, plain and
speculative with the schema+lookup drafter, which equals plain and proposes forced tokens the target keeps. A schema
that is not JSON, not a JSON Schema, one llguidance cannot compile, or one no value satisfies is refused in one line
naming the schema, from the library and from `generate` alike.
"""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from playground.cli import main
from playground.constraints.grammar import Grammar
from playground.constraints.schema import SchemaError, schema_from, schema_presets
from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.records import FORCED, summarize
from playground.core.sampling import SamplingConfig
from playground.drafters.registry import make_proposer
from playground.inputs.presets import get_preset
from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer
from tests.tiny import tokens


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(ensure_embedded_safetensors(progress=None))


@pytest.fixture(scope="module")
def embedded():
    from playground.pairs.loading import load_pair  # loads the embedded model: only the slow tests here need it

    return load_pair(draft=None, progress=None)


def valid(pair, schema, records) -> bool:
    value = json.loads(pair.tokenizer.decode(tokens(records), skip_special_tokens=True))
    return Draft202012Validator(schema).is_valid(value)


@pytest.mark.slow
@pytest.mark.parametrize("preset", schema_presets())
def test_every_constrained_run_validates_on_every_json_preset(embedded, preset):
    p = get_preset(preset)
    grammar = Grammar(preset, embedded.tokenizer)
    prompt = p.prompt_ids(embedded.tokenizer)
    plain = list(plain_generate(embedded, prompt, max_new_tokens=p.max_new_tokens, constraint=grammar))
    assert plain[-1].finished == "schema" and valid(embedded, p.output_schema, plain)
    proposer = make_proposer(embedded, "schema+lookup")
    spec = list(speculative_generate(embedded, prompt, proposer=proposer, k=8, max_new_tokens=p.max_new_tokens,
                                     options=LoopOptions(constraint=grammar)))
    assert tokens(spec) == tokens(plain)
    assert summarize(spec).roles.get(FORCED, 0) >= 3  # the schema's keys and punctuation came at no model cost
    sampled = list(speculative_generate(embedded, prompt, proposer=make_proposer(embedded, "schema+lookup"), k=4,
                                        sampling=SamplingConfig(do_sample=True, temperature=1.0, seed=2),
                                        max_new_tokens=p.max_new_tokens, options=LoopOptions(constraint=grammar)))
    assert sampled[-1].finished == "schema" and valid(embedded, p.output_schema, sampled)


BAD = {
    "not JSON": ("bad.json", "{\"type\": ", "schema file bad.json: not valid JSON"),
    "not a JSON Schema": ("typo.json", '{"type": "strin"}', "schema file typo.json is not a valid JSON Schema"),
    "not compilable": ("ref.json", '{"$ref": "#/definitions/missing"}', "schema file ref.json cannot be compiled"),
    "forbids everything": ("none.json", "false", "schema file none.json allows no output"),
    "an empty range": ("range.json", '{"type": "integer", "minimum": 5, "maximum": 3}',
                       "schema file range.json"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_schema_it_cannot_use_is_one_line_naming_it(tokenizer, tmp_path, case):
    name, text, message = BAD[case]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SchemaError) as caught:
        Grammar(str(path), tokenizer)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_schema_that_is_not_a_file_nor_a_preset_names_the_choices():
    with pytest.raises(SchemaError, match="no schema file or preset named 'nope'; presets with a schema: .*tool_call"):
        schema_from("nope")
    with pytest.raises(SchemaError, match="preset 'prose' has no schema"):
        schema_from("prose")
    with pytest.raises(SchemaError, match="preset 'react'.s schema checks only the JSON after"):
        schema_from("react")


@pytest.mark.parametrize("case", ["not JSON", "forbids everything"])
def test_generate_refuses_a_bad_schema_in_one_line(capsys, tmp_path, case):
    name, text, message = BAD[case]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert main(["generate", "--preset", "tool_call", "--schema", str(path), "--drafter", "lookup",
                 "--draft", "none", "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err and err.count("\n") == 1
