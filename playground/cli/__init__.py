"""The command line: `python -m playground COMMAND`, or `playground COMMAND` once installed (the console
script calls `run`). `main(argv)` runs one command and returns its exit status."""

from .entry import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
