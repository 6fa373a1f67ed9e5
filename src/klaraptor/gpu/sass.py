"""CUDA source → cubin (NVRTC) → SASS (cuobjdump), without a GPU.

Used to check that a microbenchmark compiles to the intended instructions (FFMA, not FMUL +
FADD; MUFU.EX2; DFMA; LDS; LDG) and to count them. NVRTC comes from `cuda-bindings`
(`from cuda.bindings import nvrtc`) with the `nvidia-cuda-nvrtc` wheel; `cuobjdump` (which calls
`nvdisasm`) from the CUDA toolkit or the `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm`
wheels, whose binaries land in `<site-packages>/nvidia/cu13/bin/`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from klaraptor.errors import CompileError, KlaraptorError

_INSTALL_HINT = (
    "pip install 'cuda-bindings==13.0.*' 'nvidia-cuda-nvrtc==13.0.*' nvidia-cuda-cuobjdump "
    "nvidia-cuda-nvdisasm (or put a CUDA toolkit's bin/ on PATH)"
)


class ToolMissing(KlaraptorError):
    """NVRTC, cuobjdump or nvdisasm is not installed."""


def _wheel_bin_dirs() -> list[Path]:
    dirs = []
    for entry in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin"):
            d = Path(entry) / sub
            if d.is_dir():
                dirs.append(d)
    return dirs


def find_tool(name: str) -> Path:
    """Path of a CUDA binary tool (`cuobjdump`, `nvdisasm`): PATH first, then pip wheels."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for d in _wheel_bin_dirs():
        if (d / name).is_file():
            return d / name
    raise ToolMissing(f"{name} not found on PATH or in the nvidia pip wheels; {_INSTALL_HINT}")


def compile_cubin(source: str, arch: str = "sm_90", options: Sequence[str] = ()) -> bytes:
    """Compile CUDA C++ `source` with NVRTC to a cubin for `arch` (e.g. sm_90)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        msg = f"NVRTC (cuda.bindings.nvrtc) is not importable: {exc}; {_INSTALL_HINT}"
        raise ToolMissing(msg) from exc

    def check(result: object, what: str) -> None:
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed: {result}")

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    check(err, "create")
    opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CompileError(
                f"NVRTC could not compile for {arch} with {list(options)}",
                log.decode(errors="replace").rstrip("\x00 "),
            )
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        check(err, "cubin size")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        check(err, "get cubin")
        return bytes(cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?);")


def disassemble(cubin: bytes) -> dict[str, list[str]]:
    """SASS of every kernel in `cubin`: kernel name → instruction texts (no addresses)."""
    tool = find_tool("cuobjdump")
    nvdisasm = find_tool("nvdisasm")
    env = {**os.environ, "PATH": f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run(
            [str(tool), "-sass", str(path)], capture_output=True, text=True, env=env, timeout=120
        )
    if proc.returncode != 0:
        raise KlaraptorError(f"cuobjdump -sass failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in proc.stdout.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        if current is not None:
            ins = _INSTRUCTION.search(line)
            if ins:
                current.append(ins.group(1).strip())
    return out


def opcode(instruction: str) -> str:
    """The opcode with its modifiers (`MUFU.EX2`, `LDG.E.STRONG.GPU`), predicate dropped."""
    text = instruction.strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1]
    return text.split(None, 1)[0]


def opcode_counts(instructions: Sequence[str]) -> Counter[str]:
    """How often each opcode (with modifiers) occurs."""
    return Counter(opcode(i) for i in instructions)
