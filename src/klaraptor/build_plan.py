"""A measurement plan under a budget, and the cost model that prices it.

Tune-once costs one sweep of every candidate at the largest training size L (one worker session
plus every point). The plan for the scaling model (`klaraptor.models.scaling`) spends at most
`budget` times that, counters included:

1. the same hot sweep at L (every candidate: the anchors; tune-once's answer comes free);
2. if the kernel's footprint exceeds the L2 somewhere in the sizes it will be used at while it
   fits at L, cold timings at L (the L2 flushed before each launch) in order of the hot time,
   stopping when the next candidate's hot time, less the noise band, exceeds the best cold time
   found: a cold run is never faster than a hot one, so no later candidate can win the cold
   regime;
3. with what is left, hot timings of the most promising candidates (best rank in either regime)
   at the smaller sizes M = the largest ≤ L/2 and the largest ≤ M/2: the shared growth law, the
   per-configuration deviations with their ×2 fold, and the drift that sizes online top-k;
4. optionally (``counters=True``) Nsight Compute on tune-once's block at L and M for the bytes the
   kernel really touches (a tighter footprint than the argument sizes) when the budget allows.

A point is scheduled only if its estimated cost fits in what is left; estimates are upper bounds
from what is already measured (a smaller size is not slower than L; a cold run is at most
`cold_ratio_bound` times the hot one until a larger ratio is seen).

Cost model (`CostModel`): a timed point costs ``per_point_s`` of host overhead (worker round trip,
output check, sample bookkeeping) plus the launches of the timing protocol times the kernel time
(at least the launch floor); a cold point launches once per sample (no batching) and adds the L2
flush; a profiled point costs ``ncu_point_s`` plus ``ncu_replay`` times the replay passes times the
kernel time, and each Nsight Compute process ``ncu_session_s``. Constants are fitted from the
recorded per-kernel phase costs (`fit_cost_model`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from scipy.optimize import nnls

from klaraptor.errors import KlaraptorError

__all__ = [
    "CostModel",
    "Measurer",
    "PlanResult",
    "TableMeasurer",
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
    # Extra start-up for the cold timings: 0 when the worker that times the hot sweep can flush
    # per point; `session_s` when the cold sweep needs its own collection (flush_l2 is set per
    # worker today).
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


def fit_cost_model(
    phases: Sequence[Mapping[str, Any]], *, session_s: float = SESSION_S
) -> tuple[CostModel, dict[str, float]]:
    """Constants from recorded collection phases.

    Each phase: ``{"kernel", "train_time_s", "time_ms": [median ms of every timed point],
    "train_ncu_s", "ncu": [(ms, replay passes) of every profiled point]}``. Returns the shared
    model (its `per_point_s` the median over kernels) and each kernel's own per-point overhead:
    (phase seconds - session - launches × kernel time) / points."""
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
# The plan


class Measurer(Protocol):
    """What the plan needs from the device (or from a recorded dataset, offline)."""

    def time(
        self, D: tuple[int, ...], cfgs: Sequence[int], *, cold: bool
    ) -> dict[int, tuple[float, float]]:
        """{cfg: (median ms, relative IQR)} for the candidates that ran."""
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


@dataclass
class PlanResult:
    """What the plan measured, in order, and what it cost."""

    points: list[dict[str, Any]] = field(default_factory=list)  # D, cfg, kind, ms, spread, cost_s
    spent_s: float = 0.0
    tune_once_s: float = 0.0
    budget_s: float = 0.0
    counters: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.spent_s / self.tune_once_s if self.tune_once_s > 0 else math.nan

    def table_arrays(self) -> dict[str, np.ndarray]:
        pts = [p for p in self.points if p["kind"] in ("time", "cold")]
        return {
            "D": np.array([p["D"] for p in pts], dtype=np.float64),
            "cfg": np.array([p["cfg"] for p in pts], dtype=np.int64),
            "time_ms": np.array([p["ms"] for p in pts]),
            "cold": np.array([p["kind"] == "cold" for p in pts]),
            "spread": np.array([p["spread"] for p in pts]),
        }


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
    """Execute the plan (module docstring); `smaller` are the candidate smaller sizes (ladder
    order), `needs_cold` whether the footprint crosses the L2 beyond L; `counter_sizes` where
    tune-once's block is profiled (default L and the first smaller size); `force_counters`
    profiles even over the budget (to price that variant)."""
    res = PlanResult()

    def record(
        D: tuple[int, ...],
        kind: str,
        got: Mapping[int, tuple[float, float]],
        price: Callable[[float], float],
    ) -> None:
        for c, (ms, spread) in got.items():
            s = price(ms)
            res.spent_s += s
            res.points.append(
                {"D": list(D), "cfg": int(c), "kind": kind, "ms": ms, "spread": spread, "cost_s": s}
            )

    # 1. hot sweep at L: tune-once's own measurement.
    res.spent_s = cost.session_s
    hot = measurer.time(L, list(range(n_cfg)), cold=False)
    record(L, "time", hot, cost.time_point_s)
    res.tune_once_s = res.spent_s
    res.budget_s = budget * res.tune_once_s
    if len(hot) < n_cfg:
        res.notes.append(f"{n_cfg - len(hot)} candidates did not run at L")
    t_hot = {c: v[0] for c, v in hot.items()}
    spreads = [v[1] for v in hot.values() if math.isfinite(v[1])]
    band = float(np.median(spreads)) if spreads else 0.0
    order = sorted(t_hot, key=t_hot.__getitem__)

    def fits(estimate: float) -> bool:
        return res.spent_s + estimate <= res.budget_s

    # 2. cold timings at L, bound-pruned.
    t_cold: dict[int, float] = {}
    if needs_cold and fits(
        cost.cold_session_s + cost.cold_point_s(t_hot[order[0]] * cold_ratio_bound)
    ):
        res.spent_s += cost.cold_session_s
        kappa = cold_ratio_bound
        for c in order:
            if t_cold and t_hot[c] * (1.0 - band) > min(t_cold.values()):
                res.notes.append(f"cold sweep stopped by the bound after {len(t_cold)} candidates")
                break
            if not fits(cost.cold_point_s(t_hot[c] * kappa)):
                res.notes.append(f"cold sweep stopped by the budget after {len(t_cold)} candidates")
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
            est = sum(cost.time_point_s(t_hot[c]) for _ in smaller)
            if not fits(est):
                break
            for D in smaller:
                record(D, "time", measurer.time(D, [c], cold=False), cost.time_point_s)
            n_small += 1
    res.notes.append(f"{n_small} candidates timed at the smaller sizes {list(smaller)}")

    # 4. counters for the touched footprint (one profiling pass), only when they fit.
    if counters:
        best = order[0]
        sizes = list(counter_sizes) if counter_sizes is not None else [L, *smaller[:1]]
        pts = [(tuple(D), best) for D in sizes]
        est = cost.ncu_s([(t_hot[best] * cold_ratio_bound, NCU_PASSES_BOUND)] * len(pts))
        if force_counters or fits(est):
            got = measurer.counters(pts)
            s = cost.ncu_s([(float(v["ms"]), float(v["passes"])) for v in got])
            res.spent_s += s
            res.counters = [{**v, "cost_s": s / max(len(got), 1)} for v in got]
        else:
            res.notes.append(f"counters skipped: {est:.2f} s would exceed the budget")
    return res
