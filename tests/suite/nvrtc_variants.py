"""Compile one variant of a parameterised KernelSpec with NVRTC on the CPU (the isa extra), as
CuPy would on the GPU machine (the spec's options with the variant's defines, CuPy's additions,
the template instance as a name expression), and read its resource usage with cuobjdump."""

from __future__ import annotations

from klaraptor.core.errors import CompileError
from klaraptor.core.types import ParamStyle, ParamValues
from klaraptor.isa import compile as isa_compile
from klaraptor.isa import sass, tools
from klaraptor.spec import KernelSpec


def compile_variant(spec: KernelSpec, pv: ParamValues, arch: str = "sm_90") -> dict[str, int]:
    """`cuobjdump -res-usage` figures (REG, SHARED, LOCAL, STACK, ...) of the variant's kernel."""
    nvrtc = isa_compile.nvrtc_module()
    options = isa_compile.effective_options(spec.variant_options(pv))
    expr = spec.variant_kernel(pv) if spec.param_style is ParamStyle.TEMPLATE else None
    err, prog = nvrtc.nvrtcCreateProgram(spec.source.encode(), b"variant.cu", 0, [], [])
    try:
        if expr:
            nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        raw = [o.encode() for o in (*options, f"--gpu-architecture={arch}")]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(raw), raw)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise CompileError(f"{spec.name} {pv}: {log.decode(errors='replace')[:3000]}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        name = spec.kernel
        if expr:
            _, lowered = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            name = lowered.decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    usage = sass.parse_res_usage(tools.run_cuobjdump(cubin, ["-res-usage"]))
    if name not in usage:
        raise CompileError(f"{spec.name} {pv}: no function {name} in {sorted(usage)}")
    return usage[name]
