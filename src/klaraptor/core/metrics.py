"""Raw Nsight Compute metrics and the canonical per-point metrics the fitter and the models read.

The collector stores the raw ncu values of every point (kind 'ncu') and the CUDA-event timing
(kind 'time'); `derive` turns one point's raw values into the canonical names of
docs/ARCHITECTURE.md, and `klaraptor.fit.training.collected` joins both kinds from a store.

Why these counters (all confirmed on gh100 with ncu 2025.3):
- `smsp__warps_launched.sum`, `smsp__inst_executed.sum`: warps and warp instructions, so
  instructions per warp (MWP-CWP's #Total_insts);
- `smsp__inst_executed_op_global_{ld,st}.sum`: global memory warp instructions (#Mem_insts);
- `l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_{ld,st}.sum`: sectors per request, the
  coalescing degree (4 sectors of 32 B = one 128-B line for 4-byte words; 32 = fully uncoalesced);
- `lts__t_sectors_srcunit_tex_op_{read,write}.sum`: L1→L2 traffic, `dram__bytes_*`: DRAM traffic;
- `smsp__inst_executed_op_shared_{ld,st}.sum`: shared-memory instructions;
- `sm__warps_active.avg.pct_of_peak_sustained_active`: achieved occupancy;
- `gpu__time_duration.sum`, `sm__cycles_elapsed.avg`, `smsp__cycles_active.avg`: duration.
There is no per-instruction barrier counter on gh100, so `sync_per_warp` comes from the PTX
(`backend_cupy.count_barriers`), a static count that is exact for barriers outside loops and
divergent branches.

The raw page also carries `launch__*` columns for free (registers, shared memory, occupancy limits,
block and grid dims); they are kept in the stored raw values (LAUNCH_COLUMNS) but never requested,
because `ncu --query-metrics` does not list them and an unknown requested name fails the run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from klaraptor.core.types import WARP_SIZE

# The metrics requested from ncu (`--metrics`), in a stable order.
RAW_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg",
    "smsp__cycles_active.avg",
    "smsp__warps_launched.sum",
    "smsp__inst_executed.sum",
    "smsp__thread_inst_executed.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "smsp__inst_executed_op_global_st.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
)

# Warp instructions per pipe (requested with RAW_METRICS since 2026-11-23): the dynamic
# instruction mix an emulator (SAAKE) checks its static classification and trip counts against.
PIPE_METRICS: tuple[str, ...] = (
    "smsp__inst_executed_pipe_fma.sum",
    "smsp__inst_executed_pipe_alu.sum",
    "smsp__inst_executed_pipe_fp64.sum",
    "smsp__inst_executed_pipe_xu.sum",
    "smsp__inst_executed_pipe_lsu.sum",
    "smsp__inst_executed_pipe_adu.sum",
    "smsp__inst_executed_pipe_cbu.sum",
    "smsp__inst_executed_pipe_uniform.sum",
)

# Columns of the raw page that come with every profiled launch (not requested, kept when present).
LAUNCH_COLUMNS: tuple[str, ...] = (
    "launch__block_dim_x",
    "launch__block_dim_y",
    "launch__block_dim_z",
    "launch__grid_dim_x",
    "launch__grid_dim_y",
    "launch__grid_dim_z",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__waves_per_multiprocessor",
    "launch__barrier_count",
    "profiler__replayer_passes",
)

# The canonical per-point metrics (docs/ARCHITECTURE.md), in the order the table lists them.
CANONICAL: tuple[str, ...] = (
    "time_ms",
    "warps",
    "inst_per_warp",
    "gld_per_warp",
    "gst_per_warp",
    "gld_sectors_per_req",
    "gst_sectors_per_req",
    "l2_sectors_per_warp",
    "dram_bytes",
    "sync_per_warp",
    "shared_per_warp",
    "achieved_occupancy",
    "ncu_duration_ms",
)


def expected_warps(block: Sequence[int], grid: Sequence[int]) -> int:
    """Warps a launch creates: blocks × ceil(threads per block / 32). Exact, never measured."""
    threads = int(block[0]) * int(block[1]) * int(block[2])
    blocks = int(grid[0]) * int(grid[1]) * int(grid[2])
    return blocks * ((threads + WARP_SIZE - 1) // WARP_SIZE)


def _num(raw: Mapping[str, Any], name: str) -> float | None:
    v = raw.get(name)
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return None


def _ratio(num: float | None, den: float | None) -> float | None:
    """num / den; None when an input is missing; 0 when both are 0 (no such accesses at all)."""
    if num is None or den is None:
        return None
    if den == 0:
        # No requests means no such instructions: 0 sectors per request keeps the models'
        # products (instructions × cost) at 0 instead of NaN.
        return 0.0 if num == 0 else math.inf
    return num / den


def derive(
    raw: Mapping[str, Any],
    block: Sequence[int],
    grid: Sequence[int],
    *,
    sync_per_warp: float | None = None,
    time_ms: float | None = None,
) -> dict[str, float]:
    """The canonical per-point metrics from one point's raw ncu values.

    `raw` maps metric names (as in RAW_METRICS / LAUNCH_COLUMNS) to numbers in base units
    (bytes, nanoseconds), as `ncu.parse_raw_csv` returns them. `sync_per_warp` is the static
    barrier count of the kernel (from its PTX) and `time_ms` the CUDA-event median; each is
    included only when given. A metric whose counters are missing is left out (never guessed),
    except `warps`, which falls back to the exact count from block and grid.

    Besides the canonical names, a few extras that help diagnose a model: `thread_inst_per_warp`,
    `l1_hit_rate`, `l2_hit_rate`, `sm_cycles`, `regs_per_thread`, `static_smem`, `dynamic_smem`,
    `waves`, and `pipe_<pipe>_per_warp` for each of PIPE_METRICS that was collected.
    """
    out: dict[str, float] = {}
    if time_ms is not None:
        out["time_ms"] = float(time_ms)
    warps = _num(raw, "smsp__warps_launched.sum")
    if warps is None or warps <= 0:
        warps = float(expected_warps(block, grid))
    out["warps"] = warps

    def per_warp(*names: str) -> float | None:
        vals = [_num(raw, n) for n in names]
        if any(v is None for v in vals):
            return None
        return sum(v for v in vals if v is not None) / warps

    candidates: dict[str, float | None] = {
        "inst_per_warp": per_warp("smsp__inst_executed.sum"),
        "gld_per_warp": per_warp("smsp__inst_executed_op_global_ld.sum"),
        "gst_per_warp": per_warp("smsp__inst_executed_op_global_st.sum"),
        "gld_sectors_per_req": _ratio(
            _num(raw, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
            _num(raw, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
        ),
        "gst_sectors_per_req": _ratio(
            _num(raw, "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
            _num(raw, "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"),
        ),
        "l2_sectors_per_warp": per_warp(
            "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum"
        ),
        "shared_per_warp": per_warp(
            "smsp__inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_shared_st.sum"
        ),
        "thread_inst_per_warp": per_warp("smsp__thread_inst_executed.sum"),
        "l1_hit_rate": _ratio(
            _num(raw, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"),
            _num(raw, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
        ),
        "l2_hit_rate": _ratio(
            _num(raw, "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum"),
            _num(raw, "lts__t_sectors_srcunit_tex_op_read.sum"),
        ),
        "sm_cycles": _num(raw, "sm__cycles_elapsed.avg"),
        "regs_per_thread": _num(raw, "launch__registers_per_thread"),
        "static_smem": _num(raw, "launch__shared_mem_per_block_static"),
        "dynamic_smem": _num(raw, "launch__shared_mem_per_block_dynamic"),
        "waves": _num(raw, "launch__waves_per_multiprocessor"),
    }
    # Per-pipe warp instructions (PIPE_METRICS, when collected): "pipe_fma_per_warp", ...
    for name in PIPE_METRICS:
        pipe = name.removeprefix("smsp__inst_executed_pipe_").removesuffix(".sum")
        candidates[f"pipe_{pipe}_per_warp"] = per_warp(name)
    rd, wr = _num(raw, "dram__bytes_read.sum"), _num(raw, "dram__bytes_write.sum")
    candidates["dram_bytes"] = None if rd is None or wr is None else rd + wr
    if sync_per_warp is not None:
        candidates["sync_per_warp"] = float(sync_per_warp)
    occ = _num(raw, "sm__warps_active.avg.pct_of_peak_sustained_active")
    candidates["achieved_occupancy"] = None if occ is None else occ / 100.0
    dur = _num(raw, "gpu__time_duration.sum")  # nanoseconds (the parser normalises units)
    candidates["ncu_duration_ms"] = None if dur is None else dur / 1e6
    out.update({k: v for k, v in candidates.items() if v is not None})
    return out
