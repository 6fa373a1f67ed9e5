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

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.isa.analysis import KernelISA
from klaraptor.isa.sass import Instruction
from klaraptor.models.saake.interp_ops import (
    _CONST,
    _FIMM,
    _IMM,
    _NCTAID,
    _NOOPS,
    _NTID,
    _PRED,
    _REG,
    LANES,
    M32,
    MAX_STEPS,
    PARAM_BASE,
    PROBE_BLOCKS,
    DataDependent,
    OpcodeSemantics,
    Val,
    _first_flip,
    _from_f32,
)


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


class WarpInterpreter(OpcodeSemantics):
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
        # While a loop is probed: every integer comparison's operands, in order.
        self._isetp_log: list[tuple[np.ndarray, np.ndarray, str, np.ndarray]] | None = None

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

    def _run_from(self, start: int, mask: np.ndarray, out: WarpRun, depth: int) -> np.ndarray:
        """Run from block `start` until every lane has exited or returned: a SIMT stack whose
        diverged entries reconverge at the branch's immediate post-dominator. The lanes that
        returned (RET) come back."""
        stack = [_Entry(start, mask.copy(), None)]
        returned = np.zeros(self.n, dtype=bool)
        history: dict[tuple[int, int], list[tuple[_State, np.ndarray, tuple, list]]] = {}
        # (stack level, loop header) -> (block, times each warp ran it) since the header's visit
        path: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
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
            # asarray: numpy's stubs type any(axis=1) as possibly a scalar; here it is an array
            ran = np.asarray(e.mask.reshape(-1, LANES).any(axis=1).astype(np.float64))
            for pth in path.values():
                pth.append((b, ran))
            out.counts[b] += float(self.wweight @ ran)
            nxt = self._block(b, e, out, depth, returned)
            if not nxt:
                continue
            if len(nxt) == 1:
                e.block, e.mask = nxt[0]
                continue
            # Divergence: this entry waits at the reconvergence block with the union of the
            # sides' lanes; one entry per side runs first. Where the branch reconverges where
            # this entry does anyway (a loop's exit), the lanes that go there are done with it
            # and the others replace it, so that a loop whose lanes leave one by one does not
            # stack an entry per iteration.
            r = self.ipdom.get(b)
            union = np.zeros(self.n, dtype=bool)
            for _, m in nxt:
                union |= m
            if r is None or r == e.rpc:
                stack.pop()
                nxt = [(blk, m) for blk, m in nxt if blk != r]
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
        history: dict[tuple[int, int], list[tuple[_State, np.ndarray, tuple, list]]],
        path: dict[tuple[int, int], list[tuple[int, np.ndarray]]],
        out: WarpRun,
    ) -> None:
        """At a loop header: after three visits whose last two iterations took the same path
        (lanes may have left between them; loops inside may have been skipped) with every
        register of the lanes still here moving by a fixed step, skip each lane's iterations up
        to its own last one on that path (`_iterations_ahead`), counting what each warp would
        have run: its skipped iterations (its longest lane's) times what it ran in the last one.
        The enclosing loops' paths get those counts too."""
        key = (level, e.block)
        seen = history.setdefault(key, [])
        events = list(path.get(key, []))
        seen.append((self.state.copy(), e.mask.copy(), tuple(b for b, _ in events), events))
        if len(seen) > 3:
            seen.pop(0)
        if len(seen) < 3:
            return
        (s1, m1, _, _), (s2, m2, p2, _), (s3, m3, p3, ev3) = seen
        if p2 != p3 or not p3 or p3[0] != e.block:
            return
        if any(x not in self.in_loop[e.block] for x in p3) or (m3 & ~m1).any():
            return
        step = _steady_step(s1, s2, s3, self.n, m3)
        ks = self._iterations_ahead(s3, step, e, p3)
        if ks is None:
            return
        self.state = _advance(s3, step, ks)
        # A warp runs the loop's blocks as long as any of its lanes does.
        skipped = np.where(e.mask, ks, 0).reshape(-1, LANES).max(axis=1).astype(np.float64)
        per_iter: dict[int, np.ndarray] = {}
        for blk, ran in ev3:
            per_iter[blk] = per_iter.get(blk, 0.0) + ran
        for blk, ran in per_iter.items():
            add = skipped * ran
            out.counts[blk] += float(self.wweight @ add)
            for other, pth in path.items():
                if other != key:
                    pth.append((blk, add))
        out.fast_forwarded += int(skipped.max())
        seen.clear()

    def _iterations_ahead(
        self, s3: _State, step: _Step, e: _Entry, want: tuple[int, ...]
    ) -> np.ndarray | None:
        """Per lane, how many iterations from s3 certainly take the path `want` (None: none to
        skip). Every integer comparison (ISETP) of an iteration compares values that move by a
        fixed step: two probes (from s3 and one step on) give each operand's value and step in
        every lane, so the first iteration at which a lane's outcome differs from the outcome of
        the lanes that stay in the loop is solved for; lanes that leave now are not advanced.
        An iteration from the state so reached is probed to confirm that exactly the lanes
        expected to stay do."""
        logs, stays = [], []
        mask = e.mask
        for k in (0, 1):
            self._isetp_log = []
            try:
                stay = self._probe(_advance(s3, step, k), e.block, mask, want)
                log = self._isetp_log
            finally:
                self._isetp_log = None
            if stay is None or not stay.any():
                return None
            logs.append(log)
            stays.append(stay)
            mask = stay  # the second probe follows the lanes that stayed
        if not logs[0] or len(logs[0]) != len(logs[1]):
            return None
        s0 = stays[0]
        dev = np.where(e.mask & ~s0, 0.0, np.inf)
        for (x0, y0, cmp, r0), (x1, y1, _, _) in zip(logs[0], logs[1], strict=True):
            r0 = np.broadcast_to(r0, (self.n,))
            ref = r0[s0]
            if not (ref.all() or not ref.any()):
                continue  # the staying lanes disagree: this comparison does not decide the path
            d0 = np.broadcast_to(x0 - y0, (self.n,))
            dd = np.broadcast_to((x1 - y1) - (x0 - y0), (self.n,))
            flips = np.where(r0 != ref[0], 0.0, _first_flip(d0, dd, cmp))
            dev = np.where(s0, np.minimum(dev, flips), dev)
        if not np.isfinite(dev[s0]).all():
            return None
        ks = np.where(e.mask, np.maximum(dev - 1, 0), 0).astype(np.int64)
        if ks.max() < 1:
            return None
        stay = self._probe(_advance(s3, step, ks), e.block, e.mask, want)
        expect = e.mask & (dev >= 1)
        return ks if stay is not None and np.array_equal(stay, expect) else None

    def _probe(
        self, state: _State, header: int, mask: np.ndarray, want: tuple[int, ...]
    ) -> np.ndarray | None:
        """One iteration from `state` with `mask`'s lanes: the lanes that come back to the
        header (lanes may leave where a block branches back to it, or by exiting), or None when
        the iteration runs a block that the path `want` did not or meets data. Loops inside the
        iteration run in full (the path may have fast-forwarded them). Lanes that diverge inside
        the iteration (n-body's tile staging loop, entered only by the block's first TILE
        threads) are followed side by side: the pending block of the lowest address runs next
        with every lane waiting there, so the sides meet again where their paths join (a loop
        body's blocks run in address order; an inner loop's back edge goes to a lower one)."""
        saved, alive = self.state, self.alive
        self.state, self.alive = state.copy(), self.alive.copy()
        allowed = set(want)
        inside = self.in_loop[header]
        try:
            pending: dict[int, np.ndarray] = {header: mask.copy()}
            stay = np.zeros(self.n, dtype=bool)
            sink = WarpRun(np.zeros(len(self.cfg.blocks)))
            for _ in range(PROBE_BLOCKS):
                if not pending:
                    return stay
                b = min(pending)
                m = pending.pop(b)
                if b not in allowed:
                    return None
                nxt = self._block(b, _Entry(b, m, None), sink, 0, np.zeros(self.n, dtype=bool))
                if sink.data_branches or sink.skipped_calls:
                    return None
                for blk, mm in nxt:
                    if blk == header:
                        stay |= mm  # back at the header: these lanes stay in the loop
                    elif blk in inside:
                        pending[blk] = pending[blk] | mm if blk in pending else mm.copy()
                    # else: these lanes leave the loop
            return None
        except DataDependent:
            return None
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
            bank, off = int(cm.group(1), 16), int(cm.group(2) or "0", 16)
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
            bank, off = int(cm.group(1), 16), int(cm.group(2) or "0", 16)
            return self._const(bank, off), self._const(bank, off + 4)
        lo = self._operand(s)
        return lo, Val.const(0)


@dataclass
class _Step:
    """How a loop's state moves an iteration: a fixed step per register, over the lanes still in
    the loop, and the registers and predicates that do not move so (made unknown when the loop
    is skipped: a branch on them later is then a branch on data, which is safe)."""

    regs: dict[str, np.ndarray]
    drop_regs: set[str]
    drop_preds: set[str]


def _steady_step(s1: _State, s2: _State, s3: _State, n: int, lanes: np.ndarray) -> _Step:
    """The `_Step` between three states, over `lanes`."""
    step: dict[str, np.ndarray] = {}
    drop: set[str] = set()
    for name in set(s1.regs) | set(s2.regs) | set(s3.regs):
        a, b, c = (s.regs.get(name, Val.unknown()) for s in (s1, s2, s3))
        oks = [np.broadcast_to(x.ok, (n,))[lanes] for x in (a, b, c)]
        if not (np.array_equal(oks[0], oks[1]) and np.array_equal(oks[1], oks[2])):
            drop.add(name)
            continue
        va, vb, vc = (np.broadcast_to(x.v, (n,)) for x in (a, b, c))
        d1, d2 = (vb - va) & M32, (vc - vb) & M32
        ok = np.broadcast_to(c.ok, (n,)) & lanes
        if not np.array_equal(d1[ok], d2[ok]):
            drop.add(name)
            continue
        # A step is a signed amount: a counter counting down moves by -4, not 2^32 - 4.
        signed = np.where(d2 >= (1 << 31), d2 - (1 << 32), d2)
        step[name] = np.where(ok, signed, 0)
    drop_p: set[str] = set()
    for name in set(s1.preds) | set(s2.preds) | set(s3.preds):
        none = (np.zeros(1, bool), np.zeros(1, bool))
        ps = [s.preds.get(name, none) for s in (s1, s2, s3)]
        for (v1, o1), (v2, o2) in zip(ps, ps[1:], strict=False):
            o1, o2 = np.broadcast_to(o1, (n,))[lanes], np.broadcast_to(o2, (n,))[lanes]
            v1, v2 = np.broadcast_to(v1, (n,))[lanes], np.broadcast_to(v2, (n,))[lanes]
            if not np.array_equal(o1, o2) or not np.array_equal(v1[o1], v2[o2]):
                drop_p.add(name)
                break
    return _Step(step, drop, drop_p)


def _advance(s: _State, step: _Step, k: int | np.ndarray) -> _State:
    """The state k iterations on (k per lane, or one for all): registers moved by their steps,
    the ones without a fixed step and the changing predicates unknown."""
    out = s.copy()
    for name, d in step.regs.items():
        if name in out.regs and d.any():
            r = out.regs[name]
            out.regs[name] = Val((r.v + d * k) & M32, r.ok)
    if np.any(np.asarray(k) != 0):
        for name in step.drop_regs:
            if name in out.regs:
                out.regs[name] = Val.unknown()
        for name in step.drop_preds:
            out.preds.pop(name, None)
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


@functools.lru_cache(maxsize=4)
def _words_at(spec: Any, key: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """The parameter words of `spec`'s arguments at D = `key`, made once per process: the
    arguments of a large D take seconds to make, and every compiled variant of a kernel with
    program parameters takes the same ones."""
    Dm = dict(zip(spec.data_names, key))
    args = spec.make_args(spec.size(Dm), np.random.default_rng(0), device=False)
    return tuple(param_words(args).items())


def counts_from_parameters(
    interp: WarpInterpreter,
    classes: Sequence[Any],
    spec: Any,
    D: Any,
    block: tuple[int, int, int],
    *,
    max_warps: int = 256,
    variant: Mapping[str, int] | None = None,
) -> ParameterCounts:
    """The class counts per warp of `spec` at D with `block` (`variant`: the compiled variant's
    values of a kernel with program parameters): the weighted mean over the sampled warps
    (`sample_warps`), run together."""
    Dm = dict(zip(spec.data_names, (int(v) for v in D.values())))
    key = tuple(Dm.values())
    params = interp.params_at.get(key)
    if params is None:
        try:
            params = interp.params_at[key] = dict(_words_at(spec, key))
        except Exception as exc:  # noqa: BLE001 - a spec whose arguments cannot be made here
            return ParameterCounts(None, reason=f"arguments: {exc}")
    bx, by, bz = block
    gx, gy, gz = (int(v) for v in spec.grid_arrays(Dm, float(bx), float(by), float(bz), variant))
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
