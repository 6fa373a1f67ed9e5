"""The variant script `experiments/extrapolation_variants.py` (docs/extrapolation.md's variant log):
each variant changes what it says and nothing is left patched afterwards."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from klaraptor.assemble import planned
from klaraptor_bench import report as rp

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "extrapolation_variants.py"
KERNEL = "polybench.fdtd2d.k2"  # evaluated beyond the L2: the cold regime decides its pairs


@pytest.fixture(scope="module")
def xv():  # noqa: ANN201
    spec = importlib.util.spec_from_file_location("extrapolation_variants", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_default_variant_is_the_report(xv) -> None:  # noqa: ANN001
    ours = xv._task("default", "polybench", KERNEL)
    report = rp._evaluate_task("polybench", KERNEL, "main")
    assert [p.choices["klaraptor"] for p in ours.pairs] == [
        p.choices["klaraptor"] for p in report.pairs
    ]


def test_hot_only_drops_the_cold_regime_and_restores(xv) -> None:  # noqa: ANN001
    before = (planned.needs_cold, rp.default_providers)
    hot = xv._task("hot_only", "polybench", KERNEL)
    assert (planned.needs_cold, rp.default_providers) == before
    default = xv._task("default", "polybench", KERNEL)
    assert any(p.info.get("regime") == "cold" for p in default.pairs)
    assert all(p.info.get("regime") != "cold" for p in hot.pairs)


def test_budget_variants_change_the_plans_cost(xv) -> None:  # noqa: ANN001
    one = xv._task("budget_1", "polybench", KERNEL).info["plan"]
    three = xv._task("budget_3", "polybench", KERNEL).info["plan"]
    assert one["spent_s"] <= one["tune_once_s"] * 1.0 + 1e-9
    assert three["spent_s"] > one["spent_s"]
