"""SNOWPACK under the paper's protocol: the Nelder-Mead autotuner, the splits, the figures, and a
quick end-to-end run on a few recorded kernels (the full one is `klaraptor bench snowpack
--protocol paper`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from klaraptor.cli import main
from klaraptor.core.errors import KlaraptorError
from klaraptor_bench.snowpack_eval import QUICK, baselines, recorded_corpus
from klaraptor_bench.snowpack_paper import (
    diff_vs,
    evaluate_paper,
    exclusion,
    kernel_splits,
    nelder_mead_tune,
    rows_of,
    size_splits,
    summarize,
    time_of,
)
from klaraptor_bench.snowpack_paper_report import dumps, markdown, plot_paper


def _space_1d() -> np.ndarray:
    return np.array([(x, 1, 1) for x in range(32, 1025, 32)])


def test_nelder_mead_finds_the_bottom_of_a_bowl_without_timing_every_block() -> None:
    blocks = _space_1d()
    ms = 1.0 + (blocks[:, 0] / 32.0 - 10.0) ** 2  # fastest at 320
    res = nelder_mead_tune(blocks, ms)
    assert res.block == (320, 1, 1)
    assert res.evaluations == len(res.path) == len(set(res.path)) < len(blocks)
    assert res.calls >= res.evaluations
    timed = {tuple(b): t for b, t in zip(blocks.tolist(), ms)}
    assert res.tune_ms == pytest.approx(sum(timed[b] for b in res.path))
    assert nelder_mead_tune(blocks, ms) == res  # deterministic


def test_nelder_mead_times_only_valid_blocks_in_two_dimensions() -> None:
    p2 = [2**i for i in range(11)]
    blocks = np.array([(x, y, 1) for x in p2 for y in p2 if 32 <= x * y <= 1024])
    lx, ly = np.log2(blocks[:, 0]), np.log2(blocks[:, 1])
    ms = 1.0 + (lx - 6) ** 2 + 0.5 * (ly - 2) ** 2  # fastest at 64 x 4
    res = nelder_mead_tune(blocks, ms)
    valid = {tuple(b) for b in blocks.tolist()}
    assert set(res.path) <= valid
    # A local search on a piecewise-constant objective: near the bottom, not necessarily at it
    # (here it stops one index away, at 128 x 4).
    assert abs(np.log2(res.block[0]) - 6) <= 1 and abs(np.log2(res.block[1]) - 2) <= 1
    assert res.evaluations < len(blocks) / 2


def test_nelder_mead_edge_cases() -> None:
    one = nelder_mead_tune(np.array([(128, 1, 1)]), np.array([2.0]))
    assert one.block == (128, 1, 1) and one.evaluations == 1
    with pytest.raises(KlaraptorError, match="finite time"):
        nelder_mead_tune(_space_1d(), np.full(32, np.nan))
    with pytest.raises(KlaraptorError, match="one finite time per candidate"):
        nelder_mead_tune(_space_1d(), np.ones(3))


def test_a_tuned_block_launched_where_it_is_no_candidate_takes_the_nearest() -> None:
    blocks = np.array([(32, 1, 1), (256, 1, 1), (1024, 1, 1)])
    ms = np.array([3.0, 1.0, 2.0])
    assert time_of((256, 1, 1), blocks, ms) == 1.0
    assert time_of((512, 1, 1), blocks, ms) in (1.0, 2.0)
    assert time_of((64, 1, 1), blocks, ms) == 3.0


def test_the_splits_are_seeded_75_25_and_hold_every_kernel() -> None:
    names = [f"k{i}" for i in range(44)]
    ks = kernel_splits(names)
    assert len(ks) == 10 and all(len(s) == 11 for s in ks)
    assert ks == kernel_splits(names) and len(set(ks)) == 10
    assert ks != kernel_splits(names, seed=1)
    sizes = {"a": [1, 2, 3, 4, 5, 6, 7, 8], "b": [1, 2, 3, 4, 5, 6], "c": [7]}
    ss = size_splits(sizes)
    assert all(len(s["a"]) == 2 and len(s["b"]) == 2 and s["c"] == () for s in ss)
    assert ss == size_splits(sizes)
    assert len({s["a"] for s in ss}) > 1
    with pytest.raises(KlaraptorError, match="at least 2 kernels"):
        kernel_splits(["only"])


def _rec(kernel: str, snowpack: float, occ: float, auto: float, svr: float = 0.0) -> dict:
    return {
        "kernel": kernel,
        "snowpack": snowpack,
        "svr_paper": svr,
        "occ": occ,
        "occ_worst": occ * 2,
        "autotuner": auto,
    }


def test_the_papers_figures_from_samples() -> None:
    recs = [_rec("a", 0.0, 5.0, 0.0), _rec("a", 10.0, 5.0, 0.0), _rec("b", 2.0, 2.0, 4.0)]
    s = summarize(recs)
    assert s["samples"] == 3 and s["kernels"] == 2
    assert s["mean_S_pct"] == pytest.approx(4.0) and s["median_S_pct"] == 2.0
    assert s["match_rate"] == pytest.approx(1 / 3)
    assert s["matched_or_exceeded_occ_pct"] == pytest.approx(200 / 3)  # 0 <= 5, 2 <= 2
    assert s["matched_or_exceeded_autotuner_pct"] == pytest.approx(200 / 3)
    assert s["beats_occ"] is False  # 4 % against 4 %: not below it
    d = diff_vs(np.array([10.0]), np.array([0.0]))
    assert d[0] == pytest.approx(10.0)
    assert diff_vs(np.array([0.0]), np.array([10.0]))[0] == pytest.approx(-100 / 11)
    # The exclusion rule leaves out only kernels where every model fails.
    fail = [_rec("bad", 50.0, 20.0, 30.0, svr=40.0), _rec("ok", 50.0, 20.0, 1.0, svr=40.0)]
    x = exclusion(fail)
    assert [e["kernel"] for e in x["excluded"]] == ["bad"]
    assert x["samples"] == 1 and x["kernels"] == 1


KERNELS = ["polybench.atax.k1", "polybench.atax.k2", "polybench.bicg.k1", "rodinia.srad.k1"]


@pytest.fixture(scope="module")
def quick_run() -> dict:
    return evaluate_paper(repeats=1, kernel_settings=QUICK, size_settings=QUICK, kernels=KERNELS)


def test_a_quick_run_scores_every_tested_sample(quick_run: dict, tmp_path: Path) -> None:
    res = quick_run
    for scenario in ("unseen_kernels", "unseen_sizes"):
        b = res[scenario]
        recs = rows_of(b["per_sample"])
        assert b["samples"] == len(recs) > 0
        for k in ("mean_S_pct", "occ_mean_S_pct", "autotuner_mean_S_pct", "svr_paper_mean_S_pct"):
            assert np.isfinite(b[k]) and b[k] >= 0, (scenario, k)
        assert 0.0 <= b["match_rate"] <= 1.0
        assert b["autotuner_evaluations_mean"] >= 1
        # Each tested kernel is tuned once, at its smallest tested size.
        tuned = [r for r in recs if r["tuned_here"]]
        assert len(tuned) == len({r["kernel"] for r in recs})
        for r in tuned:
            assert r["N"] == min(x["N"] for x in recs if x["kernel"] == r["kernel"])
        assert b["snowpack_predict_ms"] > 0.0  # timed: presence only (the cost is a benchmark)
    held = rows_of(res["unseen_kernels"]["per_sample"])
    assert len({r["kernel"] for r in held}) == 1  # 25 % of 4 kernels
    assert len(held) == 8  # every recorded size of the held-out kernel
    sizes = rows_of(res["unseen_sizes"]["per_sample"])
    assert {r["kernel"] for r in sizes} == set(KERNELS)
    assert all(sum(r["kernel"] == k for r in sizes) == 2 for k in KERNELS)
    assert json.loads(dumps(res)) == json.loads(json.dumps(res, default=float))
    res = {**res, "harder": {}, "provenance": {"command": "test", "commit": "x", "date": "d"}}
    text = markdown(res)
    assert "beside Table 3" in text and "beside Table 4" in text and "4.37 %" in text
    assert "never held out" in text  # 1 of 4 kernels held out in the one split
    for p in plot_paper(res, tmp_path):
        assert p.stat().st_size > 10_000


def test_occ_is_the_same_as_every_other_snowpack_figure(quick_run: dict) -> None:
    c, is_train, _ = recorded_corpus()
    evals = c.subset(~is_train)
    occ = baselines(c, is_train, evals)["occ"]
    groups = np.unique(evals.group)
    by_pair = {
        (evals.sizes[g][0], evals.sizes[g][1].values()[0]): occ[i] for i, g in enumerate(groups)
    }
    for r in rows_of(quick_run["unseen_sizes"]["per_sample"]):
        if r["eval_size"]:
            assert r["occ"] == pytest.approx(by_pair[(r["kernel"], r["N"])], abs=1e-4)


def test_the_cli_refuses_the_corpus_under_the_papers_protocol(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    rc = main(["bench", "snowpack", "--protocol", "paper", "--patterns", "--out", str(tmp_path)])
    assert rc != 0
    assert "--patterns applies to --protocol benchmark only" in capsys.readouterr().err
