"""Map SASS opcodes (sm_90 and earlier Volta+ parts) and PTX instructions to resource classes.

Every SASS opcode gets a class (what kind of work it is, the resource SAAKE models) and the
Nsight Compute pipe that executes it, so that modelled resources and measured pipe utilisation
can be compared. Sources, named per group below:

- [ISA] NVIDIA, CUDA Binary Utilities, §4 "Instruction Set Reference", Hopper (and Ampere/Ada,
  Turing) instruction-set tables: every opcode name and its description (docs.nvidia.com/cuda/
  cuda-binary-utilities/index.html#hopper-instruction-set). The class follows the table's
  section and description.
- [NCU] NVIDIA, Nsight Compute Profiling Guide, "Metrics Decoder" → "Pipelines": which pipe runs
  which instructions, e.g. "The FMA pipeline processes most FP32 arithmetic (FADD, FMUL, FMAD).
  It also performs integer multiplication operations (IMUL, IMAD), as well as integer dot
  products"; "The ALU is responsible for execution of most bit manipulation and logic
  instructions. It also executes integer instructions, excluding IMAD and IMUL. On NVIDIA Ampere
  architecture chips, the ALU pipeline performs fast FP32-to-FP16 conversion"; "The XU pipeline
  is responsible for special functions such as sin, cos, and reciprocal square root. It is also
  responsible for int-to-float, and float-to-int type conversions"; "The LSU pipeline issues
  load, store, atomic, and reduction instructions ... for global, local, and shared memory. It
  also issues special register reads (S2R), shuffles, and CTA-level arrive/wait barrier
  instructions"; "The ADU ... also provides support for constant loads and block-level barrier
  instructions"; "The CBU is responsible for warp-level convergence, barrier, and branch
  instructions"; Uniform Data Path, Tensor, TEX (texture and surface), TMA.
- [INF] inferred where neither says it; the reason is given. These are the first entries to
  re-check against `sm__inst_executed_pipe_*` counters on the H200.

An opcode missing from the table raises UnknownOpcodeError naming it (strict), or is classed
"unknown" and listed (strict=False), so a new compiler never silently changes the mix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from klaraptor.isa.errors import UnknownOpcodeError
from klaraptor.isa.sass import Instruction

TABLE_VERSION = 1

# Resource classes of SASS instructions (the values of OpClass.cls).
SASS_CLASSES = (
    "fma",  # FP32/FP16 arithmetic, integer multiply(-add), dot products: the FMA pipe
    "alu",  # integer add/logic/shift/compare, FP compare/min/max/select: the ALU pipe
    "fp64",
    "sfu",  # MUFU: transcendental / reciprocal / square-root approximations (XU pipe)
    "conversion",
    "move",
    "predicate",
    "tensor",
    "global_load",
    "global_store",
    "global_atomic",
    "local_load",
    "local_store",
    "shared_load",
    "shared_store",
    "shared_atomic",
    "constant",
    "texture",
    "tma",
    "barrier",
    "fence",
    "warp",
    "control",
    "uniform",
    "special_reg",
    "unknown",
)
MEMORY_CLASSES = frozenset(
    c for c in SASS_CLASSES if c.split("_")[0] in ("global", "local", "shared")
)


@dataclass(frozen=True)
class OpClass:
    """Class, pipe and source of one opcode."""

    cls: str
    pipe: str | None  # Nsight Compute pipe name (fma, alu, fp64, xu, lsu, adu, cbu, ...)
    source: str  # "ISA", "NCU" or "INF"
    note: str = ""


def _group(cls: str, pipe: str | None, source: str, ops: str, note: str = "") -> dict:
    return {op: OpClass(cls, pipe, source, note) for op in ops.split()}


SASS_TABLE: dict[str, OpClass] = {
    # [ISA] "Floating Point Instructions" + [NCU] FMA pipe: FP32 add/mul/fma, FP16 (FMAHeavy).
    **_group("fma", "fma", "NCU", "FADD FADD32I FFMA FFMA32I FMUL FMUL32I"),
    **_group("fma", "fma", "NCU", "HADD2 HADD2_32I HFMA2 HFMA2_32I HMUL2 HMUL2_32I"),
    # [INF] FP32 swizzle-add is an FP32 add across lanes of a quad.
    **_group("fma", "fma", "INF", "FSWZADD", "an FP32 add; assumed on the FMA pipe"),
    # [NCU] FMA pipe: "integer multiplication operations (IMUL, IMAD), as well as integer dot
    # products". IMAD.MOV / IMAD.SHL / IMAD.IADD are moves and adds the compiler routes here.
    **_group("fma", "fma", "NCU", "IMAD IMAD32I IMUL IMUL32I IDP IDP4A"),
    # [ISA] "Integer Instructions" + [NCU] ALU: "integer instructions, excluding IMAD and IMUL".
    **_group(
        "alu",
        "alu",
        "NCU",
        "IABS IADD IADD3 IADD32I IMNMX ISCADD ISCADD32I ISETP LEA LOP LOP3 LOP32I POPC FLO "
        "BREV BMSK SHF SHL SHR VABSDIFF VABSDIFF4",
    ),
    # [ISA] Hopper "SIMD Integer Addition / Minimum / Maximum" (VIADD replaces IADD3 with an
    # immediate on sm_90): integer instructions, so the ALU by [NCU]'s rule.
    **_group("alu", "alu", "NCU", "VIADD VIADDMNMX VIMNMX VIMNMX3"),
    # [INF] FP compares, min/max and selects are not FP32 arithmetic (FADD/FMUL/FMAD) that the
    # guide puts on the FMA pipe; they are logic-like and assumed on the ALU.
    **_group(
        "alu",
        "alu",
        "INF",
        "FMNMX FSEL FSET FSETP FCHK HMNMX2 HSET2 HSETP2 VHMNMX",
        "FP compare/select/min-max; pipe assumed (ALU)",
    ),
    # [ISA] FP64 + [NCU] fp64 pipe.
    **_group("fp64", "fp64", "NCU", "DADD DFMA DMUL DSETP"),
    # [ISA] MUFU "FP32 Multi Function Operation" + [NCU] XU "special functions".
    **_group("sfu", "xu", "NCU", "MUFU"),
    # [ISA] "Conversion Instructions" + [NCU] XU "int-to-float, and float-to-int".
    **_group("conversion", "xu", "NCU", "F2F F2I I2F FRND"),
    **_group("conversion", "xu", "INF", "I2I I2IP", "int-to-int conversion; assumed on the XU"),
    # [NCU] ALU "performs fast FP32-to-FP16 conversion" (F2FP packs FP32 to FP16/BF16).
    **_group("conversion", "alu", "NCU", "F2FP"),
    # [INF] the packed FP32<->int forms added with Ampere; assumed on the ALU like F2FP.
    **_group("conversion", "alu", "INF", "I2FP F2IP", "packed conversion; pipe assumed (ALU)"),
    # [ISA] "Movement Instructions"; [INF] register moves, permutes and selects on the ALU.
    **_group("move", "alu", "INF", "MOV MOV32I PRMT SEL SGXT", "pipe assumed (ALU)"),
    # [ISA] "Predicate Instructions"; [INF] predicate logic on the ALU.
    **_group("predicate", "alu", "INF", "PLOP3 PSETP P2R R2P", "pipe assumed (ALU)"),
    # [ISA] MMA instructions + [NCU] "The Tensor pipeline executes various MMA instructions".
    **_group("tensor", "tensor", "NCU", "HMMA IMMA BMMA DMMA HGMMA IGMMA QGMMA BGMMA"),
    **_group("tensor", "tensor", "INF", "WARPGROUP WARPGROUPSET MOVM", "MMA support; pipe assumed"),
    # [ISA] "Load/Store Instructions" + [NCU] LSU: global, local, shared loads/stores/atomics.
    **_group("global_load", "lsu", "NCU", "LDG LDGMC"),
    # Generic-address forms: the space is known only at run time; modelled as global.
    **_group("global_load", "lsu", "NCU", "LD", "generic address; counted as global"),
    # LDGSTS copies global → shared asynchronously; its cost is the global read.
    **_group("global_load", "lsu", "NCU", "LDGSTS", "async global→shared copy"),
    **_group("global_store", "lsu", "NCU", "STG"),
    **_group("global_store", "lsu", "NCU", "ST", "generic address; counted as global"),
    **_group("global_atomic", "lsu", "NCU", "ATOMG REDG"),
    **_group("global_atomic", "lsu", "NCU", "ATOM RED", "generic address; counted as global"),
    **_group("local_load", "lsu", "NCU", "LDL"),
    **_group("local_store", "lsu", "NCU", "STL"),
    **_group("shared_load", "lsu", "NCU", "LDS LDSM"),
    **_group("shared_store", "lsu", "NCU", "STS STSM"),
    **_group("shared_store", "lsu", "NCU", "STAS", "distributed shared memory"),
    **_group("shared_atomic", "lsu", "NCU", "ATOMS"),
    **_group("shared_atomic", "lsu", "NCU", "REDAS", "distributed shared memory"),
    # [ISA] LDC + [NCU] ADU "support for constant loads"; ULDC runs on the uniform datapath.
    **_group("constant", "adu", "NCU", "LDC"),
    **_group("constant", "uniform", "NCU", "ULDC"),
    # [ISA] "Texture Instructions", "Surface Instructions" + [NCU] TEX pipe.
    **_group("texture", "tex", "NCU", "TEX TLD TLD4 TMML TXD TXQ SULD SUST SUATOM SURED"),
    # [ISA] Hopper "Tensor Memory Access Instructions" + [NCU] TMA unit.
    **_group(
        "tma",
        "tma",
        "NCU",
        "UBLKCP UBLKPF UBLKRED UTMACCTL UTMACMDFLUSH UTMALDG UTMAPF UTMAREDG UTMASTG",
    ),
    # [ISA] BAR "Barrier Synchronization" + [NCU] ADU "block-level barrier instructions".
    **_group("barrier", "adu", "NCU", "BAR B2R"),
    # [NCU] LSU "CTA-level arrive/wait barrier instructions": the Hopper sync unit (mbarrier).
    **_group("barrier", "lsu", "NCU", "SYNCS"),
    **_group("barrier", "uniform", "ISA", "UCGABAR_ARV UCGABAR_WAIT", "cluster barrier"),
    # [ISA] dependency barriers: waits on scoreboards / async copies, no pipe of their own.
    **_group("barrier", None, "ISA", "DEPBAR LDGDEPBAR ACQBULK"),
    # [ISA] memory ordering and cache control ("Memory Barrier", "Cache Control", ...).
    **_group(
        "fence",
        "lsu",
        "INF",
        "MEMBAR FENCE ERRBAR CGAERRBAR CCTL CCTLL CCTLT QSPC",
        "memory ordering / cache control acts in the memory pipeline; pipe assumed (LSU)",
    ),
    # [ISA] warp-wide data exchange; [NCU] LSU issues shuffles.
    **_group("warp", "lsu", "NCU", "SHFL"),
    **_group("warp", "alu", "INF", "VOTE MATCH ELECT", "warp vote/match; pipe assumed (ALU)"),
    **_group("warp", "uniform", "ISA", "VOTEU REDUX", "results in a uniform register"),
    # [ISA] "Control Instructions" + [NCU] CBU "warp-level convergence, barrier, and branch".
    **_group(
        "control",
        "cbu",
        "NCU",
        "BRA BRX BRXU JMP JMX JMXU CALL RET EXIT BSSY BSYNC BREAK BMOV WARPSYNC KILL BPT "
        "RPCMOV RTT PREEXIT ENDCOLLECTIVE",
    ),
    **_group("control", None, "ISA", "NOP YIELD NANOSLEEP PMTRIG"),
    # [ISA] "Uniform Datapath Instructions" + [NCU] Uniform Data Path.
    **_group(
        "uniform",
        "uniform",
        "NCU",
        "R2UR UBMSK UBREV UCLEA UF2FP UFLO UIADD3 UIMAD UISETP ULEA ULOP ULOP3 ULOP32I UMOV "
        "UP2UR UPLOP3 UPOPC UPRMT UPSETP UR2UP USEL USGXT USHF USHL USHR USETMAXREG ULEPC",
    ),
    # [ISA] special registers: S2R via the LSU [NCU]; S2UR on the uniform datapath.
    **_group("special_reg", "lsu", "NCU", "S2R"),
    **_group("special_reg", "uniform", "NCU", "S2UR"),
    **_group(
        "special_reg",
        "alu",
        "INF",
        "CS2R GETLMEMBASE SETLMEMBASE LEPC SETCTAID",
        "fast special-register moves; pipe assumed (ALU)",
    ),
}

_UNKNOWN = OpClass("unknown", None, "none", "not in the table")


def sass_class(ins: Instruction) -> OpClass | None:
    """The class of one instruction (None when its opcode is not in the table)."""
    if ins.opcode == "CS2R" and any(o == "SRZ" for o in ins.operands):
        return OpClass("move", "alu", "INF", "CS2R Rd, SRZ zeroes a register pair")
    return SASS_TABLE.get(ins.opcode)


def classify_sass(
    instructions: Sequence[Instruction], kernel: str, *, strict: bool = True
) -> tuple[list[OpClass], list[str]]:
    """Classes of the instructions, and the sorted unknown opcodes (raised when strict)."""
    classes: list[OpClass] = []
    unknown: set[str] = set()
    for ins in instructions:
        c = sass_class(ins)
        if c is None:
            unknown.add(ins.opcode)
            c = _UNKNOWN
        classes.append(c)
    if unknown and strict:
        raise UnknownOpcodeError(sorted(unknown), kernel, "SASS")
    return classes, sorted(unknown)


# ---------------------------------------------------------------------------------------------
# PTX (for SNOWPACK's instruction mix). Source: NVIDIA PTX ISA, §9.7 "Instructions", whose
# sections give the groups below (integer / floating-point arithmetic, comparison and
# selection, logic and shift, data movement and conversion, control flow, parallel
# synchronisation and communication, warp-level matrix, texture/surface).

PTX_CLASSES = (
    "load",
    "store",
    "atomic",
    "async_copy",
    "add",
    "sub",
    "mul",
    "mad",
    "div",
    "rem",
    "minmax",
    "abs_neg",
    "logic",
    "shift",
    "bit",
    "compare",
    "select",
    "convert",
    "move",
    "special",
    "sfu",
    "branch",
    "call",
    "return",
    "barrier",
    "fence",
    "warp",
    "texture",
    "tensor",
    "other",
    "unknown",
)

_PTX_OPS: dict[str, str] = {
    **dict.fromkeys("ld ldu ldmatrix prefetch prefetchu".split(), "load"),
    **dict.fromkeys("st stmatrix st.async".split(), "store"),
    **dict.fromkeys("atom red red.async".split(), "atomic"),
    **dict.fromkeys(
        "cp.async cp.async.bulk cp.async.bulk.tensor cp.reduce.async.bulk".split(), "async_copy"
    ),
    **dict.fromkeys("add addc".split(), "add"),
    **dict.fromkeys("sub subc".split(), "sub"),
    **dict.fromkeys("mul mul24".split(), "mul"),
    **dict.fromkeys("mad mad24 madc fma sad dp4a dp2a".split(), "mad"),
    "div": "div",
    "rem": "rem",
    **dict.fromkeys("min max".split(), "minmax"),
    **dict.fromkeys("abs neg copysign".split(), "abs_neg"),
    **dict.fromkeys("and or xor not cnot lop3".split(), "logic"),
    **dict.fromkeys("shl shr shf".split(), "shift"),
    **dict.fromkeys("popc clz bfind fns brev bfe bfi bmsk szext prmt".split(), "bit"),
    **dict.fromkeys("setp set testp isspacep".split(), "compare"),
    **dict.fromkeys("selp slct".split(), "select"),
    **dict.fromkeys("cvt cvta cvt.pack mapa getctarank".split(), "convert"),
    "mov": "move",
    # Approximate forms are one MUFU; IEEE-rounded rcp/sqrt are a MUFU seed plus Newton steps.
    **dict.fromkeys("rcp sqrt rsqrt sin cos lg2 ex2 tanh".split(), "sfu"),
    **dict.fromkeys("bra brx call".split(), "branch"),
    **dict.fromkeys("ret exit trap brkpt".split(), "return"),
    **dict.fromkeys("bar barrier mbarrier elect".split(), "barrier"),
    **dict.fromkeys("membar fence".split(), "fence"),
    **dict.fromkeys("shfl vote match redux activemask".split(), "warp"),
    **dict.fromkeys("tex tld4 txq suld sust sured suq".split(), "texture"),
    **dict.fromkeys("mma wmma wgmma".split(), "tensor"),
    **dict.fromkeys(
        "nanosleep pmevent griddepcontrol setmaxnreg discard applypriority".split(), "other"
    ),
}
_PTX_OPS["call"] = "call"

# PTX state spaces of ld/st/atom/red (no space = generic addressing).
PTX_SPACES = ("global", "shared", "local", "const", "param", "generic")
_SPECIAL_REG = re.compile(
    r"%(tid|ntid|ctaid|nctaid|laneid|warpid|nwarpid|smid|nsmid|gridid|clock|clock64|"
    r"globaltimer|lanemask_\w+|dynamic_smem_size|total_smem_size|cluster\w*|envreg\d+)\b"
)
_TYPE = re.compile(r"^(?:[sub](?:8|16|32|64|128)|f(?:16|32|64)(?:x2)?|bf16(?:x2)?|tf32|pred)$")


def ptx_dtype(mods: Sequence[str], op: str) -> str | None:
    """Type family of a PTX instruction: int, f16, f32, f64, bits, pred (None: untyped)."""
    types = [m for m in mods if _TYPE.match(m)]
    if not types:
        return None
    t = types[0] if op == "cvt" else types[-1]
    if t.startswith(("f16", "bf16")):
        return "f16"
    if t in ("f32", "tf32"):
        return "f32"
    if t == "f64":
        return "f64"
    if t == "pred":
        return "pred"
    if t[0] in "su":
        return "int"
    return "bits"


def ptx_space(op: str, mods: Sequence[str]) -> str | None:
    """State space of a memory instruction ("generic" when none is named), else None."""
    if op not in (
        "ld",
        "ldu",
        "st",
        "atom",
        "red",
        "prefetch",
        "prefetchu",
        "ldmatrix",
        "stmatrix",
    ):
        return None
    for m in mods:
        base = m.split("::")[0]
        if base in PTX_SPACES:
            return base
    return "shared" if op in ("ldmatrix", "stmatrix") else "generic"


def ptx_class(op: str, mods: Sequence[str], operands: Iterable[str]) -> str | None:
    """The class of one PTX instruction (None when the opcode is unknown)."""
    dotted = ".".join((op, *mods[:1])) if mods else op
    cls = _PTX_OPS.get(dotted) or _PTX_OPS.get(op)
    if cls is None:
        return None
    if cls == "move" and any(_SPECIAL_REG.search(o) for o in operands):
        return "special"
    if cls == "branch" and op == "call":
        return "call"
    if op in ("bar", "barrier") and tuple(mods[:1]) == ("warp",):
        return "warp"
    return cls
