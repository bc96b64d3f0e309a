"""Where a constraint's JSON schema comes from, and its name in every error about it.

`schema_from(source)`: a JSON schema given as a dict (or True / False), a preset's name (its `output_schema`), or a
.json file. Each becomes a `Schema` that carries a name ("the tool_call preset's schema", "schema file tools.json", "the given
schema"), so that a schema the library cannot compile, or one that allows no output, is refused in one line that
says which schema it was.

No torch, no grammar library here: the CLI checks a --schema argument before anything loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError as JsonSchemaError

from ..errors import PlaygroundError
from ..inputs.presets import PresetError, get_preset, load_presets


class SchemaError(PlaygroundError):
    """A schema that cannot constrain a run: unreadable, not JSON, not a JSON Schema, not compilable, or empty."""


@dataclass(frozen=True)
class Schema:
    value: dict | bool
    name: str  # what errors and the run's record call it


def schema_from(source) -> Schema:
    """A dict / bool (the schema itself), an existing .json file, or a preset's name (its output schema)."""
    if isinstance(source, Schema):
        return source
    if isinstance(source, (dict, bool)):
        return _checked(Schema(source, "the given schema"))
    if isinstance(source, Path) or (isinstance(source, str) and source.strip()):
        path = Path(source)
        if path.is_file() or path.suffix == ".json" or "/" in str(source):
            return _from_file(path)
        return _from_preset(str(source))
    raise SchemaError(f"a schema is a JSON object, a preset's name or a .json file, got {source!r}")


def _from_file(path: Path) -> Schema:
    name = f"schema file {path.name}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SchemaError(f"{name}: cannot read it ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise SchemaError(f"{name}: not UTF-8 text ({e.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{name}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if not isinstance(value, (dict, bool)):
        raise SchemaError(f"{name}: a JSON schema is an object (or true / false), not {type(value).__name__}")
    return _checked(Schema(value, name))


def _from_preset(name: str) -> Schema:
    try:
        preset = get_preset(name)
    except PresetError:
        known = ", ".join(schema_presets()) or "(none)"
        raise SchemaError(f"no schema file or preset named {name!r}; presets with a schema: {known}") from None
    if preset.output_schema is None:
        raise SchemaError(f"preset {name!r} has no schema (its output is not checked); presets with a schema: "
                          f"{', '.join(schema_presets())}")
    if preset.output_format != "json":
        raise SchemaError(f"preset {name!r}'s schema checks only the JSON after 'Action Input:', not the whole "
                          "output, so it cannot constrain the whole output")
    return Schema(preset.output_schema, f"the {name} preset's schema")


def schema_presets() -> list[str]:
    """The presets whose whole output is one JSON value under their schema (those a constraint can use)."""
    return [n for n, p in load_presets().items() if p.output_format == "json" and p.output_schema is not None]


def _checked(schema: Schema) -> Schema:
    if schema.value is False:  # JSON Schema's boolean schema that no value satisfies (true: any value)
        raise SchemaError(f"{schema.name} allows no output at all (the schema is false)")
    try:
        Draft202012Validator.check_schema(schema.value)
    except JsonSchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        raise SchemaError(f"{schema.name} is not a valid JSON Schema: at {where}: {e.message}") from None
    return schema
