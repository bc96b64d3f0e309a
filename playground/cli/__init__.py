"""The command line: `python -m playground COMMAND` or `playground COMMAND` once installed."""

from .entry import build_parser, main

__all__ = ["build_parser", "main"]
