"""Worker processes: start, watch, kill and replace them; the event protocol they speak.

Every GPU point runs in a worker subprocess (`python -m klaraptor.collect.worker JOBFILE`), so a kernel
that crashes the CUDA context or never ends costs one worker, not the build. The worker appends
one JSON event per line to an events file (not stdout, where user code may print); the parent
reads them with `EventReader`. A profiled launch is wrapped in the NVTX range `kp:<id>`, which is
how Nsight Compute's rows are mapped back to points.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaraptor.collect import warm
from klaraptor.collect.protocol import (  # re-exported: the worker and the executors use them
    EXIT_CONTEXT_LOST as EXIT_CONTEXT_LOST,
)
from klaraptor.collect.protocol import EXIT_FATAL as EXIT_FATAL
from klaraptor.collect.protocol import EXIT_OK as EXIT_OK
from klaraptor.collect.protocol import WORKER_MODULE as WORKER_MODULE
from klaraptor.collect.protocol import worker_env as worker_env
from klaraptor.collect.warm import kill_group as kill_group  # re-exported: ncu and Dask use it
from klaraptor.core.errors import CollectError, CompileError, MissingDependencyError

NVTX_PREFIX = "kp:"


def describe_returncode(rc: int | None) -> str:
    """How a process ended, in words."""
    if rc is None:
        return "no exit status"
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def read_tail(path: Path, nbytes: int = 1500) -> str:
    """The last `nbytes` of a file as text ('' when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - nbytes))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_lines(text: str, n: int = 12, *, skip_csv: bool = False, sep: str = "\n") -> str:
    """The last `n` non-blank lines of `text` (CSV rows left out with `skip_csv`)."""
    keep = [ln for ln in text.splitlines() if ln.strip() and not (skip_csv and ln.startswith('"'))]
    return sep.join(keep[-n:])


def _tail(path: Path, limit: int = 1500) -> str:
    return last_lines(read_tail(path, limit))


# ---------------------------------------------------------------------------------------------
# Events


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return repr(obj)


class Events:
    """Appends one JSON line per event and flushes it, so a crash right after loses nothing."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # kept open for the life of the worker

    def emit(self, event: str, **fields: Any) -> None:
        self._fh.write(json.dumps({"event": event, **fields}, default=_jsonable) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Done with this job's events (a warm worker goes on to the next job)."""
        self._fh.close()


class EventReader:
    """Reads the complete event lines appended to a file since the last call."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._pos = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._pos)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._pos += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next call
        out: list[dict[str, Any]] = []
        for ln in lines:
            if not ln.strip():
                continue
            try:
                ev = json.loads(ln)
            except json.JSONDecodeError:
                ev = {"event": "garbled", "line": ln[:200].decode("utf-8", errors="replace")}
            out.append(ev if isinstance(ev, dict) else {"event": "garbled", "line": str(ev)})
        return out


# ---------------------------------------------------------------------------------------------
# Running workers


@dataclass
class ItemResult:
    """One item's outcome from a worker: status 'ok' or 'failed', its value and reason."""

    id: int
    status: str
    value: dict[str, Any]
    reason: str = ""


@dataclass
class RunnerStats:
    """How an isolated run went: workers started, workers that ended abnormally (`crashes`,
    including a lost CUDA context), items killed for a timeout, the workers' ready events."""

    workers: int = 0
    crashes: int = 0
    timeouts: int = 0
    ready: list[dict[str, Any]] = field(default_factory=list)


def _raise_fatal(ev: Mapping[str, Any], log_tail: str) -> None:
    if ev.get("error") == "CompileError":
        raise CompileError(str(ev.get("message") or "compilation failed"), str(ev.get("log", "")))
    if ev.get("error") == "MissingDependencyError":  # e.g. an unusable numba-cuda: says which
        raise MissingDependencyError(str(ev.get("message")))
    detail = f"\n{ev['traceback']}" if ev.get("traceback") and not ev.get("message") else ""
    tail = f"\nworker output:\n{log_tail}" if log_tail else ""
    raise CollectError(
        f"collection worker failed: {ev.get('error')}: {ev.get('message')}{detail}{tail}"
    )


def run_isolated(
    command: Callable[[list[int], Path], Sequence[str]],
    ids: Iterable[int],
    *,
    on_result: Callable[[ItemResult], None],
    timeout_s: float,
    workdir: Path,
    startup_timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    poll_s: float = 0.01,
    pool: warm.WarmPool | None = None,
) -> RunnerStats:
    """Process items in worker subprocesses, surviving crashes and hangs of single items.

    `command(remaining_ids, events_path)` returns the argv of a worker that handles those ids in
    order and appends JSON events to events_path: `ready`, then per item `start {id}` and
    `result {id, status, value, reason}`, or `fatal {error, message[, log]}` when it cannot work
    at all (raised here: CompileError or CollectError). When a worker dies during an item (no
    result), or an item runs longer than `timeout_s`, the item gets a 'failed' result with the
    reason, the worker's process group is killed, and a new worker takes the remaining items.
    `on_result` sees every item exactly once. Raises CollectError when a worker fails without
    finishing any item, or stays idle for `startup_timeout_s`. The plain worker command runs
    on a warm worker (`klaraptor.collect.warm`; `pool`, default the process's), so a worker is
    started once and reused across runs; a killed or dead one is never reused.
    """
    remaining = list(dict.fromkeys(int(i) for i in ids))
    stats = RunnerStats()
    workdir.mkdir(parents=True, exist_ok=True)
    while remaining:
        n = stats.workers
        stats.workers += 1
        events_path = workdir / f"worker-{n}.events.jsonl"
        log_path = workdir / f"worker-{n}.log"
        argv = list(command(list(remaining), events_path))
        proc = warm.start(argv, log_path, env, pool)  # a warm worker, or a process of its own
        reader = EventReader(events_path)
        current: int | None = None
        started = last = time.monotonic()
        done = 0
        timed_out = False
        fatal: dict[str, Any] | None = None

        def finish(item: int, status: str, value: dict[str, Any], reason: str) -> None:
            nonlocal done
            if item in remaining:
                remaining.remove(item)
                done += 1
                on_result(ItemResult(item, status, value, reason))

        def handle(events: list[dict[str, Any]]) -> None:
            nonlocal current, started, last, fatal
            for ev in events:
                kind = ev.get("event")
                last = time.monotonic()
                if kind == "ready":
                    stats.ready.append(ev)
                elif kind == "start":
                    current, started = int(ev["id"]), time.monotonic()
                elif kind == "result":
                    item = int(ev["id"])
                    finish(
                        item,
                        str(ev.get("status", "failed")),
                        dict(ev.get("value") or {}),
                        str(ev.get("reason", "")),
                    )
                    if item == current:
                        current = None
                elif kind == "fatal":
                    fatal = ev

        try:
            while True:
                handle(reader.read())
                if proc.poll() is not None:
                    handle(reader.read())  # events written just before exiting
                    break
                now = time.monotonic()
                if current is not None and now - started > timeout_s:
                    proc.kill()
                    handle(reader.read())  # the result may have landed just before the kill
                    if current is not None:
                        timed_out = True
                        stats.timeouts += 1
                        finish(
                            current,
                            "failed",
                            {},
                            f"timeout after {timeout_s:g} s (the worker was killed and replaced)",
                        )
                        current = None
                    break
                if current is None and now - last > startup_timeout_s:
                    proc.kill()
                    raise CollectError(
                        f"the collection worker did nothing for {startup_timeout_s:g} s "
                        f"(command: {' '.join(argv)}); output:\n{proc.tail()}"
                    )
                time.sleep(poll_s)
        finally:
            proc.release()  # a warm worker whose job ended goes back to its pool
        rc = proc.returncode
        if fatal is not None:
            _raise_fatal(fatal, proc.tail())
        if rc != EXIT_OK and not timed_out:
            stats.crashes += 1  # died, or exited because its CUDA context was lost
        if current is not None:
            tail = proc.tail(800)
            finish(
                current,
                "failed",
                {},
                f"the worker died ({describe_returncode(rc)}) while measuring this point"
                + (f"; its last output: {tail}" if tail else ""),
            )
        elif rc != EXIT_OK and done == 0 and remaining:
            raise CollectError(
                f"the collection worker ended ({describe_returncode(rc)}) before finishing any point "
                f"(command: {' '.join(argv)}); output:\n{proc.tail()}"
            )
        elif rc == EXIT_OK and remaining and done == 0:
            raise CollectError(
                f"the collection worker exited normally without reporting points {remaining}"
            )
    return stats


def run_once(
    argv: Sequence[str],
    events_path: Path,
    *,
    timeout_s: float,
    env: Mapping[str, str] | None,
    pool: warm.WarmPool | None = None,
) -> list[dict[str, Any]]:
    """Run a worker to completion and return its events; fatal events are raised."""
    log_path = events_path.with_suffix(".log")
    proc = warm.start(argv, log_path, env, pool)
    deadline = time.monotonic() + timeout_s
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise CollectError(
                    f"the collection worker did not finish within {timeout_s:g} s; output:\n"
                    f"{proc.tail()}"
                )
            time.sleep(0.005)
    finally:
        proc.release()
    events = EventReader(events_path).read()
    for ev in events:
        if ev.get("event") == "fatal":
            _raise_fatal(ev, proc.tail())
    if proc.returncode != EXIT_OK:
        raise CollectError(
            f"the collection worker ended ({describe_returncode(proc.returncode)}); output:\n"
            f"{proc.tail()}"
        )
    return events


def worker_command(job_file: Path, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", WORKER_MODULE, str(job_file)]
