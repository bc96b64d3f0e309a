"""Presets: the shipped files, the loader's refusals, the output checks, and (slow) that the few-shot prompts
really make the embedded model emit output that validates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playground.errors import PlaygroundError
from playground.inputs.presets import (
    KINDS,
    PRESETS_DIR,
    OutputCheck,
    Preset,
    PresetError,
    check_output,
    extract_json,
    get_preset,
    load_preset,
    load_presets,
)

SHIPPED = load_presets()
JSON_PRESETS = sorted(name for name, p in SHIPPED.items() if p.output_format != "text")


def good_preset(name="good", **changes) -> dict:
    data = {
        "name": name,
        "title": "A good preset",
        "kind": "json",
        "description": "Replies with a JSON object.",
        "messages": [{"role": "user", "content": "Reply with {\"a\": 1}."}],
        "max_new_tokens": 64,
        "output_format": "json",
        "output_schema": {"type": "object", "required": ["a"]},
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not DROP}


DROP = object()


def write(directory: Path, name: str, data) -> Path:
    path = directory / f"{name}.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


# --- the shipped presets ---------------------------------------------------------------------------


def test_presets_dir_is_the_repo_folder():
    assert PRESETS_DIR == Path(__file__).resolve().parent.parent / "playground" / "presets"
    assert sorted(SHIPPED) == sorted(p.stem for p in PRESETS_DIR.glob("*.json"))


def test_every_shipped_preset_loads_with_a_known_kind():
    assert len(SHIPPED) >= 9
    assert list(SHIPPED) == sorted(SHIPPED)
    for name, preset in SHIPPED.items():
        assert isinstance(preset, Preset)
        assert preset.name == name == preset.path.stem
        assert preset.kind in KINDS
        assert preset.title and preset.description
        assert 48 <= preset.max_new_tokens <= 128, name  # keeps CPU runs short
        assert (preset.messages is None) != (preset.prompt is None)
        if preset.output_format == "text":
            assert preset.output_schema is None
        else:
            assert preset.output_schema is not None


def test_the_nine_agent_shapes_are_present():
    kinds = {p.kind for p in SHIPPED.values()}
    assert kinds >= set(KINDS)
    assert SHIPPED["tool_call"].kind == "tool_call" and SHIPPED["tool_call"].output_format == "json"
    assert SHIPPED["react"].kind == "react" and SHIPPED["react"].output_format == "react"
    assert SHIPPED["json_extract"].kind == "json" and SHIPPED["json_schema"].kind == "json"
    for name in ("sql", "code_edit", "quote", "code", "prose"):
        assert SHIPPED[name].kind == name
    assert any(not p.is_chat for p in SHIPPED.values()), "one raw-prompt preset keeps that path exercised"


@pytest.mark.parametrize("name", JSON_PRESETS)
def test_few_shot_examples_satisfy_their_own_schema(name):
    preset = SHIPPED[name]
    examples = [m["content"] for m in preset.messages if m["role"] == "assistant"]
    assert examples, "JSON presets teach the format by example"
    for text in examples:
        check = check_output(preset, text)
        assert check.schema_valid is True, (text, check.error)


def test_get_preset_returns_the_file_and_lists_known_names_when_unknown():
    assert get_preset("tool_call") == SHIPPED["tool_call"]
    with pytest.raises(PresetError) as info:
        get_preset("no_such_preset")
    assert "no_such_preset" in str(info.value) and "tool_call" in str(info.value) and "prose" in str(info.value)
    with pytest.raises(PresetError):
        get_preset("../presets/tool_call")


# --- malformed files -------------------------------------------------------------------------------

MALFORMED = {
    "bad_json": ('{"name": "bad_json", "kind": }', ["not valid JSON", "line 1, column"]),
    "not_object": ("[1, 2]", ["one JSON object"]),
    "missing_kind": (good_preset("missing_kind", kind=DROP), ["field 'kind'", "missing"]),
    "missing_tokens": (good_preset("missing_tokens", max_new_tokens=DROP), ["field 'max_new_tokens'", "missing"]),
    "wrong_type": (good_preset("wrong_type", max_new_tokens="64"), ["field 'max_new_tokens'", "'64' is not of type"]),
    "negative": (
        good_preset("negative", max_new_tokens=-3),
        ["field 'max_new_tokens'", "-3 is less than the minimum of 1"],
    ),
    "bad_kind": (good_preset("bad_kind", kind="poem"), ["field 'kind'", "'poem'"]),
    "bad_role": (
        good_preset("bad_role", messages=[{"role": "robot", "content": "hi"}]),
        ["field 'messages[0].role'", "'robot'"],
    ),
    "content_type": (
        good_preset("content_type", messages=[{"role": "user", "content": 5}]),
        ["field 'messages[0].content'", "not of type 'string'"],
    ),
    "unknown_field": (good_preset("unknown_field", max_tokens=64), ["field 'max_tokens'", "unknown field"]),
    "bad_schema": (
        good_preset("bad_schema", output_schema={"type": "objekt"}),
        ["field 'output_schema.type'", "not a valid JSON Schema"],
    ),
    "bad_schema_deep": (
        good_preset("bad_schema_deep", output_schema={"properties": {"a": {"minimum": "zero"}}}),
        ["field 'output_schema.properties.a.minimum'", "not a valid JSON Schema"],
    ),
    "schema_not_object": (good_preset("schema_not_object", output_schema=[1]), ["field 'output_schema'"]),
    "mismatch": (good_preset("other_name"), ["field 'name'", "'other_name'", "'mismatch'"]),
    "both": (good_preset("both", prompt="raw text"), ["field 'messages'", "exactly one of", "not both"]),
    "neither": (good_preset("neither", messages=DROP), ["field 'messages'", "exactly one of", "neither"]),
    "no_schema": (good_preset("no_schema", output_schema=DROP), ["field 'output_schema'", "missing"]),
    "schema_on_text": (
        good_preset("schema_on_text", output_format="text"),
        ["field 'output_schema'", "only 'json' and 'react'"],
    ),
    "bad_format": (good_preset("bad_format", output_format="yaml"), ["field 'output_format'", "'yaml'"]),
    "ends_with_assistant": (
        good_preset(
            "ends_with_assistant",
            messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        ),
        ["field 'messages[1].role'", "last message must be from 'user'"],
    ),
    "empty_messages": (good_preset("empty_messages", messages=[]), ["field 'messages'"]),
}


@pytest.mark.parametrize("stem", sorted(MALFORMED))
def test_malformed_file_raises_preset_error_naming_file_and_field(tmp_path, stem):
    data, expected = MALFORMED[stem]
    path = write(tmp_path, stem, data)
    with pytest.raises(PresetError) as info:
        load_preset(path)
    message = str(info.value)
    assert f"{stem}.json" in message, message
    for part in expected:
        assert part in message, message
    assert isinstance(info.value, PlaygroundError)


def test_good_file_in_tmp_dir_loads(tmp_path):
    preset = load_preset(write(tmp_path, "good", good_preset()))
    assert preset.name == "good" and preset.output_format == "json" and preset.is_chat
    raw = load_preset(write(tmp_path, "raw", good_preset("raw", messages=DROP, prompt="Once", output_format="text",
                                                         output_schema=DROP)))
    assert raw.prompt == "Once" and raw.messages is None and not raw.checks_output


def test_load_presets_non_strict_keeps_the_good_ones(tmp_path):
    write(tmp_path, "alpha", good_preset("alpha"))
    write(tmp_path, "beta", good_preset("beta", kind="poem"))
    write(tmp_path, "gamma", "{oops")
    write(tmp_path, "delta", good_preset("delta"))
    (tmp_path / "notes.txt").write_text("not a preset")

    presets, errors = load_presets(tmp_path, strict=False)
    assert list(presets) == ["alpha", "delta"]
    assert len(errors) == 2 and all(isinstance(e, PresetError) for e in errors)
    assert "beta.json" in str(errors[0]) and "gamma.json" in str(errors[1])

    with pytest.raises(PresetError) as info:
        load_presets(tmp_path)
    assert "beta.json" in str(info.value) and "gamma.json" in str(info.value)

    assert get_preset("alpha", tmp_path).name == "alpha"
    with pytest.raises(PresetError, match="alpha, beta, delta, gamma"):
        get_preset("zeta", tmp_path)


def test_missing_directory_is_a_preset_error(tmp_path):
    with pytest.raises(PresetError, match="no preset directory"):
        load_presets(tmp_path / "nowhere")
    assert load_presets(tmp_path) == {}


# --- checking outputs ------------------------------------------------------------------------------

TOOL = SHIPPED["tool_call"]
REACT = SHIPPED["react"]


def test_valid_output():
    text = '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}'
    check = check_output(TOOL, text)
    assert check == OutputCheck(True, True, None, json.loads(text), (0, len(text)))
    assert check.ok


def test_fenced_output_with_prose_around():
    call = '{"name": "get_weather", "arguments": {"location": "Oslo", "unit": "celsius"}}'
    text = f"Sure! Here is the call:\n```json\n{call}\n```\nDone."
    check = check_output(TOOL, text)
    assert check.is_json and check.schema_valid and check.error is None
    assert check.value["arguments"]["location"] == "Oslo"
    start, end = check.span
    assert json.loads(text[start:end]) == check.value


def test_first_balanced_json_after_non_json_braces():
    call = '{"name": "get_weather", "arguments": {"location": "Rome", "unit": "celsius"}}'
    text = f"Use {{name}} as a placeholder. {call} trailing"
    check = check_output(TOOL, text)
    assert check.schema_valid is True and check.value["arguments"]["location"] == "Rome"


def test_invalid_json_is_a_finding_not_an_exception():
    truncated = '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "cel'
    check = check_output(TOOL, truncated)
    assert check.is_json is False and check.schema_valid is None and check.value is None
    assert "invalid JSON" in check.error and "line 1, column" in check.error
    assert not check.ok

    single_quotes = "{'name': 'get_weather'}"
    check = check_output(TOOL, single_quotes)
    assert not check.is_json and "property name enclosed in double quotes" in check.error

    check = check_output(TOOL, "The weather in Paris is sunny.")
    assert not check.is_json and "no JSON object or array" in check.error


def test_schema_invalid_output_names_the_path():
    text = '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "kelvin"}}'
    check = check_output(TOOL, text)
    assert check.is_json is True and check.schema_valid is False
    assert "$.arguments.unit" in check.error and "'kelvin'" in check.error
    assert check.value["arguments"]["unit"] == "kelvin"

    check = check_output(TOOL, '{"name": "get_weather", "arguments": {"location": "Paris"}}')
    assert check.schema_valid is False and "$.arguments" in check.error and "'unit'" in check.error

    check = check_output(SHIPPED["json_list"], '[{"item": "cheese", "price": 6}, {"item": "grapes", "price": "5"}]')
    assert check.schema_valid is False and "$[1].price" in check.error


def test_react_checks_the_json_after_action_input():
    text = 'Thought: I should search.\nAction: search\nAction Input: {"query": "author of Moby-Dick"}\nObservation: ...'
    check = check_output(REACT, text)
    assert check.schema_valid is True and check.value == {"query": "author of Moby-Dick"}
    assert text[check.span[0]:check.span[1]] == '{"query": "author of Moby-Dick"}'

    # JSON elsewhere in the step does not count; only the Action Input is checked
    check = check_output(REACT, 'Thought: {"query": "x"}\nAction: search\nAction Input: {"author": "Melville"}')
    assert check.schema_valid is False and check.value == {"author": "Melville"}

    check = check_output(REACT, 'Thought: I know this.\nAnswer: Herman Melville')
    assert check.is_json is False and "Action Input" in check.error


def test_text_presets_are_not_checked():
    assert check_output(SHIPPED["prose"], "anything at all") is None
    assert check_output(SHIPPED["sql"], "SELECT 1;") is None


def test_extract_json_takes_an_array_and_the_json_fence():
    value, _span, error = extract_json('```python\nx = {1: 2}\n```\n```json\n[1, 2, 3]\n```')
    assert value == [1, 2, 3] and error is None


# --- prompts with the real tokenizer ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer

    return load_tokenizer(ensure_embedded_safetensors(progress=lambda *a: None))


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_prompt_ids_with_the_real_tokenizer(tokenizer, name):
    preset = SHIPPED[name]
    ids = preset.prompt_ids(tokenizer)
    text = preset.prompt_text(tokenizer)
    assert isinstance(ids, list) and all(type(t) is int for t in ids)
    assert 0 < len(ids) < 1024
    if preset.is_chat:
        assert text.endswith("<|im_start|>assistant\n")
        assert preset.messages[-1]["content"] in text
        assert ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        assert text == preset.prompt
        assert tokenizer.decode(ids) == preset.prompt


def test_chat_preset_needs_a_chat_template():
    class NoTemplate:
        chat_template = None

    with pytest.raises(PresetError, match="no chat template"):
        SHIPPED["tool_call"].prompt_ids(NoTemplate())


# --- slow: the embedded model really emits the shapes ----------------------------------------------


@pytest.fixture(scope="module")
def pair():
    from playground.pairs.loading import load_pair

    return load_pair(draft=None, progress=lambda *a: None)


@pytest.mark.slow
@pytest.mark.parametrize("name", JSON_PRESETS)
def test_greedy_output_of_the_embedded_model_validates(pair, name):
    from playground.core.engine import plain_generate
    from playground.core.records import Step

    preset = SHIPPED[name]
    records = plain_generate(pair, preset.prompt_ids(pair.tokenizer), max_new_tokens=preset.max_new_tokens)
    tokens = [r.token for r in records if isinstance(r, Step)]
    text = pair.tokenizer.decode(tokens, skip_special_tokens=True)
    check = check_output(preset, text)
    assert check.schema_valid is True, f"{name}: {check.error}\n{text}"
