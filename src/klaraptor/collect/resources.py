"""SAAKE's resource parameters: a latency and a gap for every resource the emulator models.

Definitions, in the units abstract kernel emulation uses (SAAKE §3.1 and Alg. 1; one SM is
emulated, warp instructions are the unit of work):

- **cycle**: one cycle of the SM clock. Compute and shared-memory figures are `clock64()` cycles
  counted on the SM, so they do not depend on the clock frequency. L2 and DRAM figures are timed
  in ns (`%globaltimer`, CUDA events) and converted at the profile's `sm_clock_mhz`, the clock
  the models convert with, as `klaraptor.collect.microbench` does for Mem_LD.
- **latency** `lat_<r>_cycles`: cycles from the issue of a warp instruction on resource r to the
  earliest issue of an instruction that needs its result (SAAKE: "the number of cycles an
  operation waits before execution, when it depends on the immediately preceding operation";
  `fin_t = start + latency[r]`). Measured as cycles per step of a chain of dependent
  instructions in ONE warp (all 32 lanes active).
- **gap** `gap_<r>_cycles`: SM cycles between successive warp instructions resource r accepts
  on ONE SM when many warps with independent work saturate it, i.e. 1 / (warp instructions per
  cycle per SM); `pipe_admit[r] += gap[r]`. The pipes fp32, fp64, sfu, alu, imad and issue are
  replicated in each of the SM's 4 sub-partitions (SMSP_PER_SM): an emulator that models the
  4 schedulers separately uses `SMSP_PER_SM × gap` per sub-partition. Shared memory is one unit
  per SM. For l2 and dram the unit is one coalesced 128-byte warp request (32 lanes × 4 B = one
  cache line) and the gap is the SM's share of the GPU's rate with EVERY SM loading:
  `gap = 128 B × n_SM × f_SM / (bytes per second of the whole GPU)`.

Resources and how each is measured (kernels in `klaraptor/cuda/resources.cu`):

| r     | instruction(s)                        | latency chain (1 warp)         | gap (all warps busy)        |
|-------|---------------------------------------|--------------------------------|-----------------------------|
| fp32  | FFMA                                  | x = fma(x, m, c)               | 32 warps/SM × 4 chains      |
| fp64  | DFMA                                  | x = fma(x, m, c), double       | same                        |
| sfu   | MUFU.EX2 (MUFU.RSQ in provenance)     | x = ex2.approx(-x)             | same                        |
| alu   | LOP3 + IADD3 (step = 2 instructions)  | x = ((x ^ a) + b) + c          | same                        |
| imad  | IMAD                                  | x = x * a + b                  | same                        |
| smem  | LDS.32, conflict-free (128 B/warp)    | j = smem[j] (lane l in bank l) | same                        |
| issue | 12 FFMA + 2 × (LOP3 + IADD3) per step | one warp: cycles / instruction | cycles / instruction per SM |
| l2    | LDG.64.STRONG.GPU, 128-B line         | warp pointer chase, 8 MiB      | whole-line reads, 8 MiB     |
| l2_scatter | LDG.E.64/LDG.E, 32 lines × 1 sector | a pointer chase per lane, 8 MiB | scattered reads, 8 MiB |
| dram  | same                                  | warp chase, fresh lines        | streaming reads of ~1 GiB   |
| launch| a thread block started (no instruction)| one empty block per SM, events | empty blocks, two grid sizes|

`l2`'s gap is measured on l2_scatter's addresses (every request its own line, each lap further on
in the 8 MiB window; kp_l2_lines), so the two gaps compare like with like: a warp re-reading its
same 8 lines every lap (kp_stream, the method before) costs the H200's L2 4.29 cycles a request
against 3.40 this way (`experiments/device_l2_lines_check.py`: one sector in each of L lines costs
1.5-1.6 cycles a line from L = 4 to 32, the scattered gap's 50.4 / 32).
`l2_scatter` is the same L2 under the requests of a column walk: each warp instruction touches 32
lines, one sector each. Its gap is per such request. The same benchmark then stores to those
addresses (`gap_l2_scatter_store_cycles`, kp_scatter_store): the L2 serves a scattered store at
about half the rate of a scattered load (108 against 49 cycles per request per SM on the H200, a
first check on 2026-11-29), and the emulator charges stores with it; a store has no latency a
later instruction waits on, so none is measured. `dram_scatter` likewise writes its fresh lines
(`gap_dram_scatter_store_cycles`: 386 against 140 cycles in the first check). A coalesced
request moves four sectors under one tag lookup; a scattered one needs a lookup per sector, so the L2 serves fewer bytes. The
emulator charges a request of `lines` lines at least `lines` × gap_l2_scatter / 32 (`ops`). It is
optional: a profile measured before it has none, and the emulator then charges bytes alone.

`launch` is the block dispatcher, which no instruction uses: its gap is SM cycles per block an
SM receives with every SM receiving blocks (the SM's share of the GPU-wide rate, as for l2 and
dram), its latency the GPU time of a launch of one empty block per SM (the cost a launch pays
before its blocks' work, charged once per launch by the emulator). Both are timed with CUDA
events behind a holding kernel, so the host's launch overhead is not in them.

Loop overhead cancels exactly: every chain kernel is compiled twice, with U1 and U2 steps per
loop iteration (`-DKP_U`), run with the same iteration count, and the figure is the difference
of cycles over the difference of instructions (least-squares slope over the variants; the
SASS test checks that each extra step adds exactly the intended instructions). The gap kernels
run one 1024-thread block per SM (the block takes more than half of the SM's shared memory, so
no second block fits; `%smid` is recorded and checked) and take the median over SMs. The memory
gaps use the same slope over two sizes (DRAM, L2 flushed before each run) or two lap counts (L2,
warm), timed with CUDA events, median of repeats. Each full repeat runs in a fresh process;
the reported value is the median over repeats, `spread` = max - min.

Expected H200 values, from public figures (`resources_reference.expected`, checked by `check_value`):
per-SM results per clock for compute capability 9.0 from the CUDA C++ Programming Guide
(Arithmetic Instructions table) and the H100 architecture whitepaper: 128 FP32 lanes → gap
0.25; 64 FP64 lanes → 0.5; 16 SFU lanes → 2.0; 64 integer add/logic and 64 integer
multiply-add results → 0.5; 32 shared-memory banks × 4 B per clock → 1.0 per conflict-free
LDS.32; 4 schedulers × 1 warp instruction per clock → issue gap 0.25 and a single warp's
latency 1. DRAM: 4.8 TB/s peak (NVIDIA H200 datasheet) → gap ≥ 6.97 cycles at 1980 MHz on
132 SMs. Latencies: dependent FP32/INT 4 cycles, DFMA 8, shared memory 19 cycles on Volta
(Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018); no
authoritative Hopper figure for MUFU or L2 bandwidth was found, so those get broad physical
bounds only. A value outside its range is flagged in the provenance (`check`), not dropped.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources as _res
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.collect.resources_reference import REQUEST_BYTES, check_value, expected
from klaraptor.core.errors import CollectError
from klaraptor.device.profile import RESOURCE_EXTRA_FIELDS
from klaraptor.device.resources import BENCHMARKS, FIELDS

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile

SMSP_PER_SM = 4  # sub-partitions (warp schedulers) per SM, compute capability 7.0 to 9.0
OPTIONS = ("--std=c++17",)


def source() -> str:
    """The CUDA source of the resource microbenchmarks."""
    return (_res.files("klaraptor") / "cuda" / "resources.cu").read_text(encoding="utf-8")


@dataclass(frozen=True)
class ResourceConfig:
    """Sizes and repetitions (defaults: ~1 s of GPU time per repeat on an H200)."""

    unrolls: tuple[int, int] = (16, 32)  # steps per loop iteration of the two compiled variants
    lat_iters: int = 1024  # loop iterations, latency kernels
    thr_iters: int = 256  # loop iterations, gap kernels
    launch_repeats: int = 3  # timed launches per variant after one warm-up (median)
    smem_words: int = 8192  # shared-memory chase array (32 KiB)
    chase_dram_steps: int = 8192
    chase_dram_windows: int = 4
    chase_window_bytes: int = 16 << 20  # within the TLB's reach (see klaraptor.collect.microbench)
    chase_l2_bytes: int = 8 << 20
    chase_l2_laps: int = 3
    stream_dram_rows: tuple[int, int] = (64, 128)  # rows of 1 KiB per warp: 0.5 and 1 GiB
    stream_l2_laps: tuple[int, int] = (32, 160)  # laps over one row (8.25 MiB on an H200)
    stream_dram_scatter_laps: tuple[int, int] = (2, 6)  # fresh lines each lap (dram_scatter)
    stream_repeats: int = 5
    dispatch_threads: tuple[int, ...] = (32, 64, 128, 256)  # block sizes of the empty kernel
    dispatch_waves: tuple[int, int] = (256, 2048)  # grids of that many blocks per SM
    dispatch_repeats: int = 7
    hold_us: float = 200.0  # kp_hold before every timed launch
    seed: int = 0

    @classmethod
    def quick(cls) -> ResourceConfig:
        """A few times faster, for tests: fewer iterations, steps and repeats. The gap kernels
        keep their default length: they take microseconds, and at 64 iterations the FP32 slope
        (0.25 cycles a step) drowned in launch noise (-0.07 on the H200, GPU test log e9f9ae4).
        So do the DRAM streams (0.15-0.3 ms): at 16 and 32 rows the slope read 1.7, 6.1 and 8.7
        cycles in three runs, at 64 and 128 rows 7.4-7.6 (H200, 2026-11-28, eb66307)."""
        return cls(
            lat_iters=256,
            launch_repeats=1,
            chase_dram_steps=2048,
            chase_dram_windows=2,
            chase_l2_laps=1,
            stream_l2_laps=(8, 40),
            stream_repeats=2,
            dispatch_threads=(32, 128),
            dispatch_repeats=3,
        )


# -- the pipe benchmarks: kernel kp_lat_<name> / kp_thr_<name> (p, q, iters, flag, out, smid, sink)


@dataclass(frozen=True)
class PipeBench:
    """One chain kernel pair: what it computes and which SASS instructions one step is."""

    name: str
    dtype: str
    p: float
    q: float
    step_opcodes: tuple[str, ...]  # SASS instructions of one chain step (multiset)

    @property
    def per_step(self) -> int:
        return len(self.step_opcodes)


PIPES: dict[str, PipeBench] = {
    b.name: b
    for b in (
        PipeBench("fp32", "float32", 0.5, 0.999, ("FFMA.FTZ",)),
        PipeBench("fp64", "float64", 0.5, 0.999, ("DFMA",)),
        PipeBench("ex2", "float32", 0.5, 0.0, ("MUFU.EX2",)),
        PipeBench("rsq", "float32", 2.0, 0.0, ("MUFU.RSQ",)),
        PipeBench("alu", "uint32", 0x9E3779B9, 0x7F4A7C15, ("LOP3.LUT", "IADD3")),
        PipeBench("imad", "uint32", 1013904223, 1664525, ("IMAD",)),
        PipeBench("smem", "uint32", 0, 0, ("LDS",)),
    )
}
CHAINS_PER_THREAD = 4  # KP_K in resources.cu
WARPS_PER_BLOCK = 32  # gap kernels: 1024 threads
ISSUE_STEP_OPCODES = ("FFMA.FTZ",) * 12 + ("LOP3.LUT", "IADD3") * 2


# -- analysis (pure NumPy) ----------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A quantity over repeats: median, max - min, and the samples."""

    value: float
    spread: float
    samples: tuple[float, ...]

    @property
    def rel_spread(self) -> float:
        return self.spread / abs(self.value) if self.value else float("nan")


def summarize(samples: Iterable[float]) -> Estimate:
    """Median and spread (max - min) of the finite samples; NaN when there are none."""
    x = np.asarray([float(s) for s in samples], dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return Estimate(float("nan"), float("nan"), ())
    return Estimate(float(np.median(x)), float(x.max() - x.min()), tuple(float(v) for v in x))


def per_unit_slope(units: Sequence[float], cost: Sequence[float]) -> float:
    """Least-squares slope of `cost` against `units`: the cost of one more unit.

    With two points it is their difference quotient, so any cost that is the same in every
    variant (loop overhead per iteration, the clock reads, launch latency) cancels.
    """
    u = np.asarray(units, dtype=np.float64)
    c = np.asarray(cost, dtype=np.float64)
    if u.shape != c.shape or u.size < 2 or np.ptp(u) == 0:
        raise CollectError(f"a slope needs >= 2 distinct unit counts, got {u.tolist()}")
    return float(np.polyfit(u, c, 1)[0])


def chain_latency(variants: Sequence[Mapping[str, Any]], per_step: int) -> float:
    """Cycles per dependent instruction from one-warp chain runs.

    Each variant: `unroll` steps per iteration, `iters` iterations, `cycles` (one per launch,
    median taken). Instructions = unroll × iters × per_step.
    """
    units = [v["unroll"] * v["iters"] * per_step for v in variants]
    cost = [float(np.median(v["cycles"])) for v in variants]
    return per_unit_slope(units, cost)


def duplicate_sms(smid: Sequence[int]) -> int:
    """How many blocks shared an SM with an earlier block (0 when one block per SM)."""
    ids = np.asarray(smid, dtype=np.int64)
    return int(ids.size - np.unique(ids).size)


def block_cycles(cycles_by_launch: Sequence[Sequence[float]]) -> float:
    """Median over launches of the median over blocks (SMs) of clock64 cycles."""
    return float(np.median([np.median(np.asarray(c, dtype=np.float64)) for c in cycles_by_launch]))


def pipe_gap(
    variants: Sequence[Mapping[str, Any]], per_step: int, chains: int, warps: int
) -> float:
    """SM cycles per warp instruction with `warps` warps × `chains` chains on each SM."""
    units = [warps * chains * v["unroll"] * v["iters"] * per_step for v in variants]
    cost = [block_cycles(v["cycles"]) for v in variants]
    return per_unit_slope(units, cost)


def chase_latency(samples: Sequence[Mapping[str, float]], steps: int, clock_mhz: float) -> float:
    """Cycles (at `clock_mhz`) per load of a pointer chase: median over samples of ns/steps."""
    ns = np.median([s["ns"] for s in samples]) / steps
    return float(ns * clock_mhz / 1000.0)


def stream_gap(
    variants: Sequence[Mapping[str, Any]], warps: int, sm_count: int, clock_mhz: float
) -> float:
    """Cycles per 128-B request per SM, every SM streaming.

    Each variant: `rows` × `laps` passes in which every one of `warps` warps loads 8 lines;
    `ms`: event times (median taken).
    """
    units = [8 * warps * v["rows"] * v["laps"] / sm_count for v in variants]
    cost = [float(np.median(v["ms"])) * 1e6 * clock_mhz / 1000.0 for v in variants]
    return per_unit_slope(units, cost)


def dispatch_gap(variants: Sequence[Mapping[str, Any]], sm_count: int, clock_mhz: float) -> float:
    """Cycles per block per SM, every SM receiving blocks: the median over block sizes of the
    slope of event time over blocks between the two grids, × SMs × clock (the SM's share of the
    GPU-wide dispatch rate, as the l2/dram gaps are)."""
    slopes = [
        per_unit_slope(
            v["grids"], [float(np.median(m)) * 1e6 * clock_mhz / 1000.0 for m in v["ms"]]
        )
        for v in variants
    ]
    return float(np.median(slopes)) * sm_count


def dispatch_latency(one_per_sm: Sequence[float], clock_mhz: float) -> float:
    """Cycles (at `clock_mhz`) of a launch of one empty block per SM: median event time."""
    return float(np.median(one_per_sm)) * 1e6 * clock_mhz / 1000.0


def chase_links(base: int, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8-byte words that link 128-B `lines` of a buffer at address `base` into a cycle.

    Returns (word indices, values): word i (0..15) of line lines[k] holds the address of word i
    of line lines[k + 1] (the last links back to the first), so a warp whose lane l starts at
    word l % 16 of lines[0] and loads its word's value as its next address walks `lines` in
    order, one 128-B request per step.
    """
    lines = np.asarray(lines, dtype=np.int64)
    nxt = np.roll(lines, -1).astype(np.uint64)
    lanes = np.arange(16, dtype=np.uint64)
    idx = (lines[:, None] * 16 + lanes.astype(np.int64)[None, :]).ravel()
    val = np.uint64(base) + nxt[:, None] * np.uint64(REQUEST_BYTES) + lanes * np.uint64(8)
    return idx, val.ravel()


def extra_fields(name: str) -> tuple[str, ...]:
    """The profile fields benchmark `name` measures beside its latency and gap."""
    return tuple(f for f, _, _ in RESOURCE_EXTRA_FIELDS.get(name, ()))


def analyse(name: str, raw: Mapping[str, Any], clock_mhz: float) -> dict[str, Any]:
    """One repeat's raw data of benchmark `name` → {field: value} plus `extra` diagnostics."""
    kind = raw["kind"]
    out: dict[str, Any] = {"extra": {}}
    if kind == "pipe":
        per_step, chains = raw["per_step"], raw["chains"]
        out[f"lat_{name}_cycles"] = chain_latency(raw["lat"], per_step)
        out[f"gap_{name}_cycles"] = pipe_gap(raw["thr"], per_step, chains, raw["warps"])
        out["extra"]["shared_sm_blocks"] = max(duplicate_sms(v["smid"]) for v in raw["thr"])
        for sub, sraw in raw.get("also", {}).items():
            out["extra"][f"lat_{sub}_cycles"] = chain_latency(sraw["lat"], sraw["per_step"])
            out["extra"][f"gap_{sub}_cycles"] = pipe_gap(
                sraw["thr"], sraw["per_step"], sraw["chains"], sraw["warps"]
            )
    elif kind == "memory":
        chase, stream = raw["chase"], raw["stream"]
        out[f"lat_{name}_cycles"] = chase_latency(chase["samples"], chase["steps"], clock_mhz)
        out[f"gap_{name}_cycles"] = stream_gap(
            stream["variants"], stream["warps"], stream["sm_count"], clock_mhz
        )
        cyc = np.median([s["cycles"] for s in chase["samples"]]) / chase["steps"]
        out["extra"]["chase_clock64_cycles_per_load"] = float(cyc)
        ns = np.median([s["ns"] for s in chase["samples"]]) / chase["steps"]
        out["extra"]["chase_effective_sm_clock_mhz"] = float(cyc / ns * 1000.0)
        if "store_stream" in raw:  # the same scattered requests as stores (`extra_fields`)
            st = raw["store_stream"]
            (field,) = extra_fields(name)
            out[field] = stream_gap(st["variants"], st["warps"], st["sm_count"], clock_mhz)
        lines = int(raw.get("lines_per_request", 1))
        if lines == 1:
            bw = REQUEST_BYTES * stream["sm_count"] * clock_mhz * 1e6 / out[f"gap_{name}_cycles"]
            out["extra"]["stream_read_gbs"] = float(bw / 1e9)
        else:  # scattered: what counts is lines (one sector each) per cycle, not bytes
            out["extra"]["lines_per_cycle_per_sm"] = float(lines / out[f"gap_{name}_cycles"])
    elif kind == "dispatch":
        out[f"lat_{name}_cycles"] = dispatch_latency(raw["one_per_sm"], clock_mhz)
        out[f"gap_{name}_cycles"] = dispatch_gap(raw["variants"], raw["sm_count"], clock_mhz)
        for v in raw["variants"]:
            out["extra"][f"gap_cycles_{v['threads']}_threads"] = dispatch_gap(
                [v], raw["sm_count"], clock_mhz
            )
    else:
        raise CollectError(f"unknown raw benchmark kind {kind!r} for {name!r}")
    return out


# -- method text per resource ------------------------------------------------------------------

_PIPE_LAT = (
    "one warp, one dependent chain of {what}; kernels with {u1} and {u2} steps per loop "
    "iteration, same iterations; (cycles difference) / (instructions difference), clock64"
)
_PIPE_GAP = (
    "one 1024-thread block per SM (dynamic shared memory > half the SM), 4 independent chains "
    "of {what} per thread; slope of clock64 cycles (median over SMs) over warp instructions "
    "per SM between the {u1}- and {u2}-step kernels"
)
METHODS: dict[str, tuple[str, str]] = {
    "fp32": ("FFMA x = fma(x, m, c)", "FFMA.FTZ"),
    "fp64": ("DFMA x = fma(x, m, c)", "DFMA"),
    "sfu": ("MUFU.EX2 x = ex2.approx(-x)", "MUFU.EX2"),
    "alu": ("LOP3 + IADD3 x = ((x ^ a) + b) + c (2 instructions per step)", "LOP3 + IADD3"),
    "imad": ("IMAD x = x * a + b", "IMAD"),
    "smem": ("LDS.32 j = smem[j], lane l in bank l (conflict-free 128-B request)", "LDS.32"),
}


def method_text(name: str, kind: str, cfg: ResourceConfig) -> str:
    """How `kind` ('lat' or 'gap') of resource `name` is measured, in one sentence."""
    u1, u2 = cfg.unrolls
    if name in METHODS:
        what = METHODS[name][0] if kind == "lat" else METHODS[name][1]
        return (_PIPE_LAT if kind == "lat" else _PIPE_GAP).format(what=what, u1=u1, u2=u2)
    if name == "issue":
        mix = "12 independent FFMA + 2 chains of LOP3 + IADD3 per step (16 instructions)"
        if kind == "lat":
            return f"one warp, {mix}: cycles per instruction ({u1}/{u2}-step slope), clock64"
        return f"{_PIPE_GAP.format(what='the same mix', u1=u1, u2=u2)}; {mix}"
    if name in ("l2", "dram"):
        if kind == "lat":
            where = (
                f"{cfg.chase_l2_bytes >> 20} MiB, every line loaded once before"
                if name == "l2"
                else f"fresh random lines in {cfg.chase_window_bytes >> 20} MiB windows "
                "(TLB hits), L2 flushed before each window"
            )
            return (
                "one warp chases pointers through random 128-B lines, each step one coalesced "
                f"ld.global.cg (LDG.64, lanes 0-15 and 16-31 on the same line) whose value is "
                f"the next address; {where}; globaltimer ns per load × sm_clock_mhz"
            )
        what = (
            f"every request its own line (9 lines apart) in the {cfg.chase_l2_bytes >> 20} MiB "
            f"window of l2_scatter, each lap further on, {cfg.stream_l2_laps} laps "
            "(L2-resident, warmed first; kp_l2_lines)"
            if name == "l2"
            else f"{cfg.stream_dram_rows} rows of 1 KiB per warp (~0.5 and 1 GiB), L2 flushed "
            "before each run"
        )
        return (
            "all SMs stream ld.global.cg loads, each warp instruction one whole 128-B line, "
            f"64 warps/SM × 8 lines in flight; {what}; slope of CUDA-event time over requests "
            "per SM between the two sizes, × sm_clock_mhz"
        )
    if name == "dram_scatter" and kind == "store":
        return (
            "all SMs store with st.global.cg.u32 to the lines of the gap's loads (lane l of "
            "each warp instruction word 0 of its own fresh 128-B line: 32 lines, one sector "
            "each, partly written) in a window past the L2, flushed before each run, "
            f"{cfg.stream_dram_scatter_laps} laps; slope of CUDA-event time over warp requests "
            "per SM between the two lap counts, × sm_clock_mhz"
        )
    if name == "l2_scatter" and kind == "store":
        return (
            "all SMs store with st.global.cg.u32 to the addresses of the gap's loads (lane l of "
            "each warp instruction word 0 of its own 128-B line: 32 lines, one sector each, "
            f"partly written), in the same warm {cfg.chase_l2_bytes >> 20} MiB window, 64 "
            f"warps/SM × 8 instructions per lap, {cfg.stream_l2_laps} laps; slope of CUDA-event "
            "time over warp requests per SM between the two lap counts, × sm_clock_mhz"
        )
    if name == "l2_scatter":
        if kind == "lat":
            return (
                "one warp, each lane chasing its own pointer through random 128-B lines "
                f"({cfg.chase_l2_bytes >> 20} MiB, loaded once before; the 32 lanes start evenly "
                "spaced along one cycle), so each step is one ld.global.cg.u64 touching 32 "
                "lines, one sector each; globaltimer ns per load × sm_clock_mhz"
            )
        return (
            "all SMs load with ld.global.cg.u32, lane l of each warp instruction word 0 of its "
            f"own 128-B line (32 lines of one sector), within an L2-resident "
            f"{cfg.chase_l2_bytes >> 20} MiB window (warmed first), 64 warps/SM × 8 "
            f"instructions in flight, {cfg.stream_l2_laps} laps; slope of CUDA-event time over "
            "warp requests per SM between the two lap counts, × sm_clock_mhz"
        )
    if name == "dram_scatter":
        if kind == "lat":
            return (
                "one warp, each lane chasing its own pointer through fresh random 128-B lines "
                f"({cfg.chase_window_bytes >> 20} MiB windows, the L2 flushed before each; the 32 "
                "lanes start evenly spaced along one cycle), so each step waits for the slowest "
                "of 32 lines from DRAM; globaltimer ns per load × sm_clock_mhz"
            )
        return (
            "all SMs load with ld.global.cg.u32, lane l of each warp instruction word 0 of its "
            "own 128-B line (32 lines of one sector), each lap on lines no earlier lap touched, "
            f"in a window past the L2 (flushed before each run), 64 warps/SM × 8 instructions "
            f"in flight, {cfg.stream_dram_scatter_laps} laps; slope of CUDA-event time over "
            "warp requests per SM between the two lap counts, × sm_clock_mhz"
        )
    if name == "launch":
        threads = "/".join(str(t) for t in cfg.dispatch_threads)
        if kind == "lat":
            return (
                "CUDA-event time of a launch of the empty kernel kp_empty with one "
                f"{cfg.dispatch_threads[0]}-thread block per SM, queued behind kp_hold "
                f"({cfg.hold_us:.0f} us) so the GPU alone is timed; median of "
                f"{cfg.dispatch_repeats}, × sm_clock_mhz"
            )
        w1, w2 = cfg.dispatch_waves
        return (
            f"empty kernel kp_empty, {threads}-thread blocks, grids of {w1} and {w2} blocks per "
            "SM, each queued behind kp_hold; slope of CUDA-event time over blocks (median of "
            f"{cfg.dispatch_repeats}), median over block sizes, × SMs × sm_clock_mhz"
        )
    raise CollectError(f"unknown resource {name!r}")


# -- running: one fresh process per repeat, per-benchmark time limit ------------------------------


def collect_raw(
    names: Sequence[str],
    config: ResourceConfig,
    *,
    device_id: int = 0,
    bench_timeout_s: float = 60.0,
    startup_timeout_s: float = 180.0,
    deadline: float | None = None,
    python: str = sys.executable,
) -> dict[str, dict[str, Any]]:
    """Run benchmarks `names` in a child process; {name: raw data or {"error": text}}.

    The child (`klaraptor.collect.resources_device`) reports each benchmark as it starts and ends. A
    benchmark that raises is recorded; one that kills the process (a sticky CUDA error) or runs
    past `bench_timeout_s` (twice that for the first, which also compiles) is recorded, and the
    rest continue in a new process. Past `deadline` (time.monotonic()) the child is stopped and
    what has not run is recorded as skipped.
    """
    results: dict[str, dict[str, Any]] = {
        n: {"error": f"unknown benchmark {n!r}; known: {list(BENCHMARKS)}"}
        for n in names
        if n not in BENCHMARKS
    }
    remaining = [n for n in names if n in BENCHMARKS]
    while remaining:
        if deadline is not None and time.monotonic() >= deadline:
            for n in remaining:
                results[n] = {"error": "not run: the time budget was spent"}
            break
        events, rc, err, timed_out = _run_child(
            remaining, config, device_id, bench_timeout_s, startup_timeout_s, deadline, python
        )
        progressed = False
        for e in events:
            if e.get("event") == "done":
                results[e["name"]] = {**e["raw"], "seconds": e["seconds"]}
                progressed = True
            elif e.get("event") == "error":
                results[e["name"]] = {"error": e["error"], "seconds": e.get("seconds")}
                progressed = True
        unfinished = [
            e["name"] for e in events if e.get("event") == "start" and e["name"] not in results
        ]
        if unfinished:
            why = (
                f"timed out (limit {bench_timeout_s:.0f} s)"
                if timed_out
                else f"the benchmark process died (exit {rc}): {err}"
            )
            results[unfinished[0]] = {"error": why}
            progressed = True
        if not progressed:
            for n in remaining:
                results[n] = {
                    "error": "the benchmark process failed before its first benchmark "
                    f"(exit {rc}{', timed out' if timed_out else ''}): {err}"
                }
        remaining = [n for n in remaining if n not in results]
    return results


def _run_child(
    names: Sequence[str],
    config: ResourceConfig,
    device_id: int,
    bench_timeout_s: float,
    startup_timeout_s: float,
    deadline: float | None,
    python: str,
) -> tuple[list[dict[str, Any]], int | None, str, bool]:
    """(events, exit code, stderr tail, whether it was killed for time)."""
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    with tempfile.TemporaryDirectory() as tmp:
        log, errf = Path(tmp) / "raw.jsonl", Path(tmp) / "stderr.txt"
        cmd = [python, "-m", "klaraptor.collect.resources_device", "--out", str(log)]
        cmd += ["--device", str(device_id), "--config", json.dumps(dataclasses.asdict(config))]
        timed_out = False
        with errf.open("w") as err_fh:
            t_spawn = time.monotonic()
            proc = subprocess.Popen(cmd + list(names), env=env, stdout=err_fh, stderr=err_fh)
            seen: dict[str, float] = {}
            while proc.poll() is None:
                time.sleep(0.1)
                now = time.monotonic()
                events = _read_events(log)
                for e in events:
                    if e.get("event") == "start":
                        seen.setdefault(e["name"], now)
                ended = {e["name"] for e in events if e.get("event") in ("done", "error")}
                running = [n for n in seen if n not in ended]
                limit = bench_timeout_s * (2 if len(seen) == 1 else 1)
                if running and now - seen[running[0]] > limit:
                    timed_out = True
                elif not seen and now - t_spawn > startup_timeout_s:
                    timed_out = True
                elif deadline is not None and now > deadline:
                    timed_out = True
                if timed_out:
                    proc.kill()
                    proc.wait()
        err = errf.read_text(errors="replace")[-2000:]
        return _read_events(log), proc.returncode, err, timed_out


def _read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return events


def _pythonpath() -> str:
    src = str(Path(__file__).resolve().parents[2])
    old = os.environ.get("PYTHONPATH", "")
    return src if not old else f"{src}{os.pathsep}{old}"


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class ResourceMeasurement:
    """Per-field estimates over repeats, the raw data, and per-field provenance."""

    estimates: dict[str, Estimate]
    provenance: dict[str, Any]
    raw: list[dict[str, Mapping[str, Any]]] = field(default_factory=list)

    @property
    def values(self) -> dict[str, float]:
        """Fields that were measured (finite median)."""
        return {k: e.value for k, e in self.estimates.items() if np.isfinite(e.value)}

    def table(self) -> str:
        """One line per field: value, spread, check."""
        w = max(len(f) for f in FIELDS)
        lines = [f"{'field':<{w}} {'value':>10} {'spread':>9}  check"]
        for name in FIELDS:
            e = self.estimates.get(name)
            p = self.provenance.get(name, {})
            if e is None or not np.isfinite(e.value):
                why = [ln for ln in str(p.get("error", "not measured")).splitlines() if ln.strip()]
                lines.append(f"{name:<{w}} {'—':>10} {'':>9}  {why[-1][:120]}")
                continue
            lines.append(f"{name:<{w}} {e.value:>10.4g} {e.spread:>9.3g}  {p.get('check', '')}")
        return "\n".join(lines)


def analyse_repeats(
    raws: Sequence[Mapping[str, Mapping[str, Any]]],
    profile: DeviceProfile,
    config: ResourceConfig,
) -> ResourceMeasurement:
    """Turn the raw data of several repeats into estimates and per-field provenance."""
    clock = profile.sm_clock_mhz
    refs = expected(profile)
    samples: dict[str, list[float]] = {f: [] for f in FIELDS}
    extras: dict[str, list[dict[str, Any]]] = {b: [] for b in BENCHMARKS}
    errors: dict[str, list[str]] = {b: [] for b in BENCHMARKS}
    seconds: dict[str, list[float]] = {b: [] for b in BENCHMARKS}
    for raw in raws:
        for name in BENCHMARKS:
            r = raw.get(name)
            if r is None:
                continue
            if r.get("seconds") is not None:
                seconds[name].append(round(float(r["seconds"]), 2))
            if "error" in r:
                errors[name].append(str(r["error"])[-1500:])
                continue
            try:
                res = analyse(name, r, clock)
            except Exception as exc:  # noqa: BLE001 - one bad benchmark must not hide the rest
                errors[name].append(f"analysis failed: {type(exc).__name__}: {exc}")
                continue
            for k in (f"lat_{name}_cycles", f"gap_{name}_cycles", *extra_fields(name)):
                if k in res:
                    samples[k].append(res[k])
            extras[name].append(res["extra"])
    estimates = {f: summarize(samples[f]) for f in FIELDS}
    prov: dict[str, Any] = {}
    for name in BENCHMARKS:
        kinds = [("lat", f"lat_{name}_cycles"), ("gap", f"gap_{name}_cycles")]
        for kind, f in kinds + [("store", f) for f in extra_fields(name)]:
            e, ref = estimates[f], refs[f]
            entry: dict[str, Any] = {
                "method": method_text(name, kind, config),
                "unit": "SM cycles"
                + (
                    " per warp instruction per SM"
                    if kind == "gap"
                    and name not in ("l2", "l2_scatter", "dram", "dram_scatter", "launch")
                    else " per block per SM (all SMs receiving blocks)"
                    if kind == "gap" and name == "launch"
                    else " per warp request of 32 one-sector lines per SM (all SMs loading)"
                    if kind == "gap" and name in ("l2_scatter", "dram_scatter")
                    else " per warp store to 32 lines, one sector each, per SM (all SMs storing)"
                    if kind == "store"
                    else " per 128-B request per SM (all SMs loading)"
                    if kind == "gap"
                    else " per launch"
                    if name == "launch"
                    else ""
                ),
                "statistic": f"median over {len(e.samples)} repeats (fresh processes)",
                "samples": [round(v, 4) for v in e.samples],
                "spread": round(e.spread, 4) if np.isfinite(e.spread) else None,
                "expected": ref.value,
                "expected_range": [round(ref.lo, 3), round(ref.hi, 3)],
                "reference": ref.source,
                "check": check_value(f, e.value if np.isfinite(e.value) else None, ref),
            }
            if kind == "gap" and name in ("fp32", "fp64", "sfu", "alu", "imad", "issue"):
                entry["per_sub_partition"] = f"{SMSP_PER_SM} × gap (4 schedulers per SM)"
            if extras[name]:
                entry["diagnostics"] = _merge_extras(extras[name])
            if errors[name]:
                entry["error"] = errors[name][0]
                entry["failed_repeats"] = len(errors[name])
            if seconds[name]:
                entry["seconds"] = seconds[name]
            prov[f] = entry
    return ResourceMeasurement(estimates=estimates, provenance=prov, raw=[dict(r) for r in raws])


def _merge_extras(extras: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for e in extras for k in e})
    out: dict[str, Any] = {}
    for k in keys:
        vals = [e[k] for e in extras if k in e]
        out[k] = [round(float(v), 4) for v in vals]
    return out


def measure_resources(
    profile: DeviceProfile,
    config: ResourceConfig = ResourceConfig(),  # noqa: B008 - frozen
    *,
    repeats: int = 3,
    names: Sequence[str] = BENCHMARKS,
    device_id: int = 0,
    bench_timeout_s: float = 60.0,
    budget_s: float = 300.0,
) -> ResourceMeasurement:
    """Run the resource microbenchmarks `repeats` times, each in a fresh process, and analyse.

    Stops starting benchmarks after `budget_s`; what did not run is missing, with the reason.
    """
    deadline = time.monotonic() + budget_s
    raws = [
        collect_raw(
            names,
            config,
            device_id=device_id,
            bench_timeout_s=bench_timeout_s,
            deadline=deadline,
        )
        for _ in range(repeats)
    ]
    m = analyse_repeats(raws, profile, config)
    m.provenance["resources"] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "config": dataclasses.asdict(config),
        "repeats": repeats,
        "source": "klaraptor/cuda/resources.cu (klaraptor.collect.resources)",
        "definitions": "klaraptor.collect.resources module docstring",
    }
    return m


def run_resource_microbenchmarks(
    profile: DeviceProfile,
    config: ResourceConfig = ResourceConfig(),  # noqa: B008 - frozen
    *,
    repeats: int = 3,
) -> tuple[dict[str, float], dict[str, Any]]:
    """(field → value, provenance) for `DeviceProfile.with_microbench`, as
    `klaraptor.collect.microbench.run_microbenchmarks` returns them. Fields that failed are left out
    (they stay missing in the profile) and their provenance says why."""
    m = measure_resources(profile, config, repeats=repeats)
    return m.values, m.provenance
