"""The README's "Use it from Python" and "Command line" sections run as written on a machine
without a GPU, against a store of recorded H200 builds (`klaraptor import-recorded`); its exit
codes table is the CLI's.

The Python examples of the front-ends section are GPU examples: here each is checked to stand
alone (every name it uses is imported or defined in it); `scripts/frontends_gpu.py` runs them
as written on a GPU; the section's Kernel Tuner commands run here."""

from __future__ import annotations

import builtins
import os
import re
import shutil
import subprocess
import symtable
import sys
from pathlib import Path

import pytest

from klaraptor.cli.common import EXIT_CODES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GPU_EXAMPLES = "Front-ends: Numba, CuPy, cuda.core, PyTorch, Kernel Tuner"


def section(title: str) -> str:
    """The text of the `## title` section, up to the next `## ` heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert m is not None, f"README has no section {title!r}"
    return m.group(1)


def blocks(text: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks of language `lang` ("" for none), in order."""
    fenced = re.findall(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)
    return [body for tag, body in fenced if tag == lang]


@pytest.fixture
def env(recorded_home: Path, tmp_path: Path) -> dict[str, str]:
    """A user's environment: the recorded store as KLARAPTOR_HOME (a copy: commands write
    history), no GPU, the venv's `klaraptor` on PATH, the repository's examples at hand."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(recorded_home / "klaraptor.sqlite", home / "klaraptor.sqlite")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bindir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "KLARAPTOR_HOME": str(home),
        "CUDA_VISIBLE_DEVICES": "",
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
    }


def test_readme_python_section_runs_as_written(env: dict[str, str], tmp_path: Path) -> None:
    (code,) = blocks(section("Use it from Python"), "python")
    assert "import cupy" not in code.split("def make_args")[0]  # no GPU needed to import it
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "feasible points" in p.stdout and "Traceback" not in p.stderr
    assert "no GPU here" in p.stderr  # the build is the H200's, and it says so


def test_readme_command_line_section_runs_as_written(env: dict[str, str], tmp_path: Path) -> None:
    (shell,) = blocks(section("Command line"), "")
    commands = [line for line in shell.splitlines() if line.strip()]
    assert len(commands) >= 8 and all(c.startswith("klaraptor ") for c in commands)
    for command in commands:
        p = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert p.returncode == 0, (command, p.stderr)
        assert "Traceback" not in p.stderr, command
        assert p.stdout.strip(), command
    assert (tmp_path / "gemm_helper.h").is_file() and (tmp_path / "gemm_helper.py").is_file()


def test_readme_quick_start_walkthrough_commands_exist() -> None:
    """The Quick start's commands are real commands (`import-recorded` itself runs in the
    session fixture that made the store)."""
    from klaraptor.cli.main import make_parser

    parser = make_parser()
    for block in blocks(section("Quick start"), ""):
        for line in block.splitlines():
            words = line.split("#")[0].split()
            if words[:1] == ["klaraptor"]:
                try:
                    parser.parse_args(words[1:])
                except SystemExit as exc:  # --version prints it and exits 0
                    assert exc.code == 0 and words[1:] == ["--version"], line


def test_readme_exit_codes_are_the_cli_s() -> None:
    table = re.search(r"^### Exit codes\n\n(.*?)\n\n", README, re.S | re.M)
    assert table is not None
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", table.group(1), re.M)
    assert [(int(c), m) for c, m in rows] == [(c, m) for c, m, _ in EXIT_CODES]


def undefined_names(code: str) -> set[str]:
    """Names a script uses but neither imports, defines nor gets from builtins."""
    top = symtable.symtable(code, "<readme>", "exec")
    known = set(dir(builtins))
    for sym in top.get_symbols():
        if sym.is_imported() or sym.is_assigned():
            known.add(sym.get_name())
    used: set[str] = set()
    tables = [top]
    while tables:
        t = tables.pop()
        tables.extend(t.get_children())
        for sym in t.get_symbols():
            if sym.is_referenced() and (t is top or sym.is_global()):
                used.add(sym.get_name())
    return used - known


def test_readme_gpu_examples_stand_alone() -> None:
    examples = blocks(section(GPU_EXAMPLES), "python")
    assert len(examples) == 5  # Numba, CuPy, cuda.core, torch, Triton
    for code in examples:
        assert not undefined_names(code), (undefined_names(code), code)
        imported = {m.split(".")[0] for m in re.findall(r"^(?:from|import) ([\w.]+)", code, re.M)}
        allowed = {"klaraptor", "numpy", "numba", "cupy", "torch", "cuda", "triton"}
        assert imported <= allowed, imported
    assert undefined_names("import numpy as np\nprint(np.pi, n)") == {"n"}  # the check can fail
    assert undefined_names("def f():\n    return g\n") == {"g"}


def test_readme_kernel_tuner_commands_run_as_written(tmp_path: Path) -> None:
    (shell,) = blocks(section(GPU_EXAMPLES), "")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = {**os.environ, "KLARAPTOR_HOME": str(tmp_path / "home"), "CUDA_VISIBLE_DEVICES": "",
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")}  # fmt: skip
    for command in shell.replace("\\\n", " ").splitlines():
        p = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
        assert p.returncode == 0, (command, p.stderr)
        assert "Traceback" not in p.stderr, command
    t4 = (tmp_path / "scale-results.json").read_text()
    assert '"block_size_x"' in t4
