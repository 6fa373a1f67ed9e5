"""Rational-function fitting (thesis §5.5): f = p / q by weighted linear least squares.

The model
---------
p and q are polynomials whose monomials are bounded per variable. Each variable is first divided
by its largest absolute sample (so monomials lie in [-1, 1]); the fitted coefficients are those of
the scaled variables and are folded back when a program is emitted. A sample (x_i, y_i) gives the
homogeneous equation ``p(x_i) - y_i q(x_i) = 0``, weighted by ``1 / max(|y_i|, floor)`` so that the
residual is a relative error (``floor = 1e-6 * max|y|`` keeps zero samples finite).

Solving
-------
The homogeneous system is solved by SVDs (variable projection): the numerator is eliminated by
projecting onto the orthogonal complement of its column space, and the denominator is normalised by
its norm *on the samples* (``||q(x_i)|| = 1``), which excludes the degenerate solutions q = 0 on the
data that rank-deficient designs (duplicate rows, constant or collinear variables) would otherwise
produce. Redundant monomials get minimum-norm coefficients. If several denominators fit equally well
(over-estimated degrees), the one with the largest constant term is taken. The result is scaled so
that q's constant term is 1 when it is not (numerically) zero, else so that q's largest coefficient
is 1. A constant denominator gives the polynomial case, a constant numerator too the constant case.

Degree search and validation
----------------------------
Candidates are the tensor-product monomial sets ``{x^a : a <= d}`` for every degree vector d up to
the bounds, plus their total-degree-limited versions ``{a <= d, sum(a) <= max(d)}``, each for
numerator and denominator; they are ordered from simple to complex (number of unknowns, then total
degree). Because klaraptor extrapolates in the data parameters, validation holds out the samples
with the LARGEST data values: the distinct data-value tuples are ranked by the sum of their scaled
values and the top ``holdout_fraction`` of them (at least one) are held out together with all their
rows. Each candidate is fitted on the rest; its validation error is its maximum relative error on
the held-out rows. **Selection rule:** with e* the smallest validation error of a candidate without
a pole, the chosen fit is the simplest candidate with ``e <= e* (1 + rtol_accept) + atol_accept``
that has no pole; it is then refitted on all samples (and must still be pole-free).

Pole check: q must keep one sign, away from zero, on a grid over the box spanned by the samples,
with the data variables extended to ``pole_factor`` (16) times their largest sample.

Per-configuration fits (`fit_rational_table`) fit one low-dimensional function of the data
variables per candidate configuration. The degree choice is shared: a candidate's error is the mean,
over the configurations it can be fitted to without a pole (at least half of them), of their
validation errors, and the same acceptance rule picks the simplest. Each configuration uses the
simplest accepted candidate that it can be fitted to, else its own search; a configuration without
any fit gets nan coefficients, so its predictions are nan.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.errors import FitError
from klaraptor.program import Expr, Program, const, table, var

__all__ = [
    "ErrorSummary",
    "RationalFit",
    "TableFit",
    "fit_rational",
    "fit_rational_table",
    "iqr_upper_fence",
]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ZERO_FLOOR = 1e-6  # relative to max|y|: weight floor for (near-)zero samples
_RANK_RTOL = 1e-12  # relative singular-value cut for column spaces
_NULL_RTOL = 1e-10  # singular values this small (relatively) count as exact fits
_POLE_RTOL = 1e-9  # |q| this small relative to max|q| on the box counts as a pole
_GRID_POINTS = 4096

Exps = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ErrorSummary:
    """Relative errors |f - y| / max(|y|, floor) over ``n`` samples (inf if a prediction is not finite)."""

    max: float
    median: float
    n: int

    @staticmethod
    def of(rel: np.ndarray) -> ErrorSummary:
        if rel.size == 0:
            return ErrorSummary(math.nan, math.nan, 0)
        return ErrorSummary(float(np.max(rel)), float(np.median(rel)), int(rel.size))

    def to_dict(self) -> dict[str, Any]:
        return {"max": _jf(self.max), "median": _jf(self.median), "n": self.n}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ErrorSummary:
        return ErrorSummary(float(d["max"]), float(d["median"]), int(d["n"]))


def _jf(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)  # 'inf' / 'nan', which float() reads back


def iqr_upper_fence(values: Any) -> np.ndarray:
    """Mask keeping the values <= Q3 + 1.5 IQR (the thesis' upper inner fence against DVFS noise)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return np.zeros(v.shape, dtype=bool)
    q1, q3 = np.percentile(v, [25.0, 75.0])
    return v <= q3 + 1.5 * (q3 - q1)


# -- monomials and the least-squares core --------------------------------------------------------
def _monomials(xs: np.ndarray, exps: Exps) -> np.ndarray:
    e = np.asarray(exps, dtype=np.int64)
    out = np.ones((xs.shape[0], len(exps)))
    for v in range(xs.shape[1]):
        col = e[:, v]
        if col.any():
            out *= xs[:, v : v + 1] ** col[None, :]
    return out


def _orth(a: np.ndarray) -> np.ndarray:
    """Orthonormal basis of the column space of ``a``."""
    norms = np.linalg.norm(a, axis=0)
    a = a / np.where(norms > 0, norms, 1.0)
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return u[:, :0]
    return u[:, s > s[0] * _RANK_RTOL]


def _solve(
    mn: np.ndarray, md: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Coefficients (alpha, beta) minimising ||W (Mn alpha - y Md beta)|| with ||Md beta|| = 1,
    normalised as described in the module docstring; None if no non-degenerate q exists."""
    an = mn * w[:, None]
    ad = md * (y * w)[:, None]
    dnorm = np.linalg.norm(md, axis=0)
    dnorm = np.where(dnorm > 0, dnorm, 1.0)
    _, sd, vdt = np.linalg.svd(md / dnorm, full_matrices=False)
    if sd.size == 0 or sd[0] == 0:
        return None
    keep = sd > sd[0] * _RANK_RTOL
    # beta = T z gives q on the samples with ||q|| = ||z||.
    t = (vdt[keep].T / sd[keep]) / dnorm[:, None]
    qn = _orth(an)
    c = ad @ t
    c = c - qn @ (qn.T @ c)
    # Full V only when c is wide: then its extra rows span part of the null space.
    _, sc, vct = np.linalg.svd(c, full_matrices=c.shape[0] < c.shape[1])
    z = vct[-1]
    exact = (
        np.flatnonzero(sc <= sc[0] * _NULL_RTOL)
        if sc.size and sc[0] > 0
        else np.arange(vct.shape[0])
    )
    # Rows of vct beyond len(sc) span the null space of c too (when c has fewer rows than columns).
    null = np.union1d(exact, np.arange(sc.size, vct.shape[0]))
    if null.size > 1:
        basis = vct[null].T
        g = basis.T @ t[0]  # q's constant term along each null direction
        if np.linalg.norm(g) > 1e-12 * np.linalg.norm(t[0]):
            z = basis @ (g / np.linalg.norm(g))
    beta = t @ z
    rhs = ad @ beta
    anorm = np.linalg.norm(an, axis=0)
    anorm = np.where(anorm > 0, anorm, 1.0)
    alpha = np.linalg.lstsq(an / anorm, rhs, rcond=_RANK_RTOL)[0] / anorm
    big = np.max(np.abs(beta))
    if not np.isfinite(big) or big == 0:
        return None
    scale = beta[0] if abs(beta[0]) > 1e-10 * big else beta[np.argmax(np.abs(beta))]
    return alpha / scale, beta / scale


def _predict(
    xs: np.ndarray, num: Exps, den: Exps, alpha: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (_monomials(xs, num) @ alpha) / (_monomials(xs, den) @ beta)


def _rel_err(pred: np.ndarray, y: np.ndarray, floor: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        err = np.abs(pred - y) / np.maximum(np.abs(y), floor)
    return np.where(np.isfinite(err), err, np.inf)


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


# -- candidate degree sets -----------------------------------------------------------------------
def _bounds(value: int | Sequence[int], k: int, what: str) -> tuple[int, ...]:
    vals = (
        [value] * k
        if isinstance(value, int | np.integer) and not isinstance(value, bool)
        else list(value)
    )  # type: ignore[arg-type]
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
class _Candidate:
    num: Exps
    den: Exps

    @property
    def unknowns(self) -> int:
        return len(self.num) + len(self.den)


def _candidates(
    num_b: tuple[int, ...], den_b: tuple[int, ...], max_total: int | None
) -> list[_Candidate]:
    out = [
        _Candidate(n, d)
        for n in _monomial_sets(num_b, max_total)
        for d in _monomial_sets(den_b, max_total)
    ]
    out.sort(key=lambda c: (c.unknowns, sum(map(sum, c.num)) + sum(map(sum, c.den)), c.num, c.den))
    return out


def _n_distinct(xs: np.ndarray) -> int:
    return int(np.unique(xs, axis=0).shape[0]) if xs.size else xs.shape[0]


# -- sample preparation --------------------------------------------------------------------------
def _as_samples(
    X: Any, y: Any, names: Sequence[str] | None, what: str
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    if isinstance(X, Mapping):
        keys = list(X)
        if names is not None and list(names) != keys:
            raise FitError(f"{what}: names {list(names)} do not match the keys of X {keys}")
        names = keys
        try:
            cols = np.broadcast_arrays(*(np.asarray(X[k], dtype=np.float64) for k in keys))
        except (ValueError, TypeError) as exc:
            raise FitError(f"{what}: the columns of X do not broadcast: {exc}") from None
        xa = np.stack([c.ravel() for c in cols], axis=1) if cols else np.zeros((0, 0))
    else:
        try:
            xa = np.asarray(X, dtype=np.float64)
        except (ValueError, TypeError) as exc:
            raise FitError(f"{what}: X is not numeric: {exc}") from None
        if xa.ndim == 1:
            xa = xa[:, None]
        if xa.ndim != 2:
            raise FitError(f"{what}: X must be (n_samples, n_vars), got shape {xa.shape}")
    try:
        ya = np.asarray(y, dtype=np.float64).ravel()
    except (ValueError, TypeError) as exc:
        raise FitError(f"{what}: y is not numeric: {exc}") from None
    if xa.shape[0] == 0 or ya.size == 0:
        raise FitError(f"{what}: no samples")
    if xa.shape[0] != ya.size:
        raise FitError(f"{what}: X has {xa.shape[0]} rows but y has {ya.size} values")
    k = xa.shape[1]
    if k == 0:
        raise FitError(f"{what}: X has no variables")
    names = tuple(names) if names is not None else tuple(f"x{i}" for i in range(k))
    if len(names) != k:
        raise FitError(f"{what}: {len(names)} names for {k} variables")
    if len(set(names)) != k or not all(
        isinstance(n, str) and _NAME_RE.match(n) and not n.startswith("_kp_") for n in names
    ):
        raise FitError(f"{what}: variable names must be distinct identifiers, got {list(names)}")
    bad_x = np.flatnonzero(~np.all(np.isfinite(xa), axis=1))
    bad_y = np.flatnonzero(~np.isfinite(ya))
    if bad_x.size or bad_y.size:
        rows = sorted({*bad_x.tolist(), *bad_y.tolist()})
        raise FitError(
            f"{what}: non-finite samples at rows {rows[:10]}{'...' if len(rows) > 10 else ''}"
        )
    return xa, ya, names


def _filter_outliers(keys: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of samples kept by the IQR upper fence within each group of identical ``keys`` rows."""
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    keep = np.ones(y.size, dtype=bool)
    for g in np.unique(inverse):
        idx = np.flatnonzero(inverse == g)
        if idx.size > 2:
            keep[idx] = iqr_upper_fence(y[idx])
    return keep


def _holdout(xs: np.ndarray, data_idx: list[int], fraction: float) -> np.ndarray | None:
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


# -- the search ----------------------------------------------------------------------------------
@dataclass
class _Problem:
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

    def fit(self, c: _Candidate, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        xs, y = (self.xs, self.y) if rows is None else (self.xs[rows], self.y[rows])
        w = self.weights if rows is None else self.weights[rows]
        return _solve(_monomials(xs, c.num), _monomials(xs, c.den), y, w)

    def validate(self, c: _Candidate) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None:
        """Relative errors on the held-out rows (all rows if none) of the fit on the others."""
        # A homogeneous system with u unknowns is determined by u - 1 equations.
        if self.n_train() < c.unknowns - 1:
            return None
        train = None if self.test is None else ~self.test
        sol = self.fit(c, train)
        if sol is None:
            return None
        rows = self.test if self.test is not None else slice(None)
        return _rel_err(_predict(self.xs[rows], c.num, c.den, *sol), self.y[rows], self.floor), sol

    def pole(self, c: _Candidate, beta: np.ndarray) -> bool:
        dims = _pole_dims(c.den, beta)
        if not dims:
            return False  # a constant denominator (non-zero by normalisation)
        grid = self._grids.get(dims)
        if grid is None:
            grid = self._grids[dims] = _grid(self.lo, self.hi, dims, self.xs)
        mono = self._grid_monomials.get((dims, c.den))
        if mono is None:
            mono = self._grid_monomials[(dims, c.den)] = _monomials(grid, c.den)
        return _is_pole(mono @ beta)

    def refit(self, c: _Candidate) -> tuple[np.ndarray, np.ndarray] | None:
        if self.n_all() < c.unknowns - 1:
            return None
        sol = self.fit(c, None)
        return None if sol is None or self.pole(c, sol[1]) else sol


def _accepted(errors: Mapping[int, float], rtol: float, atol: float) -> list[int]:
    """Candidate indices (simplest first) within the tolerance of the best error."""
    finite = [e for e in errors.values() if math.isfinite(e)]
    if not finite:
        return []
    limit = min(finite) * (1.0 + rtol) + atol
    return [i for i in sorted(errors) if errors[i] <= limit]


def _search(
    p: _Problem, cands: list[_Candidate], rtol: float, atol: float
) -> tuple[_Candidate, tuple[np.ndarray, np.ndarray], ErrorSummary] | None:
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


def _setup(
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
    return np.where(scales > 0, scales, 1.0), data_idx, _ZERO_FLOOR * ymax


def _box(xs: np.ndarray, data_idx: list[int], factor: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = xs.min(axis=0), xs.max(axis=0).copy()
    for v in data_idx:
        if hi[v] > 0:
            hi[v] *= factor
    return lo, hi


def _check_holdout(holdout: str, fraction: float, what: str) -> None:
    if holdout not in ("largest", "none"):
        raise FitError(f"{what}: holdout must be 'largest' or 'none', got {holdout!r}")
    if not 0 < fraction < 1:
        raise FitError(f"{what}: holdout_fraction must be in (0, 1), got {fraction!r}")


# -- results -------------------------------------------------------------------------------------
def _format_poly(exps: Exps, coefs: Sequence[float], names: Sequence[str]) -> str:
    terms = []
    for e, c in zip(exps, coefs):
        if c == 0:
            continue
        mono = "*".join(n if a == 1 else f"{n}^{a}" for n, a in zip(names, e) if a)
        mag = f"{abs(c):.6g}"
        body = mono if mag == "1" and mono else (f"{mag}*{mono}" if mono else mag)
        terms.append(("-" if c < 0 else "+", body))
    if not terms:
        return "0"
    head = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    return head + "".join(f" {s} {b}" for s, b in terms[1:])


def _fold(exps: Exps, coefs: np.ndarray, scales: Sequence[float]) -> np.ndarray:
    """Coefficients in the scaled variables -> coefficients in the original variables."""
    div = np.array([math.prod(s**a for s, a in zip(scales, e)) for e in exps], dtype=np.float64)
    return coefs / div


def _poly_expr(exps: Exps, coefs: Sequence[Expr | float], names: Sequence[str]) -> Expr:
    out: Expr | None = None
    for e, c in zip(exps, coefs):
        term: Expr = c if isinstance(c, Expr) else const(c)
        for n, a in zip(names, e):
            if a:
                term = term * var(n) ** a
        out = term if out is None else out + term
    return out if out is not None else const(0.0)


def _eval_inputs(X: Any, names: tuple[str, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    if isinstance(X, Mapping):
        missing = [n for n in names if n not in X]
        if missing:
            raise FitError(f"missing variables {missing} (need {list(names)})")
        cols = np.broadcast_arrays(*(np.asarray(X[n], dtype=np.float64) for n in names))
        shape = cols[0].shape
        return np.stack([c.ravel() for c in cols], axis=1), shape
    xa = np.asarray(X, dtype=np.float64)
    if xa.ndim == 1 and len(names) == 1:
        return xa[:, None], xa.shape
    if xa.ndim != 2 or xa.shape[1] != len(names):
        raise FitError(
            f"X must have shape (n, {len(names)}) or be a dict of {list(names)}, got {xa.shape}"
        )
    return xa, (xa.shape[0],)


@dataclass(frozen=True, eq=False)
class RationalFit:
    """A fitted rational function of ``names``; coefficients are those of the scaled variables
    ``x / scale`` (``num_coefficients`` / ``den_coefficients`` give them for the raw variables)."""

    names: tuple[str, ...]
    scales: tuple[float, ...]
    num_exponents: Exps
    num_coefs: tuple[float, ...]
    den_exponents: Exps
    den_coefs: tuple[float, ...]
    validation_error: ErrorSummary
    train_error: ErrorSummary
    data_vars: tuple[str, ...]
    n_samples: int

    @property
    def degrees(self) -> dict[str, tuple[int, ...]]:
        """Largest exponent per variable in the numerator and the denominator."""

        def deg(exps: Exps, coefs: Sequence[float]) -> tuple[int, ...]:
            used = [e for e, c in zip(exps, coefs) if c != 0] or [(0,) * len(self.names)]
            return tuple(max(e[v] for e in used) for v in range(len(self.names)))

        return {
            "num": deg(self.num_exponents, self.num_coefs),
            "den": deg(self.den_exponents, self.den_coefs),
        }

    @property
    def num_coefficients(self) -> tuple[float, ...]:
        return tuple(_fold(self.num_exponents, np.array(self.num_coefs), self.scales).tolist())

    @property
    def den_coefficients(self) -> tuple[float, ...]:
        return tuple(_fold(self.den_exponents, np.array(self.den_coefs), self.scales).tolist())

    def __call__(self, X: Any) -> np.ndarray:
        """Evaluate at an (n, k) array or a dict of (broadcastable) arrays keyed by name."""
        xa, shape = _eval_inputs(X, self.names)
        xs = xa / np.array(self.scales)
        pred = _predict(
            xs,
            self.num_exponents,
            self.den_exponents,
            np.array(self.num_coefs),
            np.array(self.den_coefs),
        )
        return pred.reshape(shape)

    def formula(self) -> str:
        num = _format_poly(self.num_exponents, self.num_coefficients, self.names)
        den = _format_poly(self.den_exponents, self.den_coefficients, self.names)
        return num if den == "1" else f"({num}) / ({den})"

    def __repr__(self) -> str:
        v = self.validation_error
        return (
            f"RationalFit(f({', '.join(self.names)}) = {self.formula()}; "
            f"held-out max rel. error {v.max:.3g}, median {v.median:.3g} on {v.n})"
        )

    def to_program(self, name: str) -> Program:
        """A one-output rational program (inputs = ``names``) computing the fit."""
        num = _poly_expr(self.num_exponents, self.num_coefficients, self.names)
        den_coefs = self.den_coefficients
        assignments = [("num", num)]
        if len(den_coefs) == 1 and den_coefs[0] == 1.0 and not any(self.den_exponents[0]):
            assignments.append(("value", var("num")))
        else:
            assignments += [
                ("den", _poly_expr(self.den_exponents, den_coefs, self.names)),
                ("value", var("num") / var("den")),
            ]
        return Program(name, self.names, assignments, ["value"])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe representation; `RationalFit.from_dict` inverts it."""
        return {
            "kind": "rational",
            "names": list(self.names),
            "scales": list(self.scales),
            "num_exponents": [list(e) for e in self.num_exponents],
            "num_coefs": list(self.num_coefs),
            "den_exponents": [list(e) for e in self.den_exponents],
            "den_coefs": list(self.den_coefs),
            "validation_error": self.validation_error.to_dict(),
            "train_error": self.train_error.to_dict(),
            "data_vars": list(self.data_vars),
            "n_samples": self.n_samples,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> RationalFit:
        try:
            if d.get("kind") != "rational":
                raise FitError(f"not a serialised RationalFit (kind {d.get('kind')!r})")
            return RationalFit(
                names=tuple(d["names"]),
                scales=tuple(float(s) for s in d["scales"]),
                num_exponents=tuple(tuple(int(a) for a in e) for e in d["num_exponents"]),
                num_coefs=tuple(float(c) for c in d["num_coefs"]),
                den_exponents=tuple(tuple(int(a) for a in e) for e in d["den_exponents"]),
                den_coefs=tuple(float(c) for c in d["den_coefs"]),
                validation_error=ErrorSummary.from_dict(d["validation_error"]),
                train_error=ErrorSummary.from_dict(d["train_error"]),
                data_vars=tuple(d["data_vars"]),
                n_samples=int(d["n_samples"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FitError(f"malformed serialised RationalFit: {exc!r}") from None


def fit_rational(
    X: Any,
    y: Any,
    *,
    names: Sequence[str] | None = None,
    data_vars: Sequence[str] | None = None,
    max_degree: int | Sequence[int] = 2,
    max_den_degree: int | Sequence[int] = 1,
    max_total_degree: int | None = None,
    holdout: str = "largest",
    holdout_fraction: float = 0.25,
    outlier_filter: bool = True,
    rtol_accept: float = 0.1,
    atol_accept: float = 1e-6,
    pole_factor: float = 16.0,
) -> RationalFit:
    """Fit y ~ p(X) / q(X) with a degree search validated on the largest data values.

    ``X`` is (n, k) (with ``names``) or a dict of columns; ``data_vars`` (default: all) are the
    variables we extrapolate in. ``max_degree`` / ``max_den_degree`` bound each variable's degree
    in p / q (an int for all, or one per variable); ``max_total_degree`` optionally bounds the total
    degree of every monomial. ``holdout="none"`` validates on the training samples. See the module
    docstring for the method and the selection rule.
    """
    what = "fit_rational"
    xa, ya, names_t = _as_samples(X, y, names, what)
    _check_holdout(holdout, holdout_fraction, what)
    k = len(names_t)
    cands = _candidates(
        _bounds(max_degree, k, "max_degree"),
        _bounds(max_den_degree, k, "max_den_degree"),
        max_total_degree,
    )
    if outlier_filter:
        keep = _filter_outliers(xa, ya)
        xa, ya = xa[keep], ya[keep]
    scales, data_idx, floor = _setup(xa, ya, names_t, data_vars, pole_factor, what)
    xs = xa / scales
    test = _holdout(xs, data_idx, holdout_fraction) if holdout == "largest" else None
    lo, hi = _box(xs, data_idx, pole_factor)
    problem = _Problem(xs, ya, floor, test, lo, hi)
    found = _search(problem, cands, rtol_accept, atol_accept)
    if found is None:
        raise FitError(
            f"{what}: no candidate up to degrees {max_degree}/{max_den_degree} fits the {len(ya)} samples "
            f"({problem.n_all()} distinct) without a pole in the extrapolation range"
        )
    cand, (alpha, beta), val = found
    train = ErrorSummary.of(_rel_err(_predict(xs, cand.num, cand.den, alpha, beta), ya, floor))
    return RationalFit(
        names=names_t,
        scales=tuple(float(s) for s in scales),
        num_exponents=cand.num,
        num_coefs=tuple(float(a) for a in alpha),
        den_exponents=cand.den,
        den_coefs=tuple(float(b) for b in beta),
        validation_error=val,
        train_error=train,
        data_vars=tuple(names_t[i] for i in data_idx),
        n_samples=int(ya.size),
    )


# -- per-configuration fits ----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TableFit:
    """One rational function of the data variables per configuration index ``cfg``.

    ``num_coefs`` / ``den_coefs`` are (n_cfg, n_monomials) arrays over the shared monomial lists
    (zeros where a configuration's own fit does not use a monomial; nan rows for configurations
    without a fit), in the scaled variables.
    """

    names: tuple[str, ...]
    scales: tuple[float, ...]
    num_exponents: Exps
    den_exponents: Exps
    num_coefs: np.ndarray
    den_coefs: np.ndarray
    config_errors: tuple[ErrorSummary | None, ...]
    validation_error: ErrorSummary
    train_error: ErrorSummary
    n_samples: int

    @property
    def n_cfg(self) -> int:
        return int(self.num_coefs.shape[0])

    @property
    def fitted(self) -> np.ndarray:
        """Mask of the configurations that have a fit."""
        return np.isfinite(self.num_coefs).all(axis=1) & np.isfinite(self.den_coefs).all(axis=1)

    def __call__(self, X_data: Any, cfg: Any) -> np.ndarray:
        """Evaluate at data values (as for `RationalFit`) and configuration indices (broadcast)."""
        xa, xshape = _eval_inputs(X_data, self.names)
        k = len(self.names)
        c = np.asarray(cfg, dtype=np.float64)
        shape = np.broadcast_shapes(xshape, c.shape)
        xa = np.broadcast_to(xa.reshape(*xshape, k), (*shape, k)).reshape(-1, k)
        c = np.broadcast_to(c, shape).ravel()
        ok = (c >= 0) & (c < self.n_cfg) & (np.floor(c) == c)
        idx = np.where(ok, c, 0).astype(np.intp)
        xs = xa / np.array(self.scales)
        with np.errstate(all="ignore"):
            p = np.sum(_monomials(xs, self.num_exponents) * self.num_coefs[idx], axis=1)
            q = np.sum(_monomials(xs, self.den_exponents) * self.den_coefs[idx], axis=1)
            out = np.where(ok, p / q, np.nan)
        return out.reshape(shape)

    def to_program(self, name: str) -> Program:
        """A program over ``names + ('cfg',)`` using ``table(cfg, ...)`` for the coefficients, so
        every configuration evaluates in one vectorised pass."""
        cfg = var("cfg")

        def poly(exps: Exps, coefs: np.ndarray) -> Expr:
            folded = coefs / np.array(
                [math.prod(s**a for s, a in zip(self.scales, e)) for e in exps]
            )
            used = [j for j in range(len(exps)) if np.any(folded[:, j] != 0)]
            if not used:
                return const(0.0)
            return _poly_expr(
                [exps[j] for j in used], [table(cfg, folded[:, j]) for j in used], self.names
            )

        assignments = [
            ("num", poly(self.num_exponents, self.num_coefs)),
            ("den", poly(self.den_exponents, self.den_coefs)),
            ("value", var("num") / var("den")),
        ]
        return Program(name, [*self.names, "cfg"], assignments, ["value"])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe representation (nan coefficients as null); `TableFit.from_dict` inverts it."""

        def mat(a: np.ndarray) -> list[list[float | None]]:
            return [[float(v) if math.isfinite(v) else None for v in row] for row in a]

        return {
            "kind": "table",
            "names": list(self.names),
            "scales": list(self.scales),
            "num_exponents": [list(e) for e in self.num_exponents],
            "den_exponents": [list(e) for e in self.den_exponents],
            "num_coefs": mat(self.num_coefs),
            "den_coefs": mat(self.den_coefs),
            "config_errors": [None if e is None else e.to_dict() for e in self.config_errors],
            "validation_error": self.validation_error.to_dict(),
            "train_error": self.train_error.to_dict(),
            "n_samples": self.n_samples,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> TableFit:
        def mat(rows: Iterable[Iterable[float | None]], width: int) -> np.ndarray:
            a = np.array(
                [[math.nan if v is None else float(v) for v in row] for row in rows],
                dtype=np.float64,
            )
            return a.reshape(-1, width)

        try:
            if d.get("kind") != "table":
                raise FitError(f"not a serialised TableFit (kind {d.get('kind')!r})")
            num_e = tuple(tuple(int(a) for a in e) for e in d["num_exponents"])
            den_e = tuple(tuple(int(a) for a in e) for e in d["den_exponents"])
            return TableFit(
                names=tuple(d["names"]),
                scales=tuple(float(s) for s in d["scales"]),
                num_exponents=num_e,
                den_exponents=den_e,
                num_coefs=mat(d["num_coefs"], len(num_e)),
                den_coefs=mat(d["den_coefs"], len(den_e)),
                config_errors=tuple(
                    None if e is None else ErrorSummary.from_dict(e) for e in d["config_errors"]
                ),
                validation_error=ErrorSummary.from_dict(d["validation_error"]),
                train_error=ErrorSummary.from_dict(d["train_error"]),
                n_samples=int(d["n_samples"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FitError(f"malformed serialised TableFit: {exc!r}") from None

    def __repr__(self) -> str:
        v = self.validation_error
        return (
            f"TableFit(f({', '.join(self.names)}; cfg), {int(self.fitted.sum())}/{self.n_cfg} configurations, "
            f"{len(self.num_exponents)}+{len(self.den_exponents)} monomials; held-out max rel. error "
            f"{v.max:.3g}, median {v.median:.3g} on {v.n})"
        )


def fit_rational_table(
    X_data: Any,
    y: Any,
    cfg_index: Any,
    n_cfg: int,
    *,
    names: Sequence[str] | None = None,
    max_degree: int | Sequence[int] = 2,
    max_den_degree: int | Sequence[int] = 1,
    max_total_degree: int | None = None,
    holdout: str = "largest",
    holdout_fraction: float = 0.25,
    outlier_filter: bool = True,
    rtol_accept: float = 0.1,
    atol_accept: float = 1e-6,
    pole_factor: float = 16.0,
) -> TableFit:
    """Fit one rational function of the data variables per configuration (``cfg_index`` in
    ``[0, n_cfg)``), sharing the degree choice; see the module docstring."""
    what = "fit_rational_table"
    xa, ya, names_t = _as_samples(X_data, y, names, what)
    _check_holdout(holdout, holdout_fraction, what)
    if "cfg" in names_t:
        raise FitError(f"{what}: 'cfg' is reserved for the configuration index")
    if isinstance(n_cfg, bool) or not isinstance(n_cfg, int | np.integer) or n_cfg < 1:
        raise FitError(f"{what}: n_cfg must be a positive integer, got {n_cfg!r}")
    try:
        cfg = np.asarray(cfg_index, dtype=np.float64).ravel()
    except (TypeError, ValueError) as exc:
        raise FitError(f"{what}: cfg_index is not numeric: {exc}") from None
    if cfg.size != ya.size:
        raise FitError(f"{what}: cfg_index has {cfg.size} values for {ya.size} samples")
    if np.any((cfg < 0) | (cfg >= n_cfg) | (cfg != np.floor(cfg))):
        raise FitError(f"{what}: cfg_index must be integers in [0, {n_cfg})")
    cfg_i = cfg.astype(np.intp)
    k = len(names_t)
    cands = _candidates(
        _bounds(max_degree, k, "max_degree"),
        _bounds(max_den_degree, k, "max_den_degree"),
        max_total_degree,
    )
    if outlier_filter:
        keep = _filter_outliers(np.column_stack([cfg, xa]), ya)
        xa, ya, cfg_i = xa[keep], ya[keep], cfg_i[keep]
    scales, data_idx, _ = _setup(xa, ya, names_t, None, pole_factor, what)
    xs = xa / scales
    problems: dict[int, _Problem] = {}
    for c in np.unique(cfg_i):
        rows = cfg_i == c
        yc = ya[rows]
        ymax = float(np.max(np.abs(yc)))
        xc = xs[rows]
        test = _holdout(xc, data_idx, holdout_fraction) if holdout == "largest" else None
        lo, hi = _box(xc, data_idx, pole_factor)
        # A configuration whose samples are all zero is fitted with a unit floor (it is exactly 0).
        problems[int(c)] = _Problem(xc, yc, _ZERO_FLOOR * ymax if ymax > 0 else 1.0, test, lo, hi)

    # Validation errors of every candidate on every configuration it can be fitted to without a
    # pole; a candidate competes if it fits at least half of the configurations.
    val: dict[int, dict[int, np.ndarray]] = {}
    for i, cand in enumerate(cands):
        per: dict[int, np.ndarray] = {}
        for c, p in problems.items():
            res = p.validate(cand)
            if res is not None and not p.pole(cand, res[1][1]):
                per[c] = res[0]
        if 2 * len(per) >= len(problems):
            val[i] = per
    shared = _accepted(
        {i: float(np.mean([np.max(r) for r in per.values()])) for i, per in val.items()},
        rtol_accept,
        atol_accept,
    )

    chosen: dict[int, tuple[_Candidate, tuple[np.ndarray, np.ndarray], ErrorSummary]] = {}
    for c, p in problems.items():
        for i in (i for i in shared if c in val[i]):
            sol = p.refit(cands[i])
            if sol is not None:
                chosen[c] = (cands[i], sol, ErrorSummary.of(val[i][c]))
                break
        else:
            own = _search(p, cands, rtol_accept, atol_accept)
            if own is not None:
                chosen[c] = own
    if not chosen:
        raise FitError(
            f"{what}: no configuration could be fitted (too few samples per configuration, or poles)"
        )

    num_e = tuple(
        sorted({e for cand, _, _ in chosen.values() for e in cand.num}, key=lambda a: (sum(a), a))
    )
    den_e = tuple(
        sorted({e for cand, _, _ in chosen.values() for e in cand.den}, key=lambda a: (sum(a), a))
    )
    num_c = np.full((n_cfg, len(num_e)), np.nan)
    den_c = np.full((n_cfg, len(den_e)), np.nan)
    errs: list[ErrorSummary | None] = [None] * n_cfg
    held: list[np.ndarray] = []
    fit_err: list[np.ndarray] = []
    for c, (cand, (alpha, beta), summary) in chosen.items():
        num_c[c] = 0.0
        den_c[c] = 0.0
        num_c[c, [num_e.index(e) for e in cand.num]] = alpha
        den_c[c, [den_e.index(e) for e in cand.den]] = beta
        errs[c] = summary
        p = problems[c]
        fit_err.append(_rel_err(_predict(p.xs, cand.num, cand.den, alpha, beta), p.y, p.floor))
        validated = p.validate(cand)
        if validated is not None:
            held.append(validated[0])
    return TableFit(
        names=names_t,
        scales=tuple(float(s) for s in scales),
        num_exponents=num_e,
        den_exponents=den_e,
        num_coefs=num_c,
        den_coefs=den_c,
        config_errors=tuple(errs),
        validation_error=ErrorSummary.of(np.concatenate(held) if held else np.zeros(0)),
        train_error=ErrorSummary.of(np.concatenate(fit_err)),
        n_samples=int(ya.size),
    )
