"""What every typed result shares: its experiment name, the format version its file is saved with, and loading a
saved file back into its dataclass with a message for a person where it cannot.

A result is a plain dataclass (readers use attributes, never string keys) whose field names are the JSON keys of
its file, so a file saved before results were typed (format 1) still loads wherever its keys are the same. The
(de)serialisation and the validation of a file against the dataclass are pydantic's (already installed with
Gradio); nothing here walks types by hand."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self, TypeAlias

from pydantic import TypeAdapter, ValidationError

from ..errors import PlaygroundError
from ..experiments import experiments, result_type

# A JSON value, as json.load gives it: what a result's free-form fields (memory, kernels, timings) hold. At run
# time it is `object`, which pydantic neither checks nor converts: those fields load and save as they always did.
if TYPE_CHECKING:
    Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None
else:
    Json = object

FORMAT = 2
"""The version of a saved result. 1: the untyped dicts saved before results were typed (no `format` field);
2: the dataclasses in this package."""

@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


class Result:
    """The base of every result dataclass: `experiment` names it in its file, and the experiment
    (playground.experiments) that declares it as its `result`."""

    experiment: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Json]:
        """The JSON-ready document: `experiment` and `format` first, then the fields by name."""
        body = _adapter(type(self)).dump_python(self, mode="json")
        return {"experiment": self.experiment, "format": FORMAT, **body}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, doc: dict[str, Json], source: str = "the result") -> Self:
        """The dataclass from a saved document; a file that does not fit says which field and why."""
        body = {k: v for k, v in doc.items() if k not in ("experiment", "format")}
        try:
            return _adapter(cls).validate_python(body)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            older = "" if doc.get("format", 1) >= FORMAT else (
                f" It was saved by an older playground (format {doc.get('format', 1)}, now {FORMAT}): run the "
                "experiment again to read it here.")
            raise PlaygroundError(f"{source} is not a readable {cls.experiment} result: {where}: {first['msg']}"
                                  f"{'' if e.error_count() == 1 else f' (and {e.error_count() - 1} more)'}.{older}"
                                  ) from None


def read_document(path: str | Path) -> dict[str, Json]:
    """A result file's JSON object, or a PlaygroundError saying what is wrong with the file."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise PlaygroundError(f"no result file at {str(path)!r}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PlaygroundError(f"{path} is not a JSON result file ({e})") from None
    if not isinstance(doc, dict) or "experiment" not in doc:
        raise PlaygroundError(f"{path} is not a lab result (no 'experiment' field)")
    return doc


def from_document(doc: dict[str, Json], source: str = "the result") -> Result:
    """The typed result of a document already read (a saved file, or an upload in the browser)."""
    kind = result_type(doc.get("experiment"))
    if kind is None:
        known = ", ".join(sorted(e.name for e in experiments() if e.result is not None))
        raise PlaygroundError(f"{source} holds a {doc.get('experiment')!r} result, which this playground cannot "
                              f"read (it reads: {known})")
    version = doc.get("format", 1)
    if not isinstance(version, int) or version > FORMAT:
        raise PlaygroundError(f"{source} was saved in result format {version!r}; this playground reads up to "
                              f"{FORMAT}: update the playground to read it")
    return kind.from_dict(doc, source)


def load_result(path: str | Path) -> Result:
    """A saved result file as its dataclass (see `from_document`)."""
    return from_document(read_document(path), str(path))
