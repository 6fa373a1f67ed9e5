"""The GPU part of issue 35: `klaraptor instrument` on PolyBench-ACC's own CUDA programs.

On one GPU (an H200; about 6 minutes), for each of the 15 programs of tests/data/polybench_acc:
1. build every annotated kernel with klaraptor at its config's small training sizes (a budgeted
   build, timing only);
2. instrument the program (`klaraptor.instrument`, as `klaraptor instrument` does) and compile it
   with nvcc, as the original is compiled (the same flags, the CUDA 13 compat header);
3. run it at an evaluation size larger than every training size: with KLARAPTOR_LOG and
   KLARAPTOR_TIME (the helper's configurations: its own CPU check, every launch's configuration,
   the GPU time of each kernel), then with KLARAPTOR_OFF (the program's own DIM_THREAD_BLOCK_*
   configurations: the defaults' GPU time and check), then the original binary (its own check);
4. check that every launch used the helper's configuration: `source=helper` on each logged
   launch, the same grid and block as `Kernel.select(D)` in Python, and, as far as the time
   allows, Nsight Compute's launch records of the first launches;
and measures the per-launch overhead of the instrumented choice (benchmarks/instrument_overhead).
Each program is independent: a failure is recorded and the next one goes on. Everything is
logged under OUTDIR/logs; the summary is OUTDIR/instrument.json (benchmarks/results/h200/).

Usage (device, repository root; libclang from a carried wheel in .whl/ when not installed):
    PYTHONPATH=src python3 scripts/device_instrument.py OUTDIR [--programs 2MM GEMM]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
POLYBENCH = ROOT / "tests" / "data" / "polybench_acc"
OVERHEAD = ROOT / "benchmarks" / "instrument_overhead"


@dataclass(frozen=True)
class Program:
    """One PolyBench-ACC program: where it is, its kernels (launch order), the size it is
    evaluated at and the nvcc flags that set it (the programs' own macros)."""

    path: str  # under CUDA/
    kernels: tuple[str, ...]
    eval_size: int
    flags: tuple[str, ...]


def _sizes(*names: str, n: int) -> tuple[str, ...]:
    return tuple(f"-D{name}={n}" for name in names)


# The CPU reference of every run bounds the sizes: O(n^3) programs run at 512, O(n^2) at 4096.
# Programs whose sizes are named N or M take their own dataset macros (cuda.h has parameters
# named N, so -DN=... cannot be passed).
PROGRAMS: dict[str, Program] = {
    "2DCONV": Program(
        "stencils/convolution-2d/2DConvolution.cu",
        ("convolution2D_kernel",),
        4096,
        _sizes("NI", "NJ", n=4096),
    ),
    "3DCONV": Program(
        "stencils/convolution-3d/3DConvolution.cu",
        ("convolution3D_kernel",),
        256,
        _sizes("NI", "NJ", "NK", n=256),
    ),
    "2MM": Program(
        "linear-algebra/kernels/2mm/2mm.cu",
        ("mm2_kernel1", "mm2_kernel2"),
        512,
        _sizes("NI", "NJ", "NK", "NL", n=512),
    ),
    "3MM": Program(
        "linear-algebra/kernels/3mm/3mm.cu",
        ("mm3_kernel1", "mm3_kernel2", "mm3_kernel3"),
        512,
        _sizes("NI", "NJ", "NK", "NL", "NM", n=512),
    ),
    "ATAX": Program(
        "linear-algebra/kernels/atax/atax.cu",
        ("atax_kernel1", "atax_kernel2"),
        4096,
        _sizes("NX", "NY", n=4096),
    ),
    "BICG": Program(
        "linear-algebra/kernels/bicg/bicg.cu",
        ("bicg_kernel1", "bicg_kernel2"),
        4096,
        _sizes("NX", "NY", n=4096),
    ),
    "CORR": Program(
        "datamining/correlation/correlation.cu",
        ("mean_kernel", "std_kernel", "reduce_kernel", "corr_kernel"),
        512,
        ("-DMINI_DATASET",),
    ),
    "COVAR": Program(
        "datamining/covariance/covariance.cu",
        ("mean_kernel", "reduce_kernel", "covar_kernel"),
        512,
        ("-DMINI_DATASET",),
    ),
    "FDTD-2D": Program(
        "stencils/fdtd-2d/fdtd2d.cu",
        ("fdtd_step1_kernel", "fdtd_step2_kernel", "fdtd_step3_kernel"),
        2048,
        ("-DTMAX=100", *_sizes("NX", "NY", n=2048)),
    ),
    "GEMM": Program(
        "linear-algebra/kernels/gemm/gemm.cu",
        ("gemm_kernel",),
        512,
        _sizes("NI", "NJ", "NK", n=512),
    ),
    "GESUMMV": Program(
        "linear-algebra/kernels/gesummv/gesummv.cu",
        ("gesummv_kernel",),
        4096,
        ("-DSTANDARD_DATASET",),
    ),
    "GRAMSCHMIDT": Program(
        "linear-algebra/solvers/gramschmidt/gramschmidt.cu",
        ("gramschmidt_kernel1", "gramschmidt_kernel2", "gramschmidt_kernel3"),
        512,
        _sizes("NI", "NJ", n=512),
    ),
    "MVT": Program(
        "linear-algebra/kernels/mvt/mvt.cu",
        ("mvt_kernel1", "mvt_kernel2"),
        4096,
        ("-DSTANDARD_DATASET",),
    ),
    "SYRK": Program(
        "linear-algebra/kernels/syrk/syrk.cu", ("syrk_kernel",), 512, _sizes("NI", "NJ", n=512)
    ),
    "SYR2K": Program(
        "linear-algebra/kernels/syr2k/syr2k.cu", ("syr2k_kernel",), 512, _sizes("NI", "NJ", n=512)
    ),
}

_MISMATCH = re.compile(
    r"Non-Matching CPU-GPU Outputs Beyond Error Threshold of [\d.]+ Percent: (\d+)"
)
_GPU_TIME = re.compile(r"GPU Time in seconds:\s*\n\s*([0-9.eE+-]+)")
_LAUNCH = re.compile(
    r"^klaraptor: launch kernel=(\S+) D=(\S+) grid=(\d+),(\d+),(\d+) block=(\d+),(\d+),(\d+) "
    r"source=(\w+)(?: reason=(.*))?$",
    re.M,
)
_TIME = re.compile(
    r"^klaraptor-time: kernel=(\S+) launches=(\d+) helper_launches=(\d+) gpu_ms=([0-9.]+)$", re.M
)


class Run:
    """A log directory and the clock: every step is logged, and the deadline is shared."""

    def __init__(self, out: Path, deadline_s: float) -> None:
        self.out = out
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s
        self.steps = open(self.logs / "steps.txt", "a")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def note(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f} s] {text}"
        print(line, flush=True)
        self.steps.write(line + "\n")
        self.steps.flush()

    def cmd(
        self,
        name: str,
        argv: list[str],
        *,
        cwd: Path,
        timeout: float,
        env: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """Run a command; (return code, its stdout and stderr), both kept in logs/<name>.log."""
        t = time.monotonic()
        full_env = dict(os.environ, **(env or {}))
        try:
            p = subprocess.run(
                argv,
                cwd=cwd,
                env=full_env,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=max(1.0, timeout),
            )
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            out = (
                exc.stdout.decode(errors="replace")
                if isinstance(exc.stdout, bytes)
                else (exc.stdout or "")
            )
            err = (
                exc.stderr.decode(errors="replace")
                if isinstance(exc.stderr, bytes)
                else (exc.stderr or "")
            )
            rc, text = 124, out + err + f"\n[timed out after {timeout:.0f} s]\n"
        except OSError as exc:
            rc, text = 127, f"[could not run {argv[0]}: {exc}]\n"
        (self.logs / f"{name}.log").write_text(
            f"$ {' '.join(argv)}\n# cwd {cwd}\n# env {env or {}}\n# rc {rc}, "
            f"{time.monotonic() - t:.1f} s\n{text}"
        )
        return rc, text


def ensure_libclang(run: Run) -> str:
    """libclang's Python package: installed, or from a wheel carried in .whl/."""
    try:
        import clang.cindex  # noqa: F401

        return "installed"
    except ImportError:
        pass
    wheels = sorted((ROOT / ".whl").glob("libclang-*.whl"))
    if not wheels:
        return "missing (no .whl/libclang-*.whl carried)"
    target = run.out / "pylib"
    rc, _ = run.cmd(
        "pip_libclang",
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--target",
            str(target),
            str(wheels[-1]),
        ],
        cwd=ROOT,
        timeout=120,
    )
    sys.path.insert(0, str(target))
    return f"from {wheels[-1].name} (pip rc {rc})"


def nvcc_argv(source: Path, exe: Path, prog: Program, utilities: Path, compat: Path) -> list[str]:
    return [
        "nvcc",
        "-O3",
        "-arch=sm_90",
        "-include",
        str(compat),
        f"-I{utilities}",
        *prog.flags,
        source.name,
        "-o",
        str(exe),
    ]


def parse_run(text: str) -> dict[str, Any]:
    """What a program's run printed: its check, its GPU time and klaraptor's lines."""
    mism = [int(m) for m in _MISMATCH.findall(text)]
    gpu = _GPU_TIME.search(text)
    launches = [
        {
            "kernel": m.group(1),
            "D": [int(v) for v in m.group(2).split(",")],
            "grid": [int(m.group(3)), int(m.group(4)), int(m.group(5))],
            "block": [int(m.group(6)), int(m.group(7)), int(m.group(8))],
            "source": m.group(9),
            "reason": m.group(10),
        }
        for m in _LAUNCH.finditer(text)
    ]
    times = {
        m.group(1): {
            "launches": int(m.group(2)),
            "helper_launches": int(m.group(3)),
            "gpu_ms": float(m.group(4)),
        }
        for m in _TIME.finditer(text)
    }
    return {
        "mismatches": mism[-1] if mism else None,
        "program_gpu_s": float(gpu.group(1)) if gpu else None,
        "launches": launches,
        "times": times,
    }


def build_program(run: Run, store: Any, bench: str, path: Path, args: argparse.Namespace) -> dict:
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.frontends.annotated import read_annotated

    out: dict[str, Any] = {}
    for spec in read_annotated(path):
        if run.left() < args.reserve_s:
            out[spec.name] = {"ok": False, "error": "skipped: time budget"}
            continue
        t = time.monotonic()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                kern = build(
                    spec,
                    None,
                    model=args.model,
                    budget=args.budget,
                    store=store,
                    collect_options=CollectOptions(counters=False),
                    progress=False,
                )
            rep = kern.report
            done = rep.collect.plan if rep and rep.collect else None
            plan = done.to_dict() if done is not None else None
            out[spec.name] = {
                "ok": True,
                "model": rep.model if rep else None,
                "train_sizes": [list(s.values()) for s in rep.sizes] if rep else None,
                "wall_s": round(time.monotonic() - t, 2),
                "plan": {
                    k: plan[k] for k in ("counts", "spent_s", "tune_once_s", "ratio") if k in plan
                }
                if plan
                else None,
                "default_block": list(spec.default_block) if spec.default_block else None,
            }
        except Exception as exc:  # noqa: BLE001 - recorded; the next kernel goes on
            out[spec.name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        run.note(f"build {bench} {spec.name}: {out[spec.name]}")
    return out


def instrument_program(store: Any, path: Path, utilities: Path) -> tuple[Any, dict]:
    from klaraptor.assemble import load
    from klaraptor.instrument import instrument

    def lookup(name: str) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return load(name, store=store).helper

    result = instrument(path, helpers=lookup, include_dirs=[utilities])
    result.write()
    return result, {
        "rewritten": result.rewritten,
        "launch_sites": len(result.launches),
        "notices": [str(n) for n in result.notices],
        "output": result.output.name,
    }


def check_choices(store: Any, launches: list[dict]) -> tuple[bool, list[str]]:
    """Every logged launch used the helper, with the grid and block `select` gives in Python."""
    from klaraptor.assemble import load

    problems: list[str] = []
    kernels: dict[str, Any] = {}
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for ln in launches:
        if ln["source"] != "helper":
            problems.append(f"{ln['kernel']} D={ln['D']}: program's configuration ({ln['reason']})")
            continue
        key = (ln["kernel"], tuple(ln["D"]))
        if key in seen:
            continue
        seen.add(key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if ln["kernel"] not in kernels:
                kernels[ln["kernel"]] = load(ln["kernel"], store=store)
            kern = kernels[ln["kernel"]]
            sel = kern.select(dict(zip(kern.helper.data_names, ln["D"])))
        if list(sel.block) != ln["block"] or list(sel.grid) != ln["grid"]:
            problems.append(
                f"{ln['kernel']} D={ln['D']}: launched grid={ln['grid']} block={ln['block']}, "
                f"select gives grid={list(sel.grid)} block={list(sel.block)}"
            )
    return (not problems and bool(launches)), problems


def ncu_check(run: Run, name: str, exe: Path, cwd: Path, count: int) -> dict:
    """Nsight Compute's launch records of the first `count` launches against the logged ones."""
    from klaraptor.collect.ncu import find_ncu, parse_raw_csv, row_block, row_grid

    ncu = find_ncu()
    if ncu is None:
        return {"ok": None, "note": "ncu not found"}
    metrics = ",".join(f"launch__{w}_dim_{a}" for w in ("grid", "block") for a in "xyz")
    rc, text = run.cmd(
        f"{name}_ncu",
        [ncu, "--csv", "--page", "raw", "--metrics", metrics, "-c", str(count), str(exe)],
        cwd=cwd,
        timeout=min(90.0, max(5.0, run.left() - 5)),
        env={"KLARAPTOR_LOG": "1"},
    )
    rows = parse_raw_csv(text)
    relog = parse_run(text)["launches"][: len(rows)]
    pairs = []
    for row, ln in zip(rows, relog):
        pairs.append(
            {
                "kernel": str(row.get("Kernel Name")),
                "ncu_grid": list(row_grid(row) or ()),
                "ncu_block": list(row_block(row) or ()),
                "logged_grid": ln["grid"],
                "logged_block": ln["block"],
            }
        )
    ok = bool(pairs) and all(
        p["ncu_grid"] == p["logged_grid"] and p["ncu_block"] == p["logged_block"] for p in pairs
    )
    return {"ok": ok, "rc": rc, "records": pairs}


def overhead_bench(run: Run, store: Any, args: argparse.Namespace, work: Path) -> dict:
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.frontends.annotated import read_annotated

    folder = work / "instrument_overhead"
    shutil.copytree(OVERHEAD, folder, dirs_exist_ok=True)
    src = folder / "overhead.cu"
    notes = []
    try:
        (spec,) = read_annotated(src)
        build(
            spec,
            None,
            model=args.model,
            budget=args.budget,
            store=store,
            collect_options=CollectOptions(counters=False),
            progress=False,
        )
    except Exception as exc:  # noqa: BLE001 - a build already in the store may still serve
        notes.append(f"build: {type(exc).__name__}: {exc}"[:300])
    try:
        result, info = instrument_program(store, src, folder)
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:500], "notes": notes}
    info["notes"] = notes
    exe = folder / "overhead.exe"
    rc, text = run.cmd(
        "overhead_nvcc",
        ["nvcc", "-O3", "-arch=sm_90", result.output.name, "-o", str(exe)],
        cwd=folder,
        timeout=120,
    )
    if rc != 0:
        return {"ok": False, "error": "nvcc failed (logs/overhead_nvcc.log)", **info}
    rc, text = run.cmd("overhead_run", [str(exe), "65536", "41"], cwd=folder, timeout=60)
    values = {k: float(v) for k, v in re.findall(r"^(\w+_(?:us|ns))=([0-9.]+)$", text, re.M)}
    out: dict[str, Any] = {"ok": rc == 0 and bool(values), "rc": rc, **values, **info}
    if "instrumented_enqueue_us" in values and "plain_enqueue_us" in values:
        out["overhead_us"] = round(
            values["instrumented_enqueue_us"] - values["plain_enqueue_us"], 4
        )
    return out


def _guard(record: dict, stage: str, fn: Any, *args: Any) -> None:
    """Run one program's step; a failure is noted in its record, and the next step goes on."""
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded; the other programs go on
        record["notes"].append(f"{stage}: {type(exc).__name__}: {exc}"[:500])


def measure_program(run: Run, store: Any, src: Path, bench: str, r: dict) -> None:
    """The instrumented program with the helper's configurations, then with its own."""
    exe = src.with_name(src.stem + ".klaraptor.exe")
    rc, text = run.cmd(
        f"{bench}_run_helper",
        [str(exe)],
        cwd=src.parent,
        timeout=90.0,
        env={"KLARAPTOR_LOG": "1", "KLARAPTOR_TIME": "1"},
    )
    helper = parse_run(text)
    rc_off, text_off = run.cmd(
        f"{bench}_run_defaults",
        [str(exe)],
        cwd=src.parent,
        timeout=90.0,
        env={"KLARAPTOR_OFF": "1", "KLARAPTOR_TIME": "1", "KLARAPTOR_LOG": "1"},
    )
    defaults = parse_run(text_off)
    r["rc"] = {"helper": rc, "defaults": rc_off}
    r["mismatches"] = {"helper": helper["mismatches"], "defaults": defaults["mismatches"]}
    r["passed"] = rc == 0 and helper["mismatches"] == 0
    r["program_gpu_s"] = {"helper": helper["program_gpu_s"], "defaults": defaults["program_gpu_s"]}
    r["launches"] = len(helper["launches"])

    def configs(launches: list[dict]) -> list:
        return sorted({(ln["kernel"], tuple(ln["grid"]), tuple(ln["block"])) for ln in launches})

    r["configs"] = {
        "helper": configs(helper["launches"]),
        "defaults": configs(defaults["launches"]),
    }
    per_kernel = {}
    for k, t in helper["times"].items():
        d = defaults["times"].get(k)
        per_kernel[k] = {
            "launches": t["launches"],
            "helper_ms": t["gpu_ms"],
            "defaults_ms": d["gpu_ms"] if d else None,
            "speedup": round(d["gpu_ms"] / t["gpu_ms"], 4) if d and t["gpu_ms"] > 0 else None,
        }
    r["per_kernel"] = per_kernel
    th = sum(v["helper_ms"] for v in per_kernel.values())
    td = sum(v["defaults_ms"] or 0.0 for v in per_kernel.values())
    r["kernel_time_ms"] = {"helper": round(th, 6), "defaults": round(td, 6)}
    r["speedup"] = round(td / th, 4) if th > 0 and td > 0 else None
    ok, problems = check_choices(store, helper["launches"])
    r["helper_matches_select"] = ok
    r["choice_problems"] = problems[:10]
    r["launched_with_helper_config"] = ok
    run.note(
        f"run {bench}: passed={r['passed']} mismatches={r['mismatches']} "
        f"helper_config={ok} speedup={r['speedup']} {problems[:2]}"
    )


def run_original(run: Run, src: Path, bench: str, r: dict) -> None:
    """The original program, untouched: its own check and GPU time."""
    exe = src.with_name(src.stem + ".original.exe")
    rc, text = run.cmd(f"{bench}_run_original", [str(exe)], cwd=src.parent, timeout=90.0)
    orig = parse_run(text)
    r["original"] = {
        "rc": rc,
        "mismatches": orig["mismatches"],
        "program_gpu_s": orig["program_gpu_s"],
    }


def ncu_program(run: Run, exe: Path, cwd: Path, bench: str, r: dict) -> None:
    r["ncu"] = ncu_check(run, bench, exe, cwd, len(PROGRAMS[bench].kernels))
    if r["ncu"].get("ok") is False:
        r["launched_with_helper_config"] = False
        r["notes"].append("Nsight Compute's launch records differ from the logged launches")
    run.note(f"ncu {bench}: {r['ncu'].get('ok')}")


def _output(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"({argv[0]}: {exc})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("outdir")
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    ap.add_argument("--budget", type=float, default=1.0, help="build budget (x tune-once's sweep)")
    ap.add_argument("--model", default="auto")
    ap.add_argument("--deadline-s", type=float, default=340.0, help="the whole script's time")
    ap.add_argument(
        "--reserve-s", type=float, default=150.0, help="time kept for compiling and running"
    )
    args = ap.parse_args(argv)
    out = Path(args.outdir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KLARAPTOR_HOME", str(out / "home"))
    run = Run(out, args.deadline_s)
    libclang = ensure_libclang(run)
    run.note(f"libclang: {libclang}")

    from klaraptor.core.provenance import stamp
    from klaraptor.store import Store

    work = out / "work"
    shutil.copytree(POLYBENCH, work / "polybench_acc", dirs_exist_ok=True)
    cuda = work / "polybench_acc" / "CUDA"
    utilities = cuda / "utilities"
    compat = work / "polybench_acc" / "compat" / "polybench_compat.h"
    smi = _output(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"]
    )
    nvcc_version = _output(["nvcc", "--version"])
    summary: dict[str, Any] = {
        "what": "klaraptor instrument on PolyBench-ACC's own CUDA programs (issue 35): built at "
        "small sizes, instrumented, compiled with nvcc, run at a larger size; each program's "
        "own CPU check; launches checked against select() and Nsight Compute; kernel GPU time "
        "(CUDA events around each launch) against the programs' DIM_THREAD_BLOCK_* defaults",
        "provenance": stamp(),
        "gpu": smi,
        "nvcc": nvcc_version.strip().splitlines()[-1] if nvcc_version else None,
        "libclang": libclang,
        "settings": {"budget": args.budget, "model": args.model, "counters": False},
        "per_program": {},
    }
    results: dict[str, dict[str, Any]] = summary["per_program"]

    def save() -> None:
        progs = list(results.values())
        summary["programs"] = len(args.programs)
        for key in ("instrumented", "compiled", "passed", "launched_with_helper_config"):
            summary[key] = sum(bool(p.get(key)) for p in progs)
        (out / "instrument.json").write_text(json.dumps(summary, indent=1) + "\n")

    pool = ThreadPoolExecutor(max_workers=max(2, min(16, os.cpu_count() or 2)))
    original_jobs: dict[str, Future] = {}
    for bench in args.programs:
        prog = PROGRAMS[bench]
        src = cuda / prog.path
        results[bench] = {
            "program": f"CUDA/{prog.path}",
            "eval_size": prog.eval_size,
            "flags": list(prog.flags),
            "instrumented": False,
            "compiled": False,
            "passed": False,
            "launched_with_helper_config": False,
            "notes": [],
        }
        exe = src.with_name(src.stem + ".original.exe")
        original_jobs[bench] = pool.submit(
            run.cmd,
            f"{bench}_nvcc_original",
            nvcc_argv(src, exe, prog, utilities, compat),
            cwd=src.parent,
            timeout=300,
        )

    store = Store()
    # 1. builds (the GPU), while the originals compile (the CPUs)
    for bench in args.programs:
        src = cuda / PROGRAMS[bench].path
        try:
            results[bench]["builds"] = build_program(run, store, bench, src, args)
        except Exception as exc:  # noqa: BLE001
            results[bench]["notes"].append(f"build: {type(exc).__name__}: {exc}"[:500])
        save()
    # 2. instrument (CPU) and compile (in parallel)
    compile_jobs: dict[str, Future] = {}
    for bench in args.programs:
        prog = PROGRAMS[bench]
        src = cuda / prog.path
        try:
            result, info = instrument_program(store, src, utilities)
            results[bench]["instrument"] = info
            results[bench]["instrumented"] = info["rewritten"] == info["launch_sites"] > 0
            exe = src.with_name(src.stem + ".klaraptor.exe")
            compile_jobs[bench] = pool.submit(
                run.cmd,
                f"{bench}_nvcc_instrumented",
                nvcc_argv(result.output, exe, prog, utilities, compat),
                cwd=src.parent,
                timeout=300,
            )
        except Exception as exc:  # noqa: BLE001
            results[bench]["notes"].append(f"instrument: {type(exc).__name__}: {exc}"[:500])
        run.note(f"instrument {bench}: {results[bench].get('instrument')}")
    for bench, job in compile_jobs.items():
        rc, _ = job.result()
        results[bench]["compiled"] = rc == 0
    for bench, job in original_jobs.items():
        rc, _ = job.result()
        results[bench]["original_compiled"] = rc == 0
    save()
    run.note("compiled: " + ", ".join(f"{b}={r['compiled']}" for b, r in results.items()))

    # 3. runs: the helper's configurations, then the programs' own (serial: one GPU)
    for bench in args.programs:
        if results[bench]["compiled"]:
            _guard(
                results[bench],
                "run",
                measure_program,
                run,
                store,
                cuda / PROGRAMS[bench].path,
                bench,
                results[bench],
            )
            save()
    # 4. the per-launch overhead
    if run.left() > 40:
        summary["overhead"] = overhead_bench(run, store, args, work)
        summary["overhead_us"] = summary["overhead"].get("overhead_us")
        run.note(f"overhead: {summary['overhead']}")
    else:
        summary["overhead"] = {"ok": False, "error": "skipped: time budget"}
        summary["overhead_us"] = None
    save()
    # 5. the originals, untouched (their own check), then Nsight Compute, while time remains
    for bench in args.programs:
        r = results[bench]
        if r.get("original_compiled") and run.left() > 25:
            _guard(r, "original", run_original, run, cuda / PROGRAMS[bench].path, bench, r)
    save()
    for bench in args.programs:
        r = results[bench]
        if not r.get("compiled"):
            continue
        if run.left() < 25:
            r["ncu"] = {"ok": None, "note": "skipped: time budget"}
            continue
        src = cuda / PROGRAMS[bench].path
        exe = src.with_name(src.stem + ".klaraptor.exe")
        _guard(r, "ncu", ncu_program, run, exe, src.parent, bench, r)
        save()
    pool.shutdown(wait=False, cancel_futures=True)
    summary["wall_s"] = round(time.monotonic() - run.t0, 1)
    save()
    run.note(
        f"done: {summary['passed']}/{summary['programs']} passed, "
        f"{summary['launched_with_helper_config']} with the helper's configuration, "
        f"overhead {summary.get('overhead_us')} us"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
