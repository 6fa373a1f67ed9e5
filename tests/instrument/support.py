"""Shared by the instrument tests: the PolyBench-ACC programs and fast helper programs.

`synthetic_helper(spec)` is a real HelperProgram over the spec's real candidates and admission
(grid formula, constraints, the H200's limits), with a made-up cost whose best block changes
with D (cycles = 100 * ceil(n / threads) + threads, plus a penalty for bx < 32): it builds in
milliseconds, and a cache that returned another D's choice would be caught.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from klaraptor.device.profile import recorded_profile
from klaraptor.frontends.annotated import read_annotated
from klaraptor.helper.program import HelperProgram, admit_program
from klaraptor.program import Program, ceil, var, where
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import KernelSpec

ROOT = Path(__file__).resolve().parents[2]
POLYBENCH = ROOT / "tests" / "data" / "polybench_acc"
CUDA = POLYBENCH / "CUDA"
UTILITIES = CUDA / "utilities"
COMPAT = POLYBENCH / "compat" / "polybench_compat.h"


@functools.cache
def device_script() -> Any:
    """scripts/device_instrument.py as a module: its PROGRAMS table (paths, kernels, evaluation
    sizes, nvcc flags) is the one the tests check."""
    path = ROOT / "scripts" / "device_instrument.py"
    spec = importlib.util.spec_from_file_location("device_instrument", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# benchmark -> (program path under CUDA/, its kernels in launch order)
PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    bench: (p.path, p.kernels) for bench, p in device_script().PROGRAMS.items()
}


def program(bench: str) -> Path:
    return CUDA / PROGRAMS[bench][0]


def synthetic_helper(spec: KernelSpec) -> HelperProgram:
    prof = recorded_profile("h200")
    cands = ConfigSpace.for_spec(spec).candidates
    n, bx, by, bz = var(spec.data_names[0]), var("bx"), var("by"), var("bz")
    threads = bx * by * bz
    cycles = ceil(n / threads) * 100.0 + threads + where(bx < 32.0, 5000.0, 0.0)
    model = Program(
        "synthetic",
        (spec.data_names[0], "bx", "by", "bz"),
        [("cycles", cycles), ("occupancy", threads * 0.0 + 1.0)],
        ("cycles", "occupancy"),
    )
    admit = admit_program(
        "admit",
        spec.data_names,
        spec.grid_exprs(),
        spec.constraint_exprs(),
        spec.smem_expr(),
        static_smem=0,
        smem_limit=prof.smem_per_block_optin,
        max_grid=prof.max_grid_dim,
    )
    return HelperProgram(
        kernel=spec.name,
        model_name="synthetic",
        data_names=spec.data_names,
        candidates=tuple(cands),
        model=model,
        admit=admit,
        hw={},
        clock_mhz=1980.0,
        band=0.0,
    )


@functools.cache
def helpers_for(path: Path) -> dict[str, HelperProgram]:
    return {spec.name: synthetic_helper(spec) for spec in read_annotated(path)}


def needs_libclang() -> None:
    pytest.importorskip("clang.cindex", reason="klaraptor[instrument] (libclang) is not installed")
