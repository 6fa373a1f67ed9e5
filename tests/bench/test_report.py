"""The report's parts on a few recorded kernels: summary.json's blocks (per method, cost,
folds, targets), the extra-method hook and the cold-timing import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klaraptor.suite.recorded import load_recorded
from klaraptor_bench import evaluate as ev
from klaraptor_bench import report as rp
from klaraptor_bench.dataset import add_cold_timings

NAMES = ("polybench.atax.k1", "polybench.gemm.gemm", "polybench.fdtd2d.k2")


@pytest.fixture(scope="module")
def results():  # noqa: ANN201
    return {"polybench": [rp._evaluate_task("polybench", n, "main") for n in NAMES]}


def test_summary_has_every_block_the_issue_asks_for(results) -> None:  # noqa: ANN001
    s = rp.summary_json(results, "test")
    assert set(s["suites"]) == {"polybench", "all"}
    g = s["suites"]["polybench"]
    m = g["methods"]["klaraptor"]
    assert {"within_5pct", "mean_S_pct", "geomean_r", "max_r"} <= set(m)
    pairs = [p for r in results["polybench"] for p in r.pairs]
    assert m["within_5pct"] == pytest.approx(
        sum(p.r("klaraptor") <= 1.05 for p in pairs) / len(pairs)
    )
    assert g["methods"]["klaraptor_topk"]["mean_k"] >= 1
    cost = g["cost"]
    assert set(cost["kernels"]) == set(NAMES)
    for v in cost["kernels"].values():
        assert v["build_over_tune_once"] == pytest.approx(
            v["build_measurement_s"] / v["tune_once_s"]
        )
    assert cost["max_build_over_tune_once"] <= 1.5 + 1e-9
    folds = g["folds"]
    assert set(folds["kernels"]) == set(NAMES) and "spearman" in folds
    for v in folds["kernels"].values():
        assert v["model"] == "scaling" and v["fold_r"] >= 1.0 and v["true_geomean_r"] >= 1.0
    assert g["targets"]["build_over_tune_once_max"]["met"]
    assert g["data_provenance"]["cold"]["source"] == "cold/cold_polybench.jsonl"
    json.dumps(s, default=str)  # serialisable


def test_tables_cover_every_pair(results) -> None:  # noqa: ANN001
    rs = results["polybench"]
    t = rp.table_6_1(rs).splitlines()
    assert len(t) == 2 + sum(len(r.pairs) for r in rs)
    methods = rp.table_methods(rp.summary_json(results, "test"))
    assert "| klaraptor |" in methods and "| tune_once |" in methods
    summary = rp.summary_json(results, "test")
    folds = rp.table_folds(summary)
    rho = summary["suites"]["polybench"]["folds"]["spearman"]
    assert f"ρ(fold r, true r) = {rho:.3f}" in folds
    assert all(f"| {rp._short(n)} | scaling |" in folds for n in NAMES)


def test_best_worst_plot_takes_suites_or_a_plain_list(results, tmp_path: Path) -> None:  # noqa: ANN001
    rp.plot_best_worst(results, tmp_path / "suites.png")
    rp.plot_best_worst(results["polybench"], tmp_path / "list.png", gpu="test GPU")
    for name in ("suites.png", "list.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_tasks_do_not_warn_about_extrapolating() -> None:
    import warnings

    from klaraptor.core.errors import ExtrapolationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", ExtrapolationWarning)
        res = rp._evaluate_task("polybench", "polybench.atax.k1", "main")
    assert res.pairs


def test_an_extra_provider_joins_every_pair(monkeypatch) -> None:  # noqa: ANN001
    def always_default(ctx: ev.KernelContext) -> list[ev.MethodResult]:
        return [
            ev.MethodResult(
                "my_method", {N: [ctx.spec.default_block] for N in ctx.evals}, cost_s=0.0
            )
        ]

    monkeypatch.setattr(ev, "_EXTRA", [])
    ev.register_provider(always_default)
    res = rp._evaluate_task("polybench", "polybench.atax.k1", "main")
    assert all(p.times["my_method"] == p.times["default"] for p in res.pairs)
    assert res.costs["my_method"] == 0.0


def test_cold_timings_are_read_from_a_bench_cold_log(tmp_path: Path) -> None:
    data = load_recorded()
    name = "polybench.atax.k1"
    log = tmp_path / "cold.jsonl"
    pts = [{"block": [32, 1, 1], "median_ms": 0.1, "q1_ms": 0.09, "q3_ms": 0.11}]
    rows = [
        {"kernel": name, "pass": "hot", "N": 1536, "wall_s": 4.0, "points": pts},
        {"kernel": name, "pass": "cold", "N": 1536, "wall_s": 4.5, "points": pts},
        {"kernel": "polybench.mvt.k1", "pass": "cold", "N": 1536, "wall_s": 1.0, "error": "boom"},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    status = add_cold_timings(data, log, {"date": "today"})
    assert status[name] == "added" and status["polybench.mvt.k1"].startswith("cold pass failed")
    assert status["polybench.bicg.k1"] == "no line in the log"
    k = data.kernels[name]
    assert k.cold == [[1536, 32, 1, 1, 0.1, 0.09, 0.11]]
    assert k.costs["sweep_hot_s"] == 4.0 and k.costs["sweep_cold_s"] == 4.5
    assert data.provenance["cold"]["kernels"][name] == "added"


def test_the_report_shows_a_progress_bar() -> None:
    """`bench report` runs for half an hour: a rich bar counts its tasks (issue 38)."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with rp._task_progress(console, 2) as advance:
        advance(("polybench", "polybench.atax.k1", "main"))
        advance(("polybench", "polybench.gemm.gemm", "main"))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "2/2" in shown and "evaluated polybench.gemm.gemm (main)" in shown
    with rp._task_progress(None, 1) as advance:  # no console: nothing shown, nothing fails
        advance(("polybench", "polybench.atax.k1", "main"))
