"""Configurations whose growth with a data parameter the training sizes never showed.

A configuration can sit in a flat regime over every training size: the layer norm of Triton's
tutorials with BLOCK_SIZE >= 2048 runs one masked iteration at every N <= 1024, so its time
barely moves with N there, while the narrow blocks' time grows with their iteration count. The
waves model then fits it almost no growth with N and extrapolates it flat: at 13x the largest
training N it looks the fastest, and whether it is depends on luck (r 1.03 to 1.65 between
runs on the H200). Its growth is not small, it is unidentified: the training sizes never left
its flat regime.

`growth_checks` tells such configurations from training timings alone, one data parameter at a
time (holding the other parameters fixed), by a noise-aware comparison with the configurations
that do grow (see `_Z`, `_P_NOISE`, `_ALPHA` and `_FLAT_SHARE` for the thresholds and why). It knows
nothing of any kernel: it sees (D, configuration, time) points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["GrowthCheck", "growth_checks", "unidentified_growth"]

# A configuration grows with the parameter when its growth over the training range exceeds
# _Z standard errors of that growth under the timing noise (about 95 % one-sided under normal
# noise): growth that timing noise alone would rarely give.
_Z = 2.0
# The parameter drives the time when more configurations grow than timing noise alone would
# make grow. With no growth at all, a tested configuration passes the _Z test with probability
# _P_NOISE: 0.023 under normal noise known exactly, but the noise here is pooled from a few
# residual degrees of freedom per configuration (2 with four training sizes), and on 200
# synthetic noise-only sets of 12 configurations at four sizes (3 % noise) 0.058 passed; 0.06
# covers that, and more sizes only lower it. The number that pass is then binomial, and a count
# whose tail probability is below _ALPHA (0.001: 5 or more of 12) is not noise. Otherwise
# nothing is named: with no more growers than noise explains, a flat configuration is the rule,
# not a sign of an unexplored regime. (The rule before, "more than half grow", named nothing
# with 6 of 12 growing; the layer norm then extrapolated a flat wide block and lost 24 %,
# tests/data/triton_layer_norm_h200_f8ca948.json.)
_P_NOISE = 0.06
_ALPHA = 0.001
# A configuration is flat when its growth is below this share of the typical growing
# configuration's (the median growth of those that grow), and below it by more than _Z
# standard errors. Why 0.4: growth over a training range is a continuum between configurations
# that grow with the parameter and those in a flat regime, and the share was set on the one
# run whose training timings are recorded (tests/data/triton_layer_norm_h200_3900e76.json,
# growth of log time over N = 256 to 1024): the typical grower grows 0.164 (18 %), the
# BLOCK_SIZE 4096 and 2048/8-warp configs 0.014 to 0.053 and 2048/4 warps 0.063, while
# BLOCK_SIZE 1024/8 warps (which grows, by its bytes) and 2048/2 warps both grow 0.085-0.086:
# no share separates those two. 0.4 (0.066 there) keeps the nearest of them 30 % above the
# line; 2048/4 warps is 4 % below it, so another run may name it or not. A flat configuration
# named is only a reason to measure a larger size, so the rule errs towards naming few.
_FLAT_SHARE = 0.4
# Fewer tested configurations than this: no "most" to compare with.
_MIN_CONFIGS = 3


@dataclass(frozen=True)
class GrowthCheck:
    """The growth of every configuration's time with one data parameter over the training sizes.

    `growth[c]`: the least-squares slope of log time against log D_j (the other parameters held
    fixed, pooled over their values) times the training range of log D_j, i.e. log(t at the
    largest / t at the smallest) along the fitted line; NaN where configuration c has no residual
    degree of freedom along j (it is not tested). `noise`: the median over tested configurations
    of their residual standard deviation of log time (timing noise and misfit together).
    `growing`: the configurations whose growth exceeds `_Z` standard errors; `reference`: the
    median growth of those; `flat`: the configurations named (empty unless more configurations
    grow than timing noise explains)."""

    parameter: str
    index: int
    growth: tuple[float, ...]
    standard_error: tuple[float, ...]
    noise: float
    growing: tuple[int, ...]
    reference: float
    flat: tuple[int, ...]
    threshold: float  # growth below which (and Z standard errors below `reference`) is flat

    @property
    def tested(self) -> tuple[int, ...]:
        return tuple(c for c, g in enumerate(self.growth) if math.isfinite(g))

    @property
    def drives_time(self) -> bool:
        """More configurations grow with the parameter than timing noise explains: the time
        depends on it, and a model that leaves it out contradicts the training timings."""
        return _more_than_noise(len(self.growing), len(self.tested))

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameter": self.parameter,
            "index": self.index,
            "growth": [_json_float(g) for g in self.growth],
            "standard_error": [_json_float(s) for s in self.standard_error],
            "noise": _json_float(self.noise),
            "growing": list(self.growing),
            "reference": _json_float(self.reference),
            "flat": list(self.flat),
            "threshold": _json_float(self.threshold),
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> GrowthCheck:
        return cls(
            str(obj["parameter"]),
            int(obj["index"]),
            tuple(_float(g) for g in obj["growth"]),
            tuple(_float(s) for s in obj["standard_error"]),
            _float(obj["noise"]),
            tuple(int(c) for c in obj["growing"]),
            _float(obj["reference"]),
            tuple(int(c) for c in obj["flat"]),
            _float(obj["threshold"]),
        )


def _json_float(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _float(v: Any) -> float:
    return math.nan if v is None else float(v)


def _more_than_noise(growing: int, tested: int) -> bool:
    """Whether `growing` of `tested` configurations passing the growth test is unlikely
    (binomial tail below `_ALPHA`) when timing noise alone makes them pass."""
    p = _P_NOISE
    tail = sum(
        math.comb(tested, k) * p**k * (1.0 - p) ** (tested - k) for k in range(growing, tested + 1)
    )
    return growing > 0 and tail < _ALPHA


def _check_one(
    D: np.ndarray, cfg: np.ndarray, logt: np.ndarray, n_cfg: int, j: int, name: str
) -> GrowthCheck:
    x_all = np.log(D[:, j])
    others = np.delete(D, j, axis=1)
    slope = np.full(n_cfg, np.nan)
    sxx = np.full(n_cfg, np.nan)
    sigma = np.full(n_cfg, np.nan)
    for c in range(n_cfg):
        at = np.flatnonzero(cfg == c)
        if at.size < 3:
            continue
        # center x and y within each group of equal other parameters (their own intercepts)
        groups: dict[tuple[float, ...], list[int]] = {}
        for i in at:
            groups.setdefault(tuple(others[i].tolist()), []).append(int(i))
        dx, dy, n_groups = [], [], 0
        for rows in groups.values():
            xs, ys = x_all[rows], logt[rows]
            if np.unique(xs).size < 2:
                continue
            n_groups += 1
            dx.append(xs - xs.mean())
            dy.append(ys - ys.mean())
        if not n_groups:
            continue
        xc, yc = np.concatenate(dx), np.concatenate(dy)
        dof = xc.size - n_groups - 1
        s = float(xc @ xc)
        if dof < 1 or s <= 0:
            continue
        b = float(xc @ yc) / s
        slope[c], sxx[c] = b, s
        sigma[c] = math.sqrt(float(((yc - b * xc) ** 2).sum()) / dof)
    tested = np.flatnonzero(np.isfinite(slope))
    span = float(x_all.max() - x_all.min())
    growth = slope * span
    empty = GrowthCheck(
        name, j, tuple(growth.tolist()), (math.nan,) * n_cfg, math.nan, (), math.nan, (), math.nan
    )
    if tested.size < _MIN_CONFIGS:
        return empty
    noise = float(np.median(sigma[tested]))
    se = noise * span / np.sqrt(sxx)
    grows = [int(c) for c in tested if growth[c] > _Z * se[c]]
    reference = float(np.median(growth[grows])) if grows else math.nan
    threshold = _FLAT_SHARE * reference if grows else math.nan
    flat: list[int] = []
    if _more_than_noise(len(grows), int(tested.size)):
        flat = [
            int(c) for c in tested if growth[c] < threshold and growth[c] < reference - _Z * se[c]
        ]
    return GrowthCheck(
        name,
        j,
        tuple(float(g) for g in growth),
        tuple(float(s) for s in se),
        noise,
        tuple(grows),
        reference,
        tuple(flat),
        threshold,
    )


def growth_checks(
    D: Any,
    cfg: Any,
    time_ms: Any,
    n_cfg: int,
    *,
    data_names: Sequence[str],
    skip: Sequence[int] = (),
) -> list[GrowthCheck]:
    """One `GrowthCheck` per data parameter not in `skip` (for a grid of programs, the
    parameters that set the program count: the waves count their growth exactly). Points with a
    non-positive or non-finite D_j or time are left out."""
    D = np.atleast_2d(np.asarray(D, dtype=np.float64))
    cfg = np.asarray(cfg, dtype=np.int64)
    t = np.asarray(time_ms, dtype=np.float64)
    out = []
    for j in range(D.shape[1]):
        if j in set(int(s) for s in skip):
            continue
        ok = np.isfinite(t) & (t > 0) & np.isfinite(D[:, j]) & (D[:, j] > 0)
        if np.unique(D[ok, j]).size < 2:
            continue
        out.append(_check_one(D[ok], cfg[ok], np.log(t[ok]), n_cfg, j, str(data_names[j])))
    return out


def unidentified_growth(checks: Sequence[GrowthCheck]) -> GrowthCheck | None:
    """The check that names the most flat configurations (the first such), or None."""
    named = [c for c in checks if c.flat]
    return max(named, key=lambda c: len(c.flat)) if named else None
