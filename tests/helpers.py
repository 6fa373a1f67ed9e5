"""Synthetic helper programs for the CPU tests and the selection benchmark.

The per-point metric VALUES here are synthetic (simple formulas of N and the block, not
measurements), but the programs built from them have the real shape: `make_helper` fits the
MWP-CWP model's six metrics from a `TrainingSet` exactly as `build()` does from collected points,
binds them into the model template and builds the admission program from the spec, over the
suite kernel's real candidate blocks (51 for a 2-D kernel, 32 for a 1-D one).

Importable as `tests.helpers` from the tests and from `benchmarks/` (run from the repository
root). Needs no GPU and no pytest.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from klaraptor import suite
from klaraptor.assemble.api import job_from_training
from klaraptor.core.types import Block, KernelAttributes
from klaraptor.device.profile import DeviceProfile, recorded_profile
from klaraptor.fit.training import FitOptions, TrainingSet
from klaraptor.helper.program import HelperProgram, admit_program
from klaraptor.models import get_model
from klaraptor.program import Program, ceil, const, floor, minimum, table, var, where
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import DataParam, KernelSpec

ATTRS = KernelAttributes(
    num_regs=32,
    static_smem=0,
    const_size=0,
    local_size=0,
    max_threads_per_block=1024,
    max_dynamic_smem=49152,
)
TRAIN_N = (256, 512, 768, 1024)
KERNEL_2D = "polybench.gemm.gemm"
KERNEL_1D = "polybench.atax.k1"


def profile() -> DeviceProfile:
    """The committed, measured H200 profile (device query + microbenchmarks)."""
    return recorded_profile("h200")


def point_metrics(D: dict[str, int], block: tuple[int, int, int]) -> dict[str, float]:
    """Synthetic derived metrics of one (D, block) point: coalescing improves with bx up to 32,
    and the work per warp grows with the problem size (the largest data parameter)."""
    n = float(max(D.values()))
    sec = min(32.0, 4.0 * 32 / min(block[0], 32))
    return {
        "time_ms": 1.0,
        "inst_per_warp": 10 + 6.0 * n,
        "gld_per_warp": 2.0 * n,
        "gst_per_warp": 1.0,
        "gld_sectors_per_req": sec,
        "gst_sectors_per_req": 4.0,
        "l2_sectors_per_warp": 0.5 * n * sec,
        "sync_per_warp": 0.0,
        "warps": 1.0,
    }


def training_set(
    spec: KernelSpec,
    sizes: list[dict[str, int]] | None = None,
    *,
    constant: dict[str, float] | None = None,
) -> TrainingSet:
    """Synthetic training points of `spec` at `sizes` (default N in TRAIN_N) over its default
    candidates; `constant` overrides metrics with a value that is the same at every point."""
    sizes = sizes or [{n: v for n in spec.data_names} for v in TRAIN_N]
    Ds, Bs, der = [], [], []
    for D in sizes:
        for b in ConfigSpace.for_spec(spec).candidates:
            m = point_metrics(D, b)
            m.update(constant or {})
            der.append(m)
            Ds.append([D[n] for n in spec.data_names])
            Bs.append(b)
    return TrainingSet(
        spec.data_names, np.array(Ds, float), np.array(Bs, float), der, np.full(len(der), 0.02)
    )


@functools.cache
def mwp_helper(
    kernel: str = KERNEL_2D, fit_mode: str = "table"
) -> tuple[KernelSpec, HelperProgram, dict[str, Any], dict[Block, str]]:
    """(spec, helper, fit report, rejected) of an MWP-CWP helper for a suite kernel built from
    synthetic metrics. `fit_mode="table"` (one rational function of N per configuration) is the
    method `build` picks for such kernels and fits fastest; "auto" also tries the joint fit."""
    spec = suite.get(kernel)
    job = job_from_training(
        spec, profile(), ATTRS, training_set(spec), fit=FitOptions(mode=fit_mode)
    )
    helper, report = get_model("mwp_cwp").make_helper(job)
    return spec, helper, report, job.rejected


def tie_spec() -> KernelSpec:
    """The 2-D gemm spec with one more constraint, bx <= N + 16 (excludes wide blocks at small N)."""
    return dataclasses.replace(
        suite.get(KERNEL_2D), name="synthetic.tie", constraints=("bx <= N + 16",)
    )


def tie_helper(band: float = 0.05) -> HelperProgram:
    """A hand-written helper with many equal predictions (so the tie rule decides), a few
    non-finite ones and an admission constraint, over the 2-D default candidates.

    cycles = 1000 * ceil(N / threads) (+ nan for bx == 8, inf for bx == 2 and by == 16);
    occupancy takes four repeating values by candidate index; admitted when bx <= N + 16.
    """
    spec = tie_spec()
    cands = ConfigSpace.for_spec(spec).candidates
    N, bx, by, bz = var("N"), var("bx"), var("by"), var("bz")
    threads = bx * by * bz
    base = ceil(N / threads) * 1000.0
    cycles = where(
        bx.eq(8), const(float("nan")), where(bx.eq(2) & by.eq(16), const(float("inf")), base)
    )
    occ = table(var("cfg"), [(0.25, 0.5, 0.5, 1.0)[i % 4] for i in range(len(cands))])
    model = Program(
        "tie_model",
        ("N", "bx", "by", "bz", "cfg"),
        [("cycles", cycles), ("occupancy", occ), ("threads", threads)],
        ("cycles", "occupancy", "threads"),
    )
    return HelperProgram(
        kernel=spec.name,
        model_name="tie",
        data_names=("N",),
        candidates=tuple(cands),
        model=model,
        admit=_admit(spec),
        hw={},
        clock_mhz=1980.0,
        band=band,
    )


MN_SRC = 'extern "C" __global__ void mn(float* a, int m, int n) {}\n'


def make_mn_args(D: dict[str, int], rng: np.random.Generator) -> tuple[Any, ...]:
    import cupy

    return (cupy.zeros(1, dtype=cupy.float32), np.int32(D["M"]), np.int32(D["N"]))


def mn_spec() -> KernelSpec:
    """A 2-D kernel with two data parameters (M, N), a constraint and dynamic shared memory."""
    return KernelSpec(
        name="synthetic.mn",
        source=MN_SRC,
        kernel="mn",
        data=(DataParam("M", arg=1, hi=100000), DataParam("N", arg=2, hi=100000)),
        dim=2,
        grid=("ceil(M / bx)", "ceil(N / by)", "1"),
        make_args=make_mn_args,
        constraints=("bx <= 2 * M",),
        dynamic_smem="4 * bx * by",
    )


def mn_helper(band: float = 0.1) -> HelperProgram:
    """A hand-written helper over (M, N) whose occupancy depends on D (so the tie order is
    computed per D), with ties: cycles = 10 * gx * gy * ceil(threads / 128)."""
    spec = mn_spec()
    cands = ConfigSpace.for_spec(spec).candidates
    M, N, bx, by, bz = var("M"), var("N"), var("bx"), var("by"), var("bz")
    threads = bx * by * bz
    model = Program(
        "mn_model",
        ("M", "N", "bx", "by", "bz"),
        [
            ("cycles", ceil(M / bx) * ceil(N / by) * ceil(threads / 128.0) * 10.0),
            ("occupancy", minimum(1.0, floor(M * N / (threads * 64.0)) / 8.0)),
        ],
        ("cycles", "occupancy"),
    )
    return HelperProgram(
        kernel=spec.name,
        model_name="mn",
        data_names=spec.data_names,
        candidates=tuple(cands),
        model=model,
        admit=_admit(spec),
        hw={},
        clock_mhz=1980.0,
        band=band,
    )


def gated_helper() -> HelperProgram:
    """The tiny 1-D helper with one more admission constraint, N >= 64: no candidate is
    admissible below that."""
    h = tiny_1d_helper()
    spec = dataclasses.replace(empty_spec(), name="synthetic.gated", constraints=("N >= 64",))
    return dataclasses.replace(h, kernel=spec.name, admit=_admit(spec))


def _admit(spec: KernelSpec) -> Program:
    prof = profile()
    return admit_program(
        "admit",
        spec.data_names,
        spec.grid_exprs(),
        spec.constraint_exprs(),
        spec.smem_expr(),
        static_smem=0,
        smem_limit=prof.smem_per_block_optin,
        max_grid=prof.max_grid_dim,
    )


def make_empty_args(D: dict[str, int], rng: np.random.Generator) -> tuple[Any, ...]:
    import cupy

    return (cupy.zeros(max(1, D["N"]), dtype=cupy.float32), np.int32(D["N"]))


EMPTY_SRC = 'extern "C" __global__ void empty(float* a, int n) {}\n'


def empty_spec() -> KernelSpec:
    """An empty 1-D kernel with N read from argument 1 (for launch-overhead measurements)."""
    return KernelSpec(
        name="synthetic.empty",
        source=EMPTY_SRC,
        kernel="empty",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=("ceil(N / bx)", "1", "1"),
        make_args=make_empty_args,
    )


def tiny_1d_helper(spec: KernelSpec | None = None) -> HelperProgram:
    """A tiny synthetic helper over the 1-D default candidates of `spec` (default: the empty
    kernel): predicted cycles = waves of 132 SMs x 2048 threads, plus a per-block cost."""
    spec = spec or empty_spec()
    cands = ConfigSpace.for_spec(spec).candidates
    N, bx = var("N"), var("bx")
    blocks = ceil(N / bx)
    model = Program(
        "tiny",
        ("N", "bx", "by", "bz"),
        [
            ("cycles", ceil(blocks * bx / (132.0 * 2048.0)) * 1000.0 + blocks * 2.0),
            ("occupancy", const(1.0)),
        ],
        ("cycles", "occupancy"),
    )
    return HelperProgram(
        kernel=spec.name,
        model_name="tiny",
        data_names=spec.data_names,
        candidates=tuple(cands),
        model=model,
        admit=_admit(spec),
        hw={},
        clock_mhz=1980.0,
        band=0.02,
    )
