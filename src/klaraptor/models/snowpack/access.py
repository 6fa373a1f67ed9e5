"""Memory access patterns from PTX: how a load's or store's address moves with threadIdx.x.

SNOWPACK's Table 1 counts loads and stores; whether the threads of a warp touch consecutive
addresses (coalesced), one address (uniform) or addresses far apart (strided) is what decides
which block shape suits a kernel (SYRK reads A[j][k] with j along x: strided; GEMM reads B[k][j]:
coalesced), and the paper names memory access patterns among the known performance factors.

A flow-insensitive data-flow analysis over the kernel's PTX gives every register the coefficient
of %tid.x in its value: 0 (independent of x), an integer k (affine in x with a constant
coefficient) or VARIES (scaled by a run-time value, or through a non-linear operation or a
loaded value). A register written in several places takes the join of its values (equal
coefficients stay, anything else varies), so loops converge. A global (or generic) access is
coalesced when its byte address moves by at most 16 bytes per thread along x, uniform when it
does not move, strided otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klaraptor.isa.analysis import KernelISA, PtxRecord

VARIES = "varies"
Coef = int | str  # 0, an integer coefficient of tid.x, or VARIES

# The access pattern features (counts of PTX instructions; they enter as log(1 + count)).
ACCESS: tuple[str, ...] = (
    "ld_coalesced",  # global/generic loads moving <= 16 bytes per thread along x
    "ld_uniform",  # ... not moving with x (one address per warp row: a broadcast)
    "ld_strided",  # ... moving further, or irregularly (indirect, non-linear)
    "ld_coalesced_loop",  # coalesced loads inside a loop
    "ld_strided_loop",  # strided loads inside a loop
    "st_coalesced",
    "st_strided",  # global/generic stores that are not coalesced
    "lds_strided",  # shared loads moving by more than one bank word per thread (conflicts)
)
_COALESCED_BYTES = 16
_BANK_BYTES = 8
_AFFINE_OPS = {"add", "sub", "mul", "mad", "shl", "mov", "cvta", "cvt"}


def _join(a: Coef, b: Coef) -> Coef:
    if a == b:
        return a
    if a == 0:
        return b
    if b == 0:
        return a
    return VARIES


def _imm(x: str) -> int | None:
    try:
        return int(x, 0)
    except ValueError:
        return None


def _scale(a: Coef, m: int) -> Coef:
    return a * m if isinstance(a, int) else VARIES


def _add(a: Coef, b: Coef, sign: int = 1) -> Coef:
    if isinstance(a, int) and isinstance(b, int):
        return a + sign * b
    return VARIES


def _mul(a: Coef, b: Coef, ma: int | None, mb: int | None) -> Coef:
    if mb is not None:
        return _scale(a, mb)
    if ma is not None:
        return _scale(b, ma)
    return 0 if a == 0 and b == 0 else VARIES


def _address(operand: str) -> str:
    """The register of a PTX address operand `[%rd4+8]` (or the symbol)."""
    inner = operand.strip("[] ")
    return inner.split("+")[0].split("-")[0].strip()


class _Coefs:
    def __init__(self) -> None:
        self.of: dict[str, Coef] = {}

    def get(self, operand: str) -> Coef:
        if operand.startswith("%tid.x") or operand.startswith("%laneid"):
            return 1
        return self.of.get(operand, 0)

    def value(self, rec: PtxRecord) -> Coef | None:
        """The coefficient the instruction writes to its first operand (None: writes nothing we
        track)."""
        ins = rec.ins
        ops = ins.operands
        if not ops or ins.op in {"st", "bra", "bar", "ret", "setp", "call"}:
            return None
        srcs = ops[1:]
        if ins.op == "ld" or ins.op == "atom":
            addr = self.get(_address(srcs[0])) if srcs else 0
            return 0 if addr == 0 or rec.space in ("param", "const") else VARIES
        vals = [self.get(s) for s in srcs]
        imms = [_imm(s) for s in srcs]
        if ins.op in _AFFINE_OPS and "hi" not in ins.mods and vals:
            if ins.op in ("mov", "cvta", "cvt"):
                return vals[0]
            if ins.op == "add" and len(vals) == 2:
                return _add(vals[0], vals[1])
            if ins.op == "sub" and len(vals) == 2:
                return _add(vals[0], vals[1], -1)
            if ins.op == "shl" and len(vals) == 2:
                return _scale(vals[0], 2 ** imms[1]) if imms[1] is not None else _any(vals)
            if ins.op in ("mul", "mad") and len(vals) >= 2:
                prod = _mul(vals[0], vals[1], imms[0], imms[1])
                return _add(prod, vals[2]) if ins.op == "mad" and len(vals) == 3 else prod
        return _any(vals)

    def solve(self, records: Sequence[PtxRecord]) -> None:
        for _ in range(64):
            changed = False
            for rec in records:
                v = self.value(rec)
                if v is None:
                    continue
                dst = rec.ins.operands[0]
                new = _join(self.of.get(dst, 0), v) if dst in self.of else v
                if new != self.of.get(dst):
                    self.of[dst] = new
                    changed = True
            if not changed:
                return


def _any(vals: Iterable[Coef]) -> Coef:
    return 0 if all(v == 0 for v in vals) else VARIES


def _moves(c: Coef, limit: int) -> str:
    if c == 0:
        return "uniform"
    if isinstance(c, int) and abs(c) <= limit:
        return "coalesced"
    return "strided"


def access_features(isa: KernelISA) -> dict[str, float]:
    """Counts of loads and stores by how their addresses move along threadIdx.x (`ACCESS`)."""
    coefs = _Coefs()
    coefs.solve(isa.ptx)
    out = dict.fromkeys(ACCESS, 0.0)
    for rec in isa.ptx:
        ins = rec.ins
        if ins.op not in ("ld", "st") or not ins.operands:
            continue
        operand = ins.operands[1] if ins.op == "ld" else ins.operands[0]
        if not operand.startswith("["):
            continue
        c = coefs.get(_address(operand))
        if rec.space == "shared" and ins.op == "ld":
            out["lds_strided"] += _moves(c, _BANK_BYTES) == "strided"
        if rec.space not in ("global", "generic"):
            continue
        kind = _moves(c, _COALESCED_BYTES)
        if ins.op == "ld":
            out[f"ld_{kind}"] += 1
            if rec.depth > 0 and kind != "uniform":
                out[f"ld_{kind}_loop"] += 1
        else:
            out["st_coalesced" if kind == "coalesced" else "st_strided"] += 1
    return out


__all__ = ["ACCESS", "VARIES", "access_features"]
