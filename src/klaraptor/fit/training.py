"""Training: the measured points of a kernel, and the metric fits models are made of.

Thesis §4.2 step 2 and DESIGN.md "Fitting":
- quantities known exactly are never fitted: total blocks (the spec's grid formula), threads per
  block, registers and shared memory (the kernel's attributes and the spec's formula);
- each metric a model reads is fitted from the training points two ways — one rational function
  of D per configuration (`fit_rational_table`: no poisedness problem in the block shape) and one
  joint function of (D, bx, by, bz) (`fit_rational`) — and the one with the smaller held-out error
  (largest D held out: we extrapolate) is kept; a metric that is the same constant at every point
  is bound as that constant.

Only measurements at the training sizes given are used, so evaluation points stored in the same
store never leak into a fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import BuildError, FitError, UnmeasuredError
from klaraptor.core.metrics import derive, expected_warps
from klaraptor.core.types import BLOCK_VARS, Block, Config, DataSize, KernelAttributes, ParamValues
from klaraptor.device.occupancy import arch_params
from klaraptor.device.profile import DeviceProfile
from klaraptor.fit import FitSettings, fit_rational, fit_rational_table
from klaraptor.program import Program, const, var
from klaraptor.spec import KernelSpec
from klaraptor.store import Store


@dataclass(frozen=True)
class FitOptions:
    """How a metric is fitted: `mode` "auto" keeps the better of the per-configuration ("table")
    and the joint fit, else only the one named; each uses its `FitSettings` (degree bounds per
    data variable for the table fit, per variable for the joint fit)."""

    mode: str = "auto"
    table: FitSettings = field(default_factory=lambda: FitSettings(max_degree=2, max_den_degree=1))
    joint: FitSettings = field(
        default_factory=lambda: FitSettings(max_degree=2, max_den_degree=1, max_total_degree=3)
    )


# ---------------------------------------------------------------------------------------------
# Hardware and exact quantities


def hardware_inputs(profile: DeviceProfile, *, allow_missing: bool = False) -> dict[str, float]:
    """Every `hw_*` value a model may read: architecture table merged with the device profile."""
    arch = arch_params(profile.cc)
    hw = arch.hw_inputs()
    hw.update(profile.hardware_params(allow_missing=allow_missing))
    return hw


def exact_subprograms(spec: KernelSpec, attrs: KernelAttributes) -> dict[str, Program]:
    """`blocks`, `threads`, `regs`, `smem` as programs: known exactly, never fitted.

    With program parameters the grid and shared memory read the parameters, and registers and
    static shared memory are the candidate's compiled variant's (`kl_regs`, `kl_static_smem`:
    per-candidate inputs of the helper program)."""
    dn = spec.data_names
    pn = spec.param_names
    gx, gy, gz = spec.grid_exprs()
    smem_expr = spec.smem_expr()
    static = var("kl_static_smem") if pn else const(float(attrs.static_smem))
    smem_asg = [("smem", static + (smem_expr if smem_expr is not None else 0.0))]
    smem_inputs = tuple(
        n for n in dn + pn + BLOCK_VARS if smem_expr is not None and n in smem_expr.variables()
    ) + (("kl_static_smem",) if pn else ())
    regs = (
        Program("regs", ("kl_regs",), [("regs", var("kl_regs"))], ["regs"])
        if pn
        else Program("regs", (), [("regs", const(float(attrs.num_regs)))], ["regs"])
    )
    return {
        "blocks": Program(
            "blocks",
            dn + pn + BLOCK_VARS,
            [("gx", gx), ("gy", gy), ("gz", gz), ("blocks", var("gx") * var("gy") * var("gz"))],
            ["blocks"],
        ),
        "threads": Program(
            "threads", BLOCK_VARS, [("threads", var("bx") * var("by") * var("bz"))], ["threads"]
        ),
        "regs": regs,
        "smem": Program("smem", smem_inputs, smem_asg, ["smem"]),
    }


# ---------------------------------------------------------------------------------------------
# Metric fitting


@dataclass
class MetricFit:
    name: str
    method: str  # "constant", "table", "joint"
    program: Program
    validation_max: float
    validation_median: float
    detail: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "validation_max": _jsonf(self.validation_max),
            "validation_median": _jsonf(self.validation_median),
            **self.detail,
        }


def _jsonf(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def fit_metric(
    name: str,
    data_names: Sequence[str],
    D: np.ndarray,
    blocks: np.ndarray,
    cfg: np.ndarray,
    y: np.ndarray,
    n_cfg: int,
    options: FitOptions,
) -> MetricFit:
    """Fit one metric over the training points; see the module docstring for the choice."""
    inputs = tuple(data_names) + BLOCK_VARS + ("cfg",)
    if np.all(y == y[0]):
        prog = Program(name, (), [("value", const(float(y[0])))], ["value"])
        return MetricFit(name, "constant", prog, 0.0, 0.0, {"value": float(y[0])})
    fits: list[MetricFit] = []
    errors: list[str] = []
    if options.mode in ("auto", "table"):
        try:
            tf = fit_rational_table(
                D,
                y,
                cfg,
                n_cfg,
                names=list(data_names),
                settings=options.table,
            )
            fitted = int(np.count_nonzero(tf.fitted))
            if fitted == n_cfg:
                fits.append(
                    MetricFit(
                        name,
                        "table",
                        tf.to_program(name),
                        tf.validation_error.max,
                        tf.validation_error.median,
                        {"n_samples": tf.n_samples},
                    )
                )
            else:
                errors.append(f"table fit covers {fitted}/{n_cfg} configurations")
        except FitError as e:
            errors.append(f"table: {e}")
    if options.mode in ("auto", "joint"):
        X = np.column_stack([D, blocks])
        names = list(data_names) + list(BLOCK_VARS)
        keep = [i for i in range(X.shape[1]) if np.unique(X[:, i]).size > 1 or i < len(data_names)]
        try:
            rf = fit_rational(
                X[:, keep],
                y,
                names=[names[i] for i in keep],
                data_vars=list(data_names),
                settings=options.joint,
            )
            fits.append(
                MetricFit(
                    name,
                    "joint",
                    rf.to_program(name),
                    rf.validation_error.max,
                    rf.validation_error.median,
                    {"n_samples": rf.n_samples, "formula": repr(rf)[:400]},
                )
            )
        except FitError as e:
            errors.append(f"joint: {e}")
    if not fits:
        raise BuildError(f"metric {name!r} could not be fitted: {'; '.join(errors)}")

    def score(f: MetricFit) -> tuple[float, float]:
        m = f.validation_median if math.isfinite(f.validation_median) else math.inf
        return (m, f.validation_max if math.isfinite(f.validation_max) else math.inf)

    best = min(fits, key=score)
    best.detail["alternatives"] = {
        f.method: [_jsonf(f.validation_median), _jsonf(f.validation_max)] for f in fits
    }
    if errors:
        best.detail["notes"] = errors
    # Sub-programs are called with inputs resolved by name from the helper's inputs.
    unused = set(best.program.inputs) - set(inputs)
    if unused:
        raise BuildError(f"metric {name!r}: fitted program reads unknown inputs {sorted(unused)}")
    return best


@dataclass
class TrainingSet:
    """The training points of one kernel on one device, as arrays aligned per point.

    A point is a (D, configuration): `params` holds each point's compiled variant (None: a
    kernel without program parameters, every point `ParamValues.NONE`) and `blocks` its block.
    `cold_ms`/`cold_spread`: the point's L2-flushed timing (kind 'time_cold': median and relative
    IQR), NaN where it was not measured."""

    data_names: tuple[str, ...]
    D: np.ndarray  # (n, d)
    blocks: np.ndarray  # (n, 3)
    derived: list[dict[str, float]]
    spread: np.ndarray  # relative IQR of each point's timing samples
    cold_ms: np.ndarray | None = None
    cold_spread: np.ndarray | None = None
    params: list[ParamValues] | None = None

    def __post_init__(self) -> None:
        n = len(self.derived)
        if self.cold_ms is None:
            self.cold_ms = np.full(n, np.nan)
        if self.cold_spread is None:
            self.cold_spread = np.full(n, np.nan)

    @property
    def n(self) -> int:
        return len(self.derived)

    @property
    def time_ms(self) -> np.ndarray:
        """The hot (CUDA-event median) time of every point."""
        return np.array([float(d["time_ms"]) for d in self.derived], dtype=np.float64)

    def size_of(self, i: int) -> DataSize:
        """The data size of point i."""
        return DataSize(self.data_names, tuple(int(v) for v in self.D[i]))

    def config(self, i: int) -> Config:
        """The configuration (compiled variant and block) of point i."""
        b = self.blocks[i]
        pv = ParamValues.NONE if self.params is None else self.params[i]
        return Config(pv, (int(b[0]), int(b[1]), int(b[2])))

    def configs(self) -> list[Config]:
        """Every point's configuration, in point order."""
        return [self.config(i) for i in range(self.n)]

    def key(self, i: int) -> Block | Config:
        """How candidates are keyed for point i's kernel: by block without program
        parameters, by Config with them."""
        c = self.config(i)
        return c if self.params is not None else c.block

    def sizes(self) -> list[DataSize]:
        """The distinct training sizes, smallest first."""
        return sorted({self.size_of(i) for i in range(self.n)}, key=DataSize.values)

    def subset(self, keep: Sequence[DataSize]) -> TrainingSet:
        """The points whose D is in `keep`."""
        wanted = set(keep)
        rows = [i for i in range(self.n) if self.size_of(i) in wanted]
        return self.take(rows)

    def take(self, rows: Sequence[int]) -> TrainingSet:
        """The points at indices `rows`, in that order."""
        idx = np.asarray(rows, dtype=np.int64)
        assert self.cold_ms is not None and self.cold_spread is not None
        return TrainingSet(
            self.data_names,
            self.D[idx].reshape(len(idx), -1),
            self.blocks[idx].reshape(len(idx), 3),
            [self.derived[int(i)] for i in idx],
            self.spread[idx],
            self.cold_ms[idx],
            self.cold_spread[idx],
            None if self.params is None else [self.params[int(i)] for i in idx],
        )


def training_set(
    store: Store, spec: KernelSpec, device_key: str, sizes: Sequence[DataSize]
) -> TrainingSet:
    """Successfully timed points of `spec` at the training `sizes` (with counters when collected)."""
    wanted = set(sizes)
    pts = collected(store, spec, device_key)
    spreads = {
        (m.D, Config(m.params, m.block)): float(m.value.get("spread", math.nan))
        for m in store.measurements(spec.name, device_key, kind="time", status="ok")
    }
    cold = {
        (m.D, Config(m.params, m.block)): (
            float(m.value["median_ms"]),
            float(m.value.get("spread", math.nan)),
        )
        for m in store.measurements(spec.name, device_key, kind="time_cold", status="ok")
    }
    keys = sorted(
        (k for k in pts if k[0] in wanted),
        key=lambda k: (k[0].values(), k[1].params.values(), k[1].block),
    )
    if not keys:
        raise UnmeasuredError(
            f"no successful measurement of {spec.name!r} on {device_key!r} at the training sizes "
            f"{[str(D) for D in sizes]}; collect first (klaraptor build with a GPU)"
        )
    nan2 = (math.nan, math.nan)
    return TrainingSet(
        data_names=spec.data_names,
        D=np.array([k[0].values() for k in keys], dtype=np.float64).reshape(len(keys), -1),
        blocks=np.array([k[1].block for k in keys], dtype=np.float64),
        derived=[pts[k] for k in keys],
        spread=np.array([spreads.get(k, math.nan) for k in keys]),
        cold_ms=np.array([cold.get(k, nan2)[0] for k in keys]),
        cold_spread=np.array([cold.get(k, nan2)[1] for k in keys]),
        params=[k[1].params for k in keys] if spec.params else None,
    )


def collected(
    store: Store, spec: KernelSpec, device: str
) -> dict[tuple[DataSize, Config], dict[str, float]]:
    """Canonical metrics of every successfully timed point of a kernel on a device.

    Keys are (D, configuration). Points with counters get the full set; points measured by
    timing only get `time_ms` and `warps` (exact from block and grid). `sync_per_warp` comes from
    the kernel's collection facts on this device (the PTX barrier count).
    """
    facts = store.collect_facts(spec.name, device)
    sync = None if facts is None else facts.sync_per_warp
    ncu_rows = {
        (m.D, Config(m.params, m.block)): m.value
        for m in store.measurements(spec.name, device, kind="ncu", status="ok")
    }
    out: dict[tuple[DataSize, Config], dict[str, float]] = {}
    for m in store.measurements(spec.name, device, kind="time", status="ok"):
        key = (m.D, Config(m.params, m.block))
        grid = m.value.get("grid")
        if grid is None:
            grid = spec.grid_for(m.D, m.block, m.params if spec.params else None)
        raw = ncu_rows.get(key)
        if raw is None:
            out[key] = {
                "time_ms": float(m.value["median_ms"]),
                "warps": float(expected_warps(m.block, grid)),
            }
        else:
            out[key] = derive(
                raw, m.block, grid, sync_per_warp=sync, time_ms=float(m.value["median_ms"])
            )
    return out
