"""Whether the llama.cpp drafter can run in this process: llama-cpp-python installed, of the version whose C API
it uses, and bound to the same OpenMP runtime as torch (two runtimes' spinning thread pools fight over the cores).

torch is imported before llama_cpp here on purpose: torch's wheel bundles its own libgomp under the same soname,
libgomp.so.1, so the dynamic loader binds both to the one loaded first, torch's (tests/test_llamacpp.py runs both
orders).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
from pathlib import Path

import torch

# The version scripts/install_llama_cpp.sh installs and the drafter was written and tested against.
PINNED_VERSION = "0.3.36"
LLAMA_CPP_INSTALL_HINT = "run `bash scripts/install_llama_cpp.sh` (builds llama-cpp-python from source, ~20 min on 2 cores)"

_backend_ready = False


def import_llama_cpp():
    """Import llama_cpp (after torch, imported at the top of this module: see the module docstring)."""
    global _backend_ready
    # The package's import installs a log callback that prints everything at INFO and above unless its
    # logger says otherwise; the playground wants llama.cpp's errors only.
    logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
    import llama_cpp  # optional: installed only by scripts/install_llama_cpp.sh, so imported where it is used

    if not _backend_ready:
        llama_cpp.llama_backend_init()
        _backend_ready = True
    return llama_cpp


def llama_cpp_available() -> tuple[bool, str]:
    """(True, what) when the llama.cpp drafter can be used; (False, why not) otherwise. Never raises."""
    if importlib.util.find_spec("llama_cpp") is None:
        return False, f"llama-cpp-python is not installed: {LLAMA_CPP_INSTALL_HINT}"
    try:
        llama_cpp = import_llama_cpp()
    except Exception as e:  # noqa: BLE001  a broken build: missing shared library, wrong glibc, ...
        return False, f"llama-cpp-python is installed but does not load ({type(e).__name__}: {e}); {LLAMA_CPP_INSTALL_HINT}"
    version = getattr(llama_cpp, "__version__", "?")
    if not any(field[0] == "use_extra_bufts" for field in llama_cpp.llama_model_params._fields_):
        return False, (
            f"llama-cpp-python {version} has no use_extra_bufts model parameter (this drafter needs "
            f"{PINNED_VERSION}): {LLAMA_CPP_INSTALL_HINT}"
        )
    try:
        runtimes = openmp_runtimes()
    except Exception:  # noqa: BLE001  a diagnostic only: never a reason to refuse
        runtimes = {}
    if runtimes.get("torch") and runtimes.get("llama.cpp") and runtimes["torch"] != runtimes["llama.cpp"]:
        return False, (
            f"torch and llama.cpp use two different OpenMP runtimes ({runtimes['torch']} and "
            f"{runtimes['llama.cpp']}): their spinning thread pools would fight over the cores; rebuild "
            "llama.cpp without OpenMP: `LLAMA_CPP_OPENMP=OFF bash scripts/install_llama_cpp.sh`"
        )
    return True, f"llama-cpp-python {version}"


def openmp_runtimes() -> dict[str, str | None]:
    """Which OpenMP runtime file torch's and llama.cpp's CPU libraries are bound to in this process
    (None: that library uses no OpenMP). Linux only; {} elsewhere or when a library is not found.

    Both link the soname libgomp.so.1 (torch's wheel bundles its own copy under that name), so the
    dynamic loader gives them ONE runtime, whichever was loaded first; this is what tests check."""
    import llama_cpp  # optional and heavy: only where llama-cpp-python is installed (import_llama_cpp has run)

    libs = {
        "torch": Path(torch.__file__).parent / "lib" / "libtorch_cpu.so",
        "llama.cpp": Path(llama_cpp.__file__).parent / "lib" / "libggml-cpu.so",
    }
    if not all(p.is_file() for p in libs.values()):
        return {}
    try:
        with open("/proc/self/maps") as f:
            maps = [line.split() for line in f]
    except OSError:
        return {}

    def runtime_of(path: Path) -> str | None:
        try:  # dlsym on a library's handle searches it and its dependencies: the runtime it is bound to
            fn = ctypes.CDLL(str(path)).omp_get_max_threads
        except (OSError, AttributeError):
            return None
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        for parts in maps:
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi and len(parts) >= 6:
                return os.path.realpath(parts[5])
        return None

    return {name: runtime_of(path) for name, path in libs.items()}
