"""Shared by the instrument tests: the PolyBench-ACC programs and fast helper programs.

`synthetic_helper(spec)` is a real HelperProgram over the spec's real candidates and admission
(grid formula, constraints, the H200's limits), with a made-up cost whose best block changes
with D (cycles = 100 * ceil(n / threads) + threads, plus a penalty for bx < 32): it builds in
milliseconds, and a cache that returned another D's choice would be caught.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from klaraptor.configspace import ConfigSpace
from klaraptor.device_profile import recorded_profile
from klaraptor.frontends.annotated import read_annotated
from klaraptor.helper import HelperProgram, admit_program
from klaraptor.program import Program, ceil, var, where
from klaraptor.spec import KernelSpec

ROOT = Path(__file__).resolve().parents[2]
POLYBENCH = ROOT / "tests" / "data" / "polybench_acc"
CUDA = POLYBENCH / "CUDA"
UTILITIES = CUDA / "utilities"
COMPAT = POLYBENCH / "compat" / "polybench_compat.h"

# benchmark -> (program path under CUDA/, its kernels in launch order)
PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "2DCONV": ("stencils/convolution-2d/2DConvolution.cu", ("convolution2D_kernel",)),
    "3DCONV": ("stencils/convolution-3d/3DConvolution.cu", ("convolution3D_kernel",)),
    "2MM": ("linear-algebra/kernels/2mm/2mm.cu", ("mm2_kernel1", "mm2_kernel2")),
    "3MM": ("linear-algebra/kernels/3mm/3mm.cu", ("mm3_kernel1", "mm3_kernel2", "mm3_kernel3")),
    "ATAX": ("linear-algebra/kernels/atax/atax.cu", ("atax_kernel1", "atax_kernel2")),
    "BICG": ("linear-algebra/kernels/bicg/bicg.cu", ("bicg_kernel1", "bicg_kernel2")),
    "CORR": (
        "datamining/correlation/correlation.cu",
        ("mean_kernel", "std_kernel", "reduce_kernel", "corr_kernel"),
    ),
    "COVAR": ("datamining/covariance/covariance.cu", ("mean_kernel", "reduce_kernel", "covar_kernel")),
    "FDTD-2D": (
        "stencils/fdtd-2d/fdtd2d.cu",
        ("fdtd_step1_kernel", "fdtd_step2_kernel", "fdtd_step3_kernel"),
    ),
    "GEMM": ("linear-algebra/kernels/gemm/gemm.cu", ("gemm_kernel",)),
    "GESUMMV": ("linear-algebra/kernels/gesummv/gesummv.cu", ("gesummv_kernel",)),
    "GRAMSCHMIDT": (
        "linear-algebra/solvers/gramschmidt/gramschmidt.cu",
        ("gramschmidt_kernel1", "gramschmidt_kernel2", "gramschmidt_kernel3"),
    ),
    "MVT": ("linear-algebra/kernels/mvt/mvt.cu", ("mvt_kernel1", "mvt_kernel2")),
    "SYRK": ("linear-algebra/kernels/syrk/syrk.cu", ("syrk_kernel",)),
    "SYR2K": ("linear-algebra/kernels/syr2k/syr2k.cu", ("syr2k_kernel",)),
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
