"""Nsight Compute: one ncu process per batch of points, CSV parsing, rows mapped back to points.

How a batch runs: ncu starts the collection worker (`python -m klaraptor.collect.worker JOB`) with
`--profile-from-start off`; the worker launches each point once un-profiled (warm-up, lazy module
loading), then wraps exactly one launch in `cudaProfilerStart/Stop` inside the NVTX range
`kp:<id>`. With `--nvtx --print-nvtx-rename kernel` ncu names that row `kp:<id>/<kernel>`, which
maps it back to its point; the row's block and grid columns must then equal the point's, else
the mapping is wrong and the batch is refused (an error naming the point). The CSV goes to a
log file (`--log-file`), so the worker's own output cannot interleave with it; the parser still
tolerates interleaved lines, the units row, thousands separators and "n/a".

Measured on the H200 (ncu 2025.3): ≈0.2 s per profiled point for RAW_METRICS (5 replay passes).
"""

from __future__ import annotations

import csv
import functools
import os
import re
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from klaraptor.collect.process import (
    NVTX_PREFIX,
    EventReader,
    describe_returncode,
    kill_group,
    last_lines,
    read_tail,
)
from klaraptor.core.errors import CollectError
from klaraptor.core.metrics import LAUNCH_COLUMNS, RAW_METRICS

_ID_IN_NAME = re.compile(r"(?:^|/)kp:(\d+)/")
_ID_IN_NVTX = re.compile(r"kp:(\d+)\b")
_TRIPLE = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?$")

# ncu scales units automatically unless told otherwise; normalise to ns and bytes (and plain
# counts), so stored values never depend on ncu's display choice.
_TIME_UNITS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30}
_COUNT_UNITS = ("byte", "cycle", "inst", "sector", "request", "warp", "thread", "block", "pass")

# Chip names for `ncu --query-metrics --chip`, by compute capability.
CHIPS: dict[tuple[int, int], str] = {
    (7, 0): "gv100",
    (7, 5): "tu102",
    (8, 0): "ga100",
    (8, 6): "ga102",
    (8, 9): "ad102",
    (9, 0): "gh100",
    (10, 0): "gb100",
    (12, 0): "gb202",
}


# ---------------------------------------------------------------------------------------------
# Parsing


def _unit_scale(unit: str) -> float:
    """Factor turning a value in `unit` into base units (ns, byte, plain counts)."""
    u = unit.strip()
    if u in _TIME_UNITS:
        return _TIME_UNITS[u]
    for prefix in ("Ki", "Mi", "Gi", "K", "M", "G", "T"):
        if u.startswith(prefix) and u[len(prefix) :] in _COUNT_UNITS:
            return _PREFIX[prefix]
    return 1.0


def _convert(text: str) -> Any:
    """A CSV cell as int / float / (x, y, z) / None ("", "n/a") / the original string."""
    s = text.strip()
    if s == "" or s.lower() == "n/a":
        return None
    m = _TRIPLE.match(s)
    if m:
        return (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    if _NUMBER.match(s) and any(c.isdigit() for c in s):
        plain = s.replace(",", "")
        if "." in plain or "e" in plain or "E" in plain:
            return float(plain)
        return int(plain)
    return s


def parse_raw_csv(text: str) -> list[dict[str, Any]]:
    """Rows of `ncu --csv --page raw` output, one dict per profiled kernel launch.

    Tolerates anything that is not CSV (app output, `==PROF==` lines), repeated headers (several
    processes), the units row (values are scaled to base units: ns and bytes), thousands
    separators ("1,980,000"), "n/a" (None) and a truncated last row (dropped). Block and grid
    columns become tuples, numbers int or float.
    """
    rows: list[dict[str, Any]] = []
    header: list[str] | None = None
    scale: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith('"'):
            continue  # app output, ==PROF==/==WARNING== lines, blank lines
        try:
            fields = next(csv.reader([line]))
        except (csv.Error, StopIteration):
            continue
        if fields[:2] == ["ID", "Process ID"]:
            header, scale = fields, {}
            continue
        if header is None or len(fields) != len(header):
            continue  # before any header, or a row cut short by a killed ncu
        if fields[0].strip() == "":
            # The units row: remember how to scale each column.
            scale = {h: _unit_scale(u) for h, u in zip(header, fields) if u.strip()}
            continue
        row: dict[str, Any] = {}
        for h, cell in zip(header, fields):
            v = _convert(cell)
            f = scale.get(h, 1.0)
            if f != 1.0 and isinstance(v, (int, float)):
                v = v * f
            row[h] = v
        rows.append(row)
    return rows


def point_id(row: Mapping[str, Any]) -> int | None:
    """The point id of a row: from `kp:<id>/` in the kernel name, else from the NVTX column."""
    name = str(row.get("Kernel Name") or "")
    m = _ID_IN_NAME.search(name)
    if m:
        return int(m.group(1))
    for key, value in row.items():
        if "Push/Pop_Range" in key and value:
            m = _ID_IN_NVTX.search(str(value))
            if m:
                return int(m.group(1))
    return None


def kernel_name(row: Mapping[str, Any]) -> str:
    """The kernel's own name, without an NVTX rename prefix."""
    return str(row.get("Kernel Name") or "").rsplit("/", 1)[-1]


def kernel_matches(name: str, kernel: str) -> bool:
    """Whether ncu's kernel name `name` is the kernel `kernel`: the plain name (extern "C"), a
    demangled C++ name whose function is `kernel` (`ns::kernel[abi:v1](...)`, `void kernel<T>(...)`)
    or its Itanium-mangled form (`_ZN...5scaleB...`), which is how Numba kernels are named."""
    if name == kernel:
        return True
    if name.startswith("_Z"):
        return re.search(rf"(?<![0-9]){len(kernel)}{re.escape(kernel)}", name) is not None
    return re.search(rf"(?:^|::|\s){re.escape(kernel)}(?=\s*(?:\[|<|\(|$))", name) is not None


def _dims(row: Mapping[str, Any], column: str, prefix: str) -> tuple[int, int, int] | None:
    v = row.get(column)
    if isinstance(v, tuple) and len(v) == 3:
        return (int(v[0]), int(v[1]), int(v[2]))
    parts = [row.get(f"{prefix}_{a}") for a in "xyz"]
    if all(isinstance(p, (int, float)) for p in parts):
        return (int(parts[0]), int(parts[1]), int(parts[2]))  # type: ignore[arg-type]
    return None


def row_block(row: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The launch's block dims from "Block Size" (or launch__block_dim_*)."""
    return _dims(row, "Block Size", "launch__block_dim")


def row_grid(row: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """The launch's grid dims from "Grid Size" (or launch__grid_dim_*)."""
    return _dims(row, "Grid Size", "launch__grid_dim")


@dataclass(frozen=True)
class ProfiledPoint:
    """What the mapping checks a row against: the point's id, block and grid (and its D)."""

    id: int
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    D: Mapping[str, int] = field(default_factory=dict)


@dataclass
class RowMapping:
    """Result of mapping rows to points."""

    rows: dict[int, dict[str, Any]]
    ignored: list[str]  # rows of other kernels or without an id, described


def map_rows(
    rows: Iterable[Mapping[str, Any]], points: Mapping[int, ProfiledPoint], kernel: str
) -> RowMapping:
    """Rows of `kernel` keyed by point id, each verified against the point's block and grid.

    Rows of other kernels and rows without a `kp:<id>` name are ignored (and described).
    Raises CollectError naming the point when a row's block or grid differs from the point's,
    when an id is unknown or when a point has two rows: the mapping cannot be trusted then.
    """
    out: dict[int, dict[str, Any]] = {}
    ignored: list[str] = []
    for row in rows:
        name = kernel_name(row)
        pid = point_id(row)
        if not kernel_matches(name, kernel):
            ignored.append(f"row {row.get('ID')} of kernel {row.get('Kernel Name')!r}")
            continue
        if pid is None:
            ignored.append(f"row {row.get('ID')} of {kernel!r} without a {NVTX_PREFIX}<id> range")
            continue
        p = points.get(pid)
        if p is None:
            raise CollectError(
                f"ncu row {row.get('ID')} is named {NVTX_PREFIX}{pid}/{kernel}, but no point "
                f"of this batch has id {pid}"
            )
        if pid in out:
            raise CollectError(
                f"ncu reported two launches of {kernel!r} for point {pid} (D={dict(p.D)}, "
                f"block={p.block}); exactly one launch per point is profiled"
            )
        block, grid = row_block(row), row_grid(row)
        if block != p.block or grid != p.grid:
            raise CollectError(
                f"ncu row {NVTX_PREFIX}{pid}/{kernel} has block {block} and grid {grid}, but "
                f"point {pid} (D={dict(p.D)}) was launched with block {p.block} and grid "
                f"{p.grid}: rows and points do not match, so this batch's counters are refused"
            )
        out[pid] = dict(row)
    return RowMapping(out, ignored)


def raw_values(row: Mapping[str, Any], metrics: Sequence[str] = RAW_METRICS) -> dict[str, Any]:
    """The values to store for a point: requested metrics and launch columns present in the row."""
    keep = (*metrics, *LAUNCH_COLUMNS)
    return {k: row[k] for k in keep if k in row and row[k] is not None}


# ---------------------------------------------------------------------------------------------
# Finding ncu, validating metric names


def find_ncu(explicit: str | None = None) -> str | None:
    """Path of the ncu executable: `explicit`, $KLARAPTOR_NCU, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin."""
    candidates: list[str | None] = [explicit, os.environ.get("KLARAPTOR_NCU")]
    if explicit or os.environ.get("KLARAPTOR_NCU"):
        for c in candidates:
            if c and os.path.isfile(c) and os.access(c, os.X_OK):
                return c
        return None  # an explicit choice that does not exist must not fall back silently
    found = shutil.which("ncu")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            p = os.path.join(root, "bin", "ncu")
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return None


def parse_query_metrics(text: str) -> set[str]:
    """Base metric names (no rollup suffix) from `ncu --query-metrics` output."""
    names: set[str] = set()
    for line in text.splitlines():
        tok = line.split(maxsplit=1)[0] if line.strip() else ""
        # Some listings qualify names ("SM_A.TriageCompute.l1tex__..."): keep the last part.
        tok = tok.rsplit(".", 1)[-1]
        if "__" in tok and re.fullmatch(r"[a-z0-9_]+", tok):
            names.add(tok)
    return names


def base_name(metric: str) -> str:
    """`sm__warps_active.avg.pct_of_peak_sustained_active` → `sm__warps_active`."""
    return metric.split(".", 1)[0]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "klaraptor"


@functools.lru_cache(maxsize=8)
def available_metrics(ncu: str, chip: str | None) -> frozenset[str]:
    """Base metric names this ncu knows for `chip` (cached in memory and on disk per ncu version).

    Raises CollectError if ncu cannot list them.
    """
    try:
        version = (
            subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
            .stdout.strip()
            .splitlines()[-1:]
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CollectError(f"cannot run {ncu} --version: {exc}") from exc
    tag = re.sub(r"[^A-Za-z0-9.]+", "_", " ".join(version))[-60:] or "unknown"
    cache = _cache_dir() / f"ncu-metrics-{chip or 'local'}-{tag}.txt"
    if cache.is_file():
        names = set(cache.read_text(encoding="utf-8").split())
        if names:
            return frozenset(names)
    cmd = [ncu, "--query-metrics"] + (["--chip", chip] if chip else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CollectError(f"cannot run {' '.join(cmd)}: {exc}") from exc
    names = parse_query_metrics(proc.stdout)
    if proc.returncode != 0 or not names:
        tail = (proc.stderr or proc.stdout)[-500:]
        raise CollectError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {tail}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text("\n".join(sorted(names)), encoding="utf-8")
        os.replace(tmp, cache)
    except OSError:
        pass  # the cache is an optimisation; the names are valid either way
    return frozenset(names)


def validate_metrics(
    requested: Sequence[str], available: Iterable[str]
) -> tuple[list[str], list[str]]:
    """(kept, dropped): a requested metric is kept when its base name is available."""
    avail = set(available)
    kept = [m for m in requested if base_name(m) in avail]
    dropped = [m for m in requested if base_name(m) not in avail]
    return kept, dropped


def usable_metrics(
    ncu: str, cc: tuple[int, int], requested: Sequence[str] = RAW_METRICS
) -> list[str]:
    """The requested metrics this ncu can collect on a GPU of compute capability `cc`.

    Unknown names make ncu fail the whole run, so they are dropped with a warning. When the
    listing itself fails, the list is returned unchecked (with a warning).
    """
    chip = CHIPS.get(tuple(cc))  # type: ignore[arg-type]
    try:
        avail = available_metrics(ncu, chip)
    except CollectError as exc:
        warnings.warn(
            f"could not validate ncu metric names ({exc}); using them unchecked", stacklevel=2
        )
        return list(requested)
    kept, dropped = validate_metrics(requested, avail)
    if dropped:
        warnings.warn(
            f"ncu on {chip or 'this GPU'} does not know the metrics {dropped}; "
            "collecting without them",
            stacklevel=2,
        )
    return kept


# ---------------------------------------------------------------------------------------------
# Running a batch


def build_command(
    ncu: str,
    metrics: Sequence[str],
    log_file: str | os.PathLike[str],
    target: Sequence[str],
    *,
    cache_control: str = "all",
) -> list[str]:
    """The ncu command line profiling every `kp:<id>` range of `target` in one process.

    `cache_control` "all" (the collection's): the caches are flushed before each pass, so the
    counters describe a launch from a cold L2, which the models correct for. "none" (SAAKE's
    referee): each pass finds the L2 as the launch before left it, as in the timed repeats."""
    if not metrics:
        raise CollectError("no ncu metrics to collect")
    if cache_control not in ("all", "none"):
        raise CollectError(f"cache_control must be 'all' or 'none', not {cache_control!r}")
    return [
        ncu,
        "--csv",
        "--page",
        "raw",
        # The timing pass runs at the GPU's own clocks; profile under the same conditions.
        "--clock-control",
        "none",
        "--cache-control",
        cache_control,
        "--profile-from-start",
        "off",
        "--target-processes",
        "all",
        "--nvtx",
        "--print-nvtx-rename",
        "kernel",
        "--metrics",
        ",".join(metrics),
        "--log-file",
        str(log_file),
        *target,
    ]


@dataclass
class BatchResult:
    """What one ncu process produced."""

    rows: dict[int, dict[str, Any]]  # point id → raw values (base units), verified
    missing: list[int]  # points without a row
    command: list[str]
    returncode: int | None
    wall_s: float
    launched: int  # points the worker reported launched
    error: str = ""  # why the batch's counters are unusable ("" when fine)
    failed: dict[int, str] = field(default_factory=dict)  # points whose launch failed, why
    ignored: list[str] = field(default_factory=list)
    log_tail: str = ""


def run_batch(
    ncu: str,
    metrics: Sequence[str],
    points: Mapping[int, ProfiledPoint],
    kernel: str,
    target: Callable[[Path], Sequence[str]],
    *,
    workdir: Path,
    stall_timeout_s: float,
    startup_timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    on_launched: Callable[[int], None] | None = None,
    poll_s: float = 0.05,
) -> BatchResult:
    """Profile every point in ONE ncu process and map the rows back to the points.

    `target(events_path)` returns the worker command that launches the points (it writes
    `{"event": "launched", "id": i}` lines to events_path; `on_launched` is called for each, e.g.
    to drive a progress bar). The process is killed (whole process group) when no point is
    launched for `stall_timeout_s` (after `startup_timeout_s` for the first one); whatever rows
    the log holds by then are still used. Never raises for a failed run: the reason is in
    `BatchResult.error`.
    """

    workdir.mkdir(parents=True, exist_ok=True)
    log_file = workdir / "ncu.csv"
    out_file = workdir / "ncu.out"
    events_path = workdir / "ncu-events.jsonl"
    for p in (log_file, events_path):
        p.unlink(missing_ok=True)
    cmd = build_command(ncu, metrics, log_file, target(events_path))
    t0 = time.monotonic()
    launched: set[int] = set()
    failed: dict[int, str] = {}
    error = ""
    fatal = ""
    worker_pid: int | None = None

    def handle(events: list[dict[str, Any]]) -> bool:
        nonlocal fatal, worker_pid
        progressed = False
        for ev in events:
            kind = ev.get("event")
            if kind == "ready" and isinstance(ev.get("pid"), int):
                worker_pid = ev["pid"]
            elif kind == "launched":
                launched.add(int(ev["id"]))
                progressed = True
                if on_launched is not None:
                    on_launched(int(ev["id"]))
            elif kind == "failed":
                failed[int(ev["id"])] = str(ev.get("reason", ""))
                progressed = True
            elif kind == "fatal":
                fatal = f"{ev.get('error')}: {ev.get('message')}"
        return progressed

    with open(out_file, "wb") as out:
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group: ncu and the worker die together
                env=dict(env) if env is not None else None,
            )
        except OSError as exc:
            return BatchResult({}, sorted(points), cmd, None, 0.0, 0, f"cannot start {ncu}: {exc}")
        reader = EventReader(events_path)
        last = time.monotonic()
        try:
            while True:
                if handle(reader.read()):
                    last = time.monotonic()
                if proc.poll() is not None:
                    handle(reader.read())  # events written just before exiting
                    break
                limit = stall_timeout_s if launched or failed else startup_timeout_s
                if time.monotonic() - last > limit:
                    error = (
                        f"ncu made no progress for {limit:g} s after {len(launched)} of "
                        f"{len(points)} points; {_stop(proc, worker_pid)}"
                    )
                    break
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:
                kill_group(proc)
    wall = time.monotonic() - t0
    tail = read_tail(out_file, 3000)
    text = log_file.read_text(encoding="utf-8", errors="replace") if log_file.is_file() else ""
    rows = parse_raw_csv(text)
    if not error and fatal:
        error = f"the worker under ncu failed: {fatal}"
    if not error and proc.returncode != 0:
        error = f"ncu exited with {describe_returncode(proc.returncode)}: {_last(tail + text)}"
    try:
        mapped = map_rows(rows, points, kernel)
    except CollectError as exc:
        return BatchResult(
            {},
            sorted(points),
            cmd,
            proc.returncode,
            wall,
            len(launched),
            str(exc),
            failed,
            [],
            tail,
        )
    got = {pid: raw_values(row, metrics) for pid, row in mapped.rows.items()}
    missing = sorted(set(points) - set(got) - set(failed))
    if missing and not error:
        error = (
            f"ncu produced no rows for {len(missing)} of {len(points)} points of {kernel!r}: "
            f"{_last(tail + text)}"
        )
        if mapped.ignored:
            error += f" (rows of other kernels: {'; '.join(mapped.ignored[:3])})"
    return BatchResult(
        got, missing, cmd, proc.returncode, wall, len(launched), error, failed, mapped.ignored, tail
    )


def _stop(proc: subprocess.Popen[Any], worker_pid: int | None, grace_s: float = 30.0) -> str:
    """Stop a stalled batch; say how. ncu writes its CSV only when the target exits, so the
    worker is killed first and ncu gets `grace_s` to report the points profiled so far."""
    if worker_pid is not None:
        try:
            os.kill(worker_pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace_s)
            return "killed the worker; ncu reported what it had profiled"
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)
    return "killed ncu (its counters for this batch are lost)"


def _last(text: str) -> str:
    return last_lines(text, 8, skip_csv=True, sep=" | ") or "(no output)"
