"""`klaraptor.instrument` on the real PolyBench-ACC programs: every launch of an annotated kernel
rewritten, nothing else changed, the result read back by the parser and its C part compiled by
the host compiler against the exported headers (the choice equal to the Python selector's)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from klaraptor.frontends.annotated import read_annotated
from klaraptor.helper.program import HelperProgram
from klaraptor.instrument import Instrumented, instrument
from klaraptor.instrument.parse import parse_source
from tests.instrument.support import (
    COMPAT,
    CUDA,
    PROGRAMS,
    UTILITIES,
    helpers_for,
    needs_libclang,
    program,
)

needs_libclang()

_PREFIX_LINES = 2  # the #include of the program header and `#line 1 "<source>"`


def _instrument_copy(tmp: Path, bench: str) -> Instrumented:
    """Instrument a copy of the program (with the utilities beside, as in the repository)."""
    rel = Path(PROGRAMS[bench][0])
    shutil.copytree(program(bench).parent, tmp / rel.parent)
    shutil.copytree(UTILITIES, tmp / "utilities", dirs_exist_ok=True)
    result = instrument(
        tmp / rel, helpers=helpers_for(program(bench)), include_dirs=[tmp / "utilities"]
    )
    result.write()
    return result


@pytest.mark.parametrize("bench", sorted(PROGRAMS))
def test_every_launch_is_rewritten_and_nothing_else_changes(tmp_path: Path, bench: str) -> None:
    result = _instrument_copy(tmp_path, bench)
    original = result.source.read_bytes()
    launches = [ln for ln in parse_source(result.source, include_dirs=[UTILITIES]).launches]
    assert [ln.kernel for ln in launches] == list(PROGRAMS[bench][1])
    assert result.notices == []
    assert result.rewritten == len(launches) and all(o.rewritten for o in result.launches)

    text = result.output.read_bytes()
    head = text.split(b"\n", _PREFIX_LINES)
    assert (
        head[0].startswith(b'#include "') and head[1] == f'#line 1 "{result.source.name}"'.encode()
    )
    body = head[_PREFIX_LINES]
    # Outside the launches, the body is the original byte for byte, in order.
    pos_o, pos_b = 0, 0
    for ln in launches:
        segment = original[pos_o : ln.span.start]
        assert body[pos_b : pos_b + len(segment)] == segment
        pos_b += len(segment)
        end = body.index(b")", pos_b)  # the rewritten launch, up to its ')' (args have none)
        while body.count(b"(", pos_b, end + 1) != body.count(b")", pos_b, end + 1):
            end = body.index(b")", end + 1)
        rewritten = body[pos_b : end + 1].decode()
        kernel = ln.kernel
        assert rewritten.startswith("klaraptor_") and f"_launch({kernel}, " in rewritten
        pos_b, pos_o = end + 1, ln.span.end
    assert body[pos_b:] == original[pos_o:]
    assert text.count(b"\n") == original.count(b"\n") + _PREFIX_LINES  # line numbers kept


def _calls_in_main(path: Path, include_dirs: list[Path]) -> tuple[list, list]:
    """(calls of the klaraptor wrappers, kernel launches) the parser sees in the main file."""
    from clang import cindex

    tu = cindex.Index.create().parse(
        str(path), args=parse_source.__globals__["clang_args"](include_dirs)
    )
    errors = [d for d in tu.diagnostics if d.severity >= cindex.Diagnostic.Error]
    assert errors == [], [str(d) for d in errors]
    wrappers, launches = [], []

    def walk(c: cindex.Cursor) -> None:
        for ch in c.get_children():
            if ch.location.file is not None and str(ch.location.file) != str(path):
                continue
            if ch.kind == cindex.CursorKind.CALL_EXPR:
                kids = list(ch.get_children())
                if ch.spelling.startswith("klaraptor_") and ch.spelling.endswith("_launch"):
                    wrappers.append((ch, kids))
                elif len(kids) > 1 and kids[1].spelling == "__cudaPushCallConfiguration":
                    launches.append(ch)
            walk(ch)

    walk(tu.cursor)
    return wrappers, launches


@pytest.mark.parametrize("bench", ["2MM", "GRAMSCHMIDT"])
def test_rewritten_program_parses_back_to_the_wrapper_calls(tmp_path: Path, bench: str) -> None:
    result = _instrument_copy(tmp_path, bench)
    src = result.source.read_bytes()
    before = parse_source(result.source, include_dirs=[tmp_path / "utilities"]).launches
    wrappers, launches = _calls_in_main(result.output, [tmp_path / "utilities"])
    assert launches == []  # no launch of an annotated kernel is left in the program
    out = result.output.read_bytes()
    assert len(wrappers) == len(before)
    for (call, kids), ln in zip(wrappers, before):
        # The wrapper's arguments: the kernel, grid, block, smem, stream, then the launch's own.
        assert (
            call.spelling
            == f"klaraptor_{helpers_for(program(bench))[_name(bench, ln.kernel)].c_name}_launch"
        )
        args = kids[1:]
        assert _text(out, args[0]) == ln.kernel
        config = src[ln.open_config.end : ln.close_config.start].decode()
        assert [_text(out, a) for a in args[1:3]] == [s.strip() for s in config.split(",")]
        assert [_text(out, a) for a in args[3:5]] == ["0", "0"]
        written = src[ln.open_args.end : ln.span.end - 1].decode()
        assert [_text(out, a) for a in args[5:]] == [s.strip() for s in written.split(",")]


def _name(bench: str, kernel: str) -> str:
    return next(s.name for s in read_annotated(program(bench)) if s.kernel == kernel)


def _text(data: bytes, cursor: object) -> str:
    ext = cursor.extent  # type: ignore[attr-defined]
    return data[ext.start.offset : ext.end.offset].decode().strip()


_DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "{header}"
int main(int argc, char **argv) {{
    int i, rep;
    for (rep = 0; rep < 2; ++rep)  /* the second pass answers from the cache */
        for (i = 1; i < argc; ++i) {{
            long D[1] = {{atol(argv[i])}};
            int g[3] = {{0, 0, 0}}, b[3] = {{0, 0, 0}};
            int status = {chooser}(D, g, b);
            printf("%d %ld %d %d %d %d %d %d %d\n", rep, D[0], status, g[0], g[1], g[2], b[0], b[1], b[2]);
        }}
    return 0;
}}
"""
# Sizes around the training sizes and far above, repeated and interleaved (cache collisions).
_SIZES = [1, 7, 128, 129, 300, 512, 513, 1000, 4096, 4097, 100000, 40000, 7, 512, 1 << 20]


@pytest.mark.parametrize(("bench", "lang"), [("2MM", "c++17"), ("GRAMSCHMIDT", "c99")])
def test_cached_choice_in_c_is_the_selectors(tmp_path: Path, bench: str, lang: str) -> None:
    """The generated C (the program header's cached chooser over `klaraptor export`'s header),
    compiled by the host compiler, chooses what HelperProgram.choose chooses, cached or not."""
    compiler = shutil.which("g++" if lang.startswith("c++") else "gcc")
    if compiler is None:
        pytest.skip("no host C/C++ compiler")
    result = _instrument_copy(tmp_path, bench)
    helpers: dict[str, HelperProgram] = helpers_for(program(bench))
    header = next(n for n in result.headers if n.endswith(".klaraptor.h"))
    folder = result.output.parent
    for helper in helpers.values():
        chooser = f"klaraptor_{helper.c_name}_choose"
        driver = folder / f"driver_{helper.c_name}.{'cpp' if lang.startswith('c++') else 'c'}"
        driver.write_text(_DRIVER.format(header=header, chooser=chooser))
        exe = folder / f"driver_{helper.c_name}_{lang}"
        build = subprocess.run(
            [
                compiler,
                f"-std={lang}",
                "-O2",
                "-ffp-contract=off",
                "-Wall",
                "-Wno-unused-function",
                str(driver),
                "-o",
                str(exe),
                "-lm",
            ],
            capture_output=True,
            text=True,
        )
        assert build.returncode == 0, build.stderr
        assert "warning" not in build.stderr, build.stderr
        rows = subprocess.run(
            [str(exe), *map(str, _SIZES)], capture_output=True, text=True, check=True
        )
        for line in rows.stdout.splitlines():
            _, d, status, *rest = (int(v) for v in line.split())
            top, _, grid = helper.choose(helper.data_schema.parse(str(d)))
            if not top:
                assert status == -1
                continue
            assert status == 0
            assert tuple(rest[:3]) == grid and tuple(rest[3:]) == helper.candidates[top[0]], (
                f"{helper.kernel} D={d}"
            )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc (CUDA toolkit) here")
def test_instrumented_program_compiles_with_nvcc(tmp_path: Path) -> None:
    result = _instrument_copy(tmp_path, "2MM")
    build = subprocess.run(
        ["nvcc", "-c", "-arch=sm_90", "-include", str(COMPAT), f"-I{tmp_path / 'utilities'}",
         "-DMINI_DATASET", result.output.name, "-o", "prog.o"],
        cwd=result.output.parent,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert "error" not in build.stderr


def test_repository_sources_are_left_untouched() -> None:
    assert not list(CUDA.rglob("*.klaraptor.*")) and not list(CUDA.rglob("klaraptor_*.h"))


_THREADS = r"""
#include <cstdio>
#include <thread>
#include <vector>
#include "{header}"
int main() {{
    const long sizes[] = {{7, 128, 300, 512, 4096, 100000}};
    int want[6][6];
    for (int s = 0; s < 6; ++s) {{
        long D[1] = {{sizes[s]}};
        {chooser}(D, want[s], want[s] + 3);
    }}
    int bad = 0;
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; ++t)
        pool.emplace_back([&, t] {{
            for (int i = 0; i < 20000; ++i) {{
                int s = (i * 7 + t) % 6, got[6];
                long D[1] = {{sizes[s]}};
                {chooser}(D, got, got + 3);
                for (int k = 0; k < 6; ++k) if (got[k] != want[s][k]) __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
            }}
        }});
    for (auto &th : pool) th.join();
    std::printf("bad=%d\n", bad);
    return bad != 0;
}}
"""


def test_the_cache_is_per_thread_and_consistent(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no host C++ compiler")
    result = _instrument_copy(tmp_path, "2MM")
    header = next(n for n in result.headers if n.endswith(".klaraptor.h"))
    helper = next(iter(helpers_for(program("2MM")).values()))
    driver = result.output.parent / "threads.cpp"
    driver.write_text(_THREADS.format(header=header, chooser=f"klaraptor_{helper.c_name}_choose"))
    exe = result.output.parent / "threads"
    build = subprocess.run(
        [compiler, "-std=c++17", "-O2", "-pthread", str(driver), "-o", str(exe), "-lm"],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "bad=0" in run.stdout, run.stdout + run.stderr


def test_the_runtime_and_the_planner_agree_on_the_data_limit() -> None:
    from klaraptor.instrument.core import MAX_DATA
    from klaraptor.instrument.emit import runtime_header

    assert f"#define KLARAPTOR_MAX_DATA {MAX_DATA}" in runtime_header()
