"""The KLARAPTOR annotation front-end: pragmas + per-kernel Python-syntax files → KernelSpecs."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from klaraptor.core.errors import SpecError
from klaraptor.frontends.annotated import read_annotated

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "annotated" / "matvec.cu"


def test_example_file_gives_one_spec_per_annotated_kernel() -> None:
    specs = {s.kernel: s for s in read_annotated(EXAMPLE)}
    assert set(specs) == {"mv_rows", "transpose"}
    mv, tr = specs["mv_rows"], specs["transpose"]
    assert (mv.name, mv.dim, mv.data_names, mv.data[0].arg) == ("matvec.mv_rows", 1, ("n",), 3)
    assert (tr.name, tr.dim, tr.data[0].arg) == ("matvec.transpose", 2, 2)
    assert mv.grid_for({"n": 1000}, (256, 1, 1)) == (4, 1, 1)
    assert tr.grid_for({"n": 1000}, (32, 8, 1)) == (32, 125, 1)
    assert mv.default_block == (256, 1, 1)
    assert mv.meta["train_sizes"] == (256, 512, 1024)
    assert mv.satisfies_constraints({"n": 64}, (128, 1, 1))[0] is False


def test_device_source_keeps_kernels_and_helpers_but_not_host_code() -> None:
    src = read_annotated(EXAMPLE)[0].source
    assert 'extern "C" __global__ void mv_rows' in src
    assert 'extern "C" __global__ void transpose' in src
    assert "__device__ inline float scaled" in src and "#define SCALE" in src
    assert "main(" not in src and "#include" not in src and "cudaMalloc" not in src


def test_arguments_follow_the_signature_and_the_config() -> None:
    mv = read_annotated(EXAMPLE)[0]
    args = mv.make_args({"n": 10}, np.random.default_rng(1), device=False)
    assert [a.shape for a in args[:3]] == [(100,), (10,), (10,)]
    assert all(a.dtype == np.float32 and a.min() > 0 for a in args[:3])
    assert args[3] == 10 and args[3].dtype == np.int32
    assert mv.read_data(args) == {"n": 10}


def test_specs_pickle_for_the_collection_worker() -> None:
    for spec in read_annotated(EXAMPLE):
        clone = pickle.loads(pickle.dumps(spec))
        assert clone.fingerprint() == spec.fingerprint()
        a = clone.make_args({"n": 4}, np.random.default_rng(0), device=False)
        assert len(a) == len(spec.make_args({"n": 4}, np.random.default_rng(0), device=False))


def _write(tmp: Path, cu: str, **configs: str) -> Path:
    path = tmp / "k.cu"
    path.write_text(cu)
    for kernel, text in configs.items():
        (tmp / f"k.{kernel}.py").write_text(text)
    return path


CU = """
#pragma kernel_info_size_param_idx_scale = 2;
#pragma kernel_info_dim_scale = 1;
__global__ void scale(float *a, double alpha, int n) { int i = threadIdx.x; if (i < n) a[i] *= alpha; }
"""
GOOD = 'grid = ("ceil(n / bx)", "1", "1")\narrays = {"a": "n"}\nscalars = {"alpha": 2.0}\n'


@pytest.mark.parametrize(
    ("cu", "config", "message"),
    [
        (CU, None, "missing per-kernel config"),
        (
            CU.replace("#pragma kernel_info_dim_scale = 1;", ""),
            GOOD,
            "lacks '#pragma kernel_info_dim",
        ),
        (CU.replace("= 2;", "= 0;"), GOOD, "is not an integer size"),
        (CU.replace("= 2;", "= 7;"), GOOD, "outside its 3 parameters"),
        (CU.replace("double alpha", "float3 alpha"), GOOD, "unsupported type"),
        (CU, GOOD.replace('"alpha": 2.0', '"beta": 2.0'), "lacks a value for argument 'alpha'"),
        (CU, GOOD.replace('{"a": "n"}', "{}"), "lacks the element count"),
        (CU, GOOD + "import os\n", "only 'name = literal'"),
        (CU, GOOD + "threads = 3\n", "unknown key 'threads'"),
        (CU, GOOD + "sizes = [n]\n", "must be a literal"),
        (
            CU,
            'grid = ("ceil(n / bx)",)\narrays = {"a": "n"}\nscalars = {"alpha": 1}\n',
            "three expression",
        ),
        (CU, GOOD.replace("ceil(n / bx)", "ceil(m / bx)"), "m"),
        (CU.replace("__global__ void scale", "void scale"), GOOD, "no __global__ definition"),
        ("// nothing here\n", None, "no '#pragma kernel_info_size_param_idx"),
    ],
)
def test_bad_annotations_give_clear_errors(
    tmp_path: Path, cu: str, config: str | None, message: str
) -> None:
    path = _write(tmp_path, cu, **({"scale": config} if config is not None else {}))
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("[", r"\[")):
        read_annotated(path)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such .cu file"):
        read_annotated(tmp_path / "absent.cu")


def test_double_scalar_and_int_size(tmp_path: Path) -> None:
    (spec,) = read_annotated(_write(tmp_path, CU, scale=GOOD))
    args = spec.make_args({"n": 5}, np.random.default_rng(0), device=False)
    assert args[1] == 2.0 and args[1].dtype == np.float64 and args[2].dtype == np.int32
