"""Time of a grid of independent programs from its exact wave count: the "waves" model.

For kernels launched as a grid of independent programs (Triton's model; a CUDA grid too) whose
program count per configuration is known exactly at any D (the grid formula), the time of
configuration c at D is modelled as

    t(c, D) = a + W_c(D) · (b_c + Σ_j g_{c,j} · D_j / D_j*)

- W_c(D) = ceil(programs_c(D) / (active programs per SM_c · SMs)): the full waves, exact (never
  fitted) from the grid and the occupancy of the compiled variant;
- a: the launch cost, shared by every configuration;
- b_c + Σ_j g_{c,j} D_j / D_j*: one wave's time, growing with the data parameters that set the work
  of one program (K of a matmul, the row length of a softmax); D* scales them to 1 at the
  largest training size. Which D_j enter is chosen by a fold on the training data only (hold out
  the largest training size, predict its ranking), as the kernel's other choices are.
- A data parameter that sets the program count (a grid dimension: the training data show the
  count change with it alone) enters one wave's time only through the waves' fill F_c(D) =
  programs / (W_c · active · SMs) ∈ (0, 1] (`FILL`): a partial wave of a memory-bound kernel is
  faster, but no wave holds more than a full wave's programs. Entering as D_j / D_j* instead, it
  would make the time grow as W_c · D_j, quadratically in the grid, once the grid exceeds one
  wave (the fused softmax's rows on the H200 at cd0d53b: trained within one wave, it chose
  8 warps over 2 at 4x-16x the rows, r up to 1.37).

All coefficients are non-negative (NNLS on relative errors), so no extrapolation turns a time
negative or reverses the growth a training set showed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import nnls

from klaraptor.core.errors import FitError

__all__ = ["FILL", "WaveFit", "choose_wave_fit", "fit_waves", "full_waves", "wave_fill"]

_LAUNCH_PULL = 0.3
FILL = -1  # the term index of the waves' fill (see the module doc)


def full_waves(programs: Any, active_per_sm: Any, sm_count: int) -> np.ndarray:
    """ceil(programs / (active · SMs)); inf where a program cannot be resident (active 0)."""
    p = np.asarray(programs, dtype=np.float64)
    a = np.asarray(active_per_sm, dtype=np.float64) * float(sm_count)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, np.ceil(p / a), np.inf)


def wave_fill(programs: Any, waves: Any, capacity: Any) -> np.ndarray:
    """programs / (waves · capacity): the waves' average fill, capacity = active · SMs (0 where
    there is no program or no wave can hold one)."""
    p = np.asarray(programs, dtype=np.float64)
    w = np.asarray(waves, dtype=np.float64)
    cap = np.asarray(capacity, dtype=np.float64)
    shape = np.broadcast(p, w, cap).shape
    # no wave can hold a program where capacity is 0 (waves inf there): room 0, fill 0
    room = np.multiply(w, cap, out=np.zeros(shape), where=cap > 0)
    ok = np.isfinite(room) & (room > 0)
    return np.divide(p, room, out=np.zeros(shape), where=ok)


def _term_name(data_names: Sequence[str], j: int) -> str:
    return "fill" if j == FILL else data_names[j]


@dataclass
class WaveFit:
    """A fitted waves model over `n_cfg` configurations and data parameters `data_names`."""

    data_names: tuple[str, ...]
    terms: tuple[int, ...]  # indices of the data parameters in the per-wave time
    scale: np.ndarray  # D_j* (the largest training value of each data parameter)
    a: float
    b: np.ndarray  # (n_cfg,)
    g: np.ndarray  # (n_cfg, len(terms))
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def n_cfg(self) -> int:
        return int(self.b.size)

    def predict(
        self, D: Sequence[float], waves: np.ndarray, fill: np.ndarray | None = None
    ) -> np.ndarray:
        """Predicted ms of every configuration at D, given their exact waves there (and their
        fill, `wave_fill`, where the model has the FILL term)."""
        per_wave = self.b
        if self.terms:
            if FILL in self.terms:
                if fill is None:
                    raise FitError("waves: this model needs the waves' fill to predict")
                per_wave = per_wave + self.g[:, self.terms.index(FILL)] * fill
            data = [m for m, j in enumerate(self.terms) if j != FILL]
            if data:
                x = (
                    np.array([float(D[self.terms[m]]) for m in data])
                    / self.scale[[self.terms[m] for m in data]]
                )
                per_wave = per_wave + self.g[:, data] @ x
        return self.a + np.asarray(waves, dtype=np.float64) * per_wave

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": "waves",
            "data_names": list(self.data_names),
            "terms": [_term_name(self.data_names, j) for j in self.terms],
            "scale": self.scale.tolist(),
            "a_ms": self.a,
            "b_ms": self.b.tolist(),
            "g_ms": self.g.tolist(),
            "report": self.report,
        }


def fit_waves(
    D: np.ndarray,
    cfg: np.ndarray,
    waves: np.ndarray,
    time_ms: np.ndarray,
    n_cfg: int,
    *,
    data_names: Sequence[str],
    terms: Sequence[int] = (),
    fill: np.ndarray | None = None,
) -> WaveFit:
    """Fit the model on measured points: D (n, d), configuration index, exact waves, time (and
    the waves' fill, needed where `terms` has FILL)."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    cfg = np.asarray(cfg, dtype=np.int64)
    waves = np.asarray(waves, dtype=np.float64)
    t = np.asarray(time_ms, dtype=np.float64)
    terms = tuple(int(j) for j in terms)
    if FILL in terms and fill is None:
        raise FitError("waves: the fill term needs the waves' fill of every point")
    fill_v = np.zeros(t.size) if fill is None else np.asarray(fill, dtype=np.float64)
    ok = np.isfinite(t) & (t > 0) & np.isfinite(waves)
    if not ok.any():
        raise FitError("waves: no finite timing to fit")
    D, cfg, waves, t, fill_v = D[ok], cfg[ok], waves[ok], t[ok], fill_v[ok]
    scale = np.max(D, axis=0)
    scale[scale <= 0] = 1.0

    def feature(j: int) -> np.ndarray:
        return fill_v if j == FILL else D[:, j] / scale[j]

    k = 1 + len(terms)  # per-configuration columns
    n_cols = 1 + n_cfg * k
    X = np.zeros((t.size, n_cols))
    X[:, 0] = 1.0
    feats = [feature(j) for j in terms]
    for i in range(t.size):
        base = 1 + cfg[i] * k
        X[i, base] = waves[i]
        for m in range(len(terms)):
            X[i, base + 1 + m] = waves[i] * feats[m][i]
    # Relative errors: every configuration and size counts alike whatever its time.
    w = 1.0 / t
    used = np.flatnonzero(np.abs(X).sum(axis=0) > 0)
    coef = np.zeros(n_cols)
    A = X[:, used] * w[:, None]
    y = t * w
    # Where the training sizes do not separate the launch cost from one wave's time (every
    # configuration in one wave at every training size), lean on a small launch cost: one
    # wave then costs what the training measured, and more waves cost proportionally more.
    # The pull costs as much as a 30% error on one point per typical time of launch cost:
    # data that do separate the two overrule it.
    pull = np.zeros((1, used.size))
    pull[0, 0] = _LAUNCH_PULL / float(np.median(t))
    sol, _ = nnls(np.vstack([A, pull]), np.append(y, 0.0), maxiter=50 * used.size)
    coef[used] = sol
    b = np.array([coef[1 + c * k] for c in range(n_cfg)])
    g = np.array([[coef[1 + c * k + 1 + m] for m in range(len(terms))] for c in range(n_cfg)])
    g = g.reshape(n_cfg, len(terms))
    measured = np.zeros(n_cfg, dtype=bool)
    measured[np.unique(cfg)] = True
    # A configuration never measured has no evidence: it is never chosen.
    b[~measured] = np.inf
    per_wave = b[cfg].copy()
    for m in range(len(terms)):
        per_wave += g[cfg, m] * feats[m]
    pred = coef[0] + waves * per_wave
    rel = np.abs(pred / t - 1.0)
    return WaveFit(
        tuple(data_names),
        terms,
        scale,
        float(coef[0]),
        b,
        g,
        {"points": int(t.size), "median_rel_error": float(np.median(rel))},
    )


def _ranking_loss(
    fit: WaveFit,
    D: np.ndarray,
    cfg: np.ndarray,
    waves: np.ndarray,
    t: np.ndarray,
    n_cfg: int,
    fill: np.ndarray,
) -> tuple[float, float]:
    """(time of the predicted best / measured best, centered log error) at each held-out D."""
    rs, errs = [], []
    for row in np.unique(D, axis=0):
        at = np.all(D == row, axis=1) & np.isfinite(t)
        if at.sum() < 2:
            continue
        w_full = np.full(n_cfg, np.inf)
        w_full[cfg[at]] = waves[at]
        f_full = np.zeros(n_cfg)
        f_full[cfg[at]] = fill[at]
        pred = fit.predict(row, w_full, f_full)
        meas = np.full(n_cfg, np.inf)
        meas[cfg[at]] = t[at]
        cand = np.isfinite(meas)
        choice = int(np.argmin(np.where(cand, pred, np.inf)))
        rs.append(meas[choice] / meas[cand].min())
        e = np.log(pred[cand] / meas[cand])
        errs.append(float(np.sqrt(np.mean((e - np.median(e)) ** 2))))
    if not rs:
        return math.nan, math.nan
    return float(np.exp(np.mean(np.log(rs)))), float(np.mean(errs))


def _multi_wave(cfg: np.ndarray, waves: np.ndarray) -> bool:
    """Do most measured configurations show at least two distinct full-wave counts of 2 or
    more? Within one wave, a grid dimension's growth of the program count and of a program's
    work look alike (time ~ b + g D_j fits both), and beyond it the second grows as waves x
    D_j: the softmax's rows, trained within one wave, chose 8 warps over 2 at 4x-16x the rows
    (r up to 1.37, H200, cd0d53b)."""
    seen = np.unique(cfg)
    many = sum(
        np.unique(waves[(cfg == c) & np.isfinite(waves) & (waves >= 2)]).size >= 2 for c in seen
    )
    return bool(seen.size) and many > seen.size / 2


# Two fold options whose r at the held-out size differ by less than this are tied: a choice
# among microsecond launches timed by do_bench moves by 1-2 % between runs (layer norm on the
# H200: r 1.0136 against 1.0 for the option whose held-out log error was half).
RANK_TIE = 0.02


def choose_wave_fit(
    D: np.ndarray,
    cfg: np.ndarray,
    waves: np.ndarray,
    time_ms: np.ndarray,
    n_cfg: int,
    *,
    data_names: Sequence[str],
    fill: np.ndarray | None = None,
    grid_dims: Sequence[int] = (),
    required: Sequence[int] = (),
) -> WaveFit:
    """Fit with the per-wave terms a fold on the training data chooses: fit on all sizes but the
    largest, rank at the largest; among the options whose r is within RANK_TIE of the lowest,
    the lowest log error wins (then the fewest terms). With one training size there is no fold: no
    terms. A data parameter in `grid_dims` (it sets the program count) is offered as the FILL
    term instead (with `fill`), and also as itself where most configurations were measured at
    several multi-wave counts (`_multi_wave`). Every option offered holds the parameters in
    `required` (those a growth test found driving the time)."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    cfg = np.asarray(cfg, dtype=np.int64)
    waves = np.asarray(waves, dtype=np.float64)
    t = np.asarray(time_ms, dtype=np.float64)
    fill_v = np.zeros(t.size) if fill is None else np.asarray(fill, dtype=np.float64)
    d = D.shape[1]
    varying = [j for j in range(d) if np.unique(D[:, j]).size > 1]
    grid = set(int(j) for j in grid_dims) if fill is not None else set()
    as_terms = sorted({FILL if j in grid else j for j in varying})
    # A grid dimension may also set a program's work (the attention's loop over N_CTX: its
    # programs and each program's keys both grow with it). Offered as D_j / D_j* too only where
    # the fold can tell the two apart: most configurations seen at several multi-wave counts.
    also = [j for j in varying if j in grid and _multi_wave(cfg, waves)]
    options: list[tuple[int, ...]] = [()]
    options += [(j,) for j in as_terms + also]
    if len(as_terms) + len(also) > 1:
        options.append(tuple(sorted(set(as_terms) | set(also))))
    # A parameter the growth test found driving the time (`required`) is in every option: the
    # fold ranks at one held-out size, where an option without it can tie by chance and then
    # extrapolate no growth at all (the fused softmax at 661e2d2 -> 7fe1ea0: "fill" alone won a
    # tie at n_cols 512 and lost up to 1.50x at 2560-3584 columns).
    need = {int(j) for j in required if j in varying and j not in grid}
    if need:
        options = [o for o in options if need <= set(o)] or options
    size = np.prod(np.maximum(D, 1.0), axis=1)
    largest = size == size.max()
    fold: dict[str, Any] = {}
    best = options[0]
    if len(options) > 1 and (~largest).any() and np.unique(D[~largest], axis=0).shape[0] >= 2:
        scored = []
        for opt in options:
            try:
                f = fit_waves(
                    D[~largest],
                    cfg[~largest],
                    waves[~largest],
                    t[~largest],
                    n_cfg,
                    data_names=data_names,
                    terms=opt,
                    fill=fill_v[~largest],
                )
            except FitError:
                continue
            r, err = _ranking_loss(
                f, D[largest], cfg[largest], waves[largest], t[largest], n_cfg, fill_v[largest]
            )
            name = "+".join(_term_name(data_names, j) for j in opt) or "none"
            fold[name] = {"r": r, "log_error": err}
            if math.isfinite(r):
                scored.append((r, err, len(opt), opt))
        if scored:
            # r at one held-out size moves by the timing noise: options within RANK_TIE of the
            # best r are tied, and the one that fits the held-out times best wins among them.
            r_best = min(s[0] for s in scored)
            tied = [s for s in scored if s[0] <= r_best * (1.0 + RANK_TIE)]
            best = min(tied, key=lambda s: (s[1], s[2]))[3]
    fit = fit_waves(D, cfg, waves, t, n_cfg, data_names=data_names, terms=best, fill=fill_v)
    fit.report["fold"] = fold
    fit.report["chosen_terms"] = [_term_name(data_names, j) for j in best]
    fit.report["grid_dims"] = [data_names[j] for j in sorted(grid)]
    return fit
