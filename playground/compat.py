"""The oldest transformers this package runs on, declared once, and the one check of it.

transformers older than 5.24 take no `cache=` argument in a forward: they ignore the one `core.cached` passes, and
the model runs without a cache with nothing failing (the cache stays empty and the logits of a continued feed come
out wrong). So a cache-using forward refuses them by name before it runs (`core.cached.CachedLM`), and so does
the command line before a command that runs a model, in one line.
"""

from __future__ import annotations

from functools import cache

import transformers
from packaging.version import InvalidVersion, Version

from .errors import PlaygroundError

MIN_TRANSFORMERS = "5.24"
"""The oldest transformers whose forward takes `cache=` (requirements.txt and pyproject.toml say >=5.24 too)."""


@cache
def transformers_problem(installed: str) -> str | None:
    """Why transformers `installed` cannot run this package, or None when it can."""
    try:
        too_old = Version(installed) < Version(MIN_TRANSFORMERS)
    except InvalidVersion:
        return f"transformers reports the version {installed!r}, which is not a version number"
    if too_old:
        return f"transformers {installed} is older than {MIN_TRANSFORMERS}"
    return None


def require_transformers() -> None:
    """Refuse the transformers installed when it is older than MIN_TRANSFORMERS (a PlaygroundError naming both)."""
    problem = transformers_problem(transformers.__version__)
    if problem is not None:
        raise PlaygroundError(f"{problem}, the oldest this playground runs on: its forward would ignore the "
                              f"cache and run without one; install transformers>={MIN_TRANSFORMERS} "
                              "(pip install -r requirements.txt)")
