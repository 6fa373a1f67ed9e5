"""`fit_rational_table`: one rational function of the data variables per configuration, with a
shared degree choice, and its result `TableFit`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.fit.common import (
    ZERO_FLOOR,
    ErrorSummary,
    Exps,
    eval_inputs,
    filter_outliers,
    monomials,
    poly_expr,
    predict,
    rel_err,
)
from klaraptor.fit.search import (
    Candidate,
    FitSettings,
    FitSettingsKeywords,
    Problem,
    accepted,
    degree_candidates,
    make_problem,
    prepare,
    search,
    setup,
)
from klaraptor.program import Expr, Program, const, table, var

if TYPE_CHECKING:
    from typing_extensions import Unpack


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
        xa, xshape = eval_inputs(X_data, self.names)
        k = len(self.names)
        c = np.asarray(cfg, dtype=np.float64)
        shape = np.broadcast_shapes(xshape, c.shape)
        xa = np.broadcast_to(xa.reshape(*xshape, k), (*shape, k)).reshape(-1, k)
        c = np.broadcast_to(c, shape).ravel()
        ok = (c >= 0) & (c < self.n_cfg) & (np.floor(c) == c)
        idx = np.where(ok, c, 0).astype(np.intp)
        xs = xa / np.array(self.scales)
        with np.errstate(all="ignore"):
            p = np.sum(monomials(xs, self.num_exponents) * self.num_coefs[idx], axis=1)
            q = np.sum(monomials(xs, self.den_exponents) * self.den_coefs[idx], axis=1)
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
            return poly_expr(
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
    settings: FitSettings | None = None,
    **options: Unpack[FitSettingsKeywords],
) -> TableFit:
    """Fit one rational function of the data variables per configuration (``cfg_index`` in
    ``[0, n_cfg)``), sharing the degree choice; see the `klaraptor.fit` docstring. Options
    as for `fit_rational`: `FitSettings` fields as keywords, or ``settings``."""
    what = "fit_rational_table"
    settings, xa, ya, names_t = prepare(settings, options, X_data, y, names, what)
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
    cands = degree_candidates(settings, k)
    if settings.outlier_filter:
        keep = filter_outliers(np.column_stack([cfg, xa]), ya)
        xa, ya, cfg_i = xa[keep], ya[keep], cfg_i[keep]
    scales, data_idx, _ = setup(xa, ya, names_t, None, settings.pole_factor, what)
    xs = xa / scales
    problems: dict[int, Problem] = {}
    for c in np.unique(cfg_i):
        rows = cfg_i == c
        yc = ya[rows]
        ymax = float(np.max(np.abs(yc)))
        # A configuration whose samples are all zero is fitted with a unit floor (it is exactly 0).
        floor = ZERO_FLOOR * ymax if ymax > 0 else 1.0
        problems[int(c)] = make_problem(xs[rows], yc, floor, data_idx, settings)

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
    shared = accepted(
        {i: float(np.mean([np.max(r) for r in per.values()])) for i, per in val.items()},
        settings.rtol_accept,
        settings.atol_accept,
    )

    chosen: dict[int, tuple[Candidate, tuple[np.ndarray, np.ndarray], ErrorSummary]] = {}
    for c, p in problems.items():
        for i in (i for i in shared if c in val[i]):
            sol = p.refit(cands[i])
            if sol is not None:
                chosen[c] = (cands[i], sol, ErrorSummary.of(val[i][c]))
                break
        else:
            own = search(p, cands, settings.rtol_accept, settings.atol_accept)
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
        fit_err.append(rel_err(predict(p.xs, cand.num, cand.den, alpha, beta), p.y, p.floor))
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
