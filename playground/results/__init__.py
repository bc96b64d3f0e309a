"""Typed lab results, one module per experiment family; importing the package registers every type, so
`load_result` reads any saved file."""

from . import vllm  # noqa: F401 - registers the vllm-sweep result
from .base import FORMAT, KINDS, Result, from_document, load_result, read_document, result_kind

__all__ = ["FORMAT", "KINDS", "Result", "from_document", "load_result", "read_document", "result_kind"]
