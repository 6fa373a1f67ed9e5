"""The registered `scaling` model: `klaraptor.models.scaling` behind the model contract.

A `HelperJob` becomes the scaling model's arrays (`ScalingTable`: hot and L2-flushed timings per
point; exact waves and padding per candidate from the spec's grid formula and the occupancy
calculator; the argument footprint from the bytes `make_args` builds at the collected sizes), is
fitted by `fit_scaling`, and its rational program (`ScalingFit.to_program`) becomes the helper
program's model. The helper's tie band is 0: the scaling model ranks by measured times, and a
tie rule (occupancy, fewer threads) would override a measurement by a heuristic. The program's
`band` output (the timing band at L plus the drift seen inside the training data, scaled to the
extrapolation) sizes the online top-k at run time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from klaraptor.core.errors import BuildError, FitError
from klaraptor.core.types import DataSize
from klaraptor.helper.program import HelperProgram
from klaraptor.models.base import BUILTIN_TAGS, HelperJob, Model
from klaraptor.models.scaling import (
    COMPUTE_BOUND,
    Footprint,
    LaunchForm,
    LaunchQuantity,
    ScalingTable,
    exact_quantities,
    fit_scaling,
)

__all__ = ["ScalingModel", "argument_footprint", "scaling_table"]


def argument_footprint(
    names: Sequence[str], arg_bytes: Sequence[tuple[DataSize, int]]
) -> Footprint | None:
    """The exact polynomial through the argument bytes measured at several sizes (None with
    fewer than two sizes: a footprint cannot be extrapolated from one)."""
    pts = sorted({tuple(D.values()): int(b) for D, b in arg_bytes}.items())
    if len(pts) < 2:
        return None
    D = np.array([p[0] for p in pts], dtype=np.float64)
    return Footprint.fit_exact(tuple(names), D, [p[1] for p in pts], source="arguments")


def scaling_table(job: HelperJob) -> ScalingTable:
    """The job's points as the scaling model's table: a hot row per timed point, a cold row per
    L2-flushed timing, with each point's exact fractional waves."""
    index = {b: i for i, b in enumerate(job.candidates)}
    train = job.train
    assert train.cold_ms is not None and train.cold_spread is not None
    waves = _waves_by_size(job)
    D, cfg, ms, cold, spread, w = [], [], [], [], [], []
    for i in range(train.n):
        b = job.key(train.config(i))
        if b not in index:
            continue
        c = index[b]
        key = tuple(int(v) for v in train.D[i])
        rows = [(float(train.derived[i]["time_ms"]), False, float(train.spread[i]))]
        if math.isfinite(train.cold_ms[i]):
            rows.append((float(train.cold_ms[i]), True, float(train.cold_spread[i])))
        for t, is_cold, sp in rows:
            D.append(train.D[i])
            cfg.append(c)
            ms.append(t)
            cold.append(is_cold)
            spread.append(sp)
            w.append(waves[key][c])
    if not cfg:
        raise BuildError(f"{job.spec.name}: no training point of a launchable candidate")
    return ScalingTable(
        D=np.array(D, dtype=np.float64).reshape(len(cfg), -1),
        cfg=np.array(cfg),
        time_ms=np.array(ms),
        cold=np.array(cold),
        spread=np.array(spread),
        waves=np.array(w),
    )


def _exact(job: HelperJob, D: DataSize) -> Any:
    params = None
    if job.spec.params:
        configs = job.configs
        per = [job.attrs_of(c.params) for c in configs]
        attrs: dict[str, Any] = {
            "num_regs": np.array([a.num_regs for a in per]),
            "static_smem": np.array([a.static_smem for a in per], dtype=np.float64),
        }
        params = {n: np.array([float(c.params[n]) for c in configs]) for n in job.spec.param_names}
    else:
        attrs = {"num_regs": job.attrs.num_regs, "static_smem": job.attrs.static_smem}
    return exact_quantities(
        job.spec,
        job.blocks,
        dict(D.items()),
        attrs,
        cc=tuple(job.profile.cc),  # type: ignore[arg-type]
        sm_count=job.profile.sm_count,
        params=params,
    )


def sm_bound_ratio(job: HelperJob, tab: ScalingTable, footprint: Footprint | None) -> float:
    """The fastest hot time at the largest training size over the time its argument footprint
    takes at the device's DRAM bandwidth (nan when either is unknown): about 1 for a kernel
    bound by the memory all SMs share, far above for one bound by its SMs."""
    bw = float(getattr(job.profile, "dram_bandwidth_gbs", math.nan))
    hot = ~tab.cold
    if footprint is None or not (bw > 0) or not hot.any():
        return math.nan
    at_L = hot & (tab.size == tab.size[hot].max())
    fp = float(footprint.bytes(tab.D[at_L][:1])[0])
    if not fp > 0:
        return math.nan
    return float(np.min(tab.time_ms[at_L])) * 1e-3 / (fp / (bw * 1e9))


def launch_quantity(
    job: HelperJob, tab: ScalingTable, footprint: Footprint | None
) -> LaunchQuantity | None:
    """The exact launch quantity (`klaraptor.models.scaling.LaunchQuantity`) of a kernel with
    program parameters: the busiest SM's blocks when it is SM-bound (`sm_bound_ratio` at least
    COMPUTE_BOUND), else the fill of a partial wave (when the occupancy does not depend on D);
    None without parameters (such a kernel is modelled exactly as before) or when the footprint
    or the bandwidth is unknown."""
    ratio = sm_bound_ratio(job, tab, footprint) if job.spec.params else math.nan
    if not math.isfinite(ratio):
        return None
    blocks = np.asarray(job.blocks, dtype=np.float64)
    per = {"bx": blocks[:, 0], "by": blocks[:, 1], "bz": blocks[:, 2]}
    for name in job.spec.param_names:
        per[name] = np.array([float(c.params[name]) for c in job.configs])
    sms = int(job.profile.sm_count)
    if ratio >= COMPUTE_BOUND:
        return LaunchQuantity(LaunchForm.BUSIEST_SM, sms, job.spec.grid_exprs(), per)
    smem = job.spec.smem_expr()
    if smem is not None and set(smem.variables()) & set(job.spec.data_names):
        return None  # the occupancy would change with D
    active = _exact(job, job.train.sizes()[-1]).active_blocks
    return LaunchQuantity(LaunchForm.FILL, sms, job.spec.grid_exprs(), per, active=active)


def _waves_by_size(job: HelperJob) -> dict[tuple[int, ...], np.ndarray]:
    return {D.values(): _exact(job, D).waves for D in job.train.sizes()}


def _variant_info(job: HelperJob) -> dict[str, Any]:
    """Each compiled variant's attributes, for `show` and `explain` (empty without parameters)."""
    if not job.spec.params:
        return {}
    return {
        "variant_attributes": {
            str(pv): a.to_dict()
            for pv, a in sorted(job.variant_attrs.items(), key=lambda kv: kv[0].values())
        }
    }


class ScalingModel(Model):
    """Registry name ``"scaling"`` (see the module docstring and `klaraptor.models.scaling`)."""

    name = "scaling"
    tags = BUILTIN_TAGS["scaling"]

    def make_helper(self, job: HelperJob) -> tuple[HelperProgram, dict[str, Any]]:
        spec = job.spec
        sizes = job.train.sizes()
        tab = scaling_table(job)
        L = sizes[-1]
        exact = {D: _exact(job, D) for D in sizes}
        unpadded = {
            float(np.prod(D.values())): q.launched_threads <= q.launched_threads.min() * (1 + 1e-9)
            for D, q in exact.items()
        }
        footprint = argument_footprint(spec.data_names, job.arg_bytes)
        try:
            fit = fit_scaling(
                tab,
                len(job.candidates),
                data_names=spec.data_names,
                footprint=footprint,
                l2_bytes=float(job.profile.l2_bytes),
                waves_ref=exact[L].waves,
                unpadded=unpadded,
                launch=launch_quantity(job, tab, footprint),
            )
        except FitError as exc:
            raise BuildError(f"{spec.name}: the scaling model cannot be fitted: {exc}") from None
        program = fit.to_program(self.name, clock_mhz=job.profile.sm_clock_mhz)
        report: dict[str, Any] = {
            "n_points": int(tab.cfg.size),
            "cold_points": int(tab.cold.sum()),
            "anchor": list(L.values()),
            "tune_once": fit.tune_once,
            # (kernels without parameters keep their report as it was)
            **({"sm_bound_ratio": sm_bound_ratio(job, tab, footprint)} if spec.params else {}),
            "footprint": None
            if footprint is None
            else {
                "source": footprint.source,
                "bytes_at_anchor": float(footprint.bytes([L.values()])[0]),
                "l2_bytes": float(job.profile.l2_bytes),
            },
            "scaling": fit.to_dict(),
        }
        helper = job.helper_program(
            self.name,
            program,
            hw={},
            band=0.0,
            info={
                "tune_once": fit.tune_once,
                "attributes": job.attrs.to_dict(),
                **_variant_info(job),
                "device": job.profile.key,
                "noise_band": fit.band,
                "drift": fit.drift,
            },
        )
        return helper, report
