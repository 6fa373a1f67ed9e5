"""The registered model ``saake``: abstract kernel emulation turned into a rational program.

Build (`SaakeModel.make_helper`):
1. `KernelEmulator.from_job`: the SASS, trip counts and memory behaviour fitted per
   configuration from the counter points, static coalescing, resource latencies and gaps.
2. Every candidate is emulated at every training size and "beyond": the largest training size
   with each data parameter multiplied by 2, 4 and 8 (within the spec's range).
3. Calibration (``calibrate=True``, the default), inside the emulation: every wave takes
   max(b · work, dispatch) cycles, and t_ms = a + Σ over waves of that (`calibrate`), with
   a >= 0 (the launch's fixed cost and drain overheads, in place of the launch latency) and
   b > 0, fitted on the relative error over the TRAINING timings only. b corrects the emulated
   work; the dispatcher's rate and the launch latency are measured times and are not scaled
   (an affine map of the whole emulated time, used before, scaled them too, and then compared
   the dispatch bound with the unscaled work: it named `launch` where the work, once
   calibrated, exceeds it). The calibrated emulator (`work_scale` = b) is also what the
   sensitivity analysis perturbs. SAAKE itself reports raw emulated times; `calibrate=False`
   gives those.
   The calibration also corrects the L1 (`smem`) and L2 gaps of the kernel by a factor in
   `GAP_FACTORS` each (`calibrated_emulator`), and DRAM's gap too when a training size's
   footprint exceeds the L2 (`gap_resources`: 8 suite kernels, e.g. kmeans and backprop's
   adjust_weights; elsewhere the timings never see DRAM's rate). The microbenchmarks measure
   one access pattern per level; a kernel's may be served faster or slower. Example: the lines that the SMs of both
   L2 partitions read are served by the near partition (ncu's `ltcfabric` sectors are ~0 for
   GEMM, against as many as the L1's for the streaming kernels). The factors change how the
   configurations rank, so they are fitted on the training timings of every candidate, with a
   and b refitted for each pair. They are kept only when the Bayesian information criterion
   prefers them over no correction (n ln(L0 / L1) > k ln n, for k = 2 more parameters).
4. The (calibrated) emulated times of each configuration are fitted as a rational function of
   D (`fit_rational_table`, degrees up to (3, 1), largest size held out), and the helper program
   is those functions (cycles = ms × clock) with the exact occupancy for the tie rule, so
   `select` costs microseconds and the C/Python export works.

``cache_term=False`` is SAAKE without its cache term (§4.4): every global access goes to DRAM,
with the coalescing from the counters or the static analysis.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from klaraptor.core.errors import BuildError, FitError
from klaraptor.core.types import BLOCK_VARS
from klaraptor.device.occupancy import HW_INPUTS, occupancy_program
from klaraptor.fit import FitSettings, fit_rational_table
from klaraptor.fit.training import exact_subprograms, hardware_inputs
from klaraptor.helper.program import HelperProgram
from klaraptor.models.base import BUILTIN_TAGS, KERNEL_QUANTITIES, HelperJob, Model
from klaraptor.models.saake.emulate import MAX_WARPS
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor.program import Expr, Program, call, const, var, where
from klaraptor.spec.expressions import parse_expression

BEYOND = (2, 4, 8)
COLD_STEPS = (1.05, 1.5, 2.0, 4.0)
# Below the crossing, the hot fit gets samples up to it: otherwise sizes between the largest
# training size and the crossing are extrapolated from the training sizes alone.
HOT_STEPS = (1.05, 1.5)
TIME_SETTINGS = FitSettings(max_degree=3, max_den_degree=1)
HARDWARE: tuple[str, ...] = ("hw_clock_ghz", "hw_l2_bytes", *HW_INPUTS)
# The gaps the calibration corrects per kernel, and the factors it tries (module docstring):
# within sqrt(2) of the microbenchmark, so the emulator stays anchored to the measured hardware.
GAP_RESOURCES: tuple[str, ...] = ("l2", "smem")
GAP_FACTORS: tuple[float, ...] = (2**-0.5, 1.0, 2**0.5)


def emulation_sizes(job: HelperJob, em: KernelEmulator | None = None) -> list[tuple[int, ...]]:
    """The training sizes, the largest one scaled by BEYOND, and when the footprint crosses the
    L2 beyond the training sizes, sizes just past the crossing (`COLD_STEPS` times it) and just
    short of it (divided by `HOT_STEPS`, where that is beyond the largest training size), all
    within the spec's range."""
    sizes = [tuple(int(v) for v in D.values()) for D in job.train.sizes()]
    largest = sizes[-1]
    his = [int(p.hi) for p in job.spec.data]

    def scaled(f: float) -> tuple[int, ...]:
        return tuple(min(max(int(round(v * f)), 1), hi) for v, hi in zip(largest, his, strict=True))

    extra = [scaled(f) for f in BEYOND]
    if em is not None and em.footprint(largest) is not None and not em.cold(largest):
        lo, hi = 1.0, 64.0
        if em.cold(scaled(hi)):
            for _ in range(40):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if em.cold(scaled(mid)) else (mid, hi)
            extra += [scaled(hi * g) for g in COLD_STEPS]
            extra += [scaled(lo / g) for g in HOT_STEPS if lo / g > 1.0]
    for d in extra:
        if d not in sizes:
            sizes.append(d)
    return sorted(sizes)


@dataclass
class EmulatedGrid:
    """A kernel's emulator and its emulated ms (sizes x candidates), with timing stats."""

    emulator: KernelEmulator
    sizes: list[tuple[int, ...]]
    ms: np.ndarray
    stats: dict[str, Any]
    _calibrated: tuple[KernelEmulator, float, float] | None = None

    def calibrated(self, job: HelperJob) -> tuple[KernelEmulator, float, float]:
        """`calibrated_emulator` of this grid's emulator on `job`, searched once (the model and
        the evaluation both use it)."""
        if self._calibrated is None:
            self._calibrated = calibrated_emulator(self.emulator, job)
        return self._calibrated


def calibrate(
    parts: Sequence[Sequence[tuple[int, float, float]]], measured_ms: np.ndarray, clock_khz: float
) -> tuple[float, float]:
    """(a ms, b) with a >= 0 and b > 0 minimising sum(((a + e_b - t) / t)^2), where e_b is the sum
    over a timing's waves (`KernelEmulator.wave_parts`: repetitions, work, dispatch cycles) of
    repetitions × max(b · work, dispatch), in ms. For a given b the best a is closed-form; b is
    searched on a log grid over [1e-3, 1e3] and refined. Where the timings do not pin b down
    (every wave dispatch-bound), the b nearest 1 among the best is kept. (0, 1) when fewer than
    two timings can be used."""
    a, b, _, _ = _calibrate(parts, measured_ms, clock_khz)
    return a, b


def _calibrate(
    parts: Sequence[Sequence[tuple[int, float, float]]], measured_ms: np.ndarray, clock_khz: float
) -> tuple[float, float, float, int]:
    """`calibrate`'s (a, b), with the mean squared relative error it leaves and the number of
    timings it used (loss nan and 0 timings when fewer than two can be used)."""
    t = np.asarray(measured_ms, dtype=np.float64)
    keep = [i for i, p in enumerate(parts) if p and math.isfinite(t[i]) and t[i] > 0]
    if len(keep) < 2:
        return 0.0, 1.0, math.nan, 0
    pair = np.concatenate([np.full(len(parts[i]), k) for k, i in enumerate(keep)])
    arr = np.array([w for i in keep for w in parts[i]], dtype=np.float64)
    reps, work, disp = arr[:, 0], arr[:, 1] / clock_khz, arr[:, 2] / clock_khz
    t = t[keep]
    w2 = 1.0 / t**2

    def fit(log_b: float) -> tuple[float, float]:
        e = np.bincount(pair, reps * np.maximum(math.exp(log_b) * work, disp), len(keep))
        a = max(float(np.sum((t - e) * w2) / np.sum(w2)), 0.0)
        return float(np.sum(((a + e - t) / t) ** 2)), a

    grid = np.linspace(math.log(1e-3), math.log(1e3), 121)
    loss = np.array([fit(g)[0] for g in grid])
    near = np.flatnonzero(loss <= loss.min() * (1 + 1e-9) + 1e-15)
    k = int(near[np.argmin(np.abs(grid[near]))])
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = minimize_scalar(lambda g: fit(g)[0], bounds=(lo, hi), method="bounded")
    log_b = float(res.x) if res.success and res.fun < loss[k] else float(grid[k])
    total, a = fit(log_b)
    return a, math.exp(log_b), total / len(keep), len(keep)


def gap_resources(em: KernelEmulator, sizes: Sequence[Sequence[int]]) -> tuple[str, ...]:
    """The resources whose gaps the calibration may correct: the L1 and the L2, and DRAM when
    a training size's footprint exceeds the L2 (only then do the timings see DRAM's rate)."""
    if any(em.cold(D) for D in dict.fromkeys(tuple(D) for D in sizes)):
        return (*GAP_RESOURCES, "dram")
    return GAP_RESOURCES


def calibrated_emulator(
    em: KernelEmulator, job: HelperJob, *, correct_gaps: bool = True
) -> tuple[KernelEmulator, float, float]:
    """(the emulator with work scale b and, where the training timings support them, the
    corrected L1/L2 (and DRAM) gaps (`gap_scale`), a ms, b), fitted on the job's training timings of the
    emulator's candidates (`calibrate`; the gaps: module docstring). The gaps are left alone
    with `correct_gaps=False` or timings of fewer than (corrected resources + 3) candidates (the
    factors are pinned by how the candidates rank)."""
    col = {b: j for j, b in enumerate(em.candidates)}
    points, t = [], []
    for i, d in enumerate(job.train.derived):
        block = tuple(int(v) for v in job.train.blocks[i])
        if block in col and "time_ms" in d:
            points.append((tuple(int(v) for v in job.train.D[i]), col[block]))
            t.append(float(d["time_ms"]))
    clock = float(em.profile.sm_clock_mhz) * 1e3
    times = np.array(t)

    def fit(e: KernelEmulator) -> tuple[float, float, float, int]:
        return _calibrate([e.wave_parts(D, j) for D, j in points], times, clock)

    a, b, loss, n = fit(em)
    best = em
    scale: dict[str, float] = {}
    resources = gap_resources(em, [D for D, _ in points])
    if correct_gaps and len({j for _, j in points}) >= len(resources) + 3:
        found: tuple[float, KernelEmulator, float, float, dict[str, float]] = (
            loss,
            em,
            a,
            b,
            scale,
        )
        for factors in itertools.product(GAP_FACTORS, repeat=len(resources)):
            if all(f == 1.0 for f in factors):
                continue
            params = em.params
            for r, f in zip(resources, factors, strict=True):
                params = params.scaled(r, "gap", f)
            e = replace(em, params=params)
            fa, fb, fl, _ = fit(e)
            if fl < found[0]:
                found = (fl, e, fa, fb, dict(zip(resources, factors, strict=True)))
        # The Bayesian information criterion: k more parameters must pay k ln n (the floor:
        # timings the emulation fits exactly leave nothing to prefer).
        floor = 1e-12
        gain = n * math.log((loss + floor) / (found[0] + floor))
        if gain > len(resources) * math.log(n):
            _, best, a, b, scale = found
    return replace(best, work_scale=b, gap_scale=scale), a, b


class SaakeModel(Model):
    """Registry name ``"saake"`` (see the module docstring)."""

    name = "saake"
    # As a prior it ranks from the SASS alone (`rank`): its fitted model needs counters.
    tags = BUILTIN_TAGS["saake"]

    def __init__(
        self, *, cache_term: bool = True, calibrate: bool = True, max_warps: int = MAX_WARPS
    ) -> None:
        self.cache_term = bool(cache_term)
        self.calibrate = bool(calibrate)
        self.max_warps = int(max_warps)

    def __repr__(self) -> str:
        return (
            f"SaakeModel(cache_term={self.cache_term}, calibrate={self.calibrate}, "
            f"max_warps={self.max_warps})"
        )

    def rank(
        self,
        spec: Any,
        D: Any,
        candidates: Sequence[Any],
        *,
        device: Any,
        store: Any,
    ) -> list[Any]:
        """The candidates (blocks, or `Config`s with program parameters) in order of raw
        emulated time at D, least first, without measuring or counters: each compiled
        variant's SASS emulated with trip counts derived from the kernel's parameters
        (`search.prior_order`). Each variant's attributes are the store's (as collection
        queried them on the GPU), else the compiler's."""
        from klaraptor.models.saake.search import compiled_attributes, prior_order

        facts = store.collect_facts(spec.name, device.key) if store is not None else None

        def attrs(pv: Any) -> Any:
            known = facts.attributes_of(pv) if facts is not None else None
            return known if known is not None else compiled_attributes(spec, pv, device)

        return prior_order(spec, D, candidates, device, attrs)

    def emulator(self, job: HelperJob) -> KernelEmulator:
        return KernelEmulator.from_job(job, cache_term=self.cache_term, max_warps=self.max_warps)

    def emulate_grid(
        self, em: KernelEmulator, sizes: Sequence[tuple[int, ...]]
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Emulated ms (len(sizes), n_cfg) and how long the emulations took."""
        clock = em.profile.sm_clock_mhz * 1e3
        t0 = time.perf_counter()
        before = len(em._runs)
        ms = np.array([em.cycles_all(d) / clock for d in sizes])
        wall = time.perf_counter() - t0
        runs = len(em._runs) - before
        stats = {
            "sizes": [list(d) for d in sizes],
            "emulations": runs,
            "wall_s": wall,
            "ms_per_config_and_size": 1e3 * wall / max(ms.size, 1),
        }
        return ms, stats

    def make_helper(self, job: HelperJob) -> tuple[HelperProgram, dict[str, Any]]:
        t0 = time.perf_counter()
        grid = self.emulated(job)
        helper, report = self.helper_from(job, grid, calibrated=self.calibrate)
        report["fit_s"] = time.perf_counter() - t0
        return helper, report

    def emulated(self, job: HelperJob, em: KernelEmulator | None = None) -> EmulatedGrid:
        """Steps 1-2: the emulator and every candidate's emulated ms at the emulation sizes."""
        em = em or self.emulator(job)
        sizes = emulation_sizes(job, em)
        ms, stats = self.emulate_grid(em, sizes)
        return EmulatedGrid(em, sizes, ms, stats)

    def helper_from(
        self, job: HelperJob, grid: EmulatedGrid, *, calibrated: bool
    ) -> tuple[HelperProgram, dict[str, Any]]:
        """Steps 3-4 on an emulated grid (one grid serves the raw and the calibrated model)."""
        em, sizes, ms = grid.emulator, grid.sizes, grid.ms
        report: dict[str, Any] = {"saake": {**em.report, "emulation": grid.stats}}
        if calibrated:
            fixed = em.launch_ms()
            scaled, a, b = grid.calibrated(job)
            gap_scale = dict(scaled.gap_scale)
            clock = float(em.profile.sm_clock_mhz) * 1e3
            pred = a + np.array([scaled.cycles_all(d) / clock for d in sizes]) - fixed
        else:
            a, b, fixed, pred, gap_scale = 0.0, 1.0, 0.0, ms, {}
        report["saake"]["calibration"] = {
            "a_us": a * 1e3,
            "b": b,
            "gap_scale": gap_scale,
            "launch_us": fixed * 1e3,
            "applied": calibrated,
        }
        cold = [em.cold(d) for d in sizes]
        helper = self._helper(
            job, sizes, pred, report, cold, em.spec.meta.get("min_bytes"), calibrated
        )
        return helper, report

    def _helper(
        self,
        job: HelperJob,
        sizes: Sequence[tuple[int, ...]],
        pred_ms: np.ndarray,
        report: dict[str, Any],
        cold: Sequence[bool],
        footprint: str | None,
        calibrated: bool,
    ) -> HelperProgram:
        spec = job.spec
        cold_a = np.asarray(cold, dtype=bool)
        split = footprint is not None and cold_a.sum() >= 2 and (~cold_a).sum() >= 2
        report["metrics"] = {}
        subs = exact_subprograms(spec, job.attrs)
        parts = {"saake_hot_ms": ~cold_a, "saake_cold_ms": cold_a} if split else {"saake_ms": None}
        for name, rows in parts.items():
            sel = np.ones(len(sizes), dtype=bool) if rows is None else rows
            tf = _fit_times(spec, [d for d, k in zip(sizes, sel, strict=True) if k], pred_ms[sel])
            subs[name] = tf.to_program(name)
            report["metrics"][name] = {
                "method": "table",
                "validation_median": _jsonf(tf.validation_error.median),
                "validation_max": _jsonf(tf.validation_error.max),
                "n_samples": tf.n_samples,
            }
        fp = parse_expression(footprint, spec.data_names) if split and footprint else None
        template = _template(tuple(spec.data_names) + BLOCK_VARS + ("cfg",), fp)
        bound = template.bind({k: v for k, v in subs.items() if k in template.unbound_calls()})
        hw_all = hardware_inputs(job.profile, allow_missing=True)
        hw = {k: hw_all[k] for k in HARDWARE if k in bound.inputs}
        return job.fitted_helper(
            self.name,
            bound,
            hw,
            report,
            saake={
                "cache_term": self.cache_term,
                "calibrated": calibrated,
                "emulated_sizes": [list(s) for s in sizes],
                "l2_regimes": bool(split),
            },
        )


def _fit_times(spec: Any, sizes: Sequence[tuple[int, ...]], pred_ms: np.ndarray) -> Any:
    n_cfg = pred_ms.shape[1]
    D = np.repeat(np.array(sizes, dtype=np.float64), n_cfg, axis=0)
    cfg = np.tile(np.arange(n_cfg, dtype=np.float64), len(sizes))
    y = pred_ms.ravel()
    ok = np.isfinite(y) & (y > 0)
    if not ok.any():
        raise BuildError(f"{spec.name}: saake emulated no launchable configuration")
    try:
        return fit_rational_table(
            D[ok], y[ok], cfg[ok], n_cfg, names=list(spec.data_names), settings=TIME_SETTINGS
        )
    except FitError as exc:
        raise BuildError(
            f"{spec.name}: saake's emulated times could not be fitted: {exc}"
        ) from None


def _template(inputs: Sequence[str], footprint: Expr | None = None) -> Program:
    v = var
    if footprint is None:
        time_ms: Expr = call("saake_ms")
        regime: list[tuple[str, Expr]] = []
    else:
        regime = [("footprint", footprint)]
        time_ms = where(
            v("footprint") > v("hw_l2_bytes"), call("saake_cold_ms"), call("saake_hot_ms")
        )
    assignments: list[tuple[str, Expr]] = [
        *((q, call(q)) for q in KERNEL_QUANTITIES if q != "blocks"),
        ("active_blocks", call("occupancy")),
        ("occupancy", call("occupancy", output="occupancy")),
        *regime,
        ("saake_ms", time_ms),
        (
            "cycles",
            where(
                v("active_blocks") > 0,
                v("saake_ms") * v("hw_clock_ghz") * 1e6,
                const(float("inf")),
            ),
        ),
    ]
    names = list(inputs) + [h for h in HARDWARE if h not in inputs]
    return Program(
        "saake",
        names,
        assignments,
        ["cycles", "occupancy", "active_blocks", "saake_ms"],
        {"occupancy": occupancy_program()},
    )


def _jsonf(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


__all__ = [
    "BEYOND",
    "GAP_FACTORS",
    "GAP_RESOURCES",
    "EmulatedGrid",
    "SaakeModel",
    "calibrate",
    "calibrated_emulator",
    "emulation_sizes",
]
