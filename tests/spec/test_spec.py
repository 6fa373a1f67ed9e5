"""KernelSpec: validation messages, reading data parameters, grid / smem / constraint evaluation."""

from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klaraptor.core.errors import SpecError
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.spec.cuda_source import has_global_function

GEMM_SRC = r"""
// C = alpha * A @ B + beta * C, one thread per output element
extern "C" __global__ void gemm(const float* A, const float* B, float* C,
                                float alpha, float beta, int N) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j < N) {
        float acc = 0.0f;
        for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[k * N + j];
        C[i * N + j] = alpha * acc + beta * C[i * N + j];
    }
}
"""

SUM_SRC = r"""
extern "C" __global__ void __launch_bounds__(1024)
block_sum(const float* x, float* out, int n) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = 0.0f;
}
"""


def make_gemm_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    n = D["N"]
    a = rng.random((n, n), dtype=np.float32)
    return (a, a.copy(), a.copy(), np.float32(1.5), np.float32(0.5), np.int32(n))


def make_sum_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    return (rng.random(D["n"], dtype=np.float32), np.zeros(1, np.float32), np.int32(D["n"]))


def bx_divides_n(D: Any, block: tuple[int, int, int]) -> bool:
    return D["N"] % block[0] == 0


def gemm(**kw: Any) -> KernelSpec:
    base: dict[str, Any] = dict(
        name="test.gemm",
        source=GEMM_SRC,
        kernel="gemm",
        data=(DataParam("N", arg=5, lo=16, hi=46340),),
        dim=2,
        grid=("ceil(N / bx)", "ceil(N / by)", "1"),
        make_args=make_gemm_args,
        default_block=(32, 8, 1),
    )
    base.update(kw)
    return KernelSpec(**base)


def block_sum(**kw: Any) -> KernelSpec:
    base: dict[str, Any] = dict(
        name="test.block_sum",
        source=SUM_SRC,
        kernel="block_sum",
        data=(DataParam("n", shape_of=(0, 0)),),
        dim=1,
        grid=("ceil(n / bx)", "1", "1"),
        make_args=make_sum_args,
        dynamic_smem="4 * bx",
        constraints=("bx <= n",),
    )
    base.update(kw)
    return KernelSpec(**base)


# -- a valid spec -------------------------------------------------------------------------------


def test_valid_specs_build() -> None:
    s = gemm()
    assert s.data_names == ("N",)
    assert s.allowed_names == ("N", "bx", "by", "bz")
    assert len(s.grid_exprs()) == 3 and s.smem_expr() is None and s.constraint_exprs() == ()
    t = block_sum()
    assert t.smem_expr() is not None and len(t.constraint_exprs()) == 1


def test_lists_are_stored_as_tuples() -> None:
    s = gemm(grid=["ceil(N / bx)", "ceil(N / by)", "1"], data=[DataParam("N", arg=5)])
    assert isinstance(s.grid, tuple) and isinstance(s.data, tuple)
    hash(s)


# -- validation: every field names the spec and the field ---------------------------------------


def _fails(match: str, factory: Any = gemm, **kw: Any) -> str:
    with pytest.raises(SpecError, match=match) as err:
        factory(**kw)
    msg = str(err.value)
    assert "test." in msg or "KernelSpec" in msg
    return msg


@pytest.mark.parametrize("name", ["", "1abc", "a..b", "a-b", "gemm.", None])
def test_bad_name(name: Any) -> None:
    _fails("name:", name=name)


def test_empty_source() -> None:
    _fails("source: is empty", source="   \n")


def test_kernel_not_in_source() -> None:
    msg = _fails("kernel: no __global__ function named 'gemm2'", kernel="gemm2")
    assert "'test.gemm'" in msg
    # a host function of that name does not count, nor a commented-out kernel
    src = "void helper(int n) {}\n// __global__ void helper(int n)\n/* __global__ void helper( */"
    _fails("kernel: no __global__", source=src, kernel="helper")


@pytest.mark.parametrize(
    "src",
    [
        'extern "C" __global__ void k(int n) {}',
        "__global__ void __launch_bounds__(256, 2) k(int n) {}",
        '#include <cuda_fp16.h>\nextern "C" void __global__\nk (int n) {}',
        "template <int B>\n__global__ void k(float* x) {}",
        "__device__ int k2(int);\n__global__ void k(int n) { k2(n); }",
    ],
)
def test_global_function_forms(src: str) -> None:
    assert has_global_function(src, "k")


def test_global_function_negatives() -> None:
    assert not has_global_function("__device__ float k(float x) { return x; }", "k")
    assert not has_global_function("__global__ void kk(int n) {}", "k")
    assert not has_global_function("__global__ void a(int n) { k(n); }", "k")


@pytest.mark.parametrize("dim", [0, 4, True, 2.0])
def test_bad_dim(dim: Any) -> None:
    _fails("dim: must be 1, 2 or 3", dim=dim)


def test_bad_data_params() -> None:
    _fails("data: needs at least one DataParam", data=())
    _fails("duplicate data parameter name 'N'", data=(DataParam("N", arg=5), DataParam("N", arg=4)))
    _fails("exactly one of arg / shape_of / reader", data=(DataParam("N"),))
    _fails(
        "exactly one of arg / shape_of / reader",
        data=(DataParam("N", arg=5, shape_of=(0, 0)),),
    )
    _fails("lo 10 > hi 5", data=(DataParam("N", arg=5, lo=10, hi=5),))
    _fails("non-negative argument index", data=(DataParam("N", arg=-1),))
    _fails("shape_of must be", data=(DataParam("N", shape_of=(0,)),))  # type: ignore[arg-type]
    _fails("reader must be callable", data=(DataParam("N", reader=3),))  # type: ignore[arg-type]
    _fails("reserved", data=(DataParam("bx", arg=5),))
    _fails("reserved", data=(DataParam("ceil", arg=5),))
    _fails("reserved", data=(DataParam("lambda", arg=5),))
    _fails("reserved", data=(DataParam("_kp_n", arg=5),))
    _fails("identifier", data=(DataParam("2N", arg=5),))
    _fails("must be a DataParam", data=("N",))


def test_bad_grid() -> None:
    _fails("grid: must be three expression strings", grid=("ceil(N / bx)", "1"))
    _fails("grid: must be three expression strings", grid=("ceil(N / bx)", 1, "1"))
    msg = _fails(r"grid\[1\]", grid=("ceil(N / bx)", "ceil(M / by)", "1"))
    assert "M" in msg
    _fails(r"grid\[0\]", grid=("ceil(N / bx", "1", "1"))
    _fails(r"grid\[2\]: is an empty expression", grid=("1", "1", " "))


def test_bad_constraints() -> None:
    _fails(r"constraints\[0\]", constraints=("bx * by <= K",))
    _fails(r"constraints\[1\]", constraints=("bx <= N", "bx <="))
    _fails(r"constraints\[0\]: callable .* must accept \(D, block\)", constraints=(lambda D: True,))
    _fails(r"constraints\[0\]: must be an expression string or a callable", constraints=(3,))


def test_bad_dynamic_smem() -> None:
    _fails("dynamic_smem", block_sum, dynamic_smem="4 * tx")
    _fails("dynamic_smem: must be an expression string", block_sum, dynamic_smem=128)


def test_bad_make_args_reference_outputs_rtol() -> None:
    _fails("make_args: must be callable", make_args=None)
    _fails(r"make_args: .* must accept \(D, rng\)", make_args=lambda D: ())
    _fails("outputs: a reference is given but no output", reference=lambda D, a: {})
    _fails("outputs: must be non-negative", outputs=(-1,))
    _fails("outputs: has duplicates", outputs=(2, 2))
    _fails("rtol: must be a finite number > 0", rtol=0)
    _fails("rtol: must be a finite number > 0", rtol=float("nan"))
    _fails("options: must be a tuple of strings", options=("--std=c++17", 3))


@pytest.mark.parametrize(
    ("dim", "block", "match"),
    [
        (2, (32, 8, 2), "beyond dim=2"),
        (1, (32, 2, 1), "beyond dim=1"),
        (2, (32, 8), "three integers"),
        (2, (0, 8, 1), ">= 1"),
    ],
)
def test_bad_default_block(dim: int, block: Any, match: str) -> None:
    _fails(f"default_block: .*{match}", dim=dim, default_block=block)


def test_all_problems_are_listed_at_once() -> None:
    msg = _fails("invalid KernelSpec", dim=5, rtol=-1, outputs=(-2,))
    assert "dim:" in msg and "rtol:" in msg and "outputs:" in msg


# -- reading data parameters ----------------------------------------------------------------------


def test_read_data() -> None:
    s = gemm()
    args = make_gemm_args({"N": 64}, np.random.default_rng(0))
    assert s.read_data(args) == {"N": 64}
    assert s.read_data((*args[:5], 64)) == {"N": 64}
    assert s.read_data((*args[:5], np.int64(64))) == {"N": 64}
    assert s.read_data((*args[:5], 64.0)) == {"N": 64}
    with pytest.raises(SpecError, match="'N' must be an integer, got float 64.5"):
        s.read_data((*args[:5], 64.5))
    with pytest.raises(SpecError, match="must be an integer"):
        s.read_data((*args[:5], True))
    with pytest.raises(SpecError, match=r"'N' = 8 is outside its range \[16, 46340\]"):
        s.read_data((*args[:5], 8))
    with pytest.raises(SpecError, match="argument 5, but the call has 3 arguments"):
        s.read_data(args[:3])

    t = block_sum()
    x = np.zeros(1000, np.float32)
    assert t.read_data((x, None, 0)) == {"n": 1000}
    with pytest.raises(SpecError, match="without a shape"):
        t.read_data((3, None, 0))
    with pytest.raises(SpecError, match="axis 0 of argument 0, whose shape is"):
        t.read_data((np.float32(1), None, 0))

    r = gemm(data=(DataParam("N", reader=lambda a: a[5] * 2),))
    assert r.read_data((*args[:5], 32)) == {"N": 64}
    boom = gemm(data=(DataParam("N", reader=lambda a: a[99]),))
    with pytest.raises(SpecError, match="reader raised IndexError"):
        boom.read_data(args)


def test_normalize_data() -> None:
    s = gemm()
    assert s.normalize_data({"N": 128}) == {"N": 128}
    assert s.normalize_data((128,)) == {"N": 128}
    assert s.normalize_data(128) == {"N": 128}
    assert s.data_tuple({"N": 128}) == (128,)
    with pytest.raises(SpecError, match="missing"):
        s.normalize_data({"M": 1})
    with pytest.raises(SpecError, match="outside"):
        s.normalize_data(1)


# -- evaluation ----------------------------------------------------------------------------------


def test_grid_for() -> None:
    s = gemm()
    assert s.grid_for({"N": 1000}, (32, 8, 1)) == (32, 125, 1)
    assert s.grid_for({"N": 1000}, (64, 3, 1)) == (16, 334, 1)
    bad = gemm(grid=("N / bx", "1", "1"))
    with pytest.raises(SpecError, match=r"grid\[0\] = 'N / bx' gives 31.25"):
        bad.grid_for({"N": 1000}, (32, 1, 1))
    zero = gemm(grid=("N // (bx * 1000)", "1", "1"))
    with pytest.raises(SpecError, match="positive integer"):
        zero.grid_for({"N": 1000}, (32, 1, 1))
    nan = gemm(grid=("ceil(N / (bx - 32))", "1", "1"))
    with pytest.raises(SpecError, match="positive integer"):
        nan.grid_for({"N": 1000}, (32, 1, 1))


def test_evaluation_accepts_tuples_and_names_missing_parameters() -> None:
    s = gemm()
    assert s.grid_for((1000,), (32, 8, 1)) == s.grid_for(1000, (32, 8, 1)) == (32, 125, 1)
    with pytest.raises(SpecError, match=r"lacks data parameters \['N'\]"):
        s.grid_for({"M": 3}, (32, 8, 1))


def test_grid_arrays_vectorised() -> None:
    s = gemm()
    bx = np.array([32, 64, 16, 1024])
    by = np.array([8, 4, 16, 1])
    gx, gy, gz = s.grid_arrays({"N": 1000}, bx, by, np.ones_like(bx))
    assert gx.shape == gy.shape == gz.shape == (4,)
    assert gx.tolist() == [32, 16, 63, 1] and gy.tolist() == [125, 250, 63, 1000]
    assert gz.tolist() == [1, 1, 1, 1]
    assert KernelSpec.grid_valid(gx, gy, gz).all()
    assert KernelSpec.grid_valid(np.array([1.5, 0.0, np.nan, 2.0]), 1, 1).tolist() == [
        False,
        False,
        False,
        True,
    ]
    # a formula that ignores the block still gives one entry per block
    gx, gy, gz = gemm(grid=("4", "N // 500", "1")).grid_arrays({"N": 1000}, bx, by, 1)
    assert gx.tolist() == [4] * 4 and gy.tolist() == [2] * 4 and gz.shape == (4,)
    smem = block_sum(dynamic_smem="4 * n").dynamic_smem_arrays({"n": 8}, bx, 1, 1)
    assert smem.tolist() == [32] * 4
    assert block_sum(dynamic_smem=None).dynamic_smem_arrays({"n": 8}, bx, 1, 1).shape == (4,)
    # D may be an array too: one evaluation over many sizes
    gx, _, _ = s.grid_arrays({"N": np.array([64, 128])}, 32, 8, 1)
    assert gx.tolist() == [2, 4]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(16, 46340),
    bx=st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]),
    by=st.sampled_from([1, 2, 4, 8, 16, 32]),
)
def test_grid_arrays_agree_with_grid_for(n: int, bx: int, by: int) -> None:
    s = gemm()
    expected = (-(-n // bx), -(-n // by), 1)
    assert s.grid_for({"N": n}, (bx, by, 1)) == expected
    gx, gy, gz = s.grid_arrays({"N": n}, np.array([bx]), np.array([by]), np.array([1]))
    assert (gx[0], gy[0], gz[0]) == expected


def test_dynamic_smem() -> None:
    assert gemm().dynamic_smem_for({"N": 64}, (32, 8, 1)) == 0
    t = block_sum()
    assert t.dynamic_smem_for({"n": 4096}, (256, 1, 1)) == 1024
    arr = t.dynamic_smem_arrays({"n": 4096}, np.array([32, 64]), 1, 1)
    assert arr.tolist() == [128, 256]
    neg = block_sum(dynamic_smem="4 * (bx - 64)")
    with pytest.raises(SpecError, match="non-negative integer of bytes"):
        neg.dynamic_smem_for({"n": 4096}, (32, 1, 1))
    frac = block_sum(dynamic_smem="bx / 3")
    with pytest.raises(SpecError, match="dynamic_smem"):
        frac.dynamic_smem_for({"n": 4096}, (32, 1, 1))


def test_satisfies_constraints() -> None:
    s = gemm(constraints=("bx * by <= N", bx_divides_n, "where(by > 1, bx >= 8, 1)"))
    assert s.satisfies_constraints({"N": 512}, (32, 8, 1)) == (True, "")
    ok, why = s.satisfies_constraints({"N": 128}, (32, 8, 1))
    assert not ok and "'bx * by <= N'" in why
    ok, why = s.satisfies_constraints({"N": 1000}, (16, 1, 1))
    assert not ok and "bx_divides_n" in why
    ok, why = s.satisfies_constraints({"N": 1024}, (4, 8, 1))
    assert not ok and "where(by > 1" in why
    # vectorised masks agree
    masks = s.constraint_masks({"N": 1024}, np.array([4, 32, 64]), np.array([8, 8, 32]), 1)
    assert [m.tolist() for _, m in masks] == [
        [True, True, False],
        [True, True, True],
        [False, True, True],
    ]


def test_constraint_truth_follows_program_semantics_and_raising_callable_is_reported() -> None:
    # NaN is true, as in klaraptor.program and the generated code (x != 0)
    s = gemm(constraints=("(N - N) / (bx - bx)", "0 * bx"))
    ok, why = s.satisfies_constraints({"N": 64}, (32, 1, 1))
    assert not ok and "'0 * bx'" in why

    def broken(D: Any, block: Any) -> bool:
        raise ZeroDivisionError("oops")

    t = gemm(constraints=(broken,))
    with pytest.raises(SpecError, match="broken.* raised ZeroDivisionError"):
        t.satisfies_constraints({"N": 64}, (32, 1, 1))


# -- identity -----------------------------------------------------------------------------------


def test_fingerprint() -> None:
    a = gemm()
    assert a.fingerprint() == gemm().fingerprint()
    assert len(a.fingerprint()) == 64
    # fields that change the kernel or its launch change the fingerprint ...
    changed = [
        gemm(source=GEMM_SRC + "\n// edited"),
        gemm(options=("--std=c++17", "-lineinfo")),
        gemm(grid=("ceil(N / bx)", "ceil(N / by) + 0", "1")),
        gemm(constraints=("bx <= N",)),
        gemm(dynamic_smem="0"),
        gemm(dim=3),
        gemm(data=(DataParam("M", arg=5),), grid=("ceil(M / bx)", "ceil(M / by)", "1")),
    ]
    fps = {c.fingerprint() for c in changed}
    assert len(fps) == len(changed) and a.fingerprint() not in fps
    # ... and descriptive ones do not
    assert (
        gemm(description="x", default_block=(16, 16, 1), rtol=0.1).fingerprint() == a.fingerprint()
    )


def test_to_summary_is_json_safe() -> None:
    s = block_sum(meta={"benchmark": "SUM", "weird": object()}, default_block=(256, 1, 1))
    summary = s.to_summary()
    back = json.loads(json.dumps(summary))
    assert back["name"] == "test.block_sum" and back["dim"] == 1
    assert back["data"] == [{"name": "n", "read": "args[0].shape[0]", "lo": 1, "hi": 2**31 - 1}]
    assert back["grid"] == ["ceil(n / bx)", "1", "1"]
    assert back["constraints"] == ["bx <= n"] and back["dynamic_smem"] == "4 * bx"
    assert back["fingerprint"] == s.fingerprint() and back["default_block"] == [256, 1, 1]
    assert back["meta"]["benchmark"] == "SUM" and isinstance(back["meta"]["weird"], str)
    assert "test_spec.make_sum_args" in back["make_args"]
    callable_spec = gemm(constraints=(bx_divides_n,))
    assert callable_spec.to_summary()["constraints"] == [f"<callable {__name__}.bx_divides_n>"]


def test_pickle_round_trip_rebuilds_the_cache() -> None:
    s = block_sum()
    s.grid_exprs()
    t = pickle.loads(pickle.dumps(s))
    assert t == s and t.fingerprint() == s.fingerprint()
    assert t.grid_for({"n": 100}, (32, 1, 1)) == (4, 1, 1)


def test_replace_revalidates() -> None:
    s = gemm()
    with pytest.raises(SpecError, match="dim"):
        dataclasses.replace(s, dim=7)


# -- program parameters ----------------------------------------------------------------------

_PSRC = r"""extern "C" __global__ void k(const float* x, float* y, int n) {
  int i = (blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
  for (int j = 0; j < ITEMS; ++j) if (i + j < n) y[i + j] = 2.0f * x[i + j];
}"""


def _pspec(**kw):
    from klaraptor.spec import DataParam, KernelSpec

    base = dict(
        name="t.items",
        source=_PSRC,
        kernel="k",
        data=(DataParam("n", arg=2),),
        dim=1,
        grid=("ceil(n / (bx * ITEMS))", "1", "1"),
        make_args=lambda D, rng: (),
        params={"ITEMS": (1, 2, 4, 8)},
    )
    base.update(kw)
    return KernelSpec(**base)


def test_program_parameters_enter_expressions_and_variants() -> None:
    from klaraptor.core.types import ParamStyle, ParamValues

    s = _pspec(dynamic_smem="ITEMS * bx * 4", constraints=("bx * ITEMS <= 2048",))
    assert s.param_names == ("ITEMS",) and s.param_style is ParamStyle.DEFINE
    assert [dict(v) for v in s.variants()] == [{"ITEMS": i} for i in (1, 2, 4, 8)]
    pv = s.param_values({"ITEMS": 4})
    assert pv == ParamValues(("ITEMS",), (4,)) and hash(pv) == hash(s.variants()[2])
    assert s.grid_for({"n": 1000}, (128, 1, 1), pv) == (2, 1, 1)
    assert s.dynamic_smem_for({"n": 1000}, (128, 1, 1), pv) == 4 * 128 * 4
    assert s.satisfies_constraints({"n": 1}, (1024, 1, 1), pv)[0] is False
    assert s.variant_options(pv)[-1] == "-DITEMS=4" and s.variant_kernel(pv) == "k"
    assert s.default_variant == ParamValues(("ITEMS",), (1,))


def test_expressions_of_a_parameterised_kernel_need_parameter_values() -> None:
    with pytest.raises(SpecError, match=r"has program parameters \['ITEMS'\]"):
        _pspec().grid_for({"n": 1000}, (128, 1, 1))
    with pytest.raises(SpecError, match="ITEMS = 3 is not one of its values"):
        _pspec().param_values({"ITEMS": 3})
    with pytest.raises(SpecError, match=r"unknown \['X'\]"):
        _pspec().param_values({"ITEMS": 1, "X": 2})


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"params": {"bx": (1,)}}, "'bx' is reserved"),
        ({"params": {"n": (1,)}}, "'n' is also a data parameter's name"),
        ({"params": {"ITEMS": ()}}, "non-empty sequence of integer values"),
        ({"params": {"ITEMS": (1.5, 2)}}, "values must be integers"),
        ({"params": {"ITEMS": (1, 1)}}, "duplicates"),
        ({"params": 5}, "must map names to value tuples"),
        ({"param_style": "macro"}, "must be 'define' or 'template'"),
        ({"default_params": {"ITEMS": 3}}, "ITEMS = 3 is not one of its values"),
        ({"default_params": {"OTHER": 1}}, "must map every parameter"),
    ],
)
def test_bad_program_parameters_are_named(kw, message) -> None:
    with pytest.raises(SpecError, match=message):
        _pspec(**kw)


def test_template_style_names_the_instance_and_fingerprints_change_only_with_parameters() -> None:
    t = _pspec(
        source=_PSRC.replace(
            'extern "C" __global__ void k', "template <int ITEMS> __global__ void k"
        ),
        param_style="template",
        params={"ITEMS": (1, 2)},
    )
    pv = t.param_values({"ITEMS": 2})
    assert t.variant_kernel(pv) == "k<2>" and "-DITEMS=2" not in t.variant_options(pv)
    assert t.to_summary()["params"] == {"ITEMS": [1, 2]}
    plain = _pspec(params={}, grid=("ceil(n / bx)", "1", "1"))
    assert "params" not in plain.to_summary()
    assert plain.fingerprint() != _pspec(grid=("ceil(n / bx)", "1", "1")).fingerprint()
