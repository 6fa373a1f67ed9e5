"""GPU: build → select → tuned launch, online refinement and its persistence (real CuPy launches)."""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor.core.errors import SpecError
from klaraptor.spec import DataParam, KernelSpec

pytestmark = pytest.mark.gpu

SAXPY = r"""
extern "C" __global__ void saxpy(const float* x, float* y, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i] * 0.5f;
}
"""


def saxpy_args(D, rng):  # noqa: ANN001, ANN201 - spec callback
    import cupy

    n = D["n"]
    return (
        cupy.asarray(rng.random(n, dtype=np.float32)),
        cupy.asarray(rng.random(n, dtype=np.float32)),
        np.float32(2.0),
        np.int32(n),
    )


SPEC = KernelSpec(
    name="test.saxpy",
    source=SAXPY,
    kernel="saxpy",
    data=(DataParam("n", arg=3, lo=1, hi=1 << 28),),
    dim=1,
    grid=("ceil(n / bx)", "1", "1"),
    make_args=saxpy_args,
    idempotent=False,
    default_block=(256, 1, 1),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):  # noqa: ANN001, ANN201
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.store import Store

    store = Store(tmp_path_factory.mktemp("st") / "k.sqlite")
    opts = CollectOptions(counters=False, check=False, min_time_ms=2.0, max_repeats=10)
    kern = build(
        SPEC,
        [1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20],
        model="time_fit",
        budget=None,
        store=store,
        collect_options=opts,
        progress=False,
    )
    return kern, store


@pytest.fixture(scope="module")
def planned(tmp_path_factory):  # noqa: ANN001, ANN201
    """The default build: budgeted plan in one worker session, hot and L2-flushed points."""
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.store import Store

    store = Store(tmp_path_factory.mktemp("pl") / "k.sqlite")
    opts = CollectOptions(counters=False, check=False, min_time_ms=2.0, max_repeats=10)
    kern = build(SPEC, [1 << 16, 1 << 18, 1 << 20, 1 << 21], store=store, collect_options=opts,
                 progress=False)  # fmt: skip
    return kern, store


def test_budgeted_build_runs_its_plan_in_one_session(planned) -> None:  # noqa: ANN001
    kern, store = planned
    rep = kern.report
    plan = rep.collect.plan
    assert rep.model == "scaling" and rep.collect.measured is True
    assert rep.collect.wall_s["timing"] > 0 and plan.counts["time"] >= len(kern.helper.candidates)
    assert plan.spent_s <= 1.5 * plan.tune_once_s + 1e-9
    cold = store.measurements(SPEC.name, kern.device_key, kind="time_cold", status="ok")
    assert len(cold) == plan.counts.get("cold", 0)
    assert all(m.value["flush_l2"] and m.D["n"] == 1 << 21 for m in cold)
    hot = store.measurements(SPEC.name, kern.device_key, kind="time", status="ok")
    assert all(not m.value["flush_l2"] and m.value["wall_s"] > 0 for m in hot)


def test_a_snowpack_prior_build_times_only_its_top_k_on_the_gpu(tmp_path) -> None:  # noqa: ANN001
    """A budgeted build on the GPU with SNOWPACK's prior: the worker session times only the
    prior's 6 best at the largest size, in its order, and the chosen block is one of them."""
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.store import Store

    store = Store(tmp_path / "p.sqlite")
    opts = CollectOptions(counters=False, check=False, min_time_ms=2.0, max_repeats=10)
    kern = build(SPEC, [1 << 16, 1 << 18, 1 << 20, 1 << 21], store=store, collect_options=opts,
                 progress=False, prior="snowpack", prior_keep=6)  # fmt: skip
    order = kern.report.collect.prior.order
    top = [tuple(b) for b in kern.report.collect.prior.blocks]
    hot = store.measurements(SPEC.name, kern.device_key, kind="time", status="ok")
    at_L = [tuple(m.block) for m in hot if m.D["n"] == 1 << 21]
    assert len(order) == 6 and set(at_L) <= set(top) and len(set(at_L)) >= 5
    assert {tuple(m.block) for m in hot} <= set(top)
    assert kern.select(1 << 22).block in top
    store.close()


def test_tuned_output_equals_plain_launch_with_the_chosen_config(built) -> None:  # noqa: ANN001
    import cupy

    kern, _ = built
    rng = np.random.default_rng(3)
    n = 3_000_017
    x, y, a, nn = saxpy_args({"n": n}, rng)
    y_plain = y.copy()
    sel = kern.select(n)
    kern.tuned(x, y, a, nn)
    fn = cupy.RawModule(code=SAXPY).get_function("saxpy")
    fn(sel.grid, sel.block, (x, y_plain, a, nn))
    cupy.cuda.runtime.deviceSynchronize()
    assert sel.grid == (-(-n // sel.block[0]), 1, 1)
    assert cupy.array_equal(y, y_plain)


def test_refinement_tries_topk_then_pins_and_persists(built) -> None:  # noqa: ANN001
    from klaraptor.assemble import load

    kern, store = built
    rng = np.random.default_rng(4)
    n = 2_500_003
    args = saxpy_args({"n": n}, rng)
    tk = kern.launcher(refine=4)
    chosen = kern.select(n).block
    top = kern.selector.refine_blocks(n, 4)
    assert len(top) <= 5
    # The model's choice first, then the band's other candidates.
    top = [chosen, *(b for b in top if b != chosen)]
    used = []
    for _ in range(len(top)):
        used.append(tk.plan_for(*args)[1])
        tk(*args)
    tk.settle()
    sel = kern.selector.select(n)
    if len(top) == 1:  # nothing within the band: no trial launches, the model's choice stays
        assert used == top and sel.source == "model"
        return
    assert used == top
    assert sel.source == "refined" and sel.block in top and sel.measured_ms > 0
    # a new process (a new Kernel on the same store) starts from the refined choice
    again = load("test.saxpy", store=store, spec=SPEC, model="time_fit")
    assert again.select(n).block == sel.block and again.select(n).source == "refined"


def test_out_of_range_size_is_rejected_before_launching(built) -> None:  # noqa: ANN001
    import cupy

    kern, _ = built
    x = cupy.zeros(4, cupy.float32)
    with pytest.raises(SpecError, match="outside its range"):
        kern.tuned(x, x, np.float32(1), np.int32(0))
