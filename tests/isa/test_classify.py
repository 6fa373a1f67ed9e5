"""SASS/PTX classification: the tables, every suite opcode, unknown opcodes, the PTX mix."""

from __future__ import annotations

import pytest

from klaraptor.isa import analysis
from klaraptor.isa.classify import (
    PTX_CLASSES,
    SASS_CLASSES,
    SASS_TABLE,
    classify_sass,
    ptx_class,
    ptx_dtype,
    ptx_space,
    sass_class,
)
from klaraptor.isa.errors import UnknownOpcodeError
from klaraptor.isa.ptx import parse_ptx
from klaraptor.isa.sass import Control, parse_instruction, parse_sass
from tests.isa.helpers import fixture_text

CTRL = Control.from_code(0x7E0)


def cls_of(text):
    c = sass_class(parse_instruction(0, text, CTRL))
    return None if c is None else (c.cls, c.pipe)


def test_table_entries_are_well_formed():
    assert len(SASS_TABLE) > 150
    for op, c in SASS_TABLE.items():
        assert op.isupper() or "_" in op, op
        assert c.cls in SASS_CLASSES, (op, c.cls)
        assert c.source in ("ISA", "NCU", "INF"), op
        if c.source == "INF":
            assert c.note, f"{op}: an inferred entry must say why"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("FFMA.FTZ R4, R2, R9, R13", ("fma", "fma")),
        ("IMAD.WIDE R8, R2, 0x8, R8", ("fma", "fma")),
        ("HFMA2.MMA R9, -RZ, RZ, 2, 0", ("fma", "fma")),
        ("IADD3 R2, R0, -0x1, RZ", ("alu", "alu")),
        ("ISETP.GE.AND P0, PT, R7, UR4, PT", ("alu", "alu")),
        ("DFMA R10, R10, 3, R12", ("fp64", "fp64")),
        ("MUFU.RSQ R3, R0", ("sfu", "xu")),
        ("F2I.FTZ.TRUNC.NTZ R4, R7", ("conversion", "xu")),
        ("LDG.E.CONSTANT R2, desc[UR4][R2.64]", ("global_load", "lsu")),
        ("STG.E desc[UR4][R4.64], R7", ("global_store", "lsu")),
        ("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R4.64], R25", ("global_atomic", "lsu")),
        ("LDL R0, [R0]", ("local_load", "lsu")),
        ("STS [R0+UR4], R25", ("shared_store", "lsu")),
        ("ATOMS.POPC.INC.32 RZ, [R9+URZ]", ("shared_atomic", "lsu")),
        ("LDC.64 R2, c[0x0][0x210]", ("constant", "adu")),
        ("ULDC.64 UR4, c[0x0][0x208]", ("constant", "uniform")),
        ("BAR.SYNC.DEFER_BLOCKING 0x0", ("barrier", "adu")),
        ("SHFL.BFLY PT, R0, R7, 0x1, 0x1f", ("warp", "lsu")),
        ("@P0 BRA 0x1f0", ("control", "cbu")),
        ("BSSY B0, 0x320", ("control", "cbu")),
        ("UIADD3 UR4, UR4, 0x1, URZ", ("uniform", "uniform")),
        ("S2R R3, SR_TID.X", ("special_reg", "lsu")),
        ("CS2R R4, SRZ", ("move", "alu")),
        ("CS2R R2, SR_CLOCKLO", ("special_reg", "alu")),
        ("HMMA.16816.F32 R4, R8, R12, R4", ("tensor", "tensor")),
        ("NOP", ("control", None)),
    ],
)
def test_known_classes(text, expected):
    assert cls_of(text) == expected


def _recorded():
    return analysis.load_recorded_raw()["kernels"]


def test_every_recorded_suite_opcode_is_classified():
    """A compiler or kernel that brings a new opcode fails here, not in a build."""
    missing: dict[str, set[str]] = {}
    for name, d in _recorded().items():
        for addr, text, code in d["sass"]:
            ins = parse_instruction(addr, text, Control.from_code(code))
            if sass_class(ins) is None:
                missing.setdefault(ins.opcode, set()).add(name)
    assert not missing, f"unclassified SASS opcodes (add them to classify.py): {missing}"


def test_every_recorded_suite_ptx_op_is_classified():
    missing: dict[str, set[str]] = {}
    for name, d in _recorded().items():
        for fn in parse_ptx(d["ptx"]).values():
            for ins in fn.instructions:
                if ptx_class(ins.op, ins.mods, ins.operands) is None:
                    missing.setdefault(ins.op, set()).add(name)
    assert not missing, f"unclassified PTX opcodes (add them to classify.py): {missing}"


def test_unknown_opcode_strict_and_degraded():
    fn = parse_sass(fixture_text("loops.sass"))["straight"]
    bogus = parse_instruction(0x200, "FROBNICATE.X R4, R5", CTRL)
    instructions = [*fn.instructions, bogus]
    with pytest.raises(
        UnknownOpcodeError, match=r"FROBNICATE.*kernel 'demo.k'|kernel 'demo.k'.*FROBNICATE"
    ) as exc:
        classify_sass(instructions, "demo.k")
    assert exc.value.opcodes == ["FROBNICATE"] and exc.value.kernel == "demo.k"
    assert "strict=False" in str(exc.value)
    classes, unknown = classify_sass(instructions, "demo.k", strict=False)
    assert unknown == ["FROBNICATE"]
    assert classes[-1].cls == "unknown" and classes[0].cls == "constant"


def test_unknown_opcode_in_a_record_degrades_with_a_warning():
    d = dict(_recorded()["polybench.gemm.gemm"])
    sass = [list(row) for row in d["sass"]]
    sass[5][1] = "FROBNICATE R4, R5"
    d["sass"] = sass
    with pytest.raises(UnknownOpcodeError, match="FROBNICATE"):
        analysis.KernelISA.from_dict(d, strict=True)
    isa = analysis.KernelISA.from_dict(d, strict=False)
    assert isa.unknown_sass == ["FROBNICATE"]
    assert any("FROBNICATE" in w for w in isa.warnings)
    assert isa.features["sass_unknown"] == 1.0
    assert isa.features["sass_total"] > 100


@pytest.mark.parametrize(
    "stmt, cls, space, dtype",
    [
        ("ld.global.nc.f32 %f1, [%rd4]", "load", "global", "f32"),
        ("ld.param.u64 %rd1, [k_param_0]", "load", "param", "int"),
        ("ld.f32 %f1, [%rd4]", "load", "generic", "f32"),
        ("st.shared.f32 [%r10], %f8", "store", "shared", "f32"),
        ("atom.global.add.f32 %f16, [%rd8], %f8", "atomic", "global", "f32"),
        ("mov.u32 %r4, %tid.x", "special", None, "int"),
        ("mov.f32 %f24, 0f00000000", "move", None, "f32"),
        ("sin.approx.ftz.f32 %f10, %f8", "sfu", None, "f32"),
        ("sqrt.rn.ftz.f32 %f12, %f8", "sfu", None, "f32"),
        ("div.rn.ftz.f32 %f13, %f12, %f8", "div", None, "f32"),
        ("fma.rn.ftz.f32 %f13, %f12, %f12, %f24", "mad", None, "f32"),
        ("mul.wide.s32 %rd3, %r5, 4", "mul", None, "int"),
        ("add.f64 %fd1, %fd2, %fd3", "add", None, "f64"),
        ("setp.lt.s32 %p1, %r10, 1", "compare", None, "int"),
        ("cvt.rn.f32.s32 %f1, %r1", "convert", None, "f32"),
        ("bar.sync 0", "barrier", None, None),
        ("bar.warp.sync -1", "warp", None, None),
        ("shfl.sync.bfly.b32 %r17|%p1, %r14, %r6, %r15, %r16", "warp", None, "bits"),
        ("@%p1 bra $L__BB0_7", "branch", None, None),
        ("ret", "return", None, None),
    ],
)
def test_ptx_classes(stmt, cls, space, dtype):
    src = f".visible .entry k()\n{{\n\t{stmt};\n}}\n"
    ins = parse_ptx(src)["k"].instructions[0]
    assert ptx_class(ins.op, ins.mods, ins.operands) == cls
    assert cls in PTX_CLASSES
    assert ptx_space(ins.op, ins.mods) == space
    assert ptx_dtype(ins.mods, ins.op) == dtype


def test_unknown_ptx_op_is_none():
    assert ptx_class("frobnicate", ("f32",), ()) is None
