"""`klaraptor import-kt` / `export-kt` on the files of real Kernel Tuner runs on the H200."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klaraptor.cli.main import main
from klaraptor.store import Store

DATA = Path(__file__).parents[1] / "data" / "kernel_tuner"
TARGET = "tests.frontends.test_kernel_tuner:SCALE"
CACHES = [str(DATA / f"scale_n{n}.cache.json") for n in (1048576, 4194304, 16777216)]


def run(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_kernel_tuner_cli_import_build_export_round_trip(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    store = str(tmp_path / "s.sqlite")
    rc, out, err = run(
        capsys,
        "--store",
        store,
        "import-kt",
        *CACHES,
        TARGET,
        "--profile",
        "h200",
        "--build",
        "time_fit",
    )
    assert rc == 0, err
    assert out.count("32 timed, 0 failed, 0 rejected") == 3
    assert "built my.scale for NVIDIA H200" in out and "with time_fit" in out
    rc, out, err = run(capsys, "--store", store, "select", "my.scale", "n=67108864", "--force")
    assert rc == 0 and "block" in out, err
    results = tmp_path / "scale-results.json"
    rc, out, err = run(capsys, "--store", store, "export-kt", TARGET, "-o", str(results))
    assert rc == 0, err
    assert "wrote 96 configurations of my.scale" in out
    t4 = json.loads(results.read_text())
    assert len(t4["results"]) == 96
    assert (tmp_path / "scale-metadata.json").exists()
    # The export imports back to the same timings (T4 format, the file's own metadata).
    again = str(tmp_path / "again.sqlite")
    rc, out, err = run(
        capsys, "--store", again, "import-kt", str(results), TARGET, "--profile", "h200"
    )
    assert rc == 0, err
    key = Store(store).collect_devices("my.scale")[0]
    a = {(m.D, m.block): m.value["median_ms"] for m in Store(store).measurements("my.scale", key)}
    b = {(m.D, m.block): m.value["median_ms"] for m in Store(again).measurements("my.scale", key)}
    assert a == pytest.approx(b)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["import-kt", CACHES[0], TARGET, "--profile", "h200", "--map", "n"],
            "--map 'n': expected NAME=VALUE",
        ),
        (["import-kt", "missing.json", TARGET, "--profile", "h200"], "missing.json"),
        (["import-kt", CACHES[0], TARGET, "--profile", "h200", "--map", "n=tile"], "tile"),
        (["import-kt", CACHES[0], "polybench", "--profile", "h200"], "names 30 kernels"),
        (["import-kt", CACHES[0], TARGET, "--device", "nope"], "no device profile 'nope'"),
        (["export-kt", TARGET, "-o", "x.json"], "has no measurements in"),
    ],
)
def test_kernel_tuner_cli_bad_input(tmp_path: Path, capsys, argv, message: str) -> None:  # noqa: ANN001
    store = tmp_path / "s.sqlite"
    Store(store).close()
    rc, out, err = run(capsys, "--store", str(store), *argv)
    assert rc == 2 and message in " ".join(err.split()), err
