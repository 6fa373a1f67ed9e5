"""SASS parsing and control-code decoding on committed cuobjdump output (tests/data/isa)."""

from __future__ import annotations

import pytest

from klaraptor.isa.errors import DisassemblyError
from klaraptor.isa.sass import (
    Control,
    parse_instruction,
    parse_res_usage,
    parse_sass,
    resources,
)
from tests.isa.helpers import fixture_text


@pytest.fixture(scope="module")
def widths():
    return parse_sass(fixture_text("widths.sass"))["widths"]


@pytest.fixture(scope="module")
def loops():
    return parse_sass(fixture_text("loops.sass"))


def by_text(fn, text):
    hits = [ins for ins in fn.instructions if ins.text == text]
    assert len(hits) == 1, f"{text!r} occurs {len(hits)} times"
    return hits[0]


def test_functions_and_addresses(loops):
    assert set(loops) == {"nested", "straight"}
    straight = loops["straight"].instructions
    assert [i.addr for i in straight[:3]] == [0x0, 0x10, 0x20]
    assert all(b.addr - a.addr == 16 for a, b in zip(straight, straight[1:]))
    assert straight[0].text == "LDC R1, c[0x0][0x28]"


def test_guard_opcode_modifiers_and_target(loops):
    nested = loops["nested"]
    bra = nested.instructions[nested.index_of(0x1E0)]
    assert (bra.opcode, bra.pred, bra.pred_neg, bra.target) == ("BRA", "P0", True, 0x170)
    assert bra.src == ("P0",) and bra.dst == ()
    exit_ = loops["straight"].instructions[loops["straight"].index_of(0x70)]
    assert (exit_.opcode, exit_.pred, exit_.pred_neg, exit_.guarded) == ("EXIT", "P0", False, True)
    ld = nested.instructions[nested.index_of(0x180)]
    assert ld.opcode == "LDG" and ld.mods == ("E", "CONSTANT")
    assert ld.mem == "desc[UR6][R2.64]" and ld.space == "global"
    assert ld.dst == ("R2",) and set(ld.src) == {"UR6", "R2", "R3"}


def test_register_widths(widths):
    assert by_text(widths, "LDG.E.128.CONSTANT R4, desc[UR6][R4.64]").dst == (
        "R4",
        "R5",
        "R6",
        "R7",
    )
    assert by_text(widths, "LDG.E.64.CONSTANT R10, desc[UR6][R8.64]").dst == ("R10", "R11")
    dfma = by_text(widths, "DFMA R10, R10, 3, R12")
    assert dfma.dst == ("R10", "R11") and dfma.src == ("R10", "R11", "R12", "R13")
    wide = by_text(widths, "IMAD.WIDE R8, R2, 0x8, R8")
    assert wide.dst == ("R8", "R9") and wide.src == ("R2", "R8", "R9")
    f2f = by_text(widths, "F2F.F32.F64 R13, R10")
    assert f2f.dst == ("R13",) and f2f.src == ("R10", "R11")
    dsetp = by_text(widths, "DSETP.GEU.AND P0, PT, |R10|, UR4, PT")
    assert dsetp.dst == ("P0",) and dsetp.src == ("R10", "R11", "UR4", "UR5")
    assert by_text(widths, "LDC.64 R8, c[0x0][0x218]").dst == ("R8", "R9")
    assert by_text(widths, "ULDC.64 UR6, c[0x0][0x208]").dst == ("UR6", "UR7")


def test_destinations_and_sources(widths):
    atom = by_text(widths, "@P0 ATOMG.E.ADD.STRONG.GPU PT, R13, desc[UR6][R4.64], R13")
    assert atom.dst == ("R13",) and set(atom.src) == {"P0", "UR6", "R4", "R5", "R13"}
    assert atom.space == "global"
    shfl = by_text(widths, "SHFL.BFLY PT, R0, R7, 0x1, 0x1f")
    assert shfl.dst == ("R0",) and shfl.src == ("R7",)
    vote = by_text(widths, "VOTE.ANY R5, PT, P0")
    assert vote.dst == ("R5",) and vote.src == ("P0",)
    lea = by_text(widths, "LEA R4, P0, R2, UR4, 0x2")
    assert lea.dst == ("R4", "P0") and lea.src == ("R2", "UR4")
    leax = by_text(widths, "LEA.HI.X R5, R2, UR5, R3, 0x2, P0")
    assert leax.dst == ("R5",) and leax.src == ("R2", "UR5", "R3", "P0")
    stg = by_text(widths, "STG.E desc[UR6][R4.64], R7")
    assert stg.dst == () and set(stg.src) == {"UR6", "R4", "R5", "R7"} and stg.is_store
    stl = by_text(widths, "STL [R0], R9")
    assert stl.space == "local" and stl.src == ("R0", "R9")
    assert by_text(widths, "LDL R0, [R0]").space == "local"
    assert by_text(widths, "LDS R11, [R11]").space == "shared"
    # RZ / URZ / PT are constants, never dependences.
    assert by_text(widths, "ATOMS.POPC.INC.32 RZ, [R9+URZ]").dst == ()
    ret = by_text(widths, "RET.REL.NODEC R4 0x0")
    assert ret.dst == () and ret.src == ("R4",)
    call = by_text(widths, "CALL.REL.NOINC 0x640")
    assert call.target == 0x640


def test_control_word_fields():
    # LDC R1 (no scoreboard) and the IMAD that waits on scoreboard 0, from the gemm fixture.
    c = Control.from_word(0x000FE20000000800)
    assert (c.stall, c.yield_bit, c.write_sb, c.read_sb, c.wait_mask, c.reuse) == (
        1,
        1,
        None,
        None,
        0,
        0,
    )
    c = Control.from_word(0x001FCA000F8E0204)
    assert (c.stall, c.yield_bit, c.wait_mask, c.waits_on) == (5, 0, 1, (0,))
    assert str(c) == "----:B0-----:R-:W-:Y:S05"
    for code in (0, 0x7E0, 0x1FFFFF, 0x12345):
        assert Control.from_code(code).code == code


def test_load_sets_a_scoreboard_its_consumer_waits_on():
    fn = parse_sass(fixture_text("gemm.sass"))["gemm"]
    ins = fn.instructions
    # S2R R3 (ctaid.y) and S2R R4 (tid.y) set SB0; IMAD R3, R3, UR5, R4 waits on SB0 only.
    s2r = by_text(fn, "S2R R3, SR_CTAID.Y")
    assert s2r.ctrl.write_sb == 0
    imad = by_text(fn, "IMAD R3, R3, UR5, R4")
    assert imad.ctrl.waits_on == (0,)
    # Every LDG sets a write scoreboard; the first FFMA reading its register waits on it.
    checked = 0
    for i, ld in enumerate(ins):
        if ld.opcode != "LDG":
            continue
        sb = ld.ctrl.write_sb
        assert sb is not None, ld.text
        waited = False
        for use in ins[i + 1 :]:
            waited |= bool(use.ctrl.wait_mask >> sb & 1)
            if set(ld.dst) & set(use.src):
                assert waited, f"{use.text} reads {ld.dst} before waiting on SB{sb}"
                checked += use.opcode == "FFMA"
                break
            if use.opcode in ("BRA", "EXIT"):
                break
    assert checked >= 10


@pytest.mark.parametrize("fixture", ["gemm.sass", "widths.sass", "loops.sass"])
def test_write_scoreboards_are_waited_on_before_use(fixture):
    """Bit layout check over whole functions: no straight-line reader of a variable-latency
    result (or writer of the same register) runs before waiting on its write scoreboard."""
    n = 0
    for fn in parse_sass(fixture_text(fixture)).values():
        ins = fn.instructions
        for i, producer in enumerate(ins):
            sb = producer.ctrl.write_sb
            if sb is None or not producer.dst:
                continue
            waited = False
            for use in ins[i + 1 :]:
                if use.opcode in ("BRA", "EXIT", "CALL", "RET") or use.target is not None:
                    break
                waited |= bool(use.ctrl.wait_mask >> sb & 1)
                if set(producer.dst) & (set(use.src) | set(use.dst)):
                    assert waited, f"{use.text} before SB{sb} of {producer.text}"
                    n += 1
                    break
    assert n > 5


def test_reuse_flags_follow_source_slots():
    fn = parse_sass(fixture_text("gemm.sass"))["gemm"]
    a = by_text(fn, "IADD3 R2, R0.reuse, -0x1, RZ")
    assert a.ctrl.reuse == 0b001  # slot A
    b = by_text(fn, "IADD3 R2, -R7, R0.reuse, RZ")
    assert b.ctrl.reuse == 0b010  # slot B
    assert by_text(fn, "LDC R1, c[0x0][0x28]").ctrl.reuse == 0


def test_res_usage():
    usage = parse_res_usage(fixture_text("widths.res"))
    assert usage["widths"]["REG"] == 16 and usage["widths"]["STACK"] == 64
    r = resources(usage["widths"])
    assert r["registers"] == 16 and r["stack_bytes"] == 64 and r["shared_bytes"] == 1152
    assert r["constant_bytes"] == 564
    assert set(parse_res_usage(fixture_text("loops.res"))) == {"nested", "straight"}


def test_truncated_output_is_an_error():
    lines = fixture_text("loops.sass").splitlines()
    # Cut after the first word of the first instruction.
    first = next(i for i, ln in enumerate(lines) if "/*0000*/" in ln)
    with pytest.raises(DisassemblyError, match="second encoding word"):
        parse_sass("\n".join(lines[: first + 1]))
    with pytest.raises(DisassemblyError, match="before any 'Function"):
        parse_sass(lines[first] + "\n" + lines[first + 1])


def test_instruction_text_round_trip():
    for fn in parse_sass(fixture_text("widths.sass")).values():
        for ins in fn.instructions:
            again = parse_instruction(ins.addr, ins.text, ins.ctrl)
            assert again == ins


def test_predicates_are_single_bits_in_wide_instructions():
    ins = parse_instruction(0, "DSETP.GT.AND P0, PT, R2, R4, P1", Control.from_code(0x7E0))
    assert ins.dst == ("P0",) and ins.src == ("R2", "R3", "R4", "R5", "P1")
    p2r = parse_instruction(0, "P2R R3, PR, RZ, 0x1", Control.from_code(0x7E0))
    assert p2r.dst == ("R3",) and p2r.src == tuple(f"P{i}" for i in range(7))
