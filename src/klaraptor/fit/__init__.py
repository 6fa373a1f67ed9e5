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

Options and modules
-------------------
The degree bounds, hold-out, outlier filter, acceptance tolerances and pole factor are the fields
of `FitSettings`. Both fits take them as keywords, or as ``settings=`` (keywords then override its
fields). Modules: `common` (error summaries, monomials, the SVD solve), `search` (`FitSettings`
and the degree search), `rational` and `table` (the two fits and their results).
"""

from klaraptor.fit.common import ErrorSummary, iqr_upper_fence
from klaraptor.fit.rational import RationalFit, fit_rational
from klaraptor.fit.search import FitSettings
from klaraptor.fit.table import TableFit, fit_rational_table

__all__ = [
    "ErrorSummary",
    "FitSettings",
    "RationalFit",
    "TableFit",
    "fit_rational",
    "fit_rational_table",
    "iqr_upper_fence",
]
