"""Shared pieces of the fits: error summaries, the IQR fence, monomials and the SVD solve,
sample checks, and fitted polynomials as program expressions."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.program import Expr, const, var

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ZERO_FLOOR = 1e-6  # relative to max|y|: weight floor for (near-)zero samples
_RANK_RTOL = 1e-12  # relative singular-value cut for column spaces
_NULL_RTOL = 1e-10  # singular values this small (relatively) count as exact fits

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


def monomials(xs: np.ndarray, exps: Exps) -> np.ndarray:
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


def solve(
    mn: np.ndarray, md: np.ndarray, y: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Coefficients (alpha, beta) minimising ||W (Mn alpha - y Md beta)|| with ||Md beta|| = 1,
    normalised as described in the `klaraptor.fit` docstring; None if no non-degenerate q
    exists."""
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


def predict(
    xs: np.ndarray, num: Exps, den: Exps, alpha: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (monomials(xs, num) @ alpha) / (monomials(xs, den) @ beta)


def rel_err(pred: np.ndarray, y: np.ndarray, floor: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        err = np.abs(pred - y) / np.maximum(np.abs(y), floor)
    return np.where(np.isfinite(err), err, np.inf)


def as_samples(
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


def filter_outliers(keys: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of samples kept by the IQR upper fence within each group of identical ``keys`` rows."""
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    keep = np.ones(y.size, dtype=bool)
    for g in np.unique(inverse):
        idx = np.flatnonzero(inverse == g)
        if idx.size > 2:
            keep[idx] = iqr_upper_fence(y[idx])
    return keep


def poly_expr(
    exps: Sequence[tuple[int, ...]], coefs: Sequence[Expr | float], names: Sequence[str]
) -> Expr:
    out: Expr | None = None
    for e, c in zip(exps, coefs):
        term: Expr = c if isinstance(c, Expr) else const(c)
        for n, a in zip(names, e):
            if a:
                term = term * var(n) ** a
        out = term if out is None else out + term
    return out if out is not None else const(0.0)


def eval_inputs(X: Any, names: tuple[str, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
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
