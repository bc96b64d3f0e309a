"""The package's shape, checked from its source: no import circle, no module over 400 lines, every
function-local import says why on its line (or the comment line above it), and nothing but playground.ui
imports gradio."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "playground"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _walk(node, name: str, is_package: bool, modules: dict, top: bool, found: list) -> None:
    """Collect (imported module, node, at module level) under `node`; TYPE_CHECKING blocks are left out."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
            continue  # annotations only: no import at run time
        if isinstance(child, ast.ImportFrom):
            target = _resolve(name, is_package, child)
            candidates = [target] + [f"{target}.{a.name}" for a in child.names]
            found.extend((c, child, top) for c in candidates if c in modules)
            if not any(c in modules for c in candidates):
                found.append((target, child, top))
        elif isinstance(child, ast.Import):
            found.extend((a.name, child, top) for a in child.names)
        else:
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            _walk(child, name, is_package, modules, inner, found)


def _imports(modules: dict[str, Path]) -> dict[str, list[tuple[str, ast.stmt, bool]]]:
    """module -> [(imported module, node, at module level)]."""
    graph = {}
    for name, path in modules.items():
        found: list = []
        _walk(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", modules, True, found)
        graph[name] = found
    return graph


MODULES = _modules()
GRAPH = _imports(MODULES)


def test_no_module_is_over_400_lines():
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_there_is_no_import_circle():
    edges = {m: sorted({t for t, _, _ in deps if t in MODULES and t != m}) for m, deps in GRAPH.items()}
    # A package's __init__ that re-exports its own modules is not a circle with them.
    for m, targets in edges.items():
        edges[m] = [t for t in targets if not m.startswith(t + ".")]
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(m):
        state[m] = 1
        stack.append(m)
        for t in edges[m]:
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if t not in state:
                walk(t)
        stack.pop()
        state[m] = 2

    for m in edges:
        if m not in state:
            walk(m)


def test_every_function_local_import_says_why():
    missing = []
    for name, deps in GRAPH.items():
        lines = MODULES[name].read_text(encoding="utf-8").splitlines()
        for _, node, top in deps:
            if top:
                continue
            here = lines[node.lineno - 1]
            above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
            if "#" not in here and not above.startswith("#"):
                missing.append(f"{MODULES[name].relative_to(PACKAGE.parent)}:{node.lineno}: {here.strip()}")
    assert not missing, "function-local imports without a reason:\n" + "\n".join(sorted(set(missing)))


def test_only_the_ui_imports_gradio():
    users = sorted({name for name, deps in GRAPH.items() for t, _, _ in deps
                    if t.split(".")[0] in ("gradio", "gradio_client") and not name.startswith("playground.ui")})
    assert not users, f"gradio imported outside playground.ui: {users}"


def test_the_layering_holds():
    """core knows no drafter, pair, lab, constraint or UI; constraints, drafters, pairs and backends know no lab or
    UI (constraints no drafter or pair either); nothing but the app layers (cli, ui) imports them."""
    below = {
        "playground.core": ("playground.drafters", "playground.lab", "playground.cli", "playground.ui",
                            "playground.run", "playground.pairs.loading", "playground.pairs.registry",
                            "playground.constraints"),
        # Constrained decoding sits beside core: the loop takes its guide as an object; drafters and the app layers
        # import it, it imports none of them.
        "playground.constraints": ("playground.drafters", "playground.lab", "playground.cli", "playground.ui",
                                   "playground.run", "playground.pairs"),
        "playground.drafters": ("playground.lab", "playground.cli", "playground.ui", "playground.run"),
        "playground.pairs": ("playground.drafters", "playground.lab", "playground.cli", "playground.ui",
                             "playground.run"),
        "playground.lab": ("playground.cli", "playground.ui"),
        # The serving-engine backend (vLLM over HTTP) sits beside drafters and pairs: the lab and the app layers
        # use it, it uses none of them.
        "playground.backends": ("playground.lab", "playground.cli", "playground.ui", "playground.run"),
    }
    wrong = []
    for name, deps in GRAPH.items():
        for layer, forbidden in below.items():
            if name == layer or name.startswith(layer + "."):
                wrong += [f"{name} imports {t}" for t, _, _ in deps
                          if any(t == f or t.startswith(f + ".") for f in forbidden)]
    assert not wrong, "\n".join(wrong)
