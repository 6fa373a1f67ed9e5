"""Exact launch quantities of a kernel with program parameters (never fitted).

The scaling model (`klaraptor.models.scaling`, its module docstring says when each applies)
multiplies a candidate's time by q_c(D) / q_c(L), where q_c(D) follows from the spec's grid
formula, the SM count and the compiled variant's occupancy:

- `LaunchForm.BUSIEST_SM`: q = ceil(blocks / SMs), the blocks the busiest SM runs: for an
  SM-bound kernel that SM's rows of blocks set the time, and the variants' blocks (different
  work each) quantise differently at each D;
- `LaunchForm.FILL`: q = 1 / min(waves, 1), waves = blocks / (active blocks per SM · SMs): for a
  memory-bound kernel (the SMs share the DRAM, whatever SM runs a block) only the fill of a
  partial first wave matters: a candidate timed at L in less than one wave leaves SMs idle
  there, a handicap that goes once its grid fills the GPU (q is 1 from one wave on).

The same expression serves `LaunchQuantity.count` (NumPy) and the helper's rational program.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from klaraptor.core.errors import FitError
from klaraptor.program import Expr, Program, ceil, const, maximum, table, var

__all__ = ["LaunchForm", "LaunchQuantity"]


class LaunchForm(enum.Enum):
    """Which exact launch quantity q scales a candidate's time (module docstring)."""

    BUSIEST_SM = "busiest_sm"  # ceil(blocks / SMs): SM-bound kernels
    FILL = "fill"  # 1 / min(waves, 1): memory-bound kernels


@dataclass(frozen=True)
class LaunchQuantity:
    """q_c(D) of every candidate (exact, never fitted; module docstring).

    `grid` are the spec's grid formulas over the data names, ``bx``, ``by``, ``bz`` and the
    program parameters; `per_candidate` gives those per-candidate inputs' values (one entry per
    candidate), so the same formulas serve `count` and the rational program; `active` (FILL) is
    each candidate's active blocks per SM (its occupancy, which does not depend on D)."""

    form: LaunchForm
    sm_count: int
    grid: tuple[Expr, Expr, Expr]
    per_candidate: Mapping[str, np.ndarray]
    active: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.form is LaunchForm.FILL and self.active is None:
            raise FitError("the fill of a partial wave needs each candidate's active blocks")

    def expr(self) -> Expr:
        """q over the data names, the per-candidate inputs and ``cfg``."""
        gx, gy, gz = self.grid
        blocks = gx * gy * gz
        if self.form is LaunchForm.BUSIEST_SM:
            return ceil(blocks / const(float(self.sm_count)))
        assert self.active is not None
        capacity = table(var("cfg"), self.active * float(self.sm_count))
        # 1 / min(waves, 1) = max(capacity / blocks, 1); no resident block (capacity 0): 1
        return maximum(capacity / blocks, const(1.0))

    def count(self, D: Mapping[str, float]) -> np.ndarray:
        """q of every candidate at D (a mapping from data name to value)."""
        expr = self.expr()
        names = tuple(sorted(expr.variables()))
        prog = Program("launch_quantity", names, [("q", expr)], ["q"])
        n_cfg = len(next(iter(self.per_candidate.values())))
        fixed = {**self.per_candidate, "cfg": np.arange(n_cfg, dtype=np.float64)}
        env = {n: fixed[n] if n in fixed else float(D[n]) for n in names}
        return np.broadcast_to(prog.evaluate(env)["q"], (n_cfg,)).astype(np.float64)
