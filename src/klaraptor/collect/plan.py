"""A measurement plan under a budget, and the cost model that prices it.

Tune-once costs one sweep of every candidate at the largest training size L (one worker session
plus every point). The plan for the scaling model (`klaraptor.models.scaling`) spends at most
`budget` times that, counters included:

1. the same hot sweep at L (every candidate: the anchors; tune-once's answer comes free). With a
   `prior` (candidate indices best first, e.g. SNOWPACK's ranking, which needs no measurement)
   the sweep goes in its order, and with `prior_keep` = k only its first k are timed: the others
   get no anchor and are never chosen, and tune-once's cost (the budget's unit) is then the
   partial sweep's plus the median timed point's cost for each candidate left out (an
   estimate, reported as such);
2. if the kernel's footprint exceeds the L2 somewhere in the sizes it will be used at while it
   fits at L, cold timings at L (the L2 flushed before each launch) in order of the hot time,
   stopping when the next candidate's hot time, less the noise band, exceeds the best cold time
   found: a cold run is never faster than a hot one, so no later candidate can win the cold
   regime. It leaves what step 3 needs for the `ladder_reserve` best hot candidates (their
   smaller sizes are the only evidence of growth; the cold sweep once took the whole budget);
3. with what is left, hot timings of the most promising candidates (best rank in either regime)
   at the smaller sizes M = the largest ≤ L/2 and the largest ≤ M/2: the shared growth law, the
   per-configuration deviations with their ×2 fold, and the drift that sizes online top-k;
4. optionally (``counters=True``) Nsight Compute on tune-once's block at L and M for the bytes the
   kernel really touches (a tighter footprint than the argument sizes) when the budget allows.

A point is scheduled only if its estimated cost fits in what is left; estimates are upper bounds
from what is already measured (a smaller size is not slower than L, though a shorter kernel may
be timed with more launches; a cold run is at most `cold_ratio_bound` times the hot one until a
larger ratio is seen).

The plan is a pure function of the results it has seen (`MeasurementPlan.run` over a `Measurer`),
so the same code runs offline over recorded measurements (`TableMeasurer`) and on the device,
where a collection worker replays it over the results so far and measures the next point it asks
for (`MeasurementPlan.next_points`): the same results give the same plan, and a worker replaced
after a crash picks up where the last one stopped.

Cost model (`CostModel`): a timed point costs ``per_point_s`` of host overhead (worker round trip,
output check, sample bookkeeping) plus the launches of the timing protocol times the kernel time
(at least the launch floor); a cold point launches once per sample (no batching) and adds the L2
flush; a profiled point costs ``ncu_point_s`` plus ``ncu_replay`` times the replay passes times the
kernel time, and each Nsight Compute process ``ncu_session_s``. Constants are fitted from the
recorded per-kernel phase costs (`fit_cost_model`). On the device a timed point's cost is its
measured wall in the session, from the end of the previous point (replanning, argument set-up and
reference outputs included), so the ratio the plan keeps under the budget is measured in one run;
the model then only prices points not yet measured, and the first candidate at the smaller sizes
is charged their set-up as well (arguments and reference outputs: at most what they took at L,
scaled by the argument bytes when known, `setup_scale`: charging L's whole set-up to each smaller
size left 5 of the 10 tunables kernels with no smaller size timed).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from klaraptor.core.errors import KlaraptorError

__all__ = [
    "H200_COST",
    "CostModel",
    "MeasurementPlan",
    "Measurer",
    "NeedMeasurement",
    "PlanResult",
    "PointKey",
    "ReplayMeasurer",
    "TableMeasurer",
    "calibrated",
    "fit_cost_model",
    "ladder",
    "protocol_launches",
    "run_plan",
]

# Plain CuPy launch of an empty kernel on the H200 (benchmarks/results/h200/bench_select.json):
# back-to-back launches of shorter kernels are host-bound.
LAUNCH_FLOOR_MS = 4.14e-3
# Median worker start-up ("info" + "plan" steps) of the 30 recorded time phases
# (benchmarks/results/h200/collect_logs/session11.suite.jsonl).
SESSION_S = 0.65
# Replay passes assumed before profiling (the recorded suite needed 4 for RAW_METRICS).
NCU_PASSES_BOUND = 8.0

# (D values, candidate index, cold): one point a plan can ask for.
PointKey = tuple[tuple[int, ...], int, bool]


def protocol_launches(
    t_ms: float,
    *,
    warmup: int = 2,
    min_time_ms: float = 5.0,
    min_repeats: int = 5,
    max_repeats: int = 30,
    target_sample_ms: float = 0.2,
    max_inner: int = 100,
    batched: bool = True,
) -> int:
    """Launches of one timed point under the timing protocol (gpu.backend.Timer.measure):
    warm-up, one probe, then samples of `inner` launches until `min_time_ms` is measured."""
    t = max(float(t_ms), 1e-9)
    inner = 1
    if batched and t < target_sample_ms:
        inner = int(min(max_inner, max(1, math.ceil(target_sample_ms / t))))
    n = max(min_repeats, min(max_repeats, math.ceil(min_time_ms / (t * inner))))
    return warmup + 1 + n * inner


@dataclass(frozen=True)
class CostModel:
    """Seconds of device-side collection per measured point (see the module docstring)."""

    per_point_s: float = 0.03
    session_s: float = SESSION_S
    launch_floor_ms: float = LAUNCH_FLOOR_MS
    flush_ms: float = 0.032  # 2 × 60 MB written at ~3.9 TB/s
    # Extra start-up for the cold timings: 0 when the worker that times the hot sweep flushes
    # per point (what `collect_planned` does); `session_s` for a separate collection.
    cold_session_s: float = 0.0
    ncu_session_s: float = 2.88
    ncu_point_s: float = 0.153
    ncu_replay: float = 1.27
    ncu_batch: int = 150
    protocol: Mapping[str, Any] = field(
        default_factory=lambda: {
            "warmup": 2,
            "min_time_ms": 5.0,
            "min_repeats": 5,
            "max_repeats": 30,
            "target_sample_ms": 0.2,
            "max_inner": 100,
        }
    )

    def time_point_s(self, t_ms: float) -> float:
        n = protocol_launches(t_ms, **self.protocol)
        return self.per_point_s + n * max(float(t_ms), self.launch_floor_ms) / 1e3

    def time_point_bound_s(self, t_ms: float) -> float:
        """The most a hot point of kernel time ≤ `t_ms` can cost: shorter kernels are batched
        and repeated more, so a smaller size can cost more than the larger one."""
        # Cached: a device's plan loop replays the plan once per request, and this grid was
        # most of a replay's time (60 % on the recorded GEMM).
        return _point_bound_s(
            self.per_point_s,
            self.launch_floor_ms,
            tuple(sorted(self.protocol.items())),
            float(t_ms),
        )

    def cold_point_s(self, t_ms: float) -> float:
        t = max(float(t_ms), self.launch_floor_ms) + self.flush_ms
        n = protocol_launches(t, **{**self.protocol, "max_inner": 1}, batched=False)
        return self.per_point_s + n * t / 1e3

    def ncu_s(self, points: Sequence[tuple[float, float]]) -> float:
        """Profiling `points` ((kernel ms, replay passes) each) in one batched pass."""
        if not points:
            return 0.0
        sessions = math.ceil(len(points) / self.ncu_batch)
        return (
            sessions * self.ncu_session_s
            + len(points) * self.ncu_point_s
            + self.ncu_replay * sum(p * t / 1e3 for t, p in points)
        )

    def sweep_s(self, times_ms: Sequence[float]) -> float:
        """One session timing every point (tune-once's cost with the times at L)."""
        return self.session_s + sum(self.time_point_s(t) for t in times_ms)

    def to_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if k == "protocol" else v) for k, v in self.__dict__.items()}


@functools.lru_cache(maxsize=8192)
def _point_bound_s(
    per_point_s: float, launch_floor_ms: float, protocol: tuple[tuple[str, Any], ...], t_ms: float
) -> float:
    """`CostModel.time_point_bound_s` of the model with these constants."""
    model = CostModel(
        per_point_s=per_point_s, launch_floor_ms=launch_floor_ms, protocol=dict(protocol)
    )
    grid = np.geomspace(1e-6, max(t_ms, 2e-6), 48)
    return max(model.time_point_s(float(t)) for t in grid)


# The cost model fitted on the recorded H200 training phases (`fit_cost_model` over the 30
# PolyBench kernels of data/h200_suite.json.gz: per_point_s is the median per-kernel overhead of a
# timed point with the output check; the ncu constants an NNLS fit over the 30 counter phases).
H200_COST = CostModel(
    per_point_s=0.02804, ncu_session_s=3.2701, ncu_point_s=0.15188, ncu_replay=1.2799
)


def fit_cost_model(
    phases: Sequence[Mapping[str, Any]], *, session_s: float = SESSION_S
) -> tuple[CostModel, dict[str, float]]:
    """Constants from recorded collection phases.

    Each phase: ``{"kernel", "train_time_s", "time_ms": [median ms of every timed point],
    "train_ncu_s", "ncu": [(ms, replay passes) of every profiled point]}``. Returns the shared
    model (its `per_point_s` the median over kernels) and each kernel's own per-point overhead:
    (phase seconds - session - launches × kernel time) / points."""
    from scipy.optimize import nnls

    base = CostModel(session_s=session_s)
    per_kernel: dict[str, float] = {}
    rows, ys = [], []
    for ph in phases:
        t = [float(v) for v in ph["time_ms"]]
        if t and math.isfinite(float(ph.get("train_time_s", math.nan))):
            launch = sum(protocol_launches(v) * max(v, base.launch_floor_ms) for v in t) / 1e3
            per_kernel[str(ph["kernel"])] = max(
                0.0, (float(ph["train_time_s"]) - session_s - launch) / len(t)
            )
        ncu = ph.get("ncu") or []
        if ncu and math.isfinite(float(ph.get("train_ncu_s", math.nan))):
            rows.append(
                [
                    math.ceil(len(ncu) / base.ncu_batch),
                    len(ncu),
                    sum(p * v / 1e3 for v, p in ncu),
                ]
            )
            ys.append(float(ph["train_ncu_s"]))
    if not per_kernel:
        raise KlaraptorError("fit_cost_model: no phase with timing costs and points")
    model = replace(base, per_point_s=float(np.median(list(per_kernel.values()))))
    if len(rows) >= 3:
        c, _ = nnls(np.array(rows, dtype=np.float64), np.array(ys))
        model = replace(
            model, ncu_session_s=float(c[0]), ncu_point_s=float(c[1]), ncu_replay=float(c[2])
        )
    return model, per_kernel


# ---------------------------------------------------------------------------------------------
# Measurers: where the plan's measurements come from


class Measurer(Protocol):
    """What the plan needs from the device (or from a recorded dataset, offline)."""

    def time(
        self, D: tuple[int, ...], cfgs: Sequence[int], *, cold: bool
    ) -> dict[int, tuple[float, ...]]:
        """{cfg: (median ms, relative IQR[, measured wall seconds[, of which set-up]])} for
        the candidates that ran; with the wall, the plan counts it as the point's cost instead
        of the cost model; set-up is building a new size's arguments and reference outputs."""
        ...

    def counters(self, points: Sequence[tuple[tuple[int, ...], int]]) -> list[dict[str, Any]]:
        """One profiling pass over (D, cfg) points: [{"D", "cfg", "dram_bytes", "passes",
        "ms"}] for those profiled (none when counters are unavailable)."""
        ...


@dataclass
class TableMeasurer:
    """A `Measurer` answering from recorded measurements (offline plan development).

    `hot`/`cold`: {(D, cfg): (ms, relative IQR)}; `counters`: {(D, cfg): {...}}."""

    hot: Mapping[tuple[tuple[int, ...], int], tuple[float, float]]
    cold: Mapping[tuple[tuple[int, ...], int], tuple[float, float]] = field(default_factory=dict)
    profiled: Mapping[tuple[tuple[int, ...], int], Mapping[str, float]] = field(
        default_factory=dict
    )

    def time(
        self, D: tuple[int, ...], cfgs: Sequence[int], *, cold: bool
    ) -> dict[int, tuple[float, float]]:
        src = self.cold if cold else self.hot
        return {c: src[(tuple(D), c)] for c in cfgs if (tuple(D), c) in src}

    def counters(self, points: Sequence[tuple[tuple[int, ...], int]]) -> list[dict[str, Any]]:
        return [
            {"D": list(D), "cfg": int(c), **self.profiled[(tuple(D), c)]}
            for D, c in points
            if (tuple(D), c) in self.profiled
        ]


class NeedMeasurement(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by `ReplayMeasurer` for the points the plan asks for whose results are unknown."""

    def __init__(self, keys: Sequence[PointKey]) -> None:
        super().__init__(f"{len(keys)} points to measure")
        self.keys = list(keys)


@dataclass
class ReplayMeasurer:
    """A `Measurer` answering from the results known so far.

    `results`: {PointKey: (ms, spread[, wall s]), or None for a point that failed}; `exists`: the points
    that can be measured at all (launchable, admissible; None: every point). A request with an
    unknown point raises `NeedMeasurement` with every unknown point of that request, so replaying
    the plan, measuring those and replaying again runs the plan request by request. Counter
    requests are recorded in `counter_requests` and answered from `counter_results`."""

    results: Mapping[PointKey, tuple[float, ...] | None]
    exists: Collection[PointKey] | None = None
    counter_results: Mapping[tuple[tuple[int, ...], int], Mapping[str, float]] = field(
        default_factory=dict
    )
    counter_requests: list[tuple[tuple[int, ...], int]] = field(default_factory=list)

    def time(
        self, D: tuple[int, ...], cfgs: Sequence[int], *, cold: bool
    ) -> dict[int, tuple[float, ...]]:
        keys = [(tuple(int(v) for v in D), int(c), bool(cold)) for c in cfgs]
        keys = [k for k in keys if self.exists is None or k in self.exists]
        missing = [k for k in keys if k not in self.results]
        if missing:
            raise NeedMeasurement(missing)
        out: dict[int, tuple[float, ...]] = {}
        for k in keys:
            v = self.results[k]
            if v is not None:
                out[k[1]] = v
        return out

    def counters(self, points: Sequence[tuple[tuple[int, ...], int]]) -> list[dict[str, Any]]:
        self.counter_requests = [(tuple(D), int(c)) for D, c in points]
        return [
            {"D": list(D), "cfg": int(c), **self.counter_results[(tuple(D), c)]}
            for D, c in self.counter_requests
            if (tuple(D), c) in self.counter_results
        ]


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass
class PlanResult:
    """What the plan measured, in order, and what it cost."""

    points: list[dict[str, Any]] = field(default_factory=list)  # D, cfg, kind, ms, spread, cost_s
    spent_s: float = 0.0
    tune_once_s: float = 0.0
    budget_s: float = 0.0
    counters: list[dict[str, Any]] = field(default_factory=list)
    counter_requests: list[tuple[tuple[int, ...], int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.spent_s / self.tune_once_s if self.tune_once_s > 0 else math.nan

    def keys(self) -> list[PointKey]:
        """The timed points, in the order measured."""
        return [(tuple(p["D"]), int(p["cfg"]), p["kind"] == "cold") for p in self.points]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.points:
            out[p["kind"]] = out.get(p["kind"], 0) + 1
        if self.counters:
            out["ncu"] = len(self.counters)
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-safe: the costs, the counts and the notes (not every point)."""
        return {
            "spent_s": self.spent_s,
            "tune_once_s": self.tune_once_s,
            "budget_s": self.budget_s,
            "ratio": self.ratio,
            "counts": self.counts(),
            "notes": list(self.notes),
        }

    def table_arrays(self) -> dict[str, np.ndarray]:
        pts = [p for p in self.points if p["kind"] in ("time", "cold")]
        return {
            "D": np.array([p["D"] for p in pts], dtype=np.float64),
            "cfg": np.array([p["cfg"] for p in pts], dtype=np.int64),
            "time_ms": np.array([p["ms"] for p in pts]),
            "cold": np.array([p["kind"] == "cold" for p in pts]),
            "spread": np.array([p["spread"] for p in pts]),
        }


def calibrated(cost: CostModel, points: Sequence[Mapping[str, Any]]) -> CostModel:
    """`cost` with the per-point overhead measured on `points` (median of their wall seconds
    less their launches × kernel time) when they carry measured walls; else `cost`."""
    over = [
        p["cost_s"] - cost.time_point_s(p["ms"]) + cost.per_point_s
        for p in points
        if p.get("measured_cost") and p["kind"] == "time"
    ]
    if not over:
        return cost
    return replace(cost, per_point_s=max(0.0, float(np.median(over))))


def ladder(L: int, sizes: Sequence[int]) -> list[int]:
    """The smaller sizes of the plan: the largest ≤ L/2, then the largest ≤ half of that."""
    out: list[int] = []
    top = L
    for _ in range(2):
        below = [n for n in sizes if n <= top / 2]
        if not below:
            break
        top = max(below)
        out.append(top)
    return out


@dataclass(frozen=True)
class MeasurementPlan:
    """The plan of one kernel (module docstring): `n_cfg` candidates, the largest training size
    `L`, the `smaller` sizes in ladder order, the budget as a multiple of tune-once's cost,
    whether the footprint crosses the L2 beyond L (`needs_cold`), and the counter options
    (`counter_sizes`: where tune-once's block is profiled, default L and the first smaller size;
    `force_counters` profiles even over the budget, to price that variant)."""

    n_cfg: int
    L: tuple[int, ...]
    smaller: tuple[tuple[int, ...], ...] = ()
    cost: CostModel = field(default_factory=lambda: H200_COST)
    budget: float = 1.5
    needs_cold: bool = True
    counters: bool = False
    force_counters: bool = False
    counter_sizes: tuple[tuple[int, ...], ...] | None = None
    cold_ratio_bound: float = 4.0
    prior: tuple[int, ...] = ()
    prior_keep: int | None = None
    # Per smaller size (ladder order), an upper bound of its set-up's cost over L's: the ratio
    # of their argument bytes (building arguments and reference outputs reads every argument,
    # so it grows at least linearly with them). Empty: 1 for each, what L's set-up cost.
    setup_scale: tuple[float, ...] = ()
    # How many of the most promising candidates the cold sweep leaves budget for at the smaller
    # sizes: without them there is no growth law, and q's ×2 fold compares at least two.
    ladder_reserve: int = 2

    def __post_init__(self) -> None:
        if self.prior_keep is not None and self.prior_keep < 1:
            raise KlaraptorError(f"prior_keep must be at least 1, got {self.prior_keep}")
        if self.setup_scale and len(self.setup_scale) != len(self.smaller):
            raise KlaraptorError(
                f"setup_scale has {len(self.setup_scale)} values for {len(self.smaller)} "
                "smaller sizes"
            )
        if any(not (math.isfinite(v) and v >= 0.0) for v in self.setup_scale):
            raise KlaraptorError(f"setup_scale must be finite and ≥ 0, got {self.setup_scale}")
        if self.ladder_reserve < 0:
            raise KlaraptorError(f"ladder_reserve must be ≥ 0, got {self.ladder_reserve}")

    def setup_at(self, setup_L: float) -> list[float]:
        """The estimated set-up of each smaller size given L's: at most L's, scaled by the
        argument bytes where known."""
        scale = self.setup_scale or (1.0,) * len(self.smaller)
        return [setup_L * min(1.0, v) for v in scale]

    def sweep(self) -> list[int]:
        """The candidates timed at L, in order: the prior's order (candidates it does not rank
        after it), cut to `prior_keep`; without a prior every candidate by index."""
        if not self.prior:
            return list(range(self.n_cfg))
        ranked = [c for c in dict.fromkeys(self.prior) if 0 <= c < self.n_cfg]
        seen = set(ranked)
        order = ranked + [c for c in range(self.n_cfg) if c not in seen]
        return order[: self.prior_keep] if self.prior_keep is not None else order

    def run(self, measurer: Measurer) -> PlanResult:
        """Execute the plan against `measurer` (the module docstring's four steps)."""
        cost, n_cfg, L, smaller = self.cost, self.n_cfg, tuple(self.L), list(self.smaller)
        res = PlanResult()

        def record(
            D: tuple[int, ...],
            kind: str,
            got: Mapping[int, tuple[float, ...]],
            price: Callable[[float], float],
        ) -> None:
            # A result with a third value carries its measured wall seconds: the point's cost;
            # a fourth, the part of it spent building a new size's arguments.
            for c, (ms, spread, *wall) in got.items():
                s = float(wall[0]) if wall and math.isfinite(wall[0]) else price(ms)
                res.spent_s += s
                res.points.append(
                    {
                        "D": list(D),
                        "cfg": int(c),
                        "kind": kind,
                        "ms": ms,
                        "spread": spread,
                        "cost_s": s,
                        "measured_cost": bool(wall and math.isfinite(wall[0])),
                        "setup_s": float(wall[1]) if len(wall) > 1 else 0.0,
                    }
                )

        # 1. hot sweep at L: tune-once's own measurement.
        res.spent_s = cost.session_s
        sweep = self.sweep()
        hot = measurer.time(L, sweep, cold=False)
        record(L, "time", hot, cost.time_point_s)
        res.tune_once_s = res.spent_s
        if len(sweep) < n_cfg:
            per = [p["cost_s"] for p in res.points]
            left = n_cfg - len(sweep)
            res.tune_once_s += left * (float(np.median(per)) if per else cost.per_point_s)
            res.notes.append(
                f"prior: {len(sweep)} of {n_cfg} candidates timed at L, in the prior's order; "
                f"tune-once's cost estimated for the other {left}"
            )
        res.budget_s = self.budget * res.tune_once_s
        if len(hot) < len(sweep):
            res.notes.append(f"{len(sweep) - len(hot)} candidates did not run at L")
        if not hot:
            res.notes.append("no candidate ran at L: nothing else is planned")
            return res
        # Estimates of later points use the per-point overhead the sweep measured, if it did.
        cost = calibrated(cost, res.points)
        t_hot = {c: v[0] for c, v in hot.items()}
        spreads = [v[1] for v in hot.values() if math.isfinite(v[1])]
        band = float(np.median(spreads)) if spreads else 0.0
        order = sorted(t_hot, key=t_hot.__getitem__)

        def fits(estimate: float) -> bool:
            return res.spent_s + estimate <= res.budget_s

        # The first candidate at the smaller sizes also pays their set-up (arguments, reference
        # outputs): at most what the set-up at L measured, scaled by the argument bytes.
        setup_L = max((p["setup_s"] for p in res.points if p["kind"] == "time"), default=0.0)
        setup = self.setup_at(setup_L)

        def at_smaller(c: int, first: bool) -> float:
            return sum(cost.time_point_bound_s(t_hot[c]) + (s if first else 0.0) for s in setup)

        # What the cold sweep leaves for the smaller sizes: the hot sweep's best candidates.
        reserve = (
            sum(at_smaller(c, i == 0) for i, c in enumerate(order[: self.ladder_reserve]))
            if smaller
            else 0.0
        )

        # 2. cold timings at L, bound-pruned.
        t_cold: dict[int, float] = {}
        if self.needs_cold and fits(
            reserve
            + cost.cold_session_s
            + cost.cold_point_s(t_hot[order[0]] * self.cold_ratio_bound)
        ):
            res.spent_s += cost.cold_session_s
            kappa = self.cold_ratio_bound
            for c in order:
                if t_cold and t_hot[c] * (1.0 - band) > min(t_cold.values()):
                    res.notes.append(
                        f"cold sweep stopped by the bound after {len(t_cold)} candidates"
                    )
                    break
                if not fits(reserve + cost.cold_point_s(t_hot[c] * kappa)):
                    res.notes.append(
                        f"cold sweep stopped by the budget after {len(t_cold)} candidates"
                    )
                    break
                got = measurer.time(L, [c], cold=True)
                record(L, "cold", got, cost.cold_point_s)
                if c in got:
                    t_cold[c] = got[c][0]
                    kappa = max(kappa, 1.5 * t_cold[c] / t_hot[c])

        # 3. smaller sizes for the most promising candidates.
        rank_hot = {c: i for i, c in enumerate(order)}
        cold_order = sorted(t_cold, key=t_cold.__getitem__)
        rank_cold = {c: i for i, c in enumerate(cold_order)}
        promising = sorted(
            order, key=lambda c: (min(rank_hot[c], rank_cold.get(c, n_cfg)), rank_hot[c])
        )
        n_small = 0
        if smaller:
            for c in promising:
                est = at_smaller(c, not n_small)
                if not fits(est):
                    break
                for D in smaller:
                    record(D, "time", measurer.time(D, [c], cold=False), cost.time_point_s)
                n_small += 1
        res.notes.append(
            f"{n_small} candidates timed at the smaller sizes {[list(D) for D in smaller]}"
        )

        # 4. counters for the touched footprint (one profiling pass), only when they fit.
        if self.counters:
            best = order[0]
            sizes = (
                list(self.counter_sizes) if self.counter_sizes is not None else [L, *smaller[:1]]
            )
            pts = [(tuple(D), best) for D in sizes]
            est = cost.ncu_s([(t_hot[best] * self.cold_ratio_bound, NCU_PASSES_BOUND)] * len(pts))
            if self.force_counters or fits(est):
                profiled = measurer.counters(pts)
                res.counter_requests = pts
                s = cost.ncu_s([(float(v["ms"]), float(v["passes"])) for v in profiled])
                res.spent_s += s
                res.counters = [{**v, "cost_s": s / max(len(profiled), 1)} for v in profiled]
            else:
                res.notes.append(f"counters skipped: {est:.2f} s would exceed the budget")
        return res

    def next_points(
        self,
        results: Mapping[PointKey, tuple[float, ...] | None],
        exists: Collection[PointKey] | None = None,
    ) -> list[PointKey]:
        """The points the plan asks for next given the results so far ([] when it is done)."""
        try:
            self.run(ReplayMeasurer(results, exists))
        except NeedMeasurement as need:
            return need.keys
        return []

    def replay(
        self,
        results: Mapping[PointKey, tuple[float, ...] | None],
        exists: Collection[PointKey] | None = None,
        counter_results: Mapping[tuple[tuple[int, ...], int], Mapping[str, float]] | None = None,
    ) -> PlanResult:
        """The finished plan over known results (KlaraptorError when a point is missing)."""
        try:
            return self.run(ReplayMeasurer(results, exists, counter_results or {}))
        except NeedMeasurement as need:
            raise KlaraptorError(
                f"the plan is not finished: {len(need.keys)} points still to measure, first "
                f"{need.keys[0]}"
            ) from None

    def describe(self, n_points_at: Mapping[tuple[int, ...], int] | None = None) -> str:
        """The plan's steps in words (for a dry run without measured times)."""
        sm = ", ".join(str(list(D)) for D in self.smaller) or "none"
        k = len(self.sweep())
        which = (
            f"all {self.n_cfg} candidates"
            if not self.prior
            else f"the prior's top {k} of {self.n_cfg} candidates, best first,"
            if k < self.n_cfg
            else f"all {self.n_cfg} candidates in the prior's order"
        )
        lines = [
            f"1. time {which} hot at {list(self.L)} (tune-once's sweep: "
            f"≥ {self.cost.session_s + k * self.cost.per_point_s:.1f} s of overhead "
            "before kernel time)",
            "2. "
            + (
                f"time candidates L2-flushed at {list(self.L)} in hot-time order until none "
                "can beat the best cold time"
                if self.needs_cold
                else "no cold timing (the footprint does not cross the L2 beyond L)"
            ),
            f"3. time the most promising candidates hot at the smaller sizes {sm} while the "
            "budget lasts",
            "4. "
            + (
                "profile tune-once's block if the budget allows" if self.counters else "no counters"
            ),
            f"budget: {self.budget:g} × tune-once's cost (cost model: "
            f"{self.cost.per_point_s * 1e3:.0f} ms per point + kernel time, "
            f"{self.cost.session_s:.2f} s per session)",
        ]
        return "\n".join(lines)


def run_plan(
    measurer: Measurer,
    cost: CostModel,
    n_cfg: int,
    L: tuple[int, ...],
    smaller: Sequence[tuple[int, ...]],
    *,
    budget: float = 1.5,
    needs_cold: bool = True,
    counters: bool = False,
    force_counters: bool = False,
    counter_sizes: Sequence[tuple[int, ...]] | None = None,
    cold_ratio_bound: float = 4.0,
) -> PlanResult:
    """`MeasurementPlan(...).run(measurer)` in one call."""
    return MeasurementPlan(
        n_cfg,
        tuple(L),
        tuple(tuple(D) for D in smaller),
        cost,
        budget,
        needs_cold,
        counters,
        force_counters,
        None if counter_sizes is None else tuple(tuple(D) for D in counter_sizes),
        cold_ratio_bound,
    ).run(measurer)
