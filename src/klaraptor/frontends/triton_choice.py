"""Choosing a Triton config for a new key fast (`klaraptor.frontends.triton`'s select path).

What does not depend on the key is precomputed per build (`Chooser`); the user's grid is called
once with META holding arrays over the configs (`vector_meta`, `programs_vector`) where that is
known to agree with one call per config. `grid_dims` tells from training data which key
parameters set the program count (they enter the waves model through the waves' fill).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from klaraptor.models.wave_time import FILL, WaveFit

__all__ = ["Chooser", "grid_dims", "programs_vector", "vector_meta"]


class Chooser:
    """A build's model with everything that does not depend on the key precomputed, so that a
    new key costs a few NumPy operations over all configs at once: the waves as `full_waves`
    computes them, the fill as `wave_fill`, then `WaveFit.predict`'s operations in its order
    (the same floats: the tests compare the two paths)."""

    __slots__ = ("a", "b", "capacity", "data", "g_data", "g_fill", "never", "room", "scale")

    def __init__(self, fit: WaveFit, active: np.ndarray, sm_count: int) -> None:
        cap = np.asarray(active, dtype=np.float64) * float(sm_count)
        self.room = cap  # programs one wave holds, per config
        # +inf waves where a program can never be resident (None: every config can hold one)
        self.never = np.where(cap > 0, 0.0, np.inf) if (cap <= 0).any() else None
        self.capacity = np.where(cap > 0, cap, 1.0)
        self.a, self.b = fit.a, fit.b
        terms = list(fit.terms)
        self.g_fill = fit.g[:, terms.index(FILL)] if FILL in terms else None
        cols = [m for m, j in enumerate(terms) if j != FILL]
        self.data = [terms[m] for m in cols]  # the data parameters in a wave's time
        self.g_data = fit.g[:, cols]
        self.scale = fit.scale[self.data]

    def predict(self, values: Sequence[int], programs: Any) -> np.ndarray:
        p = programs  # int64 array or int: true division converts it to float64 first
        waves = np.ceil(p / self.capacity)
        if self.never is not None:
            waves = waves + self.never
        per_wave = self.b
        if self.g_fill is not None:
            # wave_fill's quotient without its checks (a third of a new key's time): a config
            # that holds no program has infinite waves and no program gives zero waves, so the
            # floor on the room makes both 0, as wave_fill does; elsewhere the same division.
            per_wave = per_wave + self.g_fill * (p / np.maximum(waves * self.capacity, 1e-300))
        if self.data:
            x = np.array([float(values[j]) for j in self.data]) / self.scale
            per_wave = per_wave + self.g_data @ x
        return self.a + waves * per_wave


def vector_meta(all_kwargs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Every config's launch kwargs as one META: a kwarg equal in all configs as itself, one
    that differs as an array over the configs. None where configs name different kwargs or
    differ in a non-integer one (then the grid is called once per config)."""
    names = set(all_kwargs[0])
    if any(set(kw) != names for kw in all_kwargs):
        return None
    meta: dict[str, Any] = {}
    for name in all_kwargs[0]:
        vals = [kw[name] for kw in all_kwargs]
        if all(v == vals[0] and type(v) is type(vals[0]) for v in vals):
            meta[name] = vals[0]
        elif all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
            meta[name] = np.array(vals, dtype=np.int64)
        else:
            return None
    return meta


def programs_vector(grid: Any, named: Mapping[str, Any], meta: Mapping[str, Any], n: int) -> Any:
    """One call of the grid on META of arrays: every config's program count (an int where
    no grid dimension depends on the config), or None where the grid's answer is not one
    number or one number per config in each dimension."""
    g = tuple(grid({**named, **meta}))
    if len(g) > 3:
        return None
    scalar = 1
    per_config = None
    for dim in g:
        if type(dim) is int:
            scalar *= dim
            continue
        arr = np.asarray(dim)
        if arr.dtype.kind not in "iuf" or arr.ndim > 1 or (arr.ndim == 1 and arr.size != n):
            return None
        if arr.ndim == 0:
            scalar *= int(arr)
        else:
            if arr.dtype != np.int64:
                arr = arr.astype(np.int64)  # floats truncate, as int() does per config
            per_config = arr if per_config is None else per_config * arr
    if per_config is None:
        return scalar
    return per_config if scalar == 1 else per_config * scalar


def grid_dims(D: np.ndarray, cfg: np.ndarray, programs: np.ndarray) -> list[int]:
    """The data parameters that set the program count in the training data: some config's count
    differs between two training sizes that differ in that parameter alone."""
    out = []
    for j in range(D.shape[1]):
        seen: dict[tuple[Any, ...], float] = {}
        for row, c, p in zip(D, cfg, programs):
            k = (int(c), *np.delete(row, j).tolist())
            if seen.setdefault(k, float(p)) != float(p):
                out.append(j)
                break
    return out
