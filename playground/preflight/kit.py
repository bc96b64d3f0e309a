"""What the preflight and scripts/gpu_image/kit.py share about a lease's wheels: the advice a failure ends with, and
whether a requirement is met by the versions at hand. Imports only the standard library and packaging, so it runs
where nothing else has been checked yet."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

CARRY = "carry the wheels (scripts/gpu_wheels.sh) and pass their folder to scripts/gpu_check.sh"


class Failed(Exception):
    """A preflight check that failed: its message is the one line the preflight ends with."""


def requirement_status(text: str, versions: Mapping[str, str | None], environment: Mapping | None = None) -> str:
    """"met", "n/a" (its marker leaves this environment out), "assumed" (the distribution is there, its version
    unknown: None in `versions`, and the requirement bounds it) or what is missing, in words.
    `versions`: canonical distribution name -> version."""
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return f"{text!r}, which is not a requirement"
    if req.marker is not None and not req.marker.evaluate({**(environment or default_environment()), "extra": ""}):
        return "n/a"
    name = canonicalize_name(req.name)
    if name not in versions:
        return f"{req} (not there)"
    if versions[name] is None:
        return "assumed" if req.specifier else "met"
    if req.specifier.contains(versions[name], prereleases=True):
        return "met"
    return f"{req} (found {versions[name]})"


def installed_versions() -> dict[str, str]:
    """Canonical name -> version of every distribution importable here; the first on sys.path wins, as an
    import's does (a carried wheel on PYTHONPATH over the image's copy)."""
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        out.setdefault(canonicalize_name(dist.metadata["Name"] or ""), dist.version)
    return out


def carried_problems(wheels: Path) -> list[str]:
    """Each wheel in the folder `wheels`: the version imported is the wheel's, and what it requires is installed."""
    installed, problems = installed_versions(), []
    for whl in sorted(wheels.glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        name = canonicalize_name(name)
        if installed.get(name) != version:
            problems.append(f"{name} {version} is carried but {installed.get(name, 'nothing')} is imported")
            continue
        for text in importlib.metadata.requires(name) or ():
            status = requirement_status(text, installed)
            if status not in ("met", "n/a", "assumed"):
                problems.append(f"{name} {version} needs {status}")
    return problems
