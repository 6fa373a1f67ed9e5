"""The build report's typed parts: what a build stores is what it reports, keys and order
included, and a loaded build reads back the same parts."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from klaraptor import suite
from klaraptor.assemble import build, load
from klaraptor.assemble.report import (
    BuildReport,
    CollectionSummary,
    ModelSelection,
    PlanSummary,
)

KERNEL = "polybench.conv2d.conv2d"


@pytest.fixture()
def store(recorded, tmp_path: Path):  # noqa: ANN001, ANN201
    s = recorded.to_store(tmp_path / "r.sqlite", kernels=[KERNEL])
    yield s
    s.close()


def _built(recorded, store, **kw):  # noqa: ANN001, ANN003, ANN202
    spec = suite.get(KERNEL)
    return build(
        spec,
        spec.meta["train_sizes"],
        store=store,
        device=recorded.profile(),
        collect_data=False,
        progress=False,
        **kw,
    )


def test_a_budgeted_auto_build_stores_its_typed_parts_under_the_old_keys(recorded, store) -> None:  # noqa: ANN001
    kern = _built(recorded, store)
    rep = kern.report
    assert isinstance(rep.collect, CollectionSummary) and isinstance(rep.collect.plan, PlanSummary)
    assert isinstance(rep.selection, ModelSelection) and rep.selection.chosen == rep.model
    d = rep.to_dict()
    # replayed over the store: the budgeted keys without the GPU's, in their order
    assert list(d["collect"]) == ["budget", "cold_timings", "measured", "plan", "plan_wall_s"]
    assert d["collect"]["measured"] is False and d["collect"]["budget"] == 1.5
    assert list(d["collect"]["plan"]) == [
        "spent_s", "tune_once_s", "budget_s", "ratio", "counts", "notes"
    ]  # fmt: skip
    assert list(d["fits"])[-1] == "model_selection"
    assert list(d["fits"]["model_selection"]) == ["chosen", "reason", "noise_band", "scores"]
    assert "model_selection" not in rep.fits  # the typed part holds it
    # what the store holds (with its keys sorted) is that dict, and reads back into the same parts
    stored = store.latest_build(KERNEL, kern.device_key, rep.model)
    assert stored is not None
    assert json.dumps(stored.report, sort_keys=True) == json.dumps(d, sort_keys=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = load(KERNEL, store=store, device=kern.device_key, model=rep.model).report
    assert back is not None
    assert back.collect == rep.collect and back.selection == rep.selection
    assert json.dumps(back.to_dict(), sort_keys=True) == json.dumps(d, sort_keys=True)


def test_a_full_sweep_over_the_store_collects_nothing(recorded, store) -> None:  # noqa: ANN001
    rep = _built(recorded, store, model="scaling", budget=None).report
    assert rep.collect is None and rep.selection is None
    assert rep.to_dict()["collect"] is None and "model_selection" not in rep.to_dict()["fits"]


def test_an_unbudgeted_collection_writes_only_its_three_keys() -> None:
    part = CollectionSummary(wall_s={"total": 1.0}, counts={"time": {"ok": 3}}, ncu="ok")
    assert part.to_dict() == {"wall_s": {"total": 1.0}, "counts": {"time": {"ok": 3}}, "ncu": "ok"}
    assert CollectionSummary.from_dict(part.to_dict()) == part


def test_a_selection_without_a_fold_has_no_noise_band() -> None:
    sel = ModelSelection("scaling", "no size ≤ L/2 to fold on")
    assert sel.to_dict() == {
        "chosen": "scaling",
        "reason": "no size ≤ L/2 to fold on",
        "scores": {},
    }
    assert sel.fold_r("scaling") is None
    report = BuildReport([], "scaling", 0.0, 0.0, fits={"n": 1}, selection=sel)
    assert list(report.to_dict()["fits"]) == ["n", "model_selection"]
