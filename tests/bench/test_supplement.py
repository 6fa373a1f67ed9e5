"""Issue 36's supplement: what the recorded data lacks, the device script's race (on a fake GPU),
and the merge into the report, on SYNTHETIC rows shaped like the script's output (test fixtures
only: the committed tables come from the device run)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import types
from pathlib import Path

import pytest

from klaraptor.core.errors import KlaraptorError
from klaraptor.suite.recorded import load_recorded, recorded_path
from klaraptor_bench import report as rp
from klaraptor_bench import supplement as sp

ROOT = Path(__file__).resolve().parents[2]
GEMM = "polybench.gemm.gemm"


def test_missing_pairs_are_the_ones_the_budget_rule_skipped_and_3dconv_at_512() -> None:
    got = set(sp.missing_pairs())
    mm = ("gemm.gemm", "mm2.k1", "mm2.k2", "mm3.k1", "mm3.k2", "mm3.k3", "syrk.syrk")
    want = {(f"polybench.{k}", 8192) for k in mm}
    want |= {
        (f"polybench.{k}", n) for k in ("corr.k4", "covar.k3", "syr2k.syr2k") for n in (4096, 8192)
    }
    want.add(("polybench.conv3d.conv3d", 512))
    assert got == want
    # 76 recorded pairs + the missing ones = every kernel at its three Table 6.1 sizes
    data = load_recorded(recorded_path("polybench"))
    assert len(data.kernels) * 3 == 90
    ests = [sp.pair_estimate_s(*p) for p in sp.missing_pairs()]
    assert ests == sorted(ests) and all(0 < e < 400 for e in ests)


def _synthetic_rows(key: str) -> tuple[list[dict], list[dict]]:
    """GEMM at 8192: every recorded 4096 candidate × 8 (a fixture, not a measurement); the
    four fastest 'full', the rest 'first' estimates; one row failed; a build row."""
    data = load_recorded(recorded_path("polybench"))
    at = {b: t[0] for (D, b), t in data.kernels[GEMM].times().items() if D.values() == (4096,)}
    order = sorted(at, key=at.__getitem__)
    points = []
    for i, b in enumerate(order):
        t = at[b] * 8
        row = {"kernel": GEMM, "N": 8192, "block": list(b), "median_ms": t, "q1_ms": t * 0.99,
               "q3_ms": t * 1.01, "wall_s": 0.1}  # fmt: skip
        points.append({**row, "stage": "first", "fraction": 0.125, "partial_ms": t / 8})
        if i < 4:
            points.append({**row, "stage": "full", "estimate_ms": t * 1.02, "fraction": 0.125})
    points.append({"kernel": GEMM, "N": 8192, "block": [1, 1, 1], "stage": "first",
                   "failed": "LaunchError: synthetic"})  # fmt: skip
    points.append({"kernel": GEMM, "N": sp.SWEEP_N, "block": list(order[0]), "stage": "full",
                   "median_ms": 0.01, "q1_ms": 0.01, "q3_ms": 0.01})  # fmt: skip
    builds = [{"kernel": GEMM, "device": key, "build_wall_s": 9.5, "model": "scaling"}]
    return points, builds


@pytest.fixture(scope="module")
def merged():  # noqa: ANN201
    data = load_recorded(recorded_path("polybench"))
    points, builds = _synthetic_rows(data.device_key)
    obj = sp.supplement_from_rows(
        points, builds, provenance={"device_key": data.device_key, "commit": "test"}
    )
    json.dumps(obj)  # the file's form
    status = sp.merge(data, obj, source="synthetic")
    return data, status


def test_the_merge_adds_rows_decisions_and_extras(merged) -> None:  # noqa: ANN001
    data, status = merged
    assert status[GEMM] == "added N = [8192], build"
    kd = data.kernels[GEMM]
    assert 8192 in {D.values()[0] for D in kd.sizes()}
    at = {b: t for (D, b), t in kd.times().items() if D.values() == (8192,)}
    assert len(at) == 51  # the failed row left out
    sup = kd.summary["supplement"]
    assert len(sup["estimated"]) == 51 - 4 and len(sup["partial_check"]) == 4
    assert sup["sweep"][0][0] == sp.SWEEP_N  # kept out of the truth rows
    assert sp.SWEEP_N not in {D.values()[0] for D in kd.sizes()}
    assert kd.costs["build_wall_s"] == 9.5
    dec = kd.truth(data.device_key)
    assert any(D.values() == (8192,) and d.measure for D, d in dec.items())
    assert "supplement" not in kd.spec_summary
    assert data.provenance["supplements"][-1]["commit"] == "test"


def test_the_merge_never_replaces_a_recorded_row_and_refuses_other_devices() -> None:
    data = load_recorded(recorded_path("polybench"))
    before = list(data.kernels[GEMM].time)
    row = {"kernel": GEMM, "N": 4096, "block": [32, 8, 1], "stage": "full", "median_ms": 1e9,
           "q1_ms": 1e9, "q3_ms": 1e9}  # fmt: skip
    obj = sp.supplement_from_rows([row], [], provenance={"device_key": data.device_key})
    assert sp.merge(data, obj)[GEMM] == "no new truth rows"
    assert data.kernels[GEMM].time == before
    other = sp.supplement_from_rows([row], [], provenance={"device_key": "another GPU"})
    with pytest.raises(KlaraptorError, match="another GPU"):
        sp.merge(data, other, source="x")
    obj["kernels"][GEMM]["fingerprint"] = "0" * 64
    assert "fingerprint" in sp.merge(data, obj)[GEMM]


def test_the_report_scores_the_new_pairs_and_marks_estimates(merged, monkeypatch) -> None:  # noqa: ANN001
    data, _ = merged
    monkeypatch.setitem(rp._DATA, "polybench", data)
    res = rp._evaluate_task("polybench", GEMM, "main")
    assert [p.N for p in res.pairs] == [2048, 4096, 8192]
    p = res.pairs[-1]
    assert p.info["estimated_blocks"] == 47 and p.info["worst_estimated"]
    est = {tuple(e[1:4]) for e in data.kernels[GEMM].summary["supplement"]["estimated"]}
    assert p.best not in est  # the best is a full measurement
    assert all(p.choices[m] in est for m in p.info["estimated_methods"])
    table = rp.table_6_1([res]).splitlines()
    assert len(table) == 2 + 3
    head = table[0]
    for h in ("online top-k r (k)", "tune-once r", "mwp_cwp r (faithful)", "default r", "OCC r"):
        assert h in head
    row8192 = table[-1]
    assert row8192.startswith("| gemm.gemm | 8192 |") and f"{rp.ESTIMATE_MARK} |" in row8192
    rows = rp.table_6_2_rows([res])
    (gemm,) = rows
    assert gemm["build_wall_s"] == 9.5
    assert gemm["main"]["N"] == 8192 and gemm["main"]["max_estimated"]
    # Powers of two 128 .. 8192: 128 from the sweep, 256/512/1024 training, 2048+ truth.
    assert gemm["exhaustive_s"] is not None and gemm["exhaustive_missing_sizes"] == []
    assert "9.5" in rp.table_6_2([res])


def test_the_report_keeps_the_tunables_block(tmp_path: Path) -> None:
    old = {"suites": {"polybench": {"pairs": 1}, "tunables": {"pairs": 7}}, "cost": {"x": 1}}
    (tmp_path / "summary.json").write_text(json.dumps(old))
    new = {"suites": {"polybench": {"pairs": 90}}, "report": {}}
    kept = sp.keep_foreign_blocks(new, tmp_path / "summary.json")
    assert kept["suites"]["polybench"]["pairs"] == 90
    assert kept["suites"]["tunables"] == {"pairs": 7} and kept["cost"] == {"x": 1}
    # The report's own summary stays its own (methods.md renders it; a foreign block lacks its
    # columns: the report failed with KeyError 'within_noise' when this was shared).
    assert new["suites"] == {"polybench": {"pairs": 90}}


# ---------------------------------------------------------------------------------------------
# The device script's race on a fake GPU (the rule and the bookkeeping; timing is the GPU's)


def _script() -> types.ModuleType:
    path = ROOT / "scripts" / "device_table61.py"
    spec = importlib.util.spec_from_file_location("device_table61", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeGpu:
    """Launches record their grid; a sample's time is blocks × a per-shape cost (ms)."""

    def __init__(self) -> None:
        self.launches: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        gpu = self

        class Be:
            def compile_spec(self, spec):  # noqa: ANN001, ANN202
                return "fn"

            def launch(self, fn, grid, block, args, smem):  # noqa: ANN001, ANN202
                gpu.launches.append((tuple(grid), tuple(block)))

            def synchronize(self, what=""):  # noqa: ANN001, ANN202
                return None

        class Timer:
            def sample(self, fn, inner):  # noqa: ANN001, ANN202
                fn()
                grid, b = gpu.launches[-1]
                threads = b[0] * b[1] * b[2]
                return math.prod(grid) * threads * 1e-6 * (1 + abs(math.log2(b[0] / 64)) / 10)

            def measure(self, fn, **kw):  # noqa: ANN001, ANN202
                s = [self.sample(fn, 1) for _ in range(kw.get("min_repeats", 3))]
                m = sorted(s)[len(s) // 2]
                return {"median_ms": m, "q1_ms": m, "q3_ms": m, "repeats": len(s), "inner": 1}

        self.be = Be()
        self.timer = Timer()

    def free(self) -> None:
        return None


def test_the_race_measures_every_candidate_and_resumes(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.asarray = lambda a: a  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    mod = _script()
    gpu = FakeGpu()
    task = {"kernel": GEMM, "N": 4096}
    res = mod.run_truth(gpu, task, tmp_path, deadline=math.inf)
    assert res["ok"] == res["candidates"] == 51 and res["partial"]
    rows = [json.loads(x) for x in (tmp_path / mod.POINTS).read_text().splitlines()]
    firsts = [r for r in rows if r["stage"] == "first"]
    fulls = [r for r in rows if r["stage"] == "full"]
    assert len(firsts) == 51 and 4 <= len(fulls) < 51
    # Partial launches: the first eighth of the rows of blocks (a quarter where a tall block
    # leaves four rows at N = 4096).
    assert all(r["fraction"] <= 0.25 for r in firsts)
    assert sum(r["fraction"] == 0.125 for r in firsts) > 40
    # A partial estimate scaled by the rows left out is the full time (linear fake).
    for r in fulls:
        assert r["estimate_ms"] == pytest.approx(r["median_ms"], rel=0.05)
    # The leader is fully measured.
    best = min(rows, key=lambda r: r["median_ms"])
    assert any(r["stage"] == "full" and r["block"] == best["block"] for r in rows)
    n_launches = len(gpu.launches)
    mod.run_truth(gpu, task, tmp_path, deadline=math.inf)
    assert len(gpu.launches) == n_launches  # resumed: nothing measured again
    # A supplement from these rows: nothing before the task is marked done (a race stopped
    # half-way is left out), then every candidate, the estimates named.
    obj = sp.load_supplement(sp.dataset_from_outdir(tmp_path, command="test"))
    assert obj["kernels"] == {}
    mod._append(tmp_path / mod.TASKS, {"id": "t", "kind": "truth", **task, "status": "done"})
    path = sp.dataset_from_outdir(tmp_path, command="test")
    obj = sp.load_supplement(path)
    k = obj["kernels"][GEMM]
    assert len(k["time"]) == 51 and len(k["summary"]["supplement"]["estimated"]) == 51 - len(fulls)


def test_the_race_stops_at_the_deadline(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    fake_cupy = types.ModuleType("cupy")
    fake_cupy.asarray = lambda a: a  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    mod = _script()
    with pytest.raises(TimeoutError):
        mod.run_truth(FakeGpu(), {"kernel": "polybench.atax.k1", "N": 128}, tmp_path, deadline=0.0)


def test_the_shipped_supplements_complete_table_6_1_and_6_2() -> None:
    """Both shipped supplements merge, oldest first: every Table 6.1 pair has truth (CORR k4 and
    COVAR k3 at 8192 come from the second), and a kernel measured by both runs keeps the first
    run's blocks and gains the second's (SYRK: its N = 128 sweep and its build)."""
    from klaraptor_bench.supplement import load_suite, missing_pairs, shipped_supplements

    assert [p.name for p in shipped_supplements()] == [
        "h200_table61.json.gz",
        "h200_table61_run3.json.gz",
    ]
    data = load_suite("polybench")
    assert missing_pairs(data) == []
    sizes = {D.values()[0] for D in data.kernels["polybench.corr.k4"].sizes()}
    assert {2048, 4096, 8192} <= sizes
    syrk = data.kernels["polybench.syrk.syrk"].summary["supplement"]
    assert syrk.get("build") and len(syrk.get("sweep", [])) == 51
    assert syrk.get("estimated"), "the first run's race estimates at 8192 are kept"
    files = [s["file"] for s in data.provenance["supplements"]]
    assert files == ["h200_table61.json.gz", "h200_table61_run3.json.gz"]
