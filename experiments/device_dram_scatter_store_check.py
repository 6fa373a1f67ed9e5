"""Device check (issue 37): what does a scattered store to DRAM cost, against a scattered load?

Every SM busy (8 blocks of 256 threads each), a 2 GiB buffer (far past the L2), the L2 flushed
before each run, every lap on lines no earlier lap touched: lane l of a warp instruction touches
word 0 of its own 128-B line (32 lines per instruction). Modes: a 4-byte load (ld.global.cg), a
4-byte store (st.global.cg: a partly written 32-B sector), and a store of the whole 32-B sector
(two 16-B stores per lane). Per-SM cycles per 32-line request (the first two), from the slope of
CUDA-event time between two lap counts. The question: BACKPROP adjust_weights' narrow blocks
(each warp store 32 sectors of 4 bytes, past the L2) take 2.3 times their emulated time.

    python experiments/device_dram_scatter_store_check.py      (device machine, CuPy)

Writes $OUT/dram_scatter_store.json (else ./dram_scatter_store.json).
"""

from __future__ import annotations

import cupy as cp
import numpy as np
from device_timing import median_event_ms, save

SOURCE = r"""
extern "C" __global__ void k(unsigned int* __restrict__ buf, unsigned long long lines_total,
                             int laps, int mode, unsigned int* sink)
{
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long warps = (unsigned long long)gridDim.x * blockDim.x / 32;
    const unsigned long long warp = tid / 32, lane = tid % 32;
    unsigned int acc = 0;
    for (int lap = 0; lap < laps; ++lap) {
        #pragma unroll
        for (int k = 0; k < 8; ++k) {
            const unsigned long long req = ((unsigned long long)lap * 8 + k) * warps + warp;
            const unsigned long long line = (req * 32 + lane) % lines_total;
            unsigned int* p = buf + line * 32;
            if (mode == 0) acc += __ldcg(p);
            else if (mode == 1) __stcg(p, (unsigned int)lap);
            else {
                uint4 v = make_uint4(lap, lap, lap, lap);
                __stcg(reinterpret_cast<uint4*>(p), v);
                __stcg(reinterpret_cast<uint4*>(p) + 1, v);
            }
        }
    }
    if (acc == 0xFFFFFFFFu) sink[tid] = acc;
}
"""
CLOCK_MHZ = 1980.0
LAPS = (2, 6)


def main() -> int:
    fn = cp.RawModule(code=SOURCE).get_function("k")
    sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
    blocks, threads = sms * 8, 256
    warps = blocks * threads // 32
    buf = cp.zeros((2 << 30) // 4, dtype=cp.uint32)
    lines_total = buf.nbytes // 128
    assert warps * 8 * max(LAPS) * 32 <= lines_total, "a lap would reuse lines"
    flush = cp.zeros(256 << 20, dtype=cp.uint8)
    sink = cp.zeros(blocks * threads, dtype=cp.uint32)
    out = {}
    modes = ((0, "scatter load 4 B"), (1, "scatter store 4 B"), (2, "scatter store 32 B"))
    for mode, name in modes:
        ms = {}
        for laps in LAPS:
            args = (buf, np.uint64(lines_total), np.int32(laps), np.int32(mode), sink)
            ms[laps] = median_event_ms(
                lambda args=args: fn((blocks,), (threads,), args), before=lambda: flush.fill(1)
            )
        per_sm = warps * 8 * (LAPS[1] - LAPS[0]) / sms  # 32-line requests per SM
        cycles = (ms[LAPS[1]] - ms[LAPS[0]]) * 1e3 * CLOCK_MHZ / per_sm
        out[name] = {"ms": ms, "cycles_per_32_line_request_per_sm": cycles}
        print(f"{name:20s} {cycles:8.2f} cycles per 32-line request per SM", flush=True)
    save("dram_scatter_store.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
