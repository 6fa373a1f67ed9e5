"""What runs on a Dask worker: the probe, and one chunk of points per task.

Every GPU step still happens in `klaraptor.collect.worker` subprocesses (crash and hang isolation as
on one machine), started with a parent-death guard: when the Dask worker process dies (killed,
out of memory), its measuring subprocess dies with it instead of timing on alongside the
worker that replaces it. One task at a time holds the worker's GPU (`_SLOT`), so a kernel is
never timed by two tasks on one GPU; the client gives each GPU to one worker only.

Results go back to the client as plain values; workers never open the store.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.collect.jobfile import JOB_VERSION
from klaraptor.collect.process import ItemResult, describe_returncode, kill_group, worker_env
from klaraptor.collect.worker import Point
from klaraptor.core.errors import CollectError, KlaraptorError
from klaraptor.core.version import __version__

# Bumped when what the client and the workers exchange changes.
PROTOCOL = 1
_SLOT = threading.Lock()

# Run as `python -S -c GUARD PARENT CMD...`: ask the kernel to SIGKILL this process when its
# parent dies (PR_SET_PDEATHSIG, kept across exec), then become CMD.
GUARD = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(137)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def guarded(argv: Sequence[str]) -> list[str]:
    """`argv`, to die with this process (Linux; elsewhere `argv` runs unguarded)."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-S", "-c", GUARD, str(os.getpid()), *argv]


@contextmanager
def _slot() -> Iterator[None]:
    with _SLOT:
        yield


def identity() -> dict[str, Any]:
    """Who this worker is: address, host, pid, versions, visible GPUs."""
    address = ""
    nthreads = 0
    try:
        from distributed import get_worker

        w = get_worker()
        address, nthreads = w.address, int(getattr(w, "nthreads", 0) or 0)
    except (ImportError, ValueError, AttributeError):
        pass
    return {
        "address": address,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "nthreads": nthreads,
        "klaraptor": __version__,
        "protocol": PROTOCOL,
        "job_version": JOB_VERSION,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def run_json(argv: Sequence[str], mark: str, *, timeout_s: float, what: str) -> Any:
    """Run a helper subprocess (guarded) and parse the JSON of its line starting with `mark`."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            guarded(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=worker_env(),
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc)
        finally:
            if proc.poll() is None:
                kill_group(proc)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    for line in reversed(text.splitlines()):
        if line.startswith(mark):
            return json.loads(line[len(mark) :])
    tail = "\n".join(text.strip().splitlines()[-12:])
    rc = proc.returncode
    how = f"did not finish within {timeout_s:g} s" if rc is None or rc < 0 else ""
    raise CollectError(
        f"{what} on worker {socket.gethostname()} failed "
        f"({how or describe_returncode(rc)}); its output:\n{tail}"
    )


def probe(need_gpu: bool, device_id: int = 0, timeout_s: float = 120.0) -> dict[str, Any]:
    """This worker's identity and, with `need_gpu`, the GPU it measures on."""
    out = identity()
    if need_gpu:
        from klaraptor.collect.dask.gpuquery import MARK

        argv = [sys.executable, "-m", "klaraptor.collect.dask.gpuquery", str(device_id)]
        try:
            out["gpu"] = run_json(argv, MARK, timeout_s=timeout_s, what="the GPU query")
        except CollectError as exc:
            out["gpu"] = {"problem": str(exc)}
    return out


def _workdir(kind: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"klaraptor-dask-{kind}-"))


def info_task(spec: Any, options: Any, sizes: Sequence[Any] = ()) -> dict[str, Any]:
    """The kernel's `info` event (attributes, barriers, device query, argument bytes at `sizes`)
    from this worker's GPU."""
    from klaraptor.collect.executor import kernel_info

    with _slot():
        workdir = _workdir("info")
        try:
            info = kernel_info(spec, options, workdir, worker_env(), wrap=guarded, sizes=sizes)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"info": info, "worker": identity()}


def _measured(kind: str, run: Any) -> dict[str, Any]:
    """`run(workdir, on_result)` holding this worker's GPU, in a scratch folder; its results,
    the runner's statistics with the wall time, and where it ran."""
    results: list[ItemResult] = []
    with _slot():
        t = time.perf_counter()
        workdir = _workdir(kind)
        try:
            stats = run(workdir, results.append)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        stats["wall_s"] = time.perf_counter() - t
    return {"results": results, "stats": stats, "worker": identity()}


def time_chunk(spec: Any, points: Sequence[Point], options: Any) -> dict[str, Any]:
    """Time one chunk of points in isolated worker subprocesses; one result per point."""
    from klaraptor.collect.executor import Work, time_points

    return _measured(
        "time",
        lambda workdir, on_result: time_points(
            Work(spec, points, options, workdir),
            env=worker_env(),
            on_result=on_result,
            wrap=guarded,
        ),
    )


def plan_task(spec: Any, points: Sequence[Point], options: Any, run: Any) -> dict[str, Any]:
    """A budgeted measurement plan (a `PlanRun`) in one session on this worker's GPU; every
    result of it."""
    from klaraptor.collect.executor import Work, plan_session

    return _measured(
        "plan",
        lambda workdir, on_result: plan_session(
            Work(spec, points, options, workdir),
            run,
            env=worker_env(),
            on_result=on_result,
            wrap=guarded,
        ),
    )


def _guarded_exe(exe: str, workdir: Path) -> str:
    """A script that runs `exe` under the parent-death guard (ncu is started by its path)."""
    import shlex

    script = workdir / "ncu-guarded.sh"
    cmd = " ".join(shlex.quote(a) for a in guarded([exe]))
    script.write_text(f'#!/bin/sh\nexec {cmd} "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def ncu_chunk(
    spec: Any, points: Sequence[Point], device: dict[str, Any], options: Any
) -> dict[str, Any]:
    """The counters of one chunk from ONE ncu process on this worker's GPU."""
    from klaraptor.collect import ncu
    from klaraptor.collect.executor import NCU_MISSING, profile_batch
    from klaraptor.device.profile import DeviceProfile

    exe = ncu.find_ncu(options.ncu)
    if exe is None:
        return {"status": "skipped", "reason": NCU_MISSING, "worker": identity()}
    with _slot():
        t = time.perf_counter()
        cc = DeviceProfile.from_dict(device).cc
        metrics = ncu.usable_metrics(exe, cc, options.ncu_metrics)  # cached per process
        query_s = time.perf_counter() - t
        workdir = _workdir("ncu")
        try:
            batch = profile_batch(
                _guarded_exe(exe, workdir),
                metrics,
                spec,
                points,
                options,
                workdir=workdir / "batch",
                env=worker_env(),
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return {
        "status": "ran",
        "rows": batch.rows,
        "failed": batch.failed,
        "error": batch.error,
        "wall_s": batch.wall_s,
        "query_s": query_s,
        "worker": identity(),
    }


def measure_profile_task(device_id: int = 0, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Device query and microbenchmarks of this worker's GPU (a subprocess); the profile dict."""
    mark = "klaraptor-profile "
    code = (
        "import json\n"
        "from klaraptor.collect.microbench import measure_profile\n"
        f"print({mark!r} + json.dumps(measure_profile({int(device_id)}).to_dict()), flush=True)\n"
    )
    with _slot():
        return run_json(
            [sys.executable, "-c", code], mark, timeout_s=timeout_s, what="measuring the profile"
        )


# ---------------------------------------------------------------------------------------------
# The GPU-free checks a cluster can run before spending GPU time


def host_args(spec: Any, D: Any, seed: int) -> tuple[Any, ...]:
    """The launch arguments of D built on the host, with the generator the timing worker seeds
    the same way (numpy `default_rng([seed, 0, *D])`): `make_args(D, rng, device=False)` when
    the factory takes `device` (the suites' do), else `make_args(D, rng)`."""
    rng = np.random.default_rng([seed, 0, *D.values()])
    try:
        takes_device = "device" in inspect.signature(spec.make_args).parameters
    except (TypeError, ValueError):
        takes_device = False
    args = spec.make_args(D, rng, device=False) if takes_device else spec.make_args(D, rng)
    return tuple(args)


def digest(args: Sequence[Any]) -> tuple[str, int]:
    """SHA-1 of the arguments' dtypes, shapes and bytes, and their size in bytes."""
    h = hashlib.sha1()
    total = 0
    for a in args:
        arr = np.ascontiguousarray(np.asarray(a))
        if arr.dtype == object:
            raise CollectError(
                f"argument of type {type(a).__name__} is not a host array or scalar; give "
                "make_args a device=False option that builds NumPy arrays"
            )
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
        total += arr.nbytes
    return h.hexdigest(), total


def preflight_chunk(
    spec: Any, points: Sequence[Point], device: dict[str, Any], space: Any, seed: int
) -> dict[str, Any]:
    """Check one chunk without a GPU: the worker plans each size again (admissible and
    launchable on `device`: same blocks, grids and dynamic shared memory as the client's plan)
    and builds the arguments with the spec's factory (their SHA-1, to compare across workers)."""
    from klaraptor.collect.collector import plan_points
    from klaraptor.collect.process import ItemResult
    from klaraptor.device.profile import DeviceProfile

    dev = DeviceProfile.from_dict(device)
    results: list[ItemResult] = []
    by_d: dict[Any, list[Point]] = {}
    for p in points:
        by_d.setdefault(p.D, []).append(p)
    with _slot():
        t = time.perf_counter()
        for D, pts in by_d.items():
            try:
                plan = plan_points(spec, [D], space, None, dev)
                # keyed by configuration: a kernel with program parameters plans each block
                # once per compiled variant
                planned = {q.config: q for q in plan.points}
                refused = {c: why for _, c, why in plan.rejected}
                plan_error = ""
            except KlaraptorError as exc:
                planned, refused, plan_error = {}, {}, f"the worker cannot plan D={D}: {exc}"
            try:
                sha, nbytes = digest(host_args(spec, D, seed))
                args_error = ""
            except Exception as exc:  # noqa: BLE001 - the factory's failure is the points' result
                sha, nbytes = "", 0
                args_error = f"make_args failed for D={D}: {type(exc).__name__}: {exc}"
            for p in pts:
                q = planned.get(p.config)
                why = plan_error or args_error
                if not why and q is None:
                    why = f"the worker's plan refuses block {p.block} at D={D}: " + refused.get(
                        p.config, "not a candidate"
                    )
                elif not why and q is not None and (tuple(q.grid), q.smem) != (p.grid, p.smem):
                    why = (
                        f"the worker plans grid {q.grid}, dynamic smem {q.smem} for block "
                        f"{p.block} at D={D}; the client planned {p.grid}, {p.smem}"
                    )
                if why:
                    results.append(ItemResult(p.id, "failed", {}, why))
                else:
                    value = {"args_sha1": sha, "args_bytes": nbytes, "grid": list(p.grid)}
                    results.append(ItemResult(p.id, "ok", value))
        wall = time.perf_counter() - t
    return {"results": results, "stats": {"wall_s": wall}, "worker": identity()}
