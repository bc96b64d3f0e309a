"""A trace line's OpenAI `tools` (playground.inputs.tools, traces.py): the whole-output schema of its tool-call turns,
written as the tool_call preset's, carried by exactly the turns that are one call and nothing else; a bad `tools`
is a one-line error naming the line and the field. Real tokenizer, no model."""

import json

import jsonschema
import pytest

from playground.inputs.presets import get_preset
from playground.inputs.tools import ToolsError, tools_schema
from playground.inputs.traces import read_trace

WEATHER = {"type": "object", "properties": {"location": {"type": "string", "minLength": 1},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["location", "unit"], "additionalProperties": False}
FLIGHTS = {"type": "object", "properties": {"origin": {"type": "string", "minLength": 1},
                                            "destination": {"type": "string", "minLength": 1},
                                            "date": {"type": "string", "minLength": 1}},
           "required": ["origin", "destination", "date"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "search_flights", "description": "Find flights",
                                           "parameters": FLIGHTS}}]


def call(name, args, content=None):
    return {"role": "assistant", "content": content,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


@pytest.fixture(scope="module")
def tokenizer():
    from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer

    return load_tokenizer(ensure_embedded_safetensors(progress=lambda *a: None))


def test_the_tools_schema_is_written_as_the_tool_call_presets():
    assert tools_schema(TOOLS) == get_preset("tool_call").output_schema
    assert tools_schema([]) is None
    bare = tools_schema([{"type": "function", "function": {"name": "now"}}])  # no parameters: none taken
    jsonschema.validate({"name": "now", "arguments": {}}, bare)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "now", "arguments": {"x": 1}}, bare)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "later", "arguments": {}}, bare)


@pytest.mark.parametrize("tools, field, words", [
    ({"name": "f"}, "tools", "must be a list"),
    (["f"], "tools[0]", "a tool is an object"),
    ([{"type": "retrieval"}], "tools[0].type", "only function tools"),
    ([{"type": "function"}], "tools[0].function", "missing"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name", "missing"),
    ([TOOLS[0], TOOLS[0]], "tools[1].function.name", "declared twice"),
    ([{"type": "function", "function": {"name": "f", "parameters": []}}], "tools[0].function.parameters",
     "an object, not list"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "thing"}}}],
     "tools[0].function.parameters", "not a valid JSON Schema"),
])
def test_a_bad_tools_field_names_what_is_wrong(tools, field, words):
    with pytest.raises(ToolsError) as e:
        tools_schema(tools)
    assert e.value.field == field and words in e.value.message


def test_only_a_turn_that_is_one_call_carries_the_schema(tmp_path, tokenizer):
    messages = [{"role": "system", "content": "Call tools."}, {"role": "user", "content": "Weather in Oslo?"},
                call("get_weather", {"location": "Oslo", "unit": "celsius"}),  # turn 1: one call, held
                {"role": "tool", "tool_call_id": "c", "content": "{\"t\": 3}"},
                {"role": "assistant", "content": "It is 3 degrees."},  # turn 2: prose
                {"role": "user", "content": "And flights?"},
                call("search_flights", {"origin": "Oslo", "destination": "Rome", "date": "2024-05-01"},
                     content="Let me look."),  # turn 3: a call with text beside it
                {"role": "tool", "tool_call_id": "c", "content": "[]"},
                {"role": "assistant", "content": None, "tool_calls": [call("get_weather", {})["tool_calls"][0]] * 2}]
    lines = [{"id": "a", "tools": TOOLS, "messages": messages}, {"id": "b", "messages": messages},
             {"id": "c", "tools": [], "messages": messages[:3]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(path, tokenizer)
    assert trace.errors == []
    held = [(t.name, t.schema_name) for t in trace.turns if t.schema is not None]
    assert held == [("a turn 1", "the tools of line 1")]
    assert trace.turns[0].schema == tools_schema(TOOLS) and trace.turns[0].to_dict()["schema"] == "the tools of line 1"
    assert all(t.to_dict()["schema"] is None for t in trace.turns[1:])  # no tools (b), an empty list (c)
    text = tokenizer.decode(trace.turns[0].completion_ids, skip_special_tokens=True)
    jsonschema.validate(json.loads(text), trace.turns[0].schema)  # the recorded call keeps to its schema


def test_a_bad_tools_field_is_one_error_naming_the_line_and_the_rest_is_read(tmp_path, tokenizer):
    messages = [{"role": "user", "content": "Weather?"}, call("get_weather", {"location": "Oslo", "unit": "celsius"})]
    lines = [{"id": "a", "tools": TOOLS, "messages": messages},
             {"id": "b", "tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}],
              "messages": messages},
             {"id": "c", "tools": "get_weather", "messages": messages}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(path, tokenizer)
    assert [t.name for t in trace.turns] == ["a"]
    assert [str(e) for e in trace.errors] == [
        "line 2: field 'tools[0].function.parameters': a JSON schema is an object, not int",
        "line 3: field 'tools': must be a list of tools, not str"]
