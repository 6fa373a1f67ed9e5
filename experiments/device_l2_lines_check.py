"""Device check (issue 37): what a warp load costs the L2 as a function of the lines it touches.

The emulator charges a load that leaves the L1 max(s/4, q L) coalesced-request gaps (s sectors,
L lines), q from the l2_scatter benchmark's 32-line requests (`ops.ScatterCost`): a line costs q
whatever the request's L. rownorm at block (4, 32) loads 8 lines a request, 16 B each, and Nsight
Compute finds its L2 tag lookups the busiest unit (75 %) where the emulator names DRAM. Here: per-SM
cycles per warp instruction, every SM busy (8 blocks of 256 threads each), an L2-resident 8 MiB
window, loads through the L2 (ld.global.cg); a request's 32 lanes split into L groups of 32/L
consecutive words, each group in its own line (L = 1: one line, 4 sectors; 4: one sector a line;
8: half a sector a line, rownorm's; 32: one word a line, the l2_scatter benchmark's), lines 9
apart so every request of a lap has its own lines, and each lap a fresh stretch. The slope of
CUDA-event time between 20 and 60 laps cancels the launch.

    python experiments/device_l2_lines_check.py [SM_CLOCK_MHZ]     (device machine, CuPy)

Writes $OUT/l2_lines_check.json (else ./l2_lines_check.json).
"""

from __future__ import annotations

import sys

from device_timing import WINDOW_BYTES, save, window_cycles

SOURCE = r"""
extern "C" __global__ void k(const unsigned int* buf, unsigned int window_lines, int laps,
                             int lines, unsigned int* sink)
{
    const unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int warp = tid >> 5, lane = tid & 31;
    const unsigned int per = 32u / lines;           // lanes per line
    const unsigned int group = lane / per, word = lane % per;
    unsigned int acc = 0;
    for (int lap = 0; lap < laps; ++lap) {
        #pragma unroll
        for (int k = 0; k < 8; ++k) {
            unsigned int req = (warp * 8 + k) + lap * 97u * 256u;  // lap: a step on
            // 9 lines apart (odd, so a bijection of the window): every request its own lines
            unsigned int line = ((req * lines + group) * 9u) & (window_lines - 1);
            acc += __ldcg(buf + line * 32u + word);
        }
    }
    if (acc == 0xFFFFFFFFu) sink[tid] = acc;
}
"""
LINES = (1, 2, 4, 8, 16, 32)


def main() -> int:
    clock = float(sys.argv[1]) if len(sys.argv) > 1 else 1980.0
    out = {"clock_mhz": clock, "window_bytes": WINDOW_BYTES, "rows": []}
    for L, got in window_cycles(SOURCE, list(LINES), clock).items():
        sectors = L * max(1, (32 // L) * 4 // 32)
        out["rows"].append({"lines": L, "sectors": sectors, **got})
        print(f"L={L:2d} sectors={sectors:2d} {got['cycles']:7.2f} cycles per warp load per SM")
    save("l2_lines_check.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
