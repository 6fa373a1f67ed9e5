"""Benchmark of the per-call selection path.

    python benchmarks/bench_select.py [OUTDIR] [--quick]

(a) `Selector.select` for a NEW D (every timed call a D never seen before: distinct N values);
(b) `Selector.select` for a cached D;
(c) `launcher.data_reader` on a realistic argument tuple (arrays, scalars, N as argument 5), and
    `TunedKernel.__call__` with the CuPy launch stubbed out (the launcher's own per-call cost);
(e) `Selector.select` for a new D and a cached D over a JOINT space of program parameters and
    blocks (issue 32's target: <= 50 us new, <= 150 ns cached, for up to 2,000 configurations):
    a 1-D kernel with three compile-time parameters (ITEMS, UNROLL, VEC: 64 variants) times 32
    blocks = 2,048 configurations, built by `build()` (default model, every point) from a store of
    SYNTHETIC timings (a law of n, the block and the parameters; tests/assemble/
    test_program_parameters.py's, extended) with per-variant registers, as a GPU run leaves it;
(d) with CuPy and a GPU only: host wall time per launch of an EMPTY kernel through
    `TunedKernel.__call__` versus a plain `cupy.RawKernel` launch, over batches of 1000 launches
    after warm-up, and their ratio (target <= 1.3).

The helper program of (a) and (b) is an MWP-CWP helper of the 2-D suite kernel
polybench.gemm.gemm over its 51 default candidate blocks, built by `make_helper` exactly as
`build()` builds one: the metric VALUES it is fitted to are synthetic (tests/helpers_synthetic.py:
formulas of N and the block instead of ncu measurements), but the program shape (fitted
per-configuration rational functions bound into the MWP-CWP template, occupancy, admission
program) is the real one. (d) uses a tiny synthetic helper over the 1-D default candidates: only
the overhead is measured there, not the model.

Timings use time.perf_counter_ns around each call (medians, p10, p90 in microseconds). Writes
OUTDIR/bench_select.json (default benchmarks/results/) with the results and provenance
(`klaraptor.core.provenance.stamp()`, GPU name or "cpu only"), and prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent))  # the repository root: `tests.helpers`

from klaraptor.core.provenance import stamp  # noqa: E402
from klaraptor.runtime.launcher import data_reader  # noqa: E402
from klaraptor.runtime.selector import Selector  # noqa: E402
from tests import helpers as hs  # noqa: E402

TARGET_NEW_US = 50.0
TARGET_CACHED_US = 0.150
# Every form a caller may pass D in; a cached select must cost the same for each.
D_FORMS: dict[str, Any] = {
    "int": 4096,
    "tuple": (4096,),
    "dict": {"N": 4096},
    "text": "N=4096",
    "numpy_int": np.int64(4096),
}
TARGET_LAUNCH_RATIO = 1.3


def summary(ns: list[int] | np.ndarray, per: int = 1) -> dict[str, float]:
    us = np.asarray(ns, dtype=np.float64) / 1e3 / per
    return {
        "median_us": float(np.median(us)),
        "p10_us": float(np.percentile(us, 10)),
        "p90_us": float(np.percentile(us, 90)),
        "n": int(us.size),
    }


def time_each(fn: Callable[[int], Any], n: int) -> list[int]:
    """perf_counter_ns around each of n calls fn(i) (GC off while timing)."""
    clock = time.perf_counter_ns
    out = [0] * n
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            t0 = clock()
            fn(i)
            out[i] = clock() - t0
    finally:
        gc.enable()
    return out


def bench_new_d(helper: Any, spec: Any, n: int, lo: int = 101, hi: int = 40000) -> dict[str, float]:
    sel = Selector(helper, spec=spec)
    for i in range(200):  # warm-up: first-call costs (imports, caches) are not per-D costs
        sel.select(lo + i)
    sel._hits.clear()
    # Distinct N never seen before (the cache is also cleared above), spread over the range.
    hi = min(hi, lo + 40000)
    Ds = [(int(v),) for v in np.unique(np.linspace(lo + 200, hi, n).round().astype(int))]
    return summary(time_each(lambda i: sel.select(Ds[i]), len(Ds)))


RECORDED_KERNELS = ("polybench.gemm.gemm", "polybench.conv3d.conv3d", "rodinia.srad.k1")


def bench_recorded_builds(n: int) -> dict[str, Any]:
    """`select` for a new D with the default build's helper (`auto`, budget 1.5) of real recorded
    kernels (2D, 3D, Rodinia), built from the shipped H200 measurements as `import-recorded` does."""
    import tempfile

    from klaraptor import load
    from klaraptor.store import Store
    from klaraptor.suite.recorded import build_recorded, recorded_datasets

    datasets = recorded_datasets()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recorded.sqlite"
        for kernel in RECORDED_KERNELS:
            file = next(f for f, d in datasets.items() if kernel in d.kernels)
            datasets[file].to_store(path, kernels=[kernel]).close()
            build_recorded(path, file, kernel)
            kern = load(kernel, store=Store(path, must_exist=True))
            lo, hi = kern.spec.data[0].lo, kern.spec.data[0].hi
            out[kernel] = {
                "model": kern.helper.model_name,
                "candidates": len(kern.helper.candidates),
                "select_new_D": bench_new_d(kern.helper, kern.spec, n, lo=max(lo, 64), hi=hi),
            }
    return out


def bench_cached(helper: Any, spec: Any, n: int, D: Any) -> dict[str, float]:
    sel = Selector(helper, spec=spec)
    first = sel.select(D)
    assert sel.select(D) is first
    # Timing one dict lookup per perf_counter pair would mostly time the clock: time batches.
    batch = 100
    out = time_each(lambda i: [sel.select(D) for _ in range(batch)], n // batch)
    r = summary(out, per=batch)
    r["batch"] = batch
    return r


def bench_data_reader(spec: Any, n: int) -> dict[str, float]:
    read = data_reader(spec)
    a = np.zeros((4, 4), np.float32)
    args = (a, a, a, np.float32(1.5), np.float32(0.5), np.int32(4096))  # gemm's argument list
    assert read(args) == 4096
    batch = 100
    out = time_each(lambda i: [read(args) for _ in range(batch)], n // batch)
    r = summary(out, per=batch)
    r["batch"] = batch
    return r


def _no_launch(grid: Any, block: Any, args: Any, shared_mem: int = 0, stream: Any = None) -> None:
    """Where cupy.RawKernel.__call__ would launch."""


class _NoLaunchBackend:
    """CupyBackend's compile, giving a kernel whose call does nothing."""

    def compile(self, source: str, name: str, options: Any = ()) -> Any:
        return _no_launch


def bench_dispatch_stubbed(n: int) -> dict[str, float]:
    """`TunedKernel.__call__` with the CuPy launch replaced by a no-op: the per-call overhead the
    launcher adds (read D, plan lookup, checks), measurable without a GPU."""
    from klaraptor.runtime.launcher import TunedKernel

    spec = hs.empty_spec()
    selector = Selector(hs.tiny_1d_helper(spec), spec=spec)
    # The real launcher over the CuPy spec adapter; only the compiled kernel is a no-op (NVRTC
    # and the launch need CuPy and a GPU).
    tuned = TunedKernel(spec, selector, backend=_NoLaunchBackend())  # type: ignore[arg-type]
    a, nn = np.zeros(16, np.float32), np.int32(1 << 20)
    tuned(a, nn)  # the first call makes the plan
    batch = 100
    out = time_each(lambda i: [tuned(a, nn) for _ in range(batch)], n // batch)
    r = summary(out, per=batch)
    r["batch"] = batch
    return r


JOINT_PARAMS = {"ITEMS": (1, 2, 4, 8), "UNROLL": (1, 2, 4, 8), "VEC": (1, 2, 4, 8)}
JOINT_TRAIN = (1 << 16, 1 << 17, 1 << 18, 1 << 19)


def _nothing_launched(D: Any, rng: Any) -> tuple[Any, ...]:
    raise RuntimeError("the joint-space benchmark launches nothing")


def joint_spec() -> Any:
    from klaraptor.spec import DataParam, KernelSpec

    return KernelSpec(
        name="bench.joint.scale",
        source='extern "C" __global__ void scale(const float* x, float* y, int n) {}',
        kernel="scale",
        data=(DataParam("n", arg=2),),
        dim=1,
        grid=("ceil(n / (bx * ITEMS * VEC))", "1", "1"),
        make_args=_nothing_launched,
        params=JOINT_PARAMS,
        constraints=("bx % 32 == 0",),
        meta={"train_sizes": list(JOINT_TRAIN)},
    )


def joint_law_ms(n: int, bx: int, items: int, unroll: int, vec: int) -> float:
    """The synthetic time of one launch (more work per thread amortises index arithmetic until
    registers spill; unrolling and vector width help up to a point)."""
    import math

    work = items * vec
    per_elem = 1e-6 * (0.4 + 0.6 / work) * (1.0 + 0.15 * abs(math.log2(bx / 256)))
    per_elem *= (1.0 + 0.05 * abs(math.log2(unroll / 4))) * (1.6 if work * unroll > 64 else 1.0)
    blocks = math.ceil(n / (bx * work))
    return n * per_elem + 2e-5 * blocks / 132 + 3e-3


def bench_joint_space(n_new: int, n_cached: int) -> dict[str, Any]:
    """(e): select over a joint space of 2,048 configurations (see the module doc)."""
    import tempfile
    import warnings

    from klaraptor.assemble import build
    from klaraptor.core.types import KernelAttributes
    from klaraptor.device.profile import recorded_profile
    from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store
    from klaraptor.store.records import params_text

    spec = joint_spec()
    prof = recorded_profile("h200")
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "joint.sqlite")
        store.put_kernel(
            KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
        )
        attrs = {
            params_text(pv): KernelAttributes(
                16 + 4 * pv["ITEMS"] * pv["VEC"] // 2 + 2 * pv["UNROLL"], 0, 0, 0, 1024, 49152
            )
            for pv in spec.variants()
        }
        first = next(iter(attrs.values()))
        store.put_collect_facts(
            spec.name,
            prof.key,
            CollectFacts(
                device_name=prof.name,
                attributes=first,
                variant_attributes=attrs,
                arg_bytes=tuple(((n,), 8 * n) for n in JOINT_TRAIN),
            ),
        )
        store.save_profile(prof)
        rows = []
        for n in JOINT_TRAIN:
            D = spec.size(n)
            for pv in spec.variants():
                for t in range(32, 1025, 32):
                    ms = joint_law_ms(n, t, pv["ITEMS"], pv["UNROLL"], pv["VEC"])
                    grid = spec.grid_for(D, (t, 1, 1), pv)
                    value = {"median_ms": ms, "spread": 0.01, "grid": list(grid)}
                    rows.append(
                        Measurement(
                            spec.name, prof.key, D, (t, 1, 1), "time", "ok", value, params=pv
                        )
                    )
        store.put_measurements(rows)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kern = build(
                spec,
                model="auto",
                store=store,
                device=prof,
                collect_data=False,
                budget=None,
                progress=False,
            )
        build_s = time.perf_counter() - t0
        helper = kern.helper
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # every D is an extrapolation: the warning once
            new = bench_new_d(helper, spec, n_new, lo=1 << 20, hi=1 << 26)
            cached = bench_cached(helper, spec, n_cached, 1 << 22)
    return {
        "configurations": len(helper.keys),
        "variants": len(spec.variants()),
        "model": helper.model_name,
        "build_s_cpu": round(build_s, 2),
        "timings": "synthetic law (joint_law_ms); program shape real",
        "select_new_D": new,
        "select_cached_D": cached,
    }


def gpu_name() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: the launch benchmark is skipped
        return None


def bench_launch(batches: int) -> dict[str, Any]:
    """Empty-kernel launch: TunedKernel.__call__ vs a plain cupy.RawKernel, host time per launch."""
    import cupy

    from klaraptor.runtime.launcher import TunedKernel

    spec = hs.empty_spec()
    selector = Selector(hs.tiny_1d_helper(spec), spec=spec)
    tuned = TunedKernel(spec, selector)
    raw = cupy.RawKernel(hs.EMPTY_SRC, "empty")
    n = 1 << 20
    a = cupy.zeros(n, dtype=cupy.float32)
    nn = np.int32(n)
    grid, block, _ = tuned.plan_for(a, nn)
    per_batch = 1000

    def run_tuned() -> None:
        for _ in range(per_batch):
            tuned(a, nn)

    def run_raw() -> None:
        for _ in range(per_batch):
            raw(grid, block, (a, nn))

    def measure(fn: Callable[[], None]) -> list[int]:
        out = []
        for _ in range(batches):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter_ns()
            fn()
            out.append(time.perf_counter_ns() - t0)
        cupy.cuda.Device().synchronize()
        return out

    for fn in (run_tuned, run_raw, run_tuned, run_raw):  # warm-up
        fn()
    cupy.cuda.Device().synchronize()
    # Interleave the two so drift affects both alike.
    t_tuned: list[int] = []
    t_raw: list[int] = []
    for _ in range(3):
        t_tuned += measure(run_tuned)
        t_raw += measure(run_raw)
    tuned_s, raw_s = summary(t_tuned, per=per_batch), summary(t_raw, per=per_batch)
    return {
        "tuned": tuned_s,
        "raw": raw_s,
        "ratio_median": tuned_s["median_us"] / raw_s["median_us"],
        "per_batch": per_batch,
        "grid": list(grid),
        "block": list(block),
        "target_ratio": TARGET_LAUNCH_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "results"))
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke test)")
    args = ap.parse_args(argv)
    n_new = 300 if args.quick else 3000
    n_cached = 2000 if args.quick else 50000

    spec, helper, _, _ = hs.mwp_helper(hs.KERNEL_2D, "auto")
    results: dict[str, Any] = {
        "helper": {
            "kernel": helper.kernel,
            "model": helper.model_name,
            "candidates": len(helper.candidates),
            "metric_values": "synthetic (tests/helpers.py); program shape real",
        },
        "select_new_D": bench_new_d(helper, spec, n_new),
        "select_cached_D": {
            form: bench_cached(helper, spec, n_cached, D) for form, D in D_FORMS.items()
        },
        "data_reader": bench_data_reader(spec, n_cached),
        "tuned_call_launch_stubbed": bench_dispatch_stubbed(n_cached),
        "recorded_default_builds": bench_recorded_builds(n_new),
        "joint_space": bench_joint_space(n_new, n_cached),
    }
    gpu = gpu_name()
    if gpu is not None:
        results["launch_empty_kernel"] = bench_launch(5 if args.quick else 20)
    else:
        results["launch_empty_kernel"] = None
    results["targets"] = {
        "select_new_D_median_us": TARGET_NEW_US,
        "select_cached_D_median_us": TARGET_CACHED_US,
    }
    record = {
        "provenance": stamp(
            machine=platform.machine(),
            processor=platform.processor() or platform.machine(),
            python=platform.python_version(),
            numpy=np.__version__,
            gpu=gpu or "cpu only",
            cpus=os.cpu_count(),
            load_average_1_5_15=[round(x, 2) for x in os.getloadavg()],
        ),
        "results": results,
    }
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "bench_select.json"
    path.write_text(json.dumps(record, indent=2) + "\n")

    rows = [
        ("select, new D", results["select_new_D"], f"< {TARGET_NEW_US:g}"),
        *(
            (f"select, cached D ({form})", r, f"< {TARGET_CACHED_US:g}")
            for form, r in results["select_cached_D"].items()
        ),
        ("data_reader", results["data_reader"], ""),
        ("TunedKernel, no launch", results["tuned_call_launch_stubbed"], ""),
        *(
            (
                f"new D, {k} ({r['model']}, {r['candidates']})",
                r["select_new_D"],
                f"< {TARGET_NEW_US:g}",
            )
            for k, r in results["recorded_default_builds"].items()
        ),
    ]
    joint = results["joint_space"]
    rows += [
        (
            f"new D, joint ({joint['model']}, {joint['configurations']})",
            joint["select_new_D"],
            f"< {TARGET_NEW_US:g}",
        ),
        ("cached D, joint", joint["select_cached_D"], f"< {TARGET_CACHED_US:g}"),
    ]
    launch = results["launch_empty_kernel"]
    if launch is not None:
        rows += [
            ("launch, TunedKernel", launch["tuned"], ""),
            ("launch, RawKernel", launch["raw"], ""),
        ]
    print(
        f"helper: {helper.kernel} ({helper.model_name}, {len(helper.candidates)} candidates, synthetic metric values)"
    )
    print(f"{'what':30s} {'median us':>10s} {'p10':>9s} {'p90':>9s} {'n':>7s}  target")
    for name, r, target in rows:
        print(
            f"{name:30s} {r['median_us']:10.3f} {r['p10_us']:9.3f} {r['p90_us']:9.3f} {r['n']:7d}  {target}"
        )
    if launch is not None:
        print(
            f"launch ratio TunedKernel / RawKernel: {launch['ratio_median']:.3f} (target <= {TARGET_LAUNCH_RATIO})"
        )
    else:
        print("launch overhead: skipped (no CuPy or no GPU: cpu only)")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
