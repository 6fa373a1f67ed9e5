"""The referee for SAAKE's bottlenecks: Nsight Compute's throughput breakdown (speed of light and
pipe utilisation) of SAAKE's chosen configuration of every suite kernel at its smallest
evaluation size, in ONE ncu session.

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> python3 scripts/device_saake_sol.py OUTDIR [--limit 140]

Reads benchmarks/results/h200/saake_choices.json (made on a CPU by
`klaraptor bench saake` or `klaraptor bench report`): per kernel the data size and the block SAAKE chose.
Writes to OUTDIR:
    env.json    GPU, driver, clocks, ncu and CuPy versions
    sol.json    per kernel: D, block, grid, the ncu metrics (klaraptor_bench.referee.METRICS,
                those this ncu knows), or why there are none
    ncu.csv     ncu's raw page as written;  ncu.out  ncu's own output
    log.txt     what ran, how long, what failed
How: one worker job per kernel (klaraptor.collect.worker, mode "ncu": one warm-up launch, then one
launch in the NVTX range kp:<id> between cudaProfilerStart/Stop), all run by ONE process under
ONE ncu (`--profile-from-start off`, `--clock-control none`, the same command line the collector
uses, klaraptor.collect.ncu.build_command, but with `--cache-control none`: each replay pass finds the
L2 as the launch before left it, as in the timed repeats whose bottleneck SAAKE names; the
collection flushes it). Past --limit seconds the job runner is killed and ncu
reports what it profiled. Every step is independent; failures are recorded, not fatal.
Expected wall time: 60-120 s (44 kernels: NVRTC compile, inputs at the evaluation size, one
warm-up and one profiled launch with a few replay passes each). Then, on a CPU:
    klaraptor bench saake --sol OUTDIR/sol.json   → benchmarks/results/h200/bottlenecks.json
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# klaraptor and its evaluation plug-in (the referee's metrics), from the checkout, uninstalled.
SOURCES = [str(ROOT / "src"), str(ROOT / "plugins" / "klaraptor-bench" / "src")]
sys.path[:0] = SOURCES
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (*SOURCES, os.environ.get("PYTHONPATH", "")) if p
)

CHOICES = ROOT / "benchmarks" / "results" / "h200" / "saake_choices.json"


def run_jobs(job_files: list[str]) -> int:
    """The target ncu profiles: every job in this one process (one CUDA context)."""
    from klaraptor.collect.jobfile import read_body, read_header
    from klaraptor.collect.process import EXIT_CONTEXT_LOST, Events
    from klaraptor.collect.worker import _run_ncu

    for path in job_files:
        with open(path, "rb") as fh:
            header = read_header(fh)
            events = Events(header["events"])
            try:
                job = read_body(fh, header)
                rc = _run_ncu(job, events)
            except Exception as exc:  # noqa: BLE001 - this kernel fails, the rest go on
                events.emit("fatal", error=type(exc).__name__, message=str(exc)[:2000])
                continue
        if rc == EXIT_CONTEXT_LOST:
            return rc
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--run-jobs":
        return run_jobs(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--limit", type=float, default=140.0, help="seconds for the ncu session")
    ap.add_argument("--choices", type=Path, default=CHOICES)
    a = ap.parse_args()
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    lines: list[str] = []

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        lines.append(line)
        (out / "log.txt").write_text("\n".join(lines) + "\n")

    def step(name: str, fn, *args):  # noqa: ANN001, ANN202 - a script
        t0 = time.monotonic()
        try:
            result = fn(*args)
            log(f"{name}: ok ({time.monotonic() - t0:.1f} s)")
            return result
        except Exception:  # noqa: BLE001 - record and go on
            log(f"{name}: FAILED ({time.monotonic() - t0:.1f} s)\n{traceback.format_exc()[-3000:]}")
            return None

    step("environment", write_environment, out)
    choices = step("choices", lambda: json.loads(a.choices.read_text())["kernels"])
    if not choices:
        log(f"no choices in {a.choices}: make them with `klaraptor bench saake`")
        return 1
    ncu = step("find ncu", _find_ncu)
    metrics = step("metric names", _metrics, ncu) if ncu else None
    jobs = step("job files", _jobs, out / "jobs", choices)
    result: dict[str, Any] = {"kernels": {}, "metrics": metrics}
    if ncu and metrics and jobs:
        run = step("ncu session", _session, ncu, metrics, out, jobs, a.limit)
        if run is not None:
            result.update(run["session"])
            result["kernels"] = step("map rows", _map, out / "ncu.csv", jobs, metrics) or {}
    for c in choices:
        result["kernels"].setdefault(c["kernel"], {"status": "not profiled (see log.txt)"})
    from klaraptor.core.provenance import commit

    result["provenance"] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "choices": str(a.choices),
        "host": platform.node(),
    }
    (out / "sol.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    ok = sum(1 for v in result["kernels"].values() if v.get("status") == "ok")
    log(
        f"sol.json: {ok} of {len(choices)} kernels profiled; total {time.monotonic() - t_start:.1f} s"
    )
    return 0


def write_environment(out: Path) -> None:
    """env.json in `out`: GPU, driver, clocks, ncu and CuPy versions (also the referee check's)."""
    env: dict[str, Any] = {"python": sys.version, "platform": platform.platform()}
    for cmd in (
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm", "--format=csv"],
        ["ncu", "--version"],
    ):
        try:
            env[cmd[0]] = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            env[cmd[0]] = f"unavailable: {exc}"
    try:
        import cupy

        env["cupy"] = cupy.__version__
    except ImportError as exc:
        env["cupy"] = f"unavailable: {exc}"
    (out / "env.json").write_text(json.dumps(env, indent=1) + "\n")


def _find_ncu() -> str:
    from klaraptor.collect.ncu import find_ncu

    ncu = find_ncu()
    if ncu is None:
        raise RuntimeError("ncu not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    return ncu


def _metrics(ncu: str) -> list[str]:
    from klaraptor.collect.ncu import usable_metrics
    from klaraptor_bench.referee import METRICS

    return usable_metrics(ncu, (9, 0), METRICS)


def _jobs(folder: Path, choices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from klaraptor import suite
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.collect.jobfile import Point, write_job

    folder.mkdir(parents=True, exist_ok=True)
    events = folder / "events.jsonl"
    events.unlink(missing_ok=True)
    jobs = []
    for k, c in enumerate(choices):
        spec = suite.get(c["kernel"])
        D = spec.size(dict(zip(spec.data_names, c["D"])))
        block = tuple(int(v) for v in c["block"])
        grid = spec.grid_for(D, block)
        point = Point(k, D, block, grid, spec.dynamic_smem_for(D, block))  # type: ignore[arg-type]
        path = folder / f"job{k:02d}.pkl"
        write_job(
            path, mode="ncu", spec=spec, points=[point], options=CollectOptions(), events=events
        )
        jobs.append({"id": k, "kernel": spec.name, "function": spec.kernel, "D": list(D.values()),
                     "block": list(block), "grid": list(grid), "path": str(path),
                     "events": str(events)})  # fmt: skip
    return jobs


def _session(
    ncu: str,
    metrics: list[str],
    out: Path,
    jobs: list[dict[str, Any]],
    limit: float,
    *,
    cache_control: str = "none",
    name: str = "ncu",
) -> dict[str, Any]:
    """One ncu process over every job (`name`.csv, `name`.out in `out`); `cache_control` as
    klaraptor.collect.ncu.build_command (the referee's "none"; the collection's counters "all")."""
    from klaraptor.collect.ncu import build_command
    from klaraptor.collect.process import EventReader

    log_file = out / f"{name}.csv"
    log_file.unlink(missing_ok=True)
    target = [sys.executable, str(Path(__file__).resolve()), "--run-jobs"]
    cmd = build_command(
        ncu, metrics, log_file, target + [j["path"] for j in jobs], cache_control=cache_control
    )
    reader = EventReader(jobs[0]["events"])
    seen: list[dict[str, Any]] = []
    t0 = time.monotonic()
    stopped = ""
    with open(out / f"{name}.out", "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        while proc.poll() is None:
            time.sleep(0.2)
            seen += reader.read()
            if time.monotonic() - t0 > limit:
                pid = next((e["pid"] for e in reversed(seen) if e.get("event") == "ready"), None)
                if pid is not None:
                    try:
                        os.kill(int(pid), signal.SIGKILL)  # ncu then writes what it profiled
                    except (ProcessLookupError, PermissionError):
                        pass
                try:
                    proc.wait(timeout=20)
                    stopped = f"stopped the job runner after {limit:.0f} s"
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    stopped = f"killed ncu after {limit:.0f} s (its rows are lost)"
                break
    seen += reader.read()
    launched = sorted(e["id"] for e in seen if e.get("event") == "launched")
    failed = {e["id"]: e.get("reason") for e in seen if e.get("event") == "failed"}
    fatal = [e for e in seen if e.get("event") == "fatal"]
    shutil.copy(
        jobs[0]["events"], out / ("events.jsonl" if name == "ncu" else f"{name}_events.jsonl")
    )
    return {
        "session": {
            "command": cmd,
            "returncode": proc.returncode,
            "wall_s": time.monotonic() - t0,
            "stopped": stopped,
            "launched": launched,
            "failed": failed,
            "fatal": fatal,
        }
    }


def _map(csv_path: Path, jobs: list[dict[str, Any]], metrics: list[str]) -> dict[str, Any]:
    from klaraptor.collect.ncu import ProfiledPoint, map_rows, parse_raw_csv, point_id, raw_values
    from klaraptor.core.errors import CollectError

    rows = parse_raw_csv(csv_path.read_text(errors="replace")) if csv_path.is_file() else []
    out: dict[str, Any] = {}
    for j in jobs:
        mine = [r for r in rows if point_id(r) == j["id"]]
        entry = {k: j[k] for k in ("D", "block", "grid")}
        point = ProfiledPoint(j["id"], tuple(j["block"]), tuple(j["grid"]))  # type: ignore[arg-type]
        try:
            mapped = map_rows(mine, {j["id"]: point}, j["function"])
        except CollectError as exc:
            out[j["kernel"]] = {**entry, "status": f"refused: {exc}"}
            continue
        row = mapped.rows.get(j["id"])
        if row is None:
            out[j["kernel"]] = {**entry, "status": "no ncu row"}
            continue
        out[j["kernel"]] = {**entry, "status": "ok", "metrics": raw_values(row, metrics)}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
