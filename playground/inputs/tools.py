"""A trace line's OpenAI `tools` as the JSON schema its tool-call turns are held to.

OpenAI's chat format declares the tools a conversation may call (`"tools": [{"type": "function", "function":
{"name": ..., "parameters": {JSON schema}}}, ...]`). A serving engine that enforces tool calls (strict mode,
structured outputs) holds the assistant's output to one of them; traces.py writes a call as the text `{"name": NAME,
"arguments": {...}}`, so the whole output of a turn that is one tool call and nothing else is held to
`tools_schema(tools)`: anyOf, one branch per tool, `name` the tool's name as a const and `arguments` its parameters,
both required and nothing else allowed, as the tool_call preset's output_schema is written (and as llguidance needs
it: it has no if/then). A tool with no `parameters` takes none (arguments `{}`), as OpenAI reads it.

`ToolsError(field, message)` says what is wrong with a `tools` field (traces.py names the line with it).
"""

from __future__ import annotations

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JsonSchemaError

NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


class ToolsError(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def _parameters(fn: dict, where: str) -> dict | bool:
    params = fn.get("parameters", NO_PARAMETERS)
    if not isinstance(params, (dict, bool)):
        raise ToolsError(f"{where}.parameters", f"a JSON schema is an object, not {type(params).__name__}")
    try:
        Draft202012Validator.check_schema(params)
    except JsonSchemaError as e:
        at = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise ToolsError(f"{where}.parameters", f"not a valid JSON Schema: at {at}: {e.message}") from None
    return params


def tools_schema(tools) -> dict | None:
    """The whole-output schema of a turn that is one call of one of `tools` (None for no tools: an empty list)."""
    if not isinstance(tools, list):
        raise ToolsError("tools", f"must be a list of tools, not {type(tools).__name__}")
    branches, names = [], set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ToolsError(where, f"a tool is an object, not {type(tool).__name__}")
        if tool.get("type", "function") != "function":
            raise ToolsError(f"{where}.type", f"{tool.get('type')!r}: only function tools are replayed")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ToolsError(f"{where}.function", 'missing (a tool is {"type": "function", "function": {"name", '
                                                  '"parameters"}})')
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ToolsError(f"{where}.function.name", "missing or not a non-empty string")
        if name in names:
            raise ToolsError(f"{where}.function.name", f"{name!r} is declared twice")
        names.add(name)
        branches.append({"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
                         "properties": {"name": {"const": name}, "arguments": _parameters(fn, f"{where}.function")}})
    return {"anyOf": branches} if branches else None


def is_one_call(message: dict) -> bool:
    """Whether an assistant message's whole text is one tool call (no content beside it): the turns a schema holds."""
    calls = message.get("tool_calls")
    content = message.get("content")
    empty = content is None or content == "" or content == []
    return message.get("role") == "assistant" and isinstance(calls, list) and len(calls) == 1 and empty
