"""`klaraptor.tune`'s shared machinery: argument inference, grid rules, training sizes, build
names, and what collection workers receive. Front-end specifics are in test_numba.py,
test_torch.py and test_cuda_core.py."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import klaraptor
from klaraptor.collect.jobfile import imports_main
from klaraptor.collect.ncu import kernel_matches
from klaraptor.core.errors import SpecError
from klaraptor.frontends.decorator import (
    CallRule,
    UnavailableRule,
    _dotted,
    default_training_sizes,
    grid_dim,
    grid_rule,
)
from klaraptor.frontends.inference import (
    Extent,
    InferenceError,
    InferredArgs,
    describe_args,
    match_extent,
)
from klaraptor.spec import DataParam, KernelSpec


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1000, "n"),
        (64, "m"),
        (64000, "n * m"),
        (1_000_000, "n * n"),
        (2000, "2 * n"),
        (1002, "n + 2"),
        (998, "n - 2"),
        (3, "3"),
        (1100, "1100"),
    ],
)
def test_inference_extents(value: int, expected: str) -> None:
    assert match_extent(value, {"n": 1000, "m": 64}).describe() == expected


def test_inference_reproduces_types_and_scales_shapes() -> None:
    args = (
        np.zeros((100, 8), np.float32),
        np.zeros((8, 100), np.complex64, order="F"),
        np.zeros(800, np.int16),
        np.zeros(102, np.float64),
        np.int32(100),
        8,
        0.5,
        True,
        np.uint8(7),
    )
    info = describe_args(args, {"n": 100, "m": 8}, ("a", "b", "c", "d", "n", "m", "s", "f", "u"))
    made = InferredArgs(info, "cupy").host({"n": 40, "m": 4}, np.random.default_rng(0))
    assert [getattr(a, "shape", None) for a in made[:4]] == [(40, 4), (4, 40), (160,), (42,)]
    assert [a.dtype for a in made[:4]] == [np.float32, np.complex64, np.int16, np.float64]
    assert made[1].flags.f_contiguous and not made[1].flags.c_contiguous
    assert type(made[4]) is np.int32 and made[4] == 40
    assert (type(made[5]), made[5], made[6], made[7]) == (int, 4, 0.5, True)
    assert type(made[8]) is np.uint8 and made[8] == 7
    assert 0 <= made[0].min() and made[0].max() < 1 and made[2].max() < 8
    again = InferredArgs(info, "cupy").host({"n": 40, "m": 4}, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(made[:4], again[:4]))  # reproducible
    assert pickle.loads(pickle.dumps(InferredArgs(info, "numba"))) == InferredArgs(info, "numba")
    # The footprint the collection worker counts without making the arrays.
    made_bytes = sum(a.nbytes for a in made if getattr(a, "ndim", 0) > 0)
    assert InferredArgs(info, "cupy").nbytes({"n": 40, "m": 4}) == made_bytes > 0


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (None, r"argument 0 \(a\) is a builtins.NoneType, which klaraptor cannot make"),
        (np.zeros((4, 4))[:, 1], r"argument 0 \(a\) is a non-contiguous array"),
        ({"n": 3}, "builtins.dict"),
    ],
)
def test_inference_refuses_what_it_cannot_make(arg, message: str) -> None:  # noqa: ANN001
    with pytest.raises(InferenceError, match=message) as e:
        describe_args((arg,), {"n": 4}, ("a",))
    assert "make_args" in str(e.value)


def test_grid_rules_and_dimensionality() -> None:
    assert grid_rule("ceil(n / bx)", ("n",), "k") == ("ceil(n / bx)", "1", "1")
    g = grid_rule(["ceil(r / bx)", "ceil(c / by)"], ("r", "c"), "k")
    assert g == ("ceil(r / bx)", "ceil(c / by)", "1") and grid_dim(g) == 2
    assert grid_dim(("ceil(n / (bx * by * bz))", "1", "1")) == 3
    assert grid_dim(("n", "m", "1")) == 1  # a 2-D grid of 1-D blocks
    with pytest.raises(SpecError, match="names m, q, which is neither"):
        grid_rule("ceil(m / bx) + q", ("n",), "k")


def test_training_sizes_lie_below_the_first_call() -> None:
    spec = KernelSpec(
        name="t.k",
        source='extern "C" __global__ void k(int n, int m) {}',
        kernel="k",
        data=(DataParam("n", arg=0), DataParam("m", arg=1, lo=8)),
        dim=2,
        grid=("ceil(n / bx)", "ceil(m / by)", "1"),
        make_args=lambda D, rng: (),
    )
    sizes = default_training_sizes(spec, spec.size({"n": 4096, "m": 100}))
    assert [tuple(s.values()) for s in sizes] == [(256, 8), (512, 12), (1024, 25), (2048, 50)]
    with pytest.raises(klaraptor.BuildError, match="too small to measure below it"):
        default_training_sizes(spec, spec.size({"n": 2, "m": 8}))


def test_build_names_are_dotted_identifiers() -> None:
    assert _dotted("numba.__main__.<lambda>") == "numba.__main__._lambda_"
    assert _dotted("cupy.3d-stencil") == "cupy._3d_stencil"


def test_data_rule_functions_stay_in_the_calling_process() -> None:
    rule = CallRule(lambda x, y, n: n, "n")
    assert rule((1, 2, 3)) == 3
    placeholder = pickle.loads(pickle.dumps(rule))
    assert isinstance(placeholder, UnavailableRule)
    with pytest.raises(SpecError, match="read by a function of the calling process only"):
        placeholder((1, 2, 3))


def test_tune_refuses_what_it_cannot_wrap() -> None:
    def plain(x, n):  # noqa: ANN001, ANN202
        return None

    with pytest.raises(SpecError, match="put @klaraptor.tune"):
        klaraptor.tune(data={"n": 1}, grid="ceil(n / bx)")(plain)
    with pytest.raises(SpecError, match="klaraptor.tune wraps a numba.cuda.jit kernel"):
        klaraptor.tune(data={"n": 1}, grid="ceil(n / bx)")(42)
    with pytest.raises(SpecError, match="on_missing must be one of"):
        klaraptor.tune(data={"n": 1}, grid="ceil(n / bx)", on_missing="later")


def test_worker_recreates_main_only_when_a_job_imports_from_it() -> None:
    import __main__

    payload = {"module_name_as_data": "__main__", "values": [1, 2]}
    assert not imports_main(pickle.dumps(payload, protocol=5))
    assert imports_main(pickle.dumps(Extent, protocol=5)) is False

    class Local:
        pass

    Local.__module__ = "__main__"
    Local.__qualname__ = "Local"
    __main__.Local = Local  # type: ignore[attr-defined]
    try:
        for protocol in (2, 5):
            assert imports_main(pickle.dumps(Local, protocol=protocol))
    finally:
        del __main__.Local  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "kernel", "ok"),
    [
        ("scale", "scale", True),
        (
            "__main__::scale[abi:v1][abi:cw51](Array<float, 1, C, mutable, aligned>, long long)",
            "scale",
            True,
        ),
        (
            "_ZN8__main__5scaleB2v1B92cw51cXTLSUwv1sDUaE5ArrayIfLi1E1C7mutable7alignedEx",
            "scale",
            True,
        ),
        ("void gemm<float>(float *, int)", "gemm", True),
        ("scale2", "scale", False),
        ("__main__::upscale(float)", "scale", False),
        ("_ZN8__main__6scale2E", "scale", False),
    ],
)
def test_ncu_kernel_names_of_cpp_and_numba_kernels(name: str, kernel: str, ok: bool) -> None:
    assert kernel_matches(name, kernel) is ok
