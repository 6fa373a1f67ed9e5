"""The L1's cost of a global load whose warp touches many lines, by the lanes' stride: what
`klaraptor.models.saake.coalescing.l1_wavefronts` models.

Every warp of a full GPU (8 blocks of 256 threads per SM) loads one float per lane at
lane x stride, 2048 times, at offsets inside each lane's first 128 B, so every load hits the L1
after the first. The time per warp request, in SM cycles at the clock the GPU reports as its
maximum, is the L1's cost of a request of that many lines and sectors; its sectors per 32-B
slot of a line are what the rule counts. The median of 7 timed launches (CUDA events) per
stride, after one warm-up launch.

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> python3 scripts/device_l1_slots.py OUTDIR
Writes OUTDIR/l1_slots.json (rows and provenance). Expected wall time: under 10 s.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SRC = r"""
extern "C" __global__ void l1_stride(const float* __restrict__ p, float* out, int stride,
                                     int iters)
{
    const float* q = p + (threadIdx.x & 31) * stride;
    float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
    for (int k = 0; k < iters; k += 4) {
        a0 += q[k & 31]; a1 += q[(k + 1) & 31]; a2 += q[(k + 2) & 31]; a3 += q[(k + 3) & 31];
    }
    const float s = a0 + a1 + a2 + a3;
    if (s == 1234.5f) out[threadIdx.x] = s;  // never true: keeps the loads
}
"""
# Strides in floats: coalesced, within a line, whole lines (one slot), and lines spread over
# two or four slots.
STRIDES = (
    1,
    2,
    4,
    8,
    16,
    32,
    33,
    34,
    36,
    40,
    48,
    64,
    96,
    128,
    256,
    512,
    1024,
    1025,
    1056,
    4096,
    4097,
)
BLOCK, BLOCKS_PER_SM, ITERS, REPEATS = 256, 8, 2048, 7


def max_clock_khz() -> float:
    """The SM's maximum clock from nvidia-smi (CUDA 13 may not report it as an attribute)."""
    import subprocess

    text = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(text.split()[0]) * 1e3


def main() -> int:
    import cupy as cp

    from klaraptor.core.provenance import commit
    from klaraptor.models.saake.coalescing import l1_wavefronts

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    kern = cp.RawKernel(SRC, "l1_stride")
    dev = cp.cuda.Device(0)
    sms = dev.attributes["MultiProcessorCount"]
    clock_khz = dev.attributes.get("ClockRate") or max_clock_khz()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    p = cp.ones(max(STRIDES) * 32 + 64, dtype=cp.float32)
    sink = cp.zeros(BLOCK, dtype=cp.float32)
    requests_per_sm = BLOCKS_PER_SM * BLOCK // 32 * ITERS
    rows = []
    for s in STRIDES:
        addr = [lane * s * 4 for lane in range(32)]
        sectors = {a // 32 for a in addr}
        args = (p, sink, cp.int32(s), cp.int32(ITERS))
        grid = (sms * BLOCKS_PER_SM,)
        kern(grid, (BLOCK,), args)
        times = []
        for _ in range(REPEATS):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            kern(grid, (BLOCK,), args)
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b))
        times.sort()
        ms = times[REPEATS // 2]
        cycles = ms * 1e-3 * clock_khz * 1e3 / requests_per_sm
        rows.append(
            {
                "stride_floats": s,
                "sectors": len(sectors),
                "lines": len({a // 128 for a in addr}),
                "wavefronts_rule": l1_wavefronts(sectors),
                "ms_median": ms,
                "ms_min": times[0],
                "ms_max": times[-1],
                "cycles_per_request": cycles,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "what": "L1 cycles per warp request of one float per lane at lane x stride (L1 hits)",
        "rows": rows,
        "settings": {
            "block": BLOCK,
            "blocks_per_sm": BLOCKS_PER_SM,
            "iters": ITERS,
            "repeats": REPEATS,
            "clock_khz": clock_khz,
            "sms": sms,
        },
        "provenance": {
            "gpu": name,
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "commit": commit(),
        },
    }
    (out / "l1_slots.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
