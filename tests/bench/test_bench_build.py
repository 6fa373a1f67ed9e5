"""The CPU parts of the GPU confirmation script `benchmarks/bench_build.py`: its summary of the
measured walls, the recorded ground truth it scores against, and a run where every step fails
(no GPU here) that still writes its JSON with provenance and the reasons."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from klaraptor.backends.cupy_backend import gpu_problem

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_build.py"


@pytest.fixture(scope="module")
def bb():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("bench_build", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernels_span_1d_2d_3d_and_both_suites(bb) -> None:  # noqa: ANN001
    from klaraptor import suite

    dims = {suite.get(n).dim for n in bb.KERNELS}
    assert dims == {1, 2, 3} and "polybench.conv3d.conv3d" in bb.KERNELS
    assert "polybench.gemm.gemm" in bb.KERNELS and any(n.startswith("rodinia.") for n in bb.KERNELS)


def test_summary_of_measured_walls(bb) -> None:  # noqa: ANN001
    row = {
        "build": {
            "measurement_wall_s": {"info": 1.5, "timing": 4.0, "total": 4.2},
            "plan": {"ratio": 1.4},
        },
        "tune_once": {"wall_s": 4.0},
    }
    s = bb.summarize(row)
    assert s["build_measurement_wall_s"] == pytest.approx(5.7)
    assert s["separate_runs_build_over_tune_once"] == pytest.approx(5.7 / 4.0)
    assert s["in_run_build_over_tune_once"] == 1.4
    assert "build_within_60s" not in s  # no build wall recorded
    slow = bb.summarize({"build": {"build_total_s": 61.0}, "tune_once": {}})
    fast = bb.summarize({"build": {"build_total_s": 59.0}, "tune_once": {}})
    assert slow["build_within_60s"] is False and fast["build_within_60s"] is True
    assert bb.summarize({"build": {"error": "x"}})["build_measurement_wall_s"] is None


def test_recorded_truth_is_the_shipped_exhaustive_search(bb, recorded) -> None:  # noqa: ANN001
    t = bb.recorded_truth("polybench.gemm.gemm")
    assert sorted(t) == [2048, 4096]  # 8192 is over the recorded budget
    assert len(t[2048]) == 51 and all(v > 0 for v in t[2048].values())
    assert sorted(bb.recorded_truth("rodinia.hotspot.temp")) in (
        [],
        [4096],
        [4096, 8192],
        [4096, 8192, 16384],
    )


@pytest.mark.skipif(gpu_problem() is None, reason="checks the no-GPU failure path")
def test_every_step_failing_is_recorded_not_fatal(bb, tmp_path: Path) -> None:  # noqa: ANN001
    rc = bb.main([str(tmp_path), "polybench.atax.k1", "--limit", "120"])
    out = json.loads((tmp_path / "bench_build.json").read_text())
    assert rc == 1 and {"date", "command", "commit"} <= set(out["provenance"])
    row = out["kernels"]["polybench.atax.k1"]
    assert "CuPy" in row["build"]["error"] and "CuPy" in row["tune_once"]["error"]
    assert row["summary"]["build_measurement_wall_s"] is None and "finished" in out
    assert not list(tmp_path.glob(".*.json"))  # the children's files are collected
