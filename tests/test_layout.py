"""The house rules of the package layout (docs/ARCHITECTURE.md): no source file is over 800 lines
(the suites' kernel tables aside) and the shared types are defined once. Which way imports run is
the import-linter contract in pyproject.toml (`lint-imports`, run by `make test`), checked here
too so that a plain `pytest` sees it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import klaraptor

ROOT = Path(klaraptor.__file__).parent
MODULES = sorted(p for p in ROOT.rglob("*.py"))
# The suites are tables of kernels (source, reference, sizes), not logic.
LONG_ALLOWED = {"suite/polybench.py", "suite/rodinia.py", "suite/tunables.py"}


def test_no_source_file_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in MODULES
        if (n := len(p.read_text().splitlines())) > 800
        and str(p.relative_to(ROOT)) not in LONG_ALLOWED
    }
    assert not long, long


def test_shared_types_are_defined_once() -> None:
    defined = re.compile(
        r"^(Block|Grid)\s*=|^class (DataSize|KernelAttributes)\b|^def gpu_problem\b"
    )
    where = [
        str(p.relative_to(ROOT))
        for p in MODULES
        for line in p.read_text().splitlines()
        if defined.match(line)
    ]
    assert sorted(where) == [
        "backends/cupy_backend.py",
        "core/types.py",
        "core/types.py",
        "core/types.py",
        "core/types.py",
    ], where


def test_the_layer_contract_holds() -> None:
    """pyproject.toml's import-linter layers, lazy and type-checking imports included."""
    importlinter = pytest.importorskip("importlinter")
    from importlinter.cli import lint_imports

    config = ROOT.parents[1] / "pyproject.toml"
    if not config.exists():
        pytest.skip("klaraptor is installed, not a checkout: no pyproject.toml beside it")
    assert importlinter is not None
    assert lint_imports(config_filename=str(config)) == 0


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module → the klaraptor modules it imports, at any level (function-level included)."""
    names = {_module_name(p): p for p in MODULES}

    def resolve(name: str) -> str | None:  # `from pkg.mod import attr` imports pkg.mod
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                found = resolve(t)
                if found is not None and found != module:
                    graph[module].add(found)
    return graph


def test_the_module_import_graph_has_no_circle() -> None:
    """No module imports, even lazily, a module that imports it back (issue 31: 0 circles).
    A circle shows as a group of modules that reach each other (strongly connected)."""
    graph = _import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, circles
