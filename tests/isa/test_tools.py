"""Finding the CUDA binary utilities and NVRTC; clear errors when they are missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from klaraptor.isa import tools
from klaraptor.isa.errors import ToolMissingError
from tests.isa.helpers import needs_tools

SRC = Path(__file__).resolve().parents[2] / "src"


def test_missing_tool_names_it_and_how_to_install(tmp_path):
    with pytest.raises(ToolMissingError) as exc:
        tools.find_tool("cuobjdump", [tmp_path])
    msg = str(exc.value)
    assert "cuobjdump was not found" in msg and str(tmp_path) in msg
    assert "pip install 'klaraptor[isa]'" in msg and "nvidia-cuda-cuobjdump" in msg
    assert "CUDA toolkit" in msg


def test_run_cuobjdump_without_tools(tmp_path):
    with pytest.raises(ToolMissingError, match="cuobjdump"):
        tools.run_cuobjdump(b"\x7fELF", ["-sass"], [tmp_path])


@needs_tools
def test_cuobjdump_needs_nvdisasm(tmp_path):
    """A folder with cuobjdump but not nvdisasm: the error names nvdisasm."""
    (tmp_path / "cuobjdump").symlink_to(tools.find_tool("cuobjdump"))
    assert tools.find_tool("cuobjdump", [tmp_path]).parent == tmp_path
    with pytest.raises(ToolMissingError, match="nvdisasm was not found"):
        tools.run_cuobjdump(b"", ["-sass"], [tmp_path])


@needs_tools
def test_versions_and_search_path():
    v = tools.versions()
    assert set(v) == {"cuobjdump", "nvdisasm"}
    assert all(x.count(".") >= 1 for x in v.values()), v
    assert any(d.is_dir() for d in tools.default_search_dirs())


def _path_without_cuda(tmp_path: Path) -> list[str]:
    """This interpreter's import path, with every folder that holds a `cuda` package replaced by
    a copy (symlinks) without it: what an environment without cuda-bindings looks like."""
    out = [str(SRC)]
    for k, entry in enumerate(p for p in sys.path if p):
        folder = Path(entry)
        if not folder.is_dir() or not (folder / "cuda").exists():
            out.append(entry)
            continue
        shadow = tmp_path / f"site{k}"
        shadow.mkdir()
        for item in folder.iterdir():
            if not item.name.startswith(("cuda", "nvidia", "__editable__", "_klaraptor")):
                (shadow / item.name).symlink_to(item)
        out.append(str(shadow))
    return out


def test_missing_nvrtc_names_the_extra(tmp_path):
    """Run with an import path that has no cuda-bindings (site processing off: -S)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(_path_without_cuda(tmp_path))}
    code = (
        "import sys, importlib.util\n"
        "assert importlib.util.find_spec('cuda') is None, 'cuda is still importable'\n"
        "from klaraptor.isa.compile import compile_source\n"
        "from klaraptor.isa.errors import ToolMissingError\n"
        "try:\n"
        "    compile_source('extern \"C\" __global__ void k() {}')\n"
        "except ToolMissingError as e:\n"
        "    print('MISSING', e); sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cuda-bindings is not installed" in proc.stdout
    assert "pip install 'klaraptor[isa]'" in proc.stdout
