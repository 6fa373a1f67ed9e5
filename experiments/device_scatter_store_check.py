"""Device check (issue 37): does the L2 serve a scattered store as fast as a scattered load?

Per-SM cycles per warp instruction, every SM busy (8 blocks of 256 threads each), in an
L2-resident 8 MiB window: lane l of a warp instruction touches its own 128-B line (32 lines of one
32-B sector each) or the warp's 32 words share one line (coalesced); loads (ld.global.cg), stores
(st.global.cg) and read-modify-writes of the same word. The slope of CUDA-event time between 20 and
60 laps cancels the launch. What it decided: the product measures the scattered store's gap
(`klaraptor.collect.resources`, `gap_l2_scatter_store_cycles`; 2026-11-29 here: 108 cycles against
49 for a scattered load, coalesced store 7.2 against load 5.7; a scattered read-modify-write 201,
more than the two apart).

    python experiments/device_scatter_store_check.py [SM_CLOCK_MHZ]     (device machine, CuPy)

Writes $OUT/scatter_store.json (else ./scatter_store.json).
"""

from __future__ import annotations

import sys

from device_timing import save, window_cycles

SOURCE = r"""
extern "C" __global__ void k(unsigned int* buf, unsigned int window_lines, int laps, int mode,
                             unsigned int* sink)
{
    const unsigned int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int warp = tid >> 5, lane = tid & 31;
    unsigned int acc = 0;
    for (int lap = 0; lap < laps; ++lap) {
        #pragma unroll
        for (int k = 0; k < 8; ++k) {
            unsigned int req = (warp * 8 + k) + lap * 97u * 256u;
            unsigned int idx;
            if (mode < 4) {  // scattered: lane l -> its own 128-B line
                idx = ((req * 32u + lane * 33u) & (window_lines - 1)) * 32u;
            } else {          // coalesced: the warp's 32 words in one line
                idx = (req & (window_lines - 1)) * 32u + lane;
            }
            if (mode == 0 || mode == 4) acc += __ldcg(buf + idx);
            else if (mode == 1 || mode == 5) __stcg(buf + idx, lane + lap);
            else { unsigned int v = __ldcg(buf + idx); __stcg(buf + idx, v + 1u); }
        }
    }
    if (acc == 0xFFFFFFFFu) sink[tid] = acc;
}
"""
MODES = {
    0: "scatter load",
    1: "scatter store",
    2: "scatter load+store (RMW)",
    4: "coalesced load",
    5: "coalesced store",
    6: "coalesced RMW",
}


def main() -> int:
    clock = float(sys.argv[1]) if len(sys.argv) > 1 else 1980.0
    out = {}
    for mode, got in window_cycles(SOURCE, list(MODES), clock).items():
        name = MODES[mode]
        out[name] = {"ms": got["ms"], "cycles_per_warp_instruction_per_sm": got["cycles"]}
        print(f"{name:28s} {got['cycles']:7.2f} cycles per warp instruction per SM", flush=True)
    save("scatter_store.json", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
