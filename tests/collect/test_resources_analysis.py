"""klaraptor.collect.resources on the CPU: the analysis turns raw cycle counts and timings with a
known answer back into that answer; provenance, flags and the process orchestration."""

from __future__ import annotations

import importlib.util
import json
import math
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor.collect import resources as rs
from klaraptor.core.errors import CollectError
from klaraptor.device.profile import RESOURCE_FIELDS, DeviceProfile
from klaraptor.device.resources import BENCHMARKS, resource_params

H200 = {
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
}
PROFILE = DeviceProfile.from_dict(H200)
CFG = rs.ResourceConfig()
RNG = np.random.default_rng(7)

# The answers the synthetic raw data are built from (plausible H200 values).
TRUE = {
    "fp32": (4.0, 0.25),
    "fp64": (8.0, 0.5),
    "sfu": (18.0, 2.0),
    "alu": (4.5, 0.5),
    "imad": (4.0, 0.5),
    "smem": (29.0, 1.0),
    "issue": (1.0, 0.25),
    "l2": (280.0, 4.5),
    "l2_scatter": (330.0, 60.0),
    "dram": (640.0, 7.6),
    "dram_scatter": (1100.0, 120.0),
    "launch": (5600.0, 157.0),
}


def pipe_raw(lat: float, gap: float, per_step: int, chains: int = 4, noise: float = 0.0) -> dict:
    """What resources_device.run_chain_pair records, for a pipe with this latency and gap, with a
    per-iteration loop overhead (different for latency and gap kernels) and a constant start-up
    cost that the analysis must cancel."""
    raw: dict[str, Any] = {"kind": "pipe", "per_step": per_step, "chains": chains, "warps": 32}
    raw["lat"], raw["thr"] = [], []
    for u in CFG.unrolls:
        steps = u * CFG.lat_iters * per_step
        cyc = 40 + lat * steps + 7 * CFG.lat_iters
        raw["lat"].append(
            {
                "unroll": u,
                "iters": CFG.lat_iters,
                "cycles": [cyc + noise * RNG.normal() for _ in range(3)],
            }
        )
        instr = 32 * chains * u * CFG.thr_iters * per_step
        base = 300 + gap * instr + 11 * CFG.thr_iters
        runs = [list(base + noise * RNG.normal(size=132)) for _ in range(3)]
        raw["thr"].append(
            {"unroll": u, "iters": CFG.thr_iters, "cycles": runs, "smid": list(range(132))}
        )
    return raw


def memory_raw(lat: float, gap: float, clock_mhz: float = 1980.0, warps: int = 8448) -> dict:
    """What bench_l2 / bench_dram record for a memory with this latency and per-SM gap."""
    ns_per_cycle = 1000.0 / clock_mhz
    steps = 8192
    samples = [
        {"cycles": int(lat * steps * 0.99), "ns": int(lat * steps * ns_per_cycle) + k}
        for k in range(4)
    ]
    variants = []
    for rows in (64, 128):
        req_per_sm = 8 * warps * rows / 132
        ms = (4000.0 + gap * req_per_sm * ns_per_cycle) / 1e6  # 4 µs launch overhead
        variants.append({"rows": rows, "laps": 1, "ms": [ms, ms * 1.001, ms * 0.999]})
    return {
        "kind": "memory",
        "chase": {"steps": steps, "samples": samples},
        "stream": {"variants": variants, "warps": warps, "sm_count": 132},
    }


def dispatch_raw(lat: float, gap: float, clock_mhz: float = 1980.0, sm_count: int = 132) -> dict:
    """What bench_launch records for a dispatcher with this launch latency and per-SM gap; the
    grids' times also carry a fixed cost the slope must cancel."""
    ms_per_cycle = 1.0 / (clock_mhz * 1e3)
    grids = [sm_count * w for w in CFG.dispatch_waves]
    variants = [
        {
            "threads": t,
            "grids": grids,
            "ms": [
                [(lat + g * gap / sm_count) * ms_per_cycle * f for f in (1.0, 1.001)] for g in grids
            ],
        }
        for t in CFG.dispatch_threads
    ]
    one = [lat * ms_per_cycle * f for f in (0.99, 1.0, 1.01)]
    return {"kind": "dispatch", "sm_count": sm_count, "one_per_sm": one, "variants": variants}


def full_raw(noise: float = 0.0) -> dict[str, dict]:
    per_step = {"alu": 2, "issue": 16}
    out: dict[str, dict] = {}
    for name, (lat, gap) in TRUE.items():
        if name in ("l2", "dram"):
            out[name] = memory_raw(lat, gap)
        elif name in ("l2_scatter", "dram_scatter"):
            out[name] = {**memory_raw(lat, gap), "lines_per_request": 32}
            # its stores, at twice the loads' gap
            out[name]["store_stream"] = memory_raw(lat, 2 * gap)["stream"]
        elif name == "launch":
            out[name] = dispatch_raw(lat, gap)
        else:
            chains = 1 if name == "issue" else 4
            out[name] = pipe_raw(lat, gap, per_step.get(name, 1), chains, noise)
    out["sfu"]["also"] = {"rsq": pipe_raw(20.0, 2.0, 1)}
    return out


# -- pure functions ------------------------------------------------------------------------------


def test_slope_cancels_constant_costs() -> None:
    assert rs.per_unit_slope([10, 30], [105, 145]) == pytest.approx(2.0)
    assert rs.per_unit_slope([1, 2, 3, 4], [5, 7, 9, 11]) == pytest.approx(2.0)
    with pytest.raises(CollectError, match="distinct"):
        rs.per_unit_slope([10, 10], [1, 2])
    with pytest.raises(CollectError):
        rs.per_unit_slope([10], [1])


def test_chain_latency_and_pipe_gap_recover_the_truth_despite_loop_overhead() -> None:
    raw = pipe_raw(4.0, 0.25, per_step=1)
    assert rs.chain_latency(raw["lat"], 1) == pytest.approx(4.0)
    assert rs.pipe_gap(raw["thr"], 1, 4, 32) == pytest.approx(0.25)
    raw2 = pipe_raw(4.5, 0.5, per_step=2)
    assert rs.chain_latency(raw2["lat"], 2) == pytest.approx(4.5)
    assert rs.pipe_gap(raw2["thr"], 2, 4, 32) == pytest.approx(0.5)
    # without the slope (cycles / instructions of one variant) the overhead would bias it
    v = raw["lat"][0]
    assert np.median(v["cycles"]) / (v["unroll"] * v["iters"]) > 4.3


def test_noise_is_absorbed_by_medians() -> None:
    raw = pipe_raw(4.0, 0.25, per_step=1, noise=200.0)
    assert rs.pipe_gap(raw["thr"], 1, 4, 32) == pytest.approx(0.25, rel=0.01)
    assert rs.chain_latency(raw["lat"], 1) == pytest.approx(4.0, rel=0.01)


def test_block_cycles_is_a_median_over_sms_then_launches() -> None:
    runs = [[100, 101, 5000], [99, 100, 101], [100, 102, 100]]
    assert rs.block_cycles(runs) == 100
    assert rs.duplicate_sms([0, 1, 2, 3]) == 0
    assert rs.duplicate_sms([0, 1, 1, 3, 3]) == 2


def test_memory_analysis() -> None:
    raw = memory_raw(640.0, 7.6)
    assert rs.chase_latency(raw["chase"]["samples"], 8192, 1980.0) == pytest.approx(640.0, rel=1e-3)
    assert rs.stream_gap(raw["stream"]["variants"], 8448, 132, 1980.0) == pytest.approx(7.6)
    res = rs.analyse("dram", raw, 1980.0)
    # 128 B × 132 SMs × 1.98 GHz / 7.6 cycles = 4.40 TB/s
    assert res["extra"]["stream_read_gbs"] == pytest.approx(128 * 132 * 1.98e9 / 7.6 / 1e9)
    assert res["extra"]["chase_effective_sm_clock_mhz"] == pytest.approx(1960, rel=0.01)


def test_scattered_l2_gives_lines_per_cycle_not_bandwidth() -> None:
    raw = {**memory_raw(330.0, 60.0), "lines_per_request": 32}
    res = rs.analyse("l2_scatter", raw, 1980.0)
    assert res["gap_l2_scatter_cycles"] == pytest.approx(60.0)
    assert res["extra"]["lines_per_cycle_per_sm"] == pytest.approx(32 / 60.0)
    assert "stream_read_gbs" not in res["extra"]


def test_scattered_l2_also_gives_the_gap_of_its_stores() -> None:
    raw = {**memory_raw(330.0, 60.0), "lines_per_request": 32}
    raw["store_stream"] = memory_raw(330.0, 130.0)["stream"]
    res = rs.analyse("l2_scatter", raw, 1980.0)
    assert res["gap_l2_scatter_cycles"] == pytest.approx(60.0)
    assert res["gap_l2_scatter_store_cycles"] == pytest.approx(130.0)
    assert rs.extra_fields("l2_scatter") == ("gap_l2_scatter_store_cycles",)
    assert rs.extra_fields("dram_scatter") == ("gap_dram_scatter_store_cycles",)
    assert rs.extra_fields("dram") == ()
    # without the store stream (a run before it was measured) the field is absent, not zero
    older = {k: v for k, v in raw.items() if k != "store_stream"}
    assert "gap_l2_scatter_store_cycles" not in rs.analyse("l2_scatter", older, 1980.0)


def test_chase_links_walk_the_lines_in_order() -> None:
    base = 0x7F0000000000
    lines = np.array([5, 2, 9, 0, 7])
    idx, val = rs.chase_links(base, lines)
    memory = dict(zip(idx.tolist(), val.tolist()))
    for lane in range(32):
        addr = base + int(lines[0]) * 128 + 8 * (lane % 16)
        visited = []
        for _ in range(2 * len(lines)):
            visited.append((addr - base) // 128)
            assert (addr - base) % 128 == 8 * (lane % 16)  # stays on its word: one 128-B line
            addr = memory[(addr - base) // 8]
        assert visited == [*lines.tolist(), *lines.tolist()]


def test_summarize() -> None:
    e = rs.summarize([3.0, 1.0, 2.0, float("nan")])
    assert (e.value, e.spread, e.samples) == (2.0, 2.0, (3.0, 1.0, 2.0))
    assert e.rel_spread == pytest.approx(1.0)
    assert math.isnan(rs.summarize([]).value)


def test_analyse_every_benchmark() -> None:
    raws = full_raw()
    for name, (lat, gap) in TRUE.items():
        res = rs.analyse(name, raws[name], 1980.0)
        assert res[f"lat_{name}_cycles"] == pytest.approx(lat, rel=1e-3), name
        assert res[f"gap_{name}_cycles"] == pytest.approx(gap, rel=1e-3), name
    sfu = rs.analyse("sfu", raws["sfu"], 1980.0)
    assert sfu["extra"]["lat_rsq_cycles"] == pytest.approx(20.0)
    with pytest.raises(CollectError, match="unknown raw benchmark kind"):
        rs.analyse("fp32", {"kind": "other"}, 1980.0)


# -- repeats, provenance, flags ----------------------------------------------------------------


def test_analyse_repeats_gives_medians_spreads_and_provenance() -> None:
    raws = [full_raw(noise=50.0) for _ in range(3)]
    raws[1]["fp64"] = {"error": "Traceback ...\nLaunchError: boom", "seconds": 0.4}
    m = rs.analyse_repeats(raws, PROFILE, CFG)
    assert set(m.estimates) == {f for f, _, _ in RESOURCE_FIELDS}
    for name, (lat, gap) in TRUE.items():
        assert m.estimates[f"lat_{name}_cycles"].value == pytest.approx(lat, rel=0.01)
        assert m.estimates[f"gap_{name}_cycles"].value == pytest.approx(gap, rel=0.01)
    for name in ("l2_scatter", "dram_scatter"):
        store = m.estimates[f"gap_{name}_store_cycles"].value
        assert store == pytest.approx(2 * TRUE[name][1], rel=0.01)
    assert "fresh 128-B line" in m.provenance["gap_dram_scatter_store_cycles"]["method"]
    assert "per warp store to 32 lines" in m.provenance["gap_l2_scatter_store_cycles"]["unit"]
    assert "st.global.cg" in m.provenance["gap_l2_scatter_store_cycles"]["method"]
    assert len(m.estimates["gap_fp64_cycles"].samples) == 2
    p = m.provenance["gap_fp64_cycles"]
    assert "boom" in p["error"] and p["failed_repeats"] == 1
    for f, _, _ in RESOURCE_FIELDS:
        entry = m.provenance[f]
        assert entry["method"] and entry["unit"].startswith("SM cycles") and entry["reference"]
        assert entry["check"] == "ok", (f, entry["check"])
    assert "per 128-B request" in m.provenance["gap_dram_cycles"]["unit"]
    assert "per block per SM" in m.provenance["gap_launch_cycles"]["unit"]
    assert m.provenance["lat_launch_cycles"]["unit"] == "SM cycles per launch"
    assert m.provenance["gap_fp32_cycles"]["per_sub_partition"].startswith("4 ×")
    assert m.provenance["gap_fp32_cycles"]["diagnostics"]["shared_sm_blocks"] == [0, 0, 0]
    table = m.table()
    assert "gap_dram_cycles" in table and "ok" in table
    assert set(m.values) == set(m.estimates)
    json.dumps(m.provenance)  # JSON-safe for the profile


def test_a_benchmark_that_always_fails_is_missing_not_zero() -> None:
    raws = [full_raw() for _ in range(2)]
    for r in raws:
        r["smem"] = {"error": "sticky CUDA error"}
    m = rs.analyse_repeats(raws, PROFILE, CFG)
    assert "lat_smem_cycles" not in m.values and "gap_smem_cycles" not in m.values
    assert m.provenance["lat_smem_cycles"]["check"].startswith("OFF: lat_smem_cycles was not")
    assert "sticky CUDA error" in m.table()
    prof = PROFILE.with_microbench(provenance=m.provenance, **m.values)
    assert {"lat_smem_cycles", "gap_smem_cycles"} <= set(prof.missing_microbench)
    assert "gap_dram_cycles" not in prof.missing_microbench


def test_values_off_the_public_figures_are_flagged() -> None:
    ref = rs.expected(PROFILE)
    assert rs.check_value("gap_fp32_cycles", 0.25, ref["gap_fp32_cycles"]) == "ok"
    off = rs.check_value("gap_fp32_cycles", 0.5, ref["gap_fp32_cycles"])
    assert off.startswith("OFF: 0.5 outside") and "32/128" in off
    # DRAM: nothing can beat the theoretical peak (4814 GB/s → 6.95 cycles per request per SM)
    floor = 128 * 132 * 1.98e9 / (PROFILE.peak_dram_bandwidth_gbs * 1e9)
    assert ref["gap_dram_cycles"].lo == pytest.approx(floor)
    assert rs.check_value("gap_dram_cycles", 6.0, ref["gap_dram_cycles"]).startswith("OFF")
    assert rs.check_value("gap_dram_cycles", 7.6, ref["gap_dram_cycles"]) == "ok"
    assert rs.check_value("gap_l2_cycles", 8.0, ref["gap_l2_cycles"]).startswith("OFF")
    assert rs.check_value("x", float("nan"), ref["gap_l2_cycles"]).startswith("OFF")


def test_method_texts() -> None:
    for name in BENCHMARKS:
        for kind in ("lat", "gap"):
            assert len(rs.method_text(name, kind, CFG)) > 40
    assert "16- and 32-step" in rs.method_text("fp32", "gap", CFG)
    with pytest.raises(CollectError):
        rs.method_text("tensor", "lat", CFG)


def test_resource_params() -> None:
    with pytest.raises(CollectError, match="lat_fp32_cycles"):
        resource_params(PROFILE)
    values = {f"lat_{r}_cycles": lat for r, (lat, _) in TRUE.items()}
    values |= {f"gap_{r}_cycles": gap for r, (_, gap) in TRUE.items()}
    params = resource_params(PROFILE.with_microbench(**values))
    assert params["dram"] == (640.0, 7.6) and params["issue"] == (1.0, 0.25)
    assert list(params) == list(BENCHMARKS)


def test_pipes_match_the_cuda_source() -> None:
    src = rs.source()
    for name in rs.PIPES:  # kernels made by the KP_PIPE macro, or written out (smem)
        assert f"KP_PIPE({name}," in src or f"kp_lat_{name}(" in src, name
    assert "kp_issue_mix" in src and "#define KP_K 4" in src
    assert rs.CHAINS_PER_THREAD == 4


# -- the child process -----------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_without_cupy_every_benchmark_reports_why() -> None:
    res = rs.collect_raw(["fp32", "dram", "bogus"], rs.ResourceConfig.quick())
    assert "unknown benchmark 'bogus'" in res["bogus"]["error"]
    for name in ("fp32", "dram"):
        assert "failed before its first benchmark" in res[name]["error"]
        assert "CuPy" in res[name]["error"]


STAND_IN = r"""#!{python}
# Stands in for the Python interpreter running klaraptor.collect.resources_device: it speaks the
# same event protocol; "fp64" kills the process, "alu" hangs, "smem" raises.
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--out") + 1]
names = [a for a in args[args.index("--config") + 2:]]
def emit(e):
    with open(out, "a") as fh:
        fh.write(json.dumps(e) + "\n")
for n in names:
    emit({{"event": "start", "name": n}})
    if n == "fp64":
        os._exit(3)
    if n == "alu":
        time.sleep(60)
    if n == "smem":
        emit({{"event": "error", "name": n, "error": "ValueError: bad", "seconds": 0.1}})
        continue
    emit({{"event": "done", "name": n, "raw": {{"kind": "pipe", "pid": os.getpid()}}, "seconds": 0.1}})
"""


def test_collect_raw_survives_crashes_and_hangs(tmp_path: Path) -> None:
    exe = tmp_path / "python-stand-in"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    names = ["fp32", "fp64", "sfu", "alu", "smem", "dram"]
    res = rs.collect_raw(names, CFG, bench_timeout_s=1.0, python=str(exe))
    assert list(res) != [] and set(res) == set(names)
    assert res["fp32"]["kind"] == "pipe"
    assert "died (exit 3)" in res["fp64"]["error"]
    assert "timed out" in res["alu"]["error"]
    assert res["smem"]["error"] == "ValueError: bad"
    # the benchmarks after a crash ran in new processes
    pids = {res[n]["pid"] for n in ("fp32", "sfu", "dram")}
    assert len(pids) == 3


def test_collect_raw_stops_at_the_deadline(tmp_path: Path) -> None:
    import time

    exe = tmp_path / "python-stand-in"
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    t0 = time.monotonic()
    res = rs.collect_raw(
        ["fp32", "alu", "dram"],
        CFG,
        bench_timeout_s=30.0,
        deadline=time.monotonic() + 1.5,
        python=str(exe),
    )
    assert time.monotonic() - t0 < 10
    assert res["fp32"]["kind"] == "pipe"
    assert "timed out" in res["alu"]["error"]
    assert res["dram"]["error"] == "not run: the time budget was spent"
