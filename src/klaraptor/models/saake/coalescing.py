"""Static coalescing: which 128-B lines and 32-B sectors each global access of a warp touches,
for a given block shape, from the SASS address arithmetic.

SAAKE identified uncoalesced accesses by hand (§4.4). Here an abstract interpretation over the
SASS CFG gives every register, at every point, one of:

- uniform: the same in every thread of a block (constants, parameters, blockIdx, loop counters);
  its value is kept when it is a known integer (immediates, blockDim from c[0x0][0x0..0x8]);
- affine: u + cx·threadIdx.x + cy·threadIdx.y + cz·threadIdx.z, u uniform, where each c is a
  known integer or SYM, a uniform value the analysis does not know (e.g. a row length N read
  from a kernel parameter);
- unknown (anything else: loaded data, bit tricks, divisions).

IMAD / IMAD.WIDE / IMAD.SHL / IMAD.IADD / IADD3 / VIADD / LEA / SHF.L / MOV and S2R of
SR_TID.* are interpreted; other instructions give uniform when all their sources are uniform,
else unknown; a predicated write merges with the old value; control-flow joins merge by
equality (same thread coefficients, value kept only if equal). The address of a global load or
store (`[R.64+off]`) then has thread coefficients, and for a block shape the warp's 32 threads
(x fastest) give the exact set of sectors and lines, assuming the array base is 128-B aligned.
A SYM coefficient is taken as a stride of whole lines (N x 4 bytes with N a multiple of 32, as
for every row length of the suite at its sizes), so each distinct value of that thread index
lands in its own lines, at the same offset in them (the L1's worst case, `l1_wavefronts`).

`warp_access` returns per access instruction (sectors, lines, wavefronts) for a block, or None
where the address is unknown; the model checks the predicted sectors per request against the
counters at every training point and only uses the static lines where they agree
(`agrees_with`). Shared-memory accesses (LDS, STS) are followed the same way and get their bank
conflicts (`bank_wavefronts`); no counter checks them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from klaraptor.isa.analysis import KernelISA
from klaraptor.isa.sass import Instruction

SYM = "sym"  # an unknown uniform coefficient
_SYM_STRIDE = 1 << 20  # bytes: what one unit of a SYM-coefficient thread index moves
_ACCESS = frozenset({"LDG", "STG", "LD", "ST", "ATOMG", "REDG", "ATOM", "RED"})
SHARED_OPCODES = frozenset({"LDS", "STS"})
_BANKS = 32  # 4-byte shared-memory banks
_REG = re.compile(r"^(-)?(U?R\d+|URZ|RZ)(?:\.reuse|\.64|\.X4)*$")
_IMM = re.compile(r"^(-)?(0x[0-9a-fA-F]+|\d+)$")
_CONST = re.compile(r"^c\[0x0\]\[(0x[0-9a-fA-F]+)\]$")
_MEM = re.compile(r"\[(U?R\d+)(?:\.64)?(?:\+(?:UR\d+\+)?(-?0x[0-9a-fA-F]+))?\]")
_NTID = {0x0: 0, 0x4: 1, 0x8: 2}
_PRED_OPERAND = re.compile(r"!?U?P[0-6T]")  # c[0x0][...] offsets of blockDim.x/y/z on sm_90


@dataclass(frozen=True)
class AV:
    """Abstract value: kind "u" (uniform), "a" (affine in threadIdx) or "t" (unknown)."""

    kind: str
    coef: tuple[object, object, object] = (0, 0, 0)
    value: int | None = None

    @property
    def uniform(self) -> bool:
        return self.kind == "u"


TOP = AV("t")
UNIFORM = AV("u")


def _const(v: int) -> AV:
    return AV("u", (0, 0, 0), v)


def _add_c(a: object, b: object) -> object:
    if a == 0:
        return b
    if b == 0:
        return a
    if a == SYM or b == SYM:
        return SYM
    return a + b  # type: ignore[operator]


def _mul_c(a: object, k: int | None) -> object:
    if a == 0:
        return 0
    if k is None or a == SYM:
        return SYM if k != 0 else 0
    return a * k  # type: ignore[operator]


def add(a: AV, b: AV) -> AV:
    if "t" in (a.kind, b.kind):
        return TOP
    coef = tuple(_add_c(x, y) for x, y in zip(a.coef, b.coef, strict=True))
    value = a.value + b.value if a.value is not None and b.value is not None else None
    kind = "u" if coef == (0, 0, 0) else "a"
    return AV(kind, coef, value if kind == "u" else None)  # type: ignore[arg-type]


def neg(a: AV) -> AV:
    if a.kind == "t":
        return TOP
    coef = tuple(c if c in (0, SYM) else -c for c in a.coef)  # type: ignore[operator]
    return AV(a.kind, coef, None if a.value is None else -a.value)  # type: ignore[arg-type]


def mul(a: AV, b: AV) -> AV:
    if "t" in (a.kind, b.kind):
        return TOP
    if a.kind == "a" and b.kind == "a":
        return TOP
    if a.kind == "a":
        a, b = b, a
    # a is uniform now
    if b.kind == "u":
        v = a.value * b.value if a.value is not None and b.value is not None else None
        return AV("u", (0, 0, 0), v)
    return AV("a", tuple(_mul_c(c, a.value) for c in b.coef), None)  # type: ignore[arg-type]


def merge(a: AV | None, b: AV | None) -> AV | None:
    if a is None:
        return b
    if b is None or a == b:
        return a
    if a.kind == b.kind and a.kind in ("u", "a") and a.coef == b.coef:
        return AV(a.kind, a.coef, None)
    return TOP


class _Interp:
    def __init__(self, block: Sequence[int]) -> None:
        self.block = tuple(int(v) for v in block)

    def operand(self, text: str, state: Mapping[str, AV]) -> AV:
        s = text.strip()
        m = _REG.match(s)
        if m:
            name = m.group(2)
            v = _const(0) if name in ("RZ", "URZ") else state.get(name, UNIFORM)
            return neg(v) if m.group(1) else v
        m = _IMM.match(s)
        if m:
            imm = int(m.group(2), 0)
            return _const(-imm if m.group(1) else imm)
        m = _CONST.match(s)
        if m:
            off = int(m.group(1), 16)
            return _const(self.block[_NTID[off]]) if off in _NTID else UNIFORM
        if s.startswith("c[") or s in ("PT", "!PT"):
            return UNIFORM
        return TOP

    def step(self, ins: Instruction, state: dict[str, AV]) -> None:
        if not ins.dst:
            return
        new = self.evaluate(ins, state)
        dst = [r for r in ins.dst if not r.startswith(("P", "UP"))]
        if not dst:
            return
        first = dst[0]
        if ins.guarded:
            new = merge(state.get(first), new) or TOP
        state[first] = new
        for r in dst[1:]:
            state[r] = TOP if new.kind != "u" else UNIFORM

    def evaluate(self, ins: Instruction, state: Mapping[str, AV]) -> AV:
        op, mods = ins.opcode, ins.mods
        ops = [o for o in ins.operands if not _PRED_OPERAND.fullmatch(o.strip())]
        src = ops[1:]

        def val(i: int) -> AV:
            return self.operand(src[i], state) if i < len(src) else TOP

        if op in ("S2R", "CS2R"):
            reg = src[0] if src else ""
            for axis, name in enumerate(("SR_TID.X", "SR_TID.Y", "SR_TID.Z")):
                if reg == name:
                    coef = [0, 0, 0]
                    coef[axis] = 1
                    return AV("a", tuple(coef))  # type: ignore[arg-type]
            if reg == "SR_LANEID":
                return AV("a", (1, 0, 0))
            return UNIFORM if reg.startswith("SR_") else TOP
        if op in ("S2UR", "LDC", "ULDC"):
            if op != "S2UR" and src and not mods:
                return self.operand(src[0], state)
            return UNIFORM
        if op in ("MOV", "UMOV", "R2UR", "MOV32I"):
            return val(0)
        if op == "IMAD":
            if "HI" in mods or "X" in mods:
                return TOP if not all(val(i).uniform for i in range(3)) else UNIFORM
            if "MOV" in mods:
                return val(2)
            if "SHL" in mods:
                return mul(val(0), val(1))
            return add(mul(val(0), val(1)), val(2))
        if op in ("IADD3",):
            if "X" in mods:
                return UNIFORM if all(val(i).uniform for i in range(3)) else TOP
            return add(add(val(0), val(1)), val(2))
        if op in ("VIADD", "IADD", "IADD32I", "UIADD3"):
            out = val(0)
            for i in range(1, len(src)):
                out = add(out, val(i))
            return out
        if op == "LEA" and "HI" not in mods:
            k = val(2).value
            if k is None:
                return TOP
            return add(mul(val(0), _const(1 << k)), val(1))
        if op in ("SHF", "SHL", "USHF") and "L" in mods and "HI" not in mods and op != "SHL":
            k = val(1).value
            return TOP if k is None else mul(val(0), _const(1 << k))
        values = [self.operand(o, state) for o in src]
        if values and all(v.uniform for v in values) and op not in ("LDG", "LD", "LDS", "LDL"):
            return UNIFORM
        return TOP


def address_forms(isa: KernelISA, block: Sequence[int]) -> dict[int, tuple[AV, int]]:
    """{instruction index: (address value, immediate offset)} of every global and shared-memory
    access."""
    cfg = isa.sass_cfg
    assert cfg is not None
    interp = _Interp(block)
    ins_list = isa.instructions
    order = [b.index for b in cfg.blocks if b.root is not None]
    out_state: dict[int, dict[str, AV]] = {}
    result: dict[int, tuple[AV, int]] = {}
    for _ in range(8):
        changed = False
        for b in order:
            blk = cfg.blocks[b]
            state: dict[str, AV] = {}
            for p in blk.preds:
                for reg, v in out_state.get(p, {}).items():
                    state[reg] = merge(state.get(reg), v) or TOP
            if b in cfg.roots and b != 0:
                for p, callee in cfg.calls:
                    if callee == b:
                        for reg, v in out_state.get(p, {}).items():
                            state[reg] = merge(state.get(reg), v) or TOP
            for i in range(blk.start, blk.end):
                ins = ins_list[i]
                if ins.opcode in _ACCESS and ins.mem:
                    found = _MEM.findall(ins.mem)  # desc[UR6][R2.64+0x4]: the last one
                    if found:
                        reg, disp = found[-1]
                        base = state.get(reg, UNIFORM)
                        result[i] = (base, int(disp, 16) if disp else 0)
                    else:
                        result[i] = (TOP, 0)
                elif ins.opcode in SHARED_OPCODES and ins.mem:
                    result[i] = _shared_address(ins.mem, state)
                interp.step(ins, state)
            if out_state.get(b) != state:
                out_state[b] = state
                changed = True
        if not changed:
            break
    return result


def _shared_address(mem: str, state: Mapping[str, AV]) -> tuple[AV, int]:
    """A shared-memory operand ([R8], [R2+UR4+0x40], [UR4+0x44]): the sum of its registers
    (uniform ones only shift every lane alike) and its immediate offset."""
    terms = mem.strip().strip("[]").split("+")
    value, off = UNIFORM, 0
    for t in terms:
        t = t.strip()
        reg = t.split(".")[0]
        if re.fullmatch(r"-?0x[0-9a-fA-F]+", t):
            off += int(t, 16)
        elif re.fullmatch(r"R\d+", reg):
            value = add(value, state.get(reg, TOP))
        elif not re.fullmatch(r"U?RZ|UR\d+", reg):
            return TOP, 0
    return value, off


def _size(ins: Instruction) -> int:
    for m in ins.mods:
        if m in ("64", "U64", "S64"):
            return 8
        if m == "128":
            return 16
        if m in ("U8", "S8"):
            return 1
        if m in ("U16", "S16"):
            return 2
    return 4


@dataclass(frozen=True)
class Access:
    """Sectors and lines one warp request of a global access instruction touches, and the
    cycles (wavefronts) the L1's data stage needs for it: the largest number of its sectors that
    sit in the same 32-B slot of their lines (`l1_wavefronts`). For a shared-memory access:
    the distinct 4-byte words (as `sectors`), no lines, and the largest number of distinct
    words in one of the 32 banks (`bank_wavefronts`)."""

    sectors: int
    lines: int
    wavefronts: int


def warp_access(isa: KernelISA, block: Sequence[int]) -> dict[int, Access | None]:
    """Per global access instruction: what warp 0 of a block of this shape touches (None when
    the address is not affine in threadIdx)."""
    bx, by, bz = (int(v) for v in block)
    threads = bx * by * bz
    lanes = [(t % bx, (t // bx) % by, t // (bx * by)) for t in range(min(32, threads))]
    out: dict[int, Access | None] = {}
    seen: dict[tuple, Access] = {}
    for i, (av, off) in address_forms(isa, block).items():
        if av.kind == "t":
            out[i] = None
            continue
        size = _size(isa.instructions[i])
        if isa.instructions[i].opcode in SHARED_OPCODES:
            # An unknown stride could put the lanes in any banks: no claim.
            out[i] = None if SYM in av.coef else _banks(av.coef, off, size, lanes)
            continue
        key = (av.coef, off % 128, size)
        if key not in seen:
            seen[key] = _touch(av.coef, off % 128, size, lanes)
        out[i] = seen[key]
    return out


def _busiest(keys: Iterable[int], buckets: int) -> int:
    """The most distinct keys that fall in one bucket (key mod buckets)."""
    counts = [0] * buckets
    for k in set(keys):
        counts[k % buckets] += 1
    return max(counts)


def bank_wavefronts(words: Iterable[int]) -> int:
    """Cycles of a shared-memory request touching these 4-byte words: one word per bank per
    cycle (lanes reading the same word share it), so the most distinct words in one bank."""
    return _busiest(words, _BANKS)


def _banks(coef: tuple, off: int, size: int, lanes: Sequence[tuple[int, int, int]]) -> Access:
    words: set[int] = set()
    for tx, ty, tz in lanes:
        o = off + int(coef[0]) * tx + int(coef[1]) * ty + int(coef[2]) * tz
        words.update(range(o // 4, (o + size - 1) // 4 + 1))
    return Access(len(words), 0, bank_wavefronts(words))


def l1_wavefronts(sectors: Iterable[int]) -> int:
    """Cycles of the L1 data stage for a request touching these sectors (global indices of 32-B
    sectors): it reads one sector from each of the four 32-B slots of a line per cycle, so the
    largest count in one slot. Measured on the H200 (scripts/device_l1_slots.py,
    benchmarks/results/h200/resources/l1_slots.json): a warp reading one float per lane at a
    stride of 33, 34, 36, 1025 or 4097 floats (32 lines, 8 sectors per slot) takes 8.6-9.0
    cycles a request; 32, 64, ..., 4096 floats (32 lines, all in one slot) 32.1-32.3 cycles; 48
    floats (two slots) 16.2."""
    return _busiest(sectors, 4)


def _touch(coef: tuple, off: int, size: int, lanes: Sequence[tuple[int, int, int]]) -> Access:
    sectors: set[int] = set()
    lines: set[int] = set()
    steps = [_SYM_STRIDE if c == SYM else int(c) for c in coef]  # type: ignore[call-overload]
    for tx, ty, tz in lanes:
        o = off + steps[0] * tx + steps[1] * ty + steps[2] * tz
        for byte in (o, o + size - 1):
            sectors.add(byte // 32)
            lines.add(byte // 128)
    return Access(len(sectors), len(lines), l1_wavefronts(sectors))


def agrees_with(predicted: float, measured: float, rtol: float = 0.25) -> bool:
    """Whether static sectors per request match the counters' (within `rtol`, or 0.5 sector)."""
    return abs(predicted - measured) <= max(rtol * measured, 0.5)


__all__ = [
    "AV",
    "SHARED_OPCODES",
    "SYM",
    "Access",
    "address_forms",
    "agrees_with",
    "bank_wavefronts",
    "l1_wavefronts",
    "warp_access",
]
