"""The device profile's three parts (issue 31): device limits, the MWP-CWP inputs and SAAKE's
resources, each a type of its own that code needing one part takes; the stored form unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from klaraptor.core.errors import CollectError
from klaraptor.device import DeviceLimits, DeviceProfile, MwpCwpParams, SaakeResources
from klaraptor.device.profile import BUSY_CURVE_FIELDS, MICROBENCH_FIELDS, recorded_profile
from klaraptor.device.resources import resource_params


def test_every_field_belongs_to_exactly_one_part() -> None:
    parts = [DeviceLimits, MwpCwpParams, SaakeResources]
    names = [f.name for p in parts for f in dataclasses.fields(p)]
    assert len(names) == len(set(names))
    # The profile's own: provenance, and the timing noise its first collection measures.
    own = ["provenance", "timing_noise_band"]
    assert [f.name for f in dataclasses.fields(DeviceProfile)] == [*names, *own]
    # The SAAKE part: a latency and a gap per resource, and the busy-SM gap curves.
    assert {f for f, _, _ in MICROBENCH_FIELDS} | BUSY_CURVE_FIELDS == {
        f.name for p in (MwpCwpParams, SaakeResources) for f in dataclasses.fields(p)
    }


def test_a_profile_is_each_part_and_gives_each_alone() -> None:
    p = recorded_profile("h200")
    assert isinstance(p, DeviceLimits) and isinstance(p, MwpCwpParams)
    assert isinstance(p, SaakeResources)
    limits, mwp, res = p.limits, p.mwp_cwp, p.resources
    assert type(limits) is DeviceLimits and limits.key == p.key and limits.sm_count == 132
    assert type(mwp) is MwpCwpParams and mwp.missing_model_inputs == []
    assert type(res) is SaakeResources and res.gap_dram_cycles == p.gap_dram_cycles
    # The stored form is the flat one, and reads back equal.
    assert DeviceProfile.from_dict(p.to_dict()) == p


def test_the_emulator_reads_the_resources_part_alone() -> None:
    p = recorded_profile("h200")
    assert resource_params(p.resources) == resource_params(p)
    with pytest.raises(CollectError, match="lacks resource microbenchmarks"):
        resource_params(SaakeResources())
