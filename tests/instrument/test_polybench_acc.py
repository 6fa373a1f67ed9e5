"""The PolyBench-ACC programs under tests/data: the originals plus KLARAPTOR annotations only."""

from __future__ import annotations

import hashlib
import re

import pytest

from klaraptor.frontends.annotated import read_annotated
from tests.instrument.support import CUDA, POLYBENCH, PROGRAMS, device_script, program

_PRAGMA_LINE = re.compile(rb"^#pragma kernel_info_(size_param_idx|dim)_\w+ = \d+;\n", re.M)


def _provenance() -> dict[str, str]:
    """path (under the repository's root) -> sha256 of the original, from PROVENANCE."""
    out = {}
    for line in (POLYBENCH / "PROVENANCE").read_text().splitlines():
        m = re.fullmatch(r"([0-9a-f]{64})  (\S+)", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def test_provenance_lists_the_15_programs_and_what_they_include() -> None:
    paths = _provenance()
    expected = {f"CUDA/{rel}" for rel, _ in PROGRAMS.values()}
    expected |= {p + "h" for p in expected}  # each .cu and its .cuh
    expected |= {
        "LICENSE",
        "CUDA/utilities/polybench.h",
        "CUDA/utilities/polybench.c",
        "CUDA/utilities/polybenchUtilFuncts.h",
    }
    assert set(paths) == expected
    assert "70ea4ca9047dc4ec9c3ca79b4c91b3b2cc1510e7" in (POLYBENCH / "PROVENANCE").read_text()


def test_sources_are_the_originals_plus_pragma_lines_only() -> None:
    for path, digest in _provenance().items():
        data = (POLYBENCH / path).read_bytes()
        if path.endswith(".cu"):
            assert _PRAGMA_LINE.search(data), f"{path} carries no annotation"
            data = _PRAGMA_LINE.sub(b"", data)
        assert hashlib.sha256(data).hexdigest() == digest, f"{path} differs from the original"


def test_no_other_program_of_the_repository_is_copied() -> None:
    programs = {p.relative_to(CUDA).as_posix() for p in CUDA.rglob("*.cu")}
    assert programs == {rel for rel, _ in PROGRAMS.values()}


@pytest.mark.parametrize("bench", sorted(PROGRAMS))
def test_each_kernel_is_annotated_with_a_config(bench: str) -> None:
    path = program(bench)
    specs = {s.kernel: s for s in read_annotated(path)}
    assert set(specs) == set(PROGRAMS[bench][1])
    for spec in specs.values():
        assert (path.parent / f"{path.stem}.{spec.kernel}.py").is_file()
        # Trained below the size the program is evaluated at (scripts/device_instrument.py).
        assert max(spec.meta["train_sizes"]) < device_script().PROGRAMS[bench].eval_size
        # The training source defines what the kernel took from the program's headers.
        assert "#define DATA_TYPE float" in spec.source


def test_training_sources_compile_with_nvrtc() -> None:
    pytest.importorskip("cuda.bindings", reason="the isa extra (NVRTC) is not installed")
    from klaraptor.isa.compile import compile_spec

    for bench in sorted(PROGRAMS):
        spec = read_annotated(program(bench))[0]  # each spec's source holds all the kernels
        assert compile_spec(spec, ptx=False).cubin
