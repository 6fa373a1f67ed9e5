"""SAAKE's referee (Nsight Compute units), the bottlenecks.json maker, the device script on a
machine without ncu, `klaraptor explain`'s bottleneck line, and the search helpers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor.models.saake.ops import RESOURCES
from klaraptor_bench.referee import (
    METRICS,
    UNIT_METRIC,
    UNIT_OF,
    agreement,
    counter_units,
    judge,
    top_unit,
)
from klaraptor_bench.saake_eval import _neighbours, bottlenecks, write_bottlenecks

ROOT = Path(__file__).parents[2]
FIXTURE = Path(__file__).parent / "data" / "saake_sol_fixture.json"


def test_every_resource_maps_to_an_ncu_unit() -> None:
    assert set(UNIT_OF) == set(RESOURCES)
    assert set(UNIT_OF.values()) <= set(UNIT_METRIC) | {"none"}
    assert all(m in METRICS for m in UNIT_METRIC.values())


def test_the_dispatcher_agrees_only_when_every_unit_is_idle() -> None:
    idle = {UNIT_METRIC["l2"]: 35.0, UNIT_METRIC["issue"]: 12.0}
    busy = {UNIT_METRIC["l2"]: 85.0, UNIT_METRIC["issue"]: 12.0}
    got = judge("launch", "throughput", idle)
    assert got["match"] is True and got["saake_unit"] == "none"
    assert judge("launch", "throughput", busy)["match"] is False


def test_counter_units_of_a_recorded_launch(recorded) -> None:  # noqa: ANN001
    from klaraptor.device.profile import recorded_profile

    profile = recorded_profile("h200")
    rows = recorded.kernels["polybench.gemm.gemm"].ncu
    big = max(r[0] for r in rows)
    raw = next(r[-1] for r in rows if r[0] == big and tuple(r[1:4]) == (32, 8, 1))
    pct = counter_units(raw, profile)
    assert {"issue", "dram", "l2", "l1tex"} <= set(pct)
    assert all(0.0 <= v <= 150.0 for v in pct.values())
    # DRAM percent is bytes over time over the measured bandwidth, nothing else.
    rd, wr = raw["dram__bytes_read.sum"], raw["dram__bytes_write.sum"]
    want = 100 * (rd + wr) / raw["gpu__time_duration.sum"] / profile.dram_bandwidth_gbs
    assert pct["dram"] == pytest.approx(want, rel=1e-3)


def test_judge_and_agreement() -> None:
    raw = {UNIT_METRIC["l2"]: 81.0, UNIT_METRIC["dram"]: 40.0, UNIT_METRIC["issue"]: 12.0}
    assert top_unit(raw) == ("l2", 81.0)
    hit = judge("l2", "throughput", raw)
    assert hit["match"] and hit["mode_agrees"] and hit["ncu_mode"] == "throughput"
    miss = judge("fp32", "latency", raw)
    assert miss["match"] is False and miss["saake_unit"] == "fma_pipe"
    none = judge("l2", "latency", {})
    assert none["match"] is None
    summary = agreement([hit, miss, none])
    assert summary["kernels_judged"] == 2 and summary["agreement"] == 0.5


def test_the_l2_is_judged_by_its_request_parts_and_the_old_rule_is_kept_beside() -> None:
    from klaraptor_bench.referee import L2_THROUGHPUT_METRIC, UNIT_METRICS

    # A DRAM-bound stream as the H200 shows it: the L2's fills and fabric push lts__throughput
    # to the DRAM percentage while the SMs' requests keep the L2 at 44 %.
    tags = UNIT_METRICS["l2"][1]
    raw = {UNIT_METRIC["dram"]: 83.0, L2_THROUGHPUT_METRIC: 88.0, UNIT_METRIC["l2"]: 39.0}
    raw[tags] = 44.0
    got = judge("dram", "throughput", raw)
    assert got["ncu_top_unit"] == "dram" and got["match"] and got["l2_rule"] == "requests"
    assert got["ncu_units_pct"]["l2"] == 44.0  # the larger part: tag lookups
    assert got["ncu_top_unit_lts_throughput"] == "l2" and got["match_lts_throughput"] is False
    # A record made before the request parts were collected is judged by lts__throughput, and
    # says so; a record without lts__throughput has no old-rule verdict to count.
    legacy = judge("l2", "throughput", {L2_THROUGHPUT_METRIC: 88.0, UNIT_METRIC["dram"]: 83.0})
    assert legacy["l2_rule"] == "lts__throughput" and legacy["ncu_top_unit"] == "l2"
    counters = judge("l2", "throughput", {UNIT_METRIC["l2"]: 70.0})
    assert "match_lts_throughput" not in counters
    summary = agreement([got, legacy, counters])
    assert summary["agreement"] == 1.0 and summary["agreement_lts_throughput"] == 0.5


def test_the_referee_names_the_unit_each_reference_kernel_saturates() -> None:
    """The H200 run of scripts/device_referee_check.py: kernels whose bottleneck is known."""
    from klaraptor_bench.referee import REFERENCE_UNIT, check_references

    check = json.loads(
        (ROOT / "benchmarks" / "results" / "h200" / "referee_check" / "check.json").read_text()
    )
    got = check_references(check)
    assert got["latency_kernels_checked"] == 0  # no latencies given: not judged
    rows = {r["kernel"]: r for r in got["kernels"]}
    assert set(rows) == set(REFERENCE_UNIT) and got["kernels_checked"] == len(REFERENCE_UNIT)
    wrong = {k for k, r in rows.items() if not r["right"]}
    # An FFMA stream fills the issue slots (one warp instruction a cycle) as it fills the FMA
    # pipe; the counters cannot tell them apart, and the issue reads higher.
    assert wrong == {"thr_fp32"} and rows["thr_fp32"]["named"] == "issue"
    # With lts__throughput as the L2's metric every DRAM-bound stream was named the L2.
    for case in ("stream_dram", "copy4_dram", "triad_dram"):
        assert rows[case]["named_lts_throughput"] == "l2"
        assert rows[case]["lts_throughput_pct"] >= rows[case]["units_pct"]["dram"]
    # The latency references: one warp of pointer chases, every unit far below 60 %; the
    # second referee names the level each chase runs through.
    lat = {"smem": 23.0, "l2": 290.0, "dram": 705.0}
    got = check_references(check, lat)
    assert got["latency_kernels_checked"] == 3 and got["latency_named_right"] == 1.0
    for r in got["latency_kernels"]:
        assert r["ncu_top_pct"] < 60 and r["ncu_top_stall"] == "long_scoreboard", r
        assert r["ncu_load_shares"][r["level"]] > 0.95, r


def test_the_supplementary_stall_check_judges_latency_bound_calls() -> None:
    from klaraptor_bench.referee import RESOURCE_CLASS, STALL_CLASS, STALL_METRIC

    assert set(RESOURCE_CLASS) == set(RESOURCES)
    assert set(RESOURCE_CLASS.values()) - {None} <= set(STALL_CLASS.values())
    # Every unit idle: the top unit (L1/TEX at 13 %) cannot judge an L2-latency call; warps
    # waiting on global-memory results (long scoreboard) agree with it.
    raw = {UNIT_METRIC["l1tex"]: 13.0, UNIT_METRIC["l2"]: 3.0}
    raw |= {STALL_METRIC.format("long_scoreboard"): 9.0, STALL_METRIC.format("wait"): 1.0}
    got = judge("l2", "latency", raw)
    assert got["match"] is False and got["ncu_mode"] == "latency"
    assert got["ncu_top_stall"] == "long_scoreboard" and got["stall_agrees"] is True
    assert got["ncu_top_stall_share"] == pytest.approx(0.9)
    assert judge("smem", "latency", raw)["stall_agrees"] is False
    assert judge("launch", "latency", raw)["stall_agrees"] is None  # not judged by stalls
    assert "stall_agrees" not in judge("l2", "latency", {UNIT_METRIC["l2"]: 3.0})
    busy = judge("l2", "throughput", {UNIT_METRIC["l2"]: 81.0})
    whole = agreement([got, busy, judge("launch", "latency", raw)])
    assert whole["matched_by_launch_rule"] == 1  # every unit below 60 %: `launch` agrees
    sup = whole["supplementary"]
    assert sup["throughput_bound_kernels"] == 1 and sup["throughput_bound_agreement"] == 1.0
    assert sup["latency_bound_kernels"] == 2 and sup["latency_bound_stall_judged"] == 1
    assert sup["latency_bound_stall_agreement"] == 1.0


def _choice(kernel: str, block: list[int], bottleneck: str, mode: str) -> dict:
    return {
        "kernel": kernel,
        "N": 2048,
        "D": [2048],
        "block": block,
        "sensitivity": {"bottleneck": bottleneck, "mode": mode, "stands_out": True},
    }


def test_bottlenecks_json_from_a_real_format_sol_fixture(tmp_path: Path) -> None:
    sol = json.loads(FIXTURE.read_text())
    choices = [
        _choice("polybench.gemm.gemm", [32, 8, 1], "smem", "throughput"),
        _choice("polybench.atax.k1", [256, 1, 1], "dram", "throughput"),
        _choice("rodinia.srad.k1", [256, 1, 1], "issue", "throughput"),
        _choice("polybench.mvt.k1", [128, 1, 1], "l2", "latency"),
    ]
    out = bottlenecks(choices, sol)
    rows = {r["kernel"]: r for r in out["kernels"]}
    assert rows["polybench.gemm.gemm"]["match"] is True  # l1tex is its busiest unit
    assert rows["polybench.gemm.gemm"]["ncu_top_unit"] == "l1tex"
    assert rows["polybench.atax.k1"]["match"] is False  # ncu: l1tex, saake: dram
    assert rows["rodinia.srad.k1"]["status"] == "ncu profiled another block"
    assert rows["polybench.mvt.k1"]["status"].startswith("refused")
    assert out["kernels_judged"] == 2 and out["agreement"] == 0.5
    (tmp_path / "saake_choices.json").write_text(json.dumps({"kernels": choices}))
    (tmp_path / "sol.json").write_text(json.dumps(sol))
    written = write_bottlenecks(tmp_path, tmp_path / "sol.json")
    assert json.loads((tmp_path / "bottlenecks.json").read_text())["agreement"] == 0.5
    assert written["provenance"]["command"].startswith("klaraptor bench saake")
    with pytest.raises(KlaraptorError, match="device_saake_sol"):
        write_bottlenecks(tmp_path, tmp_path / "missing.json")


def test_device_script_without_ncu_records_the_failure(tmp_path: Path) -> None:
    choices = tmp_path / "choices.json"
    choices.write_text(json.dumps({"kernels": [_choice("polybench.atax.k1", [256, 1, 1], "smem", "throughput")]}))  # fmt: skip
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_saake_sol.py"), str(out),
         "--choices", str(choices), "--limit", "5"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    sol = json.loads((out / "sol.json").read_text())
    assert sol["kernels"]["polybench.atax.k1"]["status"].startswith("not profiled")
    log = (out / "log.txt").read_text()
    assert "find ncu: FAILED" in log and "job files: ok" in log
    assert (out / "jobs" / "job00.pkl").is_file()


def test_bench_saake_writes_the_referee_check(tmp_path: Path) -> None:
    from klaraptor_bench.saake_eval import write_referee_check

    check = ROOT / "benchmarks" / "results" / "h200" / "referee_check" / "check.json"
    got = write_referee_check(tmp_path, check)
    written = json.loads((tmp_path / "referee_check.json").read_text())
    assert written["named_right"] == got["named_right"] == 11 / 12
    assert (
        written["check_provenance"]["commit"]
        and "--referee-check" in written["provenance"]["command"]
    )
    with pytest.raises(KlaraptorError, match="device_referee_check"):
        write_referee_check(tmp_path, tmp_path / "missing.json")


def test_referee_check_without_ncu_records_the_failure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_referee_check.py"), str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    check = json.loads((out / "check.json").read_text())
    assert all(v["status"].startswith("not profiled") for v in check["kernels"].values())
    assert "ncu not found" in (out / "log.txt").read_text()
    from klaraptor_bench.referee import check_references

    assert check_references(check)["kernels_checked"] == 0


def test_neighbours_are_one_doubling_or_halving_away() -> None:
    cands = [(32, 8, 1), (64, 8, 1), (16, 8, 1), (32, 16, 1), (32, 4, 1), (64, 4, 1)]
    assert sorted(_neighbours((32, 8, 1), cands)) == sorted(
        [(64, 8, 1), (16, 8, 1), (32, 16, 1), (32, 4, 1)]
    )


def test_explain_prints_the_bottleneck(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    from klaraptor.cli import main

    monkeypatch.setenv("KLARAPTOR_HOME", str(tmp_path))
    store = str(tmp_path / "s.sqlite")
    assert main(["--store", store, "import-recorded", "--kernels", "polybench.atax.k1"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "explain", "polybench.atax.k1", "N=4096", "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^bottleneck: \w+ \((latency|throughput)-bound\)", text, re.M) or re.search(
        r"^bottleneck: none stands out", text, re.M
    )
    assert "sensitivities ΔT/T per ±10%" in text


def test_the_second_referee_names_the_level_a_latency_bound_kernels_loads_wait_on() -> None:
    from klaraptor_bench.referee import HIT_RATE_METRICS, STALL_METRIC, latency_level

    lat = {"smem": 23.0, "l2": 290.0, "dram": 705.0}
    l1, l2 = HIT_RATE_METRICS["l1"][0], HIT_RATE_METRICS["l2"][0]
    # Half the sectors hit the L1, but each L2 hit waits 12x longer: the L2 is named.
    got = latency_level({l1: 50.0, l2: 95.0}, lat)
    assert got["ncu_latency_level"] == "l2"
    assert got["ncu_load_shares"] == {"smem": 0.5, "l2": 0.475, "dram": 0.025}
    assert latency_level({l1: 99.0, l2: 50.0}, lat)["ncu_latency_level"] == "smem"
    assert latency_level({l1: 0.0, l2: 20.0}, lat)["ncu_latency_level"] == "dram"
    # The fallback metrics serve where the first are missing; no hit rates, no verdict.
    assert latency_level({HIT_RATE_METRICS["l1"][1]: 0.0, l2: 100.0}, lat)
    assert latency_level({l2: 100.0}, lat) == {}
    # judge: only a latency-bound kernel whose warps wait longest on memory results is leveled.
    raw = {UNIT_METRIC["l1tex"]: 31.0, l1: 5.0, l2: 98.0}
    raw |= {STALL_METRIC.format("long_scoreboard"): 9.0, STALL_METRIC.format("wait"): 1.0}
    got = judge("l2", "latency", raw, lat)
    assert got["match"] is False and got["level_agrees"] is True
    assert judge("dram", "latency", raw, lat)["level_agrees"] is False
    assert judge("launch", "latency", raw, lat)["level_agrees"] is None
    assert "level_agrees" not in judge("l2", "latency", raw)  # no latencies given
    busy = raw | {UNIT_METRIC["l1tex"]: 81.0}
    assert "level_agrees" not in judge("smem", "throughput", busy, lat)
    waits = raw | {STALL_METRIC.format("wait"): 20.0}
    assert "level_agrees" not in judge("l2", "latency", waits, lat)
    sup = agreement([got, judge("smem", "throughput", busy, lat)])["supplementary"]
    assert sup["latency_bound_level_judged"] == 1 and sup["latency_bound_level_agreement"] == 1.0
    assert sup["agreement_with_level_referee"] == 1.0


def test_the_adopted_referee_judges_latency_verdicts_by_the_memory_level() -> None:
    """Issue 37: throughput-bound verdicts by the busiest unit, latency-bound ones by the memory
    level where it applies (no unit at 60 %, warps waiting on memory results), else the busiest
    unit."""
    from klaraptor_bench.referee import HIT_RATE_METRICS, STALL_METRIC, referee_verdict

    lat = {"smem": 23.0, "l2": 290.0, "dram": 705.0}
    l1, l2 = HIT_RATE_METRICS["l1"][0], HIT_RATE_METRICS["l2"][0]
    # Loads from the L2 (5 % L1 hits, 98 % L2 hits), warps waiting on them, L1/TEX busiest at 31 %.
    raw = {UNIT_METRIC["l1tex"]: 31.0, UNIT_METRIC["l2"]: 20.0, l1: 5.0, l2: 98.0}
    raw |= {STALL_METRIC.format("long_scoreboard"): 9.0, STALL_METRIC.format("wait"): 1.0}
    got = judge("l2", "latency", raw, lat)
    assert got["match"] is False and got["referee"] == "memory level" and got["referee_match"]
    # The same call made throughput-bound is the busiest unit's to judge: L1/TEX, not the L2.
    thr = judge("l2", "throughput", raw, lat)
    assert thr["referee"] == "busiest unit" and thr["referee_match"] is False
    assert judge("smem", "throughput", raw, lat)["referee_match"] is True
    # A latency verdict on a resource that is not a memory level disagrees where the level judges.
    assert judge("imad", "latency", raw, lat)["referee_match"] is False
    # `launch` keeps the 60 % rule; a busy unit or a non-memory stall hands back to the busiest.
    assert judge("launch", "latency", raw, lat)["referee"] == "busiest unit"
    assert judge("launch", "latency", raw, lat)["referee_match"] is True
    busy = raw | {UNIT_METRIC["l2"]: 75.0}
    assert judge("l2", "latency", busy, lat)["referee"] == "busiest unit"
    assert judge("l2", "latency", busy, lat)["referee_match"] is True
    waits = raw | {STALL_METRIC.format("wait"): 20.0}
    assert judge("l2", "latency", waits, lat)["referee"] == "busiest unit"
    assert referee_verdict("latency", True, None) == {
        "referee": "busiest unit",
        "referee_match": True,
    }
    summary = agreement([got, thr, judge("launch", "latency", raw, lat)])
    assert summary["agreement"] == pytest.approx(2 / 3)
    assert summary["agreement_busiest_unit"] == pytest.approx(1 / 3)
    assert summary["judged_by_memory_level"] == 1 and "latency-bound" in summary["referee"]


def test_table1_headlines_the_raw_error_beside_the_papers() -> None:
    from klaraptor_bench.saake_eval import PAPER_RAW_ERROR_PCT, KernelEval, table1

    errs = [0.1, 0.4]
    results = []
    for k, e in enumerate(errs):
        r = KernelEval(f"k{k}", n_points=3)
        r.errors = {
            "saake": e / 2,
            "saake_raw": e,
            "saake_default_block": e / 4,
            "saake_raw_default_block": e / 2,
        }
        results.append(r)
    md, data = table1(results)
    assert data["raw_error_geomean_pct"] == pytest.approx(20.0)  # sqrt(10 * 40)
    assert data["calibrated_error_geomean_pct"] == pytest.approx(10.0)
    assert data["raw_error_default_block_geomean_pct"] == pytest.approx(10.0)
    assert data["paper_raw_error_geomean_pct"] == PAPER_RAW_ERROR_PCT
    assert md.startswith("**Raw emulation (no calibration)") and "11.8 %" in md
