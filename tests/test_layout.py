"""The house rules of the package layout (docs/ARCHITECTURE.md): no source file is over 800 lines
(the suites' kernel tables aside) and the shared types are defined once. Which way imports run is
the import-linter contract in pyproject.toml (`lint-imports`, run by `make test`), checked here
too so that a plain `pytest` sees it."""

from __future__ import annotations

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
