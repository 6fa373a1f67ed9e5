"""On a GPU: how fast the GPU starts thread blocks (the block dispatcher's throughput).

    KLARAPTOR_COMMIT=<sha> python3 scripts/device_block_dispatch.py OUT.json

Why: SAAKE's emulator has no block-dispatch resource. On the H200 the recorded timings of small
blocks (32-128 threads) of 2D stencils run at a near-constant rate of blocks per second, whatever
their memory traffic (docs/saake.md, "Where it fails"). This measures that rate directly, with
no suite kernel involved: an empty kernel (each block writes nothing unless a flag that is never
set says so) launched with G blocks of T threads, G in two sizes per T; the slope of CUDA-event
time over G is the time per block, GPU-wide, and sm_count × slope × clock is the gap an SM sees.
Median of 7 launches per point after a warm-up; T = 32 ... 1024.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

SRC = r"""
extern "C" __global__ void kp_empty(int flag, int* out) {
    if (flag) out[blockIdx.x] = threadIdx.x;   // never taken: flag is 0
}
"""


def main() -> int:
    import cupy as cp

    from klaraptor.device_profile import query_device

    out_path = sys.argv[1]
    prof = query_device(0)
    fn = cp.RawKernel(SRC, "kp_empty")
    sink = cp.zeros(1, dtype=cp.int32)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def ms(grid: int, block: int, reps: int = 7) -> float:
        fn((grid,), (block,), (np.int32(0), sink))  # warm-up
        cp.cuda.Device().synchronize()
        t = []
        for _ in range(reps):
            start.record()
            fn((grid,), (block,), (np.int32(0), sink))
            end.record()
            end.synchronize()
            t.append(cp.cuda.get_elapsed_time(start, end))
        return float(np.median(t))

    rows = []
    n_sm = prof.sm_count
    for T in (32, 64, 128, 256, 512, 1024):
        grids = [n_sm * 256, n_sm * 2048]
        times = [ms(g, T) for g in grids]
        ns_per_block = (times[1] - times[0]) * 1e6 / (grids[1] - grids[0])
        rows.append(
            {
                "threads": T,
                "grids": grids,
                "ms": times,
                "ns_per_block_gpu": ns_per_block,
                "blocks_per_s": 1e9 / ns_per_block,
                "gap_cycles_per_sm": ns_per_block * n_sm * prof.sm_clock_mhz / 1e3,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "what": __doc__.split("\n")[0],
        "device": prof.key,
        "sm_count": n_sm,
        "sm_clock_mhz": prof.sm_clock_mhz,
        "rows": rows,
        "provenance": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": "python3 scripts/device_block_dispatch.py OUT.json",
            "commit": os.environ.get("KLARAPTOR_COMMIT", ""),
        },
    }
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
