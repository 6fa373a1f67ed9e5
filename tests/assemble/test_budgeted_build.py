"""The budgeted build on recorded data (no GPU): the plan's sub-sample of the recorded points,
its cost against tune-once, `model="auto"`'s rule, `plan()` and online refinement's list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import build, make_job, plan
from klaraptor.assemble import model_selection as ms
from klaraptor.assemble.planned import ladder_sizes
from klaraptor.core.errors import BuildError

KERNEL = "polybench.gemm.gemm"


@pytest.fixture()
def store(recorded, tmp_path: Path):  # noqa: ANN001, ANN201
    names = [KERNEL, "polybench.conv3d.conv3d", "polybench.atax.k1", "polybench.conv2d.conv2d"]
    s = recorded.to_store(tmp_path / "r.sqlite", kernels=names)
    yield s
    s.close()


def _build(recorded, store, name: str = KERNEL, **kw):  # noqa: ANN001, ANN003, ANN202
    spec = suite.get(name)
    return spec, build(
        spec,
        spec.meta["train_sizes"],
        store=store,
        device=recorded.profile(),
        collect_data=False,
        progress=False,
        **kw,
    )


def test_default_build_is_budgeted_and_uses_only_the_plans_points(recorded, store) -> None:  # noqa: ANN001
    spec, kern = _build(recorded, store)
    rep = kern.report
    plan = rep.collect.plan
    assert rep.model == "scaling" and rep.collect.measured is False
    assert plan.spent_s <= 1.5 * plan.tune_once_s + 1e-9 and plan.ratio > 1.3
    counts = plan.counts
    assert rep.fits["n_points"] == counts["time"] + counts["cold"]
    assert rep.fits["cold_points"] == counts["cold"] > 0
    # Every candidate timed hot at L; the smaller sizes only for some of them.
    n = len(kern.helper.candidates)
    assert counts["time"] < 3 * n and rep.fits["anchor"] == [1536]
    assert rep.fits["footprint"]["source"] == "arguments"
    # Tune-once's block is the best measured at L, and online refinement always tries it.
    at_L = {b: v[0] for (D, b), v in recorded.kernels[KERNEL].times().items() if D["N"] == 1536}
    best = kern.helper.candidates[kern.helper.info["tune_once"]]
    assert best == min(at_L, key=at_L.get)
    for N in (2048, 4096, 8192):
        blocks = kern.selector.refine_blocks(N)
        assert best in blocks and blocks[0] == kern.select(N).block and len(blocks) <= 9


@pytest.mark.parametrize("model", ["time_fit", "mwp_cwp"])
def test_per_configuration_models_measure_every_point_whatever_the_budget(
    recorded, store, model: str
) -> None:  # noqa: ANN001
    # They fit each configuration from its own sizes (and mwp_cwp reads counters): the plan's
    # sub-sample would leave most configurations unfitted (found on the H200, front-end builds).
    atax = "polybench.atax.k1"
    _, default = _build(recorded, store, atax, model=model)
    _, full = _build(recorded, store, atax, model=model, budget=None)
    assert default.report.collect is None and default.helper.model_name == model
    for N in (2048, 4096, 8192):
        D = default.selector.size(N)
        assert np.array_equal(default.helper.predict(D).ms, full.helper.predict(D).ms)


def test_full_build_uses_every_recorded_point(recorded, store) -> None:  # noqa: ANN001
    spec, kern = _build(recorded, store, model="scaling", budget=None)
    kd = recorded.kernels[KERNEL]
    assert kern.report.fits["n_points"] == len(kd.time) - sum(
        D["N"] not in spec.meta["train_sizes"] for D, _ in kd.times()
    ) + len(kd.cold)


@pytest.mark.parametrize("budget", [0.5, float("inf"), float("nan")])
def test_a_budget_below_one_is_refused(recorded, store, budget: float) -> None:  # noqa: ANN001
    with pytest.raises(BuildError, match="budget must be a number >= 1"):
        _build(recorded, store, budget=budget)


def test_the_3d_plan_stays_within_its_budget(recorded, store) -> None:  # noqa: ANN001
    _, kern = _build(recorded, store, name="polybench.conv3d.conv3d", model="scaling")
    assert kern.report.collect.plan.ratio <= 1.5 + 1e-9
    # 3DCONV's ladder: L = 96, M = 48 (no size <= 24)
    assert kern.report.fits["scaling"]["D_ref"] == [96.0]


def test_ladder_sizes_by_product() -> None:
    spec = suite.get(KERNEL)
    L, smaller = ladder_sizes([spec.size(n) for n in (256, 512, 768, 1024, 1536)])
    assert L["N"] == 1536 and [D["N"] for D in smaller] == [768, 256]


def test_plan_shows_the_budgeted_plan_and_its_cost(recorded, store) -> None:  # noqa: ANN001
    spec = suite.get(KERNEL)
    full = plan(spec, budget=None)
    assert len(full) == 5 * 51 and all(p.status == "measure" for p in full)
    dry = plan(spec)
    assert {p.D["N"] for p in dry} == {1536, 768, 256}
    assert "budgeted plan" in dry.format() and dry.executed is None
    known = plan(spec, store=store, device=recorded.profile())
    assert known.executed is not None and known.executed.ratio <= 1.5
    assert "tune-once" in known.format()


def test_auto_keeps_scaling_unless_a_fold_beats_it_clearly(recorded, store, monkeypatch) -> None:  # noqa: ANN001
    spec = suite.get(KERNEL)
    job = make_job(
        spec, store, recorded.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
    )
    band = job.noise_band()
    scores = {"scaling": 1.02, "time_fit": 1.02 * (1 - band), "mwp_cwp": 1.5}
    monkeypatch.setattr(ms, "fold_score", lambda job, name: {"r": scores[name]})
    assert ms.select_model(job)[0] == "scaling"  # better, but within twice the band
    scores["time_fit"] = 1.02 * (1 - 3 * band)
    assert ms.select_model(job)[0] == "time_fit"
    scores["time_fit"] = np.inf
    assert ms.select_model(job)[0] == "scaling"


def test_the_fold_ignores_blocks_padded_at_M_or_L(recorded, store) -> None:  # noqa: ANN001
    spec = suite.get("polybench.conv3d.conv3d")
    job = make_job(
        spec, store, recorded.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
    )
    fold = ms.fold_score(job, "scaling")
    assert fold["sizes"] == [[32], [48], [96]]
    clean = ms._unpadded(job, spec.size(48)) & ms._unpadded(job, spec.size(96))
    assert fold["compared"] == int(clean.sum()) < len(job.candidates)
    assert tuple(fold["block"]) in {b for b, c in zip(job.candidates, clean) if c}


def test_the_fold_compares_padded_blocks_when_the_lower_sizes_timed_only_those(
    recorded, store
) -> None:  # noqa: ANN001
    # On the H200 a plan timed at the smaller size only candidates that are padded there or at
    # L; the fold then had no candidate to compare and the build failed.
    import sqlite3

    spec = suite.get("polybench.conv3d.conv3d")
    sizes = [spec.size(n) for n in (48, 96)]
    job = make_job(spec, store, recorded.profile(), sizes)
    clean = ms._unpadded(job, sizes[0]) & ms._unpadded(job, sizes[1])
    assert 0 < clean.sum() < len(job.candidates)
    con = sqlite3.connect(store.path)
    with con:
        for b, c in zip(job.candidates, clean):
            if c:
                con.execute(
                    "DELETE FROM measurements WHERE kernel = ? AND d = ? AND bx = ? AND by = ? "
                    "AND bz = ?",
                    (spec.name, "[48]", *b),
                )
    con.close()
    job = make_job(spec, store, recorded.profile(), sizes)
    fold = ms.fold_score(job, "scaling")
    assert fold["compared"] > 0 and tuple(fold["block"]) in set(job.candidates)


def test_a_snowpack_prior_times_only_its_top_k_at_L(recorded, store) -> None:  # noqa: ANN001
    spec, kern = _build(recorded, store, prior="snowpack", prior_keep=6)
    rep = kern.report
    prior = rep.collect.prior
    assert prior.name == "snowpack" and len(prior.order) == 6
    plan = rep.collect.plan
    assert plan.counts["time"] >= 6 and plan.tune_once_s > 0
    top = {tuple(b) for b in prior.blocks}
    assert top == {kern.helper.candidates[i] for i in prior.order}  # scaling keeps them all
    # Only the prior's top 6 have an anchor at L, so only they can be chosen.
    for N in (2048, 4096, 8192):
        assert kern.select(N).block in top
    # 2DCONV: `auto` picks the per-configuration time_fit over the plan's points; it too may
    # choose only among the blocks the plan timed (before the fix it chose a 1x1024 block).
    _, k2 = _build(recorded, store, "polybench.conv2d.conv2d", prior="snowpack", prior_keep=8)
    assert k2.report.model == "time_fit"
    timed = {k2.helper.candidates[i] for i in range(len(k2.helper.candidates))}
    top2 = {tuple(b) for b in k2.report.collect.prior.blocks}
    assert timed == top2 and all(k2.select(N).block in top2 for N in (2048, 4096, 8192))
    with pytest.raises(BuildError, match="prior"):
        _build(recorded, store, model="time_fit", prior="snowpack")
    with pytest.raises(BuildError, match="needs a prior"):
        _build(recorded, store, prior_keep=4)
    with pytest.raises(BuildError, match="unknown prior"):
        _build(recorded, store, prior="occupancy")
