"""The device's timing noise band: measured by its first collection, stored with its profile,
and used by racing from then on (klaraptor.collect.noise)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from klaraptor.collect.collector import CollectOptions
from klaraptor.collect.noise import (
    MIN_POINTS,
    band_of,
    race_band,
    race_options,
    record_band,
    with_stored_band,
)
from klaraptor.core.errors import KlaraptorError
from klaraptor.device.profile import DeviceProfile, recorded_profile
from klaraptor.store import Store


def values(n: int, spread: float, stage: str | None = "full") -> list[dict]:
    return [{"median_ms": 1.0, "spread": spread, "race_stage": stage} for _ in range(n)]


def test_the_band_is_the_median_spread_of_precise_points_only() -> None:
    got = band_of(values(MIN_POINTS, 0.004) + values(100, 0.5, "first"))
    assert got == (pytest.approx(0.004), MIN_POINTS)
    assert band_of(values(MIN_POINTS - 1, 0.004)) is None  # too few to measure a device


def test_the_first_collection_stores_the_band_and_keeps_the_stored_profile(tmp_path) -> None:
    store = Store(tmp_path / "s.sqlite")
    full = recorded_profile("h200")
    store.save_profile(full)
    # The collection was given a profile without microbenchmarks: the stored one keeps them.
    bare = dataclasses.replace(full, mem_latency_dram_cycles=None)
    got = record_band(store, bare, values(40, 0.004), source="collect k")
    assert got.timing_noise_band == pytest.approx(0.004)
    kept = store.cached_profile(full.key)
    assert kept is not None and kept.timing_noise_band == pytest.approx(0.004)
    assert kept.mem_latency_dram_cycles == full.mem_latency_dram_cycles
    assert kept.provenance["timing_noise_band"]["points"] == 40
    # Measured once: a later collection does not replace it.
    record_band(store, full, values(40, 0.02), source="collect k2")
    assert store.cached_profile(full.key).timing_noise_band == pytest.approx(0.004)
    # Later collections race with twice the stored band; an explicit band wins.
    dev = with_stored_band(store, full)
    assert race_band(dev) == pytest.approx(0.008)
    assert race_options(CollectOptions(), dev).noise_band == pytest.approx(0.008)
    assert race_options(CollectOptions(noise_band=0.01), dev).noise_band == 0.01
    assert race_options(CollectOptions(), full).noise_band is None  # none measured: default


def test_a_profile_without_a_band_reads_and_writes_as_before() -> None:
    p = recorded_profile("h200")
    assert "timing_noise_band" not in p.to_dict()
    with_band = dataclasses.replace(p, timing_noise_band=0.003)
    assert DeviceProfile.from_dict(with_band.to_dict()) == with_band
    with pytest.raises(KlaraptorError, match="timing_noise_band"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            DeviceProfile.from_dict({**p.to_dict(), "timing_noise_band": 1.5})
