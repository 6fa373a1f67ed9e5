"""The referee: Nsight Compute's throughput breakdown, mapped onto SAAKE's resources.

Each SAAKE resource is one hardware unit whose utilisation Nsight Compute reports as a
percentage of its peak (the "Speed Of Light" and "Compute Workload Analysis" sections):

| SAAKE resource   | ncu unit    | metric (percent of peak)                                   |
|------------------|-------------|------------------------------------------------------------|
| fp32, imad       | fma_pipe    | sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active |
| alu              | alu_pipe    | sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active |
| fp64             | fp64_pipe   | sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active|
| sfu              | xu_pipe     | sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active  |
| issue            | issue       | sm__inst_issued.avg.pct_of_peak_sustained_active            |
| smem             | l1tex       | l1tex__throughput.avg.pct_of_peak_sustained_active          |
| l2               | l2          | lts__throughput.avg.pct_of_peak_sustained_elapsed           |
| dram             | dram        | dram__throughput.avg.pct_of_peak_sustained_elapsed          |

(fp32 and imad share the FMA pipe on sm_90; SAAKE's smem resource is the L1/shared-memory data
path, which Nsight Compute's L1/TEX throughput covers for shared and global accesses alike.)

The top unit is the one with the largest percentage. A kernel "agrees" when SAAKE's bottleneck
resource maps to that unit. Nsight Compute's guidance that no unit reaching 60 % of its peak
means a latency problem gives a second, weaker check of SAAKE's latency/throughput call
(`mode_agrees`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

UNIT_OF: dict[str, str] = {
    "fp32": "fma_pipe",
    "imad": "fma_pipe",
    "alu": "alu_pipe",
    "fp64": "fp64_pipe",
    "sfu": "xu_pipe",
    "issue": "issue",
    "smem": "l1tex",
    "l2": "l2",
    "dram": "dram",
}
UNIT_METRIC: dict[str, str] = {
    "fma_pipe": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "alu_pipe": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "fp64_pipe": "sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active",
    "xu_pipe": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "issue": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "l1tex": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "l2": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
}
# Context kept with the referee's numbers (not part of the comparison).
CONTEXT_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)
METRICS: tuple[str, ...] = tuple(UNIT_METRIC.values()) + CONTEXT_METRICS
LATENCY_BOUND_BELOW = 60.0  # percent: Nsight Compute's "latency issue" guidance


def unit_percentages(raw: Mapping[str, Any]) -> dict[str, float]:
    """{unit: percent of peak} for the units whose metric is in `raw`."""
    out = {}
    for unit, metric in UNIT_METRIC.items():
        v = raw.get(metric)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out[unit] = float(v)
    return out


def top_unit(raw: Mapping[str, Any]) -> tuple[str, float] | None:
    """Nsight Compute's busiest unit and its percentage (None without any unit metric)."""
    pct = unit_percentages(raw)
    if not pct:
        return None
    unit = max(pct, key=pct.__getitem__)
    return unit, pct[unit]


def judge(bottleneck: str, mode: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison of one kernel: SAAKE's call against Nsight Compute's top unit."""
    top = top_unit(raw)
    if top is None:
        return {"status": "no ncu unit metrics", "match": None}
    unit, pct = top
    ncu_mode = "latency" if pct < LATENCY_BOUND_BELOW else "throughput"
    return {
        "status": "ok",
        "saake_unit": UNIT_OF.get(bottleneck),
        "ncu_top_unit": unit,
        "ncu_top_pct": round(pct, 2),
        "ncu_units_pct": {u: round(v, 2) for u, v in unit_percentages(raw).items()},
        "match": UNIT_OF.get(bottleneck) == unit,
        "ncu_mode": ncu_mode,
        "mode_agrees": ncu_mode == mode,
    }


def agreement(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fraction of judged kernels whose bottleneck matches, and of their modes."""
    judged = [r for r in rows if r.get("match") is not None]
    n = len(judged)
    return {
        "kernels_judged": n,
        "agreement": sum(bool(r["match"]) for r in judged) / n if n else None,
        "mode_agreement": sum(bool(r.get("mode_agrees")) for r in judged) / n if n else None,
    }


__all__ = [
    "CONTEXT_METRICS",
    "LATENCY_BOUND_BELOW",
    "METRICS",
    "UNIT_METRIC",
    "UNIT_OF",
    "agreement",
    "judge",
    "top_unit",
    "unit_percentages",
]
