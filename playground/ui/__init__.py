"""The browser playground (Gradio 6). The only part of the package that imports gradio.

    from playground.ui import build_ui, launch
    launch(build_ui())

build_ui() builds components and wiring and loads no model; the model pair loads once per process on
first use. launch() binds 127.0.0.1 unless GRADIO_SERVER_NAME says otherwise, and answers GET /healthz (ui/health.py).
"""

from __future__ import annotations

import os

from .blocks import build_ui
from .health import routes
from .serving import PairProvider, choice_from_env
from .theme import launch_kwargs

__all__ = ["PairProvider", "build_ui", "choice_from_env", "launch", "launch_kwargs", "server_name"]


def server_name(env=None) -> str:
    """Where the app listens: 127.0.0.1 (this machine only) unless GRADIO_SERVER_NAME says otherwise (the
    Docker image sets 0.0.0.0 on purpose); an empty value counts as unset, never as "all interfaces"."""
    env = os.environ if env is None else env
    return (env.get("GRADIO_SERVER_NAME") or "").strip() or "127.0.0.1"


def launch(demo, **overrides):
    """Launch with the playground's theme and CSS, on loopback unless GRADIO_SERVER_NAME is set."""
    kwargs = {"server_name": server_name(), **launch_kwargs(), "app_kwargs": {"routes": routes()}}  # GET /healthz
    kwargs.update(overrides)
    return demo.launch(**kwargs)
