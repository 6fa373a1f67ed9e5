"""What `klaraptor instrument` does with what it cannot rewrite safely: a clear error for a file
it cannot use, and for each launch left alone a warning naming its line and the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from klaraptor.core.errors import InstrumentError, MissingDependencyError, SpecError
from klaraptor.frontends.annotated import read_annotated
from klaraptor.instrument import instrument
from tests.instrument.support import needs_libclang, synthetic_helper

needs_libclang()

CONFIG = 'grid = ("ceil(n / bx)", "1", "1")\narrays = {"a": "n"}\n'
HEAD = """#include <cuda_runtime.h>
#pragma kernel_info_size_param_idx_scale = 1;
#pragma kernel_info_dim_scale = 1;
__global__ void scale(float *a, int n) { int i = threadIdx.x; if (i < n) a[i] *= 2.0f; }
"""


def _program(tmp: Path, body: str, head: str = HEAD, config: str | None = CONFIG) -> Path:
    path = tmp / "app.cu"
    path.write_text(head + body)
    if config is not None:
        (tmp / "app.scale.py").write_text(config)
    return path


def _helpers(path: Path) -> dict:
    try:
        return {s.name: synthetic_helper(s) for s in read_annotated(path)}
    except SpecError:
        return {}


def _run(path: Path, **kw: object) -> tuple[object, list[str]]:
    result = instrument(path, helpers=kw.pop("helpers", None) or _helpers(path), **kw)  # type: ignore[arg-type]
    return result, [str(n) for n in result.notices]


def _line(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_a_launch_in_a_macro_is_left_alone_with_its_line(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        "#define LAUNCH(k, g, b, ...) k<<<g, b>>>(__VA_ARGS__)\n"
        "void run(float *a, int n) {\n"
        "  LAUNCH(scale, 1, 32, a, n);\n"
        "  scale<<<1, 32>>>(a, n);\n"
        "}\n",
    )
    result, notices = _run(path)
    use = _line(path, "LAUNCH(scale")
    assert any(
        f"app.cu:{use}: launch of scale left alone: written by a macro" in n for n in notices
    )
    assert result.rewritten == 1  # the plain launch beside it
    text = result.text.decode()
    assert (
        "LAUNCH(scale, 1, 32, a, n);" in text
        and "klaraptor_app_scale_launch(scale, 1, 32, 0, 0, a, n)" in text
    )


def test_a_file_without_annotations_is_an_error(tmp_path: Path) -> None:
    path = _program(tmp_path, "", head="__global__ void scale(float *a, int n) {}\n", config=None)
    with pytest.raises(SpecError, match="no '#pragma kernel_info_size_param_idx"):
        instrument(path, helpers={})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "absent.cu", "no such file"),
        (lambda tmp: tmp, "not a regular file"),
        (lambda tmp: _bytes(tmp, b"__global__ void k() {}\0\0"), "not a text file"),
        (lambda tmp: _bytes(tmp, b"// caf\xe9\n__global__ void k() {}\n"), "not UTF-8"),
    ],
)
def test_an_unusable_file_is_a_clear_error(tmp_path: Path, make: object, message: str) -> None:
    with pytest.raises(InstrumentError, match=message):
        instrument(make(tmp_path), helpers={})  # type: ignore[operator]


def _bytes(tmp: Path, data: bytes) -> Path:
    path = tmp / "bad.cu"
    path.write_bytes(data)
    return path


def test_a_pragma_naming_a_missing_argument_leaves_its_launches_alone(tmp_path: Path) -> None:
    path = _program(tmp_path, "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n")
    path.write_text(
        path.read_text().replace("size_param_idx_scale = 1;", "size_param_idx_scale = 5;")
    )
    result, notices = _run(path, helpers={})
    pragma = _line(path, "size_param_idx_scale")
    assert any(
        f"app.cu:{pragma}: kernel scale:" in n
        and "size parameter index 5 is outside its 2 parameters" in n
        for n in notices
    )
    assert result.rewritten == 0 and result.launches[0].reason is not None
    assert b"scale<<<1, 32>>>(a, n)" in result.text


def test_a_kernel_without_a_build_is_left_alone(tmp_path: Path) -> None:
    path = _program(tmp_path, "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n")
    result, notices = _run(path, helpers=lambda name: (_ for _ in ()).throw(SpecError("not built")))
    assert any("no build of app.scale to use (not built)" in n for n in notices)
    assert result.rewritten == 0


def test_a_config_assuming_an_unknown_argument_is_named(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n",
        config=CONFIG + 'assume = {"m": "n"}\n',
    )
    result, notices = _run(path, helpers={})
    assert any("'assume' names 'm', which is not an integer argument" in n for n in notices)
    assert result.rewritten == 0


@pytest.mark.parametrize(
    ("head", "body", "message"),
    [
        (
            HEAD.replace(
                "__global__ void scale(float *a, int n)",
                "template <typename T> __global__ void scale(T *a, int n)",
            ),
            "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n",
            "template kernel",
        ),
        (
            HEAD + "__global__ void scale(double *a, int n) {}\n",
            "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n",
            "overloaded",
        ),
    ],
)
def test_kernels_a_build_cannot_describe_are_left_alone(
    tmp_path: Path, head: str, body: str, message: str
) -> None:
    path = _program(tmp_path, body, head=head)
    result, notices = _run(path, helpers={"app.scale": synthetic_helper(_spec())})
    assert any(message in n for n in notices), notices
    assert result.rewritten == 0


def _spec():  # noqa: ANN202 - the annotated spec of HEAD
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        return read_annotated(_program(Path(d), ""))[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "__global__ void parent(float *a, int n) { scale<<<1, 32>>>(a, n); }\n",
            "from device code",
        ),
        (
            "#if 0\nvoid run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n#endif\n",
            "the parser read no launch here",
        ),
    ],
)
def test_launches_that_run_no_host_helper_are_left_alone(
    tmp_path: Path, body: str, message: str
) -> None:
    path = _program(tmp_path, body)
    result, notices = _run(path)
    line = _line(path, "scale<<<1, 32>>>")
    assert any(f"app.cu:{line}:" in n and message in n for n in notices), notices
    assert result.rewritten == 0


def test_a_launch_in_a_macro_definition_naming_the_kernel_is_reported(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        "#define RUN_SCALE(a, n) scale<<<1, 32>>>(a, n)\n"
        "void run(float *a, int n) { RUN_SCALE(a, n); }\n",
    )
    result, notices = _run(path)
    definition, use = _line(path, "#define RUN_SCALE"), _line(path, "RUN_SCALE(a, n); }")
    assert any(f"app.cu:{definition}: scale<<<...>>> left alone" in n for n in notices), notices
    assert any(
        f"app.cu:{use}: launch of scale left alone: written by a macro" in n for n in notices
    )
    assert result.rewritten == 0


def test_default_arguments_are_left_alone(tmp_path: Path) -> None:
    head = HEAD.replace("int n)", "int n = 4)")
    path = _program(tmp_path, "void run(float *a) { scale<<<1, 32>>>(a); }\n", head=head)
    result, notices = _run(path)
    assert any("default arguments" in n for n in notices)


def test_stream_and_shared_memory_are_kept(tmp_path: Path) -> None:
    path = _program(
        tmp_path,
        "void run(float *a, int n, cudaStream_t s) {\n"
        "  scale<<<1, 32, 64>>>(a, n);\n"
        "  scale <<< dim3(1), dim3(32), 0, s >>> (a, /* size */ n);\n"
        "}\n",
    )
    result, notices = _run(path)
    assert notices == [] and result.rewritten == 2
    text = result.text.decode()
    assert "klaraptor_app_scale_launch(scale, 1, 32, 64, 0, a, n);" in text
    assert "klaraptor_app_scale_launch(scale, dim3(1), dim3(32), 0, s, a, /* size */ n);" in text


def test_a_missing_output_directory_is_a_clear_error(tmp_path: Path) -> None:
    path = _program(tmp_path, "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n")
    result = instrument(path, tmp_path / "nowhere" / "out.cu", helpers=_helpers(path))
    with pytest.raises(InstrumentError, match="the directory .*nowhere does not exist"):
        result.write()


def test_the_output_never_overwrites_the_source(tmp_path: Path) -> None:
    path = _program(tmp_path, "void run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n")
    with pytest.raises(InstrumentError, match="would overwrite the source"):
        instrument(path, path, helpers=_helpers(path))


def test_an_output_elsewhere_warns_about_includes_beside_the_source(tmp_path: Path) -> None:
    (tmp_path / "local.h").write_text("#define SCALE 2\n")
    path = _program(
        tmp_path, '#include "local.h"\nvoid run(float *a, int n) { scale<<<1, 32>>>(a, n); }\n'
    )
    (tmp_path / "out").mkdir()
    _, notices = _run(path, output=tmp_path / "out" / "app.cu")
    assert any("local.h" in n and f"-I {tmp_path}" in n for n in notices)


def test_without_libclang_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from klaraptor.instrument.parse import clang_index

    monkeypatch.setitem(sys.modules, "clang", None)
    with pytest.raises(MissingDependencyError, match=r"klaraptor\[instrument\]"):
        clang_index()
