"""Kernel Tuner problems as KernelSpecs with program parameters (`spec_from_tune_params`), and
the import of Kernel Tuner caches whose non-block tunables are those parameters.

The kernels and their tuning arguments are Kernel Tuner's own examples (matmul, reduction;
tests/data/kernel_tuner_examples/PROVENANCE.json). The joint space klaraptor derives is checked
against a brute-force enumeration of Kernel Tuner's rules written here from its documentation,
and a variant is compiled with nvcc where it is installed (compile-only: no GPU needed). The
cache imported is written here in Kernel Tuner's cache layout with SYNTHETIC times (a law in
the test): it tests the mapping, not a model."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor.core.errors import SpecError
from klaraptor.core.types import ParamValues
from klaraptor.device.profile import recorded_profile
from klaraptor.frontends.kernel_tuner import import_kernel_tuner
from klaraptor.frontends.kernel_tuner_spec import spec_from_tune_params
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import DataParam
from klaraptor.store import Store

EXAMPLES = Path(__file__).parents[1] / "data" / "kernel_tuner_examples"

# examples/cuda/matmul.py
MATMUL_TUNE = {
    "block_size_x": [16 * 2**i for i in range(3)],
    "block_size_y": [2**i for i in range(6)],
    "tile_size_x": [2**i for i in range(4)],
    "tile_size_y": [2**i for i in range(4)],
}
MATMUL_RESTRICT = ["block_size_x==block_size_y*tile_size_y"]
# examples/cuda/reduction.py
REDUCTION_TUNE = {
    "block_size_x": [2**i for i in range(5, 11)],
    "vector": [2**i for i in range(3)],
    "num_blocks": [2**i for i in range(5, 16)],
    "loop_unroll_factor_0": [0, 1, 8, 16, 32, 64],
    "use_shuffle": [0, 1],
}


def no_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    raise AssertionError("nothing is launched here")


def matmul_spec() -> Any:
    return spec_from_tune_params(
        "kt.matmul",
        (EXAMPLES / "matmul.cu").read_text(),
        "matmul_kernel",
        data=(DataParam("N", shape_of=(0, 0), lo=16, hi=1 << 16),),
        problem_size=("N", "N"),
        tune_params=MATMUL_TUNE,
        restrictions=MATMUL_RESTRICT,
        grid_div_x=["block_size_x", "tile_size_x"],
        grid_div_y=["block_size_y", "tile_size_y"],
        make_args=no_args,
    )


def kt_configs(tune: dict[str, list[int]], restrict: list[str]) -> list[dict[str, int]]:
    """Kernel Tuner's search space: the product of the values, minus restricted configurations
    and blocks over 1024 threads."""
    out = []
    for vals in itertools.product(*tune.values()):
        p = dict(zip(tune, vals))
        threads = p.get("block_size_x", 256) * p.get("block_size_y", 1) * p.get("block_size_z", 1)
        if threads <= 1024 and all(eval(r, {}, dict(p)) for r in restrict):  # noqa: S307
            out.append(p)
    return out


def test_matmul_becomes_the_joint_space_kernel_tuner_searches() -> None:
    spec = matmul_spec()
    # The source sizes shared arrays with block_size_x/y: they are compiled in, tied to the block.
    assert spec.param_names == ("block_size_x", "block_size_y", "tile_size_x", "tile_size_y")
    assert "bx == block_size_x" in spec.constraints and "by == block_size_y" in spec.constraints
    assert spec.dim == 2 and spec.source.startswith('extern "C" {')
    D = spec.size(4096)
    points = ConfigSpace.for_spec(spec).dry_run(spec, [D])
    ours = sorted((tuple(p.params.items()), p.block) for p in points if p.status == "measure")
    theirs = sorted(
        (tuple(p.items()), (p["block_size_x"], p["block_size_y"], 1))
        for p in kt_configs(MATMUL_TUNE, MATMUL_RESTRICT)
    )
    assert ours == theirs and len(ours) == 40
    # Kernel Tuner's grid: ceil(problem_size / product(grid_div)) per axis.
    for p in points:
        if p.status == "measure":
            pv = p.params
            assert p.grid == (
                math.ceil(4096 / (pv["block_size_x"] * pv["tile_size_x"])),
                math.ceil(4096 / (pv["block_size_y"] * pv["tile_size_y"])),
                1,
            )


def test_reduction_problem_size_named_by_a_tunable_and_no_grid_divisor() -> None:
    spec = spec_from_tune_params(
        "kt.reduction",
        (EXAMPLES / "reduction.cu").read_text(),
        "sum_floats",
        data=(DataParam("n", arg=2),),
        problem_size="num_blocks",
        tune_params=REDUCTION_TUNE,
        grid_div_x=[],
        make_args=no_args,
    )
    assert spec.dim == 1 and spec.grid[0] == "num_blocks"
    assert len(spec.variants()) == 6 * 3 * 11 * 6 * 2
    pv = spec.param_values(
        {
            "block_size_x": 256,
            "vector": 4,
            "num_blocks": 1024,
            "loop_unroll_factor_0": 8,
            "use_shuffle": 1,
        }
    )
    assert spec.grid_for(spec.size(1 << 24), (256, 1, 1), pv) == (1024, 1, 1)
    assert "-Dnum_blocks=1024" in spec.variant_options(pv)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_matmul_variant_compiles_with_its_defines(tmp_path: Path) -> None:
    spec = matmul_spec()
    pv = spec.param_values(
        {"block_size_x": 32, "block_size_y": 8, "tile_size_x": 2, "tile_size_y": 4}
    )
    src = tmp_path / "matmul.cu"
    src.write_text(spec.source)
    opts = [o.replace("--std=", "-std=") for o in spec.variant_options(pv)]
    ptx = tmp_path / "m.ptx"
    out = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", *opts, str(src), "-o", str(ptx)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    # extern "C": the entry is the plain name klaraptor looks the kernel up by.
    assert ".entry matmul_kernel(" in ptx.read_text()
    # Without the variant's defines the source does not compile: they are what varies.
    bare = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", str(src), "-o", str(tmp_path / "bare.ptx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bare.returncode != 0 and "tile_size_x" in bare.stderr


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tune_params": {"block_size_x": [32], "alg": ["a", "b"]}}, "'alg' has values"),
        ({"tune_params": {"block_size_x": [32], "flag": [True, False]}}, "'flag' has values"),
        ({"restrictions": [lambda p: True]}, r"restrictions\[0\].*a function"),
        ({"restrictions": lambda p: True}, "restrictions is a function"),
        ({"grid_div_x": lambda p: 2}, "grid_div_x is a function"),
        ({"restrictions": ["block_size_x >"]}, "not an expression"),
        ({"restrictions": ["block_size_x <= unknown"]}, "unknown"),
        ({"source": "__global__ void k(int n) { int g = grid_size_x; }"}, "reads grid_size_x"),
    ],
)
def test_what_does_not_map_is_named(kw: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = dict(
        data=(DataParam("n", arg=0),),
        problem_size="n",
        tune_params={"block_size_x": [32, 64], "ITEMS": [1, 2]},
        make_args=no_args,
    )
    source = kw.pop("source", "__global__ void k(int n) {}")
    args.update(kw)
    with pytest.raises(SpecError, match=message):
        spec_from_tune_params("kt.k", source, "k", **args)


def matmul_cache(path: Path, sizes: list[int]) -> list[Path]:
    """Kernel Tuner caches of matmul at each size (SYNTHETIC times, one record per config)."""
    files = []
    for n in sizes:
        cache: dict[str, Any] = {
            "device_name": "NVIDIA H200",
            "kernel_name": "matmul_kernel",
            "problem_size": [n, n],
            "tune_params_keys": list(MATMUL_TUNE),
            "tune_params": MATMUL_TUNE,
            "cache": {},
        }
        for p in kt_configs(MATMUL_TUNE, MATMUL_RESTRICT):
            work = 2.0 * n**3 / 1e9
            eff = 0.2 + 0.1 * math.log2(p["tile_size_x"] * p["tile_size_y"])
            ms = work / eff * (1 + 0.01 * p["block_size_y"])
            key = ",".join(str(v) for v in p.values())
            cache["cache"][key] = {
                **p,
                "time": ms,
                "times": [ms] * 5,
                "num_regs": 32 + 8 * p["tile_size_x"] * p["tile_size_y"] // 4,
                "compile_time": 0,
                "verification_time": 0,
                "benchmark_time": 0,
                "strategy_time": 0,
                "framework_time": 0,
                "timestamp": "2026-11-28 06:00:00+00:00",
            }
        f = path / f"matmul_{n}.json"
        f.write_text(json.dumps(cache))
        files.append(f)
    return files


def test_import_keeps_every_variant_without_fixing_tunables(tmp_path: Path) -> None:
    spec = matmul_spec()
    store = Store(tmp_path / "s.sqlite")
    prof = recorded_profile("h200")
    files = matmul_cache(tmp_path, [256, 512])
    for f in files:
        report = import_kernel_tuner(f, spec, store=store, device=prof)
        assert report.counts["ok"] == 40 and report.skipped == 0
        assert all(not gaps for gaps in report.uncovered.values())
    rows = store.measurements(spec.name, prof.key, kind="time")
    assert len(rows) == 80
    assert len({r.params for r in rows}) == 40
    one = next(r for r in rows if r.params["tile_size_x"] == 2 and r.params["block_size_y"] == 8)
    assert one.block == (one.params["block_size_x"], 8, 1)
    facts = store.collect_facts(spec.name, prof.key)
    regs = {k: a.num_regs for k, a in facts.variant_attributes.items()}
    assert len(regs) == 40
    assert regs["block_size_x=64,block_size_y=16,tile_size_x=8,tile_size_y=4"] == 96


def test_import_skips_variants_the_spec_does_not_declare(tmp_path: Path) -> None:
    narrow = dict(MATMUL_TUNE, tile_size_x=[1, 2])
    spec = spec_from_tune_params(
        "kt.matmul_narrow",
        (EXAMPLES / "matmul.cu").read_text(),
        "matmul_kernel",
        data=(DataParam("N", shape_of=(0, 0), lo=16, hi=1 << 16),),
        problem_size=("N", "N"),
        tune_params=narrow,
        restrictions=MATMUL_RESTRICT,
        grid_div_x=["block_size_x", "tile_size_x"],
        grid_div_y=["block_size_y", "tile_size_y"],
        make_args=no_args,
    )
    store = Store(tmp_path / "s.sqlite")
    (f,) = matmul_cache(tmp_path, [256])
    report = import_kernel_tuner(f, spec, store=store, device=recorded_profile("h200"))
    kept = sum(p["tile_size_x"] <= 2 for p in kt_configs(MATMUL_TUNE, MATMUL_RESTRICT))
    assert report.counts["ok"] == kept and report.skipped == 40 - kept
    assert {
        r.params["tile_size_x"] for r in store.measurements(spec.name, recorded_profile("h200").key)
    } == {1, 2}
    assert all(
        type(r.params) is ParamValues
        for r in store.measurements(spec.name, recorded_profile("h200").key)
    )
