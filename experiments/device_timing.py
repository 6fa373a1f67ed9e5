"""What the `device_*_check.py` experiments share: a launch timed with CUDA events (the median
of five after one untimed, optionally preceded each time by a step such as an L2 flush), and the
result written to $OUT (else the working folder). Needs CuPy; runs on the device machine."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np


def median_event_ms(
    launch: Callable[[], None], before: Callable[[], None] | None = None, runs: int = 6
) -> float:
    """Median CUDA-event milliseconds of `launch` over `runs` - 1 runs, the first untimed (it
    warms the clocks and, unflushed, the cache); `before` runs ahead of each, untimed."""
    start, end = cp.cuda.Event(), cp.cuda.Event()
    vals = []
    for r in range(runs):
        if before is not None:
            before()
            cp.cuda.Device().synchronize()
        start.record()
        launch()
        end.record()
        end.synchronize()
        if r:
            vals.append(cp.cuda.get_elapsed_time(start, end))
    return float(np.median(vals))


def save(name: str, out: Any) -> None:
    """`out` as JSON in $OUT/`name` (else ./`name`)."""
    with open(os.path.join(os.environ.get("OUT", "."), name), "w") as fh:
        json.dump(out, fh, indent=1)


WINDOW_BYTES = 8 << 20  # an L2-resident window on the H200 (50 MiB L2)
LAPS = (20, 60)


def window_cycles(source: str, variants: list[int], clock_mhz: float) -> dict[int, dict[str, Any]]:
    """Per variant v: `k(buf, window_lines, laps, v, sink)` of `source` on every SM (8 blocks of
    256 threads each), 8 warp instructions per lap, in an L2-resident window, timed at LAPS laps;
    the slope between them (which cancels the launch) in SM cycles per warp instruction per SM."""
    fn = cp.RawModule(code=source, options=("-std=c++17",)).get_function("k")
    sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
    buf = cp.zeros(WINDOW_BYTES // 4, dtype=cp.uint32)
    blocks, threads = sms * 8, 256
    sink = cp.zeros(blocks * threads, dtype=cp.uint32)
    per_sm = blocks * threads // 32 * 8 * (LAPS[1] - LAPS[0]) / sms
    out = {}
    for v in variants:
        ms = {}
        for laps in LAPS:
            args = (buf, np.uint32(WINDOW_BYTES // 128), np.int32(laps), np.int32(v), sink)
            ms[laps] = median_event_ms(lambda a=args: fn((blocks,), (threads,), a))
        out[v] = {"ms": ms, "cycles": (ms[LAPS[1]] - ms[LAPS[0]]) * 1e3 * clock_mhz / per_sm}
    return out
