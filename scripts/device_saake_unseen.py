"""SAAKE on kernels it never saw (issue 37): the counters it is built from and the referee's
metrics, for the 16 pattern kernels, in one run on the H200 (klaraptor_bench.saake_unseen).

Usage (device machine, repository root, one H200):
    PYTHONPATH=src:plugins/klaraptor-bench/src python3 scripts/device_saake_unseen.py OUTDIR
        [--plan benchmarks/results/h200/saake_unseen_plan.json]
        [--limit-counters 130] [--limit-sol 60]

Reads the plan (made on a CPU by `klaraptor bench saake --unseen-plan`, from recorded timings
only): per kernel the counter sizes and blocks, and the judged (N, block) rows.
Two ncu sessions, each ONE process running every kernel's job (klaraptor.collect.worker, mode "ncu":
a warm-up launch, then one launch in the NVTX range kp:<id>), the command line of
klaraptor.collect.ncu.build_command:
1. counters: klaraptor's collection metrics (RAW_METRICS + PIPE_METRICS, those this ncu knows)
   with the caches flushed (`--cache-control all`, as the suite's recorded counters), at the
   plan's counter sizes and blocks (282 launches);
2. referee: klaraptor_bench.referee.METRICS with the caches as the launch before left them
   (`--cache-control none`, as the suite's referee run, scripts/device_saake_sol.py), at the
   judged rows (31 launches).
Writes to OUTDIR:
    env.json       GPU, driver, clocks, ncu and CuPy versions
    counters.json  per kernel: rows [N, bx, by, bz, {metric: value}], failures
    sol.json       per "<kernel>|<role>": N, block, grid, status, the referee's metrics
    counters.csv / sol.csv, counters.out / sol.out   ncu's raw page and its own output
    log.txt        what ran, how long, what failed
Past a session's --limit-* seconds its job runner is killed and ncu reports what it profiled.
Every step is independent; failures are recorded, not fatal. Expected wall time: about 2.5 min
(counters ~100-140 s, referee ~30-40 s). Then, on a CPU:
    klaraptor bench saake --unseen OUTDIR   → saake_unseen.json, bottlenecks.json's agreement_unseen
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

import device_saake_sol as sol_script  # noqa: E402 - the referee run's session and environment

PLAN = ROOT / "benchmarks" / "results" / "h200" / "saake_unseen_plan.json"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--run-jobs":
        return sol_script.run_jobs(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--plan", type=Path, default=PLAN)
    ap.add_argument("--limit-counters", type=float, default=130.0, help="seconds, counters")
    ap.add_argument("--limit-sol", type=float, default=60.0, help="seconds, referee session")
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

    def step(label: str, fn, *args, **kwargs):  # noqa: ANN001, ANN202 - a script
        t0 = time.monotonic()
        try:
            result = fn(*args, **kwargs)
            log(f"{label}: ok ({time.monotonic() - t0:.1f} s)")
            return result
        except Exception:  # noqa: BLE001 - record and go on
            log(
                f"{label}: FAILED ({time.monotonic() - t0:.1f} s)\n{traceback.format_exc()[-3000:]}"
            )
            return None

    step("environment", sol_script.write_environment, out)
    plan = step("plan", lambda: json.loads(a.plan.read_text())["kernels"])
    if not plan:
        log(f"no plan in {a.plan}: make it with `klaraptor bench saake --unseen-plan`")
        return 1
    ncu = step("find ncu", sol_script._find_ncu)
    provenance = _provenance(a)

    # 1. Counters (flushed caches, the collection's metrics).
    counters: dict[str, Any] = {"kernels": {}, "provenance": provenance}
    metrics = step("counter metric names", _counter_metrics, ncu) if ncu else None
    jobs = step("counter job files", _counter_jobs, out / "jobs_counters", plan)
    if ncu and metrics and jobs:
        run = step(
            "counter session",
            sol_script._session,
            ncu,
            metrics,
            out,
            jobs,
            a.limit_counters,
            cache_control="all",
            name="counters",
        )
        if run is not None:
            counters["session"] = run["session"]
            counters["metrics"] = metrics
            counters["kernels"] = step("map counters", _map_counters, out / "counters.csv", jobs, metrics) or {}  # fmt: skip
    for e in plan:
        counters["kernels"].setdefault(e["kernel"], {"rows": [], "status": "not profiled"})
    (out / "counters.json").write_text(json.dumps(counters, indent=1, default=str) + "\n")
    n_rows = sum(len(v.get("rows", [])) for v in counters["kernels"].values())
    want = sum(len(e["counter_blocks"]) * len(e["counter_sizes"]) for e in plan)
    log(f"counters.json: {n_rows} of {want} launches profiled")

    # 2. The referee's metrics (caches as left), at the judged rows.
    result: dict[str, Any] = {"points": {}, "provenance": provenance}
    ref_metrics = step("referee metric names", sol_script._metrics, ncu) if ncu else None
    ref_jobs = step("referee job files", _referee_jobs, out / "jobs_sol", plan)
    if ncu and ref_metrics and ref_jobs:
        run = step(
            "referee session",
            sol_script._session,
            ncu,
            ref_metrics,
            out,
            ref_jobs,
            a.limit_sol,
            cache_control="none",
            name="sol",
        )
        if run is not None:
            result["session"] = run["session"]
            result["metrics"] = ref_metrics
            result["points"] = step("map referee rows", _map_referee, out / "sol.csv", ref_jobs, ref_metrics) or {}  # fmt: skip
    for e in plan:
        for j in e["judged"]:
            result["points"].setdefault(f"{e['kernel']}|{j['role']}", {"status": "not profiled"})
    (out / "sol.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    ok = sum(1 for v in result["points"].values() if v.get("status") == "ok")
    log(f"sol.json: {ok} of {len(result['points'])} judged rows profiled")
    log(f"total {time.monotonic() - t_start:.1f} s")
    return 0


def _provenance(a: argparse.Namespace) -> dict[str, Any]:
    from klaraptor.core.provenance import commit

    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "plan": str(a.plan),
        "host": platform.node(),
    }


def _counter_metrics(ncu: str) -> list[str]:
    from klaraptor.collect.ncu import usable_metrics
    from klaraptor.core.metrics import PIPE_METRICS, RAW_METRICS

    return usable_metrics(ncu, (9, 0), tuple(RAW_METRICS) + tuple(PIPE_METRICS))


def _options() -> Any:
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.suite.protocol import TRAIN_OPTIONS

    return CollectOptions(**{**TRAIN_OPTIONS.__dict__, "timing": False, "counters": True})


def _write_jobs(
    folder: Path, groups: list[tuple[str, list[tuple[int, int, tuple[int, int, int], str]]]]
) -> list[dict[str, Any]]:
    """One job file per kernel: [(kernel, [(id, N, block, label)])]; every job shares one events
    file (the session reads it)."""
    from klaraptor import suite
    from klaraptor.collect.jobfile import Point, write_job

    folder.mkdir(parents=True, exist_ok=True)
    events = folder / "events.jsonl"
    events.unlink(missing_ok=True)
    jobs = []
    for k, (name, items) in enumerate(groups):
        spec = suite.get(name)
        points, meta = [], {}
        for pid, N, block, label in items:
            D = spec.size(N)
            grid = spec.grid_for(D, block)
            points.append(Point(pid, D, block, grid, spec.dynamic_smem_for(D, block)))  # type: ignore[arg-type]
            meta[pid] = {"N": N, "block": list(block), "grid": list(grid), "label": label}
        path = folder / f"job{k:02d}.pkl"
        write_job(path, mode="ncu", spec=spec, points=points, options=_options(), events=events)
        jobs.append({"kernel": name, "function": spec.kernel, "points": meta, "path": str(path),
                     "events": str(events)})  # fmt: skip
    return jobs


def _counter_jobs(folder: Path, plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups, pid = [], 0
    for e in plan:
        items = []
        for N in e["counter_sizes"]:
            for b in e["counter_blocks"]:
                items.append((pid, int(N), tuple(int(v) for v in b), "counters"))
                pid += 1
        groups.append((e["kernel"], items))
    return _write_jobs(folder, groups)


def _referee_jobs(folder: Path, plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups, pid = [], 0
    for e in plan:
        items = []
        for j in e["judged"]:
            items.append((pid, int(j["N"]), tuple(int(v) for v in j["block"]), j["role"]))
            pid += 1
        groups.append((e["kernel"], items))
    return _write_jobs(folder, groups)


def _mapped(csv_path: Path, job: dict[str, Any]) -> tuple[dict[int, Any], str]:
    """The ncu rows of one job's points by id, or why none ('' when mapped)."""
    from klaraptor.collect.ncu import ProfiledPoint, map_rows, parse_raw_csv, point_id
    from klaraptor.core.errors import CollectError

    rows = parse_raw_csv(csv_path.read_text(errors="replace")) if csv_path.is_file() else []
    ids = {int(i) for i in job["points"]}
    mine = [r for r in rows if point_id(r) in ids]
    points = {
        int(i): ProfiledPoint(int(i), tuple(m["block"]), tuple(m["grid"]))  # type: ignore[arg-type]
        for i, m in job["points"].items()
    }
    try:
        return dict(map_rows(mine, points, job["function"]).rows), ""
    except CollectError as exc:
        return {}, f"refused: {exc}"


def _map_counters(csv_path: Path, jobs: list[dict[str, Any]], metrics: list[str]) -> dict[str, Any]:
    from klaraptor.collect.ncu import raw_values

    out: dict[str, Any] = {}
    for job in jobs:
        got, why = _mapped(csv_path, job)
        rows = [
            [m["N"], *m["block"], raw_values(got[int(i)], metrics)]
            for i, m in job["points"].items()
            if int(i) in got
        ]
        missing = [
            f"N={m['N']} {m['block']}" for i, m in job["points"].items() if int(i) not in got
        ]
        out[job["kernel"]] = {"rows": rows, "missing": missing, "status": why or "ok"}
    return out


def _map_referee(csv_path: Path, jobs: list[dict[str, Any]], metrics: list[str]) -> dict[str, Any]:
    from klaraptor.collect.ncu import raw_values

    out: dict[str, Any] = {}
    for job in jobs:
        got, why = _mapped(csv_path, job)
        for i, m in job["points"].items():
            entry = {"N": m["N"], "block": m["block"], "grid": m["grid"]}
            if int(i) in got:
                entry.update(status="ok", metrics=raw_values(got[int(i)], metrics))
            else:
                entry["status"] = why or "no ncu row"
            out[f"{job['kernel']}|{m['label']}"] = entry
    return out


if __name__ == "__main__":
    raise SystemExit(main())
