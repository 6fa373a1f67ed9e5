"""The KernelSpec of scale_items.cuh for `klaraptor build cpp_dispatch_spec:SPEC` (run from this
directory): ITEMS is a template argument, each variant the NVRTC instance `scale_items<ITEMS>`."""

from pathlib import Path

import numpy as np

from klaraptor.spec import DataParam, KernelSpec

HERE = Path(__file__).parent


def make_args(D, rng):  # noqa: ANN001, ANN201 - a klaraptor argument factory
    import cupy as cp

    n = D["n"]
    return cp.asarray(rng.random(n, dtype=np.float32)), cp.empty(n, cp.float32), np.int32(n)


SPEC = KernelSpec(
    name="examples.cpp_dispatch.scale_items",
    source=(HERE / "scale_items.cuh").read_text().replace("#pragma once", ""),
    kernel="scale_items",
    data=(DataParam("n", arg=2),),
    dim=1,
    grid=("ceil(n / (bx * ITEMS))", "1", "1"),
    make_args=make_args,
    params={"ITEMS": (1, 2, 4, 8)},
    param_style="template",
    default_params={"ITEMS": 1},
    constraints=("bx % 32 == 0", "bx * ITEMS <= 8192"),
    meta={"train_sizes": [1 << 20, 1 << 21, 1 << 22, 1 << 23]},
)
