"""SAAKE's hardware resources in a device profile: a latency and a gap per resource (SM cycles),
as measured by the resource microbenchmarks (`klaraptor.collect.resources`) and read by the
emulator (`klaraptor.models.saake`)."""

from __future__ import annotations

from klaraptor.core.errors import CollectError
from klaraptor.device.profile import RESOURCE_FIELDS, RESOURCES, SaakeResources

BENCHMARKS: tuple[str, ...] = tuple(r for r, _ in RESOURCES)
FIELDS: tuple[str, ...] = tuple(f for f, _, _ in RESOURCE_FIELDS)
# Measured after the first profiles; a profile without them still emulates (see the emulator).
OPTIONAL_FIELDS: frozenset[str] = frozenset(
    {
        "lat_l2_scatter_cycles",
        "gap_l2_scatter_cycles",
        "gap_l2_scatter_store_cycles",
        "lat_dram_scatter_cycles",
        "gap_dram_scatter_cycles",
        "gap_dram_scatter_store_cycles",
    }
)


def resource_params(profile: SaakeResources) -> dict[str, tuple[float, float]]:
    """{resource: (latency, gap)} in SM cycles, for the emulator, from a profile's SAAKE part;
    raises naming what is missing."""
    missing = [f for f in FIELDS if getattr(profile, f) is None and f not in OPTIONAL_FIELDS]
    if missing:
        label = getattr(profile, "key", "this device")
        raise CollectError(
            f"device profile {label!r} lacks resource microbenchmarks {missing}; run "
            "scripts/device_resources.py on that GPU (or klaraptor.collect.microbench.measure_profile)"
        )
    return {
        r: (float(getattr(profile, f"lat_{r}_cycles")), float(getattr(profile, f"gap_{r}_cycles")))
        for r in BENCHMARKS
        if getattr(profile, f"gap_{r}_cycles") is not None
        and getattr(profile, f"lat_{r}_cycles") is not None
    }


def busy_sm_gaps(profile: SaakeResources) -> dict[str, list[tuple[int, float]]]:
    """{resource: [(busy SMs, gap per busy SM)]} for the GPU-wide resources whose rate with few
    SMs busy the profile has measured (scripts/device_sm_bandwidth.py); empty without them."""
    out = {}
    for res, curve in (("l2", profile.l2_gap_by_busy_sms), ("dram", profile.dram_gap_by_busy_sms)):
        if curve:
            out[res] = [(int(b), float(g)) for b, g in curve]
    return out


def scatter_store_gaps(profile: SaakeResources) -> tuple[float | None, float | None]:
    """The gaps per SM of a scattered store (a warp store to 32 lines) in the L2 and through
    DRAM, each None where not measured."""
    l2 = getattr(profile, "gap_l2_scatter_store_cycles", None)
    dram = getattr(profile, "gap_dram_scatter_store_cycles", None)
    return (None if l2 is None else float(l2), None if dram is None else float(dram))
