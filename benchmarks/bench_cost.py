"""GPU: what a build costs against what a user would do instead, and what each choice is worth
(issue 33, item 6), in one run on one GPU.

    PYTHONPATH=src python3 benchmarks/bench_cost.py OUT [--limit S] [--step S] [kernels...]

For each suite kernel of `KERNELS` (or those named), cheapest first, with a fresh store that holds
this GPU's device profile (the recorded one when the device key matches, else measured once
before any timing, outside every figure):
1. **klaraptor's default build** as a user calls it: `klaraptor.build(spec)` (model "auto",
   budget 1.5, racing on), wall time from the call to the stored build, worker start-up and
   compilation included (CuPy's kernel cache starts empty for this run: `CUPY_CACHE_DIR` is a
   fresh folder);
2. **a plain CUDA-event sweep** at the largest training size, what a user writes by hand: the
   kernel compiled once with CuPy, then per candidate one warm-up launch and 3 samples of
   back-to-back launches between two CuPy events (about 0.2 ms each), the median per launch;
   wall time with the compilation;
3. **one Kernel Tuner brute-force tune** at the largest training size (`kernel_tuner.tune_kernel`,
   lang cupy, its defaults: 7 iterations, every configuration compiled separately; the same
   candidate blocks: the spec's constraints and grid rule decide which it may try);
4. **the exhaustive truth** at each evaluation size (larger than every training size): the same
   cheap sweep with 5 samples of about 0.5 ms per candidate;
5. the choice of each method scored by r = t(choice) / t(best) at every evaluation size:
   `klaraptor` (its model's choice there), `event_sweep` and `kernel_tuner` (their choice at the
   largest training size, reused).

Steps 2-4 compile with CuPy's in-memory cache only, so none of them reuses another's compilation.
Kernels run one after another in one child process (`--serve`), so a kernel is not charged for
Python and CuPy start-up (the child initialises the CUDA driver and imports klaraptor and Kernel
Tuner first, as a user's process has; klaraptor's measuring worker still starts in the first
build); a kernel that crashes the child or runs past `--step` seconds is
recorded as failed, the child is replaced, and the next kernel runs. OUT/bench_cost.json is
rewritten after every kernel (a killed run keeps what it did) with per-kernel costs and choices,
`geomean_build_over_kernel_tuner`, `max_build_over_kernel_tuner`, the geomean r of each method,
provenance, and `first_call_s` from OUT/first_call.json when `benchmarks/bench_first_call.py`
wrote one (or `--merge-first-call FILE`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The stencil, transpose and map kernels first, then other stencils and a 3-D one
# (231 candidates) last: about 10-20 s each on an H200.
KERNELS = (
    "patterns.saxpy.saxpy",
    "patterns.transpose.transpose_naive",
    "patterns.transpose.transpose_tiled",
    "patterns.jacobi2d.jacobi2d",
    "patterns.blur5.blur5",
    "polybench.conv2d.conv2d",
    "patterns.conv1d.conv1d",
    "polybench.fdtd2d.k1",
    "patterns.resize2x.resize2x",
    "patterns.laplace3d.laplace3d",
)
METHODS = ("klaraptor", "event_sweep", "kernel_tuner")
RESULT = "BENCH_COST_RESULT "  # the child's result lines start with this


# ---------------------------------------------------------------------------------------------
# Summary (pure: tested on the CPU)


def geomean(xs: Sequence[float | None]) -> float | None:
    ok = [float(x) for x in xs if x is not None and math.isfinite(x) and x > 0]
    return math.exp(sum(math.log(x) for x in ok) / len(ok)) if ok else None


def summarize(recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Build-over-Kernel-Tuner ratios and the choice quality of each method over the kernels."""
    out: dict[str, Any] = {}
    ratios = {
        r["kernel"]: r["build_over_kernel_tuner"]
        for r in recs
        if r.get("build_over_kernel_tuner") is not None
    }
    out["kernels_ok"] = sum(1 for r in recs if "error" not in r)
    out["kernels_with_ratio"] = len(ratios)
    out["geomean_build_over_kernel_tuner"] = geomean(list(ratios.values()))
    out["max_build_over_kernel_tuner"] = max(ratios.values()) if ratios else None
    out["worst_kernel"] = max(ratios, key=ratios.__getitem__) if ratios else None
    sweeps = [r.get("sweep_over_kernel_tuner") for r in recs]
    out["geomean_sweep_over_kernel_tuner"] = geomean(sweeps)
    out["geomean_build_over_sweep"] = geomean(
        [
            r["build"]["wall_s"] / r["event_sweep"]["wall_s"]
            for r in recs
            if r.get("build", {}).get("wall_s") and r.get("event_sweep", {}).get("wall_s")
        ]
    )
    quality: dict[str, Any] = {}
    for m in METHODS:
        rs = [p["r"][m] for r in recs for p in r.get("pairs", []) if p["r"].get(m) is not None]
        if rs:
            quality[m] = {
                "pairs": len(rs),
                "geomean_r": geomean(rs),
                "max_r": max(rs),
                "within_5pct": sum(1 for x in rs if x <= 1.05) / len(rs),
            }
    out["choice_quality"] = quality
    return out


def merge_first_call(report: dict[str, Any], path: Path) -> None:
    """Copy `first_call_s` (and the run's details) from bench_first_call.py's JSON, if any."""
    try:
        fc = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(fc, dict) and isinstance(fc.get("first_call_s"), dict):
        report["first_call_s"] = fc["first_call_s"]
        report["first_call"] = {k: v for k, v in fc.items() if k != "first_call_s"}


# ---------------------------------------------------------------------------------------------
# The parent: one child at a time, replaced when it dies or hangs


class _Child:
    """A `--serve` child: kernel names in on stdin, one result line per kernel out on stdout."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str]) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=HERE.parent,
            start_new_session=True,  # its workers die with it
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(RESULT):
                self.lines.put(line[len(RESULT) :])
        self.lines.put(None)  # end of output: the child exited

    def ask(self, name: str, timeout: float) -> dict[str, Any]:
        """The child's record for `name`, or a record saying why there is none."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((name + "\n").encode())
            self.proc.stdin.flush()
        except OSError as exc:
            return {"kernel": name, "error": f"the child is gone ({exc})"}
        try:
            line = self.lines.get(timeout=max(0.1, timeout))
        except queue.Empty:
            return {"kernel": name, "error": f"timed out after {timeout:.0f} s", "hung": True}
        if line is None:
            rc = self.proc.wait(timeout=10)
            return {"kernel": name, "error": f"the child died (exit {rc})", "crashed": True}
        try:
            return json.loads(line)
        except ValueError:
            return {"kernel": name, "error": f"unreadable result line {line[:200]!r}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


def run_all(
    names: Sequence[str],
    child_argv: Sequence[str],
    *,
    limit_s: float,
    step_s: float,
    log: Path,
    env: dict[str, str] | None = None,
    on_record: Callable[[list[dict[str, Any]]], None] = lambda recs: None,
) -> list[dict[str, Any]]:
    """Each kernel in a `--serve` child (replaced after a crash or a hang), within `limit_s`."""
    deadline = time.monotonic() + limit_s
    recs: list[dict[str, Any]] = []
    child: _Child | None = None
    try:
        for name in names:
            left = deadline - time.monotonic()
            if left < 8:
                recs.append({"kernel": name, "error": "not run: the run's time limit"})
                on_record(recs)
                continue
            if child is None or child.proc.poll() is not None:
                if child is not None:
                    child.stop()
                child = _Child(child_argv, log, dict(env or os.environ))
            t0 = time.monotonic()
            rec = child.ask(name, min(step_s, left))
            rec.setdefault("kernel", name)
            rec["step_wall_s"] = round(time.monotonic() - t0, 3)
            if rec.get("hung") or rec.get("crashed"):
                child.stop()  # a hung child is killed; the next kernel gets a new one
                child = None
            recs.append(rec)
            on_record(recs)
    finally:
        if child is not None:
            child.stop()
    return recs


# ---------------------------------------------------------------------------------------------
# The child: one kernel at a time (needs a GPU)


def _config_key(block: Sequence[int]) -> str:
    # The keys of benchmarks/bench_tunables.py (no program parameters here): "|bxxbyxbz".
    return "|" + "x".join(str(int(b)) for b in block)


def _launchable(spec: Any, D: Any, blocks: Sequence[Any]) -> list[Any]:
    """The candidate blocks the spec's constraints and grid rule admit at D."""
    out = []
    for b in blocks:
        try:
            ok, _ = spec.satisfies_constraints(D, b)
            if ok:
                spec.grid_for(D, b)
                out.append(b)
        except Exception:  # noqa: BLE001 - not launchable at D: not a candidate there
            continue
    return out


def event_sweep(
    spec: Any, fn: Any, D: Any, blocks: Sequence[Any], args: Sequence[Any], *, samples: int,
    target_ms: float,
) -> tuple[dict[str, float], dict[str, str]]:  # fmt: skip
    """({config key: median ms per launch}, {config key: why it failed}) of a plain sweep."""
    import cupy

    from klaraptor.backends.cupy_backend import CupyBackend

    be = CupyBackend()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times: dict[str, float] = {}
    failed: dict[str, str] = {}
    for b in blocks:
        key = _config_key(b)
        try:
            grid, smem = spec.grid_for(D, b), spec.dynamic_smem_for(D, b)
            if smem:
                be.opt_in_dynamic_smem(fn, smem)

            def launch(grid: Any = grid, b: Any = b, smem: int = smem) -> None:
                be.launch(fn, grid, b, args, smem)

            launch()  # warm-up (and any launch error)
            start.record()
            launch()
            end.record()
            end.synchronize()
            one = cupy.cuda.get_elapsed_time(start, end)
            inner = int(min(64, max(1, math.ceil(target_ms / max(one, 1e-3)))))
            got = []
            for _ in range(samples):
                start.record()
                for _ in range(inner):
                    launch()
                end.record()
                end.synchronize()
                got.append(cupy.cuda.get_elapsed_time(start, end) / inner)
            got.sort()
            times[key] = got[len(got) // 2]
        except Exception as exc:  # noqa: BLE001 - a configuration that fails is left out
            failed[key] = f"{type(exc).__name__}: {str(exc)[:200]}"
            if not be.context_alive():
                raise
    return times, failed


_PROFILE: Any = None


def _store_with_profile(path: Path) -> tuple[Any, dict[str, Any]]:
    """A fresh store holding this GPU's profile: the recorded one when the key matches, else one
    measured once per child (its cost is in no figure)."""
    global _PROFILE
    from klaraptor.device.profile import query_device, recorded_profile
    from klaraptor.store import Store

    store = Store(path)
    info: dict[str, Any] = {}
    if _PROFILE is None:
        here, rec = query_device(0), recorded_profile("h200")
        if rec.key == here.key:
            _PROFILE, info["profile"] = rec, "recorded h200 profile"
        else:
            from klaraptor.assemble.api import current_profile

            t0 = time.perf_counter()
            _PROFILE = current_profile(Store(path.with_name("profile.sqlite")))
            info["profile"] = f"measured here (not the recorded H200's key): {here.key}"
            info["profile_measure_s"] = time.perf_counter() - t0
    store.save_profile(_PROFILE)
    return store, info


def _free_gpu() -> None:
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


def one_kernel(name: str, kt: bool = True) -> dict[str, Any]:
    """Every step of the module docstring for one kernel; a failed step is recorded."""
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.space.configspace import ConfigSpace
    from klaraptor.spec import catalog

    rec: dict[str, Any] = {"kernel": name}
    spec = catalog.get(name)
    L = max(int(n) for n in spec.meta["train_sizes"])
    evals = [int(n) for n in spec.meta["eval_sizes"]]
    blocks = ConfigSpace.for_spec(spec).candidates
    rec.update(candidates=len(blocks), largest_training=L, eval_sizes=evals, dim=spec.dim)
    with tempfile.TemporaryDirectory() as tmp:
        store, info = _store_with_profile(Path(tmp) / "s.sqlite")
        rec.update(info)
        # 1. klaraptor's default build
        t0 = time.perf_counter()
        first_ms = os.environ.get("BENCH_COST_RACE_FIRST_MS")
        opts = None if first_ms is None else CollectOptions(race_first_ms=float(first_ms))
        kern = build(spec, store=store, progress=False, collect_options=opts)
        rec["build"] = {"wall_s": time.perf_counter() - t0, "model": kern.report.model}
        coll = kern.report.collect.to_dict() if kern.report.collect else {}
        # The collection's own report: its "wall_s" is a breakdown, kept apart from the build's.
        for k in ("counts", "plan", "worker"):
            if k in coll:
                rec["build"][k] = coll[k]
        if "wall_s" in coll:
            rec["build"]["collect_wall_s"] = coll["wall_s"]
        rec["build"]["candidates"] = len(kern.helper.candidates)
        # Its choices at the evaluation sizes, while its store exists.
        picked: dict[int, str] = {}
        for n in evals:
            try:
                picked[n] = _config_key(kern.select(n).block)
            except Exception as exc:  # noqa: BLE001 - recorded, the other sizes go on
                rec.setdefault("select_errors", {})[n] = f"{type(exc).__name__}: {exc}"
    # Steps 2-4 compile cold: no on-disk cache shared between them. (Restored afterwards: the
    # next kernel's build must find the same environment, and so the same warm worker.)
    os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    try:
        _user_steps(rec, spec, kern_picks=picked, L=L, evals=evals, blocks=blocks, kt=kt)
    finally:
        os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
    return rec


def _user_steps(
    rec: dict[str, Any], spec: Any, *, kern_picks: dict[int, str], L: int, evals: list[int],
    blocks: Sequence[Any], kt: bool,
) -> None:  # fmt: skip
    """Steps 2-5 of the module docstring (the sweep, Kernel Tuner, the truth, r)."""
    import numpy as np

    from klaraptor.backends.cupy_backend import CupyBackend

    picked = kern_picks
    be = CupyBackend()
    # 2. the plain CUDA-event sweep at the largest training size
    try:
        D = spec.size(L)
        t0 = time.perf_counter()
        fn = be.compile_spec(spec)
        compile_s = time.perf_counter() - t0
        args = spec.make_args(D, np.random.default_rng(0))
        t1 = time.perf_counter()
        cands = _launchable(spec, D, blocks)
        times, failed = event_sweep(spec, fn, D, cands, args, samples=3, target_ms=0.2)
        t2 = time.perf_counter()
        rec["event_sweep"] = {
            "wall_s": compile_s + (t2 - t1),  # arguments: the user's own, not the sweep's
            "compile_s": compile_s,
            "sweep_s": t2 - t1,
            "configs": len(cands),
            "timed": len(times),
            "failed": failed,
            "choice": min(times, key=times.__getitem__),
            "best_ms": min(times.values()),
        }
        del args
        _free_gpu()
    except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
        rec["event_sweep"] = {"error": f"{type(exc).__name__}: {exc}"}
    # 3. one Kernel Tuner brute-force tune at the largest training size
    if kt:
        try:
            sys.path.insert(0, str(HERE))
            from bench_tunables import _kt

            rec["kernel_tuner"] = _kt(spec, L)
            _free_gpu()
        except Exception as exc:  # noqa: BLE001 - recorded, the rest goes on
            rec["kernel_tuner"] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-1500:],
            }
    kt_wall = rec.get("kernel_tuner", {}).get("wall_s")
    if kt_wall:
        rec["build_over_kernel_tuner"] = rec["build"]["wall_s"] / kt_wall
        if "wall_s" in rec.get("event_sweep", {}):
            rec["sweep_over_kernel_tuner"] = rec["event_sweep"]["wall_s"] / kt_wall
    # 4-5. the truth at every evaluation size, and each method's r there
    choices = {
        "event_sweep": rec.get("event_sweep", {}).get("choice"),
        "kernel_tuner": rec.get("kernel_tuner", {}).get("choice"),
    }
    pairs = []
    t0 = time.perf_counter()
    for n in evals:
        try:
            D = spec.size(n)
            args = spec.make_args(D, np.random.default_rng(1))
            fn = be.compile_spec(spec)
            times, failed = event_sweep(
                spec, fn, D, _launchable(spec, D, blocks), args, samples=5, target_ms=0.5
            )
            del args
            _free_gpu()
            best_key = min(times, key=times.__getitem__)
            pick = {"klaraptor": picked.get(n), **choices}
            pairs.append(
                {
                    "N": n,
                    "best": best_key,
                    "best_ms": times[best_key],
                    "configs_timed": len(times),
                    "failed": len(failed),
                    "choice": pick,
                    "r": {
                        m: (times.get(c, math.inf) / times[best_key] if c else None)
                        for m, c in pick.items()
                    },
                }
            )
        except Exception as exc:  # noqa: BLE001 - recorded, the other sizes go on
            pairs.append({"N": n, "error": f"{type(exc).__name__}: {exc}", "r": {}})
    rec["truth_wall_s"] = time.perf_counter() - t0
    rec["pairs"] = pairs


def _warm_up_process() -> None:
    """What a user's process has done once before it tunes anything: the CUDA driver
    initialised (by its own arrays) and the tools imported. Without this the first kernel's
    build paid the driver's initialisation (0.83 s on the H200) and klaraptor's imports, and
    Kernel Tuner, run after it, found both done (b326982: saxpy 3.9 s against 0.75 s)."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no GPU here: each kernel then records why it failed
        pass
    import klaraptor.assemble  # noqa: F401
    import klaraptor.models.scaling  # noqa: F401

    try:
        import kernel_tuner  # noqa: F401
    except ImportError:  # --no-kt runs go on without it
        pass


def serve() -> int:
    """The child: a kernel name per stdin line, a result line per kernel on stdout."""
    import warnings

    warnings.simplefilter("ignore")
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' prints must not look like results
    _warm_up_process()
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        t0 = time.perf_counter()
        try:
            rec = one_kernel(name, kt=os.environ.get("BENCH_COST_KT", "1") != "0")
        except Exception as exc:  # noqa: BLE001 - recorded, the parent goes on
            rec = {
                "kernel": name,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
            }
        rec["kernel_wall_s"] = time.perf_counter() - t0
        out.write(RESULT + json.dumps(rec, default=str) + "\n")
        out.flush()
    return 0


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{r['kernel']}: {r['error']}"
    b = r.get("build", {}).get("wall_s", math.nan)
    k = r.get("kernel_tuner", {}).get("wall_s", math.nan)
    s = r.get("event_sweep", {}).get("wall_s", math.nan)
    rs = "; ".join(
        f"N={p['N']} " + " ".join(f"{m}={v:.3f}" for m, v in p["r"].items() if v is not None)
        for p in r.get("pairs", [])
        if "error" not in p
    )
    return (
        f"{r['kernel']}: build {b:.2f} s, Kernel Tuner {k:.2f} s, event sweep {s:.2f} s, "
        f"ratio {r.get('build_over_kernel_tuner') or math.nan:.2f}; r: {rs}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--limit", type=float, default=170.0, help="seconds for the whole run")
    ap.add_argument("--step", type=float, default=60.0, help="seconds per kernel at most")
    ap.add_argument("--no-kt", action="store_true", help="skip Kernel Tuner")
    ap.add_argument(
        "--cold-workers",
        action="store_true",
        help="one measuring process per job (KLARAPTOR_WARM_WORKERS=0), as before issue 33",
    )
    ap.add_argument("--merge-first-call", type=Path, help="bench_first_call.py's JSON to merge")
    ap.add_argument(
        "--race-first-ms",
        type=float,
        help="a study: the builds' first race estimate of this many ms of kernel time "
        "(CollectOptions.race_first_ms; default the product's)",
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_intermixed_args(argv)
    if a.serve:
        return serve()
    if a.out is None:
        ap.error("OUT is required")
    from klaraptor.core.provenance import stamp

    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    names = a.kernels or list(KERNELS)
    env = dict(os.environ)
    env["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_cost_cupy_")  # cold, as a new user's
    env["BENCH_COST_KT"] = "0" if a.no_kt else "1"
    if a.cold_workers:
        env["KLARAPTOR_WARM_WORKERS"] = "0"
    if a.race_first_ms is not None:
        env["BENCH_COST_RACE_FIRST_MS"] = repr(float(a.race_first_ms))
    prov_workers = "cold (one process per job)" if a.cold_workers else "warm (reused)"
    env.setdefault("PYTHONUNBUFFERED", "1")
    prov = stamp(
        what="issue 33 item 6: build cost against Kernel Tuner and a plain sweep",
        measuring_workers=prov_workers,
        race_first_ms=a.race_first_ms if a.race_first_ms is not None else "default",
    )
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        prov["gpu"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        prov["gpu"] = f"unknown ({exc})"
    try:
        from importlib.metadata import version

        prov["versions"] = {p: version(p) for p in ("kernel_tuner", "cupy-cuda13x", "numpy")}
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        prov["versions"] = {"error": repr(exc)}
    fc_path = a.merge_first_call or out / "first_call.json"

    def write(recs: list[dict[str, Any]]) -> None:
        report = {"provenance": prov, **summarize(recs), "kernels": recs}
        merge_first_call(report, fc_path)
        (out / "bench_cost.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        print(_line(recs[-1]) if recs else "no kernels", flush=True)

    recs = run_all(
        names,
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        limit_s=a.limit,
        step_s=a.step,
        log=out / "cost_child.log",
        env=env,
        on_record=write,
    )
    print(json.dumps(summarize(recs), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
