"""Time a few chosen configurations of a kernel at one size on this machine's GPU, through
collection (`collect(..., only=...)`: the same worker, CUDA events and protocol as every other
measurement, results kept in the store), and read them back with what they cost.

What `klaraptor search KERNEL D=... --measure K` uses for its K most promising configurations,
and what `benchmarks/bench_saake_search.py` uses for the search and for brute force alike (so
the two are measured by one path). A point the store already holds is not timed again: it is
reported as reused, with the seconds it cost when it was timed.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from klaraptor.collect.collector import CollectOptions, CollectReport, collect
from klaraptor.collect.plan import H200_COST, CostModel
from klaraptor.core.errors import CollectError
from klaraptor.core.types import Config, DataSize
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

# How a chosen configuration is timed, and the exhaustive ground truth with it (the evaluation
# plug-in's TRUTH_OPTIONS is this): at least 10 ms of kernel time, 3-30 samples, no output
# check, no counters.
MEASURE_OPTIONS = CollectOptions(
    counters=False,
    check=False,
    warmup=1,
    min_time_ms=10.0,
    min_repeats=3,
    max_repeats=30,
    timeout_s=120.0,
)


# How a search times the configurations it chose: the same protocol, but only its three best
# first estimates get the full measurement. A search must find one configuration within a
# tolerance (5 % in issue 37), not resolve near-ties to the noise band; its chosen
# configurations are all near the best, so under the plain race most of them were contenders
# and the search cost more than brute force's race over the whole space (H200, 7aebf48).
SEARCH_FULL = 3
SEARCH_OPTIONS = replace(MEASURE_OPTIONS, race_max_full=SEARCH_FULL)


class NoGPUError(CollectError):
    """Measuring was asked for where no CUDA GPU can be used."""


@dataclass(frozen=True)
class TimedConfig:
    """One configuration as measured: its median ms (None when it failed or was refused), the
    seconds its measurement cost (the point's wall time, the size's setup included if it paid it),
    and the status and reason the store holds."""

    config: Config
    ms: float | None
    seconds: float
    status: str
    reason: str = ""
    setup_s: float = 0.0  # the part of `seconds` that built the size's arguments, if any
    # False when only the race's first estimate timed it (`SEARCH_OPTIONS`: not among the best)
    precise: bool = True


@dataclass(frozen=True)
class Measured:
    """The configurations timed at D; `wall_s` the collection's wall time (worker start and
    compilation included), `measured_now` / `reused` how many points this call timed / found
    already timed in the store."""

    kernel: str
    D: DataSize
    device: str
    timed: tuple[TimedConfig, ...]
    wall_s: float
    measured_now: int
    reused: int

    @property
    def best(self) -> TimedConfig | None:
        """The fastest configuration, among those measured precisely when any were (a first
        estimate is the one to doubt when it undercuts every full measurement)."""
        ok = [t for t in self.timed if t.ms is not None]
        ok = [t for t in ok if t.precise] or ok
        return min(ok, key=lambda t: t.ms or 0.0) if ok else None

    @property
    def measurement_s(self) -> float:
        """Seconds the timings cost (sum over the points): what brute force is compared on."""
        return sum(t.seconds for t in self.timed)


def gpu_check(what: str) -> None:
    """NoGPUError naming `what` needs the GPU, when CuPy sees no CUDA device here."""
    from klaraptor.backends.cupy_backend import gpu_problem

    problem = gpu_problem()
    if problem is not None:
        raise NoGPUError(f"{what} needs a CUDA GPU, and there is none usable here ({problem})")


def point_seconds(value: Mapping[str, Any]) -> float:
    """What one stored timing cost: its wall time in the worker, which includes the size's
    setup (arguments, reference outputs) when this point paid it (`setup_s` is the part of
    `wall_s` that did: adding it again would count it twice)."""
    return float(value.get("wall_s", 0.0))


def measure_cost_model() -> CostModel:
    """The estimated cost of timing one configuration with `MEASURE_OPTIONS`: the H200's fitted
    per-point overhead plus that protocol's launches times the kernel time (what a budgeted
    search prices brute force and its own measurements with, before measuring)."""
    o = MEASURE_OPTIONS
    protocol = {
        "warmup": o.warmup,
        "min_time_ms": o.min_time_ms,
        "min_repeats": o.min_repeats,
        "max_repeats": o.max_repeats,
        "target_sample_ms": o.target_sample_ms,
        "max_inner": o.max_inner,
    }
    return replace(H200_COST, protocol=protocol)


def measure_configs(
    spec: KernelSpec,
    D: Any,
    configs: Collection[Config],
    *,
    store: Store,
    options: CollectOptions = MEASURE_OPTIONS,
    progress: bool = False,
) -> Measured:
    """Time `configs` of `spec` at D (module docstring). NoGPUError without a GPU."""
    gpu_check(f"measuring configurations of {spec.name}")
    size = spec.size(D)
    wanted = [Config(c.params, tuple(int(v) for v in c.block)) for c in configs]  # type: ignore[arg-type]
    t0 = time.perf_counter()
    report: CollectReport = collect(
        spec, [size], store=store, options=options, progress=progress, only=wanted
    )
    wall = time.perf_counter() - t0
    found = {
        Config(m.params, m.block): m
        for m in store.measurements(spec.name, report.device, kind="time")
        if m.D == size
    }
    timed = []
    for c in wanted:
        m = found.get(c)
        if m is None:
            timed.append(TimedConfig(c, None, 0.0, "missing", "not planned: it cannot launch"))
            continue
        ok = m.status == "ok" and "median_ms" in m.value
        timed.append(
            TimedConfig(
                c,
                float(m.value["median_ms"]) if ok else None,
                point_seconds(m.value),
                m.status,
                m.reason,
                float(m.value.get("setup_s", 0.0)),
                m.value.get("race_stage") != "first",
            )
        )
    return Measured(
        spec.name,
        size,
        report.device,
        tuple(timed),
        wall,
        report.count("time", "ok") + report.count("time", "failed"),
        report.count("time", "skipped"),
    )


__all__ = [
    "MEASURE_OPTIONS",
    "SEARCH_FULL",
    "SEARCH_OPTIONS",
    "Measured",
    "NoGPUError",
    "TimedConfig",
    "gpu_check",
    "measure_cost_model",
    "measure_configs",
    "point_seconds",
]
