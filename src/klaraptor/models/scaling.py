"""Anchored, cache-regime-aware scaling of t(config, D): the "scaling" model.

Why this form (docs/extrapolation.md and benchmarks/results/h200/ANALYSIS.md have the evidence):
- The best evidence about a configuration is its time at the largest training size L, where every
  candidate is timed. Per-configuration growth laws fitted from 3-5 small sizes reorder
  near-ties by noise, and on the recorded H200 suite a ×2 fold inside the training data shows
  that per-configuration growth measured below L does not carry over to L.
- What does change the ranking beyond L is the memory regime. Timing repeats the launch on the
  same arguments, so while the kernel's footprint F(D) fits in the L2 the inputs stay resident
  ("hot"); once F(D) exceeds the L2 every launch streams from DRAM ("cold"). Timing with the
  L2 flushed before each launch measures the cold regime at L. F(D) is known exactly (argument
  bytes, a polynomial in D) or from DRAM counters.

The model, for candidate c and data D with scalar size s = s(D) (the product of the data
parameters), x = s / s(L):

    t(c, D) = A_r(D)[c] · G(s) / G(s_L) · P(x; d_c)
    r(D)    = cold if F(D) > L2 bytes else hot
    P(x; d) = ((1 + d) x + (1 - d)) / ((1 - d) x + (1 + d))     (Padé (1,1) of x^d)

- A_hot[c], A_cold[c]: times at L (an unmeasured cold one is max(1, median cold/hot) · A_hot[c]:
  the plan skips only candidates whose hot time exceeds the best cold time, which cannot win);
- G: one growth law per kernel, a polynomial in s with non-negative coefficients, its degree
  chosen by a fold holding out the largest size (it scales times, not the ranking);
- d_c = λ·δ_c: per-configuration growth deviation, the regression of log t(c, n) / A_hot[c] (less
  the shared size effect) on 2 (x - 1) / (x + 1) over the smaller sizes in the same launch regime
  (a partial wave or at least one full wave, as at L), empirical-Bayes shrunk towards 0; λ is 1
  only when the ×2 fold (anchor at the largest smaller size M, deviations from sizes ≤ M/2,
  predict L, over the candidates padded at neither size) predicts the relative times at L better
  with the deviations than without by more than the timing noise band, else 0. Deviations are
  hot-timing evidence (the cold regime does not use them). Without such evidence the ranking
  at any D in one regime is the ranking at L.

For a kernel with program parameters, t(c, D) is also multiplied by q_c(D) / q_c(L), an exact
launch quantity (`klaraptor.models.launch_quantity`): the busiest SM's blocks ceil(blocks / SMs)
for an SM-bound kernel (fastest time at L ≥ `COMPUTE_BOUND` × its argument footprint's time at
DRAM bandwidth), else the fill of a partial first wave, 1 / min(waves, 1). The training times
are divided by q_c(n) / q_c(L) before the fit; the ×2 fold vetoes q when its choice at L is
slower than without q by more than twice the noise band. Kernels without parameters never use q.

Everything is rational in D (`ScalingFit.to_program`): tables per configuration, a polynomial
footprint against the L2 size, a polynomial growth law and the Padé factor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.models.launch_quantity import LaunchForm, LaunchQuantity
from klaraptor.program import Expr, Program, const, table, var, where

# The drift where no fold measures it: at ×2 beyond L, online top-k then tries its largest k.
UNKNOWN_DRIFT = 1.0

__all__ = [
    "COMPUTE_BOUND",
    "DELTA_LIMIT",
    "LaunchForm",
    "LaunchQuantity",
    "Footprint",
    "GrowthLaw",
    "ScalingFit",
    "ScalingTable",
    "exact_quantities",
    "fit_scaling",
    "pade_factor",
    "size_of",
]

DELTA_LIMIT = 0.9  # |d| < 1 keeps the Padé factor positive for every x > 0
# A kernel is SM-bound when its fastest time at L is at least this multiple of its argument
# footprint's time at DRAM bandwidth. Measured on the H200 tunables suite (bench_tunables at
# 1954ee6 and 13ffd70): the memory-bound kernels sit at 1.0-2.0, sgemm at 59 and n-body near
# 2700, so any threshold from about 3 to 50 classifies them alike.
COMPUTE_BOUND = 10.0
MAX_GROWTH_DEGREE = 3
_EXACT_RTOL = 1e-9


def size_of(D: Any) -> np.ndarray:
    """The scalar size s(D) of each row of D (n, d): the product of the data parameters."""
    return np.prod(np.atleast_2d(np.asarray(D, dtype=np.float64)), axis=-1)


def pade_factor(x: Any, d: Any) -> np.ndarray:
    """((1 + d) x + (1 - d)) / ((1 - d) x + (1 + d)): x^d near x = 1, bounded for x → ∞."""
    x = np.asarray(x, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    return ((1.0 + d) * x + (1.0 - d)) / ((1.0 - d) * x + (1.0 + d))


# ---------------------------------------------------------------------------------------------
# Exact quantities


@dataclass(frozen=True)
class ExactQuantities:
    """Per candidate at one D, from the spec's grid formula and the occupancy calculator."""

    blocks: np.ndarray  # launched blocks
    threads: np.ndarray  # threads per block
    active_blocks: np.ndarray  # active blocks per SM (0: cannot launch)
    waves: np.ndarray  # blocks / (active blocks per SM · SMs), fractional
    full_waves: np.ndarray  # ceil(waves): the last one partial

    @property
    def launched_threads(self) -> np.ndarray:
        return self.blocks * self.threads


def exact_quantities(
    spec: Any,
    candidates: Sequence[Sequence[int]],
    D: Mapping[str, int],
    attrs: Mapping[str, Any],
    *,
    cc: tuple[int, int],
    sm_count: int,
    params: Mapping[str, np.ndarray] | None = None,
) -> ExactQuantities:
    """Blocks, threads, occupancy and waves of every candidate at D (never fitted).

    `spec` is a KernelSpec (its grid and dynamic shared-memory formulas), `candidates` the
    candidates' blocks, `attrs` the kernel's attributes (``num_regs``, ``static_smem``: numbers,
    or arrays per candidate for the compiled variants of a kernel with program parameters,
    whose values per candidate `params` gives by name)."""
    from klaraptor.device.occupancy import active_blocks_per_sm

    cand = np.asarray(candidates, dtype=np.float64).reshape(-1, 3)
    bx, by, bz = cand[:, 0], cand[:, 1], cand[:, 2]
    gx, gy, gz = spec.grid_arrays(dict(D), bx, by, bz, params)
    blocks = gx * gy * gz
    threads = bx * by * bz
    static = np.asarray(attrs["static_smem"], dtype=np.float64)
    smem = static + spec.dynamic_smem_arrays(dict(D), bx, by, bz, params)
    regs = np.asarray(attrs["num_regs"])
    active = active_blocks_per_sm(
        threads.astype(np.int64),
        regs.astype(np.int64) if regs.ndim else int(regs),
        smem.astype(np.int64),
        cc,
    ).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        waves = np.where(active > 0, blocks / (active * sm_count), np.inf)
    return ExactQuantities(blocks, threads, active, waves, np.ceil(waves))


# ---------------------------------------------------------------------------------------------
# Footprint: a polynomial in the data parameters


def _monomials(d: int, max_total: int) -> list[tuple[int, ...]]:
    import itertools

    out = [e for e in itertools.product(range(max_total + 1), repeat=d) if sum(e) <= max_total]
    return sorted(out, key=lambda e: (sum(e), e))


@dataclass(frozen=True)
class Footprint:
    """Bytes a kernel touches, F(D) = Σ coef · Π D_i^e (data parameters `names`)."""

    names: tuple[str, ...]
    exps: tuple[tuple[int, ...], ...]
    coef: tuple[float, ...]
    source: str = "arguments"

    def bytes(self, D: Any) -> np.ndarray:
        a = np.atleast_2d(np.asarray(D, dtype=np.float64))
        out = np.zeros(a.shape[0])
        for e, c in zip(self.exps, self.coef):
            term = np.full(a.shape[0], c)
            for i, k in enumerate(e):
                for _ in range(k):
                    term = term * a[:, i]
            out = out + term
        return out

    def expr(self) -> Expr:
        out: Expr = const(0.0)
        for e, c in zip(self.exps, self.coef):
            term: Expr = const(c)
            for i, k in enumerate(e):
                for _ in range(k):
                    term = term * var(self.names[i])
            out = out + term
        return out

    @staticmethod
    def fit_exact(
        names: Sequence[str], D: Any, nbytes: Any, source: str = "arguments"
    ) -> Footprint:
        """The lowest-degree polynomial (total degree ≤ 3) through byte counts measured at several
        D (argument sizes are polynomials in D, so this is exact when enough sizes are given)."""
        a = np.atleast_2d(np.asarray(D, dtype=np.float64))
        y = np.asarray(nbytes, dtype=np.float64)
        if a.shape[0] != y.size or y.size == 0:
            raise FitError(f"footprint: {a.shape[0]} sizes but {y.size} byte counts")
        scale = np.maximum(np.abs(a).max(axis=0), 1.0)
        best = None
        for deg in range(4):
            exps = _monomials(a.shape[1], deg)
            if len(exps) > y.size:
                break
            X = np.column_stack([np.prod((a / scale) ** np.array(e), axis=1) for e in exps])
            c, *_ = np.linalg.lstsq(X, y, rcond=None)
            err = np.max(np.abs(X @ c - y) / np.maximum(np.abs(y), 1.0))
            best = (exps, c / np.prod(scale ** np.array(exps), axis=1), err)
            if err <= _EXACT_RTOL * 10:
                break
        assert best is not None
        exps, c, _ = best
        return Footprint(tuple(names), tuple(exps), tuple(float(v) for v in c), source)

    @staticmethod
    def fit_power(names: Sequence[str], D: Any, nbytes: Any, source: str = "counters") -> Footprint:
        """c · s^p with integer p (rounded log-log slope over the sizes, 0..3): for noisy measured
        bytes (DRAM counters) at sizes D."""
        s = size_of(np.atleast_2d(np.asarray(D, dtype=np.float64)))
        y = np.asarray(nbytes, dtype=np.float64)
        ok = (s > 0) & (y > 0)
        if ok.sum() == 0:
            raise FitError("footprint: no positive byte count")
        if np.unique(s[ok]).size < 2:
            raise FitError("footprint: measured bytes at two sizes at least are needed")
        p = int(np.clip(np.round(np.polyfit(np.log(s[ok]), np.log(y[ok]), 1)[0]), 0, 3))
        c = float(np.median(y[ok] / s[ok] ** p))
        d = len(names)
        return Footprint(tuple(names), ((p,) * d,), (c,), source)


# ---------------------------------------------------------------------------------------------
# The shared growth law


@dataclass(frozen=True)
class GrowthLaw:
    """G(s) / G(s_ref) with G(u) = Σ g_k u^k (u = s / s_ref, g_k ≥ 0), normalised so G(1) = 1."""

    coef: tuple[float, ...]
    s_ref: float
    chosen_by: str = ""

    def ratio(self, s: Any) -> np.ndarray:
        u = np.asarray(s, dtype=np.float64) / self.s_ref
        acc = np.full(u.shape, self.coef[-1])
        for c in self.coef[-2::-1]:
            acc = acc * u + c
        return acc

    def expr(self, s: Expr) -> Expr:
        u = s / const(self.s_ref)
        acc: Expr = const(self.coef[-1])
        for c in self.coef[-2::-1]:
            acc = acc * u + const(c)
        return acc

    @staticmethod
    def _nnls(u: np.ndarray, R: np.ndarray, deg: int) -> np.ndarray:
        from scipy.optimize import nnls  # here: 0.3-0.8 s to import, off the plan's path

        X = np.column_stack([u**k for k in range(deg + 1)]) / R[:, None]
        g, _ = nnls(X, np.ones_like(R))
        return g

    @staticmethod
    def fit(s: Sequence[float], R: Sequence[float], s_ref: float) -> GrowthLaw:
        """From shared ratios R(s) = t(s) / t(s_ref) at sizes s (s_ref itself included or not).

        Degree 0..3 chosen by a fold: fit on the sizes below the largest, predict the ratio
        between it and the next largest; ties within 1 % go to the lower degree. With only one
        other size, a single monomial u^p with p the rounded log-log slope."""
        s_arr = np.asarray(s, dtype=np.float64)
        R_arr = np.asarray(R, dtype=np.float64)
        keep = (s_arr != s_ref) & np.isfinite(R_arr) & (R_arr > 0)
        s_arr, R_arr = s_arr[keep], R_arr[keep]
        if s_arr.size == 0:
            raise FitError("growth law: no size other than the reference")
        u = np.append(s_arr / s_ref, 1.0)
        Rr = np.append(R_arr, 1.0)
        if s_arr.size == 1:
            p = int(np.clip(np.round(np.log(R_arr[0]) / np.log(u[0])), 0, MAX_GROWTH_DEGREE))
            return GrowthLaw(tuple([0.0] * p + [1.0]), float(s_ref), f"two sizes: u^{p}")
        order = np.argsort(u)
        u, Rr = u[order], Rr[order]
        errs = []
        for deg in range(MAX_GROWTH_DEGREE + 1):
            g = GrowthLaw._nnls(u[:-1], Rr[:-1], deg)
            pred = np.polyval(g[::-1], u[-1]) / max(np.polyval(g[::-1], u[-2]), 1e-300)
            errs.append(abs(math.log(max(pred, 1e-300) / (Rr[-1] / Rr[-2]))))
        e_min = min(errs)
        deg = next(k for k, e in enumerate(errs) if e <= e_min + 0.01)
        g = GrowthLaw._nnls(u, Rr, deg)
        g1 = float(np.sum(g))
        if not g1 > 0:
            g, g1 = np.array([1.0]), 1.0
        return GrowthLaw(
            tuple(float(v) / g1 for v in g), float(s_ref), f"fold: degree {deg}, errors {errs}"
        )


# ---------------------------------------------------------------------------------------------
# Training table and fit


@dataclass
class ScalingTable:
    """Measured points of one kernel: data sizes, candidate index, time, regime, noise.

    `cold` marks timings taken with the L2 flushed before each launch; `waves` (optional) is the
    exact fractional wave count of the point's configuration at its D."""

    D: np.ndarray  # (n, d)
    cfg: np.ndarray  # (n,) int
    time_ms: np.ndarray
    cold: np.ndarray  # (n,) bool
    spread: np.ndarray  # relative IQR of the timing samples (nan when unknown)
    waves: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.D = np.atleast_2d(np.asarray(self.D, dtype=np.float64))
        if self.D.shape[0] != np.asarray(self.cfg).size:
            self.D = self.D.reshape(-1, 1)
        self.cfg = np.asarray(self.cfg, dtype=np.int64)
        self.time_ms = np.asarray(self.time_ms, dtype=np.float64)
        self.cold = np.asarray(self.cold, dtype=bool)
        self.spread = np.asarray(self.spread, dtype=np.float64)
        n = self.cfg.size
        for name in ("time_ms", "cold", "spread"):
            if getattr(self, name).size != n:
                raise FitError(
                    f"ScalingTable: {name} has {getattr(self, name).size} values, cfg {n}"
                )
        if self.waves is not None:
            self.waves = np.asarray(self.waves, dtype=np.float64)

    @property
    def size(self) -> np.ndarray:
        return size_of(self.D)


@dataclass
class ScalingFit:
    """A fitted scaling model: predictions for every candidate at any D, and its program."""

    data_names: tuple[str, ...]
    D_ref: tuple[float, ...]
    s_ref: float
    a_hot: np.ndarray
    a_cold: np.ndarray
    cold_measured: np.ndarray  # bool
    delta: np.ndarray  # effective d_c = λ · δ_c
    growth: GrowthLaw | None
    footprint: Footprint | None
    l2_bytes: float
    band: float  # timing noise band (median relative IQR at L)
    drift: float  # relative-time drift per unit of 2(x-1)/(x+1), from the fold
    report: dict[str, Any] = field(default_factory=dict)
    launch: LaunchQuantity | None = None  # the exact launch quantity (parameters only)
    q_ref: np.ndarray | None = None  # its q_c at L

    @property
    def n_cfg(self) -> int:
        return int(self.a_hot.size)

    @property
    def tune_once(self) -> int:
        """The candidate measured fastest at L (hot): what a user who tunes once would pick."""
        return int(np.nanargmin(np.where(np.isfinite(self.a_hot), self.a_hot, np.inf)))

    def _fp_ref(self) -> float:
        assert self.footprint is not None
        return float(self.footprint.bytes(np.array([self.D_ref]))[0])

    def _scalars(self, D: Sequence[float]) -> tuple[float, float, bool]:
        """x = s / s_ref, the growth ratio g and whether D is in the cold regime (the same
        operations as `to_program`)."""
        Dv = np.array([D], dtype=np.float64)
        s = size_of(Dv)[0]
        x = s / self.s_ref
        fp = self.footprint.bytes(Dv)[0] if self.footprint is not None else math.nan
        if self.growth is not None:
            g = float(self.growth.ratio(np.array(s)))
        elif self.footprint is not None:
            g = fp / self._fp_ref()
        else:
            g = x
        return x, g, bool(self.footprint is not None and fp > self.l2_bytes)

    def is_cold(self, D: Sequence[float]) -> bool:
        return self._scalars(D)[2]

    def predict(self, D: Sequence[float]) -> np.ndarray:
        """Predicted ms of every candidate at D (same operations as `to_program`)."""
        x, g, cold = self._scalars(D)
        a = np.where(cold, self.a_cold, self.a_hot)
        d = np.where(cold, 0.0, self.delta)
        p = ((1.0 + d) * x + (1.0 - d)) / ((1.0 - d) * x + (1.0 + d))
        if self.launch is None:
            return a * g * p
        assert self.q_ref is not None
        q = self.launch.count(dict(zip(self.data_names, D)))
        return a * g * p * q / self.q_ref  # the order of operations of `to_program`

    def choose(self, D: Sequence[float]) -> int:
        pred = self.predict(D)
        return int(np.argmin(np.where(np.isfinite(pred), pred, np.inf)))

    def band_at(self, D: Sequence[float]) -> float:
        """Relative uncertainty of the predicted gap between two candidates at D: the timing
        band at L plus the drift measured inside the training data, scaled to the extrapolation
        (and the band once more for a cold anchor, a second measurement)."""
        x, _, cold = self._scalars(D)
        z = 2.0 * (x - 1.0) / (x + 1.0)
        return self.band * (2.0 if cold else 1.0) + self.drift * (-z if z < 0.0 else z)

    # -- the rational program -------------------------------------------------------------------
    def to_program(self, name: str = "scaling", clock_mhz: float = 1000.0) -> Program:
        """Inputs: the data names and ``cfg``; outputs ``cycles`` (ms × clock), ``time_ms``,
        ``cold`` (1 when the footprint exceeds the L2) and ``band`` (`band_at`, which sizes the
        online top-k at run time)."""
        dn = self.data_names
        s: Expr = var(dn[0])
        for n in dn[1:]:
            s = s * var(n)
        asg: list[tuple[str, Expr]] = [("s", s), ("x", var("s") / const(self.s_ref))]
        if self.footprint is not None:
            asg.append(("footprint", self.footprint.expr()))
        if self.growth is not None:
            asg.append(("g", self.growth.expr(var("s"))))
        elif self.footprint is not None:
            asg.append(("g", var("footprint") / const(self._fp_ref())))
        else:
            asg.append(("g", var("x")))
        if self.footprint is None:
            asg.append(("cold", const(0.0)))
        else:
            asg.append(("cold", var("footprint") > self.l2_bytes))
        d = var("d")
        asg += [
            (
                "a",
                where(var("cold"), table(var("cfg"), self.a_cold), table(var("cfg"), self.a_hot)),
            ),
            ("d", where(var("cold"), 0.0, table(var("cfg"), self.delta))),
            (
                "p",
                ((const(1.0) + d) * var("x") + (const(1.0) - d))
                / ((const(1.0) - d) * var("x") + (const(1.0) + d)),
            ),
            *self._launch_assignments(),
            ("cycles", var("time_ms") * const(clock_mhz * 1e3)),
            ("z", const(2.0) * (var("x") - 1.0) / (var("x") + 1.0)),
            (
                "band",
                const(self.band) * where(var("cold"), 2.0, 1.0)
                + const(self.drift) * where(var("z") < 0.0, -var("z"), var("z")),
            ),
        ]
        per_candidate: tuple[str, ...] = ()
        if self.launch is not None:
            used = set(self.launch.expr().variables()) - set(dn) - {"cfg"}
            per_candidate = tuple(sorted(used))
        return Program(
            name, tuple(dn) + per_candidate + ("cfg",), asg, ["cycles", "time_ms", "cold", "band"]
        )

    def _launch_assignments(self) -> list[tuple[str, Expr]]:
        """time_ms, times q_c(D) / q_c(L) where the launch quantity is used."""
        t = var("a") * var("g") * var("p")
        if self.launch is None:
            return [("time_ms", t)]
        assert self.q_ref is not None
        return [
            ("q", self.launch.expr()),
            ("time_ms", t * var("q") / table(var("cfg"), self.q_ref)),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "data_names": list(self.data_names),
            "D_ref": list(self.D_ref),
            "s_ref": self.s_ref,
            "a_hot": self.a_hot.tolist(),
            "a_cold": self.a_cold.tolist(),
            "cold_measured": self.cold_measured.tolist(),
            "delta": self.delta.tolist(),
            "growth": None
            if self.growth is None
            else {"coef": list(self.growth.coef), "s_ref": self.growth.s_ref},
            "footprint": None
            if self.footprint is None
            else {
                "names": list(self.footprint.names),
                "exps": [list(e) for e in self.footprint.exps],
                "coef": list(self.footprint.coef),
                "source": self.footprint.source,
            },
            "l2_bytes": self.l2_bytes,
            "band": self.band,
            "drift": self.drift,
            "report": self.report,
            **(
                {}
                if self.launch is None or self.q_ref is None
                else {
                    "launch_quantity": {
                        "form": self.launch.form.value,
                        "sm_count": self.launch.sm_count,
                        "q_ref": self.q_ref.tolist(),
                    }
                }
            ),
        }


def _deviations(
    logr: Mapping[int, list[tuple[float, float]]], floor_var: float
) -> tuple[dict[int, float], dict[str, float]]:
    """Empirical-Bayes shrunk slopes: logr[c] = [(z, residual), ...] per configuration."""
    raw: dict[int, float] = {}
    szz: dict[int, float] = {}
    resid: list[float] = []
    for c, pts in logr.items():
        z = np.array([p[0] for p in pts])
        e = np.array([p[1] for p in pts])
        if not (z @ z) > 0:
            continue
        raw[c] = float(z @ e / (z @ z))
        szz[c] = float(z @ z)
        if len(pts) >= 2:
            resid += list(e - raw[c] * z)
    if not raw:
        return {}, {"tau2": 0.0, "sigma2": math.nan}
    sigma2 = max(float(np.mean(np.square(resid))) if resid else 0.0, floor_var)
    var_c = {c: sigma2 / szz[c] for c in raw}
    tau2 = max(0.0, float(np.mean([raw[c] ** 2 for c in raw]) - np.mean(list(var_c.values()))))
    shrunk = {
        c: float(np.clip(raw[c] * tau2 / (tau2 + var_c[c]), -DELTA_LIMIT, DELTA_LIMIT)) for c in raw
    }
    return shrunk, {"tau2": tau2, "sigma2": sigma2}


def _same_launch_regime(w_point: float, w_ref: float) -> bool:
    """Both a partial single wave, or both at least one full wave."""
    if not (math.isfinite(w_point) and math.isfinite(w_ref)):
        return True
    return (w_point >= 1.0) == (w_ref >= 1.0)


def _relative_deviation_data(
    tab: ScalingTable, anchor: np.ndarray, s_anchor: float, sizes: Sequence[float], waves_ref: Any
) -> tuple[dict[int, list[tuple[float, float]]], dict[float, float]]:
    """Residuals log t(c, n) / anchor[c] minus the shared size effect, per configuration."""
    s_all = tab.size
    hot = ~tab.cold
    shared: dict[float, float] = {}
    for n in sizes:
        m = hot & (s_all == n) & np.isfinite(anchor[tab.cfg])
        if m.any():
            shared[n] = float(np.median(np.log(tab.time_ms[m] / anchor[tab.cfg[m]])))
    out: dict[int, list[tuple[float, float]]] = {}
    for i in np.flatnonzero(hot):
        n = float(s_all[i])
        c = int(tab.cfg[i])
        if n not in shared or not np.isfinite(anchor[c]):
            continue
        if tab.waves is not None and waves_ref is not None:
            if not _same_launch_regime(float(tab.waves[i]), float(waves_ref[c])):
                continue
        x = n / s_anchor
        z = 2.0 * (x - 1.0) / (x + 1.0)
        out.setdefault(c, []).append((z, math.log(tab.time_ms[i] / anchor[c]) - shared[n]))
    return out, shared


def _hot_at(tab: ScalingTable, n_cfg: int, s: float) -> np.ndarray:
    a = np.full(n_cfg, np.nan)
    m = (~tab.cold) & (tab.size == s)
    a[tab.cfg[m]] = tab.time_ms[m]
    return a


def _centered_log_error(pred: np.ndarray, meas: np.ndarray) -> float:
    ok = np.isfinite(pred) & np.isfinite(meas)
    if ok.sum() < 2:
        return math.nan
    e = np.log(pred[ok] / meas[ok])
    return float(np.sqrt(np.mean((e - np.median(e)) ** 2)))


def fit_scaling(
    tab: ScalingTable,
    n_cfg: int,
    *,
    data_names: Sequence[str] = ("N",),
    footprint: Footprint | None = None,
    l2_bytes: float = math.inf,
    waves_ref: Any = None,
    unpadded: Mapping[float, np.ndarray] | None = None,
    launch: LaunchQuantity | None = None,
) -> ScalingFit:
    """Fit the model on `tab` (see the module docstring). Every candidate must be timed hot at the
    largest size L; `waves_ref` (optional) are the candidates' exact waves at L; `unpadded`
    (optional) maps a size s to the mask of candidates that launch no padding thread there
    (exact, from the grid formula), so the fold compares like with like; `launch` (optional,
    kernels with program parameters) the exact launch quantity q, used unless the ×2 fold
    vetoes it."""
    s_all = tab.size
    hot = ~tab.cold
    if not hot.any():
        raise FitError("scaling: no hot timing in the training table")
    if not (tab.cfg[hot] < n_cfg).all() or not (tab.cfg >= 0).all():
        raise FitError(f"scaling: candidate indices outside 0..{n_cfg - 1}")
    s_ref = float(s_all[hot].max())
    q_ref = None
    launch_report: dict[str, Any] | None = None
    if launch is not None:
        net, q_ref, launch_report = _net_of_launch(tab, n_cfg, s_ref, launch, data_names)
        if launch_report["used"]:
            tab = net
        else:
            launch, q_ref = None, None
    D_ref = tuple(float(v) for v in tab.D[hot][np.argmax(s_all[hot])])
    a_hot = _hot_at(tab, n_cfg, s_ref)
    missing = np.flatnonzero(np.isnan(a_hot)).tolist()
    # A candidate without a time at L (it failed there) has no anchor: it is never chosen.
    a_hot[np.isnan(a_hot)] = np.inf
    if not np.isfinite(a_hot).any():
        raise FitError("scaling: no candidate has a hot timing at the largest training size")
    spread_ref = tab.spread[hot & (s_all == s_ref)]
    band = float(np.nanmedian(spread_ref)) if np.isfinite(spread_ref).any() else 0.0

    # Cold anchors: measured where the plan measured them, else a bound that cannot win.
    a_cold = a_hot.copy()
    measured = np.zeros(n_cfg, dtype=bool)
    mc = tab.cold & (s_all == s_ref)
    if mc.any():
        a_cold[tab.cfg[mc]] = tab.time_ms[mc]
        measured[tab.cfg[mc]] = True
        measured &= np.isfinite(a_hot)
        a_cold[~np.isfinite(a_hot)] = np.inf
        if measured.any():
            ratio = float(np.median(a_cold[measured] / a_hot[measured]))
            a_cold[~measured] = a_hot[~measured] * max(1.0, ratio)

    report: dict[str, Any] = {
        "s_ref": s_ref,
        "band": band,
        "cold_measured": int(measured.sum()),
        "missing_at_L": missing,
    }
    if launch_report is not None:
        report["launch_quantity"] = launch_report
    smaller = sorted({float(v) for v in s_all[hot] if v < s_ref}, reverse=True)

    # Shared growth law from the median ratio to L at each smaller size.
    growth = None
    if smaller:
        dev_data, shared = _relative_deviation_data(tab, a_hot, s_ref, smaller, None)
        growth = GrowthLaw.fit(list(shared), [math.exp(v) for v in shared.values()], s_ref)
        report["growth"] = {"coef": list(growth.coef), "chosen_by": growth.chosen_by}

    # Per-configuration deviations, and the ×2 fold that decides whether they are used.
    delta = np.zeros(n_cfg)
    drift = 0.0
    lam = 0.0
    if smaller:
        dev_data, _ = _relative_deviation_data(tab, a_hot, s_ref, smaller, waves_ref)
        shrunk, eb = _deviations(dev_data, band**2)
        report["deviations"] = {"n": len(shrunk), **eb}
        M = smaller[0]
        fold = _fold(tab, n_cfg, s_ref, M, band, unpadded)
        report["fold"] = fold
        drift = fold.get("drift", 0.0)
        # Evidence: the deviations predict the fold's relative times better, beyond the noise.
        if fold.get("error_without", -math.inf) - fold.get("error_with", math.inf) > band:
            lam = 1.0
            for c, v in shrunk.items():
                delta[c] = v
    report["lambda"] = lam
    if "drift" not in report.get("fold", {}):
        # Unmeasured, a drift of 0 let top-k try one or two candidates (n-body, dc0480d).
        drift = UNKNOWN_DRIFT
        report["drift"] = f"unknown (no fold): {UNKNOWN_DRIFT:g}, the largest online k"
    return ScalingFit(
        tuple(data_names),
        D_ref,
        s_ref,
        a_hot,
        a_cold,
        measured,
        delta,
        growth,
        footprint,
        float(l2_bytes),
        band,
        float(drift),
        report,
        launch,
        q_ref,
    )


def _net_of_launch(
    tab: ScalingTable,
    n_cfg: int,
    s_ref: float,
    launch: LaunchQuantity,
    data_names: Sequence[str],
) -> tuple[ScalingTable, np.ndarray, dict[str, Any]]:
    """The table with every time divided by q_c(n) / q_c(L), q_c at L, and the ×2 fold's
    verdict on q: anchored at the largest smaller size M, over the candidates timed hot at M
    and L, the choice by t(M) · q(L) / q(M) against the choice by t(M), each measured at L; q
    is not used (`used` False) when its choice is slower by more than twice the timing band."""
    rows = np.unique(tab.D, axis=0)
    q_at = {float(np.prod(row)): launch.count(dict(zip(data_names, row.tolist()))) for row in rows}
    q_ref = q_at[s_ref]
    scale = np.array([q_ref[c] / q_at[float(s)][c] for c, s in zip(tab.cfg, tab.size)])
    net = ScalingTable(tab.D, tab.cfg, tab.time_ms * scale, tab.cold, tab.spread, tab.waves)
    out: dict[str, Any] = {"used": True, "form": launch.form.value, "sm_count": launch.sm_count}
    hot = ~tab.cold
    smaller = sorted({float(v) for v in tab.size[hot] if v < s_ref}, reverse=True)
    # Without a fold, q is not used: an exact count is only a model of what sets the time, and
    # unchecked it moved the histogram's choice from r 1.057 to 1.425 (H200, d714813).
    if not smaller:
        out.update(used=False, fold="no smaller size: no fold, q unchecked")
        return net, q_ref, out
    M = smaller[0]
    a_M, a_L = _hot_at(tab, n_cfg, M), _hot_at(tab, n_cfg, s_ref)
    both = np.isfinite(a_M) & np.isfinite(a_L)
    if both.sum() < 2:
        out["fold"] = f"{int(both.sum())} candidate timed at both {M:g} and {s_ref:g}: no fold"
        out["used"] = False
        return net, q_ref, out
    spreads = tab.spread[hot & (tab.size == s_ref)]
    band = float(np.nanmedian(spreads)) if np.isfinite(spreads).any() else 0.0
    best = float(np.min(a_L[both]))
    without = int(np.argmin(np.where(both, a_M, np.inf)))
    with_q = int(np.argmin(np.where(both, a_M * q_ref / q_at[M], np.inf)))
    r_without, r_with = float(a_L[without] / best), float(a_L[with_q] / best)
    out["fold"] = {"anchor": M, "target": s_ref, "compared": int(both.sum()),
                   "r_without": r_without, "r_with": r_with, "band": band}  # fmt: skip
    out["used"] = r_with <= r_without * (1.0 + 2.0 * band)
    return net, q_ref, out


def _fold(
    tab: ScalingTable,
    n_cfg: int,
    s_ref: float,
    M: float,
    band: float,
    unpadded: Mapping[float, np.ndarray] | None,
) -> dict[str, Any]:
    """Anchor at M (the largest smaller size), deviations from sizes ≤ M/2, predict L: the same
    model form, extrapolating ×(L/M) ≥ 2 when the sizes allow. Reports the centered log errors
    of the relative times at L with and without deviations over the candidates padded at
    neither M nor L (all when fewer than two), and the drift (robust spread of relative-time
    changes from M to L over all candidates measured at both, per unit of 2(x-1)/(x+1))."""
    a_M = _hot_at(tab, n_cfg, M)
    a_L = _hot_at(tab, n_cfg, s_ref)
    both = np.isfinite(a_M) & np.isfinite(a_L)
    out: dict[str, Any] = {"anchor": M, "target": s_ref, "configs": int(both.sum())}
    if both.sum() < 2:
        return out
    x = s_ref / M
    z = 2.0 * (x - 1.0) / (x + 1.0)
    change = np.log(a_L[both] / a_M[both])
    change = change - np.median(change)
    out["drift"] = float(1.4826 * np.median(np.abs(change)) / z)
    if unpadded is not None and M in unpadded and s_ref in unpadded:
        clean = both & unpadded[M] & unpadded[s_ref]
        if clean.sum() >= 2:
            a_M = np.where(clean, a_M, np.nan)
            a_L = np.where(clean, a_L, np.nan)
            both = clean
    out["compared"] = int(both.sum())
    lower = sorted({float(v) for v in tab.size[~tab.cold] if v <= M / 2}, reverse=True)
    out["error_without"] = _centered_log_error(a_M, a_L)
    if not lower:
        return out
    dev_data, _ = _relative_deviation_data(tab, a_M, M, lower, None)
    shrunk, _ = _deviations(dev_data, band**2)
    d = np.zeros(n_cfg)
    for c, v in shrunk.items():
        d[c] = v
    out["error_with"] = _centered_log_error(a_M * pade_factor(x, d), a_L)
    choice_wo = int(np.nanargmin(np.where(both, a_M, np.inf)))
    choice_w = int(np.nanargmin(np.where(both, a_M * pade_factor(x, d), np.inf)))
    best = float(np.nanmin(np.where(both, a_L, np.inf)))
    out["r_without"] = float(a_L[choice_wo] / best)
    out["r_with"] = float(a_L[choice_w] / best)
    return out
