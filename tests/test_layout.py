"""The house rules of the package layout (docs/ARCHITECTURE.md): modules import one way (no
circles, counting lazy and type-only imports), no source file is over 800 lines (the suites'
kernel tables aside), and the shared types are defined once."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

import klaraptor

ROOT = Path(klaraptor.__file__).parent
MODULES = sorted(p for p in ROOT.rglob("*.py"))
# The suites are tables of kernels (source, reference, sizes), not logic.
LONG_ALLOWED = {"suite/polybench.py", "suite/rodinia.py", "suite/tunables.py"}


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    pkg = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("klaraptor")}


@pytest.mark.parametrize(
    "package", ["program", "fitting", "store", "isa", "gpu", "build", "distributed"]
)
def test_package_has_no_import_circle(package: str) -> None:
    mods = {_module(p): p for p in MODULES if _module(p).startswith(f"klaraptor.{package}.")}
    graph = {m: {d for d in _imports(p) if d in mods and d != m} for m, p in mods.items()}
    list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a circle


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
    assert sorted(where) == ["gpu/backend.py", "types.py", "types.py", "types.py", "types.py"], (
        where
    )
