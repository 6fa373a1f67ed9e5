"""GPU test of the SAAKE resource microbenchmarks (klaraptor.collect.resources). Skipped without a GPU.

Run on the GPU machine with output shown:
    PYTHONPATH=src python3 -m pytest -s -m gpu tests/test_gpu_resources.py
Budget: about 15 s (one child process, quick sizes, one repeat).
"""

from __future__ import annotations

import math
import time

import pytest

from klaraptor.collect import resources as rs
from klaraptor.device.profile import query_device
from klaraptor.device.resources import FIELDS

pytestmark = pytest.mark.gpu

# Broad physical bounds (SM cycles): anything outside is a broken measurement, not a slow GPU.
# Latency: about one cycle or more (a warp issues at most once per cycle), below a microsecond at 2 GHz. Gap: no pipe accepts more than one
# warp instruction per cycle per sub-partition (gap >= 1/4), and nothing on chip takes more
# than 64 cycles per warp instruction or 128-B request when saturated.
BOUNDS = {
    "lat": (0.9, 2000.0),
    "gap": (0.2, 64.0),
}
# The block dispatcher is not a pipe: a launch costs microseconds, a block on an SM ~10²
# cycles (157 on the H200).
LAUNCH_BOUNDS = {"lat": (500.0, 50000.0), "gap": (10.0, 2000.0)}
# A scattered request is 32 lines: its gap is per request of 32 lines (l2_scatter 50, dram_scatter
# 140 on the H200), its latency the slowest of 32 lines (362 and 1125).
SCATTER_BOUNDS = {"lat": (100.0, 5000.0), "gap": (1.0, 32 * 64.0)}


def test_every_resource_is_measured_finite_positive_and_physical() -> None:
    profile = query_device(0)
    t0 = time.monotonic()
    m = rs.measure_resources(profile, rs.ResourceConfig.quick(), repeats=1, bench_timeout_s=60)
    wall = time.monotonic() - t0
    print(f"\n{m.table()}\n\nresource microbenchmarks took {wall:.1f} s")
    bad = []
    for field in FIELDS:
        e = m.estimates[field]
        p = m.provenance[field]
        assert "method" in p and p["unit"].startswith("SM cycles")
        bounds = (
            LAUNCH_BOUNDS if "launch" in field else SCATTER_BOUNDS if "scatter" in field else BOUNDS
        )
        lo, hi = bounds[field[:3]]
        if not (math.isfinite(e.value) and e.value > 0 and lo <= e.value <= hi):
            bad.append(f"{field} = {e.value} not in [{lo}, {hi}] ({p.get('error', '')[-300:]})")
    assert not bad, "\n".join(bad)
    # one gap-kernel block per SM, as the analysis assumes
    for name in ("fp32", "fp64", "sfu", "alu", "imad", "smem", "issue"):
        shared = m.provenance[f"gap_{name}_cycles"]["diagnostics"]["shared_sm_blocks"]
        assert shared == [0], (name, shared)
    # orderings that hold on any GPU
    v = m.values
    assert v["lat_l2_cycles"] < v["lat_dram_cycles"]
    assert v["gap_l2_cycles"] < v["gap_dram_cycles"]
    # 32 one-sector lines cost the L2 more than one coalesced line, written or read
    assert v["gap_l2_cycles"] < v["gap_l2_scatter_cycles"]
    assert v["gap_l2_cycles"] < v["gap_l2_scatter_store_cycles"]
    assert v["gap_dram_cycles"] < v["gap_dram_scatter_store_cycles"]
    assert v["lat_smem_cycles"] < v["lat_l2_cycles"]
    assert v["gap_fp32_cycles"] <= v["gap_sfu_cycles"]
    # a launch costs more than starting one more block on an SM
    assert v["gap_launch_cycles"] < v["lat_launch_cycles"]
    assert wall < 120
