"""Warm collection workers: one measuring process kept per Python and environment, reused by
every job of this process (info, plan, timing chunks, later builds), isolation kept.

A worker's start costs more than many builds' measurements: Python, klaraptor and CuPy
imports, a CUDA context, NVRTC. A warm worker (`python -m klaraptor.collect.worker --serve`)
pays it once: it reads job file paths on stdin, runs each job exactly as a one-job worker would
(same events file), and when the job ends writes its exit status to `<job>.exit` (atomically),
then waits for the next. Compiled modules, the spin kernel and the CUDA context stay warm.

Isolation is unchanged: a job that hangs gets the worker's process group killed, a worker that
dies (a crash) or loses its CUDA context (it exits after writing its status) is never reused, and
the next job gets a fresh worker. An idle worker exits by itself after `IDLE_EXIT_S` (so a
finished program does not hold a CUDA context), and the pool never hands out one idle for more
than `IDLE_REUSE_S`, so a job never races a worker's own exit.

`serve` is the worker's side of the protocol. Only the plain worker command (`worker_command`, no
wrapper such as ncu or a parent-death guard) is served warm; `KLARAPTOR_WARM_WORKERS=0` turns warm workers off (one process per job, as
before).
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

IDLE_EXIT_S = 120.0  # a warm worker with no job for this long exits ($KLARAPTOR_WARM_IDLE_S)
IDLE_REUSE_S = 90.0  # the pool hands out only workers idle for less than this
WARM_ENV = "KLARAPTOR_WARM_WORKERS"


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill a worker (or ncu) process and everything it started: it leads its own session."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _spawn(
    argv: Sequence[str], log_path: Path, mode: str, stdin: int, env: Mapping[str, str] | None
) -> subprocess.Popen[Any]:
    """`argv` in a session of its own (its group is killed on a hang), its output to `log_path`
    (opened with `mode`)."""
    with open(log_path, mode) as log:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )


def _tail_from(path: Path, offset: int, limit: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace").strip()


def exit_path(job_file: str | os.PathLike[str]) -> Path:
    """Where a warm worker writes a job's exit status."""
    return Path(f"{os.fspath(job_file)}.exit")


def write_exit(job_file: str | os.PathLike[str], rc: int) -> None:
    """The worker's side: the job's exit status, written atomically (after its last event)."""
    final = exit_path(job_file)
    tmp = final.with_name(final.name + ".tmp")
    tmp.write_text(str(int(rc)))
    os.replace(tmp, final)


class FreshRun:
    """A job in its own worker process (the process's exit status is the job's)."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None) -> None:
        self.log_path = log_path
        self.proc = _spawn(argv, log_path, "wb", subprocess.DEVNULL, env)

    def poll(self) -> int | None:
        return self.proc.poll()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def kill(self) -> None:
        kill_group(self.proc)

    def tail(self, limit: int = 1500) -> str:
        return _tail_from(self.log_path, 0, limit)

    def release(self) -> None:
        if self.proc.poll() is None:
            kill_group(self.proc)


class WarmWorker:
    """One `--serve` worker process and its log."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None, log_path: Path) -> None:
        self.log_path = log_path
        self.proc = _spawn(argv, log_path, "ab", subprocess.PIPE, env)
        self.jobs = 0
        self.idle_since = time.monotonic()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Ask it to exit (end of input), then make sure it did."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            kill_group(self.proc)


class WarmRun:
    """A job handed to a warm worker: done when its `.exit` file appears (or the worker died)."""

    def __init__(self, pool: WarmPool, key: Any, worker: WarmWorker, job_file: str) -> None:
        self._pool, self._key, self.worker = pool, key, worker
        self.log_path = worker.log_path
        self._exit = exit_path(job_file)
        self._exit.unlink(missing_ok=True)
        try:
            self._offset = worker.log_path.stat().st_size
        except OSError:
            self._offset = 0
        self._rc: int | None = None
        self._ended_worker = False
        worker.jobs += 1
        try:
            assert worker.proc.stdin is not None
            worker.proc.stdin.write((job_file + "\n").encode())
            worker.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # it died: poll() reports how

    def poll(self) -> int | None:
        if self._rc is not None:
            return self._rc
        if self._exit.exists():
            try:
                self._rc = int(self._exit.read_text().strip() or 1)
            except (OSError, ValueError):
                self._rc = 1
            return self._rc
        rc = self.worker.proc.poll()
        if rc is not None:
            if self._exit.exists():  # written just before it exited
                return self.poll()
            self._ended_worker = True
            self._rc = rc if rc != 0 else 1  # ended without finishing the job: abnormal
        return self._rc

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def kill(self) -> None:
        kill_group(self.worker.proc)
        self._ended_worker = True
        if self._rc is None:
            self._rc = self.worker.proc.returncode

    def tail(self, limit: int = 1500) -> str:
        return _tail_from(self.log_path, self._offset, limit)

    def release(self) -> None:
        """Back to the pool if the job ended normally and the worker lives; else it is ended."""
        from klaraptor.collect.protocol import EXIT_CONTEXT_LOST

        if self._rc is None:
            self.poll()
        reusable = (
            self._rc is not None
            and self._rc != EXIT_CONTEXT_LOST
            and not self._ended_worker
            and self.worker.alive()
        )
        if reusable:
            self._pool.put_back(self._key, self.worker)
        else:
            self.worker.stop()


class WarmPool:
    """Idle warm workers per (Python, environment). Thread-safe; a worker serves one job at a
    time."""

    def __init__(self, serve_argv: Callable[[str], list[str]] | None = None) -> None:
        self._serve_argv = serve_argv or _serve_argv
        self._idle: dict[Any, list[WarmWorker]] = {}
        self._lock = threading.Lock()
        self._logdir: Path | None = None
        self.started = 0  # workers started over the pool's life

    def _log_path(self) -> Path:
        if self._logdir is None:
            self._logdir = Path(tempfile.mkdtemp(prefix="klaraptor-warm-"))
        return self._logdir / f"worker-{self.started}.log"

    def run(
        self,
        python: str,
        job_file: str,
        env: Mapping[str, str] | None,
        prefix: Sequence[str] = (),
    ) -> WarmRun:
        """Hand `job_file` to an idle worker of this Python and environment, or a new one.

        `prefix`: the command the worker runs under (e.g. a Dask worker's parent-death guard);
        workers of another prefix are not shared."""
        key = (tuple(prefix), python, tuple(sorted((env or os.environ).items())))
        now = time.monotonic()
        worker = None
        with self._lock:
            idle = self._idle.get(key, [])
            while idle:
                w = idle.pop()
                if w.alive() and now - w.idle_since < IDLE_REUSE_S:
                    worker = w
                    break
                w.stop()
            if worker is None:
                argv = [*prefix, *self._serve_argv(python)]
                worker = WarmWorker(argv, env, self._log_path())
                self.started += 1
        return WarmRun(self, key, worker, job_file)

    def prestart(self, python: str, env: Mapping[str, str] | None) -> WarmWorker | None:
        """Start a worker for this Python and environment now, unless an idle one is there: it
        imports while the caller prepares its first job. None when one was there already."""
        key = ((), python, tuple(sorted((env or os.environ).items())))
        now = time.monotonic()
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if any(w.alive() and now - w.idle_since < IDLE_REUSE_S for w in idle):
                return None
            worker = WarmWorker(self._serve_argv(python), env, self._log_path())
            self.started += 1
            idle.append(worker)
        return worker

    def discard(self, worker: WarmWorker) -> None:
        """End a prestarted worker that never got a job (its caller found it had none to do),
        without waiting for it."""
        with self._lock:
            if worker.jobs:
                return
            for ws in self._idle.values():
                if worker in ws:
                    ws.remove(worker)
        threading.Thread(target=worker.stop, daemon=True).start()

    def put_back(self, key: Any, worker: WarmWorker) -> None:
        worker.idle_since = time.monotonic()
        with self._lock:
            self._idle.setdefault(key, []).append(worker)

    def idle_workers(self) -> int:
        with self._lock:
            return sum(1 for ws in self._idle.values() for w in ws if w.alive())

    def close(self) -> None:
        """End every idle worker."""
        with self._lock:
            workers = [w for ws in self._idle.values() for w in ws]
            self._idle.clear()
        for w in workers:
            w.stop()


def _serve_argv(python: str) -> list[str]:
    from klaraptor.collect.protocol import WORKER_MODULE

    return [python, "-m", WORKER_MODULE, "--serve"]


POOL = WarmPool()
atexit.register(POOL.close)


def enabled() -> bool:
    return os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def prestart(pool: WarmPool | None = None) -> WarmWorker | None:
    """Start the warm worker the next collection of this process will use (this Python, the
    workers' environment), so its start-up overlaps the caller's own preparation; None when
    warm workers are off or one is idle already. `WarmPool.discard` ends it if it is not used."""
    if not enabled():
        return None
    import sys

    from klaraptor.collect.protocol import worker_env

    return (pool or POOL).prestart(sys.executable, worker_env())


def start(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None,
    pool: WarmPool | None = None,
) -> FreshRun | WarmRun:
    """Run a worker command: the plain worker command (`python -m klaraptor.collect.worker
    JOBFILE`), alone or after a prefix, on a warm worker when enabled (one per prefix), anything
    else in its own process."""
    from klaraptor.collect.protocol import WORKER_MODULE

    argv = list(argv)
    # The plain command may come under a prefix (a Dask worker's parent-death guard): the warm
    # worker then runs under the same prefix, so it still dies with its parent.
    prefix, body = argv[:-4], argv[-4:]
    plain = len(body) == 4 and body[1:3] == ["-m", WORKER_MODULE] and body[3] != "--serve"
    if plain and enabled():
        return (pool or POOL).run(body[0], body[3], env, prefix=prefix)
    return FreshRun(argv, log_path, env)


# ---------------------------------------------------------------------------------------------
# The worker's side (`python -m klaraptor.collect.worker --serve`)

_STDIN_BUFFER = bytearray()


def _next_job(idle_exit_s: float) -> str | None:
    """The next job path on stdin; None at end of input or after `idle_exit_s` without one.
    Reads the file descriptor itself: a buffered reader could hold a line that select() then
    never reports."""
    import select
    import sys

    fd = sys.stdin.fileno()
    while b"\n" not in _STDIN_BUFFER:
        ready, _, _ = select.select([fd], [], [], idle_exit_s)
        if not ready:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        _STDIN_BUFFER.extend(chunk)
    i = _STDIN_BUFFER.index(b"\n")
    line = bytes(_STDIN_BUFFER[:i]).decode("utf-8", errors="replace")
    del _STDIN_BUFFER[: i + 1]
    return line.strip()


def serve(run_job: Callable[[str], int]) -> int:
    """A warm worker: run each job path read on stdin with `run_job`, write its exit status
    beside it, and keep the process (imports, CUDA context, compiled modules) for the next;
    exit at end of input, when idle for $KLARAPTOR_WARM_IDLE_S (default `IDLE_EXIT_S`), or after
    a job lost the CUDA context."""
    import gc
    import sys
    import traceback

    from klaraptor.collect.protocol import EXIT_CONTEXT_LOST, EXIT_FATAL, EXIT_OK

    try:  # every job needs it: import it while the parent prepares the first job
        import cupy  # noqa: F401
    except Exception:  # noqa: BLE001 - a job without CuPy says so itself
        pass
    idle_s = float(os.environ.get("KLARAPTOR_WARM_IDLE_S", IDLE_EXIT_S))
    while True:
        path = _next_job(idle_s)
        if path is None:
            return EXIT_OK
        if not path:
            continue
        try:
            rc = run_job(path)
        except Exception:  # noqa: BLE001 - an unreadable job file: that job fails, we go on
            traceback.print_exc()
            rc = EXIT_FATAL
        gc.collect()  # the job's arguments, then their device memory, before the next job
        _free_device_memory()
        sys.stdout.flush()
        write_exit(path, rc)
        if rc == EXIT_CONTEXT_LOST:
            return rc


def _free_device_memory() -> None:
    import sys

    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001 - best effort: a lost context is handled elsewhere
            pass


__all__ = [
    "IDLE_EXIT_S",
    "IDLE_REUSE_S",
    "POOL",
    "FreshRun",
    "WarmPool",
    "WarmRun",
    "WarmWorker",
    "enabled",
    "exit_path",
    "prestart",
    "serve",
    "start",
    "write_exit",
]
