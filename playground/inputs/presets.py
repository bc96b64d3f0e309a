"""Presets: the output shapes agents emit (tool calls, ReAct steps, JSON, SQL, code edits, quotes, code, prose).

One JSON file per preset in `presets/`. A file names its `kind`, gives either chat `messages` (rendered with the
tokenizer's chat template) or a raw `prompt`, a default `max_new_tokens`, and an `output_format`:

- "json":  the output is a JSON object or array, checked against `output_schema`;
- "react": a ReAct step (Thought / Action / Action Input); the JSON after "Action Input:" is checked;
- "text":  nothing is checked (SQL, code, prose, ...).

Files are validated against PRESET_FILE_SCHEMA (JSON Schema, Draft 2020-12) when loaded; a malformed file raises
`PresetError` naming the file and the field. `check_output` judges a generated text: invalid output is a finding
(an `OutputCheck`), never an exception.

No gradio, no torch, no model loading here: a tokenizer is passed in where one is needed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from pydantic import TypeAdapter

from ..errors import PlaygroundError

if TYPE_CHECKING:
    from ..results.base import Json

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"

KINDS = ("tool_call", "react", "json", "sql", "code_edit", "quote", "code", "prose")
OUTPUT_FORMATS = ("json", "react", "text")
ROLES = ("system", "user", "assistant")

PRESET_FILE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "playground preset file",
    "type": "object",
    "required": ["name", "title", "kind", "description", "max_new_tokens", "output_format"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*$"},
        "title": {"type": "string", "minLength": 1},
        "kind": {"enum": list(KINDS)},
        "description": {"type": "string", "minLength": 1},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role", "content"],
                "additionalProperties": False,
                "properties": {"role": {"enum": list(ROLES)}, "content": {"type": "string"}},
            },
        },
        "prompt": {"type": "string", "minLength": 1},
        "max_new_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
        "output_format": {"enum": list(OUTPUT_FORMATS)},
        "output_schema": {"type": ["object", "boolean"]},
    },
}
_FILE_VALIDATOR = Draft202012Validator(PRESET_FILE_SCHEMA)


class PresetError(PlaygroundError):
    """A preset file that cannot be used, or an unknown preset name."""


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    kind: str
    description: str
    max_new_tokens: int
    output_format: str  # "json" | "react" | "text"
    messages: tuple[dict, ...] | None = None  # chat messages, each {"role", "content"}
    prompt: str | None = None  # raw text, encoded as is
    output_schema: dict | bool | None = None  # JSON Schema the (JSON part of the) output must satisfy
    path: Path | None = None

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    @property
    def checks_output(self) -> bool:
        return self.output_format != "text"

    def prompt_text(self, tokenizer) -> str:
        """The exact text the model sees: the chat template with the generation prompt, or the raw prompt."""
        if not self.is_chat:
            return self.prompt
        return self._chat_template(tokenizer, tokenize=False)

    def prompt_ids(self, tokenizer) -> list[int]:
        if not self.is_chat:
            return [int(t) for t in tokenizer(self.prompt)["input_ids"]]
        ids = self._chat_template(tokenizer, tokenize=True)
        if isinstance(ids, Mapping) or hasattr(ids, "keys"):  # a BatchEncoding on some transformers versions
            ids = ids["input_ids"]
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if ids and isinstance(ids[0], (list, tuple)):
            ids = ids[0]
        return [int(t) for t in ids]

    def _chat_template(self, tokenizer, tokenize: bool):
        if getattr(tokenizer, "chat_template", None) is None:
            raise PresetError(
                f"preset {self.name!r} is written as chat messages, but this tokenizer has no chat template; "
                "use an instruct/chat model or a preset with a raw 'prompt'"
            )
        kwargs = {"return_dict": False} if tokenize else {}
        return tokenizer.apply_chat_template(
            [dict(m) for m in self.messages], add_generation_prompt=True, tokenize=tokenize, **kwargs
        )


_PRESET = TypeAdapter(Preset)


@dataclass(frozen=True)
class OutputCheck:
    """What a generated text amounted to, for a preset whose output is checked."""

    is_json: bool  # a JSON value was found and parsed
    schema_valid: bool | None  # None when there was no JSON to check
    error: str | None  # why not: the JSON decode error, or the schema error with its JSON path
    value: Json = None  # the parsed JSON value
    span: tuple[int, int] | None = None  # where the JSON lies in the text (character offsets)

    @property
    def ok(self) -> bool:
        return self.is_json and self.schema_valid is not False


# --- loading ---------------------------------------------------------------------------------------


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _field_path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _schema_error_message(error) -> tuple[str, str]:
    """(field, message) for a jsonschema ValidationError in a preset file."""
    parts = list(error.absolute_path)
    if error.validator == "required":
        missing = [r for r in error.validator_value if r not in error.instance]
        return _field_path(parts + missing[:1]), "missing (a required field)"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return _field_path(parts + extra[:1]), f"unknown field (allowed: {', '.join(allowed)})"
    return _field_path(parts) or "(top level)", error.message


def load_preset(path: str | Path) -> Preset:
    path = Path(path)
    where = _display(path)

    def fail(field: str, message: str):
        raise PresetError(f"{where}: field '{field}': {message}")

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise PresetError(f"{where}: cannot read the file: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise PresetError(f"{where}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise PresetError(f"{where}: not UTF-8 text: {e.reason}") from None
    if not isinstance(data, dict):
        raise PresetError(f"{where}: a preset file holds one JSON object, not {type(data).__name__}")

    error = best_match(_FILE_VALIDATOR.iter_errors(data))
    if error is not None:
        fail(*_schema_error_message(error))

    # The file passed its JSON Schema, so it fits the dataclass; pydantic builds it (extra keys were refused above).
    preset = _PRESET.validate_python({**data, "path": path})
    if preset.name != path.stem:
        fail("name", f"{preset.name!r} must equal the file name without .json ({path.stem!r})")
    if (preset.messages is None) == (preset.prompt is None):
        which = "neither is present" if preset.messages is None else "not both"
        fail("messages", f"give exactly one of 'messages' (chat) or 'prompt' (raw text), {which}")
    if preset.messages is not None and preset.messages[-1]["role"] != "user":
        fail(f"messages[{len(preset.messages) - 1}].role", "the last message must be from 'user' (the model answers it)")

    fmt = preset.output_format
    if preset.output_schema is not None:
        if fmt == "text":
            fail("output_schema", "only 'json' and 'react' output is checked; set output_format or drop the schema")
        try:
            Draft202012Validator.check_schema(preset.output_schema)
        except SchemaError as e:
            at = _field_path(["output_schema", *e.absolute_path])
            fail(at, f"not a valid JSON Schema: {e.message}")
    elif fmt != "text":
        fail("output_schema", f"missing: output_format {fmt!r} needs a JSON Schema to check the output against")
    return preset


def _directory(directory: str | Path | None) -> Path:
    d = PRESETS_DIR if directory is None else Path(directory)
    if not d.is_dir():
        raise PresetError(f"no preset directory at {_display(d)}")
    return d


def load_presets(directory: str | Path | None = None, strict: bool = True):
    """All presets in a directory, by name (sorted).

    strict=True: returns {name: Preset} and raises PresetError if any file is malformed (naming each one).
    strict=False: returns ({name: Preset}, [PresetError, ...]) so a UI can keep the good ones and show the bad."""
    d = _directory(directory)
    presets: dict[str, Preset] = {}
    errors: list[PresetError] = []
    for path in sorted(d.glob("*.json")):
        try:
            preset = load_preset(path)
        except PresetError as e:
            errors.append(e)
        else:
            presets[preset.name] = preset
    if not strict:
        return presets, errors
    if errors:
        raise PresetError("\n".join(str(e) for e in errors))
    return presets


def preset_names(directory: str | Path | None = None) -> list[str]:
    return sorted(p.stem for p in _directory(directory).glob("*.json"))


def get_preset(name: str, directory: str | Path | None = None) -> Preset:
    d = _directory(directory)
    path = d / f"{name}.json"
    if not (isinstance(name, str) and "/" not in name and "\\" not in name and path.is_file()):
        known = ", ".join(preset_names(d)) or "(none)"
        raise PresetError(f"unknown preset {name!r}; known presets: {known}")
    return load_preset(path)


def chosen_presets(names: list[str] | None) -> list[Preset]:
    """The presets named, else one per kind (the first by name): what a command runs without --preset."""
    if names:
        return [get_preset(name) for name in names]
    by_kind: dict[str, Preset] = {}
    for preset in load_presets().values():
        by_kind.setdefault(preset.kind, preset)
    return list(by_kind.values())


# --- checking outputs ------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_ACTION_INPUT = re.compile(r"Action\s*Input\s*:", re.IGNORECASE)
_DECODER = json.JSONDecoder()


def balanced_end(text: str, start: int, stop: int | None = None) -> int | None:
    """End (exclusive) of the bracketed value opening at text[start], honouring JSON strings; None if it is not
    closed before `stop` (default: the end of the text)."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text) if stop is None else stop):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _line_col(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1}, column {pos - text.rfind(chr(10), 0, pos)}"


def extract_json(text: str, start: int = 0):
    """The first balanced JSON object/array in text[start:] (inside a ```json fence if there is one).

    Returns (value, (begin, end), None) or (None, None, error message); offsets, lines and columns refer to `text`."""
    fence = next((m for m in _FENCE.finditer(text, start) if m.group(1).lower() in ("", "json")), None)
    lo, hi = (fence.start(2), fence.end(2)) if fence is not None else (start, len(text))
    body = text[:hi]
    first_error = None
    i = lo
    while True:
        candidates = [p for p in (body.find("{", i), body.find("[", i)) if p >= 0]
        if not candidates:
            break
        begin = min(candidates)
        end = balanced_end(body, begin)
        try:
            value, stop = _DECODER.raw_decode(body, begin)
        except json.JSONDecodeError as e:
            if first_error is None:
                first_error = f"invalid JSON: {e.msg} ({_line_col(text, e.pos)})"
            if end is None:  # unclosed: everything after it belongs to this broken value
                break
            i = end
            continue
        return value, (begin, stop), None
    return None, None, first_error or "no JSON object or array found in the output"


def check_output(preset: Preset, text: str) -> OutputCheck | None:
    """Judge a generated text against the preset's output format and schema (None for text presets)."""
    if preset.output_format == "text":
        return None
    start = 0
    if preset.output_format == "react":
        match = _ACTION_INPUT.search(text)
        if match is None:
            return OutputCheck(False, None, "no 'Action Input:' in the output")
        start = match.end()
    value, span, error = extract_json(text, start)
    if error is not None:
        return OutputCheck(False, None, error)
    if preset.output_schema is None:
        return OutputCheck(True, None, None, value, span)
    problem = best_match(Draft202012Validator(preset.output_schema).iter_errors(value))
    if problem is None:
        return OutputCheck(True, True, None, value, span)
    problem = _meant_branch(problem)
    return OutputCheck(True, False, f"at {problem.json_path}: {problem.message}", value, span)


def _meant_branch(error):
    """Inside an anyOf / oneOf that every branch fails (best_match stops there when branches fail alike: 'not valid
    under any of the given schemas'), the error of the branch the value came closest to, the one with the fewest
    errors (a tool call's branch for its own tool name): it names the path that is wrong."""
    while error.context:
        branches: dict = {}
        for e in error.context:
            branches.setdefault(e.relative_schema_path[0], []).append(e)
        error = best_match(min(branches.values(), key=len))
    return error
