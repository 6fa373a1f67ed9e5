"""The Dask executor: collection's GPU work on the workers of a Dask cluster.

`collect(..., executor=DaskExecutor(client))` (or `build(..., client=client)`) runs each pass as
chunks of points (`partition`), one chunk in flight per admitted worker (`admission`), each on
the worker's own GPU in isolated subprocesses (`tasks`). The client writes every finished chunk
into the store in one transaction; workers never touch the file. When a worker leaves (killed,
lost), its chunk in flight is queued again for the others; the rows already written stay, so a
build interrupted on the client resumes without measuring them again. Workers that join later
are probed and admitted under the same rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.collect.dask import tasks
from klaraptor.collect.dask.admission import WorkerProbe, admit, group_by_device
from klaraptor.collect.dask.cluster import require_dask
from klaraptor.collect.dask.partition import PER_WORKER, partition
from klaraptor.collect.executor import (
    NCU_MISSING,
    CounterBatch,
    CounterRun,
    OnBatch,
    OnProgress,
    OnResults,
    PlanRun,
    Work,
)
from klaraptor.collect.worker import Point
from klaraptor.core.errors import CollectError, KlaraptorError

if TYPE_CHECKING:
    from klaraptor.core.types import DataSize
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

REFRESH_S = 0.5  # how often the client asks the scheduler which workers are alive
RESULT_TIMEOUT_S = 60.0  # fetching one chunk's answer (kilobytes) from its worker
Handle = Callable[[str, list[Point], dict[str, Any]], None]


@dataclass
class DistributedStats:
    """What the executor did: chunks finished and handed out, chunks (points) queued again
    after their worker left, results dropped as duplicates, workers lost and refused, and per
    worker the points and chunks it delivered."""

    chunks: int = 0
    dispatched: int = 0
    requeued_chunks: int = 0
    requeued_points: int = 0
    duplicates_dropped: int = 0
    lost_workers: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    per_worker: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "dask_workers": len(self.per_worker),
            "dask_chunks": self.chunks,
            "requeued_points": self.requeued_points,
            "lost_workers": len(self.lost_workers),
            "refused_workers": len(self.refused),
        }


class _WorkerLost(Exception):
    """The worker running a single call left."""


def _is_worker_loss(exc: BaseException) -> bool:
    """Did the task fail because its worker went away (not because of the work)?"""
    from distributed import KilledWorker
    from distributed.comm import CommClosedError

    return isinstance(exc, (KilledWorker, CommClosedError, asyncio.CancelledError))


def check_transportable(spec: KernelSpec) -> None:
    """CollectError unless the spec's callables can be imported by name on other machines."""
    try:
        body = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise CollectError(
            f"kernel spec {spec.name!r} cannot be sent to Dask workers ({exc}); make_args, "
            "reference, DataParam readers and callable constraints must be module-level "
            "functions of a module the workers can import"
        ) from exc
    if b"__main__" in body:
        raise CollectError(
            f"kernel spec {spec.name!r} refers to functions defined in the __main__ script, "
            "which Dask workers cannot import; move make_args, reference and the other "
            "callables into a module installed (or on PYTHONPATH) on every worker"
        )


class DaskExecutor:
    """Runs collection's GPU work on a Dask cluster (see the module docstring).

    `device`: the build's GPU (a DeviceProfile or its key); workers with another GPU are
    refused. Without it, the workers' one GPU model is used and a mix is refused.
    `workers`: use only these worker addresses. `chunk_points`: points per chunk (default: the
    partition rule). `on_progress(executor)` is called after every chunk written.
    """

    def __init__(
        self,
        client: Any,
        *,
        device: DeviceProfile | str | None = None,
        workers: Sequence[str] | None = None,
        chunk_points: int | None = None,
        chunks_per_worker: int = PER_WORKER,
        probe_timeout_s: float = 120.0,
        worker_wait_s: float = 60.0,
        poll_s: float = 0.05,
        on_progress: Callable[[DaskExecutor], None] | None = None,
    ) -> None:
        require_dask()
        self.client = client
        self.device_key: str | None = (
            device if isinstance(device, str) or device is None else (device.key)
        )
        self.only = set(workers) if workers else None
        self.chunk_points = chunk_points
        self.chunks_per_worker = chunks_per_worker
        self.probe_timeout_s = probe_timeout_s
        self.worker_wait_s = worker_wait_s
        self.poll_s = poll_s
        self.on_progress = on_progress
        self.stats = DistributedStats()
        self.probes: dict[str, WorkerProbe] = {}
        self.admitted: dict[str, WorkerProbe] = {}
        self.in_flight: dict[str, int] = {}  # worker address → points of its chunk in flight
        self.points_done = 0
        self._probing: dict[Any, str] = {}
        self._need_gpu = True

    # -- workers --------------------------------------------------------------------------------

    def _alive(self) -> set[str]:
        alive = set(self.client.nthreads())
        return alive & self.only if self.only is not None else alive

    def _submit(self, fn: Callable[..., Any], address: str, *args: Any, label: str) -> Any:
        return self.client.submit(
            fn,
            *args,
            key=f"klaraptor-{label}-{uuid.uuid4().hex[:16]}",
            workers=[address],
            allow_other_workers=False,
            pure=False,
            retries=0,
        )

    def _wait(self, futures: list[Any], timeout_s: float, *, first: bool = False) -> None:
        """Wait for all (or the first) of `futures`, at most `timeout_s`."""
        from distributed import wait

        with self.client.as_current():  # wait() uses the current client; ours is not global
            try:
                wait(
                    futures,
                    timeout=timeout_s,
                    return_when="FIRST_COMPLETED" if first else "ALL_COMPLETED",
                )
            except TimeoutError:
                pass

    def _probe_all(self, addresses: Sequence[str], need_gpu: bool) -> None:
        futs = {
            self._submit(tasks.probe, a, need_gpu, 0, self.probe_timeout_s, label="probe"): a
            for a in addresses
        }
        self._wait(list(futs), self.probe_timeout_s + 30)
        for fut, a in futs.items():
            self.probes[a] = self._probe_result(fut, a, need_gpu)

    def _probe_result(self, fut: Any, address: str, need_gpu: bool) -> WorkerProbe:
        if fut.status == "finished":
            try:
                return WorkerProbe.from_answer(address, fut.result(), gpu_asked=need_gpu)
            except Exception as exc:  # noqa: BLE001 - the worker left while answering
                return WorkerProbe.failed(address, f"its probe was lost ({exc})")
        if fut.status == "error":
            err = fut.exception()
            return WorkerProbe.failed(
                address,
                f"cannot run klaraptor's probe ({type(err).__name__}: {err}); is the same "
                "klaraptor installed on the worker?",
            )
        fut.cancel()
        return WorkerProbe.failed(
            address, f"did not answer the probe within {self.probe_timeout_s:g} s"
        )

    def _decide(self, need_gpu: bool) -> None:
        alive = self._alive()
        taken = {p.gpu_id: a for a, p in self.admitted.items() if a in alive and p.gpu_id}
        probes = [self.probes[a] for a in sorted(alive) if a in self.probes]
        admitted, refused, key = admit(
            probes, need_gpu=need_gpu, device_key=self.device_key, taken=taken
        )
        if need_gpu:
            self.device_key = key
        for addr, why in refused.items():
            if self.stats.refused.get(addr) != why:
                warnings.warn(f"Dask worker {addr} refused: {why}", RuntimeWarning, stacklevel=4)
            self.stats.refused[addr] = why
        self.admitted = {p.address: p for p in admitted}

    def ensure_workers(self, need_gpu: bool = True) -> dict[str, WorkerProbe]:
        """Probe the workers not probed yet and admit them; CollectError when none qualifies."""
        self._need_gpu = need_gpu
        try:
            self.client.wait_for_workers(1, timeout=self.worker_wait_s)
        except (TimeoutError, OSError) as exc:
            raise CollectError(
                f"no Dask worker joined the scheduler within {self.worker_wait_s:g} s ({exc}); "
                "start workers with `dask cuda worker SCHEDULER_ADDRESS` (one per GPU)"
            ) from None
        alive = self._alive()
        if self.only is not None and not alive:
            raise CollectError(f"none of the workers {sorted(self.only)} is connected")
        todo = [a for a in sorted(alive) if self._needs_probe(a, need_gpu)]
        if todo:
            self._probe_all(todo, need_gpu)
        self._decide(need_gpu)
        if not self.admitted:
            reasons = "; ".join(f"{a} {why}" for a, why in sorted(self.stats.refused.items()))
            raise CollectError(f"no Dask worker can take part in this build: {reasons}")
        return dict(self.admitted)

    def _needs_probe(self, address: str, need_gpu: bool) -> bool:
        p = self.probes.get(address)
        return p is None or (need_gpu and not p.gpu_asked and not p.error)

    def gpus(self) -> dict[str, list[str]]:
        """Device key → the workers with a usable GPU of that key (probing them if needed)."""
        alive = self._alive()
        todo = [a for a in sorted(alive) if self._needs_probe(a, True)]
        if todo:
            self._probe_all(todo, True)
        return group_by_device(self.probes[a] for a in alive if a in self.probes)

    def _refresh(self, inflight: dict[Any, tuple[str, list[Point]]], requeue: Callable) -> None:
        """Notice workers that left (queue their chunks again) and probe the ones that came."""
        alive = self._alive()
        for fut, (addr, chunk) in list(inflight.items()):
            if addr not in alive:
                fut.cancel()
                del inflight[fut]
                requeue(chunk)
        for addr in list(self.admitted):
            if addr not in alive:
                del self.admitted[addr]
                self.stats.lost_workers.append(addr)
        for fut, addr in list(self._probing.items()):
            if fut.done() or addr not in alive:
                del self._probing[fut]
                self.probes[addr] = self._probe_result(fut, addr, self._need_gpu)
        probing = set(self._probing.values())
        for addr in sorted(alive - set(self.probes) - probing):
            fut = self._submit(
                tasks.probe, addr, self._need_gpu, 0, self.probe_timeout_s, label="probe"
            )
            self._probing[fut] = addr
        known = {a for a in alive if a in self.probes}
        if known - set(self.admitted) - set(self.stats.refused):
            self._decide(self._need_gpu)

    # -- running chunks -------------------------------------------------------------------------

    def run_chunks(
        self,
        fn: Callable[..., dict[str, Any]],
        spec: KernelSpec,
        points: Sequence[Point],
        args: tuple[Any, ...],
        handle: Handle,
        *,
        need_gpu: bool,
        label: str,
        per_worker: int | None = None,
        target: int | None = None,
    ) -> None:
        """Run `fn(spec, chunk, *args)` on the workers over every chunk of `points`; call
        `handle(worker, chunk_points, answer)` on the client for each chunk, once per point."""
        if not points:
            return
        self.ensure_workers(need_gpu)
        chunks = deque(
            partition(
                points,
                len(self.admitted),
                target=target or self.chunk_points,
                per_worker=per_worker or self.chunks_per_worker,
            )
        )
        pending = {p.id for p in points}
        inflight: dict[Any, tuple[str, list[Point]]] = {}

        def requeue(chunk: list[Point]) -> None:
            left = [p for p in chunk if p.id in pending]
            if left:
                chunks.appendleft(left)
                self.stats.requeued_chunks += 1
                self.stats.requeued_points += len(left)

        last_refresh = 0.0
        starved_since: float | None = None
        try:
            while pending:
                now = time.monotonic()
                if now - last_refresh >= REFRESH_S or not self.admitted:
                    self._refresh(inflight, requeue)
                    last_refresh = now
                busy = {a for a, _ in inflight.values()}
                for addr in sorted(self.admitted):
                    if not chunks:
                        break
                    if addr in busy:
                        continue
                    chunk = [p for p in chunks.popleft() if p.id in pending]
                    if chunk:
                        fut = self._submit(fn, addr, spec, chunk, *args, label=label)
                        inflight[fut] = (addr, chunk)
                        self.stats.dispatched += 1
                self.in_flight = {a: len(c) for a, c in inflight.values()}
                if not inflight:
                    if not chunks:  # every chunk answered, yet points left: queue them again
                        requeue([p for p in points if p.id in pending])
                        continue
                    starved_since = starved_since or now
                    if now - starved_since > self.worker_wait_s:
                        refused = "; ".join(f"{a} {w}" for a, w in self.stats.refused.items())
                        raise CollectError(
                            f"no usable Dask worker for {self.worker_wait_s:g} s with "
                            f"{len(pending)} points left (refused: {refused or 'none'})"
                        )
                    time.sleep(min(REFRESH_S, 10 * self.poll_s))
                    continue
                starved_since = None
                self._wait(list(inflight), self.poll_s, first=True)
                for fut in [f for f in inflight if f.done()]:
                    addr, chunk = inflight.pop(fut)
                    self.in_flight = {a: len(c) for a, c in inflight.values()}
                    self._finish(fut, addr, chunk, pending, handle, requeue)
        finally:
            self.in_flight = {}
            leftover = list(inflight) + list(self._probing)
            self._probing.clear()
            if leftover:  # interrupted: the chunks in flight are dropped, not written
                self.client.cancel(leftover)

    def _finish(
        self,
        fut: Any,
        addr: str,
        chunk: list[Point],
        pending: set[int],
        handle: Handle,
        requeue: Callable[[list[Point]], None],
    ) -> None:
        if fut.status == "error":
            exc = fut.exception()
            if _is_worker_loss(exc):
                requeue(chunk)
                return
            if isinstance(exc, KlaraptorError):
                raise exc
            raise CollectError(
                f"a collection task failed on Dask worker {addr}: {type(exc).__name__}: {exc} "
                "(can the worker import klaraptor and the kernel spec's module?)"
            )
        # An answer held by a worker that has left is lost: the scheduler would wait forever to
        # recompute it on that worker, so it is queued again instead of fetched.
        if fut.status != "finished" or addr not in self._alive():
            fut.cancel()
            requeue(chunk)
            return
        try:
            answer = fut.result(timeout=RESULT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the worker left while sending the answer
            if isinstance(exc, KlaraptorError):
                raise
            fut.cancel()
            requeue(chunk)
            return
        fresh = [p for p in chunk if p.id in pending]
        self.stats.duplicates_dropped += len(chunk) - len(fresh)
        if fresh:
            handle(addr, fresh, answer)
            pending.difference_update(p.id for p in fresh)
            self.points_done += len(fresh)
            per = self.stats.per_worker.setdefault(addr, {"points": 0, "chunks": 0})
            probe = self.admitted.get(addr) or self.probes.get(addr)
            if probe is not None:
                per.update(host=probe.host, gpu=probe.gpu_id)
            per["points"] += len(fresh)
            per["chunks"] += 1
        self.stats.chunks += 1
        if self.on_progress is not None:
            self.on_progress(self)

    def collected_by(self, addr: str) -> dict[str, Any]:
        """Where a chunk was measured, as stored with its rows."""
        p = self.admitted.get(addr) or self.probes.get(addr)
        return {"worker": addr, "host": p.host if p else "", "gpu": p.gpu_id if p else None}

    # -- the Executor interface of klaraptor.collect.collector ---------------------------------------

    @staticmethod
    def worker_options(options: Any) -> Any:
        """What a worker gets: its own Python, its first visible GPU (device 0)."""
        return dataclasses.replace(options, python=None, device_id=0, keep_workdir=False)

    def call(
        self, fn: Callable[..., Any], address: str, *args: Any, label: str, timeout_s: float
    ) -> Any:
        """`fn(*args)` on one worker; _WorkerLost when it leaves, CollectError past `timeout_s`."""
        fut = self._submit(fn, address, *args, label=label)
        deadline = time.monotonic() + timeout_s
        while not fut.done():
            self._wait([fut], REFRESH_S)
            if fut.done():
                break
            if address not in self._alive():
                fut.cancel()
                raise _WorkerLost(address)
            if time.monotonic() > deadline:
                fut.cancel()
                raise CollectError(
                    f"Dask worker {address} did not finish {label} in {timeout_s:g} s"
                )
        if fut.status == "error" and _is_worker_loss(fut.exception()):
            raise _WorkerLost(address)
        return fut.result()

    def kernel_info(
        self, spec: KernelSpec, options: Any, workdir: Path, sizes: Sequence[DataSize] = ()
    ) -> dict[str, Any]:
        from klaraptor.device.profile import DeviceProfile

        check_transportable(spec)
        self.ensure_workers(True)
        opts = self.worker_options(options)
        errors = []
        for addr in sorted(self.admitted):
            try:
                answer = self.call(
                    tasks.info_task,
                    addr,
                    spec,
                    opts,
                    list(sizes),
                    label="info",
                    timeout_s=opts.startup_timeout_s + 60,
                )
            except _WorkerLost:
                errors.append(f"{addr} left")
                continue
            info = answer["info"]
            found = DeviceProfile.from_dict(info["device"])
            if found.key != self.device_key:
                raise CollectError(
                    f"Dask worker {addr} compiled on {found.key!r}, not the build's device "
                    f"{self.device_key!r}; its GPU changed since it was admitted"
                )
            return info
        raise CollectError(f"no Dask worker could compile {spec.name}: {'; '.join(errors)}")

    def time_points(self, work: Work, *, on_results: OnResults) -> dict[str, Any]:
        spec, points, options = work.spec, work.points, work.options
        check_transportable(spec)
        runner = {"timing_workers": 0, "crashes": 0, "timeouts": 0, "worker_startup_s": 0.0}

        def handle(addr: str, fresh: list[Point], answer: dict[str, Any]) -> None:
            ids = {p.id for p in fresh}
            where = self.collected_by(addr)
            results = [r for r in answer["results"] if r.id in ids]
            for r in results:
                r.value = {**r.value, "collected_by": where}
            for k in runner:
                runner[k] += answer["stats"].get(k, 0)
            on_results(results)

        opts = self.worker_options(options)
        self.run_chunks(
            tasks.time_chunk, spec, points, (opts,), handle, need_gpu=True, label="time"
        )
        return {**runner, **self.stats.summary()}

    def plan_session(self, work: Work, run: PlanRun, *, on_results: OnResults) -> dict[str, Any]:
        """The plan in one session on one worker's GPU (it is sequential); its results are
        written when the session returns. A worker that leaves loses the session: the next
        admitted worker runs the plan again from the results known before."""
        spec, points = work.spec, work.points
        check_transportable(spec)
        opts = self.worker_options(work.options)
        # Each point is bounded by the timeout; the session by all of them and a start-up.
        limit = opts.startup_timeout_s + opts.timeout_s * max(1, len(points))
        tried: list[str] = []
        while True:
            self.ensure_workers(True)
            left = [a for a in sorted(self.admitted) if a not in tried]
            if not left:
                raise CollectError(
                    f"every admitted Dask worker left during the plan session of {spec.name} "
                    f"(tried {tried})"
                )
            addr = left[0]
            tried.append(addr)
            self.in_flight[addr] = len(points)
            try:
                answer = self.call(
                    tasks.plan_task,
                    addr,
                    spec,
                    list(points),
                    opts,
                    PlanRun(run.plan, dict(run.key_of), dict(run.known)),
                    label="plan",
                    timeout_s=limit,
                )
            except _WorkerLost:
                self.stats.lost_workers.append(addr)
                self.stats.requeued_points += len(points)
                continue
            finally:
                self.in_flight.pop(addr, None)
            where = self.collected_by(addr)
            results = answer["results"]
            for r in results:
                r.value = {**r.value, "collected_by": where}
            on_results(results)
            measured = sum(r.status != "skipped" for r in results)
            self.points_done += measured
            per = self.stats.per_worker.setdefault(addr, {"points": 0, "chunks": 0})
            per.update(host=where["host"], gpu=where["gpu"])
            per["points"] += measured
            per["chunks"] += 1
            self.stats.chunks += 1
            return {**answer["stats"], "dask_worker": addr, **self.stats.summary()}

    def profile_points(
        self, work: Work, device: DeviceProfile, *, on_batch: OnBatch, on_progress: OnProgress
    ) -> CounterRun:
        spec, points, options = work.spec, work.points, work.options
        check_transportable(spec)
        run = CounterRun("ran")
        skipped: list[str] = []
        handled = [0]

        def handle(addr: str, fresh: list[Point], answer: dict[str, Any]) -> None:
            handled[0] += 1
            if answer["status"] == "skipped":
                skipped.append(f"worker {addr}: {answer['reason']}")
            else:
                ids = {p.id for p in fresh}
                rows = {i: v for i, v in answer["rows"].items() if i in ids}
                failed = {i: v for i, v in answer["failed"].items() if i in ids}
                batch = CounterBatch(fresh, rows, failed, answer["error"], answer["wall_s"])
                run.query_s = max(run.query_s, float(answer.get("query_s", 0.0)))
                if batch.error:
                    run.errors.append(f"worker {addr}: {batch.error}")
                on_batch(batch)
            on_progress(len(fresh))

        opts = self.worker_options(options)
        self.run_chunks(
            tasks.ncu_chunk,
            spec,
            points,
            (device.to_dict(), opts),
            handle,
            need_gpu=True,
            label="ncu",
            per_worker=2,  # an ncu process costs seconds to start: fewer, larger chunks
            target=opts.ncu_batch if opts.ncu_batch > 0 else None,
        )
        if skipped and len(skipped) == handled[0]:  # no worker has ncu
            return CounterRun("skipped", f"{NCU_MISSING} ({'; '.join(sorted(set(skipped)))})")
        run.errors += skipped
        return run

    # -- device profiles ------------------------------------------------------------------------

    def device_profile(self, store: Store, *, measure: bool = True) -> DeviceProfile:
        """The profile of the workers' GPU model: cached in `store`, else measured ONCE, on one
        worker, and cached (never once per worker)."""
        from klaraptor.device.profile import DeviceProfile

        self.ensure_workers(True)
        key = self.device_key
        assert key is not None
        cached = store.cached_profile(key)
        if cached is not None and not cached.missing_model_inputs:
            return cached
        if not measure:
            raise CollectError(f"no measured device profile for {key!r} in {store.path}")
        for addr in sorted(self.admitted):  # one worker measures; another if it leaves
            try:
                answer = self.call(
                    tasks.measure_profile_task, addr, 0, label="profile", timeout_s=3600
                )
                break
            except _WorkerLost:
                continue
        else:
            raise CollectError(f"every Dask worker left while measuring the profile of {key!r}")
        profile = DeviceProfile.from_dict(answer)
        if profile.key != key:
            raise CollectError(
                f"Dask worker {addr} measured a profile of {profile.key!r}, not {key!r}"
            )
        store.save_profile(profile)
        return profile
