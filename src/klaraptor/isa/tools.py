"""Find and run the CUDA binary utilities (cuobjdump, nvdisasm) without a GPU.

Search order: PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, then the `nvidia/cu13/bin`
(and `nvidia/cu12/bin`) folder that the pip wheels nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm
install under site-packages. `cuobjdump -sass` runs nvdisasm, so it gets nvdisasm's folder on its
PATH and in NVDISASM_PATH.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from klaraptor.isa.errors import ISA_EXTRA, DisassemblyError, ToolMissingError

TOOLS = ("cuobjdump", "nvdisasm")
_WHEEL_DIRS = ("nvidia/cu13/bin", "nvidia/cu12/bin", "nvidia/cuda_cuobjdump/bin")
_VERSION = re.compile(r"release\s+([\d.]+),\s*V([\d.]+)")
_TIMEOUT_S = 120.0


def default_search_dirs() -> list[Path]:
    """Where tools are looked for, in order (existing folders only, no duplicates)."""
    dirs: list[Path] = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(Path(os.environ[var]) / "bin")
    dirs.append(Path("/usr/local/cuda/bin"))
    # The pip wheels put the binaries in site-packages/nvidia/cu13/bin.
    dirs += [Path(p) / sub for p in sys.path if p for sub in _WHEEL_DIRS]
    seen: set[Path] = set()
    out = []
    for d in dirs:
        key = d.resolve() if d.exists() else d
        if key not in seen and d.is_dir():
            seen.add(key)
            out.append(d)
    return out


def find_tool(name: str, search_dirs: Sequence[str | Path] | None = None) -> Path:
    """The path of executable `name` (cuobjdump, nvdisasm), or ToolMissingError."""
    dirs = default_search_dirs() if search_dirs is None else [Path(d) for d in search_dirs]
    for d in dirs:
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    where = ", ".join(str(d) for d in dirs) or "(no folders)"
    wheel = f"nvidia-cuda-{name}"
    raise ToolMissingError(
        f"{name} was not found (searched: {where}). Install it with {ISA_EXTRA} (the {wheel} "
        "wheel), or install the CUDA toolkit and put its bin/ folder on PATH or set CUDA_HOME"
    )


@functools.lru_cache(maxsize=16)
def tool_version(path: Path) -> str:
    """The version of a CUDA binary utility, e.g. 13.0.88 ("unknown" when it does not say)."""
    try:
        out = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = _VERSION.search(out)
    return m.group(2) if m else "unknown"


def run_cuobjdump(
    cubin: bytes, args: Sequence[str], search_dirs: Sequence[str | Path] | None = None
) -> str:
    """stdout of `cuobjdump <args> <cubin>`; DisassemblyError when it fails."""
    cuobjdump = find_tool("cuobjdump", search_dirs)
    nvdisasm = find_tool("nvdisasm", search_dirs)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(nvdisasm.parent), env.get("PATH", "")])
    env["NVDISASM_PATH"] = str(nvdisasm.parent)
    with tempfile.TemporaryDirectory(prefix="klaraptor_isa_") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            proc = subprocess.run(
                [str(cuobjdump), *args, str(path)],
                capture_output=True,
                text=True,
                env=env,
                timeout=_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            raise DisassemblyError(
                f"cuobjdump {' '.join(args)} did not finish in {_TIMEOUT_S:.0f} s"
            ) from None
    if proc.returncode != 0:
        raise DisassemblyError(
            f"cuobjdump {' '.join(args)} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[:2000]}"
        )
    return proc.stdout


def versions(search_dirs: Sequence[str | Path] | None = None) -> dict[str, str]:
    """{"cuobjdump": "13.0.88", "nvdisasm": ...} of the tools that would be used."""
    return {name: tool_version(find_tool(name, search_dirs)) for name in TOOLS}
