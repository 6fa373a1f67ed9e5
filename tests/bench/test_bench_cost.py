"""The CPU parts of `benchmarks/bench_cost.py` (issue 33): its summary, the merge of the first-call
figures, and its parent loop against real child processes that answer, crash and hang (a crash
or a hang costs that kernel only), plus a real `--serve` child on this GPU-less machine."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cost.py"


@pytest.fixture(scope="module")
def bc():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("bench_cost", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernels_are_suite_kernels_at_least_eight(bc) -> None:  # noqa: ANN001
    from klaraptor import suite

    assert len(bc.KERNELS) >= 8
    for name in bc.KERNELS:
        spec = suite.get(name)
        assert max(spec.meta["train_sizes"]) < min(spec.meta["eval_sizes"]), name
    assert {suite.get(n).dim for n in bc.KERNELS} == {1, 2, 3}


def _rec(kernel: str, build: float, kt: float, sweep: float, rs: list[dict]) -> dict:
    return {
        "kernel": kernel,
        "build": {"wall_s": build},
        "kernel_tuner": {"wall_s": kt},
        "event_sweep": {"wall_s": sweep},
        "build_over_kernel_tuner": build / kt,
        "sweep_over_kernel_tuner": sweep / kt,
        "pairs": [{"N": 1, "r": r} for r in rs],
    }


def test_summary(bc) -> None:  # noqa: ANN001
    recs = [
        _rec("a", 2.0, 4.0, 0.2, [{"klaraptor": 1.0, "event_sweep": 1.1, "kernel_tuner": None}]),
        _rec("b", 4.0, 2.0, 0.4, [{"klaraptor": 1.21, "event_sweep": 1.0, "kernel_tuner": 1.0}]),
        {"kernel": "c", "error": "timed out after 60 s"},
    ]
    s = bc.summarize(recs)
    assert s["kernels_ok"] == 2 and s["kernels_with_ratio"] == 2
    assert s["geomean_build_over_kernel_tuner"] == pytest.approx(1.0)
    assert s["max_build_over_kernel_tuner"] == pytest.approx(2.0) and s["worst_kernel"] == "b"
    assert s["geomean_build_over_sweep"] == pytest.approx(10.0)
    q = s["choice_quality"]
    assert q["klaraptor"]["geomean_r"] == pytest.approx(1.1)
    assert q["klaraptor"]["within_5pct"] == 0.5
    assert q["kernel_tuner"]["pairs"] == 1  # a missing choice is not a pair
    assert bc.summarize([])["geomean_build_over_kernel_tuner"] is None


def test_geomean_skips_missing_and_infinite(bc) -> None:  # noqa: ANN001
    assert bc.geomean([2.0, None, math.inf, 8.0]) == pytest.approx(4.0)
    assert bc.geomean([None]) is None


def test_merge_first_call(bc, tmp_path: Path) -> None:  # noqa: ANN001
    report: dict = {}
    bc.merge_first_call(report, tmp_path / "missing.json")
    assert report == {}
    (tmp_path / "fc.json").write_text(
        json.dumps({"first_call_s": {"cupy": 1.5}, "frontends": {"cupy": {"rc": 0}}})
    )
    bc.merge_first_call(report, tmp_path / "fc.json")
    assert report["first_call_s"] == {"cupy": 1.5}
    assert report["first_call"]["frontends"]["cupy"]["rc"] == 0


# A child speaking the --serve protocol: answers "ok*", dies on "crash", never answers "hang".
FAKE = textwrap.dedent(
    """
    import json, os, sys, time
    print("noise that is not a result", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if name == "crash":
            os._exit(3)
        if name == "hang":
            time.sleep(60)
        print("BENCH_COST_RESULT " + json.dumps({"kernel": name, "pid": os.getpid()}), flush=True)
    """
)


def test_run_all_replaces_a_crashed_or_hung_child(bc, tmp_path: Path) -> None:  # noqa: ANN001
    seen: list[int] = []
    recs = bc.run_all(
        ["ok1", "ok2", "crash", "ok3", "hang", "ok4"],
        [sys.executable, "-c", FAKE],
        limit_s=60,
        step_s=3,
        log=tmp_path / "child.log",
        on_record=lambda rs: seen.append(len(rs)),
    )
    by = {r["kernel"]: r for r in recs}
    assert seen == [1, 2, 3, 4, 5, 6]
    assert "error" not in by["ok1"] and by["ok1"]["pid"] == by["ok2"]["pid"]  # one warm child
    assert by["crash"]["crashed"] and "exit 3" in by["crash"]["error"]
    assert by["ok3"]["pid"] != by["ok1"]["pid"]  # replaced after the crash
    assert by["hang"]["hung"] and "timed out" in by["hang"]["error"]
    assert by["hang"]["step_wall_s"] < 10
    assert "error" not in by["ok4"] and by["ok4"]["pid"] != by["ok3"]["pid"]


def test_run_all_records_kernels_past_the_limit(bc, tmp_path: Path) -> None:  # noqa: ANN001
    recs = bc.run_all(
        ["ok1", "ok2"], [sys.executable, "-c", FAKE], limit_s=1, step_s=3, log=tmp_path / "l"
    )
    assert all("time limit" in r["error"] for r in recs)


def test_real_serve_child_without_a_gpu_records_the_failure(tmp_path: Path) -> None:
    from klaraptor.backends.cupy_backend import gpu_problem

    if gpu_problem() is None:
        pytest.skip("a GPU is present: the GPU run is the device script's")
    out = tmp_path / "out"
    import subprocess

    p = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "patterns.saxpy.saxpy", "no.such.kernel"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "bench_cost.json").read_text())
    assert [r["kernel"] for r in report["kernels"]] == ["patterns.saxpy.saxpy", "no.such.kernel"]
    assert all(r["error"] for r in report["kernels"])
    assert "no.such.kernel" in report["kernels"][1]["error"]
    assert report["provenance"]["commit"] and report["geomean_build_over_kernel_tuner"] is None
