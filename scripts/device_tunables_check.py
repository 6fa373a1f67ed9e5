"""Check the tunables suite on a GPU with CuPy alone (no klaraptor collection code).

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> PYTHONPATH=src python3 scripts/device_tunables_check.py OUTDIR \
        [--kernels sgemm,nbody] [--jobs 16] [--no-time]

For every kernel of `klaraptor.suite.tunables` and every variant the constraints admit:
1. compile it with `cupy.RawModule` (the variant's `-D` defines, or its template instance as an
   NVRTC name expression), on CPU threads, and record the compiled function's registers, shared
   and local memory and its maximum block size;
2. at each of the spec's check sizes (a tiny N and odd ones, where every tile is partial
   somewhere) and at its smallest training size, run the blocks a check picks (default, fewest
   and most threads, widest, tallest, deepest, a width that is not a power of two) on fresh
   arguments, fully written outputs poisoned with NaN, and compare with the float64 reference
   (norm and peak relative error within the spec's rtol); inputs must come back unchanged; a
   second launch must give the same outputs (the histogram adds the same counts again);
   a block the compiled variant cannot launch (registers) is recorded, not run;
3. unless --no-time: at the largest evaluation size, time every admitted configuration (one
   warm-up, then the median of 3 launches, CUDA events) and report the slowest (the suite
   promises <= ~5 ms), the default configuration, the best block with the default parameters
   and the best configuration overall.

Writes OUTDIR/tunables_check.json (provenance, per kernel and variant: attributes, every check,
the timings) and OUTDIR/log.txt; prints every failure and exits 1 when there is one.
Expected wall time on one H200: about 1-2 minutes (compiles ~40 s on 16 threads).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from klaraptor.core.provenance import stamp  # noqa: E402
from klaraptor.core.types import ParamStyle, ParamValues  # noqa: E402
from klaraptor.spec import Block, KernelSpec  # noqa: E402
from klaraptor.suite import tunables as T  # noqa: E402

TIME_REPEATS = 3


def _cp() -> Any:
    import cupy

    return cupy


# ---------------------------------------------------------------------------------------------
# Compiling


def compile_variant(spec: KernelSpec, pv: ParamValues) -> Any:
    """The variant's kernel as a CuPy function: RawModule with the variant's defines, or with
    its template instance as a name expression."""
    cp = _cp()
    if spec.param_style is ParamStyle.TEMPLATE:
        expr = spec.variant_kernel(pv)
        module = cp.RawModule(code=spec.source, options=spec.options, name_expressions=[expr])
        return module.get_function(expr)
    module = cp.RawModule(code=spec.source, options=spec.variant_options(pv))
    return module.get_function(spec.kernel)


ATTRIBUTES = (
    "num_regs",
    "shared_size_bytes",
    "local_size_bytes",
    "max_threads_per_block",
    "max_dynamic_shared_size_bytes",
)


def attributes(fn: Any) -> dict[str, int]:
    """The compiled function's limits and resources (cuFuncGetAttribute)."""
    a = fn.attributes
    return {k: int(a[k]) for k in ATTRIBUTES}


def admitted_variants(spec: KernelSpec) -> list[ParamValues]:
    """The variants with at least one admitted block (the constraints do not depend on N)."""
    return [pv for pv, blocks in T.joint_space(spec, spec.size(1)).items() if blocks]


def compile_all(
    todo: list[tuple[KernelSpec, ParamValues]], jobs: int
) -> tuple[dict[tuple[str, ParamValues], Any], list[str]]:
    """Compile (spec, variant) pairs on `jobs` threads; (functions by (spec name, variant),
    failures)."""
    fns: dict[tuple[str, ParamValues], Any] = {}
    failures: list[str] = []

    def one(item: tuple[KernelSpec, ParamValues]) -> tuple[KernelSpec, ParamValues, Any, str]:
        spec, pv = item
        try:
            _cp().cuda.Device(0).use()  # this thread's current context: the module loads into it
            return spec, pv, compile_variant(spec, pv), ""
        except Exception as exc:  # noqa: BLE001 - every compile failure is reported
            return spec, pv, None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for spec, pv, fn, err in pool.map(one, todo):
            if fn is None:
                failures.append(f"{spec.name} {pv}: compile failed: {err[:2000]}")
            else:
                fns[(spec.name, pv)] = fn
    return fns, failures


# ---------------------------------------------------------------------------------------------
# Checking


class Case:
    """One data size of one kernel: pristine device arguments, their host copies and the
    reference outputs (computed once, shared by every variant and block)."""

    def __init__(self, spec: KernelSpec, n: int) -> None:
        cp = _cp()
        self.spec, self.n, self.D = spec, n, spec.size(n)
        self.args = spec.make_args(self.D, np.random.default_rng(n))
        self.host = tuple(cp.asnumpy(a) if isinstance(a, cp.ndarray) else a for a in self.args)
        self.expected = spec.reference(self.D, self.host)

    def fresh(self) -> list[Any]:
        cp = _cp()
        return [a.copy() if isinstance(a, cp.ndarray) else a for a in self.args]


def _inputs(spec: KernelSpec, n_args: int) -> set[int]:
    """Arguments that are pure inputs: neither outputs nor workspace (the reduction's partials)."""
    workspace = {1} if spec.kernel == T.REDUCE.kernel else set()
    return set(range(n_args)) - set(spec.outputs) - workspace


def check_one(spec: KernelSpec, pv: ParamValues, fn: Any, case: Case, block: Block) -> dict:
    """One configuration at one size: launch twice on fresh arguments, compare."""
    cp = _cp()
    D = case.D
    grid = spec.grid_for(D, block, pv)
    smem = spec.dynamic_smem_for(D, block, pv)
    rec: dict[str, Any] = {"N": case.n, "block": list(block), "grid": list(grid), "smem": smem}
    limits = attributes(fn)
    threads = block[0] * block[1] * block[2]
    if threads > limits["max_threads_per_block"] or smem > limits["max_dynamic_shared_size_bytes"]:
        rec.update(status="unlaunchable", reason=f"limits {limits}")
        return rec
    args = case.fresh()
    for i in spec.meta["overwrites"]:
        if args[i].dtype.kind == "f":
            args[i].fill(np.nan)
    problems: list[str] = []
    try:
        fn(grid, block, tuple(args), shared_mem=smem)
        cp.cuda.runtime.deviceSynchronize()
        first = {i: cp.asnumpy(args[i]) for i in spec.outputs}
        for i, ref in case.expected.items():
            rel, peak = T.output_errors(first[i], ref)
            rec.setdefault("errors", {})[str(i)] = [rel, peak]
            if not (rel <= spec.rtol and peak <= spec.rtol):
                problems.append(f"output {i}: relative error {rel:.3g}, peak {peak:.3g}")
        for i in _inputs(spec, len(args)):
            if isinstance(case.host[i], np.ndarray):
                if not np.array_equal(cp.asnumpy(args[i]), case.host[i], equal_nan=True):
                    problems.append(f"input {i} changed")
        fn(grid, block, tuple(args), shared_mem=smem)  # the second launch
        cp.cuda.runtime.deviceSynchronize()
        for i in spec.outputs:
            second = cp.asnumpy(args[i])
            if spec.idempotent:
                same = np.array_equal(second, first[i], equal_nan=True)
            else:  # the histogram adds the same counts again
                before = case.host[i].astype(np.int64)
                same = np.array_equal(second.astype(np.int64) - first[i], first[i] - before)
            if not same:
                problems.append(f"output {i} differs on the second launch")
    except Exception as exc:  # noqa: BLE001 - a launch error is a failed check
        problems.append(f"{type(exc).__name__}: {exc}")
    rec["status"] = "failed" if problems else "ok"
    if problems:
        rec["problems"] = problems
    return rec


def check_sizes(spec: KernelSpec) -> list[int]:
    """The spec's check sizes and its smallest training size."""
    return [*spec.meta["check_sizes"], min(spec.meta["train_sizes"])]


def check_kernel(
    spec: KernelSpec, fns: dict[tuple[str, ParamValues], Any], sizes: list[int] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Every compiled variant at every check size with its check blocks; (record, failures)."""
    out: dict[str, Any] = {}
    failures: list[str] = []
    for n in sizes or check_sizes(spec):
        case = Case(spec, n)
        space = T.joint_space(spec, case.D)
        for pv, blocks in space.items():
            fn = fns.get((spec.name, pv))
            if fn is None or not blocks:
                continue
            entry = out.setdefault(str(pv), {"attributes": attributes(fn), "checks": []})
            for block in T.check_blocks(spec, blocks):
                rec = check_one(spec, pv, fn, case, block)
                entry["checks"].append(rec)
                if rec["status"] == "failed":
                    failures.append(f"{spec.name} {pv} N={n} block={block}: {rec['problems']}")
        del case
        _cp().get_default_memory_pool().free_all_blocks()
    return out, failures


# ---------------------------------------------------------------------------------------------
# Timing at the largest evaluation size


def time_kernel(spec: KernelSpec, fns: dict[tuple[str, ParamValues], Any]) -> dict[str, Any]:
    """Every admitted configuration at the largest evaluation size: median of TIME_REPEATS
    launches after one warm-up (ms); the slowest, the default, the best block-only and the
    best joint configuration."""
    cp = _cp()
    n = max(spec.meta["eval_sizes"])
    D = spec.size(n)
    args = tuple(spec.make_args(D, np.random.default_rng(n)))
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    rows = []
    for pv, blocks in T.joint_space(spec, D).items():
        fn = fns.get((spec.name, pv))
        if fn is None:
            continue
        limits = attributes(fn)
        for block in blocks:
            grid = spec.grid_for(D, block, pv)
            smem = spec.dynamic_smem_for(D, block, pv)
            if (
                block[0] * block[1] * block[2] > limits["max_threads_per_block"]
                or smem > limits["max_dynamic_shared_size_bytes"]
            ):
                continue
            fn(grid, block, args, shared_mem=smem)
            samples = []
            for _ in range(TIME_REPEATS):
                start.record()
                fn(grid, block, args, shared_mem=smem)
                stop.record()
                stop.synchronize()
                samples.append(cp.cuda.get_elapsed_time(start, stop))
            rows.append({"params": dict(pv), "block": list(block), "ms": float(np.median(samples))})
    del args
    cp.get_default_memory_pool().free_all_blocks()
    if not rows:
        return {"N": n, "configs": []}
    default = dict(spec.default_variant)
    by_default = [r for r in rows if r["params"] == default]
    pick = {
        "slowest": max(rows, key=lambda r: r["ms"]),
        "best": min(rows, key=lambda r: r["ms"]),
        "best_block_only": min(by_default, key=lambda r: r["ms"]) if by_default else None,
        "default": next((r for r in by_default if tuple(r["block"]) == spec.default_block), None),
    }
    return {"N": n, **pick, "configs": rows}


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--kernels", default="", help="comma-separated benchmark names (default all)")
    ap.add_argument("--jobs", type=int, default=16, help="compile threads")
    ap.add_argument("--no-time", action="store_true", help="skip the timing pass")
    args = ap.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    log = open(args.outdir / "log.txt", "w")

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    cp = _cp()
    wanted = {k.strip() for k in args.kernels.split(",") if k.strip()}
    specs = [s for s in T.SPECS if not wanted or s.meta["benchmark"] in wanted]
    props = cp.cuda.runtime.getDeviceProperties(0)
    try:
        nvrtc = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except Exception:  # noqa: BLE001 - provenance only
        nvrtc = "unknown"
    result: dict[str, Any] = {
        "provenance": stamp(
            device=props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            cupy=cp.__version__,
            nvrtc=nvrtc,
        ),
        "kernels": {},
        "failures": [],
        "elapsed_s": {},
    }
    t0 = time.perf_counter()
    fns, failures = compile_all(
        [(spec, pv) for spec in specs for pv in admitted_variants(spec)], args.jobs
    )
    result["elapsed_s"]["compile"] = time.perf_counter() - t0
    say(f"compiled {len(fns)} variants in {result['elapsed_s']['compile']:.1f} s")
    t1 = time.perf_counter()
    for spec in specs:
        try:
            rec, fails = check_kernel(spec, fns)
        except Exception:  # noqa: BLE001 - one kernel's crash must not hide the others
            rec, fails = {}, [f"{spec.name}: check crashed:\n{traceback.format_exc()}"]
        result["kernels"][spec.name] = {"variants": rec}
        failures += fails
        n_checks = sum(len(v["checks"]) for v in rec.values())
        say(f"{spec.name}: {n_checks} checks, {len(fails)} failed")
    result["elapsed_s"]["check"] = time.perf_counter() - t1
    if not args.no_time:
        t2 = time.perf_counter()
        for spec in specs:
            try:
                timing = time_kernel(spec, fns)
            except Exception:  # noqa: BLE001
                timing = {"error": traceback.format_exc()}
                failures.append(f"{spec.name}: timing crashed")
            result["kernels"][spec.name]["timing"] = timing
            if "slowest" in timing:
                msg = ", ".join(
                    f"{k} {timing[k]['ms']:.3f} ms {timing[k]['params']} {tuple(timing[k]['block'])}"
                    for k in ("slowest", "default", "best_block_only", "best")
                    if timing.get(k)
                )
                say(f"{spec.name} N={timing['N']}: {msg}")
                if timing["slowest"]["ms"] > 5.0:
                    say("  WARNING: the slowest configuration takes over 5 ms")
        result["elapsed_s"]["time"] = time.perf_counter() - t2
    result["elapsed_s"]["total"] = time.perf_counter() - t0
    result["failures"] = failures
    (args.outdir / "tunables_check.json").write_text(json.dumps(result, indent=1))
    for f in failures:
        say("FAIL " + f)
    say(f"{len(failures)} failures; {result['elapsed_s']['total']:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
