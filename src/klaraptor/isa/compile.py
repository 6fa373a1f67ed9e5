"""Compile a kernel's CUDA source with NVRTC (through `cuda.bindings`, no GPU needed).

One source is compiled twice: to PTX for the virtual architecture (`compute_90`) and to a cubin
(SASS) for the real one (`sm_90`). By default the options are the ones CuPy hands NVRTC when the
collector compiles the same spec (`klaraptor.backends.cupy_backend.CupyBackend.compile` → `cupy.RawModule`):
the spec's options, then `-ftz=true` (CuPy's `_compile_with_cache_cuda` appends it) and
`--device-as-default-execution-space` (as `CupyBackend.ptx` does for NVRTC ≥ 12). So the
SASS analysed here is the SASS that is timed, when both sides use the same NVRTC version
(`scripts/device_isa_check.py` checks that on the GPU machine).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.isa.errors import ISA_EXTRA, CompileError, ToolMissingError

DEFAULT_ARCH = "sm_90"
# What CuPy adds to the caller's options (see the module docstring).
CUPY_EXTRA_OPTIONS = ("-ftz=true", "--device-as-default-execution-space")

_ARCH = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)$")


@dataclass(frozen=True)
class CompileResult:
    """PTX and cubin of one source, with the options and the NVRTC version that made them."""

    ptx: str
    cubin: bytes
    arch: str  # the real architecture, e.g. "sm_90"
    options: tuple[str, ...]  # every option but the architecture, in the order NVRTC got them
    nvrtc_version: str  # "13.0"
    log: str  # NVRTC's log of the cubin compile (warnings; usually empty)
    # NVRTC name expression -> the lowered (mangled) name it compiled to (template instances)
    lowered: dict[str, str] = field(default_factory=dict)


def nvrtc_module() -> Any:
    """`cuda.bindings.nvrtc`, or ToolMissingError naming the extra to install."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise ToolMissingError(
            f"NVRTC is needed to compile kernels for static analysis, but cuda-bindings is not "
            f"installed ({exc}); install it with {ISA_EXTRA} (cuda-bindings and "
            "nvidia-cuda-nvrtc), or install the CUDA toolkit and cuda-bindings"
        ) from None
    return nvrtc


def nvrtc_version() -> str:
    """The NVRTC library version, e.g. "13.0" (ToolMissingError when it cannot be loaded)."""
    nvrtc = nvrtc_module()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001 - any loader failure means: NVRTC is unusable here
        raise ToolMissingError(
            f"the NVRTC library could not be loaded ({type(exc).__name__}: {exc}); install it "
            f"with {ISA_EXTRA} (nvidia-cuda-nvrtc) or put the CUDA toolkit's libnvrtc on the "
            "library path"
        ) from None
    _check(nvrtc, err, "nvrtcVersion")
    return f"{major}.{minor}"


def arch_names(arch: str) -> tuple[str, str]:
    """("sm_90", "compute_90") for "sm_90", "compute_90" or "90" (also "sm_90a")."""
    m = _ARCH.match(str(arch).strip())
    if m is None:
        raise CompileError(
            f"architecture {arch!r} is not of the form sm_XY, compute_XY or XY (e.g. sm_90)"
        )
    num, suffix = m.groups()
    return f"sm_{num}{suffix}", f"compute_{num}{suffix}"


def effective_options(options: Sequence[str], *, match_cupy: bool = True) -> tuple[str, ...]:
    """The options NVRTC gets (without the architecture): the caller's, then CuPy's additions."""
    opts = tuple(str(o) for o in options)
    if match_cupy:
        opts += tuple(o for o in CUPY_EXTRA_OPTIONS if o not in opts)
    return opts


def compile_source(
    source: str,
    options: Sequence[str] = (),
    arch: str = DEFAULT_ARCH,
    *,
    match_cupy: bool = True,
    name: str = "klaraptor_kernel.cu",
    ptx: bool = True,
    name_expressions: Sequence[str] = (),
) -> CompileResult:
    """PTX (virtual arch) and cubin (real arch) of `source`; CompileError with the NVRTC log.

    ptx=False skips the PTX compile (`ptx` is then ""). `name_expressions` (e.g. "sgemm<4, 2>")
    instantiate templates, as CuPy's name expressions do; `lowered` maps each to its name.
    """
    sm, compute = arch_names(arch)
    nvrtc = nvrtc_module()
    version = nvrtc_version()
    opts = effective_options(options, match_cupy=match_cupy)
    ptx_text = b""
    if ptx:
        ptx_text, _, _ = _run(
            nvrtc, source, name, (*opts, f"--gpu-architecture={compute}"), "ptx", name_expressions
        )
    cubin, log, lowered = _run(
        nvrtc, source, name, (*opts, f"--gpu-architecture={sm}"), "cubin", name_expressions
    )
    return CompileResult(
        ptx=ptx_text.decode("utf-8", errors="replace").rstrip("\x00"),
        cubin=cubin,
        arch=sm,
        options=opts,
        nvrtc_version=version,
        log=log,
        lowered=lowered,
    )


def compile_spec(
    spec: Any,
    arch: str = DEFAULT_ARCH,
    *,
    match_cupy: bool = True,
    ptx: bool = True,
    variant: Any = None,
) -> CompileResult:
    """Compile a KernelSpec's source with its options (see `compile_source`); `variant` (the
    ParamValues of a spec with program parameters): that compiled variant, with its defines or
    its template instance (`spec.variant_kernel`, a name expression)."""
    options = spec.options
    exprs: tuple[str, ...] = ()
    if variant:
        options = spec.variant_options(variant)
        if spec.variant_kernel(variant) != spec.kernel:
            exprs = (spec.variant_kernel(variant),)
    try:
        return compile_source(
            spec.source,
            options,
            arch,
            match_cupy=match_cupy,
            name=f"{spec.kernel}.cu",
            ptx=ptx,
            name_expressions=exprs,
        )
    except CompileError as exc:
        raise CompileError(f"kernel {spec.name!r}: {exc.args[0]}") from None


def _run(
    nvrtc: Any,
    source: str,
    name: str,
    options: Sequence[str],
    what: str,
    name_expressions: Sequence[str] = (),
) -> tuple[bytes, str, dict[str, str]]:
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, expr.encode())
            _check(nvrtc, err, "nvrtcAddNameExpression")
        raw = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(raw), raw)
        log = _log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            message = _error_string(nvrtc, err)
            if err == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
                raise CompileError(f"NVRTC rejected the options {list(options)}: {message}", log)
            raise CompileError(f"NVRTC could not compile the source to {what} ({message})", log)
        size_fn, get_fn = (
            (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
            if what == "ptx"
            else (nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        )
        err, size = size_fn(prog)
        _check(nvrtc, err, size_fn.__name__)
        buf = b" " * size
        (err,) = get_fn(prog, buf)
        _check(nvrtc, err, get_fn.__name__)
        lowered = {}
        for expr in name_expressions:
            err, low = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            _check(nvrtc, err, "nvrtcGetLoweredName")
            lowered[expr] = low.decode() if isinstance(low, bytes) else str(low)
        return buf, log, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.decode("utf-8", errors="replace").rstrip("\x00").strip()


def _error_string(nvrtc: Any, err: Any) -> str:
    try:
        _, text = nvrtc.nvrtcGetErrorString(err)
        return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # noqa: BLE001 - only used to decorate a message
        return str(err)


def _check(nvrtc: Any, err: Any, call: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{call} failed: {_error_string(nvrtc, err)}")
