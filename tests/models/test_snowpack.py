"""SNOWPACK on the recorded H200 data: features, learner, persistence, the zero-measurement path,
the prior, and the errors for bad input (no mocks: real recorded data, real scikit-learn)."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sklearn

from klaraptor import build, load, suite
from klaraptor.cli import main
from klaraptor.models.snowpack import (
    FEATURE_SET,
    Predictor,
    SnowpackError,
    load_regressor,
    rank_prior,
)
from klaraptor.models.snowpack.features import (
    CandidateFeatures,
    attributes_from,
    feature_matrix,
    feature_names,
    load_recorded_features,
    static_features,
    static_names,
)
from klaraptor.models.snowpack.learner import (
    COST_NS,
    Regressor,
    fit_rows,
    save_regressor,
    suboptimality,
)
from klaraptor.models.snowpack.model import _nodes, shipped_path
from klaraptor.models.snowpack.search import Candidate, choose, train
from klaraptor.models.snowpack.train import corpus_from_store
from klaraptor.space.configspace import ConfigSpace
from klaraptor.store import StaticFeatures, Store
from klaraptor.suite.recorded import training_only_datasets
from klaraptor_bench.snowpack_eval import QUICK, evaluated_benchmarks, recorded_corpus


@pytest.fixture(scope="module")
def corpus():  # noqa: ANN201
    return recorded_corpus()


@pytest.fixture(scope="module")
def small(corpus):  # noqa: ANN001, ANN201
    """A quick model trained on three benchmarks (PolyBench ATAX, GEMM, Rodinia srad)."""
    c, _, datasets = corpus
    keep = np.isin(c.bench, ["polybench.ATAX", "polybench.GEMM", "rodinia.srad"])
    sub = c.subset(keep)
    reg, report = train(sub, next(iter(datasets.values())).device_key, "kernels", QUICK)
    return sub, reg, report


def test_static_features_of_every_recorded_kernel(recorded, h200) -> None:  # noqa: ANN001
    feats = load_recorded_features()
    assert len(feats) == 60  # 44 evaluated kernels, 16 of the training-only corpus
    for rec in feats.values():
        assert rec.version == FEATURE_SET and set(rec.features) == set(static_names())
    # The compiler's registers and static shared memory are what collection found on the H200.
    for data in (recorded, *training_only_datasets().values()):
        for name, kd in data.kernels.items():
            attrs = attributes_from(feats[name].features, h200)
            found = kd.facts(data.device_key).attributes
            assert (attrs.num_regs, attrs.static_smem) == (found.num_regs, found.static_smem), name
    gemm = feats["polybench.gemm.gemm"].features
    assert gemm["loops"] >= 1 and gemm["ld_global_depth1"] > 0 and gemm["barrier"] == 0


def test_the_patterns_corpus_is_trained_on_and_never_held_out(corpus, tmp_path: Path) -> None:  # noqa: ANN001
    c, is_train, datasets = recorded_corpus(patterns=True)
    only = np.char.startswith(c.kernel.astype(str), "patterns.")
    assert len(set(c.kernel[only].tolist())) == 16 and is_train[only].all()
    held = evaluated_benchmarks(c)
    assert len(held) == 25 and not any(b.startswith("patterns.") for b in held)
    assert "h200_patterns.json.gz" not in datasets  # the evaluated suites only
    c0 = corpus[0]  # the default: without the corpus (it did not validate better)
    assert set(c0.kernel.tolist()) == set(c.kernel[~only].tolist())
    assert evaluated_benchmarks(c0) == held
    # A store holding its timings trains on them as on any timed kernel.
    (data,) = training_only_datasets().values()
    with data.to_store(tmp_path / "s.sqlite") as store:
        rows, skipped = corpus_from_store(store, data.profile())
    assert not skipped and set(rows.kernel.tolist()) == set(data.kernels)


def test_dynamic_features_are_exact(h200) -> None:  # noqa: ANN001
    from klaraptor.device.occupancy import active_blocks_per_sm

    spec = suite.get("polybench.atax.k1")
    static = load_recorded_features()[spec.name].features
    blocks = [(32, 1, 1), (96, 1, 1), (256, 1, 1), (1024, 1, 1)]
    X = feature_matrix(spec, spec.size(2048), blocks, static, h200)
    names = feature_names()
    col = {n: X[:, names.index(n)] for n in ("occupancy", "padding", "log_total_threads")}
    active = active_blocks_per_sm(np.array([32, 96, 256, 1024]), 30, 0, h200.cc)
    assert np.allclose(col["occupancy"], active * np.array([1, 3, 8, 32]) / 64)
    # 2048 threads: 96 launches ceil(2048/96)*96 = 2112, the others exactly 2048.
    assert np.allclose(col["log_total_threads"], np.log2([2048, 2112, 2048, 2048]))
    assert col["padding"][1] == pytest.approx(np.log2(2112 / 2048)) and col["padding"][0] == 0


def test_candidate_features_equal_a_fresh_matrix_at_every_size(h200) -> None:  # noqa: ANN001
    feats = load_recorded_features()
    # nw.diagonal's dynamic shared memory depends on the block: occupancy per candidate.
    for name in ("rodinia.nw.diagonal", "polybench.conv3d.conv3d", "polybench.gemm.gemm"):
        spec = suite.get(name)
        space = ConfigSpace.for_spec(spec, max_threads=h200.max_threads_per_block)
        blocks = list(space.candidates)
        cf = CandidateFeatures(spec, blocks, feats[name].features, h200)
        for n in (*spec.meta["train_sizes"], *spec.meta["eval_sizes"], 3 * spec.data[0].lo + 1):
            D = spec.size(n)
            fresh = feature_matrix(spec, D, blocks, feats[name].features, h200)
            assert np.array_equal(cf.at(D), fresh, equal_nan=True), (name, n)


def test_the_level_line_is_the_level_model(corpus) -> None:  # noqa: ANN001
    c, _, _ = corpus
    sub = c.subset(np.isin(c.bench, ["polybench.GEMM", "rodinia.srad", "polybench.ATAX"]))
    fitted = fit_rows(sub, "hgb", {"max_iter": 20}, "per_wave", "bounded", np.arange(len(sub)))
    for k in np.unique(sub.kernel):
        X = sub.X[sub.kernel == k]  # every size of one kernel
        line = fitted.level_line(X[0])
        assert np.allclose(fitted.predict(X, line), fitted.predict(X), rtol=0, atol=1e-9)


def test_the_perceptron_fast_path_is_the_pipeline(corpus) -> None:  # noqa: ANN001
    """The shipped learner's stacked float32 forward pass gives what the pipelines' `predict`
    gives (to 1e-5 in log time), before and after a pickle round trip."""
    import pickle

    c, _, _ = corpus
    sub = c.subset(np.isin(c.bench, ["polybench.GEMM", "rodinia.srad"]))
    params = {"hidden": [16, 16], "alpha": 0.01, "max_iter": 30}
    fitted = fit_rows(sub, "mlp", params, "per_wave", "all", np.arange(len(sub)))
    X = sub.X[:300]
    cols = X[:, fitted._cols]
    via_sklearn = fitted.estimator.predict(cols)
    assert np.allclose(fitted._estimate(cols), via_sklearn, rtol=0, atol=1e-5)
    assert fitted.__dict__["_fast"] is not None  # the fast path was taken
    again = pickle.loads(pickle.dumps(fitted))
    assert "_fast" not in again.__dict__  # not pickled: rebuilt on first use
    assert np.array_equal(again.predict(X), fitted.predict(X))
    trees = fit_rows(sub, "hgb", {"max_iter": 10}, "per_wave", "all", np.arange(len(sub)))
    assert np.array_equal(trees._estimate(cols), trees.estimator.predict(cols))
    assert trees.__dict__["_fast"] is None
    # Several initialisations: the members' mean, each member its own pipeline's prediction.
    three = fit_rows(sub, "mlp", params, "per_wave", "all", np.arange(len(sub)), seeds=3)
    each = [m.predict(cols) for m in three.members]
    assert len(three.members) == 3 and not np.allclose(each[0], each[1])
    assert np.allclose(three._estimate(cols), np.mean(each, axis=0), rtol=0, atol=1e-5)
    assert three.__dict__["_fast"].first[0].shape[1] == 3 * 16  # one stacked pass
    # One kernel's rows at one D (static columns shared): the first layer's static part is
    # computed once, and the result is the same.
    one = sub.X[sub.group == sub.group[0]][:, three._cols]
    assert len(one) > 1 and not (one != one[:1]).any(axis=0).all()
    want = np.mean([m.predict(one) for m in three.members], axis=0)
    assert np.allclose(three._estimate(one), want, rtol=0, atol=1e-5)
    # Members of different shapes cannot be stacked: each runs its own pipeline.
    other = fit_rows(
        sub, "mlp", {**params, "hidden": [8, 8]}, "per_wave", "all", np.arange(len(sub))
    )
    mixed = replace(three, members=(*three.members, other.estimator))
    assert mixed._estimate(cols).shape == (300,) and mixed.__dict__["_fast"] is None
    assert np.allclose(
        mixed._estimate(cols), np.mean([*each, other.estimator.predict(cols)], axis=0), atol=1e-12
    )
    assert (
        len(fit_rows(sub, "hgb", {"max_iter": 5}, "relative", "all", np.arange(9), 3).members) == 1
    )


def test_the_prediction_cost_is_counted_not_timed(corpus) -> None:  # noqa: ANN001
    """The tie-break's cost is estimated from the fitted model's size, so two fits of the same
    candidate cost the same on any machine: weights and biases, support vectors and dual
    coefficients, two numbers per split and one per leaf; trees cost per tree."""
    c, _, _ = corpus
    sub = c.subset(np.isin(c.bench, ["polybench.GEMM", "rodinia.srad"]))
    rows = np.arange(0, len(sub), 3)
    params = {"hidden": [16, 8], "alpha": 0.01, "max_iter": 20}
    mlp = fit_rows(sub, "mlp", params, "log_time", "all", rows, seeds=2)
    n = len(mlp._cols)
    assert mlp.parameters() == 2 * (n * 16 + 16 + 16 * 8 + 8 + 8 + 1)
    assert mlp.cost_ns() == COST_NS["fixed"] + COST_NS["mlp"] * mlp.parameters()
    svr_params = {"C": 3.0, "gamma_scale": 0.5, "epsilon": 0.05}
    svr = fit_rows(sub, "svr", svr_params, "log_time", "bounded", rows[:400])
    est = svr.estimator.steps[-1][1]
    assert svr.parameters() == len(est.support_) * (len(svr._cols) + 1) + 1
    trees = fit_rows(sub, "hgb", {"max_iter": 7}, "relative", "all", rows)
    leaves = sum(t.get_n_leaf_nodes() for [t] in trees.estimator._predictors)
    assert trees.parameters() == 2 * (leaves - 7) + leaves  # a binary tree: leaves - 1 splits
    again = fit_rows(sub, "hgb", {"max_iter": 7}, "relative", "all", rows)
    assert again.parameters() == trees.parameters()
    assert trees.cost_ns() == again.cost_ns() == COST_NS["fixed"] + 7 * COST_NS["hgb"]
    assert svr.cost_ns() == COST_NS["fixed"] + COST_NS["svr"] * svr.parameters()


def test_a_balanced_fit_weighs_every_kernel_and_size_the_same(corpus) -> None:  # noqa: ANN001
    """Rows weigh 1 / their (kernel, D) group's size: with groups of one size that is no weight
    at all; with 3DCONV's 231 candidates beside ATAX's, the fit moves."""
    c, _, _ = corpus
    params = {"max_iter": 8}
    even = c.subset(np.isin(c.bench, ["polybench.GEMM", "rodinia.srad"]))
    assert len(set(np.unique(even.group, return_counts=True)[1])) == 1
    rows = np.arange(len(even))
    plain = fit_rows(even, "hgb", params, "relative", "all", rows)
    same = fit_rows(even, "hgb", params, "relative", "all", rows, balanced=True)
    assert np.allclose(plain.predict(even.X), same.predict(even.X), atol=1e-9)
    uneven = c.subset(np.isin(c.bench, ["polybench.3DCONV", "polybench.ATAX"]))
    sizes = np.unique(uneven.group, return_counts=True)[1]
    assert sizes.max() > 4 * sizes.min()
    rows = np.arange(len(uneven))
    plain = fit_rows(uneven, "hgb", params, "relative", "all", rows)
    moved = fit_rows(uneven, "hgb", params, "relative", "all", rows, balanced=True)
    assert not np.allclose(plain.predict(uneven.X), moved.predict(uneven.X), atol=1e-3)
    for learner, p in (
        ("mlp", {"hidden": [8], "alpha": 0.01, "max_iter": 10}),
        ("svr", {"C": 1.0, "gamma_scale": 0.5, "epsilon": 0.05}),
    ):
        fitted = fit_rows(uneven, learner, p, "log_time", "all", rows[::7], balanced=True)
        assert np.isfinite(fitted.predict(uneven.X)).all()


def test_training_reports_every_learner_and_keeps_one_by_the_rule(small) -> None:  # noqa: ANN001
    sub, reg, report = small
    assert set(report["learners"]) == {"svr", "hgb", "mlp"}
    kept = report["kept_candidate"]
    assert (reg.learner, reg.target, reg.view) == (kept["learner"], kept["target"], kept["view"])
    # The kept one is within one standard error of the best and costs at most 1.5x the
    # cheapest such candidate.
    cands = report["candidates"]
    assert all(np.isfinite(x["mean_S_pct"]) and x["cost_ns"] > 0 for x in cands)
    assert kept["gap_pct"] <= kept["gap_se_pct"]
    within = [x for x in cands if x["gap_pct"] <= x["gap_se_pct"]]
    assert kept["cost_ns"] <= 1.5 * min(x["cost_ns"] for x in within)
    s = suboptimality(sub, reg.predict_log(sub.X))
    assert s.shape == (len(np.unique(sub.group)),) and (s >= 0).all()
    # Trained rows: most argmins land within 25% of the best block.
    assert np.median(s) < 25.0


def _cand(s: list[float], cost: float) -> Candidate:
    return Candidate("mlp", {}, "relative", "all", np.array(s), mse_log=0.0, cost_ns=cost)


def test_the_kept_model_comes_from_the_learners_allowed(corpus) -> None:  # noqa: ANN001
    c, _, datasets = corpus
    sub = c.subset(np.isin(c.bench, ["polybench.ATAX", "polybench.GEMM", "rodinia.srad"]))
    reg, report = train(sub, "test", "kernels", replace(QUICK, keep=("hgb",)))
    assert reg.learner == "hgb" and set(report["learners"]) == {"svr", "hgb", "mlp"}
    with pytest.raises(SnowpackError, match="may keep only"):
        train(sub, "test", "kernels", replace(QUICK, keep=("forest",)))


def test_choose_takes_the_cheapest_within_the_noise_of_the_best() -> None:
    best = _cand([1.0, 2.0, 3.0, 4.0], cost=1000)
    close = _cand([1.5, 1.5, 3.5, 4.0], cost=100)  # mean +0.125, paired SE 0.24: a tie
    worse = _cand([9.0, 9.0, 9.0, 9.0], cost=10)  # cheapest, but clearly worse
    assert choose([best, close, worse], cost_tolerance=1.5) is close
    # Costs within the tolerance count as equal: the better score wins.
    assert choose([best, _cand([1.5, 1.5, 3.5, 4.0], 900)], cost_tolerance=1.5) is best
    # Without a tie the best is kept, whatever it costs.
    assert choose([best, worse], cost_tolerance=1.5) is best


def test_model_bytes_round_trip_and_refuse_other_versions(small) -> None:  # noqa: ANN001
    sub, reg, _ = small
    again = Regressor.from_bytes(reg.to_bytes(), "test")
    assert np.array_equal(again.predict_log(sub.X[:50]), reg.predict_log(sub.X[:50]))
    head, _, body = gzip.decompress(reg.to_bytes()).partition(b"\n")
    for field, value, message in (
        ("sklearn_version", "0.0.1", "scikit-learn 0.0.1"),
        ("feature_set", "snowpack-0/isa-0", "never mixed"),
    ):
        bad = json.loads(head)
        bad[field] = value
        blob = gzip.compress(json.dumps(bad).encode() + b"\n" + body)
        with pytest.raises(SnowpackError, match=message) as err:
            Regressor.from_bytes(blob, "test")
        assert "klaraptor bench train-snowpack" in str(err.value)


def test_store_keeps_features_and_models_by_version(small, tmp_path: Path) -> None:  # noqa: ANN001
    _, reg, _ = small
    with Store(tmp_path / "s.sqlite") as store:
        store.put_static_features(StaticFeatures("k", "sm_90", "old-set", {"a": 1.0}))
        assert store.static_features("k", "sm_90", FEATURE_SET) is None
        assert store.static_feature_versions("k") == ["old-set"]
        with pytest.raises(SnowpackError, match="other versions"):
            static_features(None, "k", store=store)
        save_regressor(store, reg)
        rec = store.latest_stat_model("snowpack", reg.device)
        assert rec is not None and rec.sklearn_version == sklearn.__version__
        assert load_regressor(store, reg.device).info["kernels"] == reg.info["kernels"]


def test_shipped_model_is_small_and_current(h200) -> None:  # noqa: ANN001
    assert shipped_path().stat().st_size < 1_000_000
    reg = load_regressor(None, h200.key)
    assert reg.feature_set == FEATURE_SET and len(reg.info["kernels"]) == 44
    with pytest.raises(SnowpackError, match="train-snowpack"):
        load_regressor(None, "Another GPU|1 SMs")


def test_zero_measurement_build_and_select(tmp_path: Path, h200) -> None:  # noqa: ANN001
    spec = suite.get("rodinia.srad.k1")
    with Store(tmp_path / "s.sqlite") as store:
        kern = build(spec, model="snowpack", store=store, device=h200)
        assert store.count_measurements() == 0
        blocks = kern.helper.candidates
        pred = Predictor(spec, h200, store=store)
        for n in (512, 4096, 16384):
            sel = kern.select(n)
            assert sel.block in blocks
            # At the interpolation nodes the helper is the regressor itself.
        for n in _nodes(spec.data[0].lo, spec.data[0].hi)[10:14]:
            ms = pred.predict_ms(spec.size(int(n)), blocks)
            helper_ms = kern.helper.predict(spec.size(int(n))).ms
            ok = np.isfinite(ms) & np.isfinite(helper_ms)
            assert np.allclose(helper_ms[ok], ms[ok], rtol=1e-9)
        again = load(spec.name, store=store, model="snowpack", device=h200.key)
        assert again.select(4096).block == kern.select(4096).block


def test_select_with_snowpack_beside_a_measured_build(recorded_store, h200) -> None:  # noqa: ANN001
    name = "polybench.atax.k1"
    store = recorded_store(name)
    spec = suite.get(name)
    kern = build(spec, model="time_fit", store=store, device=h200, collect_data=False)
    sp = kern.select(4096, model="snowpack")
    assert sp.block in kern.helper.candidates
    assert kern.select(4096).block in kern.helper.candidates


def test_cli_select_model_snowpack_without_measurements(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    store = str(tmp_path / "new.sqlite")
    args = ["--store", store, "select", "polybench.gemm.gemm", "N=4096", "--model", "snowpack"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "snowpack" and len(out["block"]) == 3


def test_rank_prior_is_a_permutation(h200) -> None:  # noqa: ANN001
    spec = suite.get("polybench.gemm.gemm")
    blocks = [(32, 1, 1), (16, 16, 1), (256, 1, 1), (32, 32, 1), (8, 8, 1)]
    ranked = rank_prior(spec, 2048, blocks, device=h200)
    assert sorted(ranked) == sorted(blocks)


def test_a_kernel_that_does_not_compile_is_a_clear_error(make_spec, tmp_path: Path, h200) -> None:  # noqa: ANN001
    spec = make_spec(name="test.broken", source='extern "C" __global__ void scale( {')
    with Store(tmp_path / "s.sqlite") as store, pytest.raises(SnowpackError) as err:
        build(spec, model="snowpack", store=store, device=h200)
    assert "test.broken" in str(err.value) and "static features" in str(err.value)


def test_a_new_kernel_gets_features_from_nvrtc(make_spec, tmp_path: Path, h200) -> None:  # noqa: ANN001
    pytest.importorskip("cuda.bindings")
    spec = make_spec()
    with Store(tmp_path / "s.sqlite") as store:
        kern = build(spec, model="snowpack", store=store, device=h200)
        rec = store.static_features(spec.name, "sm_90", FEATURE_SET)
        assert rec is not None and rec.source == "nvrtc" and rec.features["ld_global"] >= 1
        assert kern.select(1 << 20).block in kern.helper.candidates


def test_bagged_members_learn_from_bootstrap_samples_of_benchmarks(small) -> None:  # noqa: ANN001
    from klaraptor.models.snowpack.learner import _bootstrap

    sub, _, _ = small
    rows = np.arange(len(sub))
    keep, w = _bootstrap(sub.bench[rows], np.ones(len(rows)), 0)
    drawn = set(sub.bench[keep].tolist())
    assert drawn == {n for n, k in _counts(sub, 0) if k}
    assert w.sum() == pytest.approx(sum((sub.bench == b).sum() * k for b, k in _counts(sub, 0)))
    params = {"hidden": [16], "alpha": 0.01, "max_iter": 60}
    one = fit_rows(sub, "mlp", params, "relative", "all", rows, seeds=2, bagged=True)
    two = fit_rows(sub, "mlp", params, "relative", "all", rows, seeds=2, bagged=True)
    plain = fit_rows(sub, "mlp", params, "relative", "all", rows, seeds=2)
    np.testing.assert_array_equal(one.predict(sub.X), two.predict(sub.X))  # seeded
    assert not np.array_equal(one.predict(sub.X), plain.predict(sub.X))


def _counts(sub, seed: int) -> list[tuple[str, int]]:  # noqa: ANN001
    names = np.unique(sub.bench)
    draws = np.random.default_rng(1000 + seed).integers(0, len(names), len(names))
    return [(n, int((draws == i).sum())) for i, n in enumerate(names)]


def test_the_papers_kernel_split_holds_every_evaluated_kernel_out_once(corpus) -> None:  # noqa: ANN001
    from klaraptor_bench.snowpack_eval import kernel_folds

    c, is_train, _ = corpus
    evals = c.subset(~is_train)
    folds = kernel_folds(evals)
    names = [k for f in folds for k in f]
    assert len(folds) == 4 and sorted(names) == sorted(set(evals.kernel.tolist()))
    assert max(map(len, folds)) - min(map(len, folds)) <= 1
    assert kernel_folds(evals) == folds  # seeded
    # Unlike leave-one-benchmark-out, some held-out kernel has a sibling in training.
    fold_of = {k: i for i, f in enumerate(folds) for k in f}
    siblings = [
        k
        for k in fold_of
        if any(
            j != k and j.rsplit(".", 1)[0] == k.rsplit(".", 1)[0] and fold_of[j] != fold_of[k]
            for j in fold_of
        )
    ]
    assert siblings
