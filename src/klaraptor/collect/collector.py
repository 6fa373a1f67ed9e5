"""The Collector: measure a kernel over (D, block) points into the store, isolated and resumable.

`collect(spec, sizes, store=...)` runs these steps (thesis §5.3, DESIGN.md "Collector"):
1. static information, in a worker subprocess: compile (a CompileError surfaces here with the
   NVRTC log), kernel attributes, the PTX barrier count, the device query; stored as the
   kernel's record and its collection facts on this GPU (`store.put_collect_facts`);
2. plan: the ConfigSpace's admissible × launchable points per size; refused ones are stored as
   'rejected' with the reason and never launched; points already measured are skipped (resume);
3. timing pass in a worker: one result per point, written to the store as it arrives. A point
   that crashes the worker (illegal address: the CUDA context is dead) or hangs past
   `timeout_s` is stored as 'failed' with the reason, the worker's process group is killed and
   a new worker goes on with the remaining points;
4. counter pass: ONE ncu process over the timed points lacking counters (`ncu.run_batch`).
   Without ncu, or when it fails, collection keeps the timing and warns; the reason is in the
   report and in the collection facts;
5. a summary (`CollectReport`).

Nothing here imports CuPy: all GPU work happens in `klaraptor.collect.worker` processes.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import shutil
import tempfile
import time
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.collect.executor import (
    NCU_MISSING,
    CounterBatch,
    Executor,
    LocalExecutor,
    PlanRun,
    Work,
)
from klaraptor.collect.noise import race_options, record_band, with_stored_band
from klaraptor.collect.plan import MeasurementPlan, PlanResult
from klaraptor.collect.process import ItemResult
from klaraptor.collect.progress import Progress as _Progress
from klaraptor.collect.worker import Point, backend_name, plan_result
from klaraptor.core.errors import CollectError
from klaraptor.core.metrics import PIPE_METRICS, RAW_METRICS
from klaraptor.core.types import Block, Config, DataSize, KernelAttributes, ParamValues
from klaraptor.space.configspace import ConfigSpace, launch_values
from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec

TIME = "time"
NCU = "ncu"


@dataclass(frozen=True)
class CollectOptions:
    """How collection runs. Times are in milliseconds, timeouts in seconds.

    Timing: `warmup` launches, then samples of `inner` back-to-back launches (batched until one
    sample lasts `target_sample_ms`, at most `max_inner`) until `min_time_ms` of kernel time is
    measured (at least `min_repeats`, at most `max_repeats` samples, at most `max_point_s` s);
    with `racing`, the points of one size race and only the contenders get that protocol.
    `flush_l2` rewrites a 2 × L2 buffer before every sample (then inner = 1). `check` compares
    the outputs with `spec.reference` once per point.
    Isolation: a point taking longer than `timeout_s` is failed and its worker replaced; a
    worker gets `startup_timeout_s` to import CuPy and compile. The counter pass is killed when
    no point is profiled for `ncu_stall_s`. `backend`: the workers' GPU backend ("cupy",
    "numba"; "" = the spec's own, see `gpu.worker.backend_name`).
    """

    timing: bool = True
    counters: bool = True
    warmup: int = 2
    # The training protocol of the recorded H200 datasets (klaraptor.suite.protocol.TRAIN_OPTIONS):
    # what the models were validated on. 20 ms and 100 repeats cost 30-50 ms a point.
    min_time_ms: float = 5.0
    min_repeats: int = 5
    max_repeats: int = 30
    target_sample_ms: float = 0.2
    max_inner: int = 100
    max_point_s: float = 10.0
    flush_l2: bool = False
    check: bool = True
    seed: int = 0
    device_id: int = 0
    timeout_s: float = 60.0
    startup_timeout_s: float = 300.0
    ncu: str | None = None
    ncu_metrics: tuple[str, ...] = RAW_METRICS + PIPE_METRICS
    ncu_stall_s: float = 120.0
    ncu_batch: int = 0  # points per ncu process; 0 = all in one
    replace_stale: bool = False
    python: str | None = None
    keep_workdir: bool = False
    backend: str = ""
    # Racing (`klaraptor.collect.racing`): the points of one size get a first estimate of
    # `race_first_ms` of kernel time, and only those within the noise band of the leader are
    # timed with the full protocol above. `noise_band` None: the device's default band.
    racing: bool = True
    race_first_ms: float = 1.0
    race_first_repeats: int = 3
    race_max_full: int | None = None  # None: every contender gets the full protocol
    noise_band: float | None = None

    def __post_init__(self) -> None:
        # Caught here, in the caller's process, not as a worker's fatal error later.
        if self.race_max_full is not None and (
            isinstance(self.race_max_full, bool)
            or not isinstance(self.race_max_full, int)
            or self.race_max_full < 1
        ):
            raise CollectError(
                f"CollectOptions.race_max_full must be a whole number ≥ 1 or None, got "
                f"{self.race_max_full!r}"
            )
        band = self.noise_band
        if band is not None and (
            isinstance(band, bool) or not isinstance(band, (int, float)) or not 0.0 <= band < 1.0
        ):
            raise CollectError(
                f"CollectOptions.noise_band must be a fraction in [0, 1) or None, got "
                f"{self.noise_band!r}"
            )


# ---------------------------------------------------------------------------------------------
# Report


@dataclass
class Failure:
    """A point that failed, with why."""

    D: DataSize
    block: Block
    kind: str
    reason: str
    params: ParamValues = ParamValues.NONE


@dataclass
class CollectReport:
    """What one `collect` call did.

    `counts[kind][status]` counts the points of this call per kind ('time', 'ncu') and status
    ('ok', 'failed', 'rejected', and 'skipped' for points already in the store). `wall_s` has
    the wall time of each step ('info', 'plan', 'timing', 'ncu', 'total'); `worker` the
    workers' startup costs and how often one was replaced.
    """

    kernel: str
    device: str
    sizes: list[DataSize]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    wall_s: dict[str, float] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    ncu_status: str = "not requested"
    ncu_reason: str = ""
    worker: dict[str, Any] = field(default_factory=dict)

    def count(self, kind: str, status: str) -> int:
        return self.counts.get(kind, {}).get(status, 0)

    def _add(self, kind: str, status: str, n: int = 1) -> None:
        per = self.counts.setdefault(kind, {})
        per[status] = per.get(status, 0) + n

    def format(self) -> str:
        lines = [f"Collected {self.kernel} on {self.device} over {len(self.sizes)} sizes"]
        for kind in (TIME, NCU):
            c = self.counts.get(kind)
            if c:
                parts = ", ".join(f"{v} {k}" for k, v in sorted(c.items()))
                lines.append(f"  {kind:>5}: {parts}")
        if self.ncu_status not in ("ok", "not requested"):
            lines.append(
                f"  counters: {self.ncu_status}{': ' + self.ncu_reason if self.ncu_reason else ''}"
            )
        if self.wall_s:
            lines.append("  wall: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.wall_s.items()))
        if self.worker:
            lines.append(
                "  workers: "
                + ", ".join(
                    f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in self.worker.items()
                )
            )
        for f in self.failures:
            lines.append(f"  failed [{f.kind}] D={f.D} block={f.block}: {f.reason}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


# ---------------------------------------------------------------------------------------------
# Running workers


# ---------------------------------------------------------------------------------------------
# Planning


@dataclass
class Plan:
    """The launchable points (ids 0..n-1), the rejected ones (D, configuration, why), and the
    points still to time."""

    points: list[Point]
    rejected: list[tuple[DataSize, Config, str]]
    todo: list[Point]

    @property
    def skipped(self) -> int:
        return len(self.points) - len(self.todo)


def plan_points(
    spec: KernelSpec,
    sizes: Sequence[DataSize],
    space: ConfigSpace,
    attrs: KernelAttributes | Mapping[ParamValues, KernelAttributes] | None,
    device: DeviceProfile,
    done: set[tuple[DataSize, Config]] = frozenset(),  # type: ignore[assignment]
) -> Plan:
    """Admissible × launchable points per size (per compiled variant, with that variant's
    attributes, for a kernel with program parameters); `done` (D, configuration) keys are not
    re-timed."""
    points: list[Point] = []
    rejected: list[tuple[DataSize, Config, str]] = []
    for d in sizes:
        for pv in space.variants(spec):
            a = attrs.get(pv) if isinstance(attrs, Mapping) else attrs
            arg = pv if spec.params else None
            ok, rej = space.admissible(d, spec=spec, params=arg)
            ok, rej2 = space.filter_launchable(ok, d, a, device, spec=spec, params=arg)
            rejected += [(d, Config(pv, b), why) for b, why in [*rej, *rej2]]
            for b, grid, smem in zip(ok, *launch_values(spec, d, ok, arg)):
                points.append(Point(len(points), d, b, grid, smem, params=pv))
    todo = [p for p in points if (p.D, p.config) not in done]
    return Plan(points, rejected, todo)


# ---------------------------------------------------------------------------------------------
# collect


def _check_fingerprint(store: Store, spec: KernelSpec, options: CollectOptions) -> None:
    known = store.kernel(spec.name)
    if known is None or known.fingerprint == spec.fingerprint():
        return
    n = store.count_measurements(spec.name)
    if n == 0:
        return
    if not options.replace_stale:
        raise CollectError(
            f"the store {store.path} holds {n} measurements of kernel {spec.name!r} made for a "
            "different version of it (source, options, grid, constraints or data parameters "
            "changed). Pass CollectOptions(replace_stale=True) to delete them (with its builds "
            "and history) and measure again, or give the new version another name"
        )
    store.delete_kernel(spec.name)


def _register(store: Store, spec: KernelSpec) -> None:
    """The kernel's record: fingerprint, data names and the spec's description."""
    store.put_kernel(
        KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
    )


def _update_facts(store: Store, spec: KernelSpec, device_key: str, **changes: Any) -> None:
    """Merge this GPU's collection facts (what is not given stays as stored)."""
    known = store.collect_facts(spec.name, device_key) or CollectFacts()
    updated = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    store.put_collect_facts(
        spec.name, device_key, dataclasses.replace(known, updated=updated, **changes)
    )


def collect(
    spec: KernelSpec,
    sizes: Sequence[Any],
    *,
    store: Store,
    device: DeviceProfile | None = None,
    space: ConfigSpace | None = None,
    options: CollectOptions = CollectOptions(),  # noqa: B008 - frozen, never mutated
    progress: bool = True,
    executor: Executor | None = None,
    only: Collection[Config] | None = None,
) -> CollectReport:
    """Measure `spec` at every admissible, launchable block for each size in `sizes` (`only`:
    at those configurations alone, e.g. a search's most promising).

    Every result goes to `store` as soon as it is measured (kind 'time': the CUDA-event
    statistics; kind 'ncu': the raw counters), so an interrupted call resumes where it stopped:
    points already measured ('ok' or 'failed') are skipped. `device` defaults to the device the
    worker finds (`options.device_id`); a given profile must describe that same GPU.
    Raises CompileError (with the NVRTC log) when the kernel does not compile, and CollectError
    when collection cannot run at all (no CuPy, a spec that cannot be sent to a worker, ...).
    `executor` runs the GPU work (default: this machine's GPU; `klaraptor.collect.dask.DaskExecutor`
    spreads it over a Dask cluster); the store is written here either way.
    """
    t_total = time.perf_counter()
    backend_name(spec, options)  # an unknown backend fails here, not in every worker
    sizes_d = [spec.size(D) for D in sizes]
    space = space or ConfigSpace.for_spec(spec)
    _check_fingerprint(store, spec, options)
    executor = executor or LocalExecutor()
    workdir = Path(tempfile.mkdtemp(prefix="klaraptor-collect-"))
    report = CollectReport(kernel=spec.name, device="", sizes=sizes_d)
    try:
        dev, attrs = _info_step(spec, sizes_d, store, device, options, workdir, executor, report)
        dev = with_stored_band(store, dev)
        options = race_options(options, dev)
        t = time.perf_counter()
        done = store.measured_configs(spec.name, dev.key, TIME)
        plan = plan_points(spec, sizes_d, space, attrs, dev, done)
        if only is not None:
            keep = {Config(c.params, tuple(c.block)) for c in only}  # type: ignore[arg-type]
            plan = Plan(
                [p for p in plan.points if p.config in keep],
                [r for r in plan.rejected if r[1] in keep],
                [p for p in plan.todo if p.config in keep],
            )
        if plan.rejected:
            store.put_measurements(
                Measurement(
                    spec.name, dev.key, d, c.block, TIME, "rejected", {}, why, params=c.params
                )
                for d, c, why in plan.rejected
            )
        report._add(TIME, "rejected", len(plan.rejected))
        report.wall_s["plan"] = time.perf_counter() - t

        with _Progress(progress) as bars:
            if options.timing:
                timed = _timing_pass(
                    spec, plan, store, dev.key, options, workdir, executor, bars, report
                )
                record_band(store, dev, timed, source=f"collect {spec.name}")
            if options.counters:
                _ncu_pass(spec, plan, store, dev, options, workdir, executor, bars, report)
                _update_facts(
                    store,
                    spec,
                    dev.key,
                    ncu_status=report.ncu_status,
                    ncu_reason=report.ncu_reason,
                )
    finally:
        if not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report.wall_s["total"] = time.perf_counter() - t_total
    return report


# The footprint is a polynomial of total degree <= 3 in the data parameters: 20 monomials for
# three of them, so 24 sizes fit it exactly with checks to spare. Making the arguments at every
# size of a long sweep cost 2.5-2.9 s of 164 sizes, serially, before any point was timed (2DCONV
# on 4 H200s, 641866e).
FOOTPRINT_SIZES = 24


def footprint_sizes(sizes: Sequence[DataSize], cap: int = FOOTPRINT_SIZES) -> list[DataSize]:
    """The sizes whose argument bytes are measured: all of them up to `cap`, else `cap` spread
    evenly over them in order (the first and the last included)."""
    if len(sizes) <= cap:
        return list(sizes)
    idx = np.unique(np.round(np.linspace(0, len(sizes) - 1, cap)).astype(int))
    return [sizes[int(i)] for i in idx]


def _info_step(
    spec: KernelSpec,
    sizes: Sequence[DataSize],
    store: Store,
    device: DeviceProfile | None,
    options: CollectOptions,
    workdir: Path,
    executor: Executor,
    report: CollectReport,
) -> tuple[DeviceProfile, KernelAttributes | dict[ParamValues, KernelAttributes]]:
    """Step 1: compile in a worker, read the attributes, the PTX barrier count, the device and
    the argument bytes at `sizes`; store them as the kernel's record and collection facts.
    For a kernel with program parameters every variant is compiled (on CPU threads in the
    worker), and the attributes returned map each variant to its own."""
    t = time.perf_counter()
    info = executor.kernel_info(spec, options, workdir, footprint_sizes(sizes))
    report.wall_s["info"] = time.perf_counter() - t
    report.worker.update(
        {
            k: float(info[k])
            for k in ("startup_s", "import_s", "compile_s", "device_s", "ptx_s", "arg_bytes_s")
            if k in info
        }
    )
    from klaraptor.device.profile import DeviceProfile

    found = DeviceProfile.from_dict(info["device"])
    if device is not None and device.name != found.name:
        raise CollectError(
            f"the device profile given is for {device.name!r}, but collection runs on "
            f"{found.name!r} (device {options.device_id})"
        )
    dev = device or found
    report.device = dev.key
    attrs = KernelAttributes.from_dict(info["attributes"])
    per_variant = {
        str(k): KernelAttributes.from_dict(v)
        for k, v in (info.get("variant_attributes") or {}).items()
    }
    barriers = info.get("ptx_barriers")
    _register(store, spec)
    known = store.collect_facts(spec.name, dev.key)
    arg_bytes = dict(known.arg_bytes) if known is not None else {}
    arg_bytes.update({tuple(int(v) for v in D): int(b) for D, b in info.get("arg_bytes") or ()})
    _update_facts(
        store,
        spec,
        dev.key,
        device_name=dev.name,
        attributes=attrs,
        ptx_barriers=barriers,
        sync_per_warp=None if barriers is None else float(barriers),
        sync_note=str(info.get("ptx_note", "")),
        arg_bytes=tuple(sorted(arg_bytes.items())),
        **({"variant_attributes": per_variant} if spec.params else {}),
    )
    if spec.params:
        from klaraptor.store.records import params_from_text

        return dev, {params_from_text(k, spec.param_names): a for k, a in per_variant.items()}
    return dev, attrs


def _timing_pass(
    spec: KernelSpec,
    plan: Plan,
    store: Store,
    device_key: str,
    options: CollectOptions,
    workdir: Path,
    executor: Executor,
    bars: _Progress,
    report: CollectReport,
) -> list[dict[str, Any]]:
    """The timing pass over the plan's points still to do; returns the values timed ok."""
    report._add(TIME, "skipped", plan.skipped)
    if not plan.todo:
        report.wall_s["timing"] = 0.0
        return []
    timed: list[dict[str, Any]] = []
    by_id = {p.id: p for p in plan.points}
    advance = bars.task(f"timing {spec.name}", len(plan.todo))
    t = time.perf_counter()

    def on_results(results: list[ItemResult]) -> None:
        rows = []
        for r in results:
            p = by_id[r.id]
            status = r.status if r.status in ("ok", "failed") else "failed"
            rows.append(
                Measurement(
                    spec.name,
                    device_key,
                    p.D,
                    p.block,
                    TIME,
                    status,
                    r.value,
                    r.reason,
                    params=p.params,
                )
            )
            report._add(TIME, status)
            if status == "ok":
                timed.append(r.value)
            if status == "failed":
                report.failures.append(Failure(p.D, p.block, TIME, r.reason, p.params))
                bars.print(f"failed: D={p.D} {_variant(p)}block={p.block}: {r.reason}")
        store.put_measurements(rows)  # one transaction per group of results
        advance(len(results))

    stats = executor.time_points(
        Work(spec, plan.todo, options, workdir / "timing"), on_results=on_results
    )
    wall = time.perf_counter() - t
    report.wall_s["timing"] = wall
    report.worker.update(stats)
    report.worker["timing_ms_per_point"] = 1e3 * wall / len(plan.todo)
    return timed


def _ncu_pass(
    spec: KernelSpec,
    plan: Plan,
    store: Store,
    dev: DeviceProfile,
    options: CollectOptions,
    workdir: Path,
    executor: Executor,
    bars: _Progress,
    report: CollectReport,
) -> None:
    timed = {
        (m.D, Config(m.params, m.block)) for m in store.measurements(spec.name, dev.key, TIME, "ok")
    }
    have = store.measured_configs(spec.name, dev.key, NCU)
    todo = [p for p in plan.points if (p.D, p.config) in timed and (p.D, p.config) not in have]
    report._add(NCU, "skipped", sum((p.D, p.config) in have for p in plan.points))
    if not todo:
        report.ncu_status = "nothing to do"
        return
    advance = bars.task(f"ncu {spec.name}", len(todo))

    def on_batch(batch: CounterBatch) -> None:
        by_id = {p.id: p for p in batch.points}
        rows = [
            Measurement(
                spec.name,
                dev.key,
                by_id[pid].D,
                by_id[pid].block,
                NCU,
                "ok",
                {**raw, "grid": list(by_id[pid].grid)},
                params=by_id[pid].params,
            )
            for pid, raw in batch.rows.items()
        ]
        rows += [
            Measurement(
                spec.name,
                dev.key,
                by_id[pid].D,
                by_id[pid].block,
                NCU,
                "failed",
                {},
                why,
                params=by_id[pid].params,
            )
            for pid, why in batch.failed.items()
        ]
        store.put_measurements(rows)
        report._add(NCU, "ok", len(batch.rows))
        report._add(NCU, "failed", len(batch.failed))
        report.failures += [
            Failure(by_id[pid].D, by_id[pid].block, NCU, why, by_id[pid].params)
            for pid, why in batch.failed.items()
        ]
        report.worker["ncu_wall_s"] = report.worker.get("ncu_wall_s", 0.0) + batch.wall_s

    t = time.perf_counter()
    run = executor.profile_points(
        Work(spec, todo, options, workdir), dev, on_batch=on_batch, on_progress=advance
    )
    if run.status == "skipped":
        report.ncu_status = "skipped"
        report.ncu_reason = run.reason or NCU_MISSING
        warnings.warn(report.ncu_reason, RuntimeWarning, stacklevel=3)
        return
    report.worker["ncu_query_s"] = run.query_s
    report.wall_s["ncu"] = time.perf_counter() - t
    n_ok = report.count(NCU, "ok")
    if run.errors:
        report.ncu_status = "partial" if n_ok else "failed"
        report.ncu_reason = "; ".join(run.errors)
        warnings.warn(
            f"ncu counters for {spec.name}: {report.ncu_reason} "
            f"({n_ok} of {len(todo)} points have counters; timing is kept)",
            RuntimeWarning,
            stacklevel=3,
        )
    else:
        report.ncu_status = "ok"


# ---------------------------------------------------------------------------------------------
# A budgeted plan in one session

COLD = "time_cold"


def collect_info(
    spec: KernelSpec,
    sizes: Sequence[Any],
    *,
    store: Store,
    device: DeviceProfile | None = None,
    options: CollectOptions = CollectOptions(),  # noqa: B008 - frozen, never mutated
    executor: Executor | None = None,
) -> tuple[DeviceProfile, KernelAttributes | dict[ParamValues, KernelAttributes], CollectReport]:
    """Step 1 of `collect` alone: compile, attributes (per compiled variant with program
    parameters), barrier count, device, argument bytes at `sizes`, stored as the kernel's
    collection facts. What a plan needs before it is made."""
    _check_fingerprint(store, spec, options)
    sizes_d = [spec.size(D) for D in sizes]
    report = CollectReport(kernel=spec.name, device="", sizes=sizes_d)
    workdir = Path(tempfile.mkdtemp(prefix="klaraptor-info-"))
    try:
        dev, attrs = _info_step(
            spec, sizes_d, store, device, options, workdir, executor or LocalExecutor(), report
        )
    finally:
        if not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return dev, attrs, report


def known_plan_results(
    store: Store,
    spec: KernelSpec,
    device_key: str,
    keys: Mapping[tuple[DataSize, Config, bool], Any],
) -> dict[Any, tuple[float, ...] | None]:
    """The plan keys already measured in the store: (ms, spread[, wall seconds[, setup
    seconds]]) as `plan_result` gives them, or None for a failed point. `keys` maps
    (D, configuration, cold) to the plan's key of that point."""
    out: dict[Any, tuple[float, ...] | None] = {}
    for kind, cold in ((TIME, False), (COLD, True)):
        for m in store.measurements(spec.name, device_key, kind=kind):
            key = keys.get((m.D, Config(m.params, m.block), cold))
            if key is None or m.status not in ("ok", "failed"):
                continue
            out[key] = plan_result(m.value) if m.status == "ok" else None
    return out


def collect_plan(
    spec: KernelSpec,
    plan: MeasurementPlan,
    candidates: Sequence[Block | Config],
    *,
    store: Store,
    device: DeviceProfile,
    attrs: KernelAttributes | Mapping[ParamValues, KernelAttributes],
    space: ConfigSpace | None = None,
    options: CollectOptions = CollectOptions(),  # noqa: B008 - frozen, never mutated
    progress: bool = True,
    executor: Executor | None = None,
) -> tuple[CollectReport, PlanResult]:
    """Run `plan` (candidate i of the plan is `candidates[i]`) in one timing session.

    The session's worker replays the plan over the results so far and measures the points it
    asks for, hot (kind 'time') or L2-flushed (kind 'time_cold'), each stored as it arrives;
    points already in the store are not measured again. Counters the plan asks for are taken in
    one Nsight Compute pass afterwards. Returns the report and the plan as executed.
    `executor`: where the session runs (default this machine's GPU; on a Dask cluster, one
    worker's GPU, its results stored when the session returns)."""
    executor = executor or LocalExecutor()
    t_total = time.perf_counter()
    device = with_stored_band(store, device)
    options = race_options(options, device)
    timed: list[dict[str, Any]] = []
    space = space or ConfigSpace.for_spec(spec)
    names = spec.data_names
    sizes = [DataSize(names, tuple(plan.L))] + [DataSize(names, tuple(D)) for D in plan.smaller]
    report = CollectReport(kernel=spec.name, device=device.key, sizes=sizes)
    laid = plan_points(spec, sizes, space, attrs, device)
    index = {_as_config(c): i for i, c in enumerate(candidates)}
    points: list[Point] = []
    key_of: dict[int, tuple[tuple[int, ...], int, bool]] = {}
    by_store_key: dict[tuple[DataSize, Config, bool], tuple[tuple[int, ...], int, bool]] = {}
    for p in laid.points:
        if p.config not in index:
            continue
        for cold in (False, True) if p.D == sizes[0] else (False,):
            q = dataclasses.replace(p, id=len(points), cold=cold)
            points.append(q)
            key_of[q.id] = (p.D.values(), index[p.config], cold)
            by_store_key[(p.D, p.config, cold)] = key_of[q.id]
    known = known_plan_results(store, spec, device.key, by_store_key)
    todo = [p for p in points if key_of[p.id] not in known]
    by_id = {p.id: p for p in points}
    workdir = Path(tempfile.mkdtemp(prefix="klaraptor-plan-"))
    try:
        with _Progress(progress) as bars:
            advance = bars.task(f"plan {spec.name}", len(todo))

            def on_result(r: ItemResult) -> None:
                p = by_id[r.id]
                kind = COLD if p.cold else TIME
                advance()
                if r.status == "skipped":
                    report._add(kind, "not planned")
                    return
                status = "ok" if r.status == "ok" else "failed"
                store.put_measurement(
                    Measurement(
                        spec.name,
                        device.key,
                        p.D,
                        p.block,
                        kind,
                        status,
                        r.value,
                        r.reason,
                        params=p.params,
                    )
                )
                report._add(kind, status)
                if status == "ok" and kind == TIME:
                    timed.append(r.value)
                known[key_of[p.id]] = plan_result(r.value) if status == "ok" else None
                if status != "ok":
                    report.failures.append(Failure(p.D, p.block, kind, r.reason, p.params))
                    bars.print(f"failed: D={p.D} {_variant(p)}block={p.block} ({kind}): {r.reason}")

            def on_results(rs: list[ItemResult]) -> None:
                for r in rs:
                    on_result(r)

            t = time.perf_counter()
            exists = set(key_of.values())
            if todo and plan.next_points(known, exists):
                stats = executor.plan_session(
                    Work(spec, todo, options, workdir / "plan"),
                    PlanRun(plan, {p.id: key_of[p.id] for p in todo}, dict(known)),
                    on_results=on_results,
                )
                report.worker.update(stats)
            report.wall_s["timing"] = time.perf_counter() - t
            record_band(store, device, timed, source=f"build {spec.name}")
            result = plan.replay(known, exists)
            if result.counter_requests and options.counters:
                wanted = {(D, _as_config(candidates[c])) for D, c in result.counter_requests}
                pts = [p for p in points if not p.cold and (p.D.values(), p.config) in wanted]
                _ncu_pass(
                    spec,
                    Plan(pts, [], pts),
                    store,
                    device,
                    options,
                    workdir,
                    executor,
                    bars,
                    report,
                )
                result = plan.replay(known, exists, _counter_results(store, spec, device, index))
    finally:
        if not options.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report.wall_s["total"] = time.perf_counter() - t_total
    return report, result


def _as_config(c: Block | Config) -> Config:
    return c if isinstance(c, Config) else Config(ParamValues.NONE, tuple(c))  # type: ignore[arg-type]


def _variant(p: Point) -> str:
    return f"{p.params} " if p.params else ""


def _counter_results(
    store: Store, spec: KernelSpec, device: DeviceProfile, index: Mapping[Config, int]
) -> dict[tuple[tuple[int, ...], int], dict[str, float]]:
    """DRAM bytes, replay passes and duration of the profiled points, keyed as the plan asks."""
    out: dict[tuple[tuple[int, ...], int], dict[str, float]] = {}
    for m in store.measurements(spec.name, device.key, kind=NCU, status="ok"):
        v = m.value
        c = Config(m.params, m.block)
        if c not in index:
            continue
        try:
            out[(m.D.values(), index[c])] = {
                "dram_bytes": float(v["dram__bytes_read.sum"]) + float(v["dram__bytes_write.sum"]),
                "passes": float(v.get("profiler__replayer_passes", 1.0)),
                "ms": float(v["gpu__time_duration.sum"]) / 1e6,
            }
        except (KeyError, TypeError, ValueError):
            continue
    return out
