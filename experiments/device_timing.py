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
