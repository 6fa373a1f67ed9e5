"""The referee's own check: Nsight Compute's throughput breakdown of kernels whose bottleneck is
known by construction, so that the rule naming a kernel's bottleneck from it can be judged on
kernels where the answer is not in doubt.

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> python3 scripts/device_referee_check.py OUTDIR

The kernels are the resource microbenchmarks (klaraptor/cuda/resources.cu, launched as
klaraptor.collect.resources_device launches them to measure each resource's gap: each saturates one
resource), plus two plain streaming kernels compiled here (a float4 copy and a STREAM triad with
ordinary cached loads) that are DRAM-bound by construction at 1 GiB per array, and three
latency-bound pointer chases (one warp, 32 lanes; `CHASES`) through the L1, the L2 and DRAM for
the second referee (referee.REFERENCE_LATENCY). Each is launched
once to warm up, then once inside the NVTX range kp:<id> under ONE ncu with the referee's metrics
(klaraptor_bench.referee.METRICS) and the referee's command line
(klaraptor.collect.ncu.build_command, `--cache-control none`, as scripts/device_saake_sol.py). Writes to OUTDIR:
    check.json  per kernel: the ncu unit it saturates, ncu's metrics, or why there are none
    ncu.csv, ncu.out, log.txt, env.json
Expected wall time: 30-60 s. Then, on a CPU:
    klaraptor bench saake --referee-check OUTDIR/check.json
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
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

STREAM_SRC = r"""
extern "C" __global__ void kc_copy4(const float4* __restrict__ a, float4* __restrict__ b,
                                    unsigned long long n)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        b[i] = a[i];
    }
}
// One warp of 32 independent pointer chases (latency-bound by construction): each lane
// follows next[] from its own start, one 8-byte load per 128-B line, cached in the L1
// (kc_chase_ca) or past it (kc_chase_cg).
extern "C" __global__ void kc_chase_ca(const unsigned long long* next,
                                       const unsigned long long* __restrict__ starts, int steps,
                                       unsigned long long* __restrict__ sink)
{
    unsigned long long i = starts[threadIdx.x];
    for (int s = 0; s < steps; ++s) i = next[i];
    sink[threadIdx.x] = i;
}
extern "C" __global__ void kc_chase_cg(const unsigned long long* next,
                                       const unsigned long long* __restrict__ starts, int steps,
                                       unsigned long long* __restrict__ sink)
{
    unsigned long long i = starts[threadIdx.x];
    for (int s = 0; s < steps; ++s) i = __ldcg(next + i);
    sink[threadIdx.x] = i;
}
extern "C" __global__ void kc_triad(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, float s, unsigned long long n)
{
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + s * b[i];
    }
}
"""

# The cases, in launch order, and the Nsight Compute unit each saturates by construction: the
# referee's own table, so that the check and its judgement cannot drift apart.
from klaraptor_bench.referee import REFERENCE_LATENCY, REFERENCE_UNIT  # noqa: E402

CASES = {**REFERENCE_UNIT, **REFERENCE_LATENCY}


def _launchers(d: Any) -> dict[str, Any]:
    """{case: a function launching it once}, on resources_device's Device `d`."""
    import numpy as np

    from klaraptor.collect import resources_device as rd
    from klaraptor.collect.resources import REQUEST_BYTES, WARPS_PER_BLOCK

    cp, cfg, n_sm = d.cp, d.cfg, d.prof.sm_count
    threads = 32 * WARPS_PER_BLOCK

    def chain(name: str, kernel: str) -> Any:
        fn = d.kernel(kernel)
        args = rd._pipe_args(d, name, cfg.thr_iters, threads)
        d.be.opt_in_dynamic_smem(fn, d.one_block_smem)
        return lambda: d.be.launch(
            fn, (n_sm, 1, 1), (threads, 1, 1), args, shared_mem=d.one_block_smem
        )

    out = {
        f"thr_{n}": chain(n, f"kp_thr_{n}") for n in ("fp32", "imad", "alu", "fp64", "ex2", "smem")
    }
    out["issue_mix"] = chain("issue", "kp_issue_mix")
    blocks = n_sm * rd.STREAM_BLOCKS_PER_SM
    sink = cp.zeros(blocks * rd.STREAM_THREADS, dtype=cp.uint32)
    warps, row_bytes = rd._stream_shape(d)
    l2buf = cp.zeros(row_bytes // 4, dtype=cp.uint32)
    rows_dram = max(cfg.stream_dram_rows)
    dbuf = cp.zeros(rows_dram * row_bytes // 4, dtype=cp.uint32)
    stream = d.kernel("kp_stream")
    scatter = d.kernel("kp_scatter")
    window = cfg.chase_l2_bytes // REQUEST_BYTES
    sbuf = cp.zeros(cfg.chase_l2_bytes // 4, dtype=cp.uint32)
    laps = max(cfg.stream_l2_laps)

    def grid_launch(fn: Any, args: tuple[Any, ...]) -> Any:
        return lambda: d.be.launch(
            fn, (blocks, 1, 1), (rd.STREAM_THREADS, 1, 1), (*args, np.int32(0), sink)
        )

    out["stream_l2"] = grid_launch(stream, (l2buf, np.int32(1), np.int32(laps)))
    out["scatter_l2"] = grid_launch(
        scatter, (sbuf, np.uint32(window), np.uint32(rd.L2_SCATTER_LAP_LINES), np.int32(laps))
    )
    out["stream_dram"] = grid_launch(stream, (dbuf, np.int32(rows_dram), np.int32(1)))
    n = 1 << 28  # floats: 1 GiB per array
    a, b, c = (cp.full(n, v, dtype=cp.float32) for v in (1.0, 2.0, 0.0))
    copy4 = d.be.compile(STREAM_SRC, "kc_copy4", ())
    triad = d.be.compile(STREAM_SRC, "kc_triad", ())
    per_sm = d.prof.max_threads_per_sm // 256
    out["copy4_dram"] = lambda: d.be.launch(
        copy4, (n_sm * per_sm, 1, 1), (256, 1, 1), (a, c, np.uint64(n // 4))
    )
    out["triad_dram"] = lambda: d.be.launch(
        triad, ((n + 255) // 256, 1, 1), (256, 1, 1), (a, b, c, np.float32(3.0), np.uint64(n))
    )
    out.update(_chases(d, n_sm))
    return out


# (lines in the cycle, steps per lane, kernel): 32 KiB stays in the L1; 8 MiB passes it and
# stays in the L2; 2 GiB with 2^16 steps a lane touches 256 MiB a launch, past the 60 MB L2
# even when Nsight Compute replays the launch without flushing it.
CHASES = {
    "chase_l1": (256, 4096, "kc_chase_ca"),
    "chase_l2": (65536, 4096, "kc_chase_cg"),
    "chase_dram": (1 << 24, 1 << 16, "kc_chase_ca"),
}


def _chases(d: Any, n_sm: int) -> dict[str, Any]:
    """{case: launch} for the latency references: a random cycle through `lines` 128-B lines
    (next[] holds the index of the next line's first word), the 32 lanes starting evenly
    spaced along it."""
    import numpy as np

    cp, out = d.cp, {}
    rng = np.random.default_rng(7)
    sink = cp.zeros(32, dtype=cp.uint64)
    for case, (lines, steps, kernel) in CHASES.items():
        order = rng.permutation(lines).astype(np.uint64) * 16  # 16 words of 8 B a line
        nxt = cp.zeros(lines * 16, dtype=cp.uint64)
        nxt[cp.asarray(order)] = cp.asarray(np.roll(order, -1))
        starts = cp.asarray(order[:: lines // 32][:32])
        fn = d.be.compile(STREAM_SRC, kernel, ())
        out[case] = lambda fn=fn, nxt=nxt, starts=starts, steps=steps: d.be.launch(
            fn, (1, 1, 1), (32, 1, 1), (nxt, starts, np.int32(steps), sink)
        )
    return out


def run_target(events_path: str) -> int:
    """The process ncu profiles: each case warmed up once, then launched once in kp:<id>."""
    from klaraptor.collect.resources import ResourceConfig
    from klaraptor.collect.resources_device import Device

    def emit(**e: Any) -> None:
        with open(events_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(e) + "\n")

    d = Device(ResourceConfig())
    launch = _launchers(d)
    for k, case in enumerate(CASES):
        try:
            launch[case]()
            d.be.synchronize(case)
            d.be.profile_one(launch[case], f"kp:{k}")
            emit(event="launched", id=k, case=case)
        except Exception as exc:  # noqa: BLE001 - this case fails, the rest go on
            emit(event="failed", id=k, case=case, reason=f"{type(exc).__name__}: {exc}"[:2000])
    return 0


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--target":
        return run_target(sys.argv[2])
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    lines: list[str] = []

    def log(msg: str) -> None:
        lines.append(f"[{time.monotonic() - t_start:6.1f}s] {msg}")
        print(lines[-1], flush=True)
        (out / "log.txt").write_text("\n".join(lines) + "\n")

    from device_saake_sol import write_environment  # this script's folder is on sys.path

    from klaraptor.collect.ncu import (
        build_command,
        find_ncu,
        parse_raw_csv,
        point_id,
        raw_values,
        usable_metrics,
    )
    from klaraptor.core.provenance import commit
    from klaraptor_bench.referee import METRICS

    write_environment(out)
    result: dict[str, Any] = {
        "kernels": {
            c: {"unit": u, "status": "not profiled (see log.txt)"} for c, u in CASES.items()
        }
    }
    try:
        ncu = find_ncu()
        if ncu is None:
            raise RuntimeError("ncu not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
        metrics = usable_metrics(ncu, (9, 0), METRICS)
        events = out / "events.jsonl"
        events.unlink(missing_ok=True)
        csv = out / "ncu.csv"
        csv.unlink(missing_ok=True)
        target = [sys.executable, str(Path(__file__).resolve()), "--target", str(events)]
        cmd = build_command(ncu, metrics, csv, target, cache_control="none")
        t0 = time.monotonic()
        with open(out / "ncu.out", "wb") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=600).returncode
        log(f"ncu session: exit {rc}, {time.monotonic() - t0:.1f} s")
        seen = [json.loads(x) for x in events.read_text().splitlines()] if events.exists() else []
        rows = parse_raw_csv(csv.read_text(errors="replace")) if csv.is_file() else []
        by_id = {point_id(r): r for r in rows}
        for k, (case, unit) in enumerate(CASES.items()):
            entry: dict[str, Any] = {"unit": unit}
            failed = [e for e in seen if e.get("id") == k and e.get("event") == "failed"]
            if failed:
                entry["status"] = f"failed: {failed[0]['reason']}"
            elif k not in by_id:
                entry["status"] = "no ncu row"
            else:
                entry.update(status="ok", metrics=raw_values(by_id[k], metrics))
            result["kernels"][case] = entry
        result["metrics"] = metrics
        result["session"] = {"command": cmd, "returncode": rc}
    except Exception:  # noqa: BLE001 - record what failed
        log(f"FAILED\n{traceback.format_exc()[-3000:]}")
    result["provenance"] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        "host": platform.node(),
    }
    (out / "check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    ok = sum(1 for v in result["kernels"].values() if v.get("status") == "ok")
    log(f"check.json: {ok} of {len(CASES)} kernels profiled")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
