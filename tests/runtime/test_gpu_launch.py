"""GPU: build → select → tuned launch, online refinement and its persistence (real CuPy launches)."""

from __future__ import annotations

import numpy as np
import pytest

from klaraptor.errors import SpecError
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
    from klaraptor.build import build
    from klaraptor.gpu.collect import CollectOptions
    from klaraptor.store import Store

    store = Store(tmp_path_factory.mktemp("st") / "k.sqlite")
    opts = CollectOptions(counters=False, check=False, min_time_ms=2.0, max_repeats=10)
    kern = build(
        SPEC,
        [1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20],
        model="time_fit",
        store=store,
        collect_options=opts,
        progress=False,
    )
    return kern, store


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
    from klaraptor.build import load

    kern, store = built
    rng = np.random.default_rng(4)
    n = 2_500_003
    args = saxpy_args({"n": n}, rng)
    tk = kern.launcher(refine=4)
    top = [b for b, _ in kern.select(n).topk[:4]]
    used = []
    for _ in range(4):
        used.append(tk.plan_for(*args)[1])
        tk(*args)
    assert used == top
    tk.settle()
    sel = kern.selector.select(n)
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
