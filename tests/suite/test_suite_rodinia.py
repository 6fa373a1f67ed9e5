"""The Rodinia suite on CPU: registry, specs, sizes, argument factories, references, and every
kernel emulated block by block for every candidate block shape (tests/suite/rodinia_emulator.py).

The references (vectorised NumPy) are pinned against straightforward loops below, written from
the algorithms; the emulator transcribes each CUDA kernel's indexing, shared memory and barriers.
NVRTC compiles every kernel for sm_90 where cuda-bindings and nvidia-cuda-nvrtc are installed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import re
from collections.abc import Callable
from itertools import product
from typing import Any

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.core.errors import KlaraptorError, SpecError
from klaraptor.space.configspace import CUDA_MAX_BLOCK_DIM, ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.spec.expressions import evaluate_exprs, parse_expression
from klaraptor.suite import rodinia as R
from tests.suite import rodinia_emulator as emu

SPECS = suite.all_specs("rodinia")
IDS = [s.name for s in SPECS]

EXPECTED = {
    "backprop": ["layerforward", "adjust_weights"],
    "bfs": ["expand"],
    "hotspot": ["temp"],
    "kmeans": ["swap", "assign"],
    "lud": ["perimeter", "internal"],
    "nn": ["euclid"],
    "nw": ["diagonal"],
    "pathfinder": ["dynproc"],
    "srad": ["k1", "k2"],
    "streamcluster": ["pgain"],
}
# Rodinia's own thread blocks (its sources' BLOCK_SIZE & co.).
RODINIA_BLOCKS = {
    "rodinia.backprop.layerforward": (16, 16, 1),
    "rodinia.backprop.adjust_weights": (16, 16, 1),
    "rodinia.bfs.expand": (512, 1, 1),
    "rodinia.hotspot.temp": (16, 16, 1),
    "rodinia.kmeans.swap": (256, 1, 1),
    "rodinia.kmeans.assign": (256, 1, 1),
    "rodinia.lud.perimeter": (32, 1, 1),
    "rodinia.lud.internal": (16, 16, 1),
    "rodinia.nn.euclid": (256, 1, 1),
    "rodinia.nw.diagonal": (16, 1, 1),
    "rodinia.pathfinder.dynproc": (256, 1, 1),
    "rodinia.srad.k1": (16, 16, 1),
    "rodinia.srad.k2": (16, 16, 1),
    "rodinia.streamcluster.pgain": (512, 1, 1),
}
H200_MAX_GRID = (2**31 - 1, 65535, 65535)


def _sizes(spec: KernelSpec, grid_sizes: tuple[int, ...], vec_sizes: tuple[int, ...]) -> list[int]:
    lo = spec.data[0].lo
    sizes = grid_sizes if spec.meta["layout"] == "NxN" else vec_sizes
    return sorted({max(n, lo) for n in sizes})


def _candidates(spec: KernelSpec, n: int) -> list[tuple[int, int, int]]:
    ok, _ = ConfigSpace.for_spec(spec).admissible({"N": n})
    return ok


# ---------------------------------------------------------------------------------------------
# registry


def test_applications_and_kernels() -> None:
    bench = suite.benchmarks("rodinia")
    assert {b: [n.rsplit(".", 1)[1] for n in names] for b, names in bench.items()} == EXPECTED
    assert list(bench) == sorted(bench)
    assert len(SPECS) >= 12 and len(bench) >= 6
    assert IDS == [n for names in bench.values() for n in names]


def test_registry_spans_every_suite() -> None:
    suites = suite.suites()
    assert list(suites) == ["polybench", "rodinia", "patterns", "tunables"]
    assert suites["rodinia"] == IDS
    everything = suite.all_specs()
    assert [s.name for s in everything] == (
        suites["polybench"] + suites["rodinia"] + suites["patterns"] + suites["tunables"]
    )
    assert set(suite.benchmarks()) == set(suite.benchmarks("polybench")) | set(EXPECTED) | set(
        suite.benchmarks("patterns")
    ) | set(suite.benchmarks("tunables"))
    # Profilers filter by function name: unique over both suites.
    assert len({s.kernel for s in everything}) == len(everything)
    with pytest.raises(SpecError, match="no suite named"):
        suite.all_specs("parboil")


def test_names_resolve_in_this_and_other_processes() -> None:
    for spec in SPECS:
        assert suite.get(spec.name) is spec
        assert suite.SPEC_REF[spec.name].startswith("klaraptor.suite.rodinia:")
        assert suite.resolve(suite.SPEC_REF[spec.name]) is spec
    with pytest.raises(SpecError, match="no suite kernel"):
        suite.get("rodinia.srad.k3")


def test_cli_targets() -> None:
    from klaraptor.frontends.targets import resolve_specs
    from klaraptor_bench.cli import _specs

    assert [s.name for s in resolve_specs("rodinia")] == IDS
    assert [s.name for s in resolve_specs("rodinia.srad")] == ["rodinia.srad.k1", "rodinia.srad.k2"]
    assert resolve_specs("rodinia.nw.diagonal") == [R.NW]
    assert [s.name for s in _specs("polybench.atax,rodinia.lud")] == [
        "polybench.atax.k1",
        "polybench.atax.k2",
        "rodinia.lud.perimeter",
        "rodinia.lud.internal",
    ]
    with pytest.raises(KlaraptorError, match="unknown kernel"):
        resolve_specs("rodinia.nope")


def test_cli_dry_run_and_list(capsys: pytest.CaptureFixture[str]) -> None:
    from klaraptor.cli import main

    assert main(["build", "rodinia", "--dry-run", "--sizes", "512,1024"]) == 0
    out = capsys.readouterr().out
    for name in IDS:
        assert name in out
    assert main(["list", "--suite"]) == 0
    out = capsys.readouterr().out
    assert "rodinia" in out and "rodinia.bfs.expand" in out and "polybench.gemm.gemm" in out


def test_required_coverage() -> None:
    features = {f for s in SPECS for f in s.meta["features"]}
    assert {"shared_tile", "barrier_in_loop", "data_dependent"} <= features
    for spec in SPECS:
        body = _kernel_body(spec)
        assert ("__shared__" in body) == ("shared_tile" in spec.meta["features"]), spec.name
        loop_sync = any("__syncthreads" in loop for loop in _loop_bodies(body))
        assert loop_sync == ("barrier_in_loop" in spec.meta["features"]), spec.name


def _matching(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at `start`."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == open_) - (text[i] == close)
        if depth == 0:
            return i + 1
    raise AssertionError("unbalanced brackets")


def _kernel_body(spec: KernelSpec) -> str:
    src = re.sub(r"//[^\n]*", "", spec.source)
    body = src[src.index(f"void {spec.kernel}(") :]
    return body[: _matching(body, body.index("{"), "{", "}")]


def _loop_bodies(code: str) -> list[str]:
    """The body of every `for` loop in `code` (braced, or the single statement)."""
    out = []
    for m in re.finditer(r"\bfor\s*\(", code):
        end = _matching(code, m.end() - 1, "(", ")")
        rest = code[end:].lstrip()
        out.append(
            rest[: _matching(rest, 0, "{", "}")] if rest.startswith("{") else rest.split(";")[0]
        )
    return out


# ---------------------------------------------------------------------------------------------
# specs


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_spec_is_valid_and_complete(spec: KernelSpec) -> None:
    spec.validate()
    assert spec.data_names == ("N",)
    assert spec.reference is not None and spec.outputs and spec.idempotent
    assert set(spec.meta["overwrites"]) <= set(spec.outputs)
    assert spec.meta["benchmark"] in EXPECTED and spec.meta["suite"] == "rodinia"
    assert spec.meta["complexity"] in ("N", "N^2")
    assert spec.meta["layout"] in ("N", "NxN")
    assert set(spec.meta["features"]) <= {"shared_tile", "barrier_in_loop", "data_dependent"}
    assert spec.description and 0 < spec.rtol <= 1e-4
    pickled = pickle.loads(pickle.dumps(spec))
    assert pickled.name == spec.name and pickled.make_args is spec.make_args


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_default_block_is_rodinias_or_the_nearest_candidate(spec: KernelSpec) -> None:
    rodinia_block = RODINIA_BLOCKS[spec.name]
    assert spec.meta.get("rodinia_block", spec.default_block) == rodinia_block
    for n in (*spec.meta["train_sizes"], *spec.meta["eval_sizes"]):
        assert spec.default_block in _candidates(spec, n)
    if spec.default_block != rodinia_block:  # only where Rodinia's block is below one warp
        assert math.prod(rodinia_block) < 32 and spec.name == "rodinia.nw.diagonal"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_source_sanity(spec: KernelSpec) -> None:
    code = re.sub(r"//[^\n]*", "", spec.source)
    for open_, close in ("{}", "()", "[]"):
        depth = 0
        for ch in code:
            depth += (ch == open_) - (ch == close)
            assert depth >= 0
        assert depth == 0
    assert len(re.findall(rf'extern "C" __global__ void {spec.kernel}\(', spec.source)) == 1
    assert spec.source.count("__global__") == spec.source.count('extern "C" __global__')
    assert re.search(r"int N\)\s*\{", spec.source[spec.source.index(spec.kernel) :])


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_sizes(spec: KernelSpec) -> None:
    train, evals, ncu = (spec.meta[k] for k in ("train_sizes", "eval_sizes", "ncu_sizes"))
    assert len(train) == 5 and len(evals) == 3 and len(ncu) == 3
    assert list(train) == sorted(set(train)) and list(evals) == sorted(set(evals))
    assert set(ncu) <= set(train)
    assert 2 <= min(evals) / max(train) and max(evals) / max(train) <= 16
    p = spec.data[0]
    assert p.lo <= min(train) and max(evals) <= p.hi


def test_counter_sizes_come_from_the_spec() -> None:
    from klaraptor.suite.protocol import NCU_SIZES, ncu_sizes_for

    for spec in SPECS:
        assert ncu_sizes_for(spec) == spec.meta["ncu_sizes"]
    assert ncu_sizes_for(suite.get("polybench.gemm.gemm")) == NCU_SIZES


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_work_estimates(spec: KernelSpec) -> None:
    def value(key: str, n: int) -> float:
        expr = parse_expression(spec.meta[key], spec.data_names)
        return float(evaluate_exprs({"v": expr}, {"N": n})["v"])

    n = spec.meta["eval_sizes"][-1]
    order = {"N": 1, "N^2": 2}[spec.meta["complexity"]]
    assert n**order <= value("min_bytes", n) <= 2000 * n**order
    assert 0 <= value("flops", n) <= 1000 * n**order
    assert value("min_bytes", 2 * n) / value("min_bytes", n) == pytest.approx(2**order, rel=0.01)


# ---------------------------------------------------------------------------------------------
# candidate blocks and grids


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_every_candidate_launches_within_limits(spec: KernelSpec) -> None:
    space = ConfigSpace.for_spec(spec)
    for n in (spec.data[0].lo, *spec.meta["train_sizes"], *spec.meta["eval_sizes"]):
        ok, rejected = space.admissible({"N": n})
        assert len(ok) >= 10
        assert {b for b, _ in rejected} | set(ok) == set(space.candidates)
        for b in ok:
            grid = spec.grid_for({"N": n}, b)
            assert all(1 <= g <= lim for g, lim in zip(grid, H200_MAX_GRID)), (n, b, grid)
            assert all(v <= lim for v, lim in zip(b, CUDA_MAX_BLOCK_DIM))
            smem = spec.dynamic_smem_for({"N": n}, b)
            # Only lud.internal's two 1024-wide shapes need the opt-in shared memory (65.6 KB).
            assert smem <= 48 * 1024 or (spec is R.LUD_INTERNAL and max(b) == 1024), (b, smem)
            assert smem <= 227 * 1024


def test_constraints_hold_exactly_where_intended() -> None:
    def admitted(spec: KernelSpec) -> set[tuple[int, int, int]]:
        return set(_candidates(spec, 4096))

    assert (
        all(b[0] > 4 and b[1] > 4 for b in admitted(R.HOTSPOT)) and len(admitted(R.HOTSPOT)) == 15
    )
    assert {b[0] for b in admitted(R.PATHFINDER)} == set(range(64, 1025, 32))
    assert all(b[0] <= 16 and b[1] % 16 == 0 for b in admitted(R.BACKPROP_LAYERFORWARD))
    assert len(admitted(R.BACKPROP_LAYERFORWARD)) == 24
    assert len(admitted(R.BACKPROP_ADJUST)) == 30 and len(admitted(R.NW)) == 10
    for spec in (R.SRAD_K1, R.SRAD_K2, R.LUD_INTERNAL):
        assert len(admitted(spec)) == 51  # every 2D candidate
    for spec in (R.NN, R.KMEANS_ASSIGN, R.KMEANS_SWAP, R.LUD_PERIMETER, R.BFS, R.STREAMCLUSTER):
        assert len(admitted(spec)) == 32  # every 1D candidate


def test_output_tiles_cover_the_domain() -> None:
    """Pyramid kernels write the inner part of overlapping tiles: the grid covers N exactly."""
    for n, (bx, by) in product((5, 37, 1000, 16384), ((8, 8), (16, 16), (8, 128), (128, 8))):
        gx, gy, _ = R.HOTSPOT.grid_for({"N": n}, (bx, by, 1))
        assert (gx - 1) * (bx - 4) < n <= gx * (bx - 4)
        assert (gy - 1) * (by - 4) < n <= gy * (by - 4)
    for n, bx in product((5, 333, 8388608), (64, 96, 256, 1024)):
        (gx, _, _) = R.PATHFINDER.grid_for({"N": n}, (bx, 1, 1))
        assert (gx - 1) * (bx - 40) < n <= gx * (bx - 40)


# ---------------------------------------------------------------------------------------------
# argument factories


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_host_args(spec: KernelSpec) -> None:
    n = max(37, spec.data[0].lo)
    args = spec.make_args({"N": n}, np.random.default_rng(0), device=False)
    assert spec.read_data(args) == {"N": n}
    assert spec.data[0].arg == len(args) - 1 and isinstance(args[-1], np.int32)
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            assert a.flags.c_contiguous and a.dtype in (np.float32, np.int32, np.uint8)
            if a.dtype == np.float32:
                assert np.all(np.isfinite(a)) and np.all(a != 0), i
        else:
            assert isinstance(a, (np.int32, np.float32))
    for i in spec.outputs:
        assert isinstance(args[i], np.ndarray)
    for i in spec.meta["overwrites"]:
        assert args[i].dtype == np.float32 or spec is R.KMEANS_ASSIGN  # poisoned with NaN
    again = spec.make_args({"N": n}, np.random.default_rng(0), device=False)
    for a, b in zip(args, again):
        np.testing.assert_array_equal(a, b)
    for fn in (spec.make_args, spec.reference):
        assert "<locals>" not in fn.__qualname__ and fn.__module__ == R.__name__


def test_bfs_state_is_a_real_bfs_level_with_uneven_work() -> None:
    n = R.BFS.meta["train_sizes"][0]
    row_ptr, col, front, vis, cost, upd, _ = R.bfs_args(
        {"N": n}, np.random.default_rng(3), device=False
    )
    level = R.bfs_levels(row_ptr, col, n)
    widest = int(np.argmax(np.bincount(level[level >= 0])))
    np.testing.assert_array_equal(front, level == widest)
    np.testing.assert_array_equal(vis, (level >= 0) & (level <= widest))
    np.testing.assert_array_equal(cost[vis == 1], level[vis == 1])
    assert np.all(cost[vis == 0] == -1) and not upd.any()
    assert np.all(cost[front == 1] == widest)  # concurrent writers write one value
    degree = np.diff(row_ptr)
    assert 0.1 < front.mean() < 0.9  # threads with and without work
    assert degree.min() == 1 and degree.max() >= 8 * R.BFS_MEAN_DEGREE  # lists of random length
    assert degree.mean() == pytest.approx(R.BFS_MEAN_DEGREE, rel=0.05)
    exp = R.bfs_ref({"N": n}, (row_ptr, col, front, vis, cost, upd, np.int32(n)))
    assert np.array_equal(exp[4] == widest + 1, level == widest + 1)


def test_kmeans_nearest_centre_wins_by_a_wide_margin() -> None:
    n = R.KMEANS_ASSIGN.meta["train_sizes"][0]
    features, centres, _, _ = R.kmeans_assign_args({"N": n}, np.random.default_rng(5), device=False)
    d = ((features.T[:, None, :].astype(np.float64) - centres[None]) ** 2).sum(axis=2)
    two = np.sort(d, axis=1)[:, :2]
    assert np.all(two[:, 1] - two[:, 0] > 1.0)
    assert np.all(two[:, 0] < 0.1)


def test_hotspot_coefficients_are_rodinias_and_stable() -> None:
    cdt, rx, ry, rz = R.hotspot_coefficients()
    assert rx == ry == pytest.approx(0.1)
    assert rz == pytest.approx(1 / 5120)
    assert cdt == pytest.approx(0.34133, rel=1e-4)
    assert cdt * (2 * rx + 2 * ry + rz) < 1  # explicit scheme: stable


# ---------------------------------------------------------------------------------------------
# references against straightforward loops


def _f64(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float64)


def _clamp(i: int, n: int) -> int:
    return min(max(i, 0), n - 1)


def _loop_hotspot(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    power, t, n = _f64(h[0]), _f64(h[1]), int(h[8])
    cdt, rx, ry, rz, amb = (float(v) for v in h[3:8])
    for _ in range(R.HS_PYRAMID):
        new = t.copy()
        for i, j in product(range(n), repeat=2):
            c = t[i, j]
            ns = t[_clamp(i - 1, n), j] + t[_clamp(i + 1, n), j] - 2 * c
            we = t[i, _clamp(j - 1, n)] + t[i, _clamp(j + 1, n)] - 2 * c
            new[i, j] = c + cdt * (power[i, j] + ns * ry + we * rx + (amb - c) * rz)
        t = new
    return {2: t}


def _loop_pathfinder(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    wall, cur, n = _f64(h[0]), _f64(h[1]), int(h[3])
    for r in range(R.PF_ROWS):
        cur = np.array(
            [
                wall[r, x] + min(cur[_clamp(x - 1, n)], cur[x], cur[_clamp(x + 1, n)])
                for x in range(n)
            ]
        )
    return {2: cur}


def _loop_srad_k1(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    J, q0, n = _f64(h[0]), float(h[6]), int(h[7])
    out = {k: np.zeros((n, n)) for k in range(1, 6)}
    for i, j in product(range(n), repeat=2):
        jc = J[i, j]
        d = [J[_clamp(i - 1, n), j] - jc, J[_clamp(i + 1, n), j] - jc]
        d += [J[i, _clamp(j - 1, n)] - jc, J[i, _clamp(j + 1, n)] - jc]
        g2 = sum(x * x for x in d) / (jc * jc)
        lap = sum(d) / jc
        q = (0.5 * g2 - lap * lap / 16) / (1 + lap / 4) ** 2
        c = 1 / (1 + (q - q0) / (q0 * (1 + q0)))
        for k in range(4):
            out[k + 1][i, j] = d[k]
        out[5][i, j] = min(max(c, 0.0), 1.0)
    return out


def _loop_srad_k2(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    J, c, n, lam = _f64(h[0]), _f64(h[1]), int(h[8]), float(h[7])
    dn, ds, dw, de = (_f64(a) for a in h[2:6])
    out = np.zeros((n, n))
    for i, j in product(range(n), repeat=2):
        div = c[i, j] * dn[i, j] + c[_clamp(i + 1, n), j] * ds[i, j]
        div += c[i, j] * dw[i, j] + c[i, _clamp(j + 1, n)] * de[i, j]
        out[i, j] = J[i, j] + 0.25 * lam * div
    return {6: out}


def _loop_layerforward(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x, w, n = _f64(h[0]), _f64(h[1]), int(h[3])
    groups = -(-n // R.BP_CHUNK)
    out = np.zeros((groups, R.BP_HID))
    for g, j in product(range(groups), range(R.BP_HID)):
        out[g, j] = sum(w[i, j] * x[i] for i in range(g * R.BP_CHUNK, min(n, (g + 1) * R.BP_CHUNK)))
    return {2: out}


def _loop_adjust(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    delta, ly, w, oldw = (_f64(a) for a in h[:4])
    n = int(h[6])
    w_out, dw_out = np.zeros_like(w), np.zeros_like(w)
    for i, j in product(range(n), range(R.BP_HID)):
        dw = R.BP_ETA * delta[j] * ly[i] + R.BP_MOMENTUM * oldw[i, j]
        w_out[i, j], dw_out[i, j] = w[i, j] + dw, dw
    return {4: w_out, 5: dw_out}


def _loop_nn(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    loc, lat, lng, n = _f64(h[0]), float(h[2]), float(h[3]), int(h[4])
    return {
        1: np.array([math.sqrt((lat - loc[i, 0]) ** 2 + (lng - loc[i, 1]) ** 2) for i in range(n)])
    }


def _loop_kmeans_assign(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    feat, cl, n = _f64(h[0]), _f64(h[1]), int(h[3])
    out = np.zeros(n)
    for p in range(n):
        best, best_d = 0, math.inf
        for k in range(R.KM_CLUSTERS):
            d = sum((feat[f, p] - cl[k, f]) ** 2 for f in range(R.KM_FEATURES))
            if d < best_d:
                best, best_d = k, d
        out[p] = best
    return {2: out}


def _loop_kmeans_swap(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    pts, n = _f64(h[0]), int(h[2])
    out = np.zeros((R.KM_FEATURES, n))
    for p, f in product(range(n), range(R.KM_FEATURES)):
        out[f, p] = pts[p, f]
    return {1: out}


def _loop_lud_perimeter(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, n, t = _f64(h[0]), int(h[3]), R.LUD_TILE
    urow, lcol = a[:t, t:].copy(), a[t:, :t].copy()
    for j in range(n - t):  # forward substitution with the unit lower factor
        for k in range(t):
            urow[k, j] -= sum(a[k, m] * urow[m, j] for m in range(k))
    for i in range(n - t):  # row i of L: solve x U = a
        for k in range(t):
            lcol[i, k] = (lcol[i, k] - sum(lcol[i, m] * a[m, k] for m in range(k))) / a[k, k]
    return {1: urow, 2: lcol}


def _loop_lud_internal(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, n, t = _f64(h[0]), int(h[2]), R.LUD_TILE
    out = np.zeros((n - t, n - t))
    for i, j in product(range(t, n), repeat=2):
        out[i - t, j - t] = a[i, j] - sum(a[i, k] * a[k, j] for k in range(t))
    return {1: out}


def _loop_nw(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ref, s, pen, n = _f64(h[0]), _f64(h[1]), float(h[2]), int(h[3])
    tiles, t = -(-n // R.NW_TILE), R.NW_TILE
    for k in range(tiles):  # tiles of the main anti-diagonal, each cell after its up/left
        ti, tj = k, tiles - 1 - k
        for i in range(ti * t + 1, min((ti + 1) * t, n) + 1):
            for j in range(tj * t + 1, min((tj + 1) * t, n) + 1):
                s[i, j] = max(s[i - 1, j - 1] + ref[i, j], s[i - 1, j] - pen, s[i, j - 1] - pen)
    return {1: s}


def _loop_bfs(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    row_ptr, col, front, vis = h[:4]
    cost, upd, n = _f64(h[4]), _f64(h[5]), int(h[6])
    for v in range(n):
        if front[v]:
            for e in range(row_ptr[v], row_ptr[v + 1]):
                if not vis[col[e]]:
                    cost[col[e]], upd[col[e]] = h[4][v] + 1, 1
    return {4: cost, 5: upd}


def _loop_streamcluster(h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    coord, weight, cost, x, n = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[4]), int(h[5])
    out = np.zeros(n)
    for p in range(n):
        dist = sum((coord[d, p] - coord[d, x]) ** 2 for d in range(R.SC_DIM))
        out[p] = dist * weight[p] - cost[p]
    return {3: out}


LOOPS: dict[str, Callable[[tuple[Any, ...]], dict[int, np.ndarray]]] = {
    "hotspot_temp": _loop_hotspot,
    "pathfinder_dynproc": _loop_pathfinder,
    "srad_k1": _loop_srad_k1,
    "srad_k2": _loop_srad_k2,
    "backprop_layerforward": _loop_layerforward,
    "backprop_adjust_weights": _loop_adjust,
    "nn_euclid": _loop_nn,
    "kmeans_assign": _loop_kmeans_assign,
    "kmeans_swap": _loop_kmeans_swap,
    "lud_perimeter": _loop_lud_perimeter,
    "lud_internal": _loop_lud_internal,
    "nw_diagonal": _loop_nw,
    "bfs_expand": _loop_bfs,
    "streamcluster_pgain": _loop_streamcluster,
}


def test_every_kernel_has_a_loop_and_an_emulator() -> None:
    assert set(LOOPS) == set(emu.EMULATORS) == {s.kernel for s in SPECS}


@pytest.mark.parametrize("n", [1, 5, 20, 37])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_reference_matches_loops(spec: KernelSpec, n: int) -> None:
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
        assert expected[i].shape == host[i].shape and expected[i].dtype == np.float64
        np.testing.assert_allclose(expected[i], looped[i], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_reference_differs_from_the_untouched_output(spec: KernelSpec) -> None:
    """Outputs start random: a kernel that writes nothing fails the output check."""
    D = {"N": 48}
    host = spec.make_args(D, np.random.default_rng(1), device=False)
    expected = spec.reference(D, host)
    for i in spec.outputs:
        diff = np.linalg.norm(host[i].astype(np.float64) - expected[i])
        assert diff / np.linalg.norm(expected[i]) > 100 * spec.rtol


# ---------------------------------------------------------------------------------------------
# every candidate block, emulated


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_emulated_kernel_matches_reference_for_every_candidate_block(spec: KernelSpec) -> None:
    for n in _sizes(spec, (5, 37), (5, 333)):
        D = {"N": n}
        host = spec.make_args(D, np.random.default_rng(n + 1), device=False)
        expected = spec.reference(D, host)
        blocks = _candidates(spec, n)
        assert spec.default_block in blocks
        for block in blocks:
            got = emu.emulate(spec, host, block)
            assert set(got) == set(spec.outputs)
            for i in spec.outputs:
                np.testing.assert_allclose(
                    got[i], expected[i], rtol=1e-10, atol=1e-9, err_msg=f"N={n} block={block}"
                )


def test_emulator_catches_wrong_specs_and_races() -> None:
    """The emulator is a real check: too little shared memory, a grid that does not match the
    kernel's tiling, and a race between threads are all reported."""
    host = R.hotspot_args({"N": 37}, np.random.default_rng(0), device=False)
    block = (16, 16, 1)
    np.testing.assert_allclose(
        emu.emulate(R.HOTSPOT, host, block)[2], R.hotspot_ref({"N": 37}, host)[2], rtol=1e-12
    )
    small_smem = dataclasses.replace(R.HOTSPOT, dynamic_smem="8 * bx * by")
    with pytest.raises(emu.EmulationError, match="outside"):
        emu.emulate(small_smem, host, block)
    plain_grid = dataclasses.replace(R.HOTSPOT, grid=("ceil(N / bx)", "ceil(N / by)", "1"))
    with pytest.raises(emu.EmulationError, match="written"):
        emu.emulate(plain_grid, host, block)
    sm = emu.Shared(4)
    sm.st(np.array([0]), np.array([1]), 1.0)
    sm.ld(np.array([1]), np.array([1]))
    with pytest.raises(emu.EmulationError, match="race"):
        sm.sync()
    with pytest.raises(emu.EmulationError, match="outside"):
        emu.Shared(4).ld(np.array([0]), np.array([-1]))


# ---------------------------------------------------------------------------------------------
# NVRTC: every kernel compiles for sm_90 (CPU only; needs the `isa` extra)


def compile_sm90(spec: KernelSpec) -> tuple[bytes, str]:
    """(cubin, PTX) of the spec's source for sm_90, with the options CuPy uses."""
    from klaraptor.isa.compile import compile_spec
    from klaraptor.isa.errors import ToolMissingError

    try:
        result = compile_spec(spec, "sm_90")
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    assert "warning" not in result.log.lower(), result.log
    return result.cubin, result.ptx


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_compiles_for_sm90_with_nvrtc(spec: KernelSpec) -> None:
    cubin, ptx = compile_sm90(spec)
    assert cubin[:4] == b"\x7fELF"
    entry = re.search(rf"\.entry {spec.kernel}\((.*?)\)\s*\{{(.*?)\n\}}", ptx, re.S)
    assert entry, f"no PTX entry {spec.kernel}"
    body = entry.group(2)
    has_barrier = bool(re.search(r"\bbar(rier)?\.sync\b", body))
    assert has_barrier == ("__syncthreads" in _kernel_body(spec)), spec.name
    assert ".local" not in body  # no spills or local arrays (lud's 16 values stay in registers)
