"""A Python environment that imports what the GPU lease's image would: the image's distributions
(scripts/gpu_image/packages.txt) and the carried wheels' (wheels.txt), taken from this virtualenv, and nothing else.

`site_of(folder, allowed)` links each allowed distribution's top-level files and folders (its RECORD's, its
.dist-info with them) into `folder`; `run(...)` starts this interpreter without its site-packages (-S) on that folder
and the repository. A module of any other distribution (gradio, gguf, ...) is then missing, for imports and for
importlib.metadata alike, as on the device. The standard library stays. Versions are this virtualenv's: the carried
pins are checked to be the same elsewhere (tests/test_gpu_kit.py)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path, PurePath

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_SPEC = importlib.util.spec_from_file_location("gpu_image_kit", ROOT / "scripts" / "gpu_image" / "kit.py")
kit = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(kit)


def allowed() -> set[str]:
    """The distributions a lease can import: the image's and the carried ones (canonical names)."""
    return set(kit.image()) | set(kit.pins())


def site_of(folder: Path, names: set[str]) -> Path:
    """`folder` holding links to the top-level entries of each installed distribution named in `names`."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in importlib.metadata.distributions():
        if canonicalize_name(dist.metadata["Name"] or "") not in names:
            continue
        tops = {PurePath(f).parts[0] for f in dist.files or ()}
        for top in sorted(tops):
            if top in ("..", "__pycache__") or top.endswith(".pth"):  # scripts outside, caches, startup hooks
                continue
            source, link = Path(dist.locate_file(top)), folder / top
            if source.exists() and not link.exists():
                link.symlink_to(source)
    return folder


def run(argv: list[str], site: Path, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
    """This interpreter, without its site-packages, on `site` and the repository: `python -S ARGV`."""
    clean = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{ROOT}{os.pathsep}{site}", "HOME": str(site.parent),
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", **env}
    return subprocess.run([sys.executable, "-S", *argv], cwd=ROOT, env=clean, capture_output=True, text=True,
                          timeout=timeout, check=False)
