"""python -m playground COMMAND: the command line (playground.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
