"""The PolyBench/GPU-style suite on CPU: registry, specs, grids, argument factories, references.

The references (vectorised NumPy) are pinned against straightforward loops below that mirror what
each CUDA thread computes, so the kernel semantics are fixed without a GPU.
"""

from __future__ import annotations

import copy
import importlib
import pickle
import re
import subprocess
import sys
from collections.abc import Callable
from itertools import product
from typing import Any

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.core.errors import SpecError
from klaraptor.spec import KernelSpec
from klaraptor.spec.expressions import evaluate_exprs, parse_expression
from klaraptor.suite import polybench

SPECS = suite.all_specs("polybench")
IDS = [s.name for s in SPECS]

EXPECTED_KERNELS = {
    "2DCONV": 1,
    "ATAX": 2,
    "MVT": 2,
    "BICG": 2,
    "GESUMMV": 1,
    "GEMM": 1,
    "SYRK": 1,
    "SYR2K": 1,
    "2MM": 2,
    "3MM": 3,
    "CORR": 4,
    "COVAR": 3,
    "3DCONV": 1,
    "GRAMSCHM": 3,
    "FDTD_2D": 3,
}

BLOCKS = {
    1: [(32, 1, 1), (96, 1, 1), (256, 1, 1), (1024, 1, 1), (1, 1, 1)],
    2: [(32, 8, 1), (1, 64, 1), (16, 16, 1), (128, 2, 1), (1024, 1, 1)],
    3: [(32, 8, 1), (8, 8, 4), (4, 4, 4), (1, 1, 64), (64, 2, 2)],
}


# ---------------------------------------------------------------------------------------------
# registry


def test_fifteen_benchmarks_with_their_kernel_counts() -> None:
    bench = suite.benchmarks("polybench")
    assert {b: len(k) for b, k in bench.items()} == EXPECTED_KERNELS
    assert list(bench) == list(EXPECTED_KERNELS)  # Table 6.2 order
    assert [n for names in bench.values() for n in names] == IDS


def test_names_are_unique_and_resolvable() -> None:
    assert len(set(IDS)) == len(IDS)
    assert len({s.kernel for s in SPECS}) == len(SPECS)  # profilers filter by function name
    assert suite.all_specs("polybench") == SPECS  # deterministic
    assert suite.suites()["polybench"] == IDS
    for spec in SPECS:
        assert spec.name.startswith("polybench.")
        assert suite.get(spec.name) is spec
        assert suite.resolve(suite.SPEC_REF[spec.name]) is spec
    assert {n for n in suite.SPEC_REF if n.startswith("polybench.")} == set(IDS)


def test_unknown_names_raise_spec_error() -> None:
    with pytest.raises(SpecError, match="no suite kernel"):
        suite.get("polybench.gemm.nope")
    with pytest.raises(SpecError):
        suite.resolve("klaraptor.suite.polybench:NOPE")
    with pytest.raises(SpecError):
        suite.resolve("klaraptor.suite.polybench:ALPHA")  # exists, not a spec


# ---------------------------------------------------------------------------------------------
# specs


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_spec_is_valid_and_complete(spec: KernelSpec) -> None:
    spec.validate()
    assert spec.data_names == ("N",)
    assert spec.default_block is not None
    assert spec.reference is not None and spec.outputs
    assert set(spec.meta["overwrites"]) <= set(spec.outputs)
    assert spec.meta["complexity"] in ("N", "N^2", "N^3")
    assert spec.meta["benchmark"] in EXPECTED_KERNELS
    assert spec.description
    assert 0 < spec.rtol <= 1e-3
    pickled = pickle.loads(pickle.dumps(spec))  # workers may receive specs pickled
    assert pickled.name == spec.name and pickled.make_args is spec.make_args


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_default_blocks(spec: KernelSpec) -> None:
    expected = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 8, 1)}[spec.dim]
    assert spec.default_block == expected


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_source_sanity(spec: KernelSpec) -> None:
    src = spec.source
    code = re.sub(r"//[^\n]*", "", src)
    for open_, close in ("{}", "()", "[]"):
        depth = 0
        for ch in code:
            depth += (ch == open_) - (ch == close)
            assert depth >= 0, f"unbalanced {open_}{close}"
        assert depth == 0, f"unbalanced {open_}{close}"
    decls = re.findall(rf'extern "C" __global__ void {spec.kernel}\(', src)
    assert len(decls) == 1
    # every kernel in the source is extern "C" (unmangled names for NVRTC and the profiler)
    assert src.count("__global__") == src.count('extern "C" __global__')


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_sizes(spec: KernelSpec) -> None:
    train, evals = spec.meta["train_sizes"], spec.meta["eval_sizes"]
    assert len(train) >= 3 and len(evals) >= 1
    assert list(train) == sorted(set(train)) and list(evals) == sorted(set(evals))
    assert max(train) < min(evals)
    p = spec.data[0]
    assert p.lo <= min(train) and max(evals) <= p.hi
    if spec.dim == 3:
        assert train == (32, 48, 64, 96) and evals == (128, 256, 512)
    else:
        assert train == (256, 512, 768, 1024, 1536) and evals == (2048, 4096, 8192)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_work_estimates_are_positive_expressions(spec: KernelSpec) -> None:
    def value(key: str, n: int) -> float:
        expr = parse_expression(spec.meta[key], spec.data_names)
        return float(evaluate_exprs({"v": expr}, {"N": n})["v"])

    for key, n in product(("flops", "min_bytes"), (4, 1000, 8192)):
        assert value(key, n) > 0, (key, n)
    order = {"N": 1, "N^2": 2, "N^3": 3}[spec.meta["complexity"]]
    assert 8192 ** (order - 1) < value("flops", 8192) < 100 * 8192**order


# ---------------------------------------------------------------------------------------------
# grids


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_grid_covers_the_domain(spec: KernelSpec) -> None:
    single_block = spec.grid == ("1", "1", "1")
    for block, n in product(BLOCKS[spec.dim], (1, 7, 67, 1000, 4096)):
        n = max(n, spec.data[0].lo)
        grid = spec.grid_for({"N": n}, block)
        for axis in range(3):
            assert grid[axis] >= 1
            if axis >= spec.dim or single_block:
                assert grid[axis] == 1
            else:  # every index covered, no block entirely outside the domain
                assert grid[axis] * block[axis] >= n
                assert (grid[axis] - 1) * block[axis] < n


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_grid_within_cuda_limits_at_largest_n(spec: KernelSpec) -> None:
    block = (1, 1, 1)
    gx, gy, gz = spec.grid_for({"N": spec.data[0].hi}, block)
    assert gx <= 2**31 - 1 and gy <= 65535 and gz <= 65535


def test_gramschm_k1_uses_one_block_and_bx_floats_of_shared_memory() -> None:
    spec = polybench.GRAMSCHM_K1
    for bx in (32, 96, 1024):
        assert spec.grid_for({"N": 4096}, (bx, 1, 1)) == (1, 1, 1)
        assert spec.dynamic_smem_for({"N": 4096}, (bx, 1, 1)) == 4 * bx
    assert all(s.dynamic_smem is None for s in SPECS if s is not spec)


# ---------------------------------------------------------------------------------------------
# argument factories


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_make_args_is_importable_top_level(spec: KernelSpec) -> None:
    for fn in (spec.make_args, spec.reference):
        assert "<locals>" not in fn.__qualname__
        module = importlib.import_module(fn.__module__)
        assert getattr(module, fn.__qualname__) is fn


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_host_args(spec: KernelSpec) -> None:
    n = 9
    args = spec.make_args({"N": n}, np.random.default_rng(0), device=False)
    assert spec.read_data(args) == {"N": n}
    assert isinstance(args[spec.data[0].arg], np.int32)
    for a in args:
        if isinstance(a, np.ndarray):
            assert a.dtype == np.float32 and a.flags.c_contiguous
            assert np.all(np.isfinite(a)) and np.any(a != 0)
        else:
            assert isinstance(a, (np.int32, np.float32))
    for i in spec.outputs:
        assert isinstance(args[i], np.ndarray)
    again = spec.make_args({"N": n}, np.random.default_rng(0), device=False)
    for a, b in zip(args, again):
        np.testing.assert_array_equal(a, b)  # deterministic for a given rng


def test_importing_the_suite_does_not_import_cupy() -> None:
    code = "import sys, klaraptor.suite; assert 'cupy' not in sys.modules, 'cupy imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# references against per-thread loops


def _f64(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float64)


def _loop_conv2d(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, n = _f64(h[0]), _f64(h[1]), int(h[2])
    w = polybench.CONV2D_W
    for i, j in product(range(n), repeat=2):
        acc = 0.0
        if 0 < i < n - 1 and 0 < j < n - 1:
            for di, dj in product((-1, 0, 1), repeat=2):
                acc += w[di + 1, dj + 1] * a[i + di, j + dj]
        b[i, j] = acc
    return {1: b}


def _loop_conv3d(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, n = _f64(h[0]), _f64(h[1]), int(h[2])
    w = polybench.CONV3D_W
    for i, j, k in product(range(n), repeat=3):
        acc = 0.0
        if 0 < i < n - 1 and 0 < j < n - 1 and 0 < k < n - 1:
            for di, dj, dk in product((-1, 0, 1), repeat=3):
                acc += w[di + 1, dj + 1, dk + 1] * a[i + di, j + dj, k + dk]
        b[i, j, k] = acc
    return {1: b}


def _dot_row_col(x: np.ndarray, y: np.ndarray, i: int, j: int, n: int) -> float:
    acc = 0.0
    for k in range(n):
        acc += x[i, k] * y[k, j]
    return acc


def _loop_mm2_k1(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, tmp, alpha, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), float(h[3]), int(h[4])
    for i, j in product(range(n), repeat=2):
        tmp[i, j] = alpha * _dot_row_col(a, b, i, j, n)
    return {2: tmp}


def _loop_mm2_k2(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    tmp, c, d, beta, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), float(h[3]), int(h[4])
    for i, j in product(range(n), repeat=2):
        d[i, j] = beta * d[i, j] + _dot_row_col(tmp, c, i, j, n)
    return {2: d}


def _loop_matmul(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x, y, z, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for i, j in product(range(n), repeat=2):
        z[i, j] = _dot_row_col(x, y, i, j, n)
    return {2: z}


def _loop_gemm(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, c = _f64(h[0]), _f64(h[1]), _f64(h[2])
    alpha, beta, n = float(h[3]), float(h[4]), int(h[5])
    for i, j in product(range(n), repeat=2):
        c[i, j] = alpha * _dot_row_col(a, b, i, j, n) + beta * c[i, j]
    return {2: c}


def _loop_syrk(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, c, alpha, beta, n = _f64(h[0]), _f64(h[1]), float(h[2]), float(h[3]), int(h[4])
    for i, j in product(range(n), repeat=2):
        acc = 0.0
        for k in range(n):
            acc += a[i, k] * a[j, k]
        c[i, j] = alpha * acc + beta * c[i, j]
    return {1: c}


def _loop_syr2k(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, c = _f64(h[0]), _f64(h[1]), _f64(h[2])
    alpha, beta, n = float(h[3]), float(h[4]), int(h[5])
    for i, j in product(range(n), repeat=2):
        acc = 0.0
        for k in range(n):
            acc += a[i, k] * b[j, k] + b[i, k] * a[j, k]
        c[i, j] = alpha * acc + beta * c[i, j]
    return {2: c}


def _loop_rows(h: tuple[Any, ...], accumulate: bool) -> dict[int, np.ndarray]:
    """One thread per row i: w[i] (+)= sum_j A[i][j] v[j]."""
    a, v, w, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for i in range(n):
        acc = w[i] if accumulate else 0.0
        for j in range(n):
            acc += a[i, j] * v[j]
        w[i] = acc
    return {2: w}


def _loop_cols(h: tuple[Any, ...], accumulate: bool) -> dict[int, np.ndarray]:
    """One thread per column j: w[j] (+)= sum_i A[i][j] v[i]."""
    a, v, w, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for j in range(n):
        acc = w[j] if accumulate else 0.0
        for i in range(n):
            acc += a[i, j] * v[i]
        w[j] = acc
    return {2: w}


def _loop_gesummv(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, x, y = _f64(h[0]), _f64(h[1]), _f64(h[2]), _f64(h[3])
    alpha, beta, n = float(h[4]), float(h[5]), int(h[6])
    for i in range(n):
        ax = bx = 0.0
        for j in range(n):
            ax += a[i, j] * x[j]
            bx += b[i, j] * x[j]
        y[i] = alpha * ax + beta * bx
    return {3: y}


def _loop_column_mean(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean, n = _f64(h[0]), _f64(h[1]), int(h[2])
    for j in range(n):
        mean[j] = sum(data[i, j] for i in range(n)) / n
    return {1: mean}


def _loop_corr_std(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean, std, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for j in range(n):
        s = (sum((data[i, j] - mean[j]) ** 2 for i in range(n)) / n) ** 0.5
        std[j] = 1.0 if s <= polybench.CORR_EPS else s
    return {2: std}


def _loop_corr_scale(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean, std, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for i, j in product(range(n), repeat=2):
        data[i, j] = (data[i, j] - mean[j]) / (n**0.5 * std[j])
    return {0: data}


def _loop_corr_matrix(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, corr, n = _f64(h[0]), _f64(h[1]), int(h[2])
    for j1 in range(n):
        corr[j1, j1] = 1.0
        for j2 in range(j1 + 1, n):
            acc = sum(data[i, j1] * data[i, j2] for i in range(n))
            corr[j1, j2] = corr[j2, j1] = acc
    return {1: corr}


def _loop_covar_center(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean, n = _f64(h[0]), _f64(h[1]), int(h[2])
    for i, j in product(range(n), repeat=2):
        data[i, j] -= mean[j]
    return {0: data}


def _loop_covar_matrix(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, cov, n = _f64(h[0]), _f64(h[1]), int(h[2])
    for j1 in range(n):
        for j2 in range(j1, n):
            acc = sum(data[i, j1] * data[i, j2] for i in range(n))
            cov[j1, j2] = cov[j2, j1] = acc / (n - 1)
    return {1: cov}


def _loop_fdtd_k1(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ey, hz, fict, t, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3]), int(h[4])
    for i, j in product(range(n), repeat=2):
        ey[i, j] = fict[t] if i == 0 else ey[i, j] - 0.5 * (hz[i, j] - hz[i - 1, j])
    return {0: ey}


def _loop_fdtd_k2(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ex, hz, n = _f64(h[0]), _f64(h[1]), int(h[2])
    for i, j in product(range(n), range(1, n)):
        ex[i, j] -= 0.5 * (hz[i, j] - hz[i, j - 1])
    return {0: ex}


def _loop_fdtd_k3(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    hz, ex, ey, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    for i, j in product(range(n - 1), repeat=2):
        hz[i, j] -= 0.7 * (ex[i, j + 1] - ex[i, j] + ey[i + 1, j] - ey[i, j])
    return {0: hz}


def _loop_gramschm_k1(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, k, n = _f64(h[0]), _f64(h[1]), int(h[2]), int(h[3])
    r[k, k] = sum(a[i, k] ** 2 for i in range(n)) ** 0.5
    return {1: r}


def _loop_gramschm_k2(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, q, k, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3]), int(h[4])
    for i in range(n):
        q[i, k] = a[i, k] / r[k, k]
    return {2: q}


def _loop_gramschm_k3(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, q, k, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3]), int(h[4])
    for j in range(k + 1, n):
        acc = sum(q[i, k] * a[i, j] for i in range(n))
        r[k, j] = acc
        for i in range(n):
            a[i, j] -= q[i, k] * acc
    return {0: a, 1: r}


LOOPS: dict[str, Callable[[tuple[Any, ...]], dict[int, np.ndarray]]] = {
    "conv2d": _loop_conv2d,
    "conv3d": _loop_conv3d,
    "mm2_k1": _loop_mm2_k1,
    "mm2_k2": _loop_mm2_k2,
    "mm3_k1": _loop_matmul,
    "mm3_k2": _loop_matmul,
    "mm3_k3": _loop_matmul,
    "gemm": _loop_gemm,
    "syrk": _loop_syrk,
    "syr2k": _loop_syr2k,
    "atax_k1": lambda h: _loop_rows(h, accumulate=False),
    "atax_k2": lambda h: _loop_cols(h, accumulate=False),
    "bicg_k1": lambda h: _loop_cols(h, accumulate=False),
    "bicg_k2": lambda h: _loop_rows(h, accumulate=False),
    "mvt_k1": lambda h: _loop_rows(h, accumulate=True),
    "mvt_k2": lambda h: _loop_cols(h, accumulate=True),
    "gesummv": _loop_gesummv,
    "corr_k1": _loop_column_mean,
    "corr_k2": _loop_corr_std,
    "corr_k3": _loop_corr_scale,
    "corr_k4": _loop_corr_matrix,
    "covar_k1": _loop_column_mean,
    "covar_k2": _loop_covar_center,
    "covar_k3": _loop_covar_matrix,
    "fdtd2d_k1": _loop_fdtd_k1,
    "fdtd2d_k2": _loop_fdtd_k2,
    "fdtd2d_k3": _loop_fdtd_k3,
    "gramschm_k1": _loop_gramschm_k1,
    "gramschm_k2": _loop_gramschm_k2,
    "gramschm_k3": _loop_gramschm_k3,
}


def test_every_kernel_has_a_loop_implementation() -> None:
    assert set(LOOPS) == {s.kernel for s in SPECS}


@pytest.mark.parametrize("n", [2, 5, 8])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_reference_matches_per_thread_loops(spec: KernelSpec, n: int) -> None:
    n = max(n, spec.data[0].lo)
    D = {"N": n}
    host = spec.make_args(D, np.random.default_rng(n), device=False)
    before = copy.deepcopy(host)
    expected = spec.reference(D, host)
    for a, b in zip(host, before):  # the reference never mutates its input
        np.testing.assert_array_equal(a, b)
    looped = LOOPS[spec.kernel](host)
    assert set(expected) == set(looped) == set(spec.outputs)
    for i in spec.outputs:
        assert expected[i].shape == host[i].shape
        np.testing.assert_allclose(expected[i], looped[i], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_reference_differs_from_the_untouched_output(spec: KernelSpec) -> None:
    """Random initial outputs: a kernel that writes nothing fails the output check."""
    D = {"N": 16}
    host = spec.make_args(D, np.random.default_rng(1), device=False)
    expected = spec.reference(D, host)
    for i in spec.outputs:
        out = host[i].astype(np.float64)
        rel = np.linalg.norm(out - expected[i]) / np.linalg.norm(expected[i])
        assert rel > 100 * spec.rtol


def test_gramschm_step_is_the_middle_column() -> None:
    assert polybench.gramschm_k(4096) == 2048
    args = polybench.gramschm_k3_args({"N": 10}, np.random.default_rng(0), device=False)
    a, q, k = args[0], args[2], int(args[3])
    assert k == 5
    np.testing.assert_allclose(np.linalg.norm(q[:, k]), 1.0, rtol=1e-6)
    np.testing.assert_allclose(q[:, k] * np.linalg.norm(a[:, k]), a[:, k], rtol=1e-5)
