"""Rational fitting: exact recovery with extrapolation, noise, rank deficiency, collinear block
shapes, bad input, per-configuration tables, and programs that evaluate like the fits."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klaraptor.core.errors import FitError
from klaraptor.fit import (
    ErrorSummary,
    FitSettings,
    RationalFit,
    TableFit,
    fit_rational,
    fit_rational_table,
    iqr_upper_fence,
)
from klaraptor.fit.search import FitSettingsKeywords

SIZES = np.array([16, 24, 32, 48, 64, 96, 128, 192, 256], dtype=float)
SHAPES = [(bx, 256 // bx) for bx in (1, 2, 4, 8, 16, 32, 64, 128, 256)]


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a) / np.asarray(b) - 1)))


def grid(**axes: list[float]) -> dict[str, np.ndarray]:
    mesh = np.meshgrid(*(np.asarray(v, dtype=float) for v in axes.values()), indexing="ij")
    return {k: m.ravel() for k, m in zip(axes, mesh)}


def test_exact_univariate_rational_extrapolates_16x() -> None:
    f = lambda n: (3 * n**2 + 2 * n) / (n + 5)  # noqa: E731
    fit = fit_rational(SIZES, f(SIZES), names=["N"])
    assert fit.degrees == {"num": (2,), "den": (1,)}
    big = np.array([512.0, 1024.0, 4096.0])
    assert rel(fit(big), f(big)) < 1e-10
    assert fit.validation_error.max < 1e-10 and fit.validation_error.n == 3  # the 3 largest sizes
    # Normalised so that q's constant term is 1: q = 1 + N/5.
    assert fit.den_coefficients == pytest.approx((1.0, 0.2), rel=1e-9)
    assert "RationalFit(f(N) = (" in repr(fit)


def test_exact_bivariate_with_zero_constant_denominator() -> None:
    x = grid(N=[32, 64, 128, 256, 512], bx=[1, 2, 4, 8, 16, 32])
    f = lambda n, bx: (3 * n * bx + 7) / bx  # noqa: E731
    fit = fit_rational(x, f(x["N"], x["bx"]), data_vars=["N"])
    assert fit.degrees == {"num": (1, 1), "den": (0, 1)}
    test = grid(N=[4096, 8192], bx=[1, 4, 32])
    assert rel(fit(test), f(test["N"], test["bx"])) < 1e-10


def test_exact_trivariate_extrapolates_8x() -> None:
    x = grid(N=[32, 48, 64, 96, 128, 192, 256, 384], bx=[1, 2, 4, 8, 16, 32], by=[1, 2, 4, 8])
    f = lambda N, bx, by: (N * N + 5 * bx * by + bx) / (bx * (by + 1))  # noqa: E731
    fit = fit_rational(x, f(**x), data_vars=["N"])
    test = grid(N=[2048, 3072], bx=[1, 8, 32], by=[1, 8])
    assert rel(fit(test), f(**test)) < 1e-8
    prog = fit.to_program("metric")
    np.testing.assert_allclose(prog.evaluate(**test)["value"], fit(test), rtol=1e-12)


def test_noisy_samples_keep_the_error_bounded() -> None:
    rng = np.random.default_rng(7)
    f = lambda n: (3 * n**2 + 2 * n) / (n + 5)  # noqa: E731
    n = np.repeat(SIZES, 5)
    y = f(n) * (1 + 0.01 * rng.standard_normal(n.size))
    fit = fit_rational(n, y, names=["N"])
    big = np.array([512.0, 1024.0, 2048.0])
    assert rel(fit(big), f(big)) < 0.03
    assert fit.validation_error.median < 0.02


def test_duplicate_rows_and_a_constant_column_are_rank_deficient_but_fine() -> None:
    n = np.repeat(SIZES, 3)
    x = {"N": n, "bz": np.ones_like(n)}
    y = (2 * n + 3) / (n + 1)
    fit = fit_rational(x, y, data_vars=["N"], outlier_filter=False)
    assert rel(fit({"N": np.array([4096.0]), "bz": np.array([1.0])}), (2 * 4096 + 3) / 4097) < 1e-10
    assert fit.degrees["num"][1] == 0 and fit.degrees["den"][1] == 0  # bz is not used


def test_collinear_block_shapes() -> None:
    rows = [(n, bx, by) for n in (64, 128, 256, 512, 1024) for bx, by in SHAPES]
    n, bx, by = (np.array(c, dtype=float) for c in zip(*rows))
    y = n * bx / by + 1
    fit = fit_rational({"N": n, "bx": bx, "by": by}, y, data_vars=["N"])
    np.testing.assert_allclose(fit({"N": n, "bx": bx, "by": by}), y, rtol=1e-9)
    big = {"N": np.full(len(SHAPES), 16384.0), "bx": bx[: len(SHAPES)], "by": by[: len(SHAPES)]}
    assert rel(fit(big), big["N"] * big["bx"] / big["by"] + 1) < 1e-8


def test_polynomial_and_constant_special_cases() -> None:
    poly = fit_rational(SIZES, 4 * SIZES**2 - SIZES + 9, names=["N"])
    assert poly.degrees == {"num": (2,), "den": (0,)}
    assert poly.to_program("p").assignments[-1][1].op == "var"  # no division for q = 1
    assert rel(poly(np.array([4096.0])), 4 * 4096.0**2 - 4096 + 9) < 1e-12
    constant = fit_rational(SIZES, np.full(SIZES.size, 42.0), names=["N"])
    assert constant.degrees == {"num": (0,), "den": (0,)}
    assert float(constant(np.array([1e6]))[0]) == pytest.approx(42.0, rel=1e-14)


def test_pole_in_the_extrapolation_range_is_rejected() -> None:
    y = 1000.0 / (400.0 - SIZES)  # exact rational with a pole at 400, inside 16x the range
    fit = fit_rational(SIZES, y, names=["N"])
    q = np.polynomial.polynomial.polyval(np.linspace(16, 4096, 20000), fit.den_coefficients)
    assert np.all(q > 0) or np.all(q < 0)


def test_outlier_filter_removes_slow_repeats() -> None:
    assert iqr_upper_fence([1.0, 1.1, 0.9, 1.0, 5.0]).tolist() == [True, True, True, True, False]
    assert iqr_upper_fence([]).size == 0
    n = np.repeat(SIZES, 5)
    y = 3.0 * n + 10.0
    y[::5] *= 1.5  # one DVFS-slowed repeat per size
    fit = fit_rational(n, y, names=["N"])
    assert rel(fit(np.array([2048.0])), 3 * 2048.0 + 10) < 1e-10
    unfiltered = fit_rational(n, y, names=["N"], outlier_filter=False)
    assert rel(unfiltered(np.array([2048.0])), 3 * 2048.0 + 10) > 0.01


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"X": [[1.0], [np.nan]], "y": [1.0, 2.0]}, "non-finite"),
        ({"X": [[1.0], [2.0]], "y": [1.0, np.inf]}, "non-finite"),
        ({"X": np.zeros((0, 1)), "y": []}, "no samples"),
        ({"X": [[1.0], [2.0]], "y": [1.0]}, "rows but y"),
        ({"X": [[1.0], [2.0]], "y": [0.0, 0.0]}, "every sample value is zero"),
        ({"X": [[1.0], [2.0]], "y": [1.0, 2.0], "max_degree": -1}, "non-negative"),
        ({"X": [[1.0], [2.0]], "y": [1.0, 2.0], "max_den_degree": [1, 1]}, "entries for 1"),
        ({"X": [[1.0, 2.0]], "y": [1.0], "names": ["a", "a"]}, "distinct identifiers"),
        ({"X": [[1.0], [2.0]], "y": [1.0, 2.0], "names": ["N"], "data_vars": ["M"]}, "data_vars"),
        ({"X": [[1.0], [2.0]], "y": [1.0, 2.0], "holdout": "random"}, "holdout"),
        ({"X": [[1.0], [2.0]], "y": [1.0, 2.0], "holdout_fraction": 1.5}, "holdout_fraction"),
        ({"X": np.zeros((2, 2, 2)), "y": [1.0, 2.0]}, "(n_samples, n_vars)"),
        ({"X": [["a"], ["b"]], "y": [1.0, 2.0]}, "not numeric"),
    ],
)
def test_bad_input_raises_fit_error(kwargs: dict, fragment: str) -> None:
    X, y = kwargs.pop("X"), kwargs.pop("y")
    with pytest.raises(FitError) as err:
        fit_rational(X, y, **kwargs)
    assert fragment in str(err.value)


def test_serialisation_round_trip() -> None:
    x = grid(N=[32, 64, 128, 256, 512], bx=[1, 2, 4, 8])
    fit = fit_rational(x, (x["N"] + 3) / (x["bx"] + 1), data_vars=["N"])
    again = RationalFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    np.testing.assert_array_equal(again(x), fit(x))
    assert again.validation_error == fit.validation_error
    assert (
        ErrorSummary.from_dict(json.loads(json.dumps(ErrorSummary(math.inf, 0.5, 3).to_dict()))).max
        == math.inf
    )
    with pytest.raises(FitError, match="not a serialised"):
        RationalFit.from_dict({"kind": "table"})


def test_table_fit_per_configuration() -> None:
    n_cfg = 5
    sizes = [32.0, 64.0, 128.0, 256.0, 512.0, 1024.0]
    rows = [(n, c) for n in sizes for c in range(n_cfg - 1)]  # configuration 4 is never sampled
    n = np.array([r[0] for r in rows])
    cfg = np.array([r[1] for r in rows])
    f = lambda n, c: (c + 1) * n**2 / (n + 10 * (c + 1))  # noqa: E731
    fit = fit_rational_table(n, f(n, cfg), cfg, n_cfg, names=["N"])
    assert fit.fitted.tolist() == [True, True, True, True, False]
    big = np.full(n_cfg, 16384.0)
    pred = fit(big, np.arange(n_cfg))
    assert rel(pred[:4], f(big[:4], np.arange(4))) < 1e-9
    assert math.isnan(pred[4])
    assert fit.config_errors[4] is None and fit.config_errors[0].max < 1e-9
    prog = fit.to_program("metric")
    assert prog.inputs == ("N", "cfg")
    out = prog.evaluate(N=16384.0, cfg=np.arange(n_cfg, dtype=float))["value"]
    np.testing.assert_allclose(out[:4], pred[:4], rtol=1e-12)
    assert math.isnan(out[4])
    fast = prog.specialize({"cfg": np.arange(n_cfg, dtype=float)})
    np.testing.assert_array_equal(fast(N=16384.0)["value"], out)
    again = TableFit.from_dict(json.loads(json.dumps(fit.to_dict())))
    np.testing.assert_array_equal(again(big, np.arange(n_cfg)), pred)
    assert "4/5 configurations" in repr(fit)


def test_table_fit_falls_back_per_configuration() -> None:
    # Configuration 0 is quadratic / linear with many sizes; configuration 1 has only three sizes,
    # too few for the shared degrees, and gets its own (simpler, exact) fit.
    n0 = np.array([16.0, 32, 64, 128, 256, 512, 1024, 2048])
    n1 = np.array([16.0, 32, 64])
    n = np.concatenate([n0, n1])
    cfg = np.array([0] * n0.size + [1] * n1.size)
    y = np.where(cfg == 0, (n**2 + 1) / (n + 3), 2 * n)
    fit = fit_rational_table(n, y, cfg, 2, names=["N"])
    assert (
        rel(fit(np.array([8192.0, 8192.0]), np.array([0, 1])), [(8192.0**2 + 1) / 8195, 2 * 8192.0])
        < 1e-9
    )


def test_table_fit_bad_input() -> None:
    with pytest.raises(FitError, match="cfg_index must be integers"):
        fit_rational_table([1.0, 2.0], [1.0, 2.0], [0, 3], 2)
    with pytest.raises(FitError, match="n_cfg"):
        fit_rational_table([1.0, 2.0], [1.0, 2.0], [0, 0], 0)
    with pytest.raises(FitError, match="reserved"):
        fit_rational_table([1.0, 2.0], [1.0, 2.0], [0, 0], 1, names=["cfg"])
    with pytest.raises(FitError, match="values for"):
        fit_rational_table([1.0, 2.0], [1.0, 2.0], [0], 1)


@given(
    num=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    den=st.integers(0, 9),
)
@settings(max_examples=25, deadline=None)
def test_random_univariate_rationals_are_recovered(num: list[int], den: int) -> None:
    # p with positive coefficients, q = 1 + den/16 * N: no pole for N > 0.
    f = lambda n: np.polynomial.polynomial.polyval(n, num) / (1 + den / 16 * n)  # noqa: E731
    fit = fit_rational(SIZES, f(SIZES), names=["N"])
    big = np.array([1024.0, 4096.0])
    assert rel(fit(big), f(big)) < 1e-7
    np.testing.assert_allclose(fit.to_program("f").evaluate(N=big)["value"], fit(big), rtol=1e-12)


def test_fit_settings_are_the_keywords_of_both_fits() -> None:
    names = {f.name for f in dataclasses.fields(FitSettings)}
    assert set(FitSettingsKeywords.__annotations__) == names
    x = SIZES
    y = (x**2 + 3) / (x + 1)
    cfg = np.zeros(x.size, dtype=int)
    options = {"max_degree": 3, "holdout_fraction": 0.4, "rtol_accept": 0.2, "pole_factor": 8.0}
    by_keywords = fit_rational(x, y, names=["N"], **options)
    by_settings = fit_rational(x, y, names=["N"], settings=FitSettings(**options))
    assert json.dumps(by_keywords.to_dict()) == json.dumps(by_settings.to_dict())
    # Keywords override the fields of settings=.
    mixed = fit_rational(x, y, names=["N"], settings=FitSettings(max_degree=0), **options)
    assert json.dumps(mixed.to_dict()) == json.dumps(by_keywords.to_dict())
    table_kw = fit_rational_table(x, y, cfg, 1, names=["N"], **options)
    table_st = fit_rational_table(x, y, cfg, 1, names=["N"], settings=FitSettings(**options))
    assert json.dumps(table_kw.to_dict()) == json.dumps(table_st.to_dict())


def test_unknown_fit_keywords_raise_type_error() -> None:
    with pytest.raises(
        TypeError, match=r"fit_rational\(\) got an unexpected keyword argument 'degree'"
    ):
        fit_rational(SIZES, SIZES, degree=2)
    with pytest.raises(TypeError, match=r"fit_rational_table\(\) got an unexpected keyword"):
        fit_rational_table(SIZES, SIZES, np.zeros(SIZES.size), 1, max_degre=2)
    with pytest.raises(FitError, match="settings must be a FitSettings"):
        fit_rational(SIZES, SIZES, settings={"max_degree": 2})  # type: ignore[arg-type]
