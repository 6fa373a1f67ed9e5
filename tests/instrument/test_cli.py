"""`klaraptor instrument` on the command line: the builds come from the store, the files are
written beside the output, and every failure is a message and an exit code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klaraptor.assemble.kernel import BuildReport
from klaraptor.cli import main
from klaraptor.frontends.annotated import read_annotated
from klaraptor.store import KernelRecord, Store
from tests.instrument.support import needs_libclang, synthetic_helper

needs_libclang()

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "annotated"
DEVICE = "NVIDIA H200|132 SMs|1980 MHz|mem 3201 MHz|140 GiB"


@pytest.fixture()
def example(tmp_path: Path) -> tuple[Path, Path]:
    """(the matvec example copied to tmp, a store with a build of each of its kernels)."""
    folder = tmp_path / "app"
    shutil.copytree(EXAMPLE, folder)
    store = Store(tmp_path / "store.sqlite")
    for spec in read_annotated(folder / "matvec.cu"):
        store.put_kernel(
            KernelRecord(spec.name, spec.fingerprint(), spec.data_names, spec.to_summary())
        )
        report = BuildReport(sizes=[], model="synthetic", fit_wall_s=0.0, total_wall_s=0.0)
        store.put_build(
            spec.name, DEVICE, "synthetic", synthetic_helper(spec).to_dict(), report.to_dict()
        )
    return folder / "matvec.cu", tmp_path / "store.sqlite"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_instrument_writes_the_program_and_its_headers(
    example: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    source, store = example
    before = source.read_bytes()
    code, out, err = _run(
        capsys, "--store", str(store), "instrument", str(source), "--device", DEVICE
    )
    assert code == 0, err
    assert "2 of 2 launch(es) of annotated kernels rewritten (mv_rows, transpose)" in out
    folder = source.parent
    written = {p.name for p in folder.iterdir()}
    assert {
        "matvec.klaraptor.cu",
        "matvec.klaraptor.h",
        "klaraptor_runtime.h",
        "klaraptor_matvec_mv_rows.h",
        "klaraptor_matvec_transpose.h",
    } <= written
    assert source.read_bytes() == before
    text = (folder / "matvec.klaraptor.cu").read_text()
    assert "klaraptor_matvec_mv_rows_launch(mv_rows, grid1, block1, 0, 0, A, x, y, n);" in text
    # The helper header is `klaraptor export`'s, byte for byte.
    code, exported, _ = _run(
        capsys, "--store", str(store), "export", "matvec.mv_rows", "--device", DEVICE
    )
    assert code == 0 and (folder / "klaraptor_matvec_mv_rows.h").read_text() == exported


def test_dry_run_writes_nothing(
    example: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    source, store = example
    code, out, _ = _run(
        capsys, "--store", str(store), "instrument", str(source), "--device", DEVICE, "--dry-run"
    )
    assert code == 0 and "nothing written" in out
    assert not (source.parent / "matvec.klaraptor.cu").exists()


def test_a_missing_output_directory_is_exit_code_2(
    example: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    source, store = example
    out = source.parent / "no" / "such" / "dir" / "out.cu"
    code, _, err = _run(capsys, "--store", str(store), "instrument", str(source), "-o", str(out))
    assert code == 2 and "does not exist; create it first" in err and "Traceback" not in err


def test_a_kernel_without_a_build_is_a_warning(
    example: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source, _ = example
    empty = Store(tmp_path / "empty.sqlite")
    del empty
    code, out, err = _run(
        capsys, "--store", str(tmp_path / "empty.sqlite"), "instrument", str(source)
    )
    assert code == 0
    assert "matvec.cu:13: kernel mv_rows: no build of matvec.mv_rows" in err.replace("\n", " ")
    assert "0 of 2 launch(es)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["absent.cu"], "no such file"),
        (["."], "not a regular file"),
    ],
)
def test_bad_sources_are_exit_code_2(
    example: tuple[Path, Path], capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    _, store = example
    code, _, err = _run(capsys, "--store", str(store), "instrument", *args)
    assert code == 2 and message in err and "Traceback" not in err
