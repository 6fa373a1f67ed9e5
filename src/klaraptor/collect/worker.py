"""The collection worker: `python -m klaraptor.collect.worker JOBFILE`.

Collection runs here, in a subprocess, so a kernel that crashes the CUDA context (illegal
address: every later CUDA call fails) or never ends costs one worker, not the build: the parent
(`process.run_isolated`) kills and replaces it and goes on with the remaining points.

Job file: two pickles. The first is a header of builtins only (version, mode, events path, the
parent's sys.path and how to re-create its `__main__`); the second is `(spec, points, options)`.
The header comes first so the worker can rebuild the parent's import environment before the
spec is unpickled: a spec's callables (make_args, reference, ...) are pickled by reference, so
they must be top-level functions of an importable module or of the user's `__main__` script,
which is re-run as `__mp_main__` and aliased as `__main__`, as multiprocessing's spawn does.

Events (`process.Events`): `ready` (after compiling), `info` (mode info), `start`/`result` per point
(modes time and plan; in mode plan the points the plan does not ask for get a `result` with status
'skipped'), `launched`/`failed` per point (mode ncu), `fatal` (setup failed: compile error, bad
job, no CuPy).

Mode datadep times a few blocks on two random inputs of one size (`collect.data_dependence`).

Mode plan runs a `klaraptor.collect.plan.MeasurementPlan` in this one session: it replays the plan
over the results so far and measures the points it asks for next, hot or L2-flushed (`Point.cold`),
until the plan is done. The job's `extra` carries the plan, each point's plan key and the results
known before (a replaced worker resumes the same plan).
Exit status: 0 done, 1 fatal, 3 the CUDA context was lost (the parent starts a new worker).

`python -m klaraptor.collect.worker --serve` is a warm worker (`klaraptor.collect.warm`): it runs
every job file named on stdin in turn, writing each one's exit status to `<job>.exit`, and keeps
its imports, CUDA context and compiled modules between jobs.

Backends: the job's options name one (`CollectOptions.backend`), else the spec's own (`spec.backend`:
"numba" for `numba.cuda.jit` kernels), else "cupy" (CUDA C++ through CuPy).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from klaraptor.backends.cupy_backend import CupyBackend, Timer, count_barriers, describe_error
from klaraptor.collect.argcache import ArgsCache, hand_over
from klaraptor.collect.jobfile import (
    Job,
    Point,
    read_body,
    read_header,
)
from klaraptor.collect.process import EXIT_CONTEXT_LOST, EXIT_FATAL, EXIT_OK, NVTX_PREFIX, Events
from klaraptor.collect.racing import DEFAULT_BAND, RaceSettings, race
from klaraptor.core.errors import CollectError, CompileError
from klaraptor.core.types import Block, DataSize, ParamValues

BACKENDS = ("cupy", "numba")
# Set in every worker: a script re-run as __main__ must not start collections of its own.
IN_WORKER_ENV = "KLARAPTOR_COLLECTION_WORKER"


def backend_name(spec: Any, options: Any) -> str:
    """The backend a job runs on: the options' choice, else the spec's, else "cupy"."""
    name = getattr(options, "backend", "") or getattr(spec, "backend", "cupy")
    if name not in BACKENDS:
        raise CollectError(f"unknown GPU backend {name!r}; one of {BACKENDS}")
    return name


def make_backend(name: str) -> Any:
    """A backend object by name (same methods as `CupyBackend`)."""
    if name == "numba":
        from klaraptor.backends.numba_backend import NumbaBackend

        return NumbaBackend()
    if name == "cupy":
        return CupyBackend()
    raise CollectError(f"unknown GPU backend {name!r}; one of {BACKENDS}")


# ---------------------------------------------------------------------------------------------
# GPU side


class _Kernel:
    """The compiled kernel of a job, with the device it runs on.

    A kernel with program parameters has one compiled variant per parameter values: every
    variant the job's points use is compiled on CPU threads from the start, in the order the
    points come, so the GPU measures the first variant while the next ones compile (NVRTC runs
    outside the GIL); `fn_for` waits only for a variant not compiled yet."""

    def __init__(self, job: Job) -> None:
        t0 = time.time()
        be = self.backend = make_backend(backend_name(job.spec, job.options))
        be.module()
        self.import_s = time.time() - t0
        self.device_id = int(getattr(job.options, "device_id", 0))
        be.use_device(self.device_id)
        spec = job.spec
        self.spec = spec
        t1 = time.time()
        self._pool: Any = None
        self._futures: dict[ParamValues, Any] = {}
        self._fns: dict[ParamValues, Any] = {}
        if spec.params:
            # A job without points (mode info) learns every variant's attributes.
            wanted = list(dict.fromkeys(p.params for p in _ordered(job.points, spec)))
            wanted = wanted or spec.variants()
            self._start_compiling(wanted)
            self.fn = self.fn_for(wanted[0])
        else:
            self.fn = self._compiled(ParamValues.NONE)
            self._fns[ParamValues.NONE] = self.fn
        self.compile_s = time.time() - t1
        self.startup_s = time.time() - job.created

    def _compiled(self, pv: ParamValues) -> Any:
        be, spec = self.backend, self.spec
        fn = be.compile_spec(spec, pv) if pv else be.compile_spec(spec)
        if spec.dynamic_smem is not None:
            # Opt in to the device maximum once, so every planned size up to it launches.
            optin = be.max_dynamic_smem_optin(self.device_id)
            be.opt_in_dynamic_smem(fn, optin - be.attributes(fn).static_smem)
        return fn

    def _start_compiling(self, variants: Sequence[ParamValues]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        workers = max(1, min(len(variants), (os.cpu_count() or 2) - 1, 8))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvrtc")
        for pv in variants:
            self._futures[pv] = self._pool.submit(self._compiled, pv)

    def fn_for(self, pv: ParamValues) -> Any:
        """The compiled variant `pv` (the kernel itself without program parameters)."""
        fn = self._fns.get(pv)
        if fn is None:
            fut = self._futures.get(pv)
            try:
                fn = fut.result() if fut is not None else self._compiled(pv)
            except CompileError:
                raise
            except Exception:  # noqa: BLE001 - a failure on a compiling thread: once more here
                fn = self._compiled(pv)
            self._fns[pv] = fn
        return fn

    def variants(self) -> list[ParamValues]:
        """The variants this kernel compiles (none listed without program parameters)."""
        return list(self._futures)

    def timings(self) -> dict[str, float]:
        return {"import_s": self.import_s, "compile_s": self.compile_s, "startup_s": self.startup_s}

    def launcher(self, p: Point, args: Sequence[Any]) -> Any:
        fn, launch = self.fn_for(p.params), self.backend.launch
        return lambda: launch(fn, p.grid, p.block, args, p.smem)


def _ordered(points: Sequence[Point], spec: Any) -> Iterator[Point]:
    # Grouped by D so arguments are built once per size.
    return iter(sorted(points, key=lambda p: (p.D.values(), p.id)))


def _run_info(job: Job, events: Events) -> int:
    from klaraptor.device.profile import query_device

    k = _Kernel(job)
    be = k.backend
    t = time.time()
    device = query_device(k.device_id)
    steps = {"device_s": time.time() - t}
    attrs = be.attributes(k.fn)
    arch = f"compute_{device.cc[0]}{device.cc[1]}"
    barriers: int | None
    spec = job.spec
    first = k.variants()[0] if spec.params else None
    t = time.time()
    try:
        ptx, entry = (
            be.kernel_ptx(spec, k.fn, arch, first) if first else be.kernel_ptx(spec, k.fn, arch)
        )
        barriers = count_barriers(ptx, entry)
        note = f"static count of bar.sync/barrier.sync in the {arch} PTX (exact outside loops)"
    except Exception as exc:  # noqa: BLE001 - the count is optional; say why it is missing
        barriers, note = None, f"PTX barrier count unavailable: {describe_error(exc)}"
    steps["ptx_s"] = time.time() - t
    variants: dict[str, Any] = {}
    for pv in k.variants():
        t = time.time()
        fn = k.fn_for(pv)
        variants[",".join(f"{n}={v}" for n, v in pv.items())] = {
            **be.attributes(fn).to_dict(),
            "ready_s": time.time() - t,
        }
    events.emit(
        "info",
        attributes=attrs.to_dict(),
        variant_attributes=variants,
        device=device.to_dict(),
        ptx_barriers=barriers,
        ptx_note=note,
        arg_bytes=_arg_bytes(job, be, steps),
        **k.timings(),
        **steps,
    )
    return EXIT_OK


def _arg_bytes(job: Job, be: CupyBackend, steps: dict[str, float] | None = None) -> list[list[Any]]:
    """[[D values, bytes of the array arguments]] at the sizes the job names: the kernel's
    argument footprint, which the scaling model compares with the L2 (a size whose arguments
    cannot be made is left out). Its time goes to `steps["arg_bytes_s"]`."""
    t0 = time.time()
    out: list[list[Any]] = []
    seed = getattr(job.options, "seed", 0)
    cache = ArgsCache(job.spec, seed, be)
    # A make_args that knows its footprint (inferred arguments) spares making the arrays.
    count = getattr(job.spec.make_args, "nbytes", None)
    largest: tuple[int, DataSize, tuple[Any, ...]] | None = None
    for D in job.extra.get("sizes", ()):
        if callable(count):
            try:
                out.append([list(D.values()), int(count(D))])
                continue
            except Exception:  # noqa: BLE001 - then count the real arrays below
                pass
        try:
            args = cache.fresh(D)
            nbytes = sum(int(a.nbytes) for a in args if getattr(a, "ndim", 0) > 0)
        except Exception:  # noqa: BLE001 - optional: the footprint is then fitted without it
            be.free_memory()
            continue
        if largest is None or nbytes > largest[0]:
            largest = (nbytes, D, args)  # the one kept: the others are freed now
        args = ()
        be.free_memory()
        out.append([list(D.values()), nbytes])
    if largest is not None:
        # Never launched on: exactly what the next job of this kernel would make at that size.
        hand_over(job.spec, seed, largest[1], largest[2])
    if steps is not None:
        steps["arg_bytes_s"] = time.time() - t0
    return out


# The collect options that `Timer.measure` takes under the same names.
_TIMING_SETTINGS = (
    "warmup",
    "min_time_ms",
    "min_repeats",
    "max_repeats",
    "target_sample_ms",
    "max_inner",
)


def _timed(timer: Timer, launch: Callable[[], None], opts: Any) -> dict[str, Any]:
    """`timer.measure` of one launch under the collect options' timing protocol."""
    settings = {name: getattr(opts, name) for name in _TIMING_SETTINGS}
    return timer.measure(launch, max_wall_s=opts.max_point_s, **settings)


def _measure_point(k: _Kernel, cache: ArgsCache, timer: Timer, p: Point, opts: Any) -> dict:
    be = k.backend
    spec = k.spec
    value: dict[str, Any] = {"grid": list(p.grid), "dynamic_smem": p.smem}
    if opts.check and spec.reference is not None and not p.cold:
        if spec.idempotent:
            check_args, expected = cache.get(p.D), cache.expected(p.D)
        else:
            # The kernel changes its inputs, so the check gets a copy of pristine ones.
            check_args, expected = cache.check_case(p.D)
        poison_idx = spec.meta.get("overwrites", spec.outputs)
        fn = k.fn_for(p.params)
        value["check"] = be.check_outputs(
            lambda a: be.launch(fn, p.grid, p.block, a, p.smem),
            check_args,
            expected,
            poison_indices=tuple(poison_idx),
            rtol=spec.rtol,
        )
        if not value["check"]["ok"]:
            raise _PointFailed(
                f"output check failed: relative error {value['check']['max_rel_err']:.3g} > "
                f"rtol {spec.rtol:g} (outputs {list(poison_idx)} were poisoned with NaN "
                "first; list in spec.meta['overwrites'] only outputs the kernel fully writes)",
                value,
            )
    args = cache.get(p.D)
    value.update(_timed(timer, k.launcher(p, args), opts))
    value["setup_s"] = cache.take_setup()  # a new size's arguments and reference outputs
    return value


class _PointFailed(Exception):
    def __init__(self, reason: str, value: dict[str, Any]) -> None:
        super().__init__(reason)
        self.value = value


def _config(p: Point) -> str:
    variant = f"{p.params}, " if p.params else ""
    return f"D={p.D}, {variant}block={p.block}, grid={p.grid}, dynamic smem={p.smem} B"


def _run_time(job: Job, events: Events) -> int:
    k = _Kernel(job)
    opts = job.options
    # flush_l2 flushes every point of the collection; Point.cold flushes that point only.
    timers = _Timers(k, flush_all=bool(opts.flush_l2))
    cache = ArgsCache(job.spec, opts.seed, k.backend)
    events.emit("ready", pid=os.getpid(), **k.timings())
    points = list(_ordered(job.points, job.spec))
    if getattr(opts, "racing", False):
        for group in _same_size_groups(points):
            if _race_group(k, cache, timers, group, opts, events)[0]:
                return EXIT_CONTEXT_LOST
        return EXIT_OK
    for p in points:
        if _time_one(k, cache, timers, p, opts, events)[0] == "lost":
            return EXIT_CONTEXT_LOST
    return EXIT_OK


def _same_size_groups(points: Sequence[Point]) -> list[list[Point]]:
    """Consecutive runs of points with one D and one cold flag (the sweeps that race)."""
    groups: list[list[Point]] = []
    for p in points:
        if groups and groups[-1][0].D == p.D and groups[-1][0].cold == p.cold:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


def _race_group(
    k: _Kernel,
    cache: ArgsCache,
    timers: _Timers,
    points: Sequence[Point],
    opts: Any,
    events: Events,
    since: float | None = None,
) -> tuple[bool, dict[int, tuple[str, dict[str, Any]]]]:
    """Race the points of one size (`klaraptor.collect.racing`) and emit one result per point.

    Every measurement of a point is preceded by its `start` event, so a crash or a hang is
    blamed on the point being measured. Returns (the CUDA context was lost, {point id: (status,
    value)} of the points with a result); after a loss the points not measured get no result
    (the next worker measures them)."""
    import dataclasses

    band = getattr(opts, "noise_band", None) or DEFAULT_BAND
    settings = RaceSettings(
        first_ms=float(getattr(opts, "race_first_ms", 1.0)),
        first_repeats=int(getattr(opts, "race_first_repeats", 3)),
        max_full=getattr(opts, "race_max_full", None),
        band=float(band),
    )
    quick = dataclasses.replace(
        opts, min_time_ms=settings.first_ms, min_repeats=settings.first_repeats
    )
    precise = dataclasses.replace(opts, check=False)  # checked at the first estimate
    by_id = {p.id: p for p in points}
    failed: dict[int, tuple[str, dict[str, Any], str]] = {}
    walls: dict[int, float] = {}
    # The size's set-up is paid by whichever measurement builds its arguments: kept per point
    # over both stages (a refined point's full value would otherwise report none, and its wall,
    # set-up included, would pass for timing: 1-3 s a search, 4014a92).
    setups: dict[int, float] = {}
    lost = False
    t_prev = time.perf_counter() if since is None else since

    def measure(pid: int, options: Any) -> dict[str, Any] | None:
        nonlocal lost, t_prev
        if lost:
            return None
        p = by_id[pid]
        events.emit("start", id=pid)
        try:
            value = _measure_point(k, cache, timers.get(p.cold), p, options)
            setups[pid] = setups.get(pid, 0.0) + float(value.get("setup_s", 0.0))
            return value
        except _PointFailed as exc:
            failed[pid] = ("failed", exc.value, str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - any error is this point's failure
            reason = f"{describe_error(exc)} [{_config(p)}]"
            if k.backend.context_alive():
                failed[pid] = ("failed", {}, reason)
            else:
                lost = True
                failed[pid] = (
                    "failed",
                    {},
                    reason + " (the CUDA context was lost; the worker is replaced)",
                )
            return None
        finally:
            now = time.perf_counter()
            walls[pid] = walls.get(pid, 0.0) + now - t_prev
            t_prev = now

    values = race(
        [p.id for p in points],
        lambda pid: measure(pid, quick),
        lambda pid: measure(pid, precise),
        settings,
    )
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for p in points:
        if p.id in failed:
            status, value, reason = failed[p.id]
            events.emit("result", id=p.id, status=status, value=value, reason=reason)
            out[p.id] = (status, value)
        elif values.get(p.id) is not None:
            value = dict(values[p.id])  # type: ignore[arg-type]
            value["wall_s"] = walls.get(p.id, 0.0)  # both stages: what the point cost
            value["setup_s"] = setups.get(p.id, 0.0)  # of which building the size's arguments
            events.emit("result", id=p.id, status="ok", value=value)
            out[p.id] = ("ok", value)
    return lost, out


class _Timers:
    """The session's timers: hot, and L2-flushed (its 2 × L2 buffer made on first use)."""

    def __init__(self, k: _Kernel, flush_all: bool) -> None:
        self._k = k
        self._clock = k.backend.device_clock_mhz(k.device_id)
        self._hot = None if flush_all else k.backend.timer(self._clock)
        self._cold: Timer | None = None

    def get(self, cold: bool) -> Timer:
        if not cold and self._hot is not None:
            return self._hot
        if self._cold is None:
            be = self._k.backend
            self._cold = be.timer(self._clock, flush_bytes=2 * be.l2_bytes(self._k.device_id))
        return self._cold


def _time_one(
    k: _Kernel,
    cache: ArgsCache,
    timers: _Timers,
    p: Point,
    opts: Any,
    events: Events,
    since: float | None = None,
) -> tuple[str, dict[str, Any]]:
    """Measure one point and emit its events: ("ok" | "failed" | "lost", value). The value's
    `wall_s` runs from `since` (default: this call), so a plan loop charges the point with the
    session time spent on it since the previous point, replanning included."""
    events.emit("start", id=p.id)
    t0 = time.perf_counter() if since is None else since
    try:
        value = _measure_point(k, cache, timers.get(p.cold), p, opts)
        value["wall_s"] = time.perf_counter() - t0  # what the point cost: a plan's budget
    except _PointFailed as exc:
        events.emit("result", id=p.id, status="failed", value=exc.value, reason=str(exc))
        return "failed", exc.value
    except Exception as exc:  # noqa: BLE001 - any error is this point's failure
        reason = f"{describe_error(exc)} [{_config(p)}]"
        if k.backend.context_alive():
            events.emit("result", id=p.id, status="failed", value={}, reason=reason)
            return "failed", {}
        events.emit(
            "result",
            id=p.id,
            status="failed",
            value={},
            reason=reason + " (the CUDA context was lost; the worker is replaced)",
        )
        return "lost", {}
    events.emit("result", id=p.id, status="ok", value=value)
    return "ok", value


def plan_result(value: Mapping[str, Any]) -> tuple[float, ...]:
    """A timed point as a plan sees it: (median ms, relative IQR[, measured wall seconds[, of
    which building a new size's arguments and reference outputs]])."""
    out: tuple[float, ...] = (float(value["median_ms"]), float(value.get("spread", float("nan"))))
    if "wall_s" not in value:
        return out
    out = (*out, float(value["wall_s"]))
    return (*out, float(value["setup_s"])) if "setup_s" in value else out


def plan_loop(
    job: Job,
    events: Events,
    measure: Callable[[Point, float], tuple[str, Any]],
    measure_group: Callable[[list[Point], float], tuple[bool, dict[int, tuple[str, Any]]]]
    | None = None,
) -> int:
    """Mode plan's loop: replay the job's plan over the results so far, measure the points it
    asks for next (`measure(point, since)` emits their events: ("ok", value) | ("failed",
    value) | ("lost", value) when the CUDA context is gone), until the plan is done; the job's
    other points get a 'skipped' result. Separate from the CUDA side so it runs the same with
    any measurement.

    `since` is when the previous point ended: a measured wall from there charges the point with
    everything the session spent on it (replanning, argument set-up, events), so the plan's
    budget counts the whole session after start-up, not only the timed launches.

    `measure_group(points, since)`, when given, measures the points the plan asks for at one
    size together (racing) and emits their events: (the context was lost, {id: (status,
    value)})."""
    plan = job.extra["plan"]
    key_of: dict[int, Any] = {int(i): tuple(v) for i, v in job.extra["keys"].items()}
    by_key = {key_of[p.id]: p for p in job.points}
    results: dict[Any, Any] = dict(job.extra.get("known") or {})
    exists = set(by_key) | set(results)
    since = time.perf_counter()
    while need := plan.next_points(results, exists):
        groups = (
            _same_size_groups([by_key[k] for k in need])
            if measure_group is not None
            else [[by_key[k]] for k in need]
        )
        for group in groups:
            if len(group) > 1 and measure_group is not None:
                lost, got = measure_group(group, since)
                since = time.perf_counter()
                for p in group:
                    if p.id in got:
                        status, value = got[p.id]
                        results[key_of[p.id]] = plan_result(value) if status == "ok" else None
                if lost:
                    return EXIT_CONTEXT_LOST
                continue
            status, value = measure(group[0], since)
            since = time.perf_counter()
            if status == "lost":
                return EXIT_CONTEXT_LOST
            results[key_of[group[0].id]] = plan_result(value) if status == "ok" else None
    for key, p in by_key.items():
        if key not in results:
            events.emit("result", id=p.id, status="skipped", value={}, reason="not planned")
    return EXIT_OK


def _run_plan(job: Job, events: Events) -> int:
    k = _Kernel(job)
    timers = _Timers(k, flush_all=False)
    cache = ArgsCache(job.spec, job.options.seed, k.backend)
    events.emit("ready", pid=os.getpid(), **k.timings())
    racing = bool(getattr(job.options, "racing", False))
    return plan_loop(
        job,
        events,
        lambda p, since: _time_one(k, cache, timers, p, job.options, events, since),
        (lambda ps, since: _race_group(k, cache, timers, ps, job.options, events, since))
        if racing
        else None,
    )


def _run_ncu(job: Job, events: Events) -> int:
    k = _Kernel(job)
    be = k.backend
    cache = ArgsCache(job.spec, job.options.seed, be)
    events.emit("ready", pid=os.getpid(), **k.timings())
    for p in _ordered(job.points, job.spec):
        try:
            launch = k.launcher(p, cache.get(p.D))
            launch()  # un-profiled warm-up: lazy module loading, first-touch effects
            be.synchronize("warm-up launch")
            be.profile_one(launch, f"{NVTX_PREFIX}{p.id}")
        except Exception as exc:  # noqa: BLE001 - report and go on while the context lives
            events.emit("failed", id=p.id, reason=f"{describe_error(exc)} [{_config(p)}]")
            if not be.context_alive():
                return EXIT_CONTEXT_LOST
            continue
        events.emit("launched", id=p.id)
    return EXIT_OK


def _run_probe(job: Job, events: Events) -> int:
    fn = job.spec.make_args
    events.emit(
        "probe",
        spec=job.spec.name,
        make_args=f"{fn.__module__}.{fn.__qualname__}",
        points=len(job.points),
        main=getattr(sys.modules.get("__main__"), "__name__", None),
        pid=os.getpid(),
    )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# Mode datadep: the same size on two random inputs

INPUT_ROUNDS = 2  # A, B, A, B: each input timed twice


def spread_blocks(candidates: Sequence[Block], n: int, default: Block | None = None) -> list[Block]:
    """Up to `n` of `candidates` spread over the thread counts: the default block (when it is a
    candidate), then the fewest threads, the most, and evenly between."""
    by_threads = sorted(candidates, key=lambda b: (b[0] * b[1] * b[2], b))
    chosen: list[Block] = [default] if default is not None and default in candidates else []
    if n <= 1 or len(by_threads) <= 1:
        return (chosen or by_threads)[: max(n, 0)]
    for k in range(n):
        b = by_threads[round(k * (len(by_threads) - 1) / (n - 1))]
        if b not in chosen:
            chosen.append(b)
        if len(chosen) >= n:
            break
    return chosen


# ---------------------------------------------------------------------------------------------
# GPU side (a collection worker, or this process)


def time_on_inputs(
    job: Job, D: DataSize, blocks: Sequence[Block] | None, seeds: tuple[int, int], n_blocks: int
) -> dict[str, Any]:
    """The GPU side of the data-dependence check (`klaraptor.collect.data_dependence`): `blocks`
    (default: `spread_blocks` of the launchable candidates at D) timed on the inputs of the two
    `seeds` (the collection's arguments for those seeds), alternately A, B, A, B
    (`INPUT_ROUNDS` rounds) so that drift hits both alike; {"blocks", "timings", "seconds"}."""
    from klaraptor.device.profile import query_device
    from klaraptor.space.configspace import ConfigSpace

    t0 = time.perf_counter()
    k = _Kernel(job)
    spec, opts, be = job.spec, job.options, k.backend
    if blocks is None:
        space = ConfigSpace.for_spec(spec)
        ok, _ = space.admissible(D, spec=spec)
        ok, _ = space.filter_launchable(
            ok, D, be.attributes(k.fn), query_device(k.device_id), spec=spec
        )
        if not ok:
            raise CollectError(f"{spec.name}: no candidate block can launch at {D}")
        blocks = spread_blocks(ok, n_blocks, spec.default_block)
    args = {s: ArgsCache(spec, s, be).fresh(D) for s in seeds}
    timer = be.timer(be.device_clock_mhz(k.device_id))
    timings = []
    for b in blocks:
        p = Point(0, D, b, spec.grid_for(D, b), spec.dynamic_smem_for(D, b))
        rounds: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
        for _ in range(INPUT_ROUNDS):
            for key, s in zip(("a", "b"), seeds):
                m = _timed(timer, k.launcher(p, args[s]), opts)
                rounds[key].append({"median_ms": m["median_ms"], "spread": m["spread"]})
        timings.append({"block": list(p.block), **rounds})
    args.clear()
    be.free_memory()
    return {
        "blocks": [list(b) for b in blocks],
        "timings": timings,
        "seconds": time.perf_counter() - t0,
    }


def _run_datadep(job: Job, events: Events) -> int:
    x = job.extra
    blocks = None if x.get("blocks") is None else [tuple(b) for b in x["blocks"]]
    out = time_on_inputs(job, x["D"], blocks, tuple(x["seeds"]), int(x["n_blocks"]))
    events.emit("datadep", **out)
    return EXIT_OK


_RUNNERS = {
    "info": _run_info,
    "time": _run_time,
    "ncu": _run_ncu,
    "probe": _run_probe,
    "plan": _run_plan,
    "datadep": _run_datadep,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the job in argv[0] (or, with `--serve`, every job named on stdin); returns the exit
    status (see module doc)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--serve"]:
        from klaraptor.collect.warm import serve

        os.environ[IN_WORKER_ENV] = "1"
        return serve(run_job)
    if len(argv) != 1:
        print("usage: python -m klaraptor.collect.worker JOBFILE | --serve", file=sys.stderr)
        return 2
    os.environ[IN_WORKER_ENV] = "1"
    return run_job(argv[0])


# Where a worker writes one cProfile file per job (research: benchmarks/profile_build.py reads
# them to say where a point's milliseconds go); unset, nothing is profiled.
PROFILE_DIR_ENV = "KLARAPTOR_WORKER_PROFILE_DIR"


def _profiled(mode: str, run: Callable[[], int]) -> int:
    where = os.environ.get(PROFILE_DIR_ENV)
    if not where:
        return run()
    import cProfile

    prof = cProfile.Profile()
    try:
        return prof.runcall(run)
    finally:
        Path(where).mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(Path(where) / f"{mode}_{os.getpid()}_{time.time_ns()}.prof"))


def run_job(path: str) -> int:
    """Run one job file; its exit status."""
    with open(path, "rb") as fh:
        header = read_header(fh)
        events = Events(header["events"])
        try:
            job = read_body(fh, header)
        except Exception as exc:  # noqa: BLE001 - report why the job cannot be loaded
            events.emit(
                "fatal",
                error="CollectError",
                message=f"the worker cannot load the job: {type(exc).__name__}: {exc}",
                traceback=traceback.format_exc()[-4000:],
            )
            events.close()
            return EXIT_FATAL
    try:
        return _profiled(job.mode, lambda: _RUNNERS[job.mode](job, events))
    except CompileError as exc:
        events.emit(
            "fatal", error="CompileError", message=str(exc).split("\n--- NVRTC log")[0], log=exc.log
        )
    except Exception as exc:  # noqa: BLE001 - setup failed: report it to the parent
        events.emit(
            "fatal",
            error=type(exc).__name__,
            message=str(exc),
            traceback=traceback.format_exc()[-4000:],
        )
    finally:
        events.close()
    return EXIT_FATAL


if __name__ == "__main__":
    sys.exit(main())
