"""The degree search: `FitSettings`, candidate monomial sets, the held-out rows, the pole check,
and the selection rule (see the `klaraptor.fit` docstring)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, TypedDict

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.fit.common import (
    ZERO_FLOOR,
    ErrorSummary,
    Exps,
    as_samples,
    monomials,
    predict,
    rel_err,
    solve,
)

_POLE_RTOL = 1e-9  # |q| this small relative to max|q| on the box counts as a pole
_GRID_POINTS = 4096


@dataclass(frozen=True)
class FitSettings:
    """How `fit_rational` and `fit_rational_table` search degrees and validate (the package
    docstring describes each step). Both functions also take these fields as keywords.

    ``max_degree`` / ``max_den_degree`` bound each variable's degree in p / q (an int for all
    variables, or one per variable); ``max_total_degree`` optionally bounds the total degree of
    every monomial. ``holdout`` is ``"largest"`` (validate on the largest ``holdout_fraction`` of
    the data values) or ``"none"`` (validate on the training samples). ``outlier_filter`` drops,
    among samples with the same inputs, those above the IQR upper fence. ``rtol_accept`` /
    ``atol_accept`` set how close to the best validation error a simpler candidate must come;
    the denominator must keep clear of zero up to ``pole_factor`` times the largest sample of
    each data variable. Values are checked when a fit uses them, with the same errors as the
    keywords.
    """

    max_degree: int | Sequence[int] = 2
    max_den_degree: int | Sequence[int] = 1
    max_total_degree: int | None = None
    holdout: str = "largest"
    holdout_fraction: float = 0.25
    outlier_filter: bool = True
    rtol_accept: float = 0.1
    atol_accept: float = 1e-6
    pole_factor: float = 16.0


class FitSettingsKeywords(TypedDict, total=False):
    """The fields of `FitSettings` as keyword arguments (for static type checkers)."""

    max_degree: int | Sequence[int]
    max_den_degree: int | Sequence[int]
    max_total_degree: int | None
    holdout: str
    holdout_fraction: float
    outlier_filter: bool
    rtol_accept: float
    atol_accept: float
    pole_factor: float


_SETTING_NAMES = frozenset(f.name for f in fields(FitSettings))


def resolve_settings(
    settings: FitSettings | None, options: Mapping[str, Any], what: str
) -> FitSettings:
    """``settings`` (default: `FitSettings()`) with the keyword ``options`` replacing fields;
    an unknown keyword is a TypeError, as for any Python function."""
    for key in options:
        if key not in _SETTING_NAMES:
            raise TypeError(f"{what}() got an unexpected keyword argument {key!r}")
    if settings is None:
        settings = FitSettings()
    elif not isinstance(settings, FitSettings):
        raise FitError(f"{what}: settings must be a FitSettings, got {type(settings).__name__}")
    return replace(settings, **options) if options else settings


def prepare(
    settings: FitSettings | None,
    options: Mapping[str, Any],
    X: Any,
    y: Any,
    names: Sequence[str] | None,
    what: str,
) -> tuple[FitSettings, np.ndarray, np.ndarray, tuple[str, ...]]:
    """What every fit starts from: its settings (`resolve_settings`), checked, and the samples
    as arrays with the variable names (`as_samples`)."""
    settings = resolve_settings(settings, options, what)
    xa, ya, names_t = as_samples(X, y, names, what)
    check_holdout(settings.holdout, settings.holdout_fraction, what)
    return settings, xa, ya, names_t


def degree_candidates(settings: FitSettings, k: int) -> list[Candidate]:
    """The candidate monomial sets for ``k`` variables, simplest first."""
    return _candidates(
        _bounds(settings.max_degree, k, "max_degree"),
        _bounds(settings.max_den_degree, k, "max_den_degree"),
        settings.max_total_degree,
    )


def _grid(lo: np.ndarray, hi: np.ndarray, dims: tuple[int, ...], samples: np.ndarray) -> np.ndarray:
    """Grid points (scaled coordinates) over the box in the variables ``dims``, plus the samples."""
    per = max(8, min(64, int(round(_GRID_POINTS ** (1.0 / max(len(dims), 1))))))
    axes = [
        np.geomspace(lo[v], hi[v], per) if 0 < lo[v] < hi[v] else np.linspace(lo[v], hi[v], per)
        for v in dims
    ]
    out = np.tile(lo, (per ** len(dims), 1))
    if dims:
        out[:, list(dims)] = np.stack(
            [m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1
        )
    return np.vstack([out, samples])


def _pole_dims(den: Exps, beta: np.ndarray) -> tuple[int, ...]:
    k = len(den[0])
    return tuple(v for v in range(k) if any(e[v] for e, b in zip(den, beta) if b != 0))


def _is_pole(q: np.ndarray) -> bool:
    """Whether the denominator values change sign or come near zero."""
    if not np.all(np.isfinite(q)):
        return True
    big = np.max(np.abs(q))
    return bool(np.min(q) < 0 < np.max(q) or np.min(np.abs(q)) <= _POLE_RTOL * big)


def _bounds(value: int | Sequence[int], k: int, what: str) -> tuple[int, ...]:
    vals: list[Any]
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        vals = [value] * k
    else:
        vals = list(value)  # type: ignore[arg-type]  # a bool is not iterable: TypeError
    if len(vals) != k:
        raise FitError(f"{what} has {len(vals)} entries for {k} variables")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise FitError(f"{what} must be non-negative integers, got {value!r}")
    return tuple(int(v) for v in vals)


def _monomial_sets(bounds: tuple[int, ...], max_total: int | None) -> list[Exps]:
    sets: set[Exps] = set()
    for d in itertools.product(*(range(m + 1) for m in bounds)):
        tensor = list(itertools.product(*(range(x + 1) for x in d)))
        variants = [tensor, [a for a in tensor if sum(a) <= max(d, default=0)]]
        for s in variants:
            if max_total is not None:
                s = [a for a in s if sum(a) <= max_total]
            sets.add(tuple(sorted(s, key=lambda a: (sum(a), a))))
    return sorted(sets, key=lambda s: (len(s), sum(map(sum, s)), s))


@dataclass(frozen=True)
class Candidate:
    num: Exps
    den: Exps

    @property
    def unknowns(self) -> int:
        return len(self.num) + len(self.den)


def _candidates(
    num_b: tuple[int, ...], den_b: tuple[int, ...], max_total: int | None
) -> list[Candidate]:
    out = [
        Candidate(n, d)
        for n in _monomial_sets(num_b, max_total)
        for d in _monomial_sets(den_b, max_total)
    ]
    out.sort(key=lambda c: (c.unknowns, sum(map(sum, c.num)) + sum(map(sum, c.den)), c.num, c.den))
    return out


def _n_distinct(xs: np.ndarray) -> int:
    return int(np.unique(xs, axis=0).shape[0]) if xs.size else xs.shape[0]


def holdout_rows(xs: np.ndarray, data_idx: list[int], fraction: float) -> np.ndarray | None:
    """Held-out mask: rows whose data-value tuple is among the largest ``fraction`` of tuples."""
    for cols in (data_idx, list(range(xs.shape[1]))):
        if not cols:
            continue
        tuples, inverse = np.unique(xs[:, cols], axis=0, return_inverse=True)
        inverse = inverse.ravel()
        m = tuples.shape[0]
        if m < 2:
            continue
        n_out = min(m - 1, max(1, math.ceil(fraction * m)))
        order = np.argsort(tuples.sum(axis=1), kind="stable")
        return np.isin(inverse, order[m - n_out :])
    return None


@dataclass
class Problem:
    """Scaled samples of one fit plus what its candidate search needs."""

    xs: np.ndarray
    y: np.ndarray
    floor: float
    test: np.ndarray | None
    lo: np.ndarray
    hi: np.ndarray
    _n_train: int | None = None
    _n_all: int | None = None
    _grids: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)
    _grid_monomials: dict[tuple, np.ndarray] = field(default_factory=dict)

    @property
    def weights(self) -> np.ndarray:
        return 1.0 / np.maximum(np.abs(self.y), self.floor)

    def n_train(self) -> int:
        if self._n_train is None:
            self._n_train = _n_distinct(self.xs if self.test is None else self.xs[~self.test])
        return self._n_train

    def n_all(self) -> int:
        if self._n_all is None:
            self._n_all = _n_distinct(self.xs)
        return self._n_all

    def fit(self, c: Candidate, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        xs, y = (self.xs, self.y) if rows is None else (self.xs[rows], self.y[rows])
        w = self.weights if rows is None else self.weights[rows]
        return solve(monomials(xs, c.num), monomials(xs, c.den), y, w)

    def validate(self, c: Candidate) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
        """Relative errors on the held-out rows (all rows if none) of the fit on the others."""
        # A homogeneous system with u unknowns is determined by u - 1 equations.
        if self.n_train() < c.unknowns - 1:
            return None
        train = None if self.test is None else ~self.test
        sol = self.fit(c, train)
        if sol is None:
            return None
        rows = self.test if self.test is not None else slice(None)
        return rel_err(predict(self.xs[rows], c.num, c.den, *sol), self.y[rows], self.floor), sol

    def pole(self, c: Candidate, beta: np.ndarray) -> bool:
        dims = _pole_dims(c.den, beta)
        if not dims:
            return False  # a constant denominator (non-zero by normalisation)
        grid = self._grids.get(dims)
        if grid is None:
            grid = self._grids[dims] = _grid(self.lo, self.hi, dims, self.xs)
        mono = self._grid_monomials.get((dims, c.den))
        if mono is None:
            mono = self._grid_monomials[(dims, c.den)] = monomials(grid, c.den)
        return _is_pole(mono @ beta)

    def refit(self, c: Candidate) -> tuple[np.ndarray, np.ndarray] | None:
        if self.n_all() < c.unknowns - 1:
            return None
        sol = self.fit(c, None)
        return None if sol is None or self.pole(c, sol[1]) else sol


def accepted(errors: Mapping[int, float], rtol: float, atol: float) -> list[int]:
    """Candidate indices (simplest first) within the tolerance of the best error."""
    finite = [e for e in errors.values() if math.isfinite(e)]
    if not finite:
        return []
    limit = min(finite) * (1.0 + rtol) + atol
    return [i for i in sorted(errors) if errors[i] <= limit]


def search(
    p: Problem, cands: list[Candidate], rtol: float, atol: float
) -> tuple[Candidate, tuple[np.ndarray, np.ndarray], ErrorSummary] | None:
    validated = {i: res for i, c in enumerate(cands) if (res := p.validate(c)) is not None}
    errors = {i: float(np.max(rel)) for i, (rel, _) in validated.items()}
    # Pole checks are the costly part: only the candidates that can decide the outcome get one.
    poles: dict[int, bool] = {}

    def pole(i: int) -> bool:
        if i not in poles:
            poles[i] = p.pole(cands[i], validated[i][1][1])
        return poles[i]

    best = next(
        (errors[i] for i in sorted(errors, key=lambda i: (errors[i], i)) if not pole(i)), None
    )
    if best is None or not math.isfinite(best):
        return None
    limit = best * (1.0 + rtol) + atol
    for i in sorted(errors):
        if errors[i] <= limit and not pole(i):
            sol = p.refit(cands[i])
            if sol is not None:
                return cands[i], sol, ErrorSummary.of(validated[i][0])
    return None


def setup(
    xa: np.ndarray,
    ya: np.ndarray,
    names: tuple[str, ...],
    data_vars: Sequence[str] | None,
    pole_factor: float,
    what: str,
) -> tuple[np.ndarray, list[int], float]:
    if data_vars is None:
        data_idx = list(range(len(names)))
    else:
        unknown = [v for v in data_vars if v not in names]
        if unknown:
            raise FitError(f"{what}: data_vars {unknown} are not among the variables {list(names)}")
        data_idx = [names.index(v) for v in data_vars]
    ymax = float(np.max(np.abs(ya)))
    if ymax == 0:
        raise FitError(
            f"{what}: every sample value is zero; relative weighting needs a non-zero value"
        )
    if not pole_factor >= 1:
        raise FitError(f"{what}: pole_factor must be >= 1, got {pole_factor!r}")
    scales = np.max(np.abs(xa), axis=0)
    return np.where(scales > 0, scales, 1.0), data_idx, ZERO_FLOOR * ymax


def box(xs: np.ndarray, data_idx: list[int], factor: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = xs.min(axis=0), xs.max(axis=0).copy()
    for v in data_idx:
        if hi[v] > 0:
            hi[v] *= factor
    return lo, hi


def make_problem(
    xs: np.ndarray, y: np.ndarray, floor: float, data_idx: list[int], settings: FitSettings
) -> Problem:
    """The fit of scaled samples `xs`: its held-out rows (the largest data values, when
    `settings.holdout` is "largest") and the box its denominator must not vanish in."""
    test = (
        holdout_rows(xs, data_idx, settings.holdout_fraction)
        if settings.holdout == "largest"
        else None
    )
    lo, hi = box(xs, data_idx, settings.pole_factor)
    return Problem(xs, y, floor, test, lo, hi)


def check_holdout(holdout: str, fraction: float, what: str) -> None:
    if holdout not in ("largest", "none"):
        raise FitError(f"{what}: holdout must be 'largest' or 'none', got {holdout!r}")
    if not 0 < fraction < 1:
        raise FitError(f"{what}: holdout_fraction must be in (0, 1), got {fraction!r}")
