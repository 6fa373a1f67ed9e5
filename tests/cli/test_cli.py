"""The `klaraptor` command line on a store built from the recorded H200 data (CPU)."""

from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path

import pytest

from klaraptor import suite
from klaraptor.bench.dataset import load_recorded
from klaraptor.build import build
from klaraptor.cli import main

KERNEL = "polybench.atax.k1"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:  # noqa: ANN001
    data = load_recorded()
    path = tmp_path_factory.mktemp("cli") / "k.sqlite"
    store = data.to_store(path, kernels=[KERNEL])
    spec = suite.get(KERNEL)
    build(
        spec,
        [{"N": n} for n in spec.meta["train_sizes"]],
        model="time_fit",
        store=store,
        device=data.profile(),
        collect_data=False,
    )
    store.close()
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_select_explain_show_list(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "--store", str(store_path), "select", KERNEL, "N=4096", "--json")
    assert rc == 0
    sel = json.loads(out)
    assert (
        sel["D"] == [4096]
        and sel["grid"] == [-(-4096 // sel["block"][0]), 1, 1]
        and len(sel["topk"]) == 4
    )
    rc, out, _ = run(capsys, "--store", str(store_path), "explain", KERNEL, "4096", "--limit", "5")
    assert rc == 0 and "rank" in out and "pred ms" in out
    rc, out, _ = run(capsys, "--store", str(store_path), "show", KERNEL)
    assert rc == 0 and "time_ms" in out and "32 candidate blocks" in out
    rc, out, _ = run(capsys, "--store", str(store_path), "list")
    assert rc == 0 and KERNEL in out and "time_fit" in out


def test_export_c_compiles_and_agrees(store_path: Path, capsys, tmp_path: Path) -> None:  # noqa: ANN001
    hdr = tmp_path / "atax.h"
    assert (
        run(capsys, "--store", str(store_path), "export", KERNEL, "--lang", "c", "-o", str(hdr))[0]
        == 0
    )
    src = tmp_path / "use.c"
    src.write_text(
        f'#include "{hdr}"\nint best(const long *D, int *g, int *b) {{ return klaraptor_polybench_atax_k1_best(D, g, b); }}\n'
    )
    lib = tmp_path / "libuse.so"
    subprocess.run(
        [
            "cc",
            "-std=c99",
            "-O2",
            "-Wall",
            "-Werror",
            "-ffp-contract=off",
            "-shared",
            "-fPIC",
            "-o",
            str(lib),
            str(src),
            "-lm",
        ],
        check=True,
    )
    fn = ctypes.CDLL(str(lib)).best
    D = (ctypes.c_long * 1)(100000)  # outside the spec's range: refused, as the selector does
    assert fn(D, (ctypes.c_int * 3)(), (ctypes.c_int * 3)()) == -1
    for n in (2048, 3000, 8192, 46340):
        D = (ctypes.c_long * 1)(n)
        g, b = (ctypes.c_int * 3)(), (ctypes.c_int * 3)()
        assert fn(D, g, b) == 0
        rc, out, err = run(capsys, "--store", str(store_path), "select", KERNEL, str(n), "--json")
        assert rc == 0, err
        sel = json.loads(out)
        assert list(b) == sel["block"] and list(g) == sel["grid"]
    pyfile = tmp_path / "atax.py"
    assert (
        run(
            capsys,
            "--store",
            str(store_path),
            "export",
            KERNEL,
            "--lang",
            "python",
            "-o",
            str(pyfile),
        )[0]
        == 0
    )
    ns: dict = {}
    exec(pyfile.read_text(), ns)
    grid, block = ns["best"]((8192,))
    assert (
        list(block)
        == json.loads(
            run(capsys, "--store", str(store_path), "select", KERNEL, "8192", "--json")[1]
        )["block"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("select", "polybench.nothing", "4096"), "no build of kernel"),
        (("select", KERNEL, "N=0"), "outside its range"),
        (("select", KERNEL, "N=abc"), "not an integer"),
        (("select", KERNEL, "M=4096"), "unknown ['M']"),
        (("select", KERNEL, "4096", "--device", "NVIDIA A100|driver 1|1400 MHz"), "was built on"),
        (("build", "polybench.nothing"), "unknown kernel"),
        (("build", KERNEL), "no CUDA GPU"),
        (("device",), "no CUDA GPU"),
    ],
)
def test_bad_input_gives_a_clear_error(store_path: Path, capsys, argv, message: str) -> None:  # noqa: ANN001
    rc, _, err = run(capsys, "--store", str(store_path), *argv)
    assert rc == 2
    assert message in " ".join(err.split())


def test_forcing_a_build_from_another_gpu_warns(store_path: Path, capsys) -> None:  # noqa: ANN001
    rc, out, err = run(
        capsys,
        "--store",
        str(store_path),
        "select",
        KERNEL,
        "4096",
        "--device",
        "NVIDIA A100|driver 1|1400 MHz",
        "--force",
    )
    assert rc == 0 and "block" in out and "forced" in " ".join(err.split())


def test_dry_run_lists_points(capsys) -> None:  # noqa: ANN001
    rc, out, _ = run(capsys, "build", "polybench.gemm.gemm", "--sizes", "256,512", "--dry-run")
    assert rc == 0 and "51 to measure" in out and "N=512" in out


def test_annotated_file_dry_run(capsys) -> None:  # noqa: ANN001
    cu = Path(__file__).resolve().parents[2] / "examples" / "annotated" / "matvec.cu"
    rc, out, _ = run(capsys, "build", str(cu), "--dry-run")
    assert rc == 0 and "matvec.mv_rows" in out and "matvec.transpose" in out
