"""Parse `cuobjdump -sass` / `-res-usage` output of a Volta+ cubin into instruction records.

Each instruction keeps its address, guard predicate, opcode and modifiers, operands, the registers
it writes and reads (R, UR, P, UP; RZ/URZ/PT/UPT are constants, not dependences), its memory
operand and state space, its branch target and the scheduling control code of its second 64-bit
word.

Control code (Volta, Turing, Ampere, Hopper): the 21 bits above bit 105 of the 128-bit
instruction, i.e. bits 41..61 of the second 64-bit word that cuobjdump prints, are, from the
least significant: stall cycles (4 bits), yield (1), write-scoreboard index (3; 7 = none),
read-scoreboard index (3; 7 = none), wait mask over the six scoreboards (6), operand-reuse flags
(4). Sources: Jia et al., "Dissecting the NVIDIA Turing T4 GPU via Microbenchmarking"
(arXiv:1903.07486, §2) and the maxas wiki "Control-Codes", as implemented by CuAssembler's
`decodeCtrlCodes` (cloudcores/CuAssembler, CuAsm/common.py), which shows the yield hint "Y" when
the yield bit is 0. Checked on sm_90 cubins in tests/test_isa_sass.py: an S2R or LDG sets a
write scoreboard whose bit the first instruction reading its result waits on, and a `.reuse`
on the n-th source sets reuse bit n.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from klaraptor.isa.errors import DisassemblyError
from klaraptor.isa.operands import split_instruction

# ---------------------------------------------------------------------------------------------
# Control code


@dataclass(frozen=True)
class Control:
    """The scheduling control code of one instruction (see the module docstring)."""

    stall: int  # cycles before the next instruction of the warp may issue (0..15)
    yield_bit: int  # raw bit; 0 shows as the yield hint "Y" in CuAssembler's notation
    write_sb: int | None  # scoreboard set when the result is written (variable latency ops)
    read_sb: int | None  # scoreboard set when the source registers have been read
    wait_mask: int  # scoreboards (bit i = SB i) that must clear before this instruction issues
    reuse: int  # operand-reuse-cache flags, bit i = source operand slot i

    @classmethod
    def from_word(cls, hi: int) -> Control:
        code = (hi >> 41) & ((1 << 21) - 1)
        return cls.from_code(code)

    @classmethod
    def from_code(cls, code: int) -> Control:
        wsb = (code >> 5) & 7
        rsb = (code >> 8) & 7
        return cls(
            stall=code & 0xF,
            yield_bit=(code >> 4) & 1,
            write_sb=None if wsb == 7 else wsb,
            read_sb=None if rsb == 7 else rsb,
            wait_mask=(code >> 11) & 0x3F,
            reuse=(code >> 17) & 0xF,
        )

    @property
    def code(self) -> int:
        """The 21-bit code (what the recorded dataset stores)."""
        wsb = 7 if self.write_sb is None else self.write_sb
        rsb = 7 if self.read_sb is None else self.read_sb
        return (
            self.stall
            | self.yield_bit << 4
            | wsb << 5
            | rsb << 8
            | self.wait_mask << 11
            | self.reuse << 17
        )

    @property
    def waits_on(self) -> tuple[int, ...]:
        return tuple(i for i in range(6) if self.wait_mask >> i & 1)

    def __str__(self) -> str:
        # CuAssembler's notation, e.g. "----:B0-----:R-:W1:Y:S04".
        reuse = "".join("R" if self.reuse >> i & 1 else "-" for i in range(4))
        wait = "".join(str(i) if self.wait_mask >> i & 1 else "-" for i in range(6))
        rsb = "-" if self.read_sb is None else str(self.read_sb)
        wsb = "-" if self.write_sb is None else str(self.write_sb)
        y = "Y" if self.yield_bit == 0 else "-"
        return f"{reuse}:B{wait}:R{rsb}:W{wsb}:{y}:S{self.stall:02d}"


# ---------------------------------------------------------------------------------------------
# Instructions

# State space of the memory operand, by opcode.
_SPACE = {
    "LDG": "global",
    "STG": "global",
    "ATOMG": "global",
    "REDG": "global",
    "LDGSTS": "global",
    "LDGDEPBAR": "global",
    "LDS": "shared",
    "STS": "shared",
    "ATOMS": "shared",
    "LDSM": "shared",
    "STSM": "shared",
    "REDAS": "shared",
    "STAS": "shared",
    "LDL": "local",
    "STL": "local",
    "LD": "generic",
    "ST": "generic",
    "ATOM": "generic",
    "RED": "generic",
    "LDC": "constant",
    "ULDC": "constant",
}
_STORES = frozenset({"STG", "STS", "STL", "ST", "STSM", "STAS"})
_LOADS = frozenset({"LDG", "LDS", "LDL", "LD", "LDC", "ULDC", "LDSM", "ATOMG", "ATOMS", "ATOM"})
# Instructions without a register destination: every operand is read.
_NO_DEST = _STORES | {
    "RED",
    "REDG",
    "REDAS",
    "BRA",
    "BRX",
    "BRXU",
    "JMP",
    "JMX",
    "JMXU",
    "CALL",
    "RET",
    "EXIT",
    "BSSY",
    "BSYNC",
    "BREAK",
    "BAR",
    "WARPSYNC",
    "NOP",
    "MEMBAR",
    "FENCE",
    "ERRBAR",
    "CGAERRBAR",
    "CCTL",
    "CCTLL",
    "CCTLT",
    "DEPBAR",
    "LDGDEPBAR",
    "KILL",
    "NANOSLEEP",
    "YIELD",
    "BPT",
    "LDGSTS",
    "PMTRIG",
    "UCGABAR_ARV",
    "UCGABAR_WAIT",
}
# Instructions whose leading predicate operands are their only destinations.
_PRED_DEST_ONLY = frozenset(
    {
        "ISETP",
        "FSETP",
        "DSETP",
        "HSETP2",
        "PSETP",
        "PLOP3",
        "UISETP",
        "UPLOP3",
        "UPSETP",
        "FCHK",
        "R2P",
        "UR2UP",
    }
)
_TWO_DEST = frozenset({"VOTE", "VOTEU"})
_BRANCHES = frozenset({"BRA", "BRX", "BRXU", "JMP", "JMX", "JMXU", "CALL", "BSSY"})
_CONVERT = frozenset({"F2F", "F2I", "I2F", "I2I", "FRND", "F2IP", "I2IP", "I2FP", "F2FP"})
_FLOAT_TYPES = {"F16": 1, "BF16": 1, "F32": 1, "F64": 2, "TF32": 1, "E4M3": 1, "E5M2": 1}
_INT_TYPES = {
    "U8": 1,
    "S8": 1,
    "U16": 1,
    "S16": 1,
    "U32": 1,
    "S32": 1,
    "U64": 2,
    "S64": 2,
}
_SIZE = {"64": 2, "128": 4, "U64": 2, "S64": 2, "F64": 2}
_ALL_PREDICATES = tuple(f"P{i}" for i in range(7))

_REG = re.compile(r"(?<![\w.])(UR\d+|URZ|R\d+|RZ|UP[0-6T]|P[0-6T]|PR)(\.64)?(?![\w])")
_GUARD = re.compile(r"^@(!?)(U?P[0-6T])\s+")
_PRED = re.compile(r"^!?U?P[0-6T]$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_CONST_ZERO = frozenset({"RZ", "URZ", "PT", "UPT"})


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction of a function (registers as "R4", "UR6", "P0", "UP1")."""

    addr: int
    text: str  # as disassembled, without address, encoding and the trailing ';'
    ctrl: Control
    opcode: str  # base opcode, e.g. "LDG"
    mods: tuple[str, ...]  # e.g. ("E", "CONSTANT")
    pred: str | None  # guard predicate, e.g. "P0" (None when unguarded)
    pred_neg: bool
    operands: tuple[str, ...]
    dst: tuple[str, ...]
    src: tuple[str, ...]
    mem: str | None  # the memory operand text, e.g. "desc[UR4][R2.64+0x4]"
    space: str | None  # global, shared, local, generic, constant
    target: int | None  # branch/call/BSSY target address

    @property
    def full_opcode(self) -> str:
        return ".".join((self.opcode, *self.mods))

    @property
    def guarded(self) -> bool:
        """True when a predicate that is not PT guards it (it may not execute)."""
        return self.pred is not None and not (self.pred in ("PT", "UPT") and not self.pred_neg)

    @property
    def is_load(self) -> bool:
        return self.opcode in _LOADS

    @property
    def is_store(self) -> bool:
        return self.opcode in _STORES


def parse_instruction(addr: int, text: str, ctrl: Control) -> Instruction:
    """Parse one instruction's text (as cuobjdump prints it, ';' optional)."""
    body = text.strip().rstrip(";").strip()
    pred, neg, body, parts, operands = split_instruction(body, _GUARD, "[(", "])")
    opcode, mods = parts[0], tuple(p for p in parts[1:] if p)
    dst, src = _registers(opcode, mods, operands)
    if pred is not None and pred not in ("PT", "UPT"):
        src = (pred, *src)
    mem = next((o for o in operands if "[" in o and not o.startswith("c[")), None)
    if mem is None and opcode in ("LDC", "ULDC"):
        mem = next((o for o in operands if o.startswith("c[")), None)
    target = None
    if opcode in _BRANCHES and operands:
        last = operands[-1].split()[-1]
        if _HEX.match(last):
            target = int(last, 16)
    return Instruction(
        addr=addr,
        text=" ".join(text.strip().rstrip(";").split()),
        ctrl=ctrl,
        opcode=opcode,
        mods=mods,
        pred=pred,
        pred_neg=neg,
        operands=operands,
        dst=dst,
        src=_dedupe(src),
        mem=mem,
        space=_SPACE.get(opcode),
        target=target,
    )


def _widths(opcode: str, mods: tuple[str, ...], n: int) -> list[int]:
    """Registers covered by each operand's register (1, 2 or 4), by operand position."""
    w = [1] * n
    if n == 0:
        return w
    if opcode in ("IMAD", "UIMAD") and "WIDE" in mods:
        w[0] = 2
        if n >= 4:
            w[3] = 2  # the addend C of a wide multiply-add is 64-bit
    elif opcode in ("DADD", "DMUL", "DFMA", "DSETP", "DMNMX", "DSET"):
        w = [2] * n
        if opcode == "DSETP":
            w[0] = w[1] = 1
    elif opcode == "CS2R":
        w[0] = 1 if "32" in mods else 2
    elif opcode in _CONVERT:
        w = _convert_widths(opcode, mods, n)
    elif opcode in _LOADS or opcode in _STORES or opcode in ("RED", "REDG"):
        size = max((_SIZE.get(m, 1) for m in mods), default=1)
        if opcode == "LDSM":
            size = 4 if "4" in mods else 2 if "2" in mods else 1
        if opcode in _STORES or opcode in ("RED", "REDG"):
            w[-1] = size  # the data operand
        elif opcode in ("ATOMG", "ATOMS", "ATOM"):
            for i in range(n):
                w[i] = size
        else:
            w[0] = size
    return w


def _convert_widths(opcode: str, mods: tuple[str, ...], n: int) -> list[int]:
    floats = [m for m in mods if m in _FLOAT_TYPES]
    ints = [m for m in mods if m in _INT_TYPES]
    dst = src = 1
    if opcode == "F2I":
        dst = _INT_TYPES[ints[0]] if ints else 1
        src = _FLOAT_TYPES[floats[0]] if floats else 1
    elif opcode == "I2F":
        dst = _FLOAT_TYPES[floats[0]] if floats else 1
        src = _INT_TYPES[ints[0]] if ints else 1
    elif opcode in ("F2F", "FRND"):
        if floats:
            dst = _FLOAT_TYPES[floats[0]]
            src = _FLOAT_TYPES[floats[-1]]
    elif opcode == "I2I" and ints:
        dst, src = _INT_TYPES[ints[0]], _INT_TYPES[ints[-1]]
    return [dst] + [src] * (n - 1)


def _expand(reg: str, wide: bool, width: int) -> list[str]:
    if reg in _CONST_ZERO:
        return []
    if reg == "PR":
        return list(_ALL_PREDICATES)
    if reg.startswith(("P", "UP")):
        return [reg]  # predicates are single bits, whatever the operand width
    if wide:
        width = max(width, 2)
    if width == 1 or not reg[-1].isdigit():
        return [reg]
    prefix = "UR" if reg.startswith("UR") else "R"
    num = int(reg[len(prefix) :])
    return [f"{prefix}{num + k}" for k in range(width)]


def _registers(
    opcode: str, mods: tuple[str, ...], operands: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    n = len(operands)
    widths = _widths(opcode, mods, n)
    if opcode in _NO_DEST:
        n_dst = 0
    elif opcode in _TWO_DEST:
        n_dst = min(2, n)
    else:
        lead = 0
        while lead < n and _PRED.match(operands[lead]):
            lead += 1
        if opcode in _PRED_DEST_ONLY:
            n_dst = max(lead, 1)
        elif lead:
            # e.g. ATOMG PT, R3, [...] / SHFL PT, R3, ... / LOP3 P0, R5, ...: predicates + a register
            n_dst = min(lead + 1, n)
        else:
            # e.g. IADD3 R2, P0, R2, ... / LEA R2, P0, ...: a register + carry-out predicates
            n_dst = 1
            while n_dst < n and _PRED.match(operands[n_dst]):
                n_dst += 1
    dst: list[str] = []
    src: list[str] = []
    for i, op in enumerate(operands):
        regs = []
        for m in _REG.finditer(op):
            in_brackets = op[: m.start()].count("[") > op[: m.start()].count("]")
            # Registers inside an address are 32/64-bit addresses, never data widths.
            width = 1 if in_brackets else widths[i]
            regs.append((m.group(1), m.group(2) is not None, width, in_brackets))
        for reg, wide, width, in_brackets in regs:
            names = _expand(reg, wide, width)
            if i < n_dst and not in_brackets:
                dst += names
            else:
                src += names
    return _dedupe(dst), tuple(src)


def _dedupe(regs: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(regs))


# ---------------------------------------------------------------------------------------------
# cuobjdump output


@dataclass
class SassFunction:
    """The instructions of one function of a cubin."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def index_of(self, addr: int) -> int:
        """Instruction index of an address (DisassemblyError when none is there)."""
        idx = self._by_addr().get(addr)
        if idx is None:
            raise DisassemblyError(f"function {self.name!r} has no instruction at {addr:#x}")
        return idx

    def _by_addr(self) -> dict[int, int]:
        cache = self.__dict__.get("_addr_cache")
        if cache is None or len(cache) != len(self.instructions):
            cache = {ins.addr: i for i, ins in enumerate(self.instructions)}
            self.__dict__["_addr_cache"] = cache
        return cache


_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_INS = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s*(.*?)\s*/\*\s*0x([0-9a-fA-F]{16})\s*\*/\s*$")
_HI = re.compile(r"^\s*/\*\s*0x([0-9a-fA-F]{16})\s*\*/\s*$")


def parse_sass(text: str) -> dict[str, SassFunction]:
    """Functions of `cuobjdump -sass` output, by name, with their parsed instructions."""
    funcs: dict[str, SassFunction] = {}
    cur: SassFunction | None = None
    pending: tuple[int, str] | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _FUNC.match(line)
        if m:
            cur = funcs.setdefault(m.group(1), SassFunction(m.group(1)))
            pending = None
            continue
        m = _INS.match(line)
        if m:
            if cur is None:
                raise DisassemblyError(f"line {lineno}: an instruction before any 'Function :'")
            pending = (int(m.group(1), 16), m.group(2))
            continue
        m = _HI.match(line)
        if m and pending is not None:
            assert cur is not None
            addr, body = pending
            ctrl = Control.from_word(int(m.group(1), 16))
            cur.instructions.append(parse_instruction(addr, body, ctrl))
            pending = None
    if pending is not None:
        raise DisassemblyError(
            f"the last instruction ({pending[1]!r}) has no second encoding word; "
            "is this `cuobjdump -sass` output of a Volta+ cubin?"
        )
    return funcs


_RES_FUNC = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_RES_ITEM = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` output → {function: {"REG": 32, "SHARED": 0, ...}}."""
    out: dict[str, dict[str, int]] = {}
    cur: str | None = None
    for line in text.splitlines():
        m = _RES_FUNC.match(line)
        if m:
            cur = m.group(1)
            out[cur] = {}
            continue
        if cur is not None:
            items = _RES_ITEM.findall(line)
            if items:
                out[cur].update({k: int(v) for k, v in items})
    return out


def resources(usage: dict[str, int]) -> dict[str, int]:
    """Named resource figures of one function's -res-usage entry."""
    constant = sum(v for k, v in usage.items() if k.startswith("CONSTANT"))
    return {
        "registers": usage.get("REG", 0),
        "shared_bytes": usage.get("SHARED", 0),
        "local_bytes": usage.get("LOCAL", 0),
        "stack_bytes": usage.get("STACK", 0),
        "constant_bytes": constant,
        "textures": usage.get("TEXTURE", 0),
        "surfaces": usage.get("SURFACE", 0),
        "samplers": usage.get("SAMPLER", 0),
    }
