"""The scaling model (klaraptor.models.scaling): exact quantities, footprint, growth law,
shrinkage (no size evidence: tune-once's choice), the cache regime, the program round trip."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.core.errors import FitError, KlaraptorError
from klaraptor.device.occupancy import active_blocks_per_sm
from klaraptor.models.scaling import (
    Footprint,
    GrowthLaw,
    ScalingTable,
    exact_quantities,
    fit_scaling,
    pade_factor,
)
from klaraptor.runtime.selector import adaptive_topk

CC = shutil.which("cc")
SIZES = (256, 512, 768, 1024, 1536)


def _table(
    times: dict[tuple[int, int], float], cold: dict[int, float] | None = None
) -> ScalingTable:
    """Hot times {(N, cfg): ms} (every cfg at the largest N), cold {cfg: ms} at the largest."""
    rows = [(n, c, t, False) for (n, c), t in sorted(times.items())]
    L = max(n for n, _ in times)
    rows += [(L, c, t, True) for c, t in sorted((cold or {}).items())]
    return ScalingTable(
        D=np.array([[r[0]] for r in rows], dtype=np.float64),
        cfg=np.array([r[1] for r in rows]),
        time_ms=np.array([r[2] for r in rows]),
        cold=np.array([r[3] for r in rows]),
        spread=np.full(len(rows), 0.003),
    )


def _shared_growth(n: float) -> float:
    return 1e-3 + 2e-7 * n * n


# -- exact quantities ---------------------------------------------------------------------------


def test_exact_quantities_follow_grid_and_occupancy() -> None:
    spec = suite.get("polybench.gemm.gemm")
    attrs = {"num_regs": 32, "static_smem": 0}
    blocks = [(32, 2, 1), (1024, 1, 1), (16, 16, 1)]
    q = exact_quantities(spec, blocks, {"N": 1536}, attrs, cc=(9, 0), sm_count=132)
    expect_blocks = [48 * 768, 2 * 1536, 96 * 96]
    assert q.blocks.tolist() == expect_blocks
    assert q.threads.tolist() == [64, 1024, 256]
    act = active_blocks_per_sm([64, 1024, 256], 32, 0, (9, 0))
    assert q.active_blocks.tolist() == act.tolist()
    np.testing.assert_allclose(q.waves, np.array(expect_blocks) / (act * 132))
    assert q.full_waves.tolist() == np.ceil(q.waves).tolist()
    # 1536 is not a multiple of 1024: the padded block launches 2048 threads per row.
    assert q.launched_threads.tolist() == [1536 * 1536, 2048 * 1536, 1536 * 1536]


# -- footprint and growth law -------------------------------------------------------------------


def test_footprint_exact_polynomial_and_expr() -> None:
    D = np.array([[256.0], [512.0], [768.0], [1024.0]])
    nbytes = 4 * D[:, 0] ** 2 + 8 * D[:, 0]
    fp = Footprint.fit_exact(("N",), D, nbytes)
    assert fp.bytes([[8192.0]])[0] == pytest.approx(4 * 8192**2 + 8 * 8192, rel=1e-9)
    from klaraptor.program import Program

    prog = Program("f", ["N"], [("f", fp.expr())], ["f"])
    N = np.array([300.0, 4096.0, 8192.0])
    assert np.array_equal(prog.evaluate(N=N)["f"], fp.bytes(N[:, None]))


def test_footprint_power_needs_two_sizes() -> None:
    fp = Footprint.fit_power(("N",), [[512.0], [1536.0]], [2.1e6, 18.9e6])
    assert fp.exps == ((2,),)
    with pytest.raises(FitError):
        Footprint.fit_power(("N",), [[1536.0]], [18.9e6])


def test_growth_law_recovers_quadratic() -> None:
    s = np.array([256.0, 512.0, 768.0])
    R = np.array([_shared_growth(v) / _shared_growth(1536.0) for v in s])
    g = GrowthLaw.fit(s, R, 1536.0)
    assert all(c >= 0 for c in g.coef)
    assert float(g.ratio(np.array(1536.0))) == pytest.approx(1.0)
    want = _shared_growth(6144.0) / _shared_growth(1536.0)
    assert float(g.ratio(np.array(6144.0))) == pytest.approx(want, rel=1e-3)


def test_pade_factor_is_a_bounded_power() -> None:
    x = np.array([0.5, 1.0, 1.1, 100.0])
    p = pade_factor(x, 0.3)
    assert p[1] == 1.0
    assert p[2] == pytest.approx(1.1**0.3, rel=1e-3)
    assert p[3] < (1 + 0.3) / (1 - 0.3)


# -- shrinkage: no size evidence means tune-once's choice ----------------------------------------


def test_no_size_evidence_keeps_the_best_measured_at_L() -> None:
    rng = np.random.default_rng(3)
    base = rng.uniform(1.0, 1.1, size=12)  # per-config factors, near-ties included
    times = {
        (n, c): base[c] * _shared_growth(n) * (1 + rng.normal(0, 0.003))
        for n in SIZES
        for c in range(12)
    }
    fit = fit_scaling(_table(times), 12)
    at_L = np.array([times[(1536, c)] for c in range(12)])
    assert fit.report["lambda"] == 0.0
    assert not fit.delta.any()
    for N in (2048, 4096, 8192, 32768):
        assert fit.choose((N,)) == int(np.argmin(at_L)) == fit.tune_once


def test_consistent_size_trend_moves_the_choice() -> None:
    # Config 0 is fastest at L but grows faster than the rest at every size, config 1 slower:
    # a trend seen at every size, which the fold confirms, so the choice moves at large N.
    exps = {0: 0.25, 1: -0.25, 2: 0.0, 3: 0.0}
    mult = {0: 0.95, 1: 1.0, 2: 1.02, 3: 1.04}
    times = {
        (n, c): mult[c] * _shared_growth(n) * (n / 1536.0) ** exps[c]
        for n in SIZES
        for c in range(4)
    }
    fit = fit_scaling(_table(times), 4)
    assert fit.report["lambda"] == 1.0
    assert fit.delta[0] > 0 > fit.delta[1]
    assert fit.choose((1536,)) == 0
    assert fit.choose((8192,)) == 1


# -- the cache regime -----------------------------------------------------------------------------


def test_cold_regime_uses_cold_anchors_beyond_the_l2() -> None:
    times = {(n, c): (1.0 + 0.01 * c) * _shared_growth(n) for n in SIZES for c in range(4)}
    cold = {0: 3.0 * times[(1536, 0)], 1: 1.2 * times[(1536, 1)], 2: 2.0 * times[(1536, 2)]}
    fp = Footprint(("N",), ((2,),), (8.0,))  # 8 N^2 bytes: 60 MB at about N = 2740
    fit = fit_scaling(_table(times, cold), 4, footprint=fp, l2_bytes=60e6)
    assert not fit.is_cold((2048,)) and fit.is_cold((4096,))
    assert fit.choose((2048,)) == 0
    assert fit.choose((4096,)) == 1
    # Config 3 was not cold-timed (pruned): it gets a bound, never below its hot time.
    assert fit.a_cold[3] >= fit.a_hot[3]


def test_candidate_missing_at_L_is_never_chosen() -> None:
    times = {(n, c): 1.0 + 0.1 * c for n in SIZES for c in range(3)}
    del times[(1536, 0)]  # the fastest everywhere else failed at L
    fit = fit_scaling(_table(times), 3)
    assert fit.report["missing_at_L"] == [0]
    assert math.isinf(fit.a_hot[0]) and fit.tune_once == 1
    assert all(fit.choose((N,)) == 1 for N in (2048, 8192))


def test_no_candidate_at_L_is_an_error() -> None:
    times = {(n, c): 1.0 for n in SIZES[:-1] for c in range(3)}
    times[(1536, 0)] = math.nan  # the one point at L failed
    with pytest.raises(KlaraptorError, match="no candidate has a hot timing at the largest"):
        fit_scaling(_table(times), 3)


# -- adaptive top-k ---------------------------------------------------------------------------


def test_adaptive_topk_band_kmax_and_tune_once() -> None:
    pred = np.array([1.00, 1.004, 1.02, 1.5, np.nan])
    assert adaptive_topk(pred, 0.0, must=0) == [0]
    assert adaptive_topk(pred, 0.0, must=3) == [0, 3]
    assert adaptive_topk(pred, 0.01, must=0) == [0, 1]
    assert adaptive_topk(pred, 1.0, must=0, kmax=2) == [0, 1]
    assert adaptive_topk(pred, 0.0, must=4) == [0]  # no prediction: never tried
    assert adaptive_topk(np.full(3, np.inf), 0.1, must=0) == []


# -- program round trip -------------------------------------------------------------------------


def _fitted_with_everything():
    rng = np.random.default_rng(7)
    exps = rng.normal(0, 0.2, size=6)
    times = {
        (n, c): (1 + 0.02 * c) * _shared_growth(n) * (n / 1536.0) ** exps[c]
        for n in SIZES
        for c in range(6)
    }
    cold = {c: 1.5 * times[(1536, c)] * (1 + 0.1 * c) for c in range(4)}
    fp = Footprint(("N",), ((1,), (2,)), (8.0, 8.0))
    return fit_scaling(_table(times, cold), 6, footprint=fp, l2_bytes=60e6)


def test_program_matches_array_predictions_bit_for_bit() -> None:
    fit = _fitted_with_everything()
    assert fit.delta.any() and fit.cold_measured.any() and fit.growth is not None
    prog = fit.to_program(clock_mhz=1980.0)
    cfg = np.arange(fit.n_cfg, dtype=np.float64)
    for N in (100, 1536, 2048, 2739, 2740, 4096, 8192, 46340):
        out = prog.evaluate(N=float(N), cfg=cfg)
        assert np.array_equal(out["time_ms"], fit.predict((N,))), N
        assert bool(out["cold"][0]) == fit.is_cold((N,))
        assert out["band"][0] == fit.band_at((N,))
        assert np.array_equal(out["cycles"], fit.predict((N,)) * (1980.0 * 1e3))
    ns: dict = {}
    exec(compile(prog.to_python(), "<scaling>", "exec"), ns)
    fn = ns["scaling"]
    for N in (1536, 4096, 8192):
        pred = fit.predict((N,))
        for c in range(fit.n_cfg):
            assert fn(N=float(N), cfg=float(c))[1] == pred[c]


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_program_matches_in_c(tmp_path: Path) -> None:
    fit = _fitted_with_everything()
    prog = fit.to_program()
    where = Path(tempfile.mkdtemp(dir=tmp_path))
    (where / "gen.c").write_text(prog.to_c())
    lib = where / "gen.so"
    flags = ["-std=c99", "-O2", "-fPIC", "-shared"]
    res = subprocess.run(
        [CC, *flags, "-o", str(lib), str(where / "gen.c"), "-lm"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    fn = ctypes.CDLL(str(lib)).kp_scaling
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.c_double, ctypes.c_double, ctypes.POINTER(ctypes.c_double)]
    out = (ctypes.c_double * 4)()
    for N in (1536, 4096, 8192):
        pred = fit.predict((N,))
        for c in range(fit.n_cfg):
            fn(float(N), float(c), out)
            assert out[1] == pred[c] or math.isclose(out[1], pred[c], rel_tol=1e-12)


def test_helper_program_from_the_fit_chooses_like_the_fit() -> None:
    """The adapter the builder will use: the fit's program as a HelperProgram's model."""
    from klaraptor.helper.program import HelperProgram, admit_program

    spec = suite.get("polybench.gemm.gemm")
    blocks = [(32, 2, 1), (64, 2, 1), (128, 2, 1), (256, 4, 1), (32, 8, 1), (64, 4, 1)]
    rng = np.random.default_rng(11)
    times = {
        (n, c): (1 + rng.uniform(0, 0.05)) * _shared_growth(n) for n in SIZES for c in range(6)
    }
    cold = {c: times[(1536, c)] * rng.uniform(1.0, 1.3) for c in range(6)}
    fp = Footprint.fit_exact(
        ("N",), [[256.0], [512.0], [1024.0]], [12 * n * n for n in (256, 512, 1024)]
    )
    fit = fit_scaling(_table(times, cold), 6, footprint=fp, l2_bytes=62914560.0)
    admit = admit_program(
        "admit",
        spec.data_names,
        spec.grid_exprs(),
        spec.constraint_exprs(),
        spec.smem_expr(),
        static_smem=0,
        smem_limit=232448,
        max_grid=(2147483647, 65535, 65535),
        data_ranges=[(p.lo, p.hi) for p in spec.data],
    )
    helper = HelperProgram(
        kernel=spec.name,
        model_name="scaling",
        data_names=spec.data_names,
        candidates=tuple(blocks),
        model=fit.to_program(clock_mhz=1980.0),
        admit=admit,
        hw={},
        clock_mhz=1980.0,
        band=0.0,
    )
    for N in (1536, 2048, 4096, 8192):
        top, ms, _ = helper.choose(spec.size(N), k=6)
        assert top[0] == fit.choose((N,))
        np.testing.assert_allclose(ms, np.sort(fit.predict((N,)))[: len(ms)], rtol=1e-12)


# -- the busiest SM's blocks (SM-bound kernels with program parameters) -------------------------


def _sgemm_like() -> tuple[object, list[tuple[dict[str, int], tuple[int, int, int]]]]:
    """The tunables SGEMM's grid formulas and two of its configurations: (TM=8, TN=4, 16x16), a
    64 x 128 tile, and (TM=4, TN=8, 8x16), a 64 x 64 tile."""
    spec = suite.get("tunables.sgemm.sgemm")
    return spec, [({"TM": 8, "TN": 4}, (16, 16, 1)), ({"TM": 4, "TN": 8}, (8, 16, 1))]


def _launch(spec: object, configs: list, active: list[float] | None = None) -> object:
    """The busiest SM's blocks of `configs` (with `active`: the fill of a partial wave)."""
    from klaraptor.models.scaling import LaunchForm, LaunchQuantity

    blocks = np.array([b for _, b in configs], dtype=np.float64)
    per = {"bx": blocks[:, 0], "by": blocks[:, 1], "bz": blocks[:, 2]}
    for name in ("TM", "TN"):
        per[name] = np.array([float(p[name]) for p, _ in configs])
    if active is None:
        return LaunchQuantity(LaunchForm.BUSIEST_SM, 132, spec.grid_exprs(), per)  # type: ignore[attr-defined]
    return LaunchQuantity(LaunchForm.FILL, 132, spec.grid_exprs(), per, active=np.array(active))  # type: ignore[attr-defined]


def test_busiest_sm_counts_the_grid_over_the_sms() -> None:
    spec, configs = _sgemm_like()
    busiest = _launch(spec, configs)
    for n in (384, 768, 1792, 1000):
        expect = [
            math.ceil(math.ceil(n / (b[0] * p["TN"])) * math.ceil(n / (b[1] * p["TM"])) / 132)
            for p, b in configs
        ]
        assert busiest.count({"N": n}).tolist() == expect  # type: ignore[attr-defined]
    # 768: 72 blocks of the first (one per SM, 60 SMs idle), 144 of the second (two on some).
    assert busiest.count({"N": 768}).tolist() == [1, 2]  # type: ignore[attr-defined]


def _sm_bound_table(times: dict[int, list[float]]) -> ScalingTable:
    """The two SGEMM configurations' hot times {N: [ms, ms]}."""
    rows = [(n, c, t) for n, ts in sorted(times.items()) for c, t in enumerate(ts)]
    return ScalingTable(
        D=np.array([[r[0]] for r in rows], dtype=np.float64),
        cfg=np.array([r[1] for r in rows]),
        time_ms=np.array([r[2] for r in rows]),
        cold=np.zeros(len(rows), dtype=bool),
        spread=np.full(len(rows), 0.003),
    )


# Times proportional to the busiest SM's blocks (1 and 1 at 384, 1 and 2 at 768) times the
# shared N^3 work: at L the first configuration is faster (1.0 against 2 x 0.55).
SM_BOUND = {384: [1.0 / 8, 0.55 / 8], 768: [1.0, 1.1]}


def test_busiest_sm_reranks_where_the_tiles_quantise_differently() -> None:
    spec, configs = _sgemm_like()
    busiest = _launch(spec, configs)
    tab = _sm_bound_table(SM_BOUND)
    plain = fit_scaling(tab, 2)
    fit = fit_scaling(tab, 2, launch=busiest)  # type: ignore[arg-type]
    assert fit.report["launch_quantity"]["used"] is True
    assert fit.report["launch_quantity"]["fold"]["r_with"] == 1.0
    assert plain.choose((768,)) == fit.choose((768,)) == 0
    # 1100: 162 blocks of the first (2 on the busiest SM), 324 of the second (3): 2 x 1.0
    # against 3 x 0.55, the second wins; without q the ranking at L is kept.
    assert busiest.count({"N": 1100}).tolist() == [2, 3]  # type: ignore[attr-defined]
    assert fit.choose((1100,)) == 1 and plain.choose((1100,)) == 0
    # 1280: 2 against 4 blocks: the first again.
    assert fit.choose((1280,)) == 0


def test_busiest_sm_vetoed_by_the_fold() -> None:
    """At L the second is faster (0.9 against 1.0); at 384 it was faster too, by less than its
    q doubles: the fold's choice with q (the first) is slower at L by 11 %: q is left out."""
    spec, configs = _sgemm_like()
    tab = _sm_bound_table({384: [0.125, 0.09], 768: [1.0, 0.9]})
    fit = fit_scaling(tab, 2, launch=_launch(spec, configs))  # type: ignore[arg-type]
    rep = fit.report["launch_quantity"]
    assert rep["used"] is False
    assert rep["fold"]["r_with"] == pytest.approx(1.0 / 0.9) and rep["fold"]["r_without"] == 1.0
    assert fit.launch is None and "launch_quantity" not in fit.to_dict()
    # vetoed: the fit is exactly the fit without it
    plain = fit_scaling(tab, 2)
    for N in (768, 1100, 4096):
        assert np.array_equal(fit.predict((N,)), plain.predict((N,)))
    assert fit.to_program().inputs == ("N", "cfg")


def test_busiest_sm_program_matches_predict_bit_for_bit() -> None:
    spec, configs = _sgemm_like()
    busiest = _launch(spec, configs)
    fit = fit_scaling(_sm_bound_table(SM_BOUND), 2, launch=busiest)  # type: ignore[arg-type]
    prog = fit.to_program(clock_mhz=1980.0)
    assert set(prog.inputs) == {"N", "bx", "by", "TM", "TN", "cfg"}
    per = busiest.per_candidate  # type: ignore[attr-defined]
    for N in (384, 768, 1000, 1280, 1792, 4096):
        out = prog.evaluate(
            N=float(N), cfg=np.arange(2.0), **{k: per[k] for k in prog.inputs if k in per}
        )
        assert np.array_equal(out["time_ms"], fit.predict((N,))), N
    assert fit.to_dict()["launch_quantity"] == {
        "form": "busiest_sm",
        "sm_count": 132,
        "q_ref": [1.0, 2.0],
    }


def test_busiest_sm_is_never_offered_without_program_parameters() -> None:
    """A kernel without parameters is modelled exactly as before (PolyBench, Rodinia)."""
    from klaraptor.models.scaling_model import launch_quantity

    class _Job:
        spec = suite.get("polybench.gemm.gemm")

    assert launch_quantity(_Job(), None, None) is None  # type: ignore[arg-type]
    tab = _table({(n, c): _shared_growth(n) * (1 + 0.1 * c) for n in SIZES for c in range(3)})
    prog = fit_scaling(tab, 3).to_program()
    assert prog.inputs == ("N", "cfg")


def test_fill_counts_a_partial_first_wave_only() -> None:
    """q = 1 / min(waves, 1): 2 resident blocks per SM (264 at once) for the first, 4 for the
    second; below one wave q is the capacity over the blocks, from one wave on 1."""
    spec, configs = _sgemm_like()
    fill = _launch(spec, configs, active=[2.0, 4.0])
    # 384: 18 and 36 blocks; 768: 72 and 144; 2048: 512 and 1024 (beyond one wave: 1)
    assert fill.count({"N": 384}).tolist() == [264 / 18, 528 / 36]  # type: ignore[attr-defined]
    assert fill.count({"N": 768}).tolist() == [264 / 72, 528 / 144]  # type: ignore[attr-defined]
    assert fill.count({"N": 2048}).tolist() == [1.0, 1.0]  # type: ignore[attr-defined]


def test_fill_lifts_the_handicap_of_a_partial_wave_at_L() -> None:
    """Timed at L in a third of a wave, the second configuration is 20 % slower there; once
    both fill the GPU it is the faster (its time at L was for a GPU 73 % idle)."""
    spec, configs = _sgemm_like()
    fill = _launch(spec, configs, active=[0.5, 4.0])  # 66 and 528 blocks at once
    # With no smaller size there is no fold to check q against: it is not used.
    alone = fit_scaling(_sm_bound_table({768: [1.0, 1.2]}), 2, launch=fill)  # type: ignore[arg-type]
    assert alone.report["launch_quantity"]["used"] is False
    assert alone.report["launch_quantity"]["fold"].startswith("no smaller size")
    assert alone.choose((2048,)) == 0
    # At 384 (18 and 36 blocks: q 3.67 and 14.67) the fold's choice with q agrees: it is used.
    tab = _sm_bound_table({384: [0.125, 0.15], 768: [1.0, 1.2]})
    fit = fit_scaling(tab, 2, launch=fill)  # type: ignore[arg-type]
    assert fit.report["launch_quantity"]["used"] is True
    assert fit.report["launch_quantity"]["fold"]["anchor"] == 384
    assert fit.choose((768,)) == 0
    # 2048: 512 and 1024 blocks, both beyond one wave: 1.0 x 1 against 1.2 x 144/528
    assert fit.choose((2048,)) == 1
    assert fit_scaling(tab, 2).choose((2048,)) == 0
    prog = fit.to_program()
    assert "cfg" in prog.inputs
    per = fill.per_candidate  # type: ignore[attr-defined]
    for N in (768, 1024, 2048, 4096):
        out = prog.evaluate(
            N=float(N), cfg=np.arange(2.0), **{k: per[k] for k in prog.inputs if k in per}
        )
        assert np.array_equal(out["time_ms"], fit.predict((N,))), N


def test_fill_needs_the_active_blocks() -> None:
    from klaraptor.models.scaling import LaunchForm, LaunchQuantity

    spec, _ = _sgemm_like()
    with pytest.raises(FitError, match="active blocks"):
        LaunchQuantity(LaunchForm.FILL, 132, spec.grid_exprs(), {"bx": np.ones(2)})  # type: ignore[attr-defined]


def test_without_a_fold_the_drift_is_unknown_and_top_k_widens() -> None:
    # Only L timed (or one candidate at a smaller size): how relative times move with D was not
    # measured, so the band that sizes online top-k must not be the timing noise alone.
    from klaraptor.models.scaling import UNKNOWN_DRIFT
    from klaraptor.runtime.selector import REFINE_KMAX, adaptive_topk

    base = np.linspace(1.0, 1.3, 12)
    only_L = fit_scaling(_table({(1536, c): base[c] for c in range(12)}), 12)
    one_small = fit_scaling(
        _table({**{(1536, c): base[c] for c in range(12)}, (768, 0): base[0] / 4}), 12
    )
    for fit in (only_L, one_small):
        assert fit.drift == UNKNOWN_DRIFT and "unknown" in fit.report["drift"]
        band = fit.band_at((3072,))
        assert band > 0.6
        assert len(adaptive_topk(fit.predict((3072,)), band, None)) == REFINE_KMAX
    # With a fold the drift is measured, and the band stays narrow for consistent data.
    times = {(n, c): base[c] * _shared_growth(n) for n in SIZES for c in range(12)}
    folded = fit_scaling(_table(times), 12)
    assert folded.drift < 0.01 and folded.band_at((3072,)) < 0.05
