"""The reference side of SAAKE's resource microbenchmarks (`klaraptor.collect.resources`): the
public figure, if any, and the plausible range each measured latency and gap is checked
against (both go into the profile's provenance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile

REQUEST_BYTES = 128  # one coalesced warp request: 32 lanes × 4 B, one L2 line


# -- expected values ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A public reference figure (or None) and the range outside which a value is flagged."""

    value: float | None
    lo: float
    hi: float
    source: str


_GUIDE = "CUDA C++ Programming Guide, Arithmetic Instructions, cc 9.0"
_VOLTA = "Jia et al. 2018, Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"


def expected(profile: DeviceProfile) -> dict[str, Expected]:
    """Reference values for an sm_90 GPU (H100/H200), scaled by the profile where they depend
    on SM count, clock or DRAM bandwidth."""
    f = profile.sm_clock_mhz * 1e6
    # Lower bound of the DRAM gap: the theoretical peak (2 × memory clock × bus width).
    dram_floor = REQUEST_BYTES * profile.sm_count * f / (profile.peak_dram_bandwidth_gbs * 1e9)
    return {
        "lat_fp32_cycles": Expected(4.0, 3.0, 8.0, f"4 on Volta ({_VOLTA})"),
        "gap_fp32_cycles": Expected(0.25, 0.2, 0.35, f"128 results/clk/SM ({_GUIDE}) → 32/128"),
        "lat_fp64_cycles": Expected(8.0, 4.0, 16.0, f"DFMA 8 on Volta ({_VOLTA})"),
        "gap_fp64_cycles": Expected(0.5, 0.4, 0.7, f"64 results/clk/SM ({_GUIDE}) → 32/64"),
        "lat_sfu_cycles": Expected(None, 8.0, 40.0, "no Hopper figure found; broad bound"),
        "gap_sfu_cycles": Expected(2.0, 1.6, 2.6, f"16 results/clk/SM ({_GUIDE}) → 32/16"),
        "lat_alu_cycles": Expected(4.0, 3.0, 8.0, f"4 on Volta ({_VOLTA})"),
        "gap_alu_cycles": Expected(0.5, 0.4, 0.7, f"64 int add/logic results/clk/SM ({_GUIDE})"),
        "lat_imad_cycles": Expected(4.0, 3.0, 8.0, f"about 4 on Volta ({_VOLTA})"),
        "gap_imad_cycles": Expected(
            0.5, 0.4, 0.7, f"64 int multiply-add results/clk/SM ({_GUIDE})"
        ),
        "lat_smem_cycles": Expected(19.0, 15.0, 45.0, f"19 on Volta ({_VOLTA}); broad bound"),
        "gap_smem_cycles": Expected(1.0, 0.9, 1.3, "32 banks × 4 B/clk = 128 B/clk/SM (Guide)"),
        "lat_issue_cycles": Expected(1.0, 0.9, 1.3, "1 warp instruction/clk per scheduler"),
        "gap_issue_cycles": Expected(0.25, 0.2, 0.35, "4 schedulers × 1 instruction/clk per SM"),
        "lat_l2_cycles": Expected(None, 150.0, 500.0, "broad bound (Mem_LD chase: 288)"),
        "gap_l2_cycles": Expected(None, 1.0, dram_floor, "broad bound: above 1, below DRAM peak"),
        "lat_l2_scatter_cycles": Expected(
            None, 150.0, 1000.0, "broad bound: at least an L2 hit (288), 32 lines in one request"
        ),
        "gap_l2_scatter_cycles": Expected(
            None,
            4.0,
            32.0 * dram_floor,
            "broad bound: above 1 line per cycle per SM, below 32 coalesced DRAM requests",
        ),
        "gap_l2_scatter_store_cycles": Expected(
            None,
            4.0,
            64.0 * dram_floor,
            "broad bound: above 1 line per cycle per SM, below 32 coalesced DRAM reads and writes",
        ),
        "gap_dram_scatter_store_cycles": Expected(
            None,
            dram_floor,
            128.0 * dram_floor,
            "broad bound: at least one coalesced DRAM request, below 32 lines read and written "
            "twice over",
        ),
        "lat_dram_cycles": Expected(None, 400.0, 1200.0, "broad bound (Mem_LD chase: 666)"),
        "lat_dram_scatter_cycles": Expected(
            None, 400.0, 3000.0, "broad bound: at least a DRAM access, 32 lines in one request"
        ),
        "gap_dram_scatter_cycles": Expected(
            None,
            dram_floor,
            32.0 * 4.0 * dram_floor,
            "broad bound: above one coalesced DRAM request, below 32 of them at a quarter of peak",
        ),
        "gap_dram_cycles": Expected(
            dram_floor,
            dram_floor,
            2.0 * dram_floor,
            f"peak {profile.peak_dram_bandwidth_gbs:.0f} GB/s (H200 datasheet 4.8 TB/s) → "
            f"{dram_floor:.2f}; a read stream reaches 80-95%",
        ),
        "lat_launch_cycles": Expected(
            None, 1000.0, 40000.0, "broad bound: 0.5-20 us for a launch of empty blocks"
        ),
        "gap_launch_cycles": Expected(
            None,
            20.0,
            1000.0,
            "broad bound (a first measurement, resources/block_dispatch.json: 160 on the H200)",
        ),
    }


def check_value(name: str, value: float | None, ref: Expected) -> str:
    """'ok', or a sentence saying why the value is off."""
    if value is None or not np.isfinite(value):
        return f"OFF: {name} was not measured"
    if not ref.lo <= value <= ref.hi:
        want = f"expected {ref.value:.3g}, " if ref.value is not None else ""
        return f"OFF: {value:.4g} outside [{ref.lo:.3g}, {ref.hi:.3g}] ({want}{ref.source})"
    return "ok"


__all__ = ["REQUEST_BYTES", "Expected", "check_value", "expected"]
