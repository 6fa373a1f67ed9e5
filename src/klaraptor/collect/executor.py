"""Where collection's GPU work runs: the seam between `collect` (plan, store) and the measuring.

`collect` hands an executor the work of each step and writes what comes back into the store:
- `kernel_info(spec, options, workdir)`: the worker's `info` event (kernel attributes, PTX
  barrier count, the device query);
- `time_points(work, on_results=)`: the timing pass of a `Work` (kernel, points, options,
  scratch folder). `on_results` gets the results as they arrive, in groups; `collect` writes each
  group in one transaction;
- `profile_points(work, device, on_batch=, on_progress=)`: the counter pass, one `CounterBatch`
  per ncu process;
- `plan_session(work, run, on_results=)`: a budgeted measurement plan (a `PlanRun` of
  `klaraptor.collect.plan`) in one worker session on one GPU: it is sequential, each point chosen
  from the results before it.

`LocalExecutor` runs them in worker subprocesses on this machine's GPU; the Dask executor
(`klaraptor.collect.dask.DaskExecutor`) on the GPUs of a cluster. Either way each point batch runs
in `klaraptor.collect.worker` subprocesses, so crash and hang isolation is the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from klaraptor.collect.jobfile import write_job
from klaraptor.collect.process import ItemResult, run_isolated, run_once, worker_command, worker_env
from klaraptor.collect.worker import Point, plan_result
from klaraptor.core.errors import CollectError

if TYPE_CHECKING:
    from klaraptor.collect.plan import MeasurementPlan, PointKey
    from klaraptor.core.types import DataSize
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec


OnResults = Callable[[list[ItemResult]], None]


@dataclass(frozen=True)
class Work:
    """What one pass of collection measures: the kernel, its points, the collect options, and
    the scratch folder of the workers' job and event files."""

    spec: KernelSpec
    points: Sequence[Point]
    options: Any
    workdir: Path


@dataclass(frozen=True)
class PlanRun:
    """A budgeted measurement plan for one session: the plan, each point's plan key by point id,
    and the results measured before (None where a point failed)."""

    plan: MeasurementPlan
    key_of: Mapping[int, PointKey]
    known: Mapping[PointKey, tuple[float, ...] | None]


@dataclass
class CounterBatch:
    """What one counter batch gave: raw counters per point id, failed launches with why, and
    why the batch's counters are unusable ('' when fine)."""

    points: list[Point]
    rows: dict[int, dict[str, Any]]
    failed: dict[int, str] = field(default_factory=dict)
    error: str = ""
    wall_s: float = 0.0


@dataclass
class CounterRun:
    """How a counter pass went: status 'ran' or 'skipped' (no ncu; `reason` says why), the
    errors of failed batches, and the seconds spent listing the usable metrics."""

    status: str
    reason: str = ""
    errors: list[str] = field(default_factory=list)
    query_s: float = 0.0


OnBatch = Callable[[CounterBatch], None]
OnProgress = Callable[[int], None]


class Executor(Protocol):
    """Runs collection's GPU work (see the module docstring)."""

    def kernel_info(
        self, spec: KernelSpec, options: Any, workdir: Path, sizes: Sequence[DataSize] = ()
    ) -> dict[str, Any]: ...

    def time_points(self, work: Work, *, on_results: OnResults) -> dict[str, Any]: ...

    def profile_points(
        self, work: Work, device: DeviceProfile, *, on_batch: OnBatch, on_progress: OnProgress
    ) -> CounterRun: ...

    def plan_session(
        self, work: Work, run: PlanRun, *, on_results: OnResults
    ) -> dict[str, Any]: ...


NCU_MISSING = (
    "Nsight Compute (ncu) was not found (searched: the ncu option, $KLARAPTOR_NCU, PATH, "
    "$CUDA_HOME/bin, /usr/local/cuda/bin); only timing was collected"
)


def kernel_info(
    spec: KernelSpec,
    options: Any,
    workdir: Path,
    env: Mapping[str, str],
    wrap: Callable[[list[str]], list[str]] = list,
    sizes: Sequence[DataSize] = (),
) -> dict[str, Any]:
    """Compile the kernel in a worker subprocess; its `info` event (with the bytes of the array
    arguments at `sizes`)."""
    job = workdir / "info.job"
    events = workdir / "info.events.jsonl"
    write_job(
        job,
        mode="info",
        spec=spec,
        points=[],
        options=options,
        events=events,
        extra={"sizes": list(sizes)},
    )
    argv = wrap(worker_command(job, options.python))
    evs = run_once(argv, events, timeout_s=options.startup_timeout_s, env=env)
    for ev in evs:
        if ev.get("event") == "info":
            return ev
    raise CollectError("the collection worker reported no kernel information")


def time_points(
    work: Work,
    *,
    env: Mapping[str, str],
    on_result: Callable[[ItemResult], None],
    wrap: Callable[[list[str]], list[str]] = list,
) -> dict[str, Any]:
    """Time the points of `work` in isolated worker subprocesses (`process.run_isolated`); the
    runner's statistics. `wrap` may prefix each worker's command line (e.g. with a parent-death
    guard)."""
    return _isolated_session(work, "time", env=env, on_result=on_result, wrap=wrap)


def _isolated_session(
    work: Work,
    mode: str,
    *,
    env: Mapping[str, str],
    on_result: Callable[[ItemResult], None],
    wrap: Callable[[list[str]], list[str]],
    extra: Callable[[list[int]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The points of `work` measured by worker subprocesses of `mode` under
    `process.run_isolated` (a replaced worker gets the points not done yet, and
    `extra(remaining)` in its job); the runner's statistics, its workers counted under
    `<mode>_workers`."""
    spec, options = work.spec, work.options
    by_id = {p.id: p for p in work.points}

    def command(remaining: list[int], events: Path) -> list[str]:
        job = events.with_suffix(".job")
        write_job(
            job,
            mode=mode,
            spec=spec,
            points=[by_id[i] for i in remaining],
            options=options,
            events=events,
            extra=extra(remaining) if extra is not None else None,
        )
        return wrap(worker_command(job, options.python))

    stats = run_isolated(
        command,
        [p.id for p in work.points],
        on_result=on_result,
        timeout_s=options.timeout_s,
        workdir=work.workdir,
        startup_timeout_s=options.startup_timeout_s,
        env=env,
    )
    return {
        f"{'timing' if mode == 'time' else mode}_workers": stats.workers,
        "crashes": stats.crashes,
        "timeouts": stats.timeouts,
        "worker_startup_s": sum(float(ev.get("startup_s", 0.0)) for ev in stats.ready),
        # The last worker's start-up: a plan session prices its own start with it (worker.py).
        **(
            {"session_startup_s": float(stats.ready[-1].get("startup_s", 0.0))}
            if stats.ready
            else {}
        ),
    }


def plan_session(
    work: Work,
    run: PlanRun,
    *,
    env: Mapping[str, str],
    on_result: Callable[[ItemResult], None],
    wrap: Callable[[list[str]], list[str]] = list,
) -> dict[str, Any]:
    """Run `run.plan` over the points of `work` (plan key `run.key_of[id]`; `run.known`: results
    measured before) in one isolated worker session; a worker replaced after a crash or hang
    resumes the same plan from every result so far. The runner's statistics."""
    key_of = run.key_of
    results = dict(run.known)

    def handle(r: ItemResult) -> None:
        if r.status == "ok":
            results[key_of[r.id]] = plan_result(r.value)
        elif r.status != "skipped":
            results[key_of[r.id]] = None
        on_result(r)

    return _isolated_session(
        work,
        "plan",
        env=env,
        on_result=handle,
        wrap=wrap,
        extra=lambda remaining: {
            "plan": run.plan,
            "keys": {i: key_of[i] for i in remaining},
            "known": dict(results),
        },
    )


def profile_batch(
    exe: str,
    metrics: Sequence[str],
    spec: KernelSpec,
    batch: Sequence[Point],
    options: Any,
    *,
    workdir: Path,
    env: Mapping[str, str],
    on_launched: Callable[[int], None] | None = None,
    wrap: Callable[[list[str]], list[str]] = list,
) -> CounterBatch:
    """The counters of `batch` from ONE ncu process (`ncu.run_batch`)."""
    from klaraptor.collect import ncu

    profiled = {p.id: ncu.ProfiledPoint(p.id, p.block, p.grid, p.D) for p in batch}
    workdir.mkdir(parents=True, exist_ok=True)

    def target(events: Path) -> list[str]:
        job = workdir / "ncu.job"
        write_job(job, mode="ncu", spec=spec, points=batch, options=options, events=events)
        return wrap(worker_command(job, options.python))

    res = ncu.run_batch(
        exe,
        metrics,
        profiled,
        spec.kernel,
        target,
        workdir=workdir,
        stall_timeout_s=options.ncu_stall_s,
        startup_timeout_s=options.startup_timeout_s,
        env=env,
        on_launched=on_launched,
    )
    return CounterBatch(list(batch), dict(res.rows), dict(res.failed), res.error, res.wall_s)


class LocalExecutor:
    """Collection on this machine's GPU (`options.device_id`)."""

    def kernel_info(
        self, spec: KernelSpec, options: Any, workdir: Path, sizes: Sequence[DataSize] = ()
    ) -> dict[str, Any]:
        return kernel_info(spec, options, workdir, worker_env(), sizes=sizes)

    # One result per call below: each point is committed as soon as it is measured.
    def time_points(self, work: Work, *, on_results: OnResults) -> dict[str, Any]:
        return time_points(work, env=worker_env(), on_result=lambda r: on_results([r]))

    def plan_session(self, work: Work, run: PlanRun, *, on_results: OnResults) -> dict[str, Any]:
        return plan_session(work, run, env=worker_env(), on_result=lambda r: on_results([r]))

    def profile_points(
        self, work: Work, device: DeviceProfile, *, on_batch: OnBatch, on_progress: OnProgress
    ) -> CounterRun:
        from klaraptor.collect import ncu

        spec, points, options, workdir = work.spec, work.points, work.options, work.workdir

        exe = ncu.find_ncu(options.ncu)
        if exe is None:
            return CounterRun("skipped", NCU_MISSING)
        t = time.perf_counter()
        metrics = ncu.usable_metrics(exe, device.cc, options.ncu_metrics)  # cached after once
        run = CounterRun("ran", query_s=time.perf_counter() - t)
        size = options.ncu_batch if options.ncu_batch > 0 else len(points)
        env = worker_env()
        for start in range(0, len(points), size):
            batch = profile_batch(
                exe,
                metrics,
                spec,
                points[start : start + size],
                options,
                workdir=workdir / f"ncu-{start // size}",
                env=env,
                on_launched=lambda _id: on_progress(1),
            )
            if batch.error:
                run.errors.append(batch.error)
            on_batch(batch)
        return run
