"""The device's timing noise band, measured once per device and stored with its profile.

Racing (`klaraptor.collect.racing`) keeps measuring a candidate while its interval, widened by
the noise band, overlaps the leader's. The band is the device's: the median relative IQR of the
samples of its precisely timed points (full timing protocol, not a race's first estimate). The
first collection on a device with at least `MIN_POINTS` such points measures it and stores it
in the device's profile (`DeviceProfile.timing_noise_band`, with its provenance); later
collections race with twice it (`race_band`), as the default band is twice the median of the
recorded H200 suite's. Until then `racing.DEFAULT_BAND` applies.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import numpy as np

from klaraptor.device.profile import DeviceProfile
from klaraptor.store import Store

__all__ = [
    "MIN_POINTS",
    "band_of",
    "race_band",
    "race_options",
    "record_band",
    "with_stored_band",
]

MIN_POINTS = 30
# Twice the median relative IQR, as racing.DEFAULT_BAND is of the recorded H200 timings: an
# interval is a quartile range, and two points' medians differ by about the sum of their noise.
RACE_FACTOR = 2.0


def band_of(values: Iterable[Mapping[str, Any]]) -> tuple[float, int] | None:
    """(median relative IQR, points) over the precisely timed values (a race's first estimates
    excluded), or None with fewer than MIN_POINTS of them."""
    spreads = [
        float(v["spread"])
        for v in values
        if v.get("race_stage") != "first" and np.isfinite(float(v.get("spread", np.nan)))
    ]
    if len(spreads) < MIN_POINTS:
        return None
    return float(np.median(spreads)), len(spreads)


def race_band(device: DeviceProfile | None) -> float | None:
    """The band racing uses on `device`: twice its measured noise, None until measured."""
    if device is None or device.timing_noise_band is None:
        return None
    return RACE_FACTOR * float(device.timing_noise_band)


def record_band(
    store: Store, device: DeviceProfile, values: Iterable[Mapping[str, Any]], source: str
) -> DeviceProfile:
    """The device's profile with its noise band measured from `values` (the ok timings of one
    collection, named by `source`) and stored, if it had none and there are enough; else the
    profile unchanged."""
    if device.timing_noise_band is not None:
        return device
    found = band_of(values)
    if found is None:
        return device
    band, points = found
    # The store's profile of this device gains the band, its other fields as they are: the
    # profile this collection was given may lack what the stored one has (microbenchmarks).
    base = store.cached_profile(device.key) or device
    if base.timing_noise_band is None:
        store.save_profile(
            dataclasses.replace(
                base,
                timing_noise_band=band,
                provenance={
                    **base.provenance,
                    "timing_noise_band": {
                        "what": "median relative IQR of the precisely timed points",
                        "source": source,
                        "points": points,
                        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                    },
                },
            )
        )
    return dataclasses.replace(device, timing_noise_band=band)


def with_stored_band(store: Store, device: DeviceProfile) -> DeviceProfile:
    """`device` with the noise band the store keeps for it (measured by an earlier collection)."""
    if device.timing_noise_band is not None:
        return device
    cached = store.cached_profile(device.key)
    if cached is None or cached.timing_noise_band is None:
        return device
    return dataclasses.replace(device, timing_noise_band=cached.timing_noise_band)


_Options = TypeVar("_Options")


def race_options(options: _Options, device: DeviceProfile) -> _Options:
    """Collection options (`CollectOptions`) with the device's racing band where none was given."""
    band = race_band(device)
    if getattr(options, "noise_band", None) is not None or band is None:
        return options
    return dataclasses.replace(options, noise_band=band)  # type: ignore[type-var]
