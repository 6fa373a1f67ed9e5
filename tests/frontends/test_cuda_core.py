"""cuda.core front-end on the CPU: NVRTC options ↔ ProgramOptions, parameter names, errors.

Compiling and launching through cuda.core need a GPU (tests/frontends/test_frontends_gpu.py).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import klaraptor
from klaraptor.core.errors import MissingDependencyError, SpecError
from klaraptor.frontends.cuda_core import (
    CoreAdapter,
    CoreKernel,
    array_pointer,
    cuda_core_module,
    program_options_kwargs,
)
from klaraptor.frontends.inference import InferenceError, describe_args
from klaraptor.spec.cuda_source import c_param_names

SRC = r"""
// a comment naming scale(int a) must not confuse the parser
extern "C" __global__ void scale(const float* __restrict__ x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
template <typename T> __device__ T twice(T v) { return 2 * v; }
extern "C" __global__ void __launch_bounds__(256) tile(float (*grid)[16], const int rows, int)
{ }
extern "C" __global__ void none(void) { }
"""

OPTIONS = [
    "--std=c++17",
    "--use_fast_math",
    "-DFOO=3",
    "-DBAR",
    "-I/tmp/include",
    "-lineinfo",
    "--maxrregcount=64",
    "--fmad=false",
    "--ftz=true",
    "--prec-div=false",
    "--prec-sqrt=false",
    "-G",
    "--extra-device-vectorization",
    "--device-as-default-execution-space",
]


def test_cuda_core_parameter_names_from_the_source() -> None:
    assert c_param_names(SRC, "scale") == ("x", "y", "n")
    assert c_param_names(SRC, "none") == ()
    assert c_param_names(SRC, "tile") is None  # an unnamed parameter: names cannot be read
    assert c_param_names(SRC, "twice") is None  # not a __global__ function


def test_cuda_core_nvrtc_options_become_program_options() -> None:
    kw = program_options_kwargs(OPTIONS)
    assert kw["std"] == "c++17" and kw["use_fast_math"] is True and kw["max_register_count"] == 64
    assert kw["define_macro"] == [("FOO", "3"), "BAR"] and kw["include_path"] == ["/tmp/include"]
    assert kw["fma"] is False and kw["ftz"] is True and kw["debug"] is True
    with pytest.raises(SpecError, match=r"NVRTC option '--relocatable-device-code=true' has no"):
        program_options_kwargs(["--relocatable-device-code=true"])


def test_cuda_core_program_options_give_back_the_same_nvrtc_options() -> None:
    """cuda.core turns the ProgramOptions back into NVRTC options: the same ones (spelled in
    their long form), so the kernel it compiles is the one klaraptor measures."""
    core = pytest.importorskip("cuda.core")
    po = core.ProgramOptions(arch="sm_90", **program_options_kwargs(OPTIONS))
    if not hasattr(po, "as_bytes"):
        pytest.skip("this cuda.core cannot show its NVRTC options")
    got = {b.decode() for b in po.as_bytes("nvrtc")} - {"-arch=sm_90"}
    long_form = {
        "-DFOO=3": "--define-macro=FOO=3",
        "-DBAR": "--define-macro=BAR",
        "-I/tmp/include": "--include-path=/tmp/include",
        "-lineinfo": "--generate-line-info",
        "-G": "--device-debug",
    }
    assert got == {long_form.get(o, o) for o in OPTIONS}


def test_cuda_core_python_int_pointers_cannot_be_inferred() -> None:
    args = (140_000_000_000, np.int32(1000))
    with pytest.raises(InferenceError, match="cuda.core passes as a pointer"):
        describe_args(args, {"n": 1000}, ("x", "n"), ints_are_pointers=True)
    # A Python int that is the data size is the size, as the user meant it.
    info = describe_args((np.zeros(1000, np.float32), 1000), {"n": 1000}, ints_are_pointers=True)
    assert info[1].describe() == "int n"


def test_cuda_core_tune_checks_rules_against_the_source() -> None:
    pytest.importorskip("cuda.core")
    ck = CoreKernel(kernel=None, source=SRC, name="scale", options=("--std=c++17",))
    t = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")(ck)
    assert isinstance(t._adapter, CoreAdapter) and t._adapter.param_names == ("x", "y", "n")
    spec = t._adapter.make_spec(
        name="t.scale", data=t._params, dim=1, grid=t._grid, make_args=lambda D, rng: ()
    )
    assert (spec.source, spec.kernel, spec.options) == (SRC, "scale", ("--std=c++17",))
    with pytest.raises(SpecError, match=r"'m' is not a parameter of scale\(x, y, n\)"):
        klaraptor.tune(data={"n": "m"}, grid="ceil(n / bx)")(ck)
    with pytest.raises(SpecError, match="parameter names of tile cannot be read"):
        klaraptor.tune(data={"n": "rows"}, grid="ceil(n / bx)")(CoreKernel(None, SRC, "tile", ()))


def test_cuda_core_kernel_without_source_is_refused() -> None:
    core = pytest.importorskip("cuda.core")
    config = core.LaunchConfig(grid=1, block=32)  # any cuda.core object that is not a CoreKernel
    with pytest.raises(SpecError, match="compile_kernel"):
        klaraptor.tune(data={"n": 0}, grid="ceil(n / bx)")(config)


def test_cuda_core_array_pointers() -> None:
    class CAI:
        __cuda_array_interface__ = {"data": (1234, False), "shape": (4,), "typestr": "<f4"}

    assert array_pointer(CAI()) == 1234
    assert array_pointer(np.int32(5)) == np.int32(5)


def test_cuda_core_missing_dependency_names_the_extra(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setitem(sys.modules, "cuda.core", None)
    monkeypatch.setitem(sys.modules, "cuda.core.experimental", None)
    with pytest.raises(MissingDependencyError, match=r"klaraptor\[cuda-core\]"):
        cuda_core_module()


class _Buffer:
    """Has `.data.ptr`, as CuPy arrays do (the generated launch reads it inline for them)."""

    def __init__(self, ptr: int) -> None:
        self.data = type("MemoryPointer", (), {"ptr": ptr})()


class _CAI:
    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": (4,), "typestr": "<f4"}


class _TorchStream:
    cuda_stream = 777


@pytest.mark.parametrize(
    ("args", "getters", "expected"),
    [
        ((_Buffer(11), _Buffer(22), np.int32(5)), {0: None, 1: None}, (11, 22, np.int32(5))),
        ((_CAI(33), np.float32(1.5)), {0: array_pointer}, (33, np.float32(1.5))),
        ((np.int32(7),), {}, (np.int32(7),)),
        ((), {}, ()),
        ((_Buffer(1), _CAI(2), 3, _Buffer(4)), {0: None, 1: array_pointer, 3: None}, (1, 2, 3, 4)),
    ],
)
def test_cuda_core_generated_launch_passes_the_arguments_cuda_core_takes(
    args: tuple, getters: dict, expected: tuple
) -> None:
    from klaraptor.frontends.cuda_core import launch_functions

    calls: list[tuple] = []

    def launch(*got: object) -> None:  # where cuda.core.launch is called
        calls.append(got)

    streams = {0: "legacy default", 777: "torch's stream"}
    go, go_on = launch_functions(
        launch, "config", "kernel", len(args), getters, default="default",
        stream_for=streams.__getitem__, name="k",
    )  # fmt: skip
    core_stream = type("Stream", (), {"__module__": "cuda.core._stream"})()
    go(args)
    go_on(args, core_stream)
    go_on(args, _TorchStream())
    go_on(args, 0)
    prefix = [("default",), (core_stream,), ("torch's stream",), ("legacy default",)]
    assert calls == [(*p, "config", "kernel", *expected) for p in prefix]
    assert all(type(a) is type(e) for a, e in zip(calls[0][3:], expected))
    with pytest.raises(ValueError, match="unpack"):
        go((*args, 1))


def test_cuda_core_generated_launch_on_torchs_current_stream() -> None:
    from klaraptor.frontends.cuda_core import launch_functions

    calls: list[tuple] = []
    current = iter([5, 6])
    go, _ = launch_functions(
        lambda *a: calls.append(a), "config", "kernel", 2, {0: lambda t: t + 1000},
        default="unused", stream_for=lambda ptr: f"stream {ptr}", current=lambda: next(current),
    )  # fmt: skip
    go((1, 2))
    go((3, 4))
    assert calls == [
        ("stream 5", "config", "kernel", 1001, 2),
        ("stream 6", "config", "kernel", 1003, 4),
    ]


def test_cuda_core_a_call_with_the_wrong_number_of_arguments_is_refused() -> None:
    from klaraptor.core.errors import LaunchError

    adapter = CoreAdapter(CoreKernel(kernel=None, source=SRC, name="scale", options=()))
    adapter.check_call((1, 2, np.int32(3)))
    with pytest.raises(LaunchError, match=r"scale\(x, y, n\) takes 3 arguments, got 2"):
        adapter.check_call((1, 2))
    unnamed = CoreAdapter(CoreKernel(kernel=None, source=SRC, name="tile", options=()))
    unnamed.check_call((1,))  # the source does not name its parameters: cuda.core checks


TEMPLATE_SRC = r"""
template <int ITEMS>
__global__ void scale_items(const float* x, float* y, int n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
    for (int j = 0; j < ITEMS; ++j)
        if (i0 + j < n) y[i0 + j] = 2.0f * x[i0 + j];
}"""


@pytest.mark.parametrize("style", ["define", "template"])
def test_cuda_core_takes_program_parameters(style: str) -> None:
    """params= on a cuda.core kernel: the spec carries the parameters and the style; each
    variant is compiled by cuda.core when first launched (on the GPU: test_frontends_gpu)."""
    pytest.importorskip("cuda.core")
    from klaraptor.frontends.cuda_core import kernel_source

    ck = kernel_source(TEMPLATE_SRC, "scale_items")
    assert ck.kernel is None
    t = klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / (bx * ITEMS))",
        params={"ITEMS": (1, 2, 4)},
        param_style=style,
    )(ck)
    adapter = t._adapter
    assert isinstance(adapter, CoreAdapter) and adapter.has_params
    assert adapter.param_names == ("x", "y", "n")
    spec = adapter.make_spec(
        name="t.items",
        data=t._params,
        dim=1,
        grid=t._grid,
        params={"ITEMS": (1, 2, 4)},
        param_style=style,
        make_args=lambda D, rng: (),
    )
    pv = spec.variants()[-1]
    want = "scale_items" if style == "define" else f"scale_items<{pv['ITEMS']}>"
    assert spec.variant_kernel(pv) == want


def test_cuda_core_uncompiled_kernel_without_params_says_how() -> None:
    pytest.importorskip("cuda.core")
    from klaraptor.core.errors import LaunchError
    from klaraptor.frontends.cuda_core import kernel_source

    adapter = CoreAdapter(kernel_source(TEMPLATE_SRC, "scale_items"))
    with pytest.raises(LaunchError, match="compiled per program-parameter variant"):
        adapter.launcher((1, 1, 1), (32, 1, 1), 0, None, ())
