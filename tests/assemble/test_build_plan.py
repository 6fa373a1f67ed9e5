"""One concept and one name for a plan: `klaraptor.plan` returns the pipeline's own BuildPlan
(`FullSweep` or `BudgetedPlan`), the object a build runs, and shows it as before."""

from __future__ import annotations

from pathlib import Path

import klaraptor
from klaraptor.assemble.pipeline import (
    BudgetedPlan,
    BuildPlan,
    BuildRequest,
    FullSweep,
    make_build_plan,
)
from klaraptor.device.profile import recorded_profile
from klaraptor.store import Store
from tests import helpers as hs


def test_plan_returns_the_pipelines_plan() -> None:
    spec = hs.mn_spec()
    sizes = [(512, 512), (1024, 1024), (2048, 2048)]
    budgeted = klaraptor.plan(spec, sizes)
    assert isinstance(budgeted, BudgetedPlan) and isinstance(budgeted, BuildPlan)
    assert budgeted.plan is not None and budgeted.plan.budget == 1.5
    assert repr(budgeted).startswith("<BuildPlan synthetic.mn:") and "budget 1.5×" in repr(budgeted)
    assert "budgeted plan:" in budgeted.format() and len(budgeted) == len(list(budgeted))
    full = klaraptor.plan(spec, sizes, budget=None)
    assert isinstance(full, FullSweep) and isinstance(full, BuildPlan) and full.plan is None
    assert full.format().endswith("full collection: every point above is timed (no budget)")
    assert {p.D for p in full} == {spec.size(s) for s in sizes}


def test_a_builds_full_sweep_is_the_plan_shown(tmp_path: Path) -> None:
    """The FullSweep a build without a budget runs shows what `plan(budget=None)` shows."""
    spec, h200 = hs.mn_spec(), recorded_profile("h200")
    sizes = [spec.size(s) for s in [(512, 512), (1024, 1024)]]
    req = BuildRequest(
        spec=spec, sizes=sizes, model="time_fit", budget=None, store=Store(tmp_path / "s.db"),
        device=h200, collect_data=False, collect_options=None, fit=None, cost=None,
        progress=False, executor=None, prior=None, prior_keep=None,
    )  # fmt: skip
    device, run = make_build_plan(req, h200)
    shown = klaraptor.plan(spec, sizes, budget=None, device=h200)
    assert device is h200 and isinstance(run, FullSweep) and run == shown
    assert run.format() == shown.format() and run.points == shown.points
