"""GPU test of the device microbenchmarks (klaraptor.microbench). Skipped without a GPU.

Run on the GPU machine with output shown:
    PYTHONPATH=src python3 -m pytest -s -m gpu tests/test_gpu_microbench.py
Budget: about 15 s (1 GiB buffers, a few hundred short launches).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from klaraptor.device.profile import format_profile
from klaraptor.store import Store

pytestmark = pytest.mark.gpu

# Plausible ranges on an H200 (SM cycles at 1980 MHz, GB/s).
RANGES = {
    "mem_latency_dram_cycles": (500, 1200),
    "mem_latency_l2_cycles": (150, 500),
    "dram_bandwidth_gbs": (2000, 5000),
    "issue_cycles": (1, 8),
    "departure_delay_coal": (0, 200),
    "departure_delay_uncoal": (0, 200),
}


def test_microbenchmarks_are_plausible_and_cached(tmp_path: Path) -> None:
    from klaraptor.collect.microbench import measure_profile

    with Store(tmp_path / "s.sqlite") as store:
        t0 = time.monotonic()
        prof = measure_profile(0, store)
        wall = time.monotonic() - t0
        print(f"\n{format_profile(prof)}\n\nmicrobenchmarks took {wall:.1f} s")
        for name in RANGES:
            print(f"{name}: {json.dumps(prof.provenance.get(name), default=str)}")
        t1 = time.monotonic()
        again = measure_profile(0, store)
        cached_s = time.monotonic() - t1
    assert again.to_dict() == prof.to_dict()  # served from the store, not re-measured
    assert cached_s < 5.0
    bad = []
    for name, (lo, hi) in RANGES.items():
        v = getattr(prof, name)
        if v is None or not math.isfinite(v) or not lo <= v <= hi:
            bad.append(f"{name} = {v} not in [{lo}, {hi}]")
        assert isinstance(prof.provenance.get(name), dict) and "method" in prof.provenance[name]
    assert not bad, "; ".join(bad)
    assert prof.missing_microbench == []
    dram = prof.provenance["mem_latency_dram_cycles"]
    assert dram["whole_buffer_ns_per_load"] >= 0.9 * min(dram["ns_per_load"])
