"""How much L2 and DRAM bandwidth an SM gets when only b of the GPU's SMs load.

Usage (device machine, one GPU, repository root; about 20 s of GPU time):
    KLARAPTOR_COMMIT=<sha> PYTHONPATH=src python3 scripts/device_sm_bandwidth.py OUTDIR

SAAKE's emulator (`klaraptor.models.saake.emulate`) gives each busy SM a share of the GPU-wide
L2 and DRAM rates: the all-SM gap scaled by busy SMs / n, so a lone SM would get the whole GPU's
bandwidth. An SM's own path to the L2 caps that. This measures it: b blocks of 1024 threads
(one per SM: each takes more than half the SM's shared memory), every warp loading 8 whole
128-B lines per step with ld.global.cg (32 warps x 8 = 256 lines in flight per SM, as many as
the all-SM stream's 64 warps x 8 / 2), each block on its own lines:
- L2: 128 KiB per block (at most 16.5 MiB in all), warmed first, re-read `laps` times;
- DRAM: 8 MiB per block, the L2 flushed before each run, read once (rows of 256 lines).
The figure is the slope of CUDA-event time between two sizes (launch cost cancels), in SM
cycles per 128-B line per busy SM (the emulator's gap), for b = 1 ... n.
Writes OUTDIR/sm_bandwidth.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from klaraptor.core.provenance import stamp  # noqa: E402

SRC = r"""
extern "C" __global__ void __launch_bounds__(1024, 1)
sm_stream(const unsigned int* __restrict__ buf, unsigned long long block_lines, int rows,
          int laps, int flag, unsigned int* __restrict__ sink)
{
    extern __shared__ unsigned int pad[];
    const unsigned int lane = threadIdx.x % 32u;
    const unsigned int warp = threadIdx.x / 32u;
    const unsigned int* base = buf + blockIdx.x * block_lines * 32ull;
    unsigned int acc = 0;
#pragma unroll 1
    for (int lap = 0; lap < laps; ++lap) {
#pragma unroll 1
        for (int r = 0; r < rows; ++r) {
            const unsigned int* p =
                base + ((unsigned long long)r * 32u * KP_LINES + warp * KP_LINES) * 32u + lane;
            unsigned int v[KP_LINES];
#pragma unroll
            for (int k = 0; k < KP_LINES; ++k) {
                v[k] = __ldcg(p + 32 * k);
            }
#pragma unroll
            for (int k = 0; k < KP_LINES; ++k) {
                acc += v[k];
            }
        }
    }
    if (flag) {
        pad[threadIdx.x] = acc;
        sink[blockIdx.x * blockDim.x + threadIdx.x] = pad[threadIdx.x];
    }
}
"""

THREADS = 1024
L2_LINES = 1024  # 128 KiB per block
L2_LAPS = (64, 256)
DRAM_ROWS = (128, 256)  # rows of 256 lines: 4 and 8 MiB per block
REPEATS = 5
LINES_PER_WARP = (8, 16)  # lines each warp has in flight: 256 and 512 per SM


def main() -> int:
    import cupy as cp

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = cp.cuda.Device(0)
    n_sm = int(dev.attributes["MultiProcessorCount"])
    clock_mhz = float(dev.attributes["ClockRate"]) / 1000.0
    smem_sm = int(dev.attributes["MaxSharedMemoryPerMultiprocessor"])
    smem = smem_sm // 2 + 4096
    fns = {}
    for lines in LINES_PER_WARP:
        fns[lines] = cp.RawKernel(SRC, "sm_stream", options=("-std=c++17", f"-DKP_LINES={lines}"))
        fns[lines].max_dynamic_shared_size_bytes = smem
    l2_size = 50 << 20
    flush_buf = cp.zeros((2 * l2_size) // 4, dtype=np.uint32)
    dram_lines = max(DRAM_ROWS) * 256
    buf = cp.ones(n_sm * dram_lines * 32, dtype=np.uint32)
    sink = cp.zeros(n_sm * THREADS, dtype=np.uint32)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def timed(
        fn: object, blocks: int, rows: int, laps: int, block_lines: int, flush: bool
    ) -> float:
        times = []
        for i in range(REPEATS + 1):
            if flush:
                flush_buf.fill(i + 1)  # writes 100 MiB: the L2 holds none of buf after it
            start.record()
            fn(  # type: ignore[operator]
                (blocks,),
                (THREADS,),
                (buf, np.uint64(block_lines), np.int32(rows), np.int32(laps), np.int32(0), sink),
                shared_mem=smem,
            )
            end.record()
            end.synchronize()
            if i:
                times.append(cp.cuda.get_elapsed_time(start, end))
        return float(np.median(times))

    busy = sorted({1, 2, 4, 8, 16, 24, 33, 50, 66, 99, n_sm})
    rows_out = []
    t0 = time.time()
    for lines_w in LINES_PER_WARP:
        fn = fns[lines_w]
        row_lines = 32 * lines_w  # lines a block reads per row
        for b in busy:
            row: dict = {"lines_per_warp": lines_w, "busy_sms": b}
            # L2: each block on its own L2_LINES, re-read `laps` times (warmed by the first run).
            ms = [timed(fn, b, L2_LINES // row_lines, laps, L2_LINES, False) for laps in L2_LAPS]
            lines = [L2_LINES * laps for laps in L2_LAPS]
            row["l2_ms"] = ms
            row["gap_l2_cycles"] = (ms[1] - ms[0]) * 1e3 * clock_mhz / (lines[1] - lines[0])
            rows_d = [r * 256 // row_lines for r in DRAM_ROWS]
            ms = [timed(fn, b, r, 1, dram_lines, True) for r in rows_d]
            lines = [r * row_lines for r in rows_d]
            row["dram_ms"] = ms
            row["gap_dram_cycles"] = (ms[1] - ms[0]) * 1e3 * clock_mhz / (lines[1] - lines[0])
            for level in ("l2", "dram"):
                row[f"{level}_bytes_per_cycle_per_sm"] = 128.0 / row[f"gap_{level}_cycles"]
            rows_out.append(row)
            print(json.dumps(row), flush=True)
    res = {
        "rows": rows_out,
        "sm_count": n_sm,
        "sm_clock_mhz": clock_mhz,
        "threads_per_block": THREADS,
        "lines_in_flight_per_sm": [THREADS // 32 * n for n in LINES_PER_WARP],
        "seconds": time.time() - t0,
        "command": "PYTHONPATH=src python3 scripts/device_sm_bandwidth.py " + str(args.out),
        "provenance": stamp(),
        "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
    }
    (args.out / "sm_bandwidth.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
