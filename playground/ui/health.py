"""GET /healthz: whether the app serves, and whether a model is ready yet (the Docker image's health check).

The page serves before any model loads: a pair loads on its first run (a hub pair downloads first, for minutes).
So the answer has two parts, `serving` and `ready` (a pair is loaded), with a line in words. Docker's
HEALTHCHECK fails while no model is ready only where the operator asks it to (PLAYGROUND_HEALTH_NEEDS_MODEL=1),
since a first load can outlast any start period.
"""

from __future__ import annotations

from fastapi.routing import APIRoute

from . import serving
from .serving import PairCache

PATH = "/healthz"


def health(cache: PairCache | None = None) -> dict:
    """The answer of GET /healthz for `cache` (default: the app's model cache)."""
    state = (cache or serving.MODEL_CACHE).status()
    loading = "; ".join(f"{x['pair']} loading for {x['seconds']} s" for x in state["loading"])
    if state["loaded"]:
        status = "ready: " + ", ".join(state["loaded"]) + " loaded" + (f"; {loading}" if loading else "")
    elif loading:
        status = f"serving, no model ready yet: {loading}"
    else:
        status = "serving, no model ready yet: a pair loads on its first run (none asked for yet)"
    return {"serving": True, "ready": bool(state["loaded"]), "status": status, **state}


def routes() -> list[APIRoute]:
    """The routes launch() adds to Gradio's app (through launch's app_kwargs)."""
    return [APIRoute(PATH, lambda: health(), methods=["GET"], name="healthz")]
