"""Device check (issue 37): is a DRAM write stream slower than a read stream on the H200?

Every SM busy (8 blocks of 256 threads each, grid-stride), the L2 flushed before each run: one
array read (ld.global.cg), written (st.global.cg) or copied, 256 and 512 MiB per array; the slope of
CUDA-event time between the sizes, per 128-B warp request per SM. What it decided: nothing in the
product. On 2026-11-29 a write stream took 9.1 cycles a request, a read stream 12.9 (this kernel
keeps one load in flight per thread, so it reads below the profile's DRAM gap of 7.2), a copy 22.2,
the sum of the two: writes are not the slower direction, so they get no gap of their own (the
question was whether BACKPROP adjust_weights, emulated at half its time past the L2, writes slowly).

    python experiments/device_dram_store_check.py      (device machine, CuPy)

Writes $OUT/dram_store.json (else ./dram_store.json).
"""

from __future__ import annotations

import cupy as cp
import numpy as np
from device_timing import median_event_ms, save

SOURCE = r"""
extern "C" __global__ void k(const unsigned int* __restrict__ a, unsigned int* __restrict__ b,
                             long long n, int mode, unsigned int* sink)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned int acc = 0;
    for (; i < n; i += stride) {
        if (mode == 0) acc += __ldcg(a + i);
        else if (mode == 1) __stcg(b + i, (unsigned int)i);
        else __stcg(b + i, __ldcg(a + i) + 1u);
    }
    if (acc == 0xFFFFFFFFu) sink[threadIdx.x] = acc;
}
"""
CLOCK_MHZ = 1980.0
SIZES = (64 << 20, 128 << 20)  # 4-byte words per array


def main() -> int:
    fn = cp.RawModule(code=SOURCE).get_function("k")
    sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
    flush = cp.zeros(256 << 20, dtype=cp.uint8)  # more than the L2
    sink = cp.zeros(1024, dtype=cp.uint32)
    out = {}
    for mode, name in ((0, "load"), (1, "store"), (2, "copy (load + store)")):
        ms = {}
        for words in SIZES:
            a = cp.ones(words, dtype=cp.uint32)
            b = cp.zeros(words, dtype=cp.uint32)
            args = (a, b, np.int64(words), np.int32(mode), sink)
            ms[words] = median_event_ms(
                lambda args=args: fn((sms * 8,), (256,), args),
                before=lambda: flush.fill(1),
            )
            del a, b
        dt = (ms[SIZES[1]] - ms[SIZES[0]]) * 1e-3
        per_sm = (SIZES[1] - SIZES[0]) / 32 / sms  # warp requests of 128 B per SM, per array
        cycles = dt * CLOCK_MHZ * 1e6 / per_sm
        moved = (SIZES[1] - SIZES[0]) * 4 * (2 if mode == 2 else 1) / dt / 1e9
        out[name] = {"ms": ms, "cycles_per_request_per_sm": cycles, "gbs_moved": moved}
        print(f"{name:22s} {cycles:6.2f} cycles per request per SM, {moved:7.0f} GB/s", flush=True)
    save("dram_store.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
