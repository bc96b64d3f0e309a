"""Typed lab results, one module per experiment family; playground.experiments says which type each experiment's
files load as, so `load_result` reads any saved file."""

from .base import FORMAT, Result, from_document, load_result, read_document

__all__ = ["FORMAT", "Result", "from_document", "load_result", "read_document"]
