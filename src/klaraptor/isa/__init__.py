"""Static analysis of CUDA kernels: NVRTC → PTX and SASS, instruction classes, CFG and loops.

The shared foundation of the SAAKE emulator (instruction stream, resource classes, register
dependences, control codes, loop depths) and the SNOWPACK learner (static features).

>>> from klaraptor.isa import analyze          # needs the `isa` extra (NVRTC + cuobjdump)
>>> from klaraptor.isa import load_recorded    # the recorded sm_90 analyses, on any CPU
"""

from __future__ import annotations

from klaraptor.isa.analysis import (
    FEATURE_VERSION,
    KernelISA,
    analyze,
    feature_names,
    load_recorded,
    load_recorded_raw,
    recorded_path,
)
from klaraptor.isa.cfg import CFG, Block, Loop, build_cfg, ptx_cfg, sass_cfg
from klaraptor.isa.classify import (
    MEMORY_CLASSES,
    PTX_CLASSES,
    SASS_CLASSES,
    SASS_TABLE,
    OpClass,
    classify_sass,
    ptx_class,
    sass_class,
)
from klaraptor.isa.compile import CompileResult, compile_source, compile_spec, nvrtc_version
from klaraptor.isa.errors import DisassemblyError, ToolMissingError, UnknownOpcodeError
from klaraptor.isa.ptx import PtxFunction, PtxInstruction, parse_ptx
from klaraptor.isa.sass import Control, Instruction, SassFunction, parse_res_usage, parse_sass
from klaraptor.isa.tools import find_tool, run_cuobjdump

__all__ = [
    "CFG",
    "FEATURE_VERSION",
    "MEMORY_CLASSES",
    "PTX_CLASSES",
    "SASS_CLASSES",
    "SASS_TABLE",
    "Block",
    "CompileResult",
    "Control",
    "DisassemblyError",
    "Instruction",
    "KernelISA",
    "Loop",
    "OpClass",
    "PtxFunction",
    "PtxInstruction",
    "SassFunction",
    "ToolMissingError",
    "UnknownOpcodeError",
    "analyze",
    "build_cfg",
    "classify_sass",
    "compile_source",
    "compile_spec",
    "feature_names",
    "find_tool",
    "load_recorded",
    "load_recorded_raw",
    "nvrtc_version",
    "parse_ptx",
    "parse_res_usage",
    "parse_sass",
    "ptx_cfg",
    "ptx_class",
    "recorded_path",
    "run_cuobjdump",
    "sass_cfg",
    "sass_class",
]
