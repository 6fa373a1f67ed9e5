"""The recorded H200 dataset and the evaluation pipeline that runs on it (CPU)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import make_job
from klaraptor.assemble.model_selection import select_model
from klaraptor.models import auto_candidates
from klaraptor.suite.recorded import load_recorded
from klaraptor_bench.evaluate import METHODS, evaluate_kernel, summarize
from klaraptor_bench.report import table_6_1, table_6_2


@pytest.fixture(scope="module")
def data():  # noqa: ANN201
    return load_recorded()


@pytest.fixture()
def store(data, tmp_path: Path):  # noqa: ANN001, ANN201
    s = data.to_store(
        tmp_path / "recorded.sqlite", kernels=["polybench.atax.k1", "polybench.conv2d.conv2d"]
    )
    yield s
    s.close()


def test_dataset_is_complete_and_matches_the_current_suite(data) -> None:  # noqa: ANN001
    assert data.provenance["gpu"].startswith("NVIDIA H200")
    assert {"date", "sessions", "timing", "counters", "sizes"} <= set(data.provenance)
    assert all(s["commit"] for s in data.provenance["sessions"])
    assert len(data.kernels) == 30
    profile = data.profile()
    assert not profile.missing_model_inputs
    for name, k in data.kernels.items():
        spec = suite.get(name)
        # a changed kernel would make the recorded measurements stale
        assert k.fingerprint == spec.fingerprint(), name
        train, evals = set(spec.meta["train_sizes"]), set(spec.meta["eval_sizes"])
        retired = set(spec.meta.get("retired_eval_sizes", ()))
        sizes = {D["N"] for D in k.sizes()}
        assert train <= sizes and sizes <= train | evals | retired
        assert max(train) < min(evals)
        ncu_sizes = {r[0] for r in k.ncu}
        assert ncu_sizes and ncu_sizes <= train  # counters only at training sizes
        assert all(t > 0 for t in (row[4] for row in k.time))


def test_to_store_round_trip(data, store) -> None:  # noqa: ANN001
    k = data.kernels["polybench.atax.k1"]
    key = data.device_key
    assert len(store.measurements("polybench.atax.k1", key, kind="time")) == len(k.time)
    assert len(store.measurements("polybench.atax.k1", key, kind="ncu")) == len(k.ncu)
    assert store.device_profile(key)["name"] == "NVIDIA H200"


def test_recorded_cold_timings_and_argument_bytes(data) -> None:  # noqa: ANN001
    prov = data.provenance["cold"]
    assert prov["date"] == "2026-11-23" and "bench_cold.py" in prov["command"]
    # The device run ended before the cold pass of COVAR k3 (benchmarks/results/h200/cold).
    assert prov["kernels"]["polybench.covar.k3"].startswith("hot pass only")
    for name, k in data.kernels.items():
        spec = suite.get(name)
        L = max(spec.meta["train_sizes"])
        facts = k.facts(data.device_key)
        assert [D[0] for D, _ in facts.arg_bytes] == list(spec.meta["train_sizes"])
        if name == "polybench.covar.k3":
            assert not k.cold
            continue
        cold, hot = k.cold_times(), k.times()
        assert {D["N"] for D, _ in cold} == {L}
        assert {b for _, b in cold} == {b for D, b in hot if D["N"] == L}
        # A flushed L2 is never much faster than a warm one.
        assert all(cold[key][0] >= 0.9 * hot[key][0] for key in cold), name


def test_evaluation_scores_every_method(data, store) -> None:  # noqa: ANN001
    res = evaluate_kernel(store, data, "polybench.atax.k1")
    assert [p.N for p in res.pairs] == [2048, 4096, 8192]
    for p in res.pairs:
        assert set(p.times) == set(METHODS)
        assert p.r("exhaustive") == 1.0 and p.error_pct("exhaustive") == 0.0
        for m in METHODS:
            assert p.r(m) >= 1.0 and 0.0 <= p.error_pct(m) <= 100.0
        assert p.t_best <= p.times["occ"] <= p.t_worst
        # online refinement always tries the model's choice and tune-once's block
        assert {p.choices["tune_once"]} <= set(p.tried["klaraptor_topk"])
        assert p.r("klaraptor_topk") <= min(p.r("klaraptor"), p.r("tune_once"))
    # tune-once reuses the best block at the largest training size everywhere
    t = data.kernels["polybench.atax.k1"].times()
    at1536 = {b: v[0] for (D, b), v in t.items() if D == {"N": 1536}}
    assert {p.choices["tune_once"] for p in res.pairs} == {min(at1536, key=at1536.get)}
    s = summarize([res])
    assert s["pairs"] == 3 and s["methods"]["exhaustive"]["geomean_r"] == 1.0
    assert 0 <= s["methods"]["klaraptor"]["within_5pct"] <= 1
    assert res.build_s > res.fit_s > 0 and res.truth_s > 0
    # the default build measures at most 1.5 x tune-once's sweep (cost model)
    plan = res.info["plan"]
    assert plan["spent_s"] <= 1.5 * plan["tune_once_s"] + 1e-9
    assert res.costs["tune_once"] == pytest.approx(plan["tune_once_s"])


def test_auto_selects_with_training_sizes_only(data, store) -> None:  # noqa: ANN001
    spec = suite.get("polybench.conv2d.conv2d")
    job = make_job(spec, store, data.profile(), [spec.size(n) for n in spec.meta["train_sizes"]])
    assert max(D["N"] for D in job.train.sizes()) < min(spec.meta["eval_sizes"])
    chosen, info = select_model(job)
    assert chosen in auto_candidates() and info.chosen == chosen
    for name in auto_candidates():
        sc = info.scores[name]
        if "error" in sc:
            continue
        assert sc["r"] >= 1.0
        # the x2 fold: trained up to M = 768 <= 1536 / 2, scored at L = 1536
        assert sc["sizes"] == [[256], [512], [768], [1536]]


def test_tables_have_a_row_per_pair_and_benchmark(data, store) -> None:  # noqa: ANN001
    res = [
        evaluate_kernel(store, data, n) for n in ("polybench.atax.k1", "polybench.conv2d.conv2d")
    ]
    t61 = table_6_1(res).splitlines()
    assert len(t61) == 2 + sum(len(r.pairs) for r in res)
    t62 = table_6_2(res).splitlines()
    assert len(t62) == 2 + 2 and "ATAX" in t62[2] and "2DCONV" in t62[3]
    for line in t62[2:]:
        ratio = float(line.split("|")[6])  # build / tune-once (max over kernels)
        assert 1.0 <= ratio <= 1.5 + 1e-9


def test_time_fit_model_needs_no_counters(data, store) -> None:  # noqa: ANN001
    from klaraptor.assemble import build

    spec = suite.get("polybench.atax.k1")
    kern = build(
        spec,
        [{"N": n} for n in spec.meta["train_sizes"]],
        model="time_fit",
        budget=None,
        store=store,
        device=data.profile(),
        collect_data=False,
    )
    assert kern.helper.model_name == "time_fit"
    assert kern.report.fits["metrics"]["time_ms"]["method"] in ("table", "joint")
    pred = kern.helper.predict(spec.size(1536))
    measured = {
        b: v[0] for (D, b), v in data.kernels[spec.name].times().items() if D == spec.size(1536)
    }
    err = [
        abs(pred.ms[i] / measured[b] - 1)
        for i, b in enumerate(kern.helper.candidates)
        if b in measured
    ]
    assert np.median(err) < 0.05  # it reproduces its own training sizes


def test_recorded_demo_runs_the_pipeline(capsys) -> None:  # noqa: ANN001
    from rich.console import Console

    from klaraptor.cli import demo

    console = Console(width=140, force_terminal=False)
    assert (
        demo.run(gpu=False, console=console, kernels=["polybench.atax.k1", "polybench.gemm.gemm"])
        == 0
    )
    out = capsys.readouterr().out
    assert "recorded exhaustive optimum" in out and "atax.k1" in out and "gemm.gemm" in out
    assert "geomean r" in out and "tune_once" in out
    # SAAKE's "Why" section: one bottleneck line per kernel (docs/saake.md).
    why = [line for line in out.splitlines() if "bottleneck:" in line]
    assert len(why) == 2 and all("unavailable" not in line for line in why)
    # Names a CUDA programmer knows, each said once: neither kernel has shared memory, so its
    # L1/shared pipe is its L1 (issue 37), never "smem".
    assert "smem" not in "\n".join(why) and "  where:" in out


def test_saake_joins_the_comparison_under_issue_11s_names(data, store) -> None:  # noqa: ANN001
    from klaraptor_bench.evaluate import comparison_providers

    res = evaluate_kernel(
        store, data, "polybench.atax.k1", providers=[comparison_providers()["saake"]]
    )
    for p in res.pairs:
        assert set(p.times) >= {"saake_model_only", "saake_top4"}
        tried = p.tried["saake_top4"]
        assert len(tried) == 4 and p.choices["saake_model_only"] == tried[0]
        assert 1.0 <= p.r("saake_top4") <= p.r("saake_model_only")
