"""The training-only patterns suite on CPU: registry, specs, argument factories, references
pinned against straightforward loops, and its recorded H200 dataset."""

from __future__ import annotations

import math

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.space.configspace import ConfigSpace
from klaraptor.suite import patterns as P
from klaraptor.suite.recorded import RECORDED_FILES, TRAINING_ONLY, training_only_datasets

SPECS = suite.all_specs("patterns")
IDS = [s.name for s in SPECS]


def test_registry() -> None:
    assert list(suite.suites()) == ["polybench", "rodinia", "patterns", "tunables"]
    assert len(SPECS) == 16 and len(suite.benchmarks("patterns")) == 15
    assert suite.benchmarks("patterns")["transpose"] == [
        "patterns.transpose.transpose_naive",
        "patterns.transpose.transpose_tiled",
    ]
    for spec in SPECS:
        assert spec.meta["training_only"] and spec.meta["suite"] == "patterns"
        assert suite.get(spec.name) is spec
        assert suite.resolve(suite.SPEC_REF[spec.name]) is spec
        assert max(spec.meta["train_sizes"]) < min(spec.meta["eval_sizes"])
    # No evaluated kernel is training-only.
    for name in ("polybench", "rodinia", "tunables"):
        assert not any(s.meta.get("training_only") for s in suite.all_specs(name))
    # Profilers filter by function name: unique over every suite.
    everything = suite.all_specs()
    assert len({s.kernel for s in everything}) == len(everything)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_args_and_reference_shapes(spec) -> None:
    n = {"N": 5003, "NxN": 37, "N^3": 11}[spec.meta["layout"]]
    D = spec.size(n)
    args = spec.make_args(D, np.random.default_rng(0), device=False)
    assert spec.data[0].read(args) == n
    frozen = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    expected = spec.reference(D, args)
    assert set(expected) == set(spec.outputs)
    for i, v in expected.items():
        assert np.asarray(args[i]).size == v.size and np.isfinite(v).all()
    for a, b in zip(args, frozen):  # the reference never mutates its input
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    # Every default candidate is admissible at every recorded size (no constraints).
    ok, _ = ConfigSpace.for_spec(spec).admissible({"N": max(spec.meta["eval_sizes"])})
    assert len(ok) == {1: 32, 2: 51, 3: 231}[spec.dim]


def _one(spec, n, seed=3):
    D = spec.size(n)
    args = spec.make_args(D, np.random.default_rng(seed), device=False)
    return args, spec.reference(D, args)


def test_conv1d_reference_against_loops() -> None:
    (x, _, n), exp = _one(P.CONV1D, 50)
    r = P.CONV1D_R
    want = [
        sum(P.CONV1D_W[k] * float(x[i - r + k]) for k in range(2 * r + 1) if 0 <= i - r + k < n)
        for i in range(n)
    ]
    np.testing.assert_allclose(exp[1], want, rtol=1e-12)


def test_histogram_reference_counts_added_to_the_bins() -> None:
    (data, bins, n), exp = _one(P.HISTOGRAM, 777)
    want = bins.astype(np.int64).copy()
    for v in data:
        want[int(v) % P.HIST_BINS] += 1
    np.testing.assert_array_equal(exp[1], want)
    assert exp[1].sum() - bins.sum() == 777


def test_nbody_reference_against_loops() -> None:
    (body, _, n), exp = _one(P.NBODY, 7)
    b = body.reshape(-1, 4).astype(np.float64)
    for i in range(n):
        a = np.zeros(3)
        for j in range(n):
            d = b[j, :3] - b[i, :3]
            a += b[j, 3] * d / (d @ d + P.NBODY_EPS2) ** 1.5
        np.testing.assert_allclose(exp[1][3 * i : 3 * i + 3], a, rtol=1e-12)


def test_blackscholes_reference_put_call_parity() -> None:
    (s, x, t, _, _, r, v, n), exp = _one(P.BLACKSCHOLES, 1000)
    call, put = exp[3], exp[4]
    # C - P = S - X e^{-rT}, and both prices are within their no-arbitrage bounds.
    parity = s.astype(np.float64) - x * np.exp(-float(r) * t.astype(np.float64))
    np.testing.assert_allclose(call - put, parity, atol=1e-9)
    assert (call >= np.maximum(parity, 0) - 1e-9).all() and (call <= s + 1e-9).all()
    i = 17  # one option by the closed form with math.erfc
    si, xi, ti, r, v = float(s[i]), float(x[i]), float(t[i]), float(r), float(v)
    d1 = (math.log(si / xi) + (r + 0.5 * v * v) * ti) / (v * math.sqrt(ti))
    d2 = d1 - v * math.sqrt(ti)
    cnd = lambda d: 0.5 * math.erfc(-d / math.sqrt(2))  # noqa: E731
    c = si * cnd(d1) - xi * math.exp(-r * ti) * cnd(d2)
    assert call[i] == pytest.approx(c, rel=1e-12)


def test_poly_reference_is_the_polynomial() -> None:
    (x, _, n), exp = _one(P.POLY, 300)
    np.testing.assert_allclose(exp[1], np.polyval(P.POLY_C, x.astype(np.float64)), rtol=1e-9)


def test_rownorm_and_matmul_references() -> None:
    (a, _, n), exp = _one(P.ROWNORM, 9)
    np.testing.assert_allclose(exp[1], [math.sqrt(sum(float(v) ** 2 for v in row)) for row in a])
    (a, b, _, n), exp = _one(P.MATMUL_TILED, 6)
    want = [
        [sum(float(a[i, k]) * float(b[k, j]) for k in range(n)) for j in range(n)] for i in range(n)
    ]
    np.testing.assert_allclose(exp[2], want, rtol=1e-12)


def test_grid_references_against_loops() -> None:
    n = 9
    (a, _, _), exp = _one(P.TRANSPOSE_TILED, n)
    np.testing.assert_array_equal(exp[1], a.T)
    _, exp_naive = _one(P.TRANSPOSE_NAIVE, n)
    np.testing.assert_array_equal(exp_naive[1], a.T)
    (a, _, _), exp = _one(P.JACOBI2D, n)
    a = a.astype(np.float64)
    for i in range(n):
        for j in range(n):
            if 0 < i < n - 1 and 0 < j < n - 1:
                w = 0.2 * (a[i, j] + a[i, j - 1] + a[i, j + 1] + a[i - 1, j] + a[i + 1, j])
            else:
                w = a[i, j]
            assert exp[1][i, j] == pytest.approx(w, rel=1e-12)
    (a, _, _), exp = _one(P.BLUR5, n)
    a = a.astype(np.float64)
    for i in range(n):
        for j in range(n):
            win = [
                a[min(max(i + di, 0), n - 1), min(max(j + dj, 0), n - 1)]
                for di in range(-2, 3)
                for dj in range(-2, 3)
            ]
            assert exp[1][i, j] == pytest.approx(sum(win) * 0.04, rel=1e-12)


def test_resize2x_reference_against_the_kernels_arithmetic() -> None:
    n = 5
    (a, _, _), exp = _one(P.RESIZE2X, n)
    a = a.astype(np.float64)
    for y in range(2 * n):
        for x in range(2 * n):
            sx = min(max((x + 0.5) * 0.5 - 0.5, 0.0), n - 1)
            sy = min(max((y + 0.5) * 0.5 - 0.5, 0.0), n - 1)
            x0, y0 = int(sx), int(sy)
            x1, y1 = min(x0 + 1, n - 1), min(y0 + 1, n - 1)
            fx, fy = sx - x0, sy - y0
            top = a[y0, x0] * (1 - fx) + a[y0, x1] * fx
            bot = a[y1, x0] * (1 - fx) + a[y1, x1] * fx
            assert exp[1][y, x] == pytest.approx(top * (1 - fy) + bot * fy, rel=1e-12)


def test_laplace3d_reference_against_loops() -> None:
    n = 5
    (a, _, _), exp = _one(P.LAPLACE3D, n)
    a = a.astype(np.float64)
    for i, j, k in np.ndindex(n, n, n):
        if min(i, j, k) == 0 or max(i, j, k) == n - 1:
            assert exp[1][i, j, k] == 0.0
            continue
        nb = a[i, j, k - 1] + a[i, j, k + 1] + a[i, j - 1, k] + a[i, j + 1, k]
        nb += a[i - 1, j, k] + a[i + 1, j, k]
        assert exp[1][i, j, k] == pytest.approx(nb - 6 * a[i, j, k], rel=1e-9, abs=1e-12)


def test_recorded_dataset_covers_every_kernel_and_size() -> None:
    """The shipped H200 timings: every candidate at every training and evaluation size, each
    kernel measured from its current source, never among the evaluated datasets."""
    assert not set(TRAINING_ONLY.values()) & set(RECORDED_FILES)
    (data,) = training_only_datasets().values()
    assert data.provenance["suite"] == "patterns" and "commit" in data.provenance["sessions"][0]
    assert sorted(data.kernels) == sorted(IDS)
    for spec in SPECS:
        kd = data.kernels[spec.name]
        assert kd.fingerprint == spec.fingerprint(), f"{spec.name} changed since it was timed"
        sizes = {D.values()[0] for D in kd.sizes()}
        assert sizes == set(spec.meta["train_sizes"]) | set(spec.meta["eval_sizes"])
        n_blocks = {1: 32, 2: 51, 3: 231}[spec.dim]
        assert len(kd.times()) == n_blocks * len(sizes)
        assert all(0 < t[0] < 1e4 for t in kd.times().values())
