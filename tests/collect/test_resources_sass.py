"""The resource microbenchmarks compile for sm_90 (NVRTC, no GPU needed) to the intended SASS.

Each chain kernel is compiled with U1 and U2 steps per loop iteration; the analysis divides the
difference in cycles by the difference in instructions, so the test checks exactly that: going
from U1 to U2 steps adds (U2 - U1) x chains x the step's instructions (FFMA, DFMA, MUFU.EX2, ...)
and nothing else. Skipped when NVRTC (cuda-bindings + nvidia-cuda-nvrtc) or cuobjdump/nvdisasm
is not installed (pip install 'cuda-bindings==13.0.*' 'nvidia-cuda-nvrtc==13.0.*'
nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from klaraptor.collect import resources as rs
from klaraptor.isa.analysis import disassemble
from klaraptor.isa.compile import compile_source
from klaraptor.isa.errors import ToolMissingError

ARCH = "sm_90"


def opcode(instruction: str) -> str:
    """The opcode with its modifiers (`MUFU.EX2`, `LDG.E.STRONG.GPU`), predicate dropped."""
    text = instruction.strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1]
    return text.split(None, 1)[0]


def opcode_counts(instructions: list[str]) -> Counter[str]:
    return Counter(opcode(i) for i in instructions)


@pytest.fixture(scope="module")
def disasm() -> dict[int, dict[str, list[str]]]:
    """Per unroll: kernel -> instruction texts, compiled as the CuPy backend compiles them."""
    try:
        out = {}
        for u in rs.ResourceConfig().unrolls:
            cubin = compile_source(rs.source(), [*rs.OPTIONS, f"-DKP_U={u}"], ARCH, ptx=False).cubin
            out[u] = {
                name: [i.text for i in fn.instructions] for name, fn in disassemble(cubin).items()
            }
    except ToolMissingError as exc:
        pytest.skip(str(exc))
    return out


def _kernels() -> list[tuple[str, tuple[str, ...], int]]:
    """(kernel, step opcodes, chains)."""
    out = []
    for name, b in rs.PIPES.items():
        out.append((f"kp_lat_{name}", b.step_opcodes, 1))
        out.append((f"kp_thr_{name}", b.step_opcodes, rs.CHAINS_PER_THREAD))
    out.append(("kp_issue_mix", rs.ISSUE_STEP_OPCODES, 1))
    return out


@pytest.mark.parametrize(("kernel", "step", "chains"), _kernels())
def test_each_extra_step_adds_exactly_the_intended_instructions(
    disasm: dict[int, dict[str, list[str]]], kernel: str, step: tuple[str, ...], chains: int
) -> None:
    u1, u2 = sorted(disasm)
    lo, hi = disasm[u1][kernel], disasm[u2][kernel]
    delta = opcode_counts(hi)
    delta.subtract(opcode_counts(lo))
    delta = Counter({k: v for k, v in delta.items() if v})
    want = Counter({op: n * (u2 - u1) * chains for op, n in Counter(step).items()})
    assert delta == want, f"{kernel}: {u2 - u1} more steps added {dict(delta)}, want {dict(want)}"
    # no register spills in the timed loop
    assert not any(opcode(i).startswith(("LDL", "STL")) for i in hi), kernel


def test_the_sfu_chain_is_one_mufu_per_step(disasm: dict[int, dict[str, list[str]]]) -> None:
    u = min(disasm)
    ex2 = [i for i in disasm[u]["kp_lat_ex2"] if opcode(i) == "MUFU.EX2"]
    assert len(ex2) == u
    # 2^-x: the negation is an operand modifier, not an extra instruction
    assert all(re.fullmatch(r"MUFU\.EX2 (R\d+), -R\d+", i) for i in ex2), ex2[:3]


def test_the_smem_chase_needs_no_address_arithmetic(
    disasm: dict[int, dict[str, list[str]]],
) -> None:
    lds = [i for i in disasm[min(disasm)]["kp_lat_smem"] if opcode(i) == "LDS"]
    # LDS Rd, [Ra] where Ra is the previous load's destination: the value is the next address
    for a, b in zip(lds, lds[1:]):
        dst = re.match(r"LDS (R\d+), \[(R\d+)\]$", a)
        nxt = re.match(r"LDS (R\d+), \[(R\d+)\]$", b)
        assert dst and nxt, (a, b)
        assert nxt.group(2) == dst.group(1), (a, b)


def test_the_warp_chase_is_one_dependent_64_bit_load(
    disasm: dict[int, dict[str, list[str]]],
) -> None:
    code = disasm[min(disasm)]["kp_chase_warp"]
    loads = [i for i in code if opcode(i).startswith("LDG")]
    assert len(loads) == 1, loads
    # ld.global.cg → .STRONG.GPU (L2, not L1); the loaded register is the next address
    m = re.fullmatch(r"LDG\.E\.64\.STRONG\.GPU (R\d+), desc\[UR\d+\]\[(R\d+)\.64\]", loads[0])
    assert m and m.group(1) == m.group(2), loads[0]
    loop = code[code.index(loads[0]) - 1 : code.index(loads[0]) + 4]
    assert not [i for i in loop if opcode(i).startswith(("IADD3", "IMAD", "LEA"))], loop


def test_the_stream_loads_whole_lines_with_immediate_offsets(
    disasm: dict[int, dict[str, list[str]]],
) -> None:
    code = disasm[min(disasm)]["kp_stream"]
    loads = [i for i in code if opcode(i).startswith("LDG")]
    assert [opcode(i) for i in loads] == ["LDG.E.STRONG.GPU"] * 8
    offsets = sorted(re.search(r"\.64(\+0x[0-9a-f]+)?\]", i).group(1) or "+0x0" for i in loads)
    assert offsets == sorted(f"+{hex(128 * k)}" for k in range(8))
    regs = {re.search(r"\[(R\d+)\.64", i).group(1) for i in loads}
    assert len(regs) == 1  # one base register: no address arithmetic between the 8 requests


def test_kernels_without_unrolled_loops_compile_the_same(
    disasm: dict[int, dict[str, list[str]]],
) -> None:
    u1, u2 = sorted(disasm)
    for k in ("kp_chase_warp", "kp_stream"):
        assert disasm[u1][k] == disasm[u2][k]


def test_the_l2_gap_loads_eight_whole_lines_a_lap_through_the_l2(
    disasm: dict[int, dict[str, list[str]]],
) -> None:
    # kp_l2_lines: 8 coalesced requests a lap, each its own line, ld.global.cg (the L2, not the
    # L1), as kp_scatter's 8 scattered ones: stream_gap counts 8 requests per warp and lap.
    code = disasm[min(disasm)]["kp_l2_lines"]
    loads = [i for i in code if opcode(i).startswith("LDG")]
    assert [opcode(i) for i in loads] == ["LDG.E.STRONG.GPU"] * 8
    assert disasm[min(disasm)]["kp_l2_lines"] == disasm[max(disasm)]["kp_l2_lines"]
