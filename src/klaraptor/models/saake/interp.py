"""Trip counts from the kernel's parameters, without hardware counters: the control flow of a
kernel's SASS run for sampled warps (SAAKE §4.4: "for if-then-else conditions and loop bounds
that are dependent on known parameters, emulated instructions reflect actual executed
instructions").

`warp_counts` runs one warp of one block through the SASS CFG, 32 lanes at a time (NumPy), with
the values the kernel sees: its parameters (from the spec's `make_args` at D; pointers get
distinct made-up addresses), blockDim, gridDim, threadIdx and blockIdx. Integer, predicate and
the float instructions of integer-division idioms are interpreted; anything loaded from memory,
and whatever is computed from it, is unknown. Divergence follows a SIMT stack that reconverges at
the immediate post-dominator; a lane that exits leaves. The result is how often the warp ran
each basic block (any lane active: the warp-level count Nsight Compute's instruction counters
see), which `counts_from_parameters` turns into the emulator's count classes (`tripcounts`),
averaged over sampled warps (`sample_warps`: the blocks at the grid's edges and between them, and
in each the warps at the block's edges and between, weighted by what they stand for).

Long loops are not run iteration by iteration: once three consecutive visits of a loop header
by the same warp state show the same path, the same active lanes and every register moving by a
fixed step, the loop is fast-forwarded by the largest number of iterations after which one more
iteration from the extrapolated state still takes that path (found by doubling, then bisection).

A branch on an unknown value (data-dependent control flow): an if-then-else runs both sides with
every lane, as SAAKE does; a branch whose one side calls a routine (ptxas' slow paths of
division and square root, taken on special operands) does not take it; a loop whose exit depends
on data cannot be counted, and the kernel needs counters (`DataDependent`). Instructions the
interpreter does not know make their results unknown, so they matter only when a branch depends
on them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.isa.analysis import KernelISA
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
_CONST = re.compile(r"^c\[0x([0-9a-fA-F]+)\]\[0x([0-9a-fA-F]+)\]$")
_NOOPS = frozenset(
    "BSSY BSYNC BREAK WARPSYNC NOP BAR DEPBAR YIELD MEMBAR FENCE ERRBAR CCTL BPT NANOSLEEP "
    "ACQBULK".split()
)
MAX_STEPS = 2_000_000  # executed blocks per warp before giving up


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


@dataclass
class Launch:
    """What a warp sees: block shape, grid shape and the constant bank's parameter words."""

    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    params: dict[int, int]  # constant-bank offset -> 32-bit word


def param_words(args: Sequence[Any]) -> dict[int, int]:
    """The constant-bank words of a kernel's arguments (`make_args(..., device=False)`):
    arrays are pointers (8 bytes, distinct made-up addresses), NumPy scalars their own size,
    each aligned to its size, from `PARAM_BASE`."""
    words: dict[int, int] = {}
    off = PARAM_BASE
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray) or hasattr(a, "__array_interface__") and np.ndim(a) > 0:
            size, raw = 8, 0x7F00_0000_0000 + (k << 36)
        else:
            arr = np.asarray(a)
            if arr.dtype.kind not in "iuf" or arr.ndim != 0:
                raise KlaraptorError(f"argument {k}: {type(a).__name__} is not a scalar or array")
            size = max(int(arr.dtype.itemsize), 4)
            raw = int(arr.astype(arr.dtype.newbyteorder("<")).view(f"<u{arr.dtype.itemsize}"))
        off = (off + size - 1) // size * size
        for w in range(size // 4):
            words[off + 4 * w] = (raw >> (32 * w)) & M32
        off += size
    return words


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


@dataclass
class _Entry:
    """One SIMT-stack entry: the next block, its lanes, where they reconverge."""

    block: int
    mask: np.ndarray
    rpc: int | None  # block at which this entry ends (pops), None: never


@dataclass
class WarpRun:
    """How often the warps of a run ran each basic block (weighted), and what the run met."""

    counts: np.ndarray
    data_branches: int = 0  # if-then-else on unknown values, both sides run
    skipped_calls: int = 0  # routine calls on unknown values, not taken
    fast_forwarded: int = 0  # loop iterations counted without running them
    steps: int = 0


@dataclass
class _State:
    regs: dict[str, Val] = field(default_factory=dict)
    preds: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def copy(self) -> _State:
        return _State(
            {k: Val(v.v.copy(), v.ok.copy()) for k, v in self.regs.items()},
            {k: (a.copy(), b.copy()) for k, (a, b) in self.preds.items()},
        )


class WarpInterpreter:
    """The control flow of one kernel's SASS for given launch values (module docstring)."""

    def __init__(self, isa: KernelISA, *, fast_forward: bool = True) -> None:
        cfg = isa.sass_cfg
        self.fast_forward = fast_forward
        if cfg is None:
            raise KlaraptorError(f"{isa.name}: no SASS control-flow graph")
        if cfg.unresolved or cfg.recursive:
            raise DataDependent(f"{isa.name}: indirect branches or recursion")
        self.isa, self.cfg = isa, cfg
        self.ins = isa.instructions
        self.ipdom = _post_dominators(cfg, self.ins)
        self.headers = {lp.header: lp for lp in cfg.loops}
        self.in_loop = {lp.header: set(lp.blocks) for lp in cfg.loops}
        self.by_addr = {ins.addr: i for i, ins in enumerate(self.ins)}
        self.params_at: dict[tuple[int, ...], dict[int, int]] = {}  # D -> parameter words

    # -- warps ----------------------------------------------------------------------------------

    def run(
        self,
        launch: Launch,
        warps: Sequence[tuple[tuple[int, int, int], int]],
        weights: Sequence[float] | None = None,
    ) -> WarpRun:
        """Run the warps `warps` ((blockIdx, warp index in its block)) together, each in its own
        32 lanes; `counts` is how many of them (weighted) ran each basic block."""
        bx, by, bz = launch.block
        threads = bx * by * bz
        n = LANES * len(warps)
        lane = np.arange(n) % LANES
        t = np.repeat(np.array([w for _, w in warps], dtype=np.int64), LANES) * LANES + lane
        active = t < threads
        self.launch = launch
        ct = np.array([c for c, _ in warps], dtype=np.int64)
        self.ctaid = tuple(np.repeat(ct[:, k], LANES) for k in range(3))
        self.tid = (t % bx, (t // bx) % by, t // (bx * by))
        self.n = n
        self.wweight = np.asarray(weights if weights is not None else [1.0] * len(warps), float)
        self.state = _State()
        out = WarpRun(np.zeros(len(self.cfg.blocks)))
        self.alive = active.copy()
        self._run_from(0, active, out, depth=0)
        return out

    def _warps(self, mask: np.ndarray) -> float:
        """The weighted number of warps with a lane in `mask`."""
        return float(self.wweight @ mask.reshape(-1, LANES).any(axis=1))

    def _run_from(self, start: int, mask: np.ndarray, out: WarpRun, depth: int) -> np.ndarray:
        """Run from block `start` until every lane has exited or returned: a SIMT stack whose
        diverged entries reconverge at the branch's immediate post-dominator. The lanes that
        returned (RET) come back."""
        stack = [_Entry(start, mask.copy(), None)]
        returned = np.zeros(self.n, dtype=bool)
        history: dict[tuple[int, int], list[tuple[_State, np.ndarray, tuple]]] = {}
        # (stack level, loop header) -> (block, weighted warps) run since the header's last visit
        path: dict[tuple[int, int], list[tuple[int, float]]] = {}
        while stack:
            e = stack[-1]
            e.mask &= self.alive & ~returned
            if not e.mask.any() or (e.rpc is not None and e.block == e.rpc):
                stack.pop()  # its lanes are in the entry below, which waits at the rpc
                continue
            out.steps += 1
            if out.steps > MAX_STEPS:
                raise DataDependent(f"{self.isa.name}: more than {MAX_STEPS} blocks in one run")
            b = e.block
            if b in self.headers and self.fast_forward:
                self._maybe_fast_forward(e, len(stack), history, path, out)
                path[(len(stack), b)] = []
            wcount = self._warps(e.mask)
            for pth in path.values():
                pth.append((b, wcount))
            out.counts[b] += wcount
            nxt = self._block(b, e, out, depth, returned)
            if not nxt:
                continue
            if len(nxt) == 1:
                e.block, e.mask = nxt[0]
                continue
            # Divergence: this entry waits at the reconvergence block with the union of the
            # sides' lanes; one entry per side runs first.
            r = self.ipdom.get(b)
            union = np.zeros(self.n, dtype=bool)
            for _, m in nxt:
                union |= m
            if r is None:
                stack.pop()
            else:
                e.block, e.mask = r, union
            for blk, m in reversed(nxt):
                if m.any():
                    stack.append(_Entry(blk, m, r))
        return returned

    def _block(
        self, b: int, e: _Entry, out: WarpRun, depth: int, returned: np.ndarray
    ) -> list[tuple[int, np.ndarray]]:
        """Execute block b with e's lanes; the successors [(block, lanes)] ([] when none)."""
        blk = self.cfg.blocks[b]
        mask = e.mask
        for i in range(blk.start, blk.end):
            ins = self.ins[i]
            op = ins.opcode
            guard = self._guard(ins, mask)
            if op in ("EXIT", "RET"):
                if isinstance(guard, str):
                    raise DataDependent(f"{self.isa.name}: an {op.lower()} depends on data")
                if op == "EXIT":
                    self.alive &= ~guard
                else:
                    returned |= guard
                mask = mask & ~guard
                if not mask.any():
                    e.mask = mask
                    return []
                continue
            if op == "CALL":
                target = self.by_addr.get(ins.target) if ins.target is not None else None
                if target is None:
                    raise DataDependent(f"{self.isa.name}: a call to an unknown target")
                if isinstance(guard, str):
                    out.skipped_calls += 1
                    continue
                if guard.any() and depth < 4:
                    self._run_from(self.cfg.block_of[target], guard, out, depth + 1)
                continue
            if op in ("BRA", "JMP"):
                target = self.by_addr.get(ins.target) if ins.target is not None else None
                if target is None:
                    raise DataDependent(f"{self.isa.name}: an indirect branch")
                tb = self.cfg.block_of[target]
                fall = [x for x in blk.succs if x != tb] or [tb]
                if isinstance(guard, str):
                    return self._data_branch(b, tb, fall[0], mask, out)
                taken, rest = mask & guard, mask & ~guard
                if not rest.any():
                    return [(tb, taken)]
                if not taken.any():
                    return [(fall[0], rest)]
                return [(tb, taken), (fall[0], rest)]
            if op in _NOOPS:
                continue
            if isinstance(guard, str):
                # A write under a predicate that depends on data: its lanes become unknown.
                for d in self._dsts(ins):
                    self._set(d, None, mask)
                continue
            if guard.any():
                self._exec(ins, guard)
        e.mask = mask
        if not blk.succs:
            return []
        return [(blk.succs[0], mask)]

    def _data_branch(
        self, b: int, taken: int, fall: int, mask: np.ndarray, out: WarpRun
    ) -> list[tuple[int, np.ndarray]]:
        for lp in self.cfg.loops:
            if b not in lp.blocks:
                continue
            inside = self.in_loop[lp.header]
            if (taken in inside) != (fall in inside):
                addr = self.ins[self.cfg.blocks[lp.header].start].addr
                raise DataDependent(f"{self.isa.name}: the loop at {addr:#x} exits on data")
        for side, other in ((taken, fall), (fall, taken)):
            if self._calls(side) and not self._calls(other):
                out.skipped_calls += 1
                return [(other, mask)]
        out.data_branches += 1
        return [(taken, mask.copy()), (fall, mask.copy())]

    def _calls(self, b: int) -> bool:
        blk = self.cfg.blocks[b]
        return any(self.ins[i].opcode == "CALL" for i in range(blk.start, blk.end))

    # -- loops ---------------------------------------------------------------------------------

    def _maybe_fast_forward(
        self,
        e: _Entry,
        level: int,
        history: dict[tuple[int, int], list[tuple[_State, np.ndarray, tuple]]],
        path: dict[tuple[int, int], list[tuple[int, float]]],
        out: WarpRun,
    ) -> None:
        key = (level, e.block)
        seen = history.setdefault(key, [])
        seen.append((self.state.copy(), e.mask.copy(), tuple(path.get(key, []))))
        if len(seen) > 3:
            seen.pop(0)
        if len(seen) < 3:
            return
        (s1, m1, _), (s2, m2, p2), (s3, m3, p3) = seen
        if not (np.array_equal(m1, m2) and np.array_equal(m2, m3)) or p2 != p3 or not p3:
            return
        blocks = tuple(blk for blk, _ in p3)
        if blocks[0] != e.block or any(x not in self.in_loop[e.block] for x in blocks):
            return
        step = _steady_step(s1, s2, s3, self.n)
        if step is None:
            return
        k = self._iterations_ahead(s3, step, e, blocks)
        if k <= 0:
            return
        self.state = _advance(s3, step, k)
        for blk, w in p3:
            out.counts[blk] += k * w
        out.fast_forwarded += k
        seen.clear()

    def _iterations_ahead(
        self, s3: _State, step: dict[str, np.ndarray], e: _Entry, want: tuple[int, ...]
    ) -> int:
        """The largest k such that one more iteration from s3 advanced k steps still takes the
        path `want` with e's lanes (doubling, then bisection)."""

        def same(k: int) -> bool:
            return self._probe(_advance(s3, step, k), e, want)

        hi = 1
        while hi < (1 << 40) and same(hi):
            hi *= 2
        lo = hi // 2
        if lo == 0:
            return 0
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if same(mid) else (lo, mid)
        return lo

    def _probe(self, state: _State, e: _Entry, want: tuple[int, ...]) -> bool:
        """Whether one iteration from `state` takes the path `want` and keeps every lane (an
        iteration that diverges, exits or meets data is not the steady one)."""
        saved, alive = self.state, self.alive
        self.state, self.alive = state.copy(), self.alive.copy()
        try:
            b, mask = e.block, e.mask.copy()
            sink = WarpRun(np.zeros(len(self.cfg.blocks)))
            for expect in want:
                if b != expect:
                    return False
                probe = _Entry(b, mask, None)
                nxt = self._block(b, probe, sink, 0, np.zeros(self.n, dtype=bool))
                if len(nxt) != 1 or not np.array_equal(nxt[0][1], e.mask):
                    return False
                if sink.data_branches or sink.skipped_calls:
                    return False
                b, mask = nxt[0]
            return b == e.block
        except DataDependent:
            return False
        finally:
            self.state, self.alive = saved, alive

    # -- instructions --------------------------------------------------------------------------

    def _guard(self, ins: Instruction, mask: np.ndarray) -> np.ndarray | str:
        if ins.pred is None or (ins.pred in ("PT", "UPT") and not ins.pred_neg):
            return mask.copy()
        val, ok = self._pred(ins.pred)
        if not np.broadcast_to(ok, mask.shape)[mask].all():
            return "unknown"
        return mask & (~val if ins.pred_neg else val)

    def _pred(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        neg = name.startswith("!")
        name = name.lstrip("!")
        if name in ("PT", "UPT"):
            v, ok = np.ones(1, dtype=bool), np.ones(1, dtype=bool)
        else:
            v, ok = self.state.preds.get(name, (np.zeros(1, bool), np.zeros(1, bool)))
        return (~v if neg else v), ok

    def _dsts(self, ins: Instruction) -> list[str]:
        out = []
        for o in ins.operands[:2]:
            m = _REG.match(o.strip())
            if m and m.group(1) not in ("RZ", "URZ", "SRZ"):
                out.append(m.group(1))
            elif _PRED.match(o.strip()) and o.strip().lstrip("!") not in ("PT", "UPT"):
                out.append(o.strip())
            if out and not _PRED.match(o.strip()):
                break
        return out

    def _set(self, name: str, val: Val | None, lanes: np.ndarray, wide: bool = False) -> None:
        if name.lstrip("!").startswith(("P", "UP")):
            old_v, old_ok = self.state.preds.get(name, (np.zeros(1, bool), np.zeros(1, bool)))
            self.state.preds[name] = (np.broadcast_to(old_v, lanes.shape).copy(), old_ok & ~lanes)
            return
        old = self.state.regs.get(name, Val.unknown())
        if val is None:
            self.state.regs[name] = Val(old.v.copy(), old.ok & ~lanes)
        else:
            self.state.regs[name] = Val(
                np.where(lanes, val.v & M32, old.v), np.where(lanes, val.ok, old.ok)
            )

    def _setp(self, name: str, v: np.ndarray, ok: np.ndarray, lanes: np.ndarray) -> None:
        if name in ("PT", "UPT"):
            return
        old_v, old_ok = self.state.preds.get(name, (np.zeros(1, bool), np.zeros(1, bool)))
        self.state.preds[name] = (np.where(lanes, v, old_v), np.where(lanes, ok, old_ok))

    def _reg(self, name: str) -> Val:
        if name in ("RZ", "URZ", "SRZ"):
            return Val.const(0)
        return self.state.regs.get(name, Val.unknown())

    def _operand(self, text: str) -> Val:
        s = text.strip()
        neg = notb = absv = False
        if s.startswith("|") and s.endswith("|"):
            s, absv = s[1:-1], True
        if s.startswith("-"):
            neg, s = True, s[1:]
        elif s.startswith("~"):
            notb, s = True, s[1:]
        if s.startswith("|") and s.endswith("|"):
            s, absv = s[1:-1], True
        m = _REG.match(s)
        if m:
            mods = m.group(2)
            if any(x in mods for x in (".H0", ".H1", ".B")):
                return Val.unknown()
            v = self._reg(m.group(1))
        elif _IMM.match(s):
            v = Val.const(int(s, 0))
        elif _FIMM.match(s):
            f = float(s.replace("QNAN", "nan"))
            v = _from_f32(np.full(1, f, dtype=np.float32), np.ones(1, bool))
        else:
            cm = _CONST.match(s)
            if cm is None:
                return Val.unknown()
            bank, off = int(cm.group(1), 16), int(cm.group(2), 16)
            v = self._const(bank, off)
        if absv:
            sv = v.signed()
            v = Val(np.abs(sv) & M32, v.ok)
        if neg:
            v = Val((-v.v) & M32, v.ok)
        if notb:
            v = Val((~v.v) & M32, v.ok)
        return v

    def _const(self, bank: int, off: int) -> Val:
        if bank != 0:
            return Val.unknown()
        if off in _NTID:
            return Val.const(self.launch.block[_NTID[off]])
        if off in _NCTAID:
            return Val.const(self.launch.grid[_NCTAID[off]])
        if off in self.launch.params:
            return Val.const(self.launch.params[off])
        return Val.unknown()

    def _pair(self, text: str) -> tuple[Val, Val]:
        """A 64-bit operand: a register pair, or a constant/immediate sign- or zero-extended."""
        s = text.strip()
        m = _REG.match(s.lstrip("-"))
        if m and m.group(1) not in ("RZ", "URZ"):
            name = m.group(1)
            idx = int(re.sub(r"\D", "", name))
            hi_name = f"{'UR' if name.startswith('UR') else 'R'}{idx + 1}"
            return self._reg(name), self._reg(hi_name)
        cm = _CONST.match(s)
        if cm:
            bank, off = int(cm.group(1), 16), int(cm.group(2), 16)
            return self._const(bank, off), self._const(bank, off + 4)
        lo = self._operand(s)
        return lo, Val.const(0)

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
        # Optional predicate outputs (carries, LOP3's test) come after the first destination.
        dst = ops[0]
        pout = []
        rest = ops[1:]
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
                c = (c_hi.v.astype(np.uint64) << np.uint64(32)) | c_lo.v.astype(np.uint64)
                tot = prod + c
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
            res = sum(v.v for v in vals)
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
                    s = int(src[2], 0)
                    wide = a.signed().astype(np.uint64) << np.uint64(s)
                    ok = known(a, b)
                else:
                    c, s = V(src[2]), int(src[3], 0)
                    cat = (c.v.astype(np.uint64) << np.uint64(32)) | a.v.astype(np.uint64)
                    wide = cat << np.uint64(s)
                    ok = known(a, b, c)
                res = ((wide >> np.uint64(32)) & np.uint64(M32)).astype(np.int64) + b.v
                if "X" in mods:
                    p = [x for x in src if _PRED.match(x)]
                    if p:
                        pv, pok = self._pred(p[-1])
                        res = res + pv.astype(np.int64)
                        ok = ok & pok
                return Val(res & M32, ok), None, None
            a, b, s = V(src[0]), V(src[1]), int(src[2], 0)
            res = ((a.v << s) & M32) + b.v
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
                    r = 1.0 / x
                elif "RSQ" in mods:
                    r = 1.0 / np.sqrt(x)
                elif "SQRT" in mods:
                    r = np.sqrt(x)
                elif "EX2" in mods:
                    r = np.exp2(x)
                elif "LG2" in mods:
                    r = np.log2(x)
                else:
                    return None, None, None
            return _from_f32(r.astype(np.float32), a.ok), None, None
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
        if cmp.endswith("U"):
            r = r | unordered
        else:
            r = r & ~unordered
        comb = next((m for m in mods if m in ("AND", "OR", "XOR")), "AND")
        fn = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}[comb]
        self._setp(pd, fn(r, pc_v), ok, lanes)
        self._setp(pq, fn(~r, pc_v), ok, lanes)


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


def _steady_step(s1: _State, s2: _State, s3: _State, n: int) -> dict[str, np.ndarray] | None:
    """Per register, the fixed step between three states of `n` lanes (None unless every
    register moves by the same step twice, its known lanes unchanged, and every predicate stays
    as it was)."""
    step = {}
    for name in set(s1.regs) | set(s2.regs) | set(s3.regs):
        a, b, c = (s.regs.get(name, Val.unknown()) for s in (s1, s2, s3))
        oks = [np.broadcast_to(x.ok, (n,)) for x in (a, b, c)]
        if not (np.array_equal(oks[0], oks[1]) and np.array_equal(oks[1], oks[2])):
            return None
        va, vb, vc = (np.broadcast_to(x.v, (n,)) for x in (a, b, c))
        d1, d2 = (vb - va) & M32, (vc - vb) & M32
        if not np.array_equal(d1[oks[2]], d2[oks[2]]):
            return None
        step[name] = np.where(oks[2], d2, 0)
    for name in set(s1.preds) | set(s2.preds) | set(s3.preds):
        none = (np.zeros(1, bool), np.zeros(1, bool))
        ps = [s.preds.get(name, none) for s in (s1, s2, s3)]
        for (v1, o1), (v2, o2) in zip(ps, ps[1:], strict=False):
            o1, o2 = np.broadcast_to(o1, (n,)), np.broadcast_to(o2, (n,))
            v1, v2 = np.broadcast_to(v1, (n,)), np.broadcast_to(v2, (n,))
            if not np.array_equal(o1, o2) or not np.array_equal(v1[o1], v2[o2]):
                return None
    return step


def _advance(s: _State, step: Mapping[str, np.ndarray], k: int) -> _State:
    out = s.copy()
    for name, d in step.items():
        if name in out.regs and d.any():
            r = out.regs[name]
            out.regs[name] = Val((r.v + d * k) & M32, r.ok)
    return out


def _post_dominators(cfg: Any, ins: Sequence[Instruction]) -> dict[int, int | None]:
    """Immediate post-dominator of every reachable block, per routine (None: the exit)."""
    blocks = [b.index for b in cfg.blocks if b.root is not None]
    exit_node = -1
    succ: dict[int, list[int]] = {}
    for b in blocks:
        blk = cfg.blocks[b]
        last = ins[blk.end - 1] if blk.end > blk.start else None
        s = [x for x in blk.succs if cfg.blocks[x].root == blk.root]
        ends = last is not None and last.opcode in ("EXIT", "RET") and not last.guarded
        succ[b] = [exit_node] if ends or not s else s
        if last is not None and last.opcode in ("EXIT", "RET") and last.guarded:
            succ[b] = [*s, exit_node]
    nodes = [*blocks, exit_node]
    pdom: dict[int, set[int]] = {n: set(nodes) for n in blocks}
    pdom[exit_node] = {exit_node}
    changed = True
    while changed:
        changed = False
        for b in reversed(blocks):
            inter = set.intersection(*(pdom[s] for s in succ[b])) if succ[b] else set()
            new = inter | {b}
            if new != pdom[b]:
                pdom[b] = new
                changed = True
    out: dict[int, int | None] = {}
    for b in blocks:
        cands = pdom[b] - {b}
        # The immediate one: the candidate post-dominated by every other candidate.
        ipd = None
        for c in cands:
            if all(o == c or o in pdom[c] for o in cands):
                ipd = c
                break
        out[b] = None if ipd in (None, exit_node) else ipd
    return out


# ---------------------------------------------------------------------------------------------
# The grid: sampled warps, averaged into the count classes


@dataclass
class ParameterCounts:
    """Per-warp class counts derived from the parameters (or why they cannot be)."""

    counts: np.ndarray | None
    warps: int = 0
    data_branches: int = 0
    skipped_calls: int = 0
    fast_forwarded: int = 0
    reason: str = ""


def _edges(n: int, inner: int) -> list[tuple[int, float]]:
    """Positions 0..n-1 as (index, weight): the first and the last with weight 1, and `inner`
    evenly spaced ones between, which stand for the rest (all of them when n is small)."""
    if n <= inner + 2:
        return [(i, 1.0) for i in range(n)]
    mids = [1 + int((t + 0.5) * (n - 2) / inner) for t in range(inner)]
    return [(0, 1.0), *((m, (n - 2) / inner) for m in mids), (n - 1, 1.0)]


def sample_warps(
    grid: tuple[int, int, int], warps_per_block: int, max_warps: int = 256
) -> list[tuple[tuple[int, int, int], int, float]]:
    """(blockIdx, warp, weight) of the sampled warps, at most about `max_warps` (run together):
    every warp of each sampled block, and in each grid dimension the first and the last block
    and as many evenly spaced between as the budget allows, each weighted by how many blocks it
    stands for. The weighted mean is the mean over every warp, which is what the counters
    report: exactly when blocks differ only at the grid's edges (bounds checks, partial tiles),
    to the spacing of the samples where they change inside the grid (threads j <= k exit), and
    to first order where they change linearly (a triangular loop)."""
    budget = max(1, max_warps // max(warps_per_block, 1))

    def sizes(inner: int) -> int:
        return int(np.prod([min(g, inner + 2) for g in grid]))

    inner = 0
    while sizes(inner + 1) <= budget and sizes(inner + 1) > sizes(inner):
        inner += 1
    out = []
    for x, wx in _edges(grid[0], inner):
        for y, wy in _edges(grid[1], inner):
            for z, wz in _edges(grid[2], inner):
                out += [((x, y, z), w, wx * wy * wz) for w in range(warps_per_block)]
    return out


def counts_from_parameters(
    interp: WarpInterpreter,
    classes: Sequence[Any],
    spec: Any,
    D: Any,
    block: tuple[int, int, int],
    *,
    max_warps: int = 256,
) -> ParameterCounts:
    """The class counts per warp of `spec` at D with `block`: the weighted mean over the sampled
    warps (`sample_warps`), run together."""
    Dm = dict(zip(spec.data_names, (int(v) for v in D.values())))
    key = tuple(Dm.values())
    params = interp.params_at.get(key)
    if params is None:
        try:
            args = spec.make_args(spec.size(Dm), np.random.default_rng(0), device=False)
            params = interp.params_at[key] = param_words(args)
        except Exception as exc:  # noqa: BLE001 - a spec whose arguments cannot be made here
            return ParameterCounts(None, reason=f"arguments: {exc}")
    bx, by, bz = block
    gx, gy, gz = (int(v) for v in spec.grid_arrays(Dm, float(bx), float(by), float(bz)))
    launch = Launch(block, (gx, gy, gz), params)
    wpb = -(-(bx * by * bz) // LANES)
    picks = sample_warps((gx, gy, gz), wpb, max_warps)
    try:
        run = interp.run(launch, [(c, w) for c, w, _ in picks], [w for _, _, w in picks])
    except DataDependent as exc:
        return ParameterCounts(None, reason=str(exc))
    out = ParameterCounts(
        None,
        data_branches=run.data_branches,
        skipped_calls=run.skipped_calls,
        fast_forwarded=run.fast_forwarded,
    )
    per_block = run.counts / sum(w for _, _, w in picks)
    x = np.zeros(len(classes))
    for k, c in enumerate(classes):
        x[k] = max((per_block[b] for b in c.blocks), default=0.0)
    out.counts, out.warps = x, len(picks)
    return out


def instructions_per_warp(interp: WarpInterpreter, per_block: np.ndarray) -> float:
    """Warp instructions per warp for block counts (NOPs excluded, as the counters see them)."""
    sizes = np.array(
        [
            sum(1 for i in range(b.start, b.end) if interp.ins[i].opcode != "NOP")
            for b in interp.cfg.blocks
        ]
    )
    return float(per_block @ sizes)


__all__ = [
    "DataDependent",
    "Launch",
    "ParameterCounts",
    "WarpInterpreter",
    "WarpRun",
    "counts_from_parameters",
    "instructions_per_warp",
    "param_words",
    "sample_warps",
]
