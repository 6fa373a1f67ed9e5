"""The tunables suite on CPU: registry, specs with program parameters, meta, the joint spaces,
argument factories, references pinned against straightforward loops, and (with the isa extra)
every variant compiled by NVRTC for sm_90."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.core.types import ParamStyle, ParamValues
from klaraptor.program import parse_expr
from klaraptor.space.configspace import default_candidates
from klaraptor.spec import KernelSpec
from klaraptor.suite import tunables as T

SPECS = suite.all_specs("tunables")
IDS = [s.name for s in SPECS]
META_KEYS = {
    "benchmark", "suite", "complexity", "train_sizes", "eval_sizes", "ncu_sizes", "flops",
    "min_bytes", "overwrites", "layout", "check_sizes",
}  # fmt: skip
POWER = {"N": 1, "N^2": 2, "N^3": 3}


def test_registry() -> None:
    assert list(suite.suites()) == ["polybench", "rodinia", "patterns", "tunables"]
    assert SPECS == list(T.SPECS) and len(SPECS) == 10
    assert list(suite.benchmarks("tunables")) == [
        "sgemm", "transpose", "gsmap", "reduce", "stencil2d", "stencil3d", "histogram",
        "softmax", "conv2d", "nbody",
    ]  # fmt: skip
    for spec in SPECS:
        assert spec.name == f"tunables.{spec.meta['benchmark']}.{spec.kernel}"
        assert suite.get(spec.name) is spec
        assert suite.resolve(suite.SPEC_REF[spec.name]) is spec
        assert not spec.meta.get("training_only")
    styles = [s.param_style for s in SPECS]
    assert styles.count(ParamStyle.DEFINE) >= 3 and styles.count(ParamStyle.TEMPLATE) >= 3
    everything = suite.all_specs()
    assert len({s.kernel for s in everything}) == len(everything)  # profilers filter by name


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_meta(spec: KernelSpec) -> None:
    meta = spec.meta
    assert set(meta) == META_KEYS
    assert meta["suite"] == "tunables" and meta["layout"] in ("N", "NxN", "N^3")
    train, evals = meta["train_sizes"], meta["eval_sizes"]
    assert len(train) == 4 and len(evals) == 2
    assert list(train) == sorted(set(train)) and list(evals) == sorted(set(evals))
    # Evaluation sizes do at least 4x the work of the largest training size.
    p = POWER[meta["complexity"]]
    assert min(evals) ** p >= 4 * max(train) ** p
    assert len(meta["ncu_sizes"]) == 3 and set(meta["ncu_sizes"]) <= set(train)
    assert set(meta["overwrites"]) <= set(spec.outputs)
    lo, hi = spec.data[0].lo, spec.data[0].hi
    assert all(lo <= n <= hi for n in (*train, *evals, *meta["check_sizes"]))
    assert min(meta["check_sizes"]) == 1 and any(n > 2 for n in meta["check_sizes"])
    for key in ("flops", "min_bytes"):
        e = parse_expr(meta[key], ("N",))
        assert set(e.variables()) <= {"N"}


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_params(spec: KernelSpec) -> None:
    variants = spec.variants()
    assert 1 < len(variants) <= 16
    assert spec.default_params is not None and spec.default_variant in variants
    # Not the first variant everywhere: the author's choice is a real choice.
    for prm in spec.params:
        assert list(prm.values) == sorted(prm.values) and all(v >= 1 for v in prm.values)
    pv = spec.default_variant
    if spec.param_style is ParamStyle.DEFINE:
        assert spec.variant_kernel(pv) == spec.kernel
        assert spec.variant_options(pv)[-len(pv) :] == tuple(f"-D{n}={v}" for n, v in pv.items())
        assert f'extern "C" __global__ void {spec.kernel}(' in spec.source
        for name in spec.param_names:  # a variant compiled without its define fails loudly
            assert f'#error "{name} must be defined"' in spec.source
    else:
        assert spec.variant_kernel(pv) == f"{spec.kernel}<{', '.join(map(str, pv.values()))}>"
        assert spec.variant_options(pv) == spec.options
        template = f"template <{', '.join(f'int {n}' for n in spec.param_names)}>"
        assert f"{template}\n__global__ void {spec.kernel}(" in spec.source


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_joint_space(spec: KernelSpec) -> None:
    """Between 100 and 400 configurations at every recorded size, each with a launchable grid
    and at most 48 KB of dynamic shared memory; the default configuration is admitted."""
    cap = {1: (2**31 - 1, 1, 1), 2: (2**31 - 1, 65535, 1), 3: (2**31 - 1, 65535, 65535)}
    for n in (*spec.meta["train_sizes"], *spec.meta["eval_sizes"]):
        D = spec.size(n)
        space = T.joint_space(spec, D)
        assert list(space) == spec.variants()
        count = sum(len(blocks) for blocks in space.values())
        assert 100 <= count <= 400, (n, count)
        assert spec.default_block in space[spec.default_variant]
        for pv, blocks in space.items():
            assert set(blocks) <= set(default_candidates(spec.dim))
            for block in blocks:
                grid = spec.grid_for(D, block, pv)
                assert all(1 <= g <= c for g, c in zip(grid, cap[spec.dim])), (pv, block, grid)
                assert 0 <= spec.dynamic_smem_for(D, block, pv) <= 48 * 1024


def test_joint_space_counts() -> None:
    """The sizes reported in the suite's table (variants with an admitted block, configs)."""
    counts = {}
    for spec in SPECS:
        space = T.joint_space(spec, spec.size(max(spec.meta["eval_sizes"])))
        counts[spec.kernel] = (sum(1 for b in space.values() if b), sum(map(len, space.values())))
    assert counts == {
        "sgemm": (16, 206), "transpose_tiles": (12, 130), "gsmap": (12, 384),
        "reduce_sum": (12, 343), "stencil2d": (5, 165), "stencil3d": (5, 280),
        "histogram_priv": (9, 135), "softmax_rows": (12, 180), "conv2d_tiles": (9, 278),
        "nbody_tiles": (16, 256),
    }  # fmt: skip


def test_constraints_that_correctness_needs() -> None:
    """Shapes the kernels cannot run are never admitted."""
    D = {"N": 4096}
    for pv, blocks in T.joint_space(T.REDUCE, D).items():  # whole warps; UNROLL divides ITEMS
        assert all(b[0] % 32 == 0 for b in blocks)
        assert not blocks or pv["ITEMS"] % pv["UNROLL"] == 0
    for pv, blocks in T.joint_space(T.SOFTMAX, D).items():  # whole warps, whole rows
        assert blocks and all(b[0] % (32 * pv["WPR"]) == 0 for b in blocks)
    for pv, blocks in T.joint_space(T.TRANSPOSE, D).items():  # passes cover the tile
        assert all(pv["TILE"] % b[0] == 0 and pv["TILE"] % (b[1] * pv["RPT"]) == 0 for b in blocks)
    # The reduction's workspace holds a partial for every block of every admitted config.
    for n in (1, 31, 33, 5003, 2**20 + 1):
        for pv, blocks in T.joint_space(T.REDUCE, {"N": n}).items():
            for b in blocks:
                assert T.REDUCE.grid_for({"N": n}, b, pv)[0] <= T.reduce_partials(n)


def test_check_blocks() -> None:
    space = T.joint_space(T.GSMAP, {"N": 5003})
    picks = T.check_blocks(T.GSMAP, space[T.GSMAP.default_variant])
    assert picks[:3] == [(256, 1, 1), (32, 1, 1), (1024, 1, 1)] and (96, 1, 1) in picks
    space = T.joint_space(T.STENCIL3D, {"N": 13})
    picks = T.check_blocks(T.STENCIL3D, space[T.STENCIL3D.default_variant])
    assert (32, 1, 1) in picks and (1024, 1, 1) in picks and (32, 1, 32) in picks
    assert T.check_blocks(T.REDUCE, []) == []


def test_output_errors() -> None:
    ref = np.arange(1.0, 1001.0)
    assert T.output_errors(ref, ref) == (0.0, 0.0)
    one_off = ref.copy()
    one_off[7] += 1.0
    rel, peak = T.output_errors(one_off, ref)
    assert rel < 1e-4 and peak == pytest.approx(1e-3)  # the peak sees one wrong element
    with_nan = ref.copy()
    with_nan[3] = np.nan
    assert all(math.isnan(e) for e in T.output_errors(with_nan, ref))
    assert T.output_errors(np.zeros(3), np.zeros(3)) == (0.0, 0.0)
    assert T.output_errors(np.ones(3), np.zeros(3)) == (pytest.approx(math.sqrt(3)), 1.0)
    assert T.output_errors(np.ones(2), np.ones(3)) == (math.inf, math.inf)


# ---------------------------------------------------------------------------------------------
# Arguments and references


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_args_and_reference_shapes(spec: KernelSpec) -> None:
    for n in spec.meta["check_sizes"]:
        D = spec.size(n)
        args = spec.make_args(D, np.random.default_rng(n), device=False)
        assert spec.data[0].read(args) == n
        frozen = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        expected = spec.reference(D, args)
        assert set(expected) == set(spec.outputs)
        for i, v in expected.items():
            assert np.asarray(args[i]).size == v.size and np.isfinite(v).all()
        for a, b in zip(args, frozen):  # the reference never mutates its input
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b)
        for i in spec.meta["overwrites"]:  # poisoned before a check: floating point
            assert np.asarray(args[i]).dtype.kind == "f"


def _one(spec: KernelSpec, n: int, seed: int = 3):
    D = spec.size(n)
    args = spec.make_args(D, np.random.default_rng(seed), device=False)
    return args, spec.reference(D, args)


def test_sgemm_reference_against_loops() -> None:
    (a, b, _, n), exp = _one(T.SGEMM, 6)
    want = [[sum(float(a[i, k]) * float(b[k, j]) for k in range(n)) for j in range(n)] for i in range(n)]  # fmt: skip
    np.testing.assert_allclose(exp[2], want, rtol=1e-12)


def test_transpose_and_gsmap_references_against_loops() -> None:
    (a, _, n), exp = _one(T.TRANSPOSE, 7)
    for i in range(n):
        for j in range(n):
            assert exp[1][j, i] == a[i, j]
    (x, y, _, ca, cb, n), exp = _one(T.GSMAP, 11)
    assert float(ca) == T.GSMAP_A and float(cb) == T.GSMAP_B
    want = [T.GSMAP_A * float(x[i]) + T.GSMAP_B * float(y[i]) for i in range(n)]
    np.testing.assert_allclose(exp[2], want, rtol=1e-12)


def test_reduce_reference_is_the_exact_integer_sum() -> None:
    (x, partial, count, _, n), exp = _one(T.REDUCE, 1001)
    assert np.array_equal(x, np.round(x)) and x.min() >= 1 and x.max() <= T.REDUCE_MAX_VALUE
    assert exp[3][0] == sum(int(v) for v in x)
    assert exp[2].tolist() == [0.0] and count.tolist() == [0]
    assert partial.dtype == np.float64 and partial.size == T.reduce_partials(n) == 32


def test_stencil2d_reference_against_loops() -> None:
    c0, c1, c2 = T.STENCIL2D_C
    for n in (9, 4):
        (a, _, _), exp = _one(T.STENCIL2D, n)
        a = a.astype(np.float64)
        for i in range(n):
            for j in range(n):
                if 2 <= i < n - 2 and 2 <= j < n - 2:
                    w = c0 * a[i, j] + c1 * (a[i - 1, j] + a[i + 1, j] + a[i, j - 1] + a[i, j + 1])
                    w += c2 * (a[i - 2, j] + a[i + 2, j] + a[i, j - 2] + a[i, j + 2])
                else:
                    w = a[i, j]
                assert exp[1][i, j] == pytest.approx(w, rel=1e-12)


def test_stencil3d_reference_against_loops() -> None:
    c0, c1 = T.STENCIL3D_C
    n = 6
    (a, _, _), exp = _one(T.STENCIL3D, n)
    a = a.astype(np.float64)
    for z, y, x in np.ndindex(n, n, n):
        if min(z, y, x) == 0 or max(z, y, x) == n - 1:
            assert exp[1][z, y, x] == a[z, y, x]
            continue
        nb = a[z - 1, y, x] + a[z + 1, y, x] + a[z, y - 1, x] + a[z, y + 1, x]
        nb += a[z, y, x - 1] + a[z, y, x + 1]
        assert exp[1][z, y, x] == pytest.approx(c0 * a[z, y, x] + c1 * nb, rel=1e-12)


def test_histogram_reference_adds_the_counts() -> None:
    (data, bins, n), exp = _one(T.HISTOGRAM, 777)
    want = bins.astype(np.int64).copy()
    for v in data:
        want[int(v) % T.HIST_BINS] += 1
    np.testing.assert_array_equal(exp[1], want)
    # Concentrated: most values fall in a few dozen bins (lanes of a warp meet on a bin).
    counts = np.sort(np.bincount(data, minlength=T.HIST_BINS))[::-1]
    assert counts[:40].sum() > 0.9 * n


def test_softmax_reference_against_loops() -> None:
    (x, _, n), exp = _one(T.SOFTMAX, 3)
    assert x.shape == (3, T.SOFTMAX_L)
    for r in range(n):
        row = [float(v) for v in x[r]]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = sum(e)
        np.testing.assert_allclose(exp[1][r], [v / s for v in e], rtol=1e-12)


def test_conv2d_reference_against_loops() -> None:
    n, k, r = 7, T.CONV_K, T.CONV_K // 2
    (a, _, _), exp = _one(T.CONV2D, n)
    w = T.CONV_W.reshape(k, k)
    for i in range(n):
        for j in range(n):
            acc = 0.0
            for ky in range(k):
                for kx in range(k):
                    ii, jj = i + ky - r, j + kx - r
                    if 0 <= ii < n and 0 <= jj < n:
                        acc += w[ky, kx] * float(a[ii, jj])
            assert exp[1][i, j] == pytest.approx(acc, rel=1e-12, abs=1e-15)
    # The constant table in the source is the filter of the reference.
    table = re.search(r"CONV_W\[CONV_K \* CONV_K\] = \{([^}]*)\}", T.SRC_CONV2D).group(1)
    np.testing.assert_array_equal(
        [float(v.strip().rstrip("f")) for v in table.split(",")], T.CONV_W
    )


def test_nbody_reference_against_loops() -> None:
    (body, _, n), exp = _one(T.NBODY, 7)
    b = body.reshape(-1, 4).astype(np.float64)
    for i in range(n):
        acc = np.zeros(3)
        for j in range(n):
            d = b[j, :3] - b[i, :3]
            acc += b[j, 3] * d / (d @ d + T.NBODY_EPS2) ** 1.5
        np.testing.assert_allclose(exp[1][3 * i : 3 * i + 3], acc, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Every variant compiles for sm_90 (NVRTC on the CPU, with CuPy's options)


def _compile_problem() -> str | None:
    try:
        from tests.isa.helpers import tools_problem
    except ImportError as exc:  # pragma: no cover - the isa helpers are part of the tests
        return str(exc)
    return tools_problem()


def _variants_to_compile(spec: KernelSpec) -> list[ParamValues]:
    every = [pv for pv, blocks in T.joint_space(spec, spec.size(1)).items() if blocks]
    if os.environ.get("KLARAPTOR_COMPILE_ALL") == "1":
        return every
    # The author's variant and the one with the most work per thread (the largest code).
    return list(dict.fromkeys([spec.default_variant, every[-1]]))


@pytest.mark.slow
@pytest.mark.skipif(_compile_problem() is not None, reason=str(_compile_problem()))
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_variants_compile_without_spills(spec: KernelSpec) -> None:
    """Registers within the 255 a thread may have, no local memory (spills or stack arrays),
    static shared memory within 48 KB. KLARAPTOR_COMPILE_ALL=1 compiles every variant."""
    from tests.suite.nvrtc_variants import compile_variant

    for pv in _variants_to_compile(spec):
        usage = compile_variant(spec, pv)
        assert usage["REG"] <= 255, (pv, usage)
        assert usage["LOCAL"] == 0 and usage["STACK"] == 0, (pv, usage)
        assert usage["SHARED"] <= 48 * 1024, (pv, usage)
