"""The instruction semantics of the SASS interpreter (`klaraptor.models.saake.interp`):
what each opcode computes on the known lanes of a warp, as a mixin the interpreter
inherits, and the 32-bit lane values it computes with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.isa.sass import Instruction

LANES = 32
M32 = (1 << 32) - 1
PARAM_BASE = 0x210  # sm_90: the first kernel parameter's offset in constant bank 0
_NTID = {0x0: 0, 0x4: 1, 0x8: 2}
_NCTAID = {0xC: 0, 0x10: 1, 0x14: 2}
_REG = re.compile(r"^(U?R\d+|URZ|RZ|SRZ)((?:\.\w+)*)$")
_PRED = re.compile(r"^(!?)(U?P[0-6T])$")
_IMM = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
_FIMM = re.compile(r"^-?(\d+\.\d*(e[+-]?\d+)?|\d+e[+-]?\d+|INF|QNAN)$", re.I)
_CONST = re.compile(r"^c\[0x([0-9a-fA-F]+)\]\[(?:0x([0-9a-fA-F]+)|(RZ|URZ))\]$")
_NOOPS = frozenset(
    "BSSY BSYNC BREAK WARPSYNC NOP BAR DEPBAR YIELD MEMBAR FENCE ERRBAR CCTL BPT NANOSLEEP "
    "ACQBULK".split()
)
MAX_STEPS = 2_000_000  # executed blocks per run before giving up
PROBE_BLOCKS = 200_000  # blocks one probed loop iteration may run


class DataDependent(KlaraptorError):
    """The kernel's trip counts depend on its data: they need hardware counters."""


@dataclass
class Val:
    """32-bit values (as int64) of every simulated lane and which are known; a value the same in
    every lane is kept as one (NumPy broadcasting)."""

    v: np.ndarray
    ok: np.ndarray

    @staticmethod
    def const(x: int) -> Val:
        """The same value in every lane (shape (1,): it broadcasts against any lanes)."""
        return Val(np.array([x & M32], dtype=np.int64), np.ones(1, dtype=bool))

    @staticmethod
    def unknown() -> Val:
        return Val(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=bool))

    def signed(self) -> np.ndarray:
        return np.where(self.v >= (1 << 31), self.v - (1 << 32), self.v)

    def f32(self) -> np.ndarray:
        return self.v.astype(np.uint32).view(np.float32)


def _from_f32(x: np.ndarray, ok: np.ndarray) -> Val:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    return Val(bits, ok.copy())


def _lut(a: np.ndarray, b: np.ndarray, c: np.ndarray, lut: int) -> np.ndarray:
    """LOP3's three-input truth table, bit by bit (a = 0xF0, b = 0xCC, c = 0xAA)."""
    out = np.zeros(np.broadcast(a, b, c).shape, dtype=np.int64)
    for i in range(8):
        if lut >> i & 1:
            ta = a if i & 4 else ~a
            tb = b if i & 2 else ~b
            tc = c if i & 1 else ~c
            out |= ta & tb & tc
    return out & M32


def _plut(a: np.ndarray, b: np.ndarray, c: np.ndarray, lut: int) -> np.ndarray:
    out = np.zeros(np.broadcast(a, b, c).shape, dtype=bool)
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out


_CMP = {
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "EQ": np.equal,
    "NE": np.not_equal,
    "LTU": np.less,
    "LEU": np.less_equal,
    "GTU": np.greater,
    "GEU": np.greater_equal,
    "EQU": np.equal,
    "NEU": np.not_equal,
}

# Uniform-datapath opcodes that behave as their vector namesakes on every lane.
_UNIFORM_OF = frozenset(
    "IADD3 IMAD LEA SHF LOP3 MOV SEL ISETP PLOP3 IMNMX PRMT POPC FLO LDC".split()
)


class OpcodeSemantics:
    """What the interpreter executes: every opcode it knows, on the lanes given (a mixin of
    `WarpInterpreter`, whose register file and operand reading it uses)."""

    # While the interpreter probes a loop: every integer comparison's operands, in order.
    _isetp_log: list[tuple[np.ndarray, np.ndarray, str, np.ndarray]] | None = None

    # What `WarpInterpreter` provides: the lanes' thread and block indices, the lane count, and
    # its register file (declared here for the type checker only).
    tid: tuple[np.ndarray, np.ndarray, np.ndarray]
    ctaid: tuple[np.ndarray, ...]
    n: int

    if TYPE_CHECKING:

        def _pred(self, name: str) -> tuple[np.ndarray, np.ndarray]: ...

        def _set(
            self, name: str, val: Val | None, lanes: np.ndarray, wide: bool = False
        ) -> None: ...

        def _setp(self, name: str, v: np.ndarray, ok: np.ndarray, lanes: np.ndarray) -> None: ...

        def _operand(self, text: str) -> Val: ...

        def _pair(self, text: str) -> tuple[Val, Val]: ...

    def _exec(self, ins: Instruction, lanes: np.ndarray) -> None:  # noqa: C901 - a dispatch
        op, mods = ins.opcode, set(ins.mods)
        ops = [o.strip() for o in ins.operands]
        base = op[1:] if op.startswith("U") and op[1:] in _UNIFORM_OF else op
        if base in ("ISETP", "FSETP"):
            self._setp_ins(base, mods, ops, lanes)
            return
        if base == "PLOP3":
            a, b, c = (self._pred(x) for x in ops[2:5])
            lut = int(ops[5], 0)
            ok = a[1] & b[1] & c[1]
            self._setp(ops[0], _plut(a[0], b[0], c[0], lut), ok, lanes)
            if len(ops) > 6 and ops[1] not in ("PT", "UPT"):
                self._setp(ops[1], _plut(a[0], b[0], c[0], int(ops[6], 0)), ok, lanes)
            return
        # Optional predicate outputs (carries, LOP3's test) come before or after the register
        # destination ("LOP3.LUT P1, R9, ...", "IADD3 R6, P0, R2, ...").
        rest = list(ops)
        pout = []
        while rest and _PRED.match(rest[0]) and not rest[0].startswith("!"):
            pout.append(rest.pop(0))
        if not rest:
            for p in pout:
                self._setp(p, np.zeros(1, bool), np.zeros(1, bool), lanes)
            return
        dst = rest.pop(0)
        while rest and _PRED.match(rest[0]) and not rest[0].startswith("!"):
            pout.append(rest.pop(0))
        if not _REG.match(dst) or dst.startswith("SR"):
            for p in pout:
                self._setp(p, np.zeros(1, bool), np.zeros(1, bool), lanes)
            return
        d_name = _REG.match(dst).group(1)  # type: ignore[union-attr]
        val: Val | None = None
        hi: Val | None = None
        carry: tuple[np.ndarray, np.ndarray] | None = None
        try:
            val, hi, carry = self._value(base, mods, rest, ins)
        except (ValueError, IndexError):
            val = None
        if val is not None and d_name not in ("RZ", "URZ"):
            self._set(d_name, val, lanes)
        elif d_name not in ("RZ", "URZ"):
            self._set(d_name, None, lanes)
        if hi is not None or "WIDE" in mods or ("64" in mods and base == "LDC"):
            idx = int(re.sub(r"\D", "", d_name)) if d_name not in ("RZ", "URZ") else None
            if idx is not None:
                hi_name = f"{'UR' if d_name.startswith('UR') else 'R'}{idx + 1}"
                self._set(hi_name, hi, lanes)
        for k, p in enumerate(pout):
            if carry is not None and k == 0:
                self._setp(p, carry[0], carry[1], lanes)
            else:
                self._setp(p, np.zeros(1, bool), np.zeros(1, bool), lanes)

    def _value(  # noqa: C901 - a dispatch over opcodes
        self, op: str, mods: set[str], src: list[str], ins: Instruction
    ) -> tuple[Val | None, Val | None, tuple[np.ndarray, np.ndarray] | None]:
        """(result, high word of a 64-bit result, carry out) of one instruction."""
        V = self._operand

        def known(*vs: Val) -> np.ndarray:
            ok = np.ones(1, bool)
            for v in vs:
                ok = ok & v.ok
            return ok

        if op in ("MOV", "MOV32I"):
            return V(src[0]), None, None
        if op == "S2R" or op == "S2UR" or op == "CS2R":
            return self._special(src[0] if src else ""), None, None
        if op in ("LDC",):
            if "64" in mods:
                lo, hi = self._pair(src[0])
                return lo, hi, None
            return V(src[0]), None, None
        if op == "R2UR":
            return V(src[0]), None, None
        if op == "IMAD":
            if "MOV" in mods:
                return V(src[2]), None, None
            a, b = V(src[0]), V(src[1])
            if "WIDE" in mods:
                c_lo, c_hi = self._pair(src[2])
                if "U32" in mods:
                    prod = a.v.astype(np.uint64) * b.v.astype(np.uint64)
                else:
                    prod = (a.signed() * b.signed()).astype(np.uint64)
                c_wide = (c_hi.v.astype(np.uint64) << np.uint64(32)) | c_lo.v.astype(np.uint64)
                tot = prod + c_wide
                ok = known(a, b, c_lo, c_hi)
                lo_w = (tot & np.uint64(M32)).astype(np.int64)
                hi_w = (tot >> np.uint64(32)).astype(np.int64)
                return Val(lo_w, ok), Val(hi_w, ok), None
            c = V(src[2])
            if "HI" in mods:
                if "U32" in mods:
                    prod_u = a.v.astype(np.uint64) * b.v.astype(np.uint64)
                    hi_p = (prod_u >> np.uint64(32)).astype(np.int64)
                else:
                    hi_p = (a.signed() * b.signed()) >> 32
                return Val((hi_p + c.v) & M32, known(a, b, c)), None, None
            res_u = a.v.astype(np.uint64) * b.v.astype(np.uint64)
            res_u = (res_u & np.uint64(M32)) + c.v.astype(np.uint64)
            ok = known(a, b, c)
            if "X" in mods and len(src) > 3:
                pv, pok = self._pred(src[3])
                res_u = res_u + pv.astype(np.uint64)
                ok = ok & pok
            carry = (res_u >> np.uint64(32)) > 0
            return Val((res_u & np.uint64(M32)).astype(np.int64), ok), None, (carry, ok)
        if op in ("IADD3", "IADD"):
            vals = [V(x) for x in src[:3] if not _PRED.match(x)]
            res = np.asarray(sum(v.v for v in vals))
            ok = known(*vals)
            if "X" in mods:
                for p in [x for x in src[3:] if _PRED.match(x)]:
                    pv, pok = self._pred(p)
                    res = res + pv.astype(np.int64)
                    ok = ok & pok
            carry = (res >> 32) > 0
            return Val(res & M32, ok), None, (carry, ok)
        if op in ("VIADD", "IADD32I"):
            a, b = V(src[0]), V(src[1])
            return Val((a.v + b.v) & M32, known(a, b)), None, None
        if op == "LEA":
            if "HI" in mods:
                # LEA.HI d, a, b, c_hi, s: (((c:a) << s) >> 32) + b (SX32: a sign-extended).
                a, b = V(src[0]), V(src[1])
                if "SX32" in mods:
                    amount = int(src[2], 0)
                    wide = a.signed().astype(np.uint64) << np.uint64(amount)
                    ok = known(a, b)
                else:
                    c, amount = V(src[2]), int(src[3], 0)
                    cat = (c.v.astype(np.uint64) << np.uint64(32)) | a.v.astype(np.uint64)
                    wide = cat << np.uint64(amount)
                    ok = known(a, b, c)
                res = ((wide >> np.uint64(32)) & np.uint64(M32)).astype(np.int64) + b.v
                if "X" in mods:
                    preds = [x for x in src if _PRED.match(x)]
                    if preds:
                        pv, pok = self._pred(preds[-1])
                        res = res + pv.astype(np.int64)
                        ok = ok & pok
                return Val(res & M32, ok), None, None
            a, b, amount = V(src[0]), V(src[1]), int(src[2], 0)
            res = ((a.v << amount) & M32) + b.v
            ok = known(a, b)
            return Val(res & M32, ok), None, ((res >> 32) > 0, ok)
        if op == "SHF":
            a, s, c = V(src[0]), V(src[1]), V(src[2])
            ok = known(a, s, c)
            sh = (s.v & 63).astype(np.uint64)
            wide = (c.v.astype(np.uint64) << np.uint64(32)) | a.v.astype(np.uint64)
            m32 = np.uint64(M32)
            if "L" in mods:
                r = wide << sh
                res = ((r >> np.uint64(32)) & m32) if "HI" in mods else (r & m32)
                res = res.astype(np.int64)
            elif "S32" in mods and "HI" in mods:
                shift = np.minimum(s.v & 63, 31)
                res = (Val(c.v, ok).signed() >> shift) & M32
            else:
                r = wide >> sh
                res = ((r >> np.uint64(32)) & m32) if "HI" in mods else (r & m32)
                res = res.astype(np.int64)
            return Val(res, ok), None, None
        if op == "SHL" or op == "SHR":
            a, s = V(src[0]), V(src[1])
            res = (a.v << s.v) if op == "SHL" else (a.v >> s.v)
            return Val(res & M32, known(a, s)), None, None
        if op == "LOP3":
            a, b, c = V(src[0]), V(src[1]), V(src[2])
            lut = int(src[3], 0)
            res = _lut(a.v, b.v, c.v, lut)
            ok = known(a, b, c)
            return Val(res, ok), None, (res != 0, ok)
        if op in ("LOP", "LOP32I"):
            return None, None, None
        if op == "SEL" or op == "FSEL":
            a, b = V(src[0]), V(src[1])
            pv, pok = self._pred(src[2])
            return Val(np.where(pv, a.v, b.v), np.where(pv, a.ok, b.ok) & pok), None, None
        if op in ("IMNMX", "VIMNMX"):
            a, b = V(src[0]), V(src[1])
            pv, pok = self._pred(src[2])
            sa, sb = (a.v, b.v) if "U32" in mods else (a.signed(), b.signed())
            res = np.where(pv, np.minimum(sa, sb), np.maximum(sa, sb))
            return Val(res & M32, known(a, b) & pok), None, None
        if op == "VIADDMNMX":
            a, b, c = V(src[0]), V(src[1]), V(src[2])
            pv, pok = self._pred(src[3])
            s = Val((a.v + b.v) & M32, known(a, b))
            sa, sc = (s.v, c.v) if "U32" in mods else (s.signed(), c.signed())
            res = np.where(pv, np.minimum(sa, sc), np.maximum(sa, sc))
            return Val(res & M32, s.ok & c.ok & pok), None, None
        if op == "IABS":
            a = V(src[0])
            return Val(np.abs(a.signed()) & M32, a.ok), None, None
        if op == "PRMT":
            a, sel, b = V(src[0]), V(src[1]), V(src[2])
            ok = known(a, sel, b)
            word = (b.v.astype(np.uint64) << np.uint64(32)) | a.v.astype(np.uint64)
            res = np.zeros(word.shape, dtype=np.int64)
            for k in range(4):
                idx = ((sel.v >> (4 * k)) & 0x7).astype(np.uint64)
                byte = ((word >> (np.uint64(8) * idx)) & np.uint64(0xFF)).astype(np.int64)
                res |= byte << (8 * k)
            return Val(res & M32, ok), None, None
        if op in ("POPC",):
            a = V(src[0])
            res = np.array([bin(int(x)).count("1") for x in a.v.ravel()], dtype=np.int64)
            return Val(res, a.ok), None, None
        if op in ("FLO",):
            return None, None, None
        # Floats: the integer-division idioms (I2F.RP, MUFU.RCP, F2I.TRUNC) and plain arithmetic.
        if op in ("I2F", "I2FP"):
            a = V(src[0])
            x = a.v.astype(np.float64) if ("U32" in mods) else a.signed().astype(np.float64)
            f = x.astype(np.float32)
            if "RP" in mods:
                f = np.where(f.astype(np.float64) < x, np.nextafter(f, np.float32(np.inf)), f)
            return _from_f32(f, a.ok), None, None
        if op == "F2I":
            a = V(src[0])
            f = a.f32().astype(np.float64)
            f = np.where(np.isfinite(f), f, 0.0)
            t = np.trunc(f) if ("TRUNC" in mods or not mods & {"FLOOR", "CEIL"}) else f
            if "FLOOR" in mods:
                t = np.floor(f)
            if "CEIL" in mods:
                t = np.ceil(f)
            if "U32" in mods:
                t = np.clip(t, 0, M32)
            else:
                t = np.clip(t, -(1 << 31), (1 << 31) - 1)
            return Val(t.astype(np.int64) & M32, a.ok), None, None
        if op == "MUFU":
            a = V(src[0])
            x = a.f32().astype(np.float64)
            with np.errstate(all="ignore"):
                if "RCP" in mods:
                    fr = 1.0 / x
                elif "RSQ" in mods:
                    fr = 1.0 / np.sqrt(x)
                elif "SQRT" in mods:
                    fr = np.sqrt(x)
                elif "EX2" in mods:
                    fr = np.exp2(x)
                elif "LG2" in mods:
                    fr = np.log2(x)
                else:
                    return None, None, None
            return _from_f32(fr.astype(np.float32), a.ok), None, None
        if op in ("FADD", "FMUL", "FFMA", "FMNMX", "HFMA2", "FRND"):
            return self._float(op, mods, src)
        return None, None, None

    def _float(
        self, op: str, mods: set[str], src: list[str]
    ) -> tuple[Val | None, Val | None, tuple[np.ndarray, np.ndarray] | None]:
        V = self._operand
        if op == "HFMA2":
            # The zero idiom (HFMA2.MMA Rd, -RZ, RZ, 0, 0); other half-precision math unknown.
            if all(s.strip().lstrip("-") in ("RZ", "0", "0.0") for s in src[:4]):
                return Val.const(0), None, None
            return None, None, None
        vals = [V(s) for s in src if not _PRED.match(s)]
        ok = np.ones(1, bool)
        for v in vals:
            ok = ok & v.ok
        if not ok.any():
            return Val.unknown(), None, None
        f = [v.f32().astype(np.float32) for v in vals]
        with np.errstate(all="ignore"):
            if op == "FADD":
                r = f[0] + f[1]
            elif op == "FMUL":
                r = f[0] * f[1]
            elif op == "FFMA":
                r = (f[0].astype(np.float64) * f[1] + f[2]).astype(np.float32)
            elif op == "FMNMX":
                pv, pok = self._pred(src[2])
                r = np.where(pv, np.minimum(f[0], f[1]), np.maximum(f[0], f[1]))
                ok = ok & pok
            elif op == "FRND":
                r = np.trunc(f[0]) if "TRUNC" in mods else np.rint(f[0])
            else:
                return None, None, None
        return _from_f32(np.asarray(r, dtype=np.float32), ok), None, None

    def _special(self, name: str) -> Val:
        name = name.strip()
        axes = {"X": 0, "Y": 1, "Z": 2}
        if name.startswith("SR_TID."):
            return Val(self.tid[axes[name[-1]]].astype(np.int64), np.ones(1, bool))
        if name.startswith("SR_CTAID."):
            return Val(self.ctaid[axes[name[-1]]].astype(np.int64), np.ones(1, bool))
        if name in ("SR_LANEID",):
            return Val(np.arange(self.n, dtype=np.int64) % LANES, np.ones(1, bool))
        if name in ("SRZ", "RZ"):
            return Val.const(0)
        if name in ("SR_CgaCtaId", "SR_SWINHI"):
            return Val.const(0)
        return Val.unknown()

    def _setp_ins(self, op: str, mods: set[str], ops: list[str], lanes: np.ndarray) -> None:
        pd, pq = ops[0], ops[1]
        a, b = self._operand(ops[2]), self._operand(ops[3])
        pc_v, pc_ok = self._pred(ops[4]) if len(ops) > 4 else (np.ones(1, bool),) * 2
        ok = a.ok & b.ok & pc_ok
        cmp = next((m for m in mods if m in _CMP), None)
        if cmp is None:
            self._setp(pd, np.zeros(1, bool), np.zeros(1, bool), lanes)
            self._setp(pq, np.zeros(1, bool), np.zeros(1, bool), lanes)
            return
        if op == "FSETP":
            x, y = a.f32().astype(np.float64), b.f32().astype(np.float64)
            unordered = np.isnan(x) | np.isnan(y)
        elif "U32" in mods:
            x, y = a.v, b.v
            unordered = np.zeros(1, bool)
        else:
            x, y = a.signed(), b.signed()
            unordered = np.zeros(1, bool)
        with np.errstate(invalid="ignore"):
            r = _CMP[cmp](x, y)
        if self._isetp_log is not None and op == "ISETP":
            self._isetp_log.append((np.asarray(x, np.int64), np.asarray(y, np.int64), cmp[:2], r))
        if cmp.endswith("U"):
            r = r | unordered
        else:
            r = r & ~unordered
        comb = next((m for m in mods if m in ("AND", "OR", "XOR")), "AND")
        fn = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}[comb]
        self._setp(pd, fn(r, pc_v), ok, lanes)
        self._setp(pq, fn(~r, pc_v), ok, lanes)


def _first_flip(d0: np.ndarray, dd: np.ndarray, cmp: str) -> np.ndarray:
    """Per lane, the first k >= 1 at which `d0 + k dd  cmp  0` differs from k = 0 (inf: never).
    The difference of a comparison's operands moves by dd an iteration; LT and LE are the
    negations of GE and GT and flip where they do."""
    d0, dd = d0.astype(np.float64), dd.astype(np.float64)
    inf = np.full(d0.shape, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        if cmp in ("EQ", "NE"):
            # Equal now: unequal at k = 1. Unequal: equal where -d0 is a whole number of steps.
            q = -d0 / dd
            hit = (dd != 0) & (d0 != 0) & (q >= 1) & (np.floor(q) == q)
            ks = np.where((d0 == 0) & (dd != 0), 1.0, np.where(hit, q, inf))
        elif cmp in ("GT", "LE"):  # d > 0, integers: d >= 1
            ks = np.where(
                (d0 > 0) & (dd < 0),
                np.ceil(d0 / -dd),
                np.where((d0 <= 0) & (dd > 0), np.floor(-d0 / dd) + 1, inf),
            )
        else:  # GE, LT: d >= 0
            ks = np.where(
                (d0 >= 0) & (dd < 0),
                np.floor(d0 / -dd) + 1,
                np.where((d0 < 0) & (dd > 0), np.ceil(-d0 / dd), inf),
            )
    return np.maximum(ks, 1.0)
