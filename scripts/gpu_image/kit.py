"""The GPU lease kit's two lists, read and checked: packages.txt (what the device image holds) and wheels.txt (what
a lease carries). scripts/gpu_wheels.sh downloads the pins and runs `check`; tests/test_gpu_kit.py imports this
module for the lists and the same requirement check over the installed copies of the pinned versions.

    python scripts/gpu_image/kit.py pins          the pins, one a line (what pip downloads)
    python scripts/gpu_image/kit.py prune DIR     remove from DIR the wheels wheels.txt does not pin
    python scripts/gpu_image/kit.py check DIR     DIR holds exactly the pins; every wheel's requirements are met by
                                                  a pin or the image; the wheels and the working tree fit a lease

A requirement on a distribution the image holds at a version nobody recorded is "assumed": the check lists them,
and the preflight checks them on the device (playground.preflight, --wheels).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Mapping
from email.parser import HeaderParser
from pathlib import Path

from packaging.utils import canonicalize_name

from playground.preflight.kit import requirement_status

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LEASE_BYTES = 64 << 20  # what may travel to a lease: the working tree and the carried wheels together
DEVICE = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
          "implementation_version": "3.12.3", "platform_python_implementation": "CPython", "os_name": "posix",
          "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64", "platform_release": "",
          "platform_version": ""}
"""The device image's marker environment (packages.txt's header): which requirements apply there."""


def read_list(path: Path) -> dict[str, str | None]:
    """Canonical name -> version (None where none is recorded) of a list: NAME or NAME==VERSION a line, # comments."""
    out: dict[str, str | None] = {}
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#")[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        key = canonicalize_name(name.strip())
        if key in out:
            raise ValueError(f"{path.name}:{n}: {name.strip()} is listed twice")
        out[key] = version.strip() or None
    return out


def image() -> dict[str, str | None]:
    return read_list(HERE / "packages.txt")


def pins() -> dict[str, str]:
    got = read_list(HERE / "wheels.txt")
    unpinned = [name for name, version in got.items() if version is None]
    if unpinned:
        raise ValueError(f"wheels.txt: {', '.join(unpinned)} has no ==VERSION")
    return got  # type: ignore[return-value]


def wheel_id(path: Path) -> tuple[str, str]:
    """(canonical name, version) from a wheel's file name."""
    name, version = path.name.split("-")[:2]
    return canonicalize_name(name), version


def wheel_requires(path: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as whl:
        meta = next(n for n in whl.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        headers = HeaderParser().parsestr(whl.read(meta).decode())
    return headers.get_all("Requires-Dist") or []


def unmet(requires: Mapping[str, list[str]]) -> tuple[list[str], list[str]]:
    """(problems, assumptions) of the carried distributions' requirements (name -> its Requires-Dist), each met by
    a pin, else by the image: at its recorded version, or assumed where it holds one nobody recorded."""
    carried, held = pins(), image()
    versions = {**held, **carried}
    problems, assumed = [], []
    for name, texts in sorted(requires.items()):
        for text in texts:
            status = requirement_status(text, versions, DEVICE)
            if status == "assumed":
                assumed.append(f"{name} needs {text.split(';')[0].strip()}")
            elif status not in ("met", "n/a"):
                problems.append(f"{name} {carried.get(name, '')} needs {status}: neither a pin nor the image has it")
    return problems, assumed


def tree_bytes() -> int:
    """The bytes of the working tree that travel: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    paths = (ROOT / p.decode() for p in listed if p)
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def prune(folder: Path) -> None:
    for whl in sorted(folder.glob("*.whl")):
        name, version = wheel_id(whl)
        if pins().get(name) != version:
            print(f"removing {whl.name}: wheels.txt does not pin it")
            whl.unlink()


def check(folder: Path) -> int:
    """Print what the wheels in `folder` are and whether they make the kit; the exit status (0: they do)."""
    wheels = sorted(folder.glob("*.whl"))
    have = dict(wheel_id(w) for w in wheels)
    problems = [f"{name}=={version} is pinned but not in {folder}" for name, version in pins().items()
                if have.get(name) != version]
    problems += [f"{w.name} is not pinned in wheels.txt" for w in wheels if pins().get(wheel_id(w)[0]) is None]
    unmet_, assumed = unmet({wheel_id(w)[0]: wheel_requires(w) for w in wheels})
    problems += unmet_
    size, tree = sum(w.stat().st_size for w in wheels), tree_bytes()
    print(f"the wheel set: {len(wheels)} wheels, {size / 2**20:.1f} MiB; with the working tree ({tree / 2**20:.1f} "
          f"MiB) {(size + tree) / 2**20:.1f} MiB of the {LEASE_BYTES >> 20} MiB a lease may carry")
    if size + tree > LEASE_BYTES:
        problems.append(f"the wheels and the working tree come to {(size + tree) / 2**20:.1f} MiB, over "
                        f"{LEASE_BYTES >> 20} MiB")
    if assumed:
        print("assumed of the image (its versions not recorded; the preflight checks them on the device): "
              + "; ".join(assumed))
    for p in problems:
        print(f"gpu_wheels: {p}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    try:
        return _command(argv)
    except (OSError, ValueError) as e:  # a list that does not read: one line, the file and line named
        print(f"gpu_wheels: {e}", file=sys.stderr)
        return 2


def _command(argv: list[str]) -> int:
    if argv[:1] == ["pins"]:
        print("\n".join(f"{name}=={version}" for name, version in pins().items()))
        return 0
    if len(argv) == 2 and argv[0] in ("prune", "check") and Path(argv[1]).is_dir():
        if argv[0] == "prune":
            prune(Path(argv[1]))
            return 0
        return check(Path(argv[1]))
    print("usage: kit.py pins | prune DIR | check DIR (DIR an existing folder)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
