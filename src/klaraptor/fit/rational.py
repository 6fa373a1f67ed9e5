"""`fit_rational`: one rational function of all variables, and its result `RationalFit`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.fit.common import (
    ErrorSummary,
    Exps,
    eval_inputs,
    filter_outliers,
    poly_expr,
    predict,
    rel_err,
)
from klaraptor.fit.search import (
    FitSettings,
    FitSettingsKeywords,
    degree_candidates,
    make_problem,
    prepare,
    search,
    setup,
)
from klaraptor.program import Program, var

if TYPE_CHECKING:
    from typing_extensions import Unpack


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
        xa, shape = eval_inputs(X, self.names)
        xs = xa / np.array(self.scales)
        pred = predict(
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
        num = poly_expr(self.num_exponents, self.num_coefficients, self.names)
        den_coefs = self.den_coefficients
        assignments = [("num", num)]
        if len(den_coefs) == 1 and den_coefs[0] == 1.0 and not any(self.den_exponents[0]):
            assignments.append(("value", var("num")))
        else:
            assignments += [
                ("den", poly_expr(self.den_exponents, den_coefs, self.names)),
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
    settings: FitSettings | None = None,
    **options: Unpack[FitSettingsKeywords],
) -> RationalFit:
    """Fit y ~ p(X) / q(X) with a degree search validated on the largest data values.

    ``X`` is (n, k) (with ``names``) or a dict of columns; ``data_vars`` (default: all) are the
    variables we extrapolate in. The degree bounds and validation options are the fields of
    `FitSettings`, passed as keywords (e.g. ``max_degree=3``) or as ``settings`` (keywords
    override its fields); an unknown keyword raises TypeError. See the `klaraptor.fit`
    docstring for the method and the selection rule.
    """
    what = "fit_rational"
    settings, xa, ya, names_t = prepare(settings, options, X, y, names, what)
    k = len(names_t)
    cands = degree_candidates(settings, k)
    if settings.outlier_filter:
        keep = filter_outliers(xa, ya)
        xa, ya = xa[keep], ya[keep]
    scales, data_idx, floor = setup(xa, ya, names_t, data_vars, settings.pole_factor, what)
    xs = xa / scales
    problem = make_problem(xs, ya, floor, data_idx, settings)
    found = search(problem, cands, settings.rtol_accept, settings.atol_accept)
    if found is None:
        raise FitError(
            f"{what}: no candidate up to degrees {settings.max_degree}/{settings.max_den_degree} "
            f"fits the {len(ya)} samples ({problem.n_all()} distinct) without a pole in the "
            "extrapolation range"
        )
    cand, (alpha, beta), val = found
    train = ErrorSummary.of(rel_err(predict(xs, cand.num, cand.den, alpha, beta), ya, floor))
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
