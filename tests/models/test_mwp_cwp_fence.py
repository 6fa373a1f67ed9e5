"""The thesis's configuration-level outlier fence (§5.4) as an option of `mwp_cwp`, on recorded
H200 data: off by default, the estimates it fences on, what it removes, and a model that
conforms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from klaraptor import suite
from klaraptor.assemble import make_job
from klaraptor.core.errors import BuildError
from klaraptor.fit.training import hardware_inputs
from klaraptor.models import get_model
from klaraptor.models.checks import check_model
from klaraptor.models.mwp_cwp import MwpCwpModel
from klaraptor.models.mwp_cwp_fence import FENCE_REASON, configuration_fence, estimated_cycles
from klaraptor.program import Program, const

KERNEL = "polybench.atax.k1"


@pytest.fixture(scope="module")
def job(recorded, tmp_path_factory):  # noqa: ANN001, ANN201
    store = recorded.to_store(tmp_path_factory.mktemp("fence") / "s.sqlite", kernels=[KERNEL])
    spec = suite.get(KERNEL)
    yield make_job(
        spec, store, recorded.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
    )
    store.close()


def test_off_by_default_and_the_default_build_unchanged(job) -> None:  # noqa: ANN001
    plain, rep = MwpCwpModel().make_helper(job)
    off, rep_off = MwpCwpModel(config_fence=False).make_helper(job)
    assert "configuration_fence" not in rep and "configuration_fence" not in rep_off
    assert MwpCwpModel().config_fence is False and "config_fence" not in repr(MwpCwpModel())
    for n in (2048, 8192):
        D = job.spec.size(n)
        assert np.array_equal(plain.predict(D).ms, off.predict(D).ms)


def test_the_estimate_is_the_template_on_the_points_own_metrics(job) -> None:  # noqa: ANN001
    model = MwpCwpModel()
    idx, cycles = estimated_cycles(model, job)
    assert idx.size and np.isfinite(cycles).all()
    hw = hardware_inputs(job.profile)
    for k in (0, idx.size // 2, idx.size - 1):
        i = int(idx[k])
        b = tuple(int(v) for v in job.train.blocks[i])
        D = job.train.size_of(i)
        threads = b[0] * b[1] * b[2]
        gx, gy, gz = job.spec.grid_for(D, b)
        vals = model.point_values(job.train.derived[i], b, threads, -(-threads // 32))
        quantities = {
            "blocks": float(gx * gy * gz),
            "threads": float(threads),
            "regs": float(job.attrs.num_regs),
            "smem": float(job.attrs.static_smem + job.spec.dynamic_smem_for(D, b)),
        }
        subs = {
            k2: Program(k2, [], [("value", const(v))], ["value"])
            for k2, v in {**quantities, **vals}.items()
        }
        prog = model.program([]).bind(subs)
        want = prog.evaluate(**{h: hw[h] for h in model.hardware if h in prog.inputs})
        assert cycles[k] == pytest.approx(float(want["cycles"]), rel=1e-12)


def test_the_fence_removes_exactly_the_points_above_q3_plus_1_5_iqr(job) -> None:  # noqa: ANN001
    model = MwpCwpModel()
    idx, cycles = estimated_cycles(model, job)
    fenced, info = configuration_fence(model, job)
    removed = 0
    for entry in info["sizes"]:
        at = [k for k, i in enumerate(idx) if int(job.train.D[i, 0]) == entry["D"][0]]
        c = cycles[at]
        q1, q3 = np.percentile(c, [25, 75])
        fence = q3 + 1.5 * (q3 - q1)
        assert entry["fence_cycles"] == pytest.approx(fence)
        above = sorted(
            tuple(int(v) for v in job.train.blocks[idx[k]]) for k, x in zip(at, c) if x > fence
        )
        assert sorted(tuple(b) for b in entry["removed"]) == above
        removed += len(above)
    assert info["points_removed"] == removed == job.train.n - fenced.train.n
    assert removed > 0  # this kernel's recorded data has an outlier (1024 threads at N = 1024)
    assert fenced.candidates == job.candidates  # each removed block keeps points at other sizes


def test_a_configuration_above_the_fence_everywhere_is_rejected(job) -> None:  # noqa: ANN001
    slow = job.candidates[3]
    # A thousand times the memory instructions: a thousand times the estimated cycles.
    derived = [
        {**d, "gld_per_warp": d["gld_per_warp"] * 1e3, "gst_per_warp": d["gst_per_warp"] * 1e3}
        if tuple(int(v) for v in job.train.blocks[i]) == slow and "inst_per_warp" in d
        else d
        for i, d in enumerate(job.train.derived)
    ]
    bad = replace(job, train=replace(job.train, derived=derived))
    fenced, info = configuration_fence(MwpCwpModel(), bad)
    assert slow not in fenced.candidates and fenced.rejected[slow] == FENCE_REASON
    assert info["candidates_removed"] == [list(slow)]
    helper, report = MwpCwpModel(config_fence=True).make_helper(bad)
    assert slow not in helper.candidates
    assert report["configuration_fence"]["candidates_removed"] == [list(slow)]


def test_the_fenced_model_is_registered_conforms_and_needs_counters(job) -> None:  # noqa: ANN001
    model = get_model("mwp_cwp_fenced")
    assert isinstance(model, MwpCwpModel) and model.config_fence
    assert model.name == "mwp_cwp_fenced" and "config_fence=True" in repr(model)
    helper = check_model("mwp_cwp_fenced", job)
    assert helper.model_name == "mwp_cwp_fenced"
    assert "configuration_fence" in helper.info["fits"]
    bare = replace(
        job,
        train=replace(
            job.train,
            derived=[{"time_ms": d["time_ms"]} for d in job.train.derived],
        ),
    )
    with pytest.raises(BuildError, match="configuration fence of mwp_cwp needs them"):
        configuration_fence(MwpCwpModel(), bare)
