"""`KernelEmulator`: one kernel's SAAKE emulation at any (configuration, D).

Built from a `HelperJob` (the training points), it holds:
- the SASS (`isa_source`), its emulator ops (`ops`) and count classes (`tripcounts`);
- per configuration, the class counts (trip counts) and the memory behaviour (L1 and L2 hit
  rates, DRAM fraction, sectors per request) estimated at every counter point and fitted as
  rational functions of D (`fit_rational_table`: one function per configuration, the largest
  size held out to choose the degree; configurations without counters share a pooled fit);
- per configuration, the static coalescing (`coalescing`), used only where its sectors per
  request agree with the counters at every counter point of that configuration;
- the resource parameters (latency and gap per resource) of the device profile.

The L2 (an extension of SAAKE's cache term, which takes miss rates measured at the size
emulated): Nsight Compute flushes the caches before it profiles a launch (`--cache-control all`,
its default, which klaraptor's collection keeps), so the counters' L2 hit rate and DRAM traffic
describe a launch that starts with a cold L2. klaraptor's timings repeat launches on the same
arguments. So, with the kernel's footprint F(D) (the spec's `meta["min_bytes"]`, the bytes it
must touch) known:
- F(D) <= L2 size ("hot"): the previous launch left the data in the L2; every L1 miss hits the
  L2 (h2 = 1) and no DRAM traffic is charged (f_dram = 0);
- F(D) > L2 size ("cold"): the counters' fits, with at least F(D) bytes from DRAM per launch
  (f_dram raised to F(D) / L1-to-L2 bytes at D, h2 lowered to 1 - f_dram where they say less).
Without `min_bytes` the counters' (cold) fits are used at every D.

`cycles(D, j)` emulates configuration j at D (full waves and the tail wave). The memory
behaviour is rounded (hit rates and the DRAM fraction to 0.02, sectors per request to 0.5) and
emulations are memoised on what they depend on (the trace, that behaviour, the resident warps,
the bandwidth share and the parameters); trip counts enter only through the extrapolated loop
iterations. So evaluating many sizes of one configuration costs little more than one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from klaraptor.core.errors import BuildError, FitError, KlaraptorError
from klaraptor.core.types import WARP_SIZE
from klaraptor.device.occupancy import active_blocks_per_sm
from klaraptor.fit import FitSettings, fit_rational_table
from klaraptor.isa.analysis import KernelISA
from klaraptor.models.saake import coalescing, ops, tripcounts
from klaraptor.models.saake.emulate import (
    MAX_WARPS,
    BusyShare,
    GridShape,
    Params,
    RegionScale,
    SMResult,
    emulate_sm,
    steady_wave_work,
)
from klaraptor.models.saake.trace import UNROLL_INNER, UNROLL_OUTER, Trace, build_trace

MEMORY = ("l1_hit_rate", "l2_hit_rate", "dram_frac", "gld_sectors_per_req", "gst_sectors_per_req")
_TRAFFIC = "l2_sectors_per_warp"
_MEM_BOUNDS = {
    "l1_hit_rate": (0.0, 1.0),
    "l2_hit_rate": (0.0, 1.0),
    "dram_frac": (0.0, 1.0),
    "gld_sectors_per_req": (1.0, 32.0),
    "gst_sectors_per_req": (1.0, 32.0),
}
COUNT_SETTINGS = FitSettings(max_degree=2, max_den_degree=0)
# Trip counts from the parameters (no counters): the largest training sizes, as the counters'.
PARAMETER_SIZES = 3
MEMORY_SETTINGS = FitSettings(max_degree=1, max_den_degree=1)


def resource_params(profile: Any) -> Params:
    """Latency and gap per resource from a device profile; a profile without them (e.g. the
    recorded suite's, made before the resource microbenchmarks) borrows those of the recorded
    profile of the same GPU (same key: name, driver, clock)."""
    from klaraptor.device.profile import recorded_profile
    from klaraptor.device.resources import FIELDS, OPTIONAL_FIELDS
    from klaraptor.device.resources import resource_params as pairs

    if any(getattr(profile, f, None) is None for f in FIELDS if f not in OPTIONAL_FIELDS):
        try:
            ref = recorded_profile("h200")
        except KlaraptorError:
            ref = None
        if ref is None or ref.key != profile.key:
            raise BuildError(
                f"device profile {profile.key!r} has no latency/gap per resource; run "
                "scripts/device_resources.py on that GPU (klaraptor.collect.resources)"
            )
        profile = ref
    from klaraptor.device.resources import busy_sm_gaps, scatter_store_gaps

    return Params.from_pairs(
        pairs(profile),
        BusyShare.from_measured(busy_sm_gaps(profile), int(profile.sm_count)),
        *scatter_store_gaps(profile),
    )


class _Quantity:
    """One fitted per-configuration quantity: q(D)[j] (clamped to [lo, hi]).

    `growth` (trip counts): the table fit chooses its degree by holding out the largest size,
    so with counters at three sizes it can never choose degree 2 (two points left cannot
    validate three coefficients), and a triangular loop's per-warp count, which grows as D^2
    (CORR k4: 8,536, 33,463, 74,775 iterations at N = 512, 1024, 1536), was extrapolated as a
    line. So a configuration whose counts grow with a log-log slope p >= 1.5 over its training
    sizes gets the least-squares polynomial of degree round(p) (at most `max_degree` and one
    less than its sizes) instead; below 1.5 the table fit stands. Below its smallest counter size
    that polynomial is not used (a quadratic through three points can fall to zero or below
    there: CORR k4's 1024-thread block had 0 inner iterations at N = 256, and an emulated
    0.02 ms against 1.8 ms measured, which then skewed the calibration); the count follows the
    power law of the fitted slope p down from the polynomial's value at that size."""

    GROWTH_DEGREE_FROM = 1.5

    def __init__(
        self,
        names: Sequence[str],
        D: np.ndarray,
        y: np.ndarray,
        cfg: np.ndarray,
        n_cfg: int,
        settings: FitSettings,
        lo: float,
        hi: float,
        growth: bool = False,
    ) -> None:
        self.lo, self.hi, self.n_cfg = lo, hi, n_cfg
        self.method = "constant"
        self.table: Any = None
        self.pooled: Any = None
        self.polynomial: dict[int, np.polynomial.Polynomial] = {}
        self.below: dict[int, tuple[float, float]] = {}  # j -> (smallest size, slope p)
        if growth and D.shape[1] == 1 and isinstance(settings.max_degree, int):
            self._growth_polynomials(D[:, 0], y, cfg.astype(int), settings.max_degree)
        self.const = np.full(n_cfg, float(np.median(y)) if y.size else math.nan)
        have = np.zeros(n_cfg, dtype=bool)
        for j in np.unique(cfg.astype(int)):
            rows = cfg == j
            big = D[rows].sum(axis=1)
            self.const[j] = float(np.mean(y[rows][big == big.max()]))
            have[j] = True
        self.have = have
        if all(
            np.ptp(y[cfg == j]) <= 1e-9 * max(abs(self.const[j]), 1.0) for j in np.flatnonzero(have)
        ):
            return  # constant per configuration: nothing to fit
        try:
            self.table = fit_rational_table(D, y, cfg, n_cfg, names=list(names), settings=settings)
            self.method = "table"
        except FitError:
            self.table = None
        if not have.all():
            try:
                self.pooled = fit_rational_table(
                    D, y, np.zeros(len(y)), 1, names=list(names), settings=settings
                )
            except FitError:
                self.pooled = None

    def _growth_polynomials(self, s: np.ndarray, y: np.ndarray, cfg: np.ndarray, cap: int) -> None:
        for j in np.unique(cfg):
            sizes = np.unique(s[cfg == j])
            means = np.array([y[(cfg == j) & (s == v)].mean() for v in sizes])
            if len(sizes) < 3 or not (means > 0).all() or not (sizes > 0).all():
                continue
            p = float(np.polyfit(np.log(sizes), np.log(means), 1)[0])
            if p < self.GROWTH_DEGREE_FROM:
                continue
            deg = min(int(round(p)), cap, len(sizes) - 1)
            self.polynomial[int(j)] = np.polynomial.Polynomial.fit(sizes, means, deg)
            self.below[int(j)] = (float(sizes[0]), p)

    def __call__(self, d: Sequence[float]) -> np.ndarray:
        out = self.const.copy()
        x = np.asarray(d, dtype=np.float64)[None, :]
        if self.table is not None:
            v = self.table(x, np.arange(self.n_cfg))
            ok = np.isfinite(v) & self.have
            out[ok] = v[ok]
        if self.pooled is not None:
            pv = float(self.pooled(x, 0)[0])
            if math.isfinite(pv):
                out[~self.have] = pv
        for j, poly in self.polynomial.items():
            s0, p = self.below[j]
            at = x[0, 0]
            out[j] = float(poly(at)) if at >= s0 else float(poly(s0)) * (at / s0) ** p
        return np.clip(out, self.lo, self.hi)


@dataclass
class Quantities:
    """Per configuration at one D: class counts (n_cfg, n_classes) and memory behaviour."""

    counts: np.ndarray
    memory: list[ops.MemoryParams]


@dataclass
class KernelEmulator:
    """See the module docstring; construct with `from_job`."""

    spec: Any
    isa: KernelISA
    isa_source: str
    attrs: Any
    profile: Any
    params: Params
    candidates: tuple[tuple[int, int, int], ...]
    cache_term: bool = True
    max_warps: int = MAX_WARPS
    # The calibration's factor on each wave's emulated work (`calibrated`); the dispatcher's
    # time and the launch latency are measured times and are not scaled.
    work_scale: float = 1.0
    # The calibration's factors on resource gaps (`model.calibrated_emulator`), already in
    # `params`; kept for the report.
    gap_scale: dict[str, float] = field(default_factory=dict)
    classes: list[tripcounts.CountClass] = field(default_factory=list)
    counts_fit: list[_Quantity] = field(default_factory=list)
    memory_fit: dict[str, _Quantity] = field(default_factory=dict)
    access: list[dict[int, tuple[int, int, int]] | None] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    _ops: list[ops.StaticOp] = field(default_factory=list)
    _traces: dict[tuple, Trace] = field(default_factory=dict)
    _runs: dict[tuple, SMResult] = field(default_factory=dict)
    _quantities: dict[tuple, Quantities] = field(default_factory=dict)
    _outer: set[int] = field(default_factory=set)
    _entered_by_few: frozenset[str] = frozenset()
    # Where the trip counts come from: "counters" (Nsight Compute at the training sizes) or
    # "parameters" (`interp`: the control flow run with the kernel's parameters). Set "parameters"
    # before fitting to ignore counters; without any, parameters are used.
    trip_source: str = "counters"
    # The compiled variant of a kernel with program parameters (its grid and shared memory
    # depend on the values): None for a kernel without them.
    variant: Mapping[str, int] | None = None

    # -- construction ------------------------------------------------------------------------

    @classmethod
    def from_job(
        cls,
        job: Any,
        *,
        cache_term: bool = True,
        max_warps: int = MAX_WARPS,
        only: Sequence[int] | None = None,
        counters: bool = True,
    ) -> KernelEmulator:
        """Fit everything from the job's counter points (`only`: candidate indices to prepare
        coalescing for, default all). Without counter points, or with `counters=False`, the trip
        counts come from the kernel's parameters (`interp`) and no memory behaviour is known."""
        from klaraptor.models.saake.isa_source import kernel_isa

        isa, source = kernel_isa(job.spec)
        em = cls(
            job.spec,
            isa,
            source,
            job.attrs,
            job.profile,
            resource_params(job.profile),
            tuple(tuple(int(v) for v in b) for b in job.candidates),  # type: ignore[misc]
            cache_term,
            max_warps,
        )
        if not counters:
            em.trip_source = "parameters"
        em._fit(job.train, only)
        return em

    @classmethod
    def from_variant(
        cls,
        spec: Any,
        variant: Any,
        profile: Any,
        attrs: Any,
        blocks: Sequence[tuple[int, int, int]],
        sizes: Sequence[Any],
        *,
        cache_term: bool = True,
        max_warps: int = MAX_WARPS,
    ) -> KernelEmulator:
        """One compiled variant (ParamValues) of a kernel with program parameters, from its SASS
        alone (compiled, never run): trip counts from the parameters (`interp`) at `sizes` (the
        data sizes, any: nothing is measured), `attrs` its compiled attributes, `blocks` the
        candidate blocks. BuildError when the trip counts need the data."""
        from klaraptor.fit.training import TrainingSet
        from klaraptor.models.saake.isa_source import kernel_isa

        isa, source = kernel_isa(spec, variant=variant)
        em = cls(
            spec,
            isa,
            source,
            attrs,
            profile,
            resource_params(profile),
            tuple(tuple(int(v) for v in b) for b in blocks),  # type: ignore[misc]
            cache_term,
            max_warps,
            trip_source="parameters",
            variant=dict(variant.items()),
        )
        D = np.array([[int(v) for v in d.values()] for d in sizes], dtype=np.float64)
        train = TrainingSet(
            spec.data_names, D, np.zeros((len(D), 3)), [{}] * len(D), np.zeros(len(D))
        )
        em._fit(train, None)
        return em

    def _fit(self, train: Any, only: Sequence[int] | None) -> None:
        t0 = time.perf_counter()
        isa = self.isa
        self._ops = ops.static_ops(isa)
        unknown = ops.unknown_opcodes(isa)
        self.report["isa"] = {"source": self.isa_source, "instructions": len(isa.instructions)}
        if unknown:
            self.report["degraded"] = (
                f"SASS opcode(s) {', '.join(unknown)} are not in the classification table "
                "(klaraptor/isa/classify.py); they are emulated as ALU instructions"
            )
        index = {b: i for i, b in enumerate(self.candidates)}
        rows = []
        for i, d in enumerate(train.derived):
            b = tuple(int(v) for v in train.blocks[i])
            if b in index and "inst_per_warp" in d:
                m = dict(d)
                frac = ops.dram_fraction(m)
                if frac is not None:
                    m["dram_frac"] = frac
                rows.append((tuple(train.D[i]), b, m))
        if rows and self.trip_source != "parameters":
            tc = tripcounts.estimate_points(isa, rows, self._top_limits())
            self.trip_source = "counters"
            if "top_limited_points" in tc.report:
                self.report["top_limited_points"] = tc.report["top_limited_points"]
            self._entered_by_few = frozenset(
                tc.classes[j].name for _, _, sol in tc.points for j in sol.limited
            )
        else:
            rows, tc = self._parameter_points(train, only)
        self.report["trip_source"] = self.trip_source
        self.classes = tc.classes
        cfg = isa.sass_cfg
        assert cfg is not None
        names = [c.name for c in self.classes]
        for lp in cfg.loops:
            if any(q.parent == cfg.loops.index(lp) for q in cfg.loops):
                h = f"loop@{isa.instructions[cfg.blocks[lp.header].start].addr:#x}"
                if h in names:
                    self._outer.add(names.index(h))
        n_cfg = len(self.candidates)
        D = np.array([r[0] for r in rows], dtype=np.float64).reshape(len(rows), -1)
        cfg_idx = np.array([index[r[1]] for r in rows], dtype=np.float64)
        counts = np.array([s.counts for _, _, s in tc.points])
        dn = self.spec.data_names
        self.counts_fit = [
            _Quantity(dn, D, counts[:, k], cfg_idx, n_cfg, COUNT_SETTINGS, 0.0, math.inf, True)
            for k in range(len(self.classes))
        ]
        for name in (*MEMORY, _TRAFFIC):
            lo, hi = _MEM_BOUNDS.get(name, (0.0, math.inf))
            y = np.array([r[2].get(name, math.nan) for r in rows], dtype=np.float64)
            ok = np.isfinite(y)
            if ok.any():
                self.memory_fit[name] = _Quantity(
                    dn, D[ok], y[ok], cfg_idx[ok], n_cfg, MEMORY_SETTINGS, lo, hi
                )
        self.report["trip_counts"] = {
            "classes": [
                {"name": c.name, "kind": c.kind, "blocks": len(c.blocks)} for c in self.classes
            ],
            "points": len(tc.points),
            "median_misfit": tc.median_misfit(),
            "max_misfit": max((s.max_misfit for _, _, s in tc.points), default=0.0),
        }
        self.access = [None] * n_cfg
        agree = 0
        wanted = range(n_cfg) if only is None else only
        by_cfg: dict[int, list[int]] = {}
        for k, (_, b, _) in enumerate(rows):
            by_cfg.setdefault(index[b], []).append(k)
        for j in wanted:
            acc = self._static_access(j, [(rows[k][2], counts[k]) for k in by_cfg.get(j, [])])
            self.access[j] = acc
            agree += acc is not None and any(
                self.isa.instructions[i].opcode not in coalescing.SHARED_OPCODES for i in acc
            )
        self.report["coalescing"] = {"static_used": agree, "of": len(list(wanted))}
        self.report["fit_s"] = time.perf_counter() - t0

    def _parameter_points(
        self, train: Any, only: Sequence[int] | None
    ) -> tuple[list[tuple[tuple[int, ...], tuple[int, int, int], dict[str, float]]], Any]:
        """Trip counts without counters (`interp`): every candidate (`only`: those) run at the
        `PARAMETER_SIZES` largest training sizes (`interp.sample_warps`' warps each); no
        memory behaviour (the counters' L1 and L2 hit rates are unknown: the cache term keeps
        only the footprint's L2 rule). BuildError naming why when the counts depend on data."""
        from klaraptor.models.saake import interp

        isa = self.isa
        try:
            runner = interp.WarpInterpreter(isa)
        except interp.DataDependent as exc:
            raise BuildError(f"{self.spec.name}: no counters, and {exc}") from None
        classes = tripcounts.count_classes(isa)
        tc = tripcounts.TripCounts(classes, tripcounts.static_matrix(isa, classes))
        sizes = sorted({tuple(int(v) for v in d) for d in train.D})[-PARAMETER_SIZES:]
        wanted = range(len(self.candidates)) if only is None else only
        rows: list[tuple[tuple[int, ...], tuple[int, int, int], dict[str, float]]] = []
        for d in sizes:
            D = self.spec.size(dict(zip(self.spec.data_names, d)))
            for j in wanted:
                block = self.candidates[j]
                pc = interp.counts_from_parameters(
                    runner, classes, self.spec, D, block, variant=self.variant
                )
                if pc.counts is None:
                    raise BuildError(
                        f"{self.spec.name}: no counters, and its trip counts cannot be derived "
                        f"from its parameters: {pc.reason}"
                    )
                tc.points.append((d, block, tripcounts.CountSolution(pc.counts, {}, ())))
                rows.append((d, block, {}))
        self.trip_source = "parameters"
        return rows, tc

    def _top_limits(
        self,
    ) -> Callable[[tuple[int, ...], tuple[int, int, int]], Sequence[float] | None]:
        """(D values, block) -> per class, the fraction of warps the kernel's parameters let reach
        it (`interp`), for the counter fit's top-level classes where the counters leave them
        open (`tripcounts.solve_counts`); None where the interpreter cannot tell. The
        interpreter is made on first use; why it could not run is reported."""
        from klaraptor.models.saake import interp

        state: dict[str, Any] = {}

        def limits(d: tuple[int, ...], block: tuple[int, int, int]) -> Sequence[float] | None:
            if "runner" not in state:
                try:
                    state["runner"] = interp.WarpInterpreter(self.isa)
                except (interp.DataDependent, KlaraptorError) as exc:
                    state["runner"] = None
                    self.report["top_limits"] = f"not from the parameters: {exc}"
                state["classes"] = tripcounts.count_classes(self.isa)
            if state["runner"] is None:
                return None
            D = self.spec.size(dict(zip(self.spec.data_names, d)))
            pc = interp.counts_from_parameters(
                state["runner"], state["classes"], self.spec, D, block, variant=self.variant
            )
            if pc.counts is None:
                self.report["top_limits"] = f"not from the parameters: {pc.reason}"
                return None
            return [float(v) for v in pc.counts]

        return limits

    def _static_access(
        self, j: int, points: Sequence[tuple[Mapping[str, float], np.ndarray]]
    ) -> dict[int, tuple[int, int, int]] | None:
        """The static (sectors, lines, L1 wavefronts) of configuration j's global accesses,
        when every counter point of j agrees with them, and the bank conflicts of its known
        shared-memory accesses (None when neither applies: the counters' averages are used)."""
        if not points:
            return None
        every = coalescing.warp_access(self.isa, self.candidates[j])
        # Shared-memory accesses stand alone: each known one gets its bank conflicts, and an
        # unknown one keeps one wavefront without voiding the global accesses' analysis.
        shared = {
            i: (a.sectors, a.lines, a.wavefronts)
            for i, a in every.items()
            if a is not None and self.isa.instructions[i].opcode in coalescing.SHARED_OPCODES
        }
        acc = {
            i: a
            for i, a in every.items()
            if self.isa.instructions[i].opcode not in coalescing.SHARED_OPCODES
        }
        if any(a is None for a in acc.values()):
            return shared or None
        cfg = self.isa.sass_cfg
        assert cfg is not None
        cls_of = {b: k for k, c in enumerate(self.classes) for b in c.blocks}
        for metrics, x in points:
            for kind, key in (("global_load", "gld"), ("global_store", "gst")):
                num = den = 0.0
                for i, a in acc.items():
                    if self.isa.sass_classes[i].cls != kind or a is None:
                        continue
                    w = float(x[cls_of[cfg.block_of[i]]])
                    num, den = num + w * a.sectors, den + w
                meas = metrics.get(f"{key}_sectors_per_req")
                if den > 0 and meas and not coalescing.agrees_with(num / den, meas):
                    return shared or None
        return shared | {
            i: (a.sectors, a.lines, a.wavefronts) for i, a in acc.items() if a is not None
        }

    # -- evaluation --------------------------------------------------------------------------

    def footprint(self, D: Sequence[int]) -> float | None:
        """Bytes the kernel must touch at D (the spec's meta["min_bytes"]), None if unknown."""
        text = (getattr(self.spec, "meta", None) or {}).get("min_bytes")
        if not text:
            return None
        from klaraptor.spec.expressions import evaluate_exprs, parse_expression

        try:
            expr = parse_expression(str(text), self.spec.data_names)
            env = dict(zip(self.spec.data_names, (float(v) for v in D)))
            return float(evaluate_exprs({"f": expr}, env)["f"])
        except KlaraptorError:
            return None

    def cold(self, D: Sequence[int]) -> bool:
        """Whether the footprint at D exceeds the L2 (see the module docstring)."""
        f = self.footprint(D)
        return f is not None and f > float(self.profile.l2_bytes)

    def quantities(self, D: Sequence[int]) -> Quantities:
        key = tuple(int(v) for v in D)
        q = self._quantities.get(key)
        if q is None:
            counts = np.column_stack([f(key) for f in self.counts_fit])
            counts[:, [k for k, c in enumerate(self.classes) if c.kind == "entry"]] = 1.0
            vals = {k: f(key) for k, f in self.memory_fit.items()}
            if self.cache_term and self.footprint(key) is not None:
                if self.cold(key):
                    self._capacity(key, vals)
                else:
                    n = len(self.candidates)
                    vals["l2_hit_rate"], vals["dram_frac"] = np.ones(n), np.zeros(n)
            mems = []
            for j in range(len(self.candidates)):
                keep = MEMORY if self.cache_term else ("gld_sectors_per_req", "gst_sectors_per_req")
                m = {k: float(vals[k][j]) for k in keep if k in vals}
                mems.append(_rounded(ops.MemoryParams.from_metrics(m)))
            q = self._quantities[key] = Quantities(counts, mems)
        return q

    def _capacity(self, D: tuple[int, ...], vals: dict[str, np.ndarray]) -> None:
        """Raise the DRAM fraction to the footprint's share of the L2 traffic (cold L2)."""
        traffic = vals.get(_TRAFFIC)
        footprint = self.footprint(D)
        if traffic is None or footprint is None:
            return
        warps = np.array(
            [
                self.shape(D, j).blocks * self.shape(D, j).warps_per_block
                for j in range(len(traffic))
            ]
        )
        total = 32.0 * traffic * warps
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.clip(np.where(total > 0, footprint / total, 1.0), 0.0, 1.0)
        frac = np.maximum(vals.get("dram_frac", need), need)
        vals["dram_frac"] = frac
        if "l2_hit_rate" in vals:
            vals["l2_hit_rate"] = np.minimum(vals["l2_hit_rate"], 1.0 - frac)

    def shape(self, D: Sequence[int], j: int) -> GridShape:
        bx, by, bz = self.candidates[j]
        Dm = dict(zip(self.spec.data_names, (int(v) for v in D)))
        gx, gy, gz = self.spec.grid_arrays(Dm, float(bx), float(by), float(bz), self.variant)
        blocks = float(gx * gy * gz)
        threads = bx * by * bz
        smem = self.attrs.static_smem + float(
            self.spec.dynamic_smem_arrays(Dm, bx, by, bz, params=self.variant)
        )
        active = int(active_blocks_per_sm(threads, self.attrs.num_regs, smem, self.profile.cc))
        ok = math.isfinite(blocks) and blocks >= 1 and blocks == math.floor(blocks)
        return GridShape(
            int(blocks) if ok else 0, active, -(-threads // WARP_SIZE), self.profile.sm_count
        )

    def _trace(self, x: np.ndarray) -> Trace:
        q = self._quantised(x)
        key = tuple(np.round(q, 3).tolist())
        tr = self._traces.get(key)
        if tr is None:
            tr = self._traces[key] = build_trace(
                self.isa, self.classes, q, entered_by_few=self._entered_by_few
            )
        return tr

    def _quantised(self, x: np.ndarray) -> np.ndarray:
        """Counts that give the same trace: a loop past its unrolling is cut to it."""
        q = np.round(np.asarray(x, dtype=np.float64), 2)
        names = {c.name: k for k, c in enumerate(self.classes)}
        for k, c in enumerate(self.classes):
            if c.kind != "loop":
                continue
            pc = q[names[c.parent]] if c.parent in names else 1.0
            cap = (UNROLL_OUTER if k in self._outer else UNROLL_INNER) * pc
            if pc > 0 and x[k] >= cap:
                q[k] = cap
        return q

    def sm_work(
        self,
        j: int,
        x: np.ndarray,
        mem: ops.MemoryParams,
        active_warps: int,
        share: float,
        params: Params | None = None,
        region: RegionScale | None = None,
    ) -> tuple[float, SMResult]:
        """(unscaled work cycles of one SM with these counts, the emulation it extrapolates
        from): the emulated trace plus the loop iterations it left out. `region`: one resource
        parameter scaled in one code region only (`emulate.RegionScale`)."""
        p = params or self.params
        tr = self._trace(x)
        mkey = (mem.l1_hit, mem.l2_hit, mem.dram_frac, mem.ld_sectors, mem.st_sectors)
        key = (
            j,
            id(tr),
            mkey,
            active_warps,
            round(share, 4),
            p.lat.tobytes(),
            p.gap.tobytes(),
            p.scatter,
            p.busy,
            region,
        )
        res = self._runs.get(key)
        if res is None:
            bx, by, bz = self.candidates[j]
            res = emulate_sm(
                tr,
                self._ops,
                p,
                mem,
                active_warps=active_warps,
                warps_per_block=-(-(bx * by * bz) // WARP_SIZE),
                bandwidth_share=share,
                max_warps=self.max_warps,
                access=self.access[j] if j < len(self.access) else None,
                region=region,
            )
            self._runs[key] = res
        extra = 0.0
        for lp in tr.loops:
            if lp.weight > 0:
                missing = max(float(x[lp.cls]) - lp.accounted, 0.0) / lp.weight
                extra += missing * res.periods.get(lp.name, 0.0)
        return res.emulated + extra, res

    def wave_parts(
        self,
        D: Sequence[int],
        j: int,
        params: Params | None = None,
        region: RegionScale | None = None,
    ) -> list[tuple[int, float, float]]:
        """[(repetitions, unscaled work cycles, dispatch cycles)] of configuration j's waves at D
        (empty when it cannot launch): the first full wave as emulated, the later full waves at
        their steady work (`emulate.steady_wave_work`), then the tail wave. What the time sums
        (`cycles`) and the calibration fits the work scale on."""
        shape = self.shape(D, j)
        if shape.active_blocks <= 0 or shape.blocks <= 0:
            return []
        q = self.quantities(D)
        x, mem = q.counts[j], q.memory[j]
        out = []
        for reps, per_sm, share in shape.waves():
            work, res = self.sm_work(
                j, x, mem, per_sm * shape.warps_per_block, share, params, region
            )
            out.append((min(reps, 1), work, res.dispatch))
            if reps > 1:
                alone, _ = self.sm_work(j, x, mem, shape.warps_per_block, share, params, region)
                out.append((reps - 1, steady_wave_work(work, res, alone), res.dispatch))
        return out

    def cycles(
        self,
        D: Sequence[int],
        j: int,
        params: Params | None = None,
        region: RegionScale | None = None,
    ) -> float:
        """Predicted cycles of configuration j at D (inf when it cannot launch); `region`: one
        resource parameter scaled in one code region only."""
        parts = self.wave_parts(D, j, params, region)
        if not parts:
            return math.inf
        total = float((params or self.params).lat[ops.R["launch"]])
        # each wave: its work, scaled by the calibration, but never less than its dispatch
        return total + sum(r * max(self.work_scale * w, d) for r, w, d in parts)

    def demand_by_op(self, D: Sequence[int], j: int) -> np.ndarray:
        """Per static instruction: its warp instructions per warp at D (its class count) times
        its demand in gaps of each resource, (instructions x RESOURCES): where a configuration's
        work goes, with no emulation."""
        q = self.quantities(D)
        x = q.counts[j]
        cfg = self.isa.sass_cfg
        assert cfg is not None
        count = np.zeros(len(self._ops))
        for k, c in enumerate(self.classes):
            for b in c.blocks:
                blk = cfg.blocks[b]
                count[blk.start : blk.end] = float(x[k])
        _, dem = ops.op_costs(
            self._ops,
            self.params.lat,
            q.memory[j],
            self.access[j] if j < len(self.access) else None,
            self.params.scatter,
        )
        return dem * count[:, None]

    def shared_share(self, D: Sequence[int], j: int) -> float | None:
        """The share of the L1/shared pipe's demand (`smem`) that shared-memory instructions make
        (the rest is global loads and stores); None when the pipe has no demand."""
        dem = self.demand_by_op(D, j)[:, ops.R["smem"]]
        total = float(dem.sum())
        if total <= 0:
            return None
        shared = [i for i, op in enumerate(self._ops) if op.kind == ops.SHARED]
        return float(dem[shared].sum()) / total

    def launch_ms(self) -> float:
        """The launch latency every emulated time includes, in ms."""
        return float(self.params.lat[ops.R["launch"]]) / (float(self.profile.sm_clock_mhz) * 1e3)

    def utilisation(self, D: Sequence[int], j: int) -> dict[str, float]:
        """Per resource: the fraction of configuration j's emulated time it is busy (its
        admitted gaps over the emulated time, full waves weighted by their repetitions)."""
        shape = self.shape(D, j)
        if shape.active_blocks <= 0 or shape.blocks <= 0:
            return {}
        q = self.quantities(D)
        busy = np.zeros(len(ops.RESOURCES))
        span = 0.0
        for reps, per_sm, share in shape.waves():
            _, res = self.sm_work(
                j, q.counts[j], q.memory[j], per_sm * shape.warps_per_block, share
            )
            busy += reps * res.busy
            span += reps * res.emulated
        return {r: float(busy[k] / span) if span > 0 else 0.0 for k, r in enumerate(ops.RESOURCES)}

    def cycles_all(self, D: Sequence[int], params: Params | None = None) -> np.ndarray:
        return np.array([self.cycles(D, j, params) for j in range(len(self.candidates))])

    def without_cache_term(self) -> KernelEmulator:
        """The same kernel emulated with every access a coalesced-or-counted DRAM access."""
        return replace(self, cache_term=False, _runs={}, _quantities={})


def _rounded(m: ops.MemoryParams) -> ops.MemoryParams:
    """Memory behaviour on the grid emulations are memoised on (see the module docstring)."""

    def r(v: float, step: float) -> float:
        return round(round(v / step) * step, 6)

    return ops.MemoryParams(
        r(m.l1_hit, 0.02),
        r(m.l2_hit, 0.02),
        r(m.dram_frac, 0.02),
        max(r(m.ld_sectors, 0.5), 1.0),
        max(r(m.st_sectors, 0.5), 1.0),
    )


__all__ = ["MEMORY", "KernelEmulator", "Quantities", "resource_params"]
