"""The tunables suite's CUDA sources run on the CPU (tests/suite/cuda_emulator.py): each
variant at a tiny and at odd sizes (every tile partial somewhere) with the blocks a check runs
(default, fewest and most threads, widest, tallest, deepest, a width that is not a power of
two), under AddressSanitizer, shared memory poisoned, barrier counts checked; the outputs
against the float64 references, fully written outputs poisoned with NaN first, inputs unchanged.

By default each kernel runs its default variant at its first odd size of at least 13 (a few
minutes on two cores); KLARAPTOR_EMULATE_ALL=1 runs every variant at every check size (about 45
minutes: each variant is a host compile with the sanitizer, every CUDA thread an OS thread).
Launches of more than 2**18 CUDA threads are left to the GPU check
(scripts/device_tunables_check.py), which runs them all.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from klaraptor.core.types import ParamValues
from klaraptor.spec import KernelSpec
from klaraptor.suite import tunables as T
from tests.suite.cuda_emulator import EmulatedKernel, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++20 host compiler")

EVERYTHING = os.environ.get("KLARAPTOR_EMULATE_ALL") == "1"
MAX_THREADS = 2**18  # CUDA threads per emulated launch


def _variants(spec: KernelSpec) -> list[ParamValues]:
    if EVERYTHING:
        return [pv for pv in spec.variants() if any(T.joint_space(spec, spec.size(1))[pv])]
    return [spec.default_variant]


def _sizes(spec: KernelSpec) -> tuple[int, ...]:
    sizes = spec.meta["check_sizes"]
    return sizes if EVERYTHING else (min(n for n in sizes if n >= 13),)


def emulated_failures(spec: KernelSpec, pv: ParamValues, sizes: tuple[int, ...]) -> list[str]:
    """Run one variant at each size with its check blocks; describe every failure."""
    kernel = EmulatedKernel(spec.source, spec.variant_kernel(pv), spec.variant_options(pv))
    failures: list[str] = []
    for n in sizes:
        D = spec.size(n)
        for block in T.check_blocks(spec, T.joint_space(spec, D)[pv]):
            where = f"{pv} N={n} block={block}"
            grid = spec.grid_for(D, block, pv)
            smem = spec.dynamic_smem_for(D, block, pv)
            if np.prod(grid) * np.prod(block) > MAX_THREADS:
                continue
            args = list(spec.make_args(D, np.random.default_rng(n), device=False))
            expected = spec.reference(D, tuple(args))
            for i in spec.meta["overwrites"]:
                if np.asarray(args[i]).dtype.kind == "f":
                    args[i] = np.full_like(args[i], np.nan)
            before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            try:
                out = kernel.launch(args, grid, block, smem)
            except AssertionError as exc:
                failures.append(f"{where}: {exc}")
                continue
            failures += _compare(spec, where, before, out, expected)
    return failures


def _compare(
    spec: KernelSpec, where: str, before: list[Any], out: list[Any], expected: dict[int, Any]
) -> list[str]:
    bad = []
    for i, ref in expected.items():
        rel, peak = T.output_errors(out[i], ref)
        if not (rel <= spec.rtol and peak <= spec.rtol):
            bad.append(f"{where}: output {i} relative error {rel:.3g}, peak {peak:.3g}")
    for i, (a, b) in enumerate(zip(before, out)):
        if i not in expected and isinstance(a, np.ndarray) and i in _inputs(spec):
            if not np.array_equal(a, b, equal_nan=True):
                bad.append(f"{where}: input {i} changed")
    return bad


def _inputs(spec: KernelSpec) -> set[int]:
    """Arguments that are pure inputs: neither outputs nor workspace (the reduction's partials)."""
    workspace = {1} if spec is T.REDUCE else set()
    n_args = len(spec.make_args(spec.size(1), np.random.default_rng(0), device=False))
    return set(range(n_args)) - set(spec.outputs) - workspace


@pytest.mark.slow
@pytest.mark.parametrize("spec", T.SPECS, ids=[s.name for s in T.SPECS])
def test_kernel_runs_correctly_on_the_emulator(spec: KernelSpec) -> None:
    failures = []
    for pv in _variants(spec):
        failures += emulated_failures(spec, pv, _sizes(spec))
    assert not failures, "\n".join(failures[:20])


_PROBE = """
extern "C" __global__ void probe(const float* __restrict__ a, float* __restrict__ b, int n)
{
    __shared__ float s[64];
    if (threadIdx.x < 32) s[threadIdx.x] = a[threadIdx.x];
#if DIVERGE
    if (threadIdx.x < 16) __syncthreads();
#else
    __syncthreads();
#endif
    b[threadIdx.x] = s[threadIdx.x] + (PAST ? a[n + threadIdx.x] : 0.0f);
}
"""


@pytest.mark.slow
def test_the_emulator_reports_what_a_gpu_would_not() -> None:
    """A correct launch passes; reading shared memory nobody wrote gives NaN; reading past an
    array stops with AddressSanitizer's report; a barrier not all threads reach fails."""
    a = np.arange(1.0, 65.0, dtype=np.float32)

    def run(block: int, past: int = 0, diverge: int = 0) -> np.ndarray:
        k = EmulatedKernel(_PROBE, "probe", (f"-DPAST={past}", f"-DDIVERGE={diverge}"))
        return k.launch(
            [a[:32], np.zeros(block, np.float32), np.int32(32)],
            (1, 1, 1),
            (block, 1, 1),
            timeout=30,
        )[1]

    np.testing.assert_array_equal(run(32), a[:32])
    assert np.isnan(run(64)[32:]).all() and not np.isnan(run(64)[:32]).any()
    with pytest.raises(AssertionError, match="AddressSanitizer"):
        run(32, past=1)
    with pytest.raises(AssertionError, match="__syncthreads|hung"):
        run(32, diverge=1)
