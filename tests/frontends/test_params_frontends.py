"""`klaraptor.tune(params=...)` on the CPU: a Numba kernel factory run in Numba's CUDA
simulator (tests/frontends/conftest.py), its spec, its default launch, and launches of the
variant a build chooses per size.

The build launched from is made from a store of timed points that follow the synthetic law of
tests/assemble/test_program_parameters.py (no GPU here): these tests check that the decorator
carries the variant from `select` to the launch, not the model. The CuPy RawKernel route is
tested on a GPU (tests/frontends/test_frontends_gpu.py)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

numba = pytest.importorskip("numba")
from numba import cuda  # noqa: E402

import klaraptor  # noqa: E402
from klaraptor.assemble import build  # noqa: E402
from klaraptor.backends.numba_backend import NumbaBackend  # noqa: E402
from klaraptor.core.errors import SpecError  # noqa: E402
from klaraptor.core.types import KernelAttributes, ParamValues  # noqa: E402
from klaraptor.device.profile import recorded_profile  # noqa: E402
from klaraptor.frontends.numba import NumbaKernelSpec  # noqa: E402
from klaraptor.spec import KernelSpec  # noqa: E402
from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store  # noqa: E402
from klaraptor.store.records import params_text  # noqa: E402
from tests.assemble.test_program_parameters import REGS, TRAIN, law_ms  # noqa: E402

ITEMS = (1, 2, 4, 8)
MADE: list[int] = []  # the ITEMS of every kernel the factory made, in order


def scale(ITEMS: int) -> Any:  # noqa: N803 - a compile-time constant, named as in CUDA C++
    """A kernel factory: `y = 2 x` with ITEMS consecutive elements per thread."""
    MADE.append(ITEMS)

    @cuda.jit
    def scale_items(x, y, n):  # noqa: ANN001, ANN202 - a Numba kernel
        i0 = cuda.grid(1) * ITEMS
        for j in range(ITEMS):
            if i0 + j < n:
                y[i0 + j] = 2.0 * x[i0 + j]

    return scale_items


def tune_scale(store: Store, **kw: Any) -> Any:
    kw.setdefault("on_missing", "default")
    kw.setdefault("default_params", {"ITEMS": 2})
    return klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / (bx * ITEMS))",
        params={"ITEMS": ITEMS},
        constraints=("bx * ITEMS <= 4096",),
        store=store,
        device=recorded_profile("h200"),
        progress=False,
        **kw,
    )(scale)


def vectors(n: int) -> tuple[Any, Any]:
    return cuda.to_device(np.linspace(0.0, 1.0, n, dtype=np.float32)), cuda.to_device(
        np.zeros(n, dtype=np.float32)
    )


def synthetic_build(spec: KernelSpec, store: Store) -> Any:
    """A build of `spec` from timed points that follow the synthetic law (a store as a GPU run
    would leave it: per-variant attributes, every (variant, block) at every training size)."""
    prof = recorded_profile("h200")
    store.put_kernel(
        KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
    )
    attrs = {
        params_text(ParamValues(("ITEMS",), (i,))): KernelAttributes(REGS[i], 0, 0, 0, 1024, 49152)
        for i in ITEMS
    }
    store.put_collect_facts(
        spec.name,
        prof.key,
        CollectFacts(
            device_name=prof.name,
            attributes=attrs["ITEMS=1"],
            variant_attributes=attrs,
            arg_bytes=tuple(((n,), 8 * n) for n in TRAIN),
        ),
    )
    store.save_profile(prof)
    rows = []
    for n in TRAIN:
        D = spec.size(n)
        for items in ITEMS:
            pv = spec.param_values({"ITEMS": items})
            for t in range(32, 1025, 32):
                if t * items > 4096:
                    continue
                grid = spec.grid_for(D, (t, 1, 1), pv)
                value = {"median_ms": law_ms(n, t, items), "spread": 0.01, "grid": list(grid)}
                rows.append(
                    Measurement(spec.name, prof.key, D, (t, 1, 1), "time", "ok", value, params=pv)
                )
    store.put_measurements(rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build(
            spec,
            list(TRAIN),
            model="scaling",
            store=store,
            device=prof,
            collect_data=False,
            budget=None,
            progress=False,
        )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "s.sqlite")


def test_a_kernel_factory_makes_a_spec_with_program_parameters(store: Store) -> None:
    t = tune_scale(store)
    x, y = vectors(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t(x, y, 1000)
    np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())
    spec = t.spec
    assert isinstance(spec, NumbaKernelSpec) and spec.kernel_factory is scale
    assert spec.param_names == ("ITEMS",) and spec.default_variant["ITEMS"] == 2
    assert spec.name.startswith("numba.tests.frontends.test_params_frontends.scale.v")
    # The factory's source (the kernel inside it) is what the fingerprint covers.
    assert "def scale_items" in spec.source
    # No build: the default variant, with the default block and the grid over ITEMS.
    assert t.plan_params(x, y, 1000) == ParamValues(("ITEMS",), (2,))
    assert t.plan_for(x, y, 1000) == ((2, 1, 1), (256, 1, 1), 0)


def test_the_backend_compiles_the_factorys_kernel_per_variant(store: Store) -> None:
    t = tune_scale(store)
    x, y = vectors(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t(x, y, 64)
    spec = t.spec
    if type(spec.numba_kernel).__name__ == "FakeCUDAKernel":
        pytest.skip("the simulator's kernels do not compile (measuring needs a GPU)")
    fn = NumbaBackend().compile_spec(spec, spec.param_values({"ITEMS": 4}))
    assert fn.dispatcher is not spec.numba_kernel


def test_the_build_chooses_the_variant_and_the_factory_makes_it(store: Store) -> None:
    first = tune_scale(store)
    x, y = vectors(3000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first(x, y, 3000)
    kern = synthetic_build(first.spec, store)
    # A new tuned kernel over the same factory finds the build by its name (the fingerprint).
    t = tune_scale(store, on_missing="build")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sizes = (1000, 3000)
        for n in sizes:
            x, y = vectors(n)
            del MADE[:]
            t(x, y, n)
            sel = kern.select(n)
            assert t.plan_params(x, y, n) == sel.params
            assert t.plan_for(x, y, n) == (sel.grid, sel.block, 0)
            np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())
            assert MADE in ([], [sel.params["ITEMS"]])  # made once per variant, then cached
    assert t.kernel is not None and t.kernel.spec.fingerprint() == first.spec.fingerprint()
    # The law favours ITEMS = 4 over the default 2: the build's choice is not the default.
    assert kern.select(3000).params["ITEMS"] != 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"params": {"ITEMS": ()}}, "needs a non-empty sequence"),
        ({"params": {"bx": (1, 2)}}, "reserved"),
        ({"params": {"ITEMS": (1, 1)}}, "duplicates"),
        ({"params": [1, 2]}, "must map each program parameter"),
        ({"params": {"ITEMS": (1, 2)}, "default_params": {"ITEMS": 3}}, "3 is not one of"),
        ({"params": {"ITEMS": (1, 2)}, "param_style": "macro"}, "'define' or 'template'"),
    ],
)
def test_bad_params_are_refused_at_decoration(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", **kw)


def test_what_cannot_take_params_says_so() -> None:
    deco = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", params={"ITEMS": (1, 2)})
    with pytest.raises(SpecError, match="through a kernel factory"):
        deco(cuda.jit(lambda x, y, n: None))

    def not_a_factory(ITEMS: int) -> int:  # noqa: N803
        return ITEMS

    with pytest.raises(SpecError, match="returned a builtins.int, not a numba.cuda.jit kernel"):
        deco(not_a_factory)

    def no_keyword(items: int) -> Any:
        return None

    with pytest.raises(SpecError, match="must take each program parameter as a keyword"):
        deco(no_keyword)
    grid_names_a_stranger = klaraptor.tune(
        data={"n": "n"}, grid="ceil(n / (bx * UNROLL))", params={"ITEMS": (1, 2)}
    )
    with pytest.raises(SpecError, match=r"UNROLL.*program parameter \(ITEMS\)"):
        grid_names_a_stranger(scale)
