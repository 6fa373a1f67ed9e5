"""Builds of kernels whose spec constrains the block (no GPU, recorded H200 data).

Collection measures only the blocks the constraints admit, so a build's candidates must be those
blocks: the per-configuration models (`time_fit`, `mwp_cwp`) fit one function per candidate and
cannot fit a candidate that was never measured. Found on the H200: a front-end build with
`constraints=("bx % 128 == 0",)` and `model="time_fit"` failed with "table fit covers 8/32
configurations" (benchmarks/results/h200/collect_logs/gpu_tests_771af2b_frontends_collect.log).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.core.errors import BuildError, UnmeasuredError
from klaraptor.core.types import Block
from klaraptor.fit.training import FitOptions
from klaraptor.spec import KernelSpec
from klaraptor.store import Store
from klaraptor.suite.recorded import RecordedDataset, load_recorded, recorded_path

KERNEL = "polybench.atax.k1"  # 1-D: 32 candidates (32, 64, …, 1024)
EVERY_128 = ("bx % 128 == 0",)  # the front-end GPU tests' constraint: 8 of the 32 admitted


def _collected(
    data: RecordedDataset, spec: KernelSpec, path: Path, keep: Callable[[Block], bool]
) -> Store:
    """A store holding the recorded points of `spec`'s kernel at the blocks `keep` admits, as a
    collection of `spec` leaves it (it measures admissible blocks only)."""
    kd = data.kernels[spec.name]
    d = kd.n_data

    def rows(table: list) -> list:  # noqa: ANN001
        return [r for r in table if keep(tuple(int(v) for v in r[d : d + 3]))]

    only = dataclasses.replace(
        kd,
        fingerprint=spec.fingerprint(),
        time=rows(kd.time),
        cold=rows(kd.cold),
        ncu=rows(kd.ncu),
    )
    return RecordedDataset(data.provenance, data.device, {spec.name: only}).to_store(path)


def _build(data: RecordedDataset, spec: KernelSpec, store: Store, **kw):  # noqa: ANN003, ANN202
    return build(
        spec,
        spec.meta["train_sizes"],
        store=store,
        device=data.profile(),
        collect_data=False,
        progress=False,
        **kw,
    )


def _admitted(block: Block) -> bool:
    return block[0] % 128 == 0


@pytest.mark.parametrize("model", ["time_fit", "mwp_cwp"])
def test_per_configuration_models_build_over_the_admissible_blocks(
    recorded, tmp_path: Path, model: str
) -> None:  # noqa: ANN001
    spec = dataclasses.replace(suite.get(KERNEL), constraints=EVERY_128)
    store = _collected(recorded, spec, tmp_path / "s.sqlite", _admitted)
    # The per-configuration fit alone: it needs every candidate measured.
    table = FitOptions(mode="table")
    kern = _build(recorded, spec, store, model=model, fit=table)
    admitted = tuple((bx, 1, 1) for bx in range(128, 1025, 128))
    assert kern.helper.candidates == admitted
    methods = {m["method"] for m in kern.report.fits["metrics"].values()}
    assert "table" in methods and "joint" not in methods
    # The others are on record with the constraint that keeps them out.
    out = {b: why for b, why in kern.selector.rejected.items() if not _admitted(b)}
    assert len(out) == 24
    assert all("bx % 128 == 0" in why for why in out.values())
    for N in (2048, 4096, 8192):
        assert kern.select(N).block in admitted
    # The default fit options (table or joint, the better) build as well.
    assert _build(recorded, spec, store, model=model).helper.candidates == admitted
    store.close()


def test_the_h200_failure_two_sizes_and_default_fit_options(recorded, tmp_path: Path) -> None:  # noqa: ANN001
    # As the front-end GPU test: two training sizes, so 16 points, too few for the joint fit
    # that used to stand in when the per-configuration fit covered 8 of 32 candidates.
    spec = dataclasses.replace(suite.get("polybench.corr.k1"), constraints=EVERY_128)
    store = _collected(recorded, spec, tmp_path / "s.sqlite", _admitted)
    kern = build(
        spec, [768, 1536], model="time_fit", store=store, device=recorded.profile(),
        collect_data=False, progress=False,
    )  # fmt: skip
    assert len(kern.helper.candidates) == 8
    assert kern.report.fits["metrics"]["time_ms"]["method"] == "table"
    store.close()


def test_a_recorded_rodinia_constraint_leaves_only_measured_candidates(tmp_path: Path) -> None:
    # Real collection under a real static constraint (pathfinder: bx > 2 · rows of the pyramid).
    data = load_recorded(recorded_path("rodinia"))
    spec = suite.get("rodinia.pathfinder.dynproc")
    measured = {b for (_, b) in data.kernels[spec.name].times()}
    store = data.to_store(tmp_path / "r.sqlite", kernels=[spec.name])
    kern = _build(data, spec, store, model="time_fit", fit=FitOptions(mode="table"))
    assert set(kern.helper.candidates) == measured
    assert kern.report.fits["metrics"]["time_ms"]["method"] == "table"
    assert kern.selector.rejected == {
        (32, 1, 1): "constraint 'bx > 40' is false at every training size"
    }
    store.close()


def test_the_budgeted_build_plans_over_the_admissible_blocks_only(recorded, tmp_path: Path) -> None:  # noqa: ANN001
    spec = dataclasses.replace(suite.get(KERNEL), constraints=EVERY_128)
    store = _collected(recorded, spec, tmp_path / "s.sqlite", _admitted)
    kern = _build(recorded, spec, store, model="scaling")
    assert all(_admitted(b) for b in kern.helper.candidates) and len(kern.helper.candidates) == 8
    # Tune-once's block is an admitted one measured at the largest training size.
    assert kern.helper.info["tune_once"] is not None
    store.close()


@pytest.mark.parametrize("model", ["time_fit", "mwp_cwp"])
def test_unmeasured_admissible_blocks_are_left_out_with_why(
    recorded, tmp_path: Path, model: str
) -> None:  # noqa: ANN001
    # Only two of the eight admissible blocks have successful measurements (the rest failed, say).
    spec = dataclasses.replace(suite.get(KERNEL), constraints=EVERY_128)
    store = _collected(recorded, spec, tmp_path / "s.sqlite", lambda b: b[0] in (256, 512))
    kern = _build(recorded, spec, store, model=model)
    assert kern.helper.candidates == ((256, 1, 1), (512, 1, 1))
    assert "no successful measurement" in kern.selector.rejected[(384, 1, 1)]
    pred = kern.helper.predict(kern.selector.size(4096))
    assert np.isfinite(pred.ms).all()
    store.close()


def test_no_measured_admissible_block_is_a_clear_error(recorded, tmp_path: Path) -> None:  # noqa: ANN001
    # The store holds points of blocks the constraint now excludes only (an older collection).
    spec = dataclasses.replace(suite.get(KERNEL), constraints=EVERY_128)
    store = _collected(recorded, spec, tmp_path / "s.sqlite", lambda b: not _admitted(b))
    with pytest.raises(UnmeasuredError, match=r"none of the 8 candidate blocks") as err:
        _build(recorded, spec, store, model="time_fit")
    assert isinstance(err.value, BuildError) and "bx % 128 == 0" in str(err.value)
    store.close()
