"""SAAKE on unseen kernels (issue 37): the plan's rule, the device script on a machine without
ncu, and the evaluation that consumes the device run's output (exercised on a suite kernel whose
recorded counters and referee metrics stand in for a device run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor_bench.saake_unseen import make_plan, plan_kernel, unseen_dataset, write_unseen

ROOT = Path(__file__).parents[2]


def test_the_plan_follows_its_rule_from_recorded_timings_only() -> None:
    data = unseen_dataset()
    plan = make_plan()
    assert [e["kernel"] for e in plan["kernels"]] == sorted(data.kernels)
    assert len(plan["kernels"]) == 16
    for e in plan["kernels"]:
        blocks = [tuple(b) for b in e["counter_blocks"]]
        assert 4 <= len(blocks) <= 6 and len(set(blocks)) == len(blocks)
        best = e["judged"][0]
        assert best["role"] == "measured_best" and tuple(best["block"]) == blocks[0]
        # The judged block is the fastest measured at the smallest evaluation size.
        times = data.kernels[e["kernel"]].times()
        at = {tuple(b): t[0] for (D, b), t in times.items() if D.values()[0] == best["N"]}
        assert at[tuple(best["block"])] == min(at[b] for b in at if b in set(blocks) | set(at))
        assert all(tuple(j["block"]) in blocks for j in e["judged"])
    assert plan_kernel(data, "patterns.saxpy.saxpy")["counter_sizes"] == [1048576, 2097152, 4194304]


def test_the_committed_plan_is_the_rules() -> None:
    committed = json.loads((ROOT / "benchmarks/results/h200/saake_unseen_plan.json").read_text())
    assert committed["kernels"] == make_plan()["kernels"]


def test_the_device_script_without_ncu_records_the_failure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda"), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_saake_unseen.py"), str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    log = (out / "log.txt").read_text()
    assert "find ncu: FAILED" in log and "counter job files: ok" in log
    assert len(list((out / "jobs_counters").glob("job*.pkl"))) == 16
    sol = json.loads((out / "sol.json").read_text())
    assert len(sol["points"]) == 31
    assert all(v["status"] == "not profiled" for v in sol["points"].values())
    counters = json.loads((out / "counters.json").read_text())
    assert set(counters["kernels"]) == set(unseen_dataset().kernels)


def test_the_evaluation_consumes_a_device_run(tmp_path: Path) -> None:
    """A suite kernel stands in for an unseen one: its recorded counters as the device run's
    counters.json and the suite referee run's metrics (its block at N = 2048) as sol.json."""
    from klaraptor.suite.recorded import recorded_suites
    from klaraptor_bench.saake_unseen import evaluate

    name = "polybench.atax.k1"
    data = next(d for d in recorded_suites() if name in d.kernels)
    ncu = data.kernels[name].ncu
    blocks = list(dict.fromkeys([(32, 1, 1), *sorted({tuple(r[1:4]) for r in ncu})]))[:5]
    ref = json.loads((ROOT / "benchmarks/results/h200/saake_sol/sol.json").read_text())
    entry = ref["kernels"][name]
    assert entry["block"] == [32, 1, 1] and entry["D"] == [2048]
    plan = {
        "kernels": [
            {
                "kernel": name,
                "counter_sizes": [512, 1024, 1536],
                "counter_blocks": [list(b) for b in blocks],
                "judged": [{"role": "measured_best", "N": 2048, "block": [32, 1, 1]}],
            }
        ]
    }
    counters = {"kernels": {name: {"rows": [r for r in ncu if tuple(r[1:4]) in blocks]}}}
    sol = {"points": {f"{name}|measured_best": {**entry, "status": "ok"}}}
    got = evaluate(plan, counters, sol, data=data)
    row = got["unseen"][0]["rows"][0]
    assert row["status"] == "ok" and row["referee"] in ("busiest unit", "memory level")
    assert got["unseen_kernels"] == [name]
    assert got["agreement_unseen"] in (0.0, 1.0)
    assert got["unseen"][0]["time_error"]["saake_raw"] > 0
    # Without counters from the device run the kernel is reported, not judged.
    empty = evaluate(plan, {"kernels": {name: {"rows": []}}}, sol, data=data)
    assert empty["unseen"][0]["status"].startswith("no counters")
    assert empty["agreement_unseen"] is None and empty["unseen_kernels"] == []


def test_write_unseen_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(KlaraptorError, match="unseen-plan"):
        write_unseen(tmp_path, tmp_path)
