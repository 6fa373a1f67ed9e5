"""Basic blocks, natural loops and loop depth on kernels with known loop structure."""

from __future__ import annotations

import pytest

from klaraptor.isa.cfg import Flow, build_cfg, ptx_cfg, sass_cfg
from klaraptor.isa.ptx import parse_ptx
from klaraptor.isa.sass import parse_sass
from tests.isa.helpers import fixture_text


@pytest.fixture(scope="module")
def loops_sass():
    return parse_sass(fixture_text("loops.sass"))


def depth_at(fn, g, addr):
    return g.instr_depth[fn.index_of(addr)]


def test_two_nested_loops(loops_sass):
    fn = loops_sass["nested"]
    g = sass_cfg(fn)
    assert len(g.loops) == 2 and g.max_depth == 2
    headers = sorted(g.blocks[lp.header].start for lp in g.loops)
    assert [fn.instructions[i].addr for i in headers] == [0xE0, 0x170]
    inner = next(lp for lp in g.loops if fn.instructions[g.blocks[lp.header].start].addr == 0x170)
    assert inner.depth == 2 and inner.parent is not None
    assert depth_at(fn, g, 0x180) == 2  # the LDG of the inner loop
    assert depth_at(fn, g, 0x1F0) == 1  # acc *= 0.5 in the outer loop
    assert depth_at(fn, g, 0x230) == 0  # the final store
    s = g.summary()
    assert s["nested_loops"] and s["loops"] == 2 and s["irreducible_edges"] == 0


def test_no_loop_and_unreachable_padding(loops_sass):
    fn = loops_sass["straight"]
    g = sass_cfg(fn)
    assert g.loops == [] and g.max_depth == 0
    # The trailing `BRA self` is a cycle, but no routine reaches it: not a loop.
    pad = g.blocks[g.block_of[fn.index_of(0x120)]]
    assert pad.root is None and pad.succs == [pad.index]
    # @P0 EXIT ends a block with a fall-through edge.
    exit_block = g.blocks[g.block_of[fn.index_of(0x70)]]
    assert exit_block.succs == [exit_block.index + 1]


def test_ptx_loops_match():
    funcs = parse_ptx(fixture_text("loops.ptx"))
    nested, straight = ptx_cfg(funcs["nested"]), ptx_cfg(funcs["straight"])
    assert len(nested.loops) == 2 and nested.max_depth == 2
    assert straight.loops == [] and straight.max_depth == 0
    loads = [
        nested.instr_depth[i]
        for i, ins in enumerate(funcs["nested"].instructions)
        if ins.op == "ld" and "global" in ins.mods
    ]
    assert loads == [2]


def test_subroutine_called_inside_a_loop():
    fn = parse_sass(fixture_text("widths.sass"))["widths"]
    g = sass_cfg(fn)
    helper = g.block_of[fn.index_of(0x640)]
    assert g.roots == [0, helper]
    assert [(g.blocks[c].root, callee) for c, callee in g.calls] == [(0, helper)]
    assert depth_at(fn, g, 0x1C0) == 1  # STL in the local-array loop
    assert depth_at(fn, g, 0x2D0) == 1  # the CALL, inside the r-loop
    assert depth_at(fn, g, 0x640) == 1  # helper entry: call-site depth
    assert depth_at(fn, g, 0x6D0) == 2  # helper's LDG: its own loop + the call site's
    assert not g.recursive


def test_gemm_unrolled_loops():
    fn = parse_sass(fixture_text("gemm.sass"))["gemm"]
    g = sass_cfg(fn)
    # One source loop: ptxas' unrolled main loop and two remainder loops, none nested.
    assert len(g.loops) == 3 and g.max_depth == 1
    assert not g.summary()["nested_loops"]
    ptx = ptx_cfg(parse_ptx(fixture_text("gemm.ptx"))["gemm"])
    assert len(ptx.loops) == 2 and ptx.max_depth == 1


def test_irreducible_cycle_gets_no_loop():
    # A → B, A → C, B → C, C → B: the cycle {B, C} has two entries.
    flows = [
        Flow("branch", 2, conditional=True),
        Flow(),
        Flow("branch", 1, conditional=True),
        Flow("exit"),
    ]
    g = build_cfg(flows)
    assert g.loops == [] and len(g.irreducible) == 1
    assert g.max_depth == 0


def test_self_loop_and_recursion():
    g = build_cfg([Flow(), Flow("branch", 1, conditional=True), Flow("exit")])
    assert len(g.loops) == 1 and g.instr_depth == [0, 1, 0]
    # A subroutine that calls itself from inside its own loop: depths would grow forever.
    flows = [
        Flow("call", 3),
        Flow("exit"),
        Flow(),
        Flow(),
        Flow("call", 3),
        Flow("branch", 3, conditional=True),
        Flow("return"),
    ]
    g = build_cfg(flows)
    assert g.recursive and len(g.roots) == 2


def test_indirect_branch_is_unresolved():
    g = build_cfg([Flow(), Flow("indirect"), Flow("exit")])
    assert g.unresolved == [1]
    assert g.blocks[g.block_of[2]].root is None
