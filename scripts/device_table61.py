"""Issue 36 on the GPU: the missing ground truth of Table 6.1, real build times for Table 6.2,
the N = 128 sweeps of Table 6.2's exhaustive sum, and the data-dependence check.

Usage (device machine, repository root, one H200; resumable):
    KLARAPTOR_COMMIT=<sha> PYTHONPATH=src:plugins/klaraptor-bench/src python3 scripts/device_table61.py OUTDIR --limit 235
    [--only truth,datadep,build,sweep128] [--kernels A,B]

What it measures (a task whose estimate, from the recorded data, is far beyond the time left is
skipped and listed; a later, smaller one may still run):
- `truth`: every PolyBench (kernel, Table 6.1 size) pair without recorded ground truth
  (`klaraptor_bench.supplement.missing_pairs`: the 13 pairs the recorded budget rule skipped, and 3DCONV at
  512). The candidates are the blocks of the kernel's recorded exhaustive search. Each pair is a
  race (`klaraptor.collect.racing.race`) timed with klaraptor's own CUDA-event timer
  (`backends.cupy_backend.Timer`, spin kernel in front of every sample):
  - first estimate of every candidate: one sample of the full launch (from 20 ms on; shorter
    launches get the race's usual first stage, >= 3 samples and 1 ms); for the kernels whose
    every thread does the same work over a 2D grid of many waves (GEMM, 2MM, 3MM, SYRK, SYR2K at
    N >= 4096) a PARTIAL launch: the first 1/8 of the grid's rows of blocks (the waves the full
    grid starts with), its time scaled by the rows left out. Racing stops there for the
    candidates that cannot win;
  - the contenders (estimate, widened by the band, reaching the leader's: 5 % for partial
    estimates, 1 % for one full sample), the spec's default block and the three best estimates
    get the full protocol on the full grid (>= 10 ms of kernel time, >= 3 samples; >= 2
    samples and no warm-up for launches of 50 ms and more).
  Every value records its stage ("first" / "full") and, for a partial one, the fraction
  launched; for candidates measured both ways the estimate is kept beside the full time (the
  check of the scaling). Points go to OUTDIR/truth_points.jsonl as they are measured: a killed
  run loses at most the point in flight, and the next run goes on from there.
- `datadep`: `scripts/device_data_dependence.py` over PolyBench and the Rodinia-style suite
  (OUTDIR/data_dependence.json, about 40-60 s).
- `build`: `klaraptor.build(spec, train_sizes)` as a user calls it (model auto, budget 1.5 ×
  tune-once, default collection options, a fresh empty store, the queried device), timed, per
  kernel (OUTDIR/builds.jsonl).
- `sweep128`: every candidate of every 1D/2D PolyBench kernel at N = 128 (the smallest power of
  two of the thesis's exhaustive sum), raced as above, into truth_points.jsonl.
Order: the data-dependence check, the truth pairs estimated under 45 s (11 pairs), SYR2K at
8192, the 30 PolyBench builds, the N = 128 sweeps, corr.k4 and covar.k3 at 8192 (about 3 s a
launch, and their triangular work leaves no partial launch: about 100-150 s each), the 14
Rodinia-style builds.

All GPU work runs in one child process (CuPy imported once; builds start their own collection
workers); the parent kills its process group at `--limit` and restarts it after a crash (the
point that crashed is recorded as failed and skipped). At the end of every run, a stopped one
included, OUTDIR/h200_table61.json.gz is rewritten from the JSONL files (`--dataset-only` does
that alone, without a GPU): a recorded dataset (`klaraptor.suite.recorded`, format 1) holding the new truth rows,
the build results and the N = 128 sweeps, with provenance (GPU, date, command, commit); copy it to
plugins/klaraptor-bench/src/klaraptor_bench/data/ and `klaraptor bench report --recorded` merges it (`klaraptor_bench.supplement`).
Expected duration: everything about 17-20 min on an H200 (the plan printed at the start sums
the estimates: about 21 min, pessimistic). One run with `--limit 235` does the data-dependence
check and most of the first 11 truth pairs (about 3 min); running the same command again goes
on where it stopped (tasks done are never repeated; failed ones are retried).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from klaraptor_bench.supplement import (
    PARTIAL_FRACTION,
    PARTIAL_KERNELS,
    SWEEP_N,
    build_tasks,
    dataset_from_outdir,
    gpu_line,
    missing_pairs,
    pair_estimate_s,
    recorded_candidates,
)

HERE = Path(__file__).resolve().parent
POINTS = "truth_points.jsonl"
TASKS = "tasks.jsonl"
BUILDS = "builds.jsonl"
DATADEP_BUDGET_S = 60.0  # 44 kernels at about 0.7-1 s each
CHEAP_PAIR_S = 45.0  # truth pairs estimated below this come first (cheapest first)
LONG_MS = 50.0  # launches this long need no warm-up and fewer samples
SINGLE_MS = 20.0  # a first estimate of one sample from this long on
# Launches of a second and more (CORR k4, COVAR k3 at 8192: about 7 s each): one launch repeats
# within 0.06 % (median; max 0.4 %) on the H200 (covar.k3 at 8192, 12 candidates timed twice),
# so their race uses a band of 0.25 % and their full measurement is one more launch.
SECONDS_MS = 1000.0
SECONDS_BAND = 0.0025


# ---------------------------------------------------------------------------------------------
# The plan


def plan(only: set[str], kernels: set[str]) -> list[dict[str, Any]]:
    """Every task with its estimate (s), in the order of priority of the module docstring."""
    tasks: list[dict[str, Any]] = []
    pairs = [p for p in missing_pairs() if not kernels or p[0] in kernels]
    late = [p for p in pairs if p[0].endswith(("corr.k4", "covar.k3")) and p[1] >= 8192]
    truth = [
        {"id": f"truth:{name}:{n}", "kind": "truth", "kernel": name, "N": n,
         "estimate_s": pair_estimate_s(name, n)}
        for name, n in pairs if (name, n) not in late
    ]  # fmt: skip
    if "datadep" in only:
        tasks.append({"id": "datadep", "kind": "datadep", "estimate_s": DATADEP_BUDGET_S + 15})
    if "truth" in only:
        tasks += [t for t in truth if t["estimate_s"] <= CHEAP_PAIR_S]
        tasks += [t for t in truth if t["estimate_s"] > CHEAP_PAIR_S]
    if "build" in only:
        for name, est in build_tasks("polybench"):
            if not kernels or name in kernels:
                tasks.append({"id": f"build:{name}", "kind": "build", "kernel": name,
                              "estimate_s": est})  # fmt: skip
    if "sweep128" in only:
        for name, _ in build_tasks("polybench"):
            if (not kernels or name in kernels) and "conv3d" not in name:
                tasks.append({"id": f"truth:{name}:{SWEEP_N}", "kind": "truth", "kernel": name,
                              "N": SWEEP_N, "estimate_s": pair_estimate_s(name, SWEEP_N)})  # fmt: skip
    if "truth" in only:
        for name, n in late:
            tasks.append({"id": f"truth:{name}:{n}", "kind": "truth", "kernel": name, "N": n,
                          "estimate_s": pair_estimate_s(name, n)})  # fmt: skip
    if "build" in only:
        for name, est in build_tasks("rodinia"):
            if not kernels or name in kernels:
                tasks.append({"id": f"build:{name}", "kind": "build", "kernel": name,
                              "estimate_s": est})  # fmt: skip
    return tasks


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rows.append(json.loads(line))
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(row, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# ---------------------------------------------------------------------------------------------
# The child: GPU work


class Gpu:
    """CuPy, the backend and one timer for the child's life."""

    def __init__(self) -> None:
        from klaraptor.backends.cupy_backend import CupyBackend

        self.be = CupyBackend()
        self.cp = self.be.module()
        self.be.use_device(0)
        self.timer = self.be.timer(self.be.device_clock_mhz(0))

    def free(self) -> None:
        self.cp.get_default_memory_pool().free_all_blocks()


def _value(summary: dict[str, Any], scale: float = 1.0) -> dict[str, Any]:
    return {
        "median_ms": summary["median_ms"] * scale,
        "q1_ms": summary["q1_ms"] * scale,
        "q3_ms": summary["q3_ms"] * scale,
        "repeats": summary["repeats"],
        "inner": summary["inner"],
    }


def run_truth(gpu: Gpu, task: dict[str, Any], out: Path, deadline: float) -> dict[str, Any]:
    """One (kernel, N) race (module docstring); points already in OUTDIR are not measured again."""
    import numpy as np

    from klaraptor import suite
    from klaraptor.collect.racing import RaceSettings, race

    name, n = task["kernel"], int(task["N"])
    spec = suite.get(name)
    D = spec.size(n)
    blocks = recorded_candidates(name)
    done = {
        tuple(r["block"]): r
        for r in _read_jsonl(out / POINTS)
        if r["kernel"] == name and int(r["N"]) == n
    }
    fn = gpu.be.compile_spec(spec)
    t0 = time.perf_counter()
    args = tuple(spec.make_args(D, np.random.default_rng([0, 0, n])))
    gpu.be.synchronize("arguments")
    args_s = time.perf_counter() - t0
    partial = name in PARTIAL_KERNELS and n >= 4096
    band = 0.05 if partial else 0.01

    def grids(b: tuple[int, int, int]) -> tuple[tuple[int, ...], tuple[int, ...], float]:
        g = spec.grid_for(D, b)
        if not partial:
            return g, g, 1.0
        rows = max(1, math.ceil(g[1] * PARTIAL_FRACTION))
        return g, (g[0], rows, g[2]), g[1] / rows

    def launcher(grid: tuple[int, ...], b: tuple[int, int, int]) -> Any:
        smem = spec.dynamic_smem_for(D, b)
        return lambda: gpu.be.launch(fn, grid, b, args, smem)

    def record(b: tuple[int, int, int], stage: str, value: dict[str, Any], **extra: Any) -> None:
        row = {"kernel": name, "N": n, "block": list(b), "stage": stage, **value, **extra}
        _append(out / POINTS, row)
        done[b] = row

    def first(b: tuple[int, int, int]) -> dict[str, Any] | None:
        if b in done:
            return None if done[b].get("failed") else done[b]
        if time.perf_counter() > deadline:
            raise TimeoutError("limit reached")
        full_grid, grid, scale = grids(b)
        t = time.perf_counter()
        try:
            probe = gpu.timer.sample(launcher(grid, b), 1)
            if probe * scale >= SINGLE_MS:
                s = {"median_ms": probe, "q1_ms": probe, "q3_ms": probe, "repeats": 1, "inner": 1}
            else:
                s = gpu.timer.measure(launcher(grid, b), warmup=1, min_time_ms=1.0,
                                      min_repeats=3, max_repeats=30, target_sample_ms=0.2)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - this candidate's failure, recorded
            record(b, "first", {}, failed=f"{type(exc).__name__}: {exc}")
            return None
        extra = (
            {"fraction": grid[1] / full_grid[1], "partial_ms": s["median_ms"]} if partial else {}
        )
        record(b, "first", _value(s, scale), wall_s=time.perf_counter() - t, **extra)
        return done[b]

    def full(b: tuple[int, int, int]) -> dict[str, Any] | None:
        if b in done and done[b].get("stage") == "full":
            return None if done[b].get("failed") else done[b]
        if time.perf_counter() > deadline:
            raise TimeoutError("limit reached")
        full_grid, _, _ = grids(b)
        est = done.get(b, {})
        long = float(est.get("median_ms", 0.0)) >= LONG_MS
        t = time.perf_counter()
        if float(est.get("median_ms", 0.0)) >= SECONDS_MS and est.get("partial_ms") is None:
            try:
                again = gpu.timer.sample(launcher(full_grid, b), 1)
            except Exception as exc:  # noqa: BLE001
                record(b, "full", {}, failed=f"{type(exc).__name__}: {exc}")
                return None
            pair = sorted([float(est["median_ms"]), float(again)])
            record(b, "full", {"median_ms": sum(pair) / 2, "q1_ms": pair[0], "q3_ms": pair[1],
                               "repeats": 2, "inner": 1},
                   wall_s=time.perf_counter() - t, samples_ms=pair)  # fmt: skip
            return done[b]
        try:
            s = gpu.timer.measure(launcher(full_grid, b), warmup=0 if long else 1,
                                  min_time_ms=10.0, min_repeats=2 if long else 3,
                                  max_repeats=30, target_sample_ms=0.2, max_wall_s=30.0)  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            record(b, "full", {}, failed=f"{type(exc).__name__}: {exc}")
            return None
        extra = {}
        if est.get("partial_ms") is not None:
            extra = {"fraction": est["fraction"], "estimate_ms": est["median_ms"]}
        record(b, "full", _value(s), wall_s=time.perf_counter() - t, **extra)
        return done[b]

    head = first(blocks[0]) if blocks else None  # the race reuses it
    if head is not None and not partial and float(head["median_ms"]) >= SECONDS_MS:
        band = SECONDS_BAND
    values = race(blocks, first, full, RaceSettings(band=band, max_rounds=6))
    # The default block and the three best estimates are measured fully as well (the methods'
    # usual picks and the neighbourhood of the leader).
    ranked = sorted((b for b, v in values.items() if v), key=lambda b: values[b]["median_ms"])
    extra_full = [spec.default_block, *ranked[:3]]
    for b in dict.fromkeys(tuple(x) for x in extra_full):
        if b in values and values[b] and values[b].get("stage") != "full":
            full(b)
    args = ()  # the arrays go back to the pool before the next size
    gpu.free()
    ok = [b for b in blocks if b in done and not done[b].get("failed")]
    return {"candidates": len(blocks), "ok": len(ok), "args_s": args_s, "partial": partial,
            "full": sum(done[b].get("stage") == "full" for b in ok)}  # fmt: skip


def run_build(name: str) -> dict[str, Any]:
    """`klaraptor.build(spec, train_sizes)` as a user calls it, in a fresh store, timed."""
    from klaraptor import suite
    from klaraptor.assemble import build
    from klaraptor.device.profile import query_device
    from klaraptor.store import Store

    spec = suite.get(name)
    train = [spec.size(n) for n in spec.meta["train_sizes"]]
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "s.sqlite") as store:
        t0 = time.perf_counter()
        device = query_device()
        kern = build(spec, train, store=store, device=device, progress=False)
        wall = time.perf_counter() - t0
        rep = kern.report
        assert rep is not None
        collect = rep.collect.to_dict() if rep.collect is not None else {}
        chosen = {str(n): list(kern.select(n).block) for n in spec.meta["eval_sizes"]}
        kern.selector.flush()
        return {
            "kernel": name,
            "device": device.key,
            "build_wall_s": wall,
            "model": rep.model,
            "fit_s": rep.fit_wall_s,
            "measurement_wall_s": collect.get("wall_s"),
            "plan": collect.get("plan"),
            "candidates": len(kern.helper.candidates),
            "chosen": chosen,
        }


def run_datadep(out: Path, deadline: float) -> dict[str, Any]:
    budget = max(5.0, min(DATADEP_BUDGET_S, deadline - time.perf_counter() - 20.0))
    cmd = [sys.executable, str(HERE / "device_data_dependence.py"), str(out),
           "--suites", "polybench,rodinia", "--budget-s", f"{budget:.0f}"]  # fmt: skip
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=max(10.0, deadline - time.perf_counter()))  # fmt: skip
    (out / "data_dependence.log").write_text(res.stdout + "\n" + res.stderr)
    path = out / "data_dependence.json"
    row: dict[str, Any] = {"rc": res.returncode, "wall_s": time.perf_counter() - t}
    if path.exists():
        d = json.loads(path.read_text())
        row.update({k: d.get(k) for k in ("dependent", "checked", "errors", "not_checked_budget")})
    return row


def child(out: Path, tasks: list[dict[str, Any]], deadline_epoch: float, run: str) -> int:
    """Run `tasks` in order (each one's completion appended to tasks.jsonl)."""
    deadline = time.perf_counter() + (deadline_epoch - time.time())
    gpu: Gpu | None = None
    for task in tasks:
        left = deadline - time.perf_counter()
        # Estimates are pessimistic (the cost model predates racing); a truth task keeps what it
        # measured when the limit stops it, so only a hopeless one is skipped.
        if 0.6 * task["estimate_s"] > left:
            _append(out / TASKS, {**task, "status": "skipped", "run": run,
                                  "reason": f"estimated {task['estimate_s']:.0f} s > {left:.0f} s left"})  # fmt: skip
            continue
        _append(out / TASKS, {**task, "status": "started", "run": run})
        t = time.perf_counter()
        print(f"[{time.strftime('%H:%M:%S')}] {task['id']} (estimate {task['estimate_s']:.0f} s, "
              f"{left:.0f} s left)", flush=True)  # fmt: skip
        try:
            if task["kind"] == "truth":
                gpu = gpu or Gpu()
                res = run_truth(gpu, task, out, deadline)
            elif task["kind"] == "build":
                if gpu is not None:
                    gpu.free()
                res = run_build(task["kernel"])
                _append(out / BUILDS, res)
            else:
                res = run_datadep(out, deadline)
            status = "done"
        except TimeoutError:
            res, status = {}, "stopped at the limit"
        except Exception as exc:  # noqa: BLE001 - recorded; the next task goes on
            res = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
            }
            status = "failed"
        wall = time.perf_counter() - t
        _append(out / TASKS, {**task, "status": status, "wall_s": wall, "result": res, "run": run})
        print(f"    {status} in {wall:.1f} s {json.dumps(res, default=str)[:300]}", flush=True)
        if status == "stopped at the limit":
            break
    return 0


# ---------------------------------------------------------------------------------------------
# The parent


RUN = f"{os.getpid()}@{time.time():.0f}"  # this invocation (failed tasks are retried by the next)


def finished(out: Path) -> set[str]:
    """Tasks done in any run, or failed in this one."""
    return {
        r["id"]
        for r in _read_jsonl(out / TASKS)
        if r.get("status") == "done" or (r.get("status") == "failed" and r.get("run") == RUN)
    }


def write_dataset(out: Path, command: str) -> None:
    try:
        path = dataset_from_outdir(out, command=command)
        print(f"wrote {path}", flush=True)
    except Exception as exc:  # noqa: BLE001 - the raw JSONL files stay
        print(f"could not write the dataset: {type(exc).__name__}: {exc}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--limit", type=float, default=235.0, help="seconds for the whole run")
    ap.add_argument("--only", default="truth,datadep,build,sweep128")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument(
        "--dataset-only", action="store_true", help="only rewrite the dataset from OUTDIR's files"
    )
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--run", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        tasks = json.loads(Path(args.child).read_text())
        return child(out, tasks, args.deadline, args.run)
    command = " ".join(["python3", "scripts/device_table61.py", *sys.argv[1:]])
    if args.dataset_only:
        write_dataset(out, command)
        return 0
    from klaraptor.core.provenance import stamp

    _append(out / "runs.jsonl", {**stamp(command), "gpu": gpu_line(), "limit_s": args.limit})
    t_start = time.time()
    deadline = t_start + args.limit - 8.0  # the dataset is written after the child
    only = set(args.only.split(","))
    kernels = {k for k in args.kernels.split(",") if k}
    tasks = plan(only, kernels)
    print(f"{len(tasks)} tasks, estimated {sum(t['estimate_s'] for t in tasks):.0f} s in all; "
          f"limit {args.limit:.0f} s", flush=True)  # fmt: skip
    restarts = 0
    while time.time() < deadline and restarts < 5:
        todo = [t for t in tasks if t["id"] not in finished(out)]
        if not todo:
            break
        job = out / ".tasks.json"
        job.write_text(json.dumps(todo))
        cmd = [sys.executable, __file__, str(out), "--child", str(job), "--deadline", str(deadline),
               "--run", RUN]  # fmt: skip
        proc = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            print("limit reached: the child was stopped", flush=True)
            break
        if rc == 0:
            break
        # A crash: the task in flight is recorded as failed, the next child goes on.
        restarts += 1
        done_ids = finished(out)
        started = [
            r
            for r in _read_jsonl(out / TASKS)
            if r.get("status") == "started" and r.get("run") == RUN
        ]
        if started and started[-1]["id"] not in done_ids:
            _append(out / TASKS, {**started[-1], "status": "failed", "run": RUN,
                                  "result": {"error": f"the child died (exit {rc})"}})  # fmt: skip
    write_dataset(out, command)
    rows = _read_jsonl(out / TASKS)
    done = {r["id"] for r in rows if r.get("status") == "done"}
    failed = {r["id"] for r in rows if r.get("status") == "failed" and r.get("run") == RUN} - done
    left = [t["id"] for t in tasks if t["id"] not in done | failed]
    print(f"done in {time.time() - t_start:.0f} s: {len(done & {t['id'] for t in tasks})} of "
          f"{len(tasks)} tasks done, failed {sorted(failed) or 'none'}; left (run the same "
          f"command again): {', '.join(left) or 'none'}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
