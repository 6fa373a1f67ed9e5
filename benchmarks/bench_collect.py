"""Benchmark of the collector on a GPU: the timing pass and the ncu pass of a 2D stencil.

A 2D 5-point stencil (written here) over the default 2D ConfigSpace (51 power-of-two shapes) at
4 small sizes: first timing only (target < 30 s), then the counters of the same points in ONE
ncu session (target < 120 s). Prints where the time goes and writes a JSON record.

Usage, from the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/bench_collect.py [OUT.json]
The JSON goes to OUT.json, else $OUT/bench_collect.json, else ./bench_collect.json.

The spec's callables live in this script, so the run also exercises sending a spec defined in
`__main__` to the worker processes.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from klaraptor.collect.collector import CollectOptions, collect
from klaraptor.collect.ncu import find_ncu
from klaraptor.core.types import Config, ParamValues
from klaraptor.fit.training import collected
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import Store

SRC = r"""
// B = 5-point stencil of A (borders copied). x -> column j (coalesced), y -> row i.
extern "C" __global__ void stencil5(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float v = A[i * N + j];
    if (i > 0 && i < N - 1 && j > 0 && j < N - 1) {
        v = 0.5f * v + 0.125f * (A[(i - 1) * N + j] + A[(i + 1) * N + j]
                                 + A[i * N + j - 1] + A[i * N + j + 1]);
    }
    B[i * N + j] = v;
}
"""


def make_args(D, rng):  # noqa: ANN001, ANN201 - (D, rng) -> launch arguments
    import cupy

    n = D["N"]
    a = cupy.asarray(rng.random((n, n), dtype=np.float32))
    return (a, cupy.empty_like(a), np.int32(n))


def reference(D, host):  # noqa: ANN001, ANN201 - float64 NumPy version of the kernel
    a = host[0].astype(np.float64)
    b = a.copy()
    b[1:-1, 1:-1] = 0.5 * a[1:-1, 1:-1] + 0.125 * (
        a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:]
    )
    return {1: b}


SPEC = KernelSpec(
    name="bench.stencil5",
    source=SRC,
    kernel="stencil5",
    data=(DataParam("N", arg=2),),
    dim=2,
    grid=("ceil(N / bx)", "ceil(N / by)", "1"),
    make_args=make_args,
    reference=reference,
    outputs=(1,),
    rtol=1e-5,
    default_block=(32, 8, 1),
)
SIZES = [{"N": 512}, {"N": 768}, {"N": 1024}, {"N": 1536}]
TIMING_TARGET_S = 30.0
NCU_TARGET_S = 120.0


def _git_head() -> str:
    from klaraptor.core.provenance import commit

    return commit()


def _ncu_version(path: str | None) -> str:
    if path is None:
        return "not found"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else "unknown"


def _out_path(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1])
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "bench_collect.json"
    return Path("bench_collect.json")


def main(argv: list[str]) -> int:
    out_path = _out_path(argv)
    space = ConfigSpace.for_spec(SPEC)
    n_points = len(space) * len(SIZES)
    print(f"{SPEC.name}: {len(space)} block shapes × {len(SIZES)} sizes = {n_points} points")
    with (
        tempfile.TemporaryDirectory(prefix="bench-collect-") as tmp,
        Store(Path(tmp) / "bench.sqlite") as store,
    ):
        # 1. Timing only.
        t0 = time.perf_counter()
        rep_t = collect(
            SPEC, SIZES, store=store, space=space, options=CollectOptions(counters=False)
        )
        timing_wall = time.perf_counter() - t0
        print(f"\n{rep_t}")
        # 2. Counters for the same points in one ncu session (timing is resumed: nothing re-run).
        ncu_path = find_ncu()
        t1 = time.perf_counter()
        rep_n = collect(
            SPEC, SIZES, store=store, space=space, options=CollectOptions(counters=True)
        )
        ncu_call_wall = time.perf_counter() - t1
        print(f"\n{rep_n}")
        device = rep_t.device
        timed = store.measurements(SPEC.name, device, kind="time", status="ok")
        got = collected(store, SPEC, device)
        facts = store.collect_facts(SPEC.name, device)

    n_timed = rep_t.count("time", "ok") + rep_t.count("time", "failed")
    ncu_pass = rep_n.wall_s.get("ncu", 0.0)
    n_ncu = rep_n.count("ncu", "ok")
    breakdown = {
        "worker_start_and_compile_s": rep_t.wall_s.get("info", 0.0),
        "worker_import_s": rep_t.worker.get("import_s"),
        "compile_s": rep_t.worker.get("compile_s"),
        "plan_s": rep_t.wall_s.get("plan", 0.0),
        "timing_pass_s": rep_t.wall_s.get("timing", 0.0),
        "timing_ms_per_point": rep_t.worker.get("timing_ms_per_point"),
        "kernel_time_measured_ms_per_point": float(
            np.mean([m.value["median_ms"] * m.value["repeats"] * m.value["inner"] for m in timed])
        )
        if timed
        else None,
    }
    ncu_info = {
        "ncu": ncu_path,
        "status": rep_n.ncu_status,
        "reason": rep_n.ncu_reason,
        "points": n_ncu,
        "ncu_pass_s": ncu_pass,
        "ncu_process_s": rep_n.worker.get("ncu_wall_s"),
        "s_per_point": ncu_pass / n_ncu if n_ncu else None,
        "collect_call_s": ncu_call_wall,
    }
    print("\nWhere the time goes (timing collection):")
    for k, v in breakdown.items():
        print(f"  {k:36s} {v if v is None else round(v, 4)}")
    print(f"  {'total':36s} {timing_wall:.2f} s")
    print("ncu pass:")
    for k, v in ncu_info.items():
        print(f"  {k:36s} {round(v, 4) if isinstance(v, float) else v}")

    # Best and worst block per size, and a few derived metrics, as a sanity check.
    per_size = {}
    for D in SIZES:
        rows = [(m.value["median_ms"], m.block) for m in timed if m.D["N"] == D["N"]]
        if rows:
            rows.sort()
            per_size[D["N"]] = {
                "best": {"block": rows[0][1], "ms": rows[0][0]},
                "worst": {"block": rows[-1][1], "ms": rows[-1][0]},
                "points": len(rows),
            }
            print(
                f"N={D['N']}: best {rows[0][1]} {rows[0][0] * 1e3:.2f} us, "
                f"worst {rows[-1][1]} {rows[-1][0] * 1e3:.2f} us"
            )
    sample = {}
    n1024 = SPEC.size(1024)
    for block in [(32, 8, 1), (1, 32, 1), (256, 1, 1)]:
        key = (n1024, Config(ParamValues.NONE, block))
        if key in got:
            sample[f"N=1024 block={block}"] = got[key]
            print(
                f"N=1024 block={block}: " + ", ".join(f"{k}={v:.4g}" for k, v in got[key].items())
            )

    gpu = {"device_key": device, "name": facts.device_name if facts else None}
    try:
        from klaraptor.device.profile import query_device

        prof = query_device(0)
        gpu.update(
            name=prof.name,
            driver=prof.driver,
            cuda_runtime=prof.runtime,
            sm_clock_mhz=prof.sm_clock_mhz,
            cc=list(prof.cc),
        )
    except Exception as exc:  # noqa: BLE001 - the record is still useful without it
        gpu["query_error"] = str(exc)
    targets = {
        "timing_s": {
            "value": timing_wall,
            "target": TIMING_TARGET_S,
            "ok": timing_wall < TIMING_TARGET_S,
        },
        "ncu_s": {
            "value": ncu_pass,
            "target": NCU_TARGET_S,
            "ok": rep_n.ncu_status == "ok" and ncu_pass < NCU_TARGET_S,
        },
    }
    record = {
        "benchmark": "bench_collect",
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *argv]),
        "commit": _git_head(),
        "host": platform.node(),
        "gpu": gpu,
        "ncu_version": _ncu_version(ncu_path),
        "kernel": SPEC.name,
        "block_shapes": len(space),
        "sizes": SIZES,
        "points": n_points,
        "timing": {
            "wall_s": timing_wall,
            "counts": rep_t.counts,
            "failures": [vars(f) for f in rep_t.failures],
            "breakdown": breakdown,
            "report_wall_s": rep_t.wall_s,
            "workers": rep_t.worker,
        },
        "ncu": {**ncu_info, "counts": rep_n.counts, "report_wall_s": rep_n.wall_s},
        "kernel_attributes": facts.attributes.to_dict() if facts and facts.attributes else None,
        "sync_per_warp": facts.sync_per_warp if facts else None,
        "per_size": per_size,
        "sample_metrics": sample,
        "targets": targets,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(record, indent=1, default=str))
    print(
        f"\ntiming: {timing_wall:.1f} s (target < {TIMING_TARGET_S:g} s) "
        f"{'OK' if targets['timing_s']['ok'] else 'MISSED'}; "
        f"ncu: {ncu_pass:.1f} s for {n_ncu} points (target < {NCU_TARGET_S:g} s) "
        f"{'OK' if targets['ncu_s']['ok'] else 'MISSED'}"
    )
    print(f"wrote {out_path}")
    return 0 if n_timed == n_points - rep_t.count("time", "rejected") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
