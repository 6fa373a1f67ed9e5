"""examples/cpp_dispatch: a C++ host program launches the template instance the exported helper
chooses. On the CPU the header comes from a build of synthetic timings
(tests/assemble/test_program_parameters.py, the same ITEMS kernel): the program compiles with
nvcc (compile-only, no GPU), and its dispatch, compiled with g++, runs the instance of the
helper's ITEMS with its grid and block, as `select` chooses. On a GPU the example is built,
exported and run as its README says."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from klaraptor.assemble import build
from klaraptor.device.profile import recorded_profile
from tests.assemble.test_program_parameters import SPEC, _store

EXAMPLE = Path(__file__).parents[2] / "examples" / "cpp_dispatch"
BEST = "klaraptor_test_items_scale_best"
HARNESS = r"""
#include <cstdio>
#include "dispatch.hpp"
#include "h.h"
int main() {
    long D[1];
    int g[3], b[3], p[1];
    while (std::scanf("%ld", &D[0]) == 1) {
        if (BEST(D, g, b, p) != 0) { std::puts("none"); continue; }
        int ran = 0;
        bool ok = dispatch_on<1, 2, 4, 8>(p[0], [&](auto items) { ran = decltype(items)::value; });
        std::printf("%d %d %d %d %d\n", g[0], b[0], p[0], ran, ok ? 1 : 0);
    }
    bool none = dispatch_on<1, 2, 4, 8>(3, [](auto) {});
    std::printf("%d\n", none ? 1 : 0);
    return 0;
}
"""


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    where = tmp_path_factory.mktemp("cpp")
    store, _ = _store(where / "s.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = build(
            SPEC,
            model="scaling",
            store=store,
            device=recorded_profile("h200"),
            collect_data=False,
            budget=None,
            progress=False,
        )
    (where / "h.h").write_text(kern.export_c())
    return kern, where


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_the_dispatch_runs_the_instance_the_helper_chooses(header: tuple[Any, Path]) -> None:
    kern, where = header
    (where / "harness.cpp").write_text(HARNESS)
    exe = where / "harness"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            f"-DBEST={BEST}",
            f"-I{EXAMPLE}",
            f"-I{where}",
            str(where / "harness.cpp"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    sizes = [1 << 16, 100_003, 1 << 20, 3 << 21, 1 << 25]
    lines = subprocess.run(
        [str(exe)], input="\n".join(map(str, sizes)), capture_output=True, text=True, check=True
    ).stdout.split("\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, line in zip(sizes, lines):
            sel = kern.select(n)
            items = sel.params["ITEMS"]
            assert line.split() == [
                str(sel.grid[0]),
                str(sel.block[0]),
                str(items),
                str(items),
                "1",
            ]
    assert lines[len(sizes)] == "0"  # a value no instance was compiled for is refused
    assert {kern.select(n).params["ITEMS"] for n in sizes} != {1}  # not only the default


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_host_program_compiles_with_nvcc(header: tuple[Any, Path]) -> None:
    _, where = header
    out = subprocess.run(
        [
            "nvcc",
            "-c",
            "-std=c++17",
            "-arch=sm_90",
            "-Xcompiler",
            "-ffp-contract=off",
            '-DKLARAPTOR_HELPER="h.h"',
            f"-DKLARAPTOR_BEST={BEST}",
            f"-I{where}",
            str(EXAMPLE / "scale_items.cu"),
            "-o",
            str(where / "scale_items.o"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.gpu
def test_the_example_builds_exports_and_runs(tmp_path: Path) -> None:
    import sys

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    sys.path.insert(0, str(EXAMPLE))
    try:
        from cpp_dispatch_spec import SPEC as EXAMPLE_SPEC
    finally:
        sys.path.remove(str(EXAMPLE))
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.store import Store

    kern = build(
        EXAMPLE_SPEC,
        [1 << 18, 1 << 19, 1 << 20],
        model="time_fit",
        store=Store(tmp_path / "s.sqlite"),
        device=recorded_profile("h200"),
        collect_options=CollectOptions(min_time_ms=5.0, max_repeats=20, counters=False),
        progress=False,
    )
    (tmp_path / "scale_items_helper.h").write_text(kern.export_c())
    exe = tmp_path / "scale_items"
    subprocess.run(
        [
            "nvcc",
            "-O3",
            "-std=c++17",
            f"-I{tmp_path}",
            str(EXAMPLE / "scale_items.cu"),
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    n = 50_000_000
    out = subprocess.run([str(exe), str(n)], capture_output=True, text=True, timeout=120)
    print(out.stdout, out.stderr)
    sel = kern.select(n)
    assert out.returncode == 0
    assert f"ITEMS={sel.params['ITEMS']} grid=({sel.grid[0]},1,1)" in out.stdout
