"""DeviceProfile: serialisation, derived values, model inputs, store cache, display."""

from __future__ import annotations

import json
import math
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor.device import profile as dp
from klaraptor.device.profile import (
    DeviceProfile,
    format_profile,
    query_device,
    recorded_profile,
)
from klaraptor.store import Store

# query_device() on the project's H200 (CuPy 14.2, driver 580.159.04, 2026-11-21).
H200_QUERY: dict[str, Any] = {
    "name": "NVIDIA H200",
    "cc": [9, 0],
    "driver": "580.159.04",
    "runtime": "13.2",
    "sm_clock_mhz": 1980.0,
    "mem_clock_mhz": 3201.0,
    "sm_count": 132,
    "warp_size": 32,
    "max_threads_per_block": 1024,
    "max_block_dim": [1024, 1024, 64],
    "max_grid_dim": [2147483647, 65535, 65535],
    "max_threads_per_sm": 2048,
    "max_blocks_per_sm": 32,
    "regs_per_sm": 65536,
    "regs_per_block": 65536,
    "smem_per_sm": 233472,
    "smem_per_block": 49152,
    "smem_per_block_optin": 232448,
    "reserved_smem_per_block": 1024,
    "l2_bytes": 62914560,
    "mem_bus_width_bits": 6016,
    "total_mem_bytes": 150_754_820_096,
    "mem_latency_dram_cycles": None,
    "mem_latency_l2_cycles": None,
    "departure_delay_coal": None,
    "departure_delay_uncoal": None,
    "dram_bandwidth_gbs": None,
    "issue_cycles": None,
    **{f: None for f, _, _ in dp.RESOURCE_FIELDS},
    "provenance": {"source": "device query: cudaDeviceGetAttribute via CuPy", "device_id": 0},
}

MICRO = {
    "mem_latency_dram_cycles": 650.0,
    "mem_latency_l2_cycles": 260.0,
    "departure_delay_coal": 4.0,
    "departure_delay_uncoal": 12.0,
    "dram_bandwidth_gbs": 4200.0,
    "issue_cycles": 4.0,
}


def _measured() -> DeviceProfile:
    return DeviceProfile.from_dict(H200_QUERY).with_microbench(
        {"mem_latency_dram_cycles": "pointer chase, 1 GiB, 4 KiB stride", "commit": "abc123"},
        **MICRO,
    )


def test_from_dict_to_dict_round_trip() -> None:
    p = DeviceProfile.from_dict(H200_QUERY)
    assert p.cc == (9, 0) and p.max_block_dim == (1024, 1024, 64)
    assert p.to_dict() == H200_QUERY
    assert json.loads(json.dumps(p.to_dict())) == H200_QUERY
    q = _measured()
    assert DeviceProfile.from_dict(json.loads(json.dumps(q.to_dict()))) == q


def test_key_and_derived_values() -> None:
    p = DeviceProfile.from_dict(H200_QUERY)
    # What changes performance, not the driver (a driver update keeps the builds).
    assert p.key == "NVIDIA H200|132 SMs|1980 MHz|mem 3201 MHz|140 GiB"
    assert DeviceProfile.from_dict({**H200_QUERY, "driver": "590.1"}).key == p.key
    assert p.legacy_key == "NVIDIA H200|driver 580.159.04|1980 MHz"
    # The device query and nvidia-smi count memory a few hundred MiB apart: one key.
    assert DeviceProfile.from_dict({**H200_QUERY, "total_mem_bytes": 143_155 * 2**20}).key == p.key
    for changed in ({"sm_count": 114}, {"sm_clock_mhz": 1755.0}, {"mem_clock_mhz": 2619.0}):
        assert DeviceProfile.from_dict({**H200_QUERY, **changed}).key != p.key, changed
    assert DeviceProfile.from_dict({**H200_QUERY, "total_mem_bytes": 96 * 2**30}).key != p.key
    assert p.arch == "sm_90"
    # 2 × 3201 MHz × 6016 bits / 8 = 4814.3 GB/s
    assert p.peak_dram_bandwidth_gbs == pytest.approx(2 * 3201e6 * 752 / 1e9)
    assert p.missing_microbench == [f for f, _, _ in dp.MICROBENCH_FIELDS]


def test_unknown_keys_warn_missing_keys_raise() -> None:
    with pytest.warns(UserWarning, match="future_field"):
        p = DeviceProfile.from_dict({**H200_QUERY, "future_field": 1})
    assert p.sm_count == 132
    # derived keys some writers add are accepted silently
    DeviceProfile.from_dict({**H200_QUERY, "key": "x", "peak_dram_bandwidth_gbs": 1.0})
    bad = dict(H200_QUERY)
    del bad["sm_count"], bad["l2_bytes"]
    with pytest.raises(KlaraptorError, match=r"missing required fields \['sm_count', 'l2_bytes'\]"):
        DeviceProfile.from_dict(bad)
    # microbenchmark fields and provenance are optional
    minimal = {k: v for k, v in H200_QUERY.items() if k not in MICRO and k != "provenance"}
    assert DeviceProfile.from_dict(minimal).provenance == {}
    with pytest.raises(KlaraptorError, match="cc"):
        DeviceProfile.from_dict({**H200_QUERY, "cc": [9]})
    with pytest.raises(KlaraptorError, match="sm_count"):
        DeviceProfile.from_dict({**H200_QUERY, "sm_count": 13.5})
    with pytest.raises(KlaraptorError, match="JSON object"):
        DeviceProfile.from_dict([1, 2])  # type: ignore[arg-type]


def test_hardware_params() -> None:
    with pytest.raises(KlaraptorError, match="mem_latency_dram_cycles"):
        DeviceProfile.from_dict(H200_QUERY).hardware_params()
    partial = DeviceProfile.from_dict(H200_QUERY).hardware_params(allow_missing=True)
    assert math.isnan(partial["hw_mem_ld"])
    assert partial["hw_mem_bw_gbs"] == pytest.approx(4814.3, rel=1e-4)  # peak when unmeasured

    hw = _measured().hardware_params()
    assert set(hw) == {
        "hw_clock_ghz",
        "hw_mem_bw_gbs",
        "hw_n_sm",
        "hw_mem_ld",
        "hw_mem_ld_l2",
        "hw_dep_del_coal",
        "hw_dep_del_uncoal",
        "hw_issue_cycles",
        "hw_l2_bytes",
        "hw_max_threads_per_sm",
        "hw_max_blocks_per_sm",
        "hw_regs_per_sm",
        "hw_smem_per_sm",
        "hw_reserved_smem",
    }
    assert all(isinstance(v, float) for v in hw.values())
    assert hw["hw_clock_ghz"] == pytest.approx(1.98)
    assert hw["hw_mem_bw_gbs"] == 4200.0  # measured beats peak
    assert hw["hw_n_sm"] == 132 and hw["hw_mem_ld"] == 650 and hw["hw_dep_del_uncoal"] == 12
    assert hw["hw_smem_per_sm"] == 233472 and hw["hw_reserved_smem"] == 1024
    assert hw["hw_l2_bytes"] == 62914560


def test_with_microbench_rejects_other_fields() -> None:
    with pytest.raises(KlaraptorError, match="sm_count"):
        DeviceProfile.from_dict(H200_QUERY).with_microbench(sm_count=1)


def test_store_cache_round_trip(tmp_path: Path) -> None:
    p = _measured()
    with Store(tmp_path / "s.sqlite") as s:
        assert s.cached_profile(p.key) is None
        s.save_profile(p)
        assert s.cached_profile(p.key) == p
        assert list(s.device_profiles()) == [p.key]


def test_format_profile_shows_units_and_provenance() -> None:
    text = format_profile(_measured())
    assert "NVIDIA H200" in text and "1980 MHz" in text
    assert "228 KiB" in text and "60 MiB" in text and "GB/s" in text
    assert "650 cycles" in text
    assert "pointer chase, 1 GiB, 4 KiB stride" in text
    assert "commit: abc123" in text
    assert "not measured" in format_profile(DeviceProfile.from_dict(H200_QUERY))


def test_recorded_profile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(KlaraptorError, match="no recorded device profile 'nosuchgpu'"):
        recorded_profile("nosuchgpu")
    path = Path(dp.__file__).parents[1] / "data" / "h200_profile.json"
    if path.exists():  # the committed, measured file
        p = recorded_profile()
        assert p.name.startswith("NVIDIA H200") and p.missing_model_inputs == []
        assert p.hardware_params()["hw_n_sm"] == 132
        # resource fields (SAAKE) are either all measured or reported missing, never made up
        resource_names = [f for f, _, _ in dp.RESOURCE_FIELDS]
        assert set(p.missing_microbench) <= set(resource_names)


def test_a_profile_written_before_the_resource_fields_reads_with_them_missing() -> None:
    old = {k: v for k, v in H200_QUERY.items() if k not in {f for f, _, _ in dp.RESOURCE_FIELDS}}
    old.update(MICRO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "unknown field" warning either
        p = DeviceProfile.from_dict(old)
    assert p.missing_model_inputs == []
    assert p.missing_microbench == [f for f, _, _ in dp.RESOURCE_FIELDS]
    assert p.hardware_params()["hw_mem_ld"] == 650.0  # the MWP-CWP inputs still work
    text = format_profile(p)
    assert "lat_fp32_cycles" in text and "not measured" in text
    full = p.with_microbench(**{f: 1.0 for f, _, _ in dp.RESOURCE_FIELDS})
    assert full.missing_microbench == []
    assert DeviceProfile.from_dict(json.loads(json.dumps(full.to_dict()))) == full


def test_recorded_profile_envelope(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pkg = tmp_path / "klaraptor"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "fake_profile.json").write_text(json.dumps({"profile": H200_QUERY}))
    (pkg / "data" / "broken_profile.json").write_text("{not json")

    class _Files:
        def __truediv__(self, other: str) -> Any:
            return pkg / other

    monkeypatch.setattr(dp.resources, "files", lambda _pkg: _Files())
    assert recorded_profile("fake").sm_count == 132
    with pytest.raises(KlaraptorError, match="not valid JSON"):
        recorded_profile("broken")


def test_query_device_with_a_fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    attrs = {
        1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 2147483647, 6: 65535, 7: 65535, 8: 49152,
        10: 32, 12: 65536, 13: 1980000, 16: 132, 36: 3201000, 37: 6016, 38: 62914560,
        39: 2048, 75: 9, 76: 0, 81: 233472, 82: 65536, 97: 232448, 106: 32, 111: 1024,
    }  # fmt: skip
    runtime = types.SimpleNamespace(
        getDeviceProperties=lambda i: {"name": b"NVIDIA H200", "totalGlobalMem": 150_754_820_096},
        deviceGetAttribute=lambda attr, i: attrs[attr],
        driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 13020,
    )
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime), __version__="14.2.0")
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(dp, "_kernel_driver_version", lambda: "580.159.04")
    p = query_device(0)
    got = p.to_dict()
    for k, v in H200_QUERY.items():
        if k != "provenance":
            assert got[k] == v, k
    assert p.provenance["cuda_driver"] == "13.0" and p.provenance["cuda_runtime"] == "13.2"

    monkeypatch.setattr(dp, "_kernel_driver_version", lambda: None)
    assert query_device(0).driver == "cuda 13.0"

    def boom(attr: int, i: int) -> int:
        raise RuntimeError("cudaErrorInvalidDevice")

    runtime.deviceGetAttribute = boom
    with pytest.raises(KlaraptorError, match="cannot query CUDA device 0"):
        query_device(0)


def test_query_device_without_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(KlaraptorError, match="CuPy"):
        query_device()


def test_busy_sm_gap_curves_round_trip_and_reject_bad_input() -> None:
    from klaraptor.device.resources import busy_sm_gaps

    d = recorded_profile("h200").to_dict()
    prof = DeviceProfile.from_dict(d)
    assert prof.l2_gap_by_busy_sms is not None and prof.l2_gap_by_busy_sms[0][0] == 1
    assert prof.l2_gap_by_busy_sms[-1][0] == prof.sm_count
    assert DeviceProfile.from_dict(prof.to_dict()) == prof
    assert set(busy_sm_gaps(prof)) == {"l2", "dram"}
    for bad in (
        [],
        [[1, 1.0], [1, 2.0]],
        [[2, 1.0], [1, 2.0]],
        [[0, 1.0]],
        [[1, -1.0]],
        [[1, float("nan")]],
        [[1.5, 1.0]],
        [1, 2],
        "1,2",
    ):
        with pytest.raises(KlaraptorError, match="l2_gap_by_busy_sms"):
            DeviceProfile.from_dict({**d, "l2_gap_by_busy_sms": bad})
    none = DeviceProfile.from_dict({**d, "l2_gap_by_busy_sms": None, "dram_gap_by_busy_sms": None})
    assert busy_sm_gaps(none) == {}
