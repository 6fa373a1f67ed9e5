"""The split packages import one way: no module of klaraptor.program or klaraptor.fitting imports,
even lazily or for type checking only, a module of its package that imports it back."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import klaraptor


@pytest.mark.parametrize("package", ["program", "fitting"])
def test_package_has_no_import_cycle(package: str) -> None:
    root = Path(klaraptor.__file__).parent / package
    prefix = f"klaraptor.{package}."
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        deps = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            deps.update(n[len(prefix) :].split(".")[0] for n in names if n.startswith(prefix))
    assert len(graph) > 3
    list(graphlib.TopologicalSorter(graph).static_order())  # CycleError on a cycle
    for path in root.glob("*.py"):
        assert len(path.read_text().splitlines()) <= 800, path.name
