"""The instruction stream one warp runs, as the emulator consumes it.

`build_trace` walks the kernel's SASS in address order and emits every reachable instruction
with a weight (how many of the warps it stands for run it, on average) and its register
dependences (the trace positions of the last writers of its source registers: R, UR, P, UP):

- code outside loops is emitted once, weighted by its count class (`tripcounts`): the entry
  with weight 1, other top-level code with its count in [0, 1];
- a loop whose per-entry trip count is n (its class count over its parent's) is unrolled
  k = min(K, ceil(n)) times per entry, each iteration weighted by its parent's weight times
  min(1, n / k) (a loop entered from top-level code that the kernel's parameters say only some
  warps reach: that fraction, not every warp); innermost loops get K = `unroll_inner`, loops with loops inside them
  `unroll_outer`. The start of every iteration is marked, so the emulator can measure the
  steady-state period of each loop and extrapolate the iterations not emitted (`LoopInfo`);
- code reached by CALL (a routine) is emitted after its call site, weighted by its count per
  execution of the call site (at most 1).

Everything here depends only on the kernel and the class counts, not on the hardware, so one
trace serves every emulation of a (configuration, D) and all its sensitivity runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from klaraptor.isa.analysis import KernelISA
from klaraptor.models.saake.tripcounts import CountClass

UNROLL_INNER = 4
UNROLL_OUTER = 2
_SKIP = frozenset({"NOP"})
_MIN_COUNT = 1e-6


@dataclass
class LoopInfo:
    """One loop class in a trace: where its iterations start and how much of it was emitted."""

    cls: int  # index of the count class
    name: str
    weight: float  # weight of each emitted iteration
    accounted: float = 0.0  # weighted iterations emitted
    count: float = 0.0  # the class count (weighted iterations per warp)
    instances: list[list[int]] = field(default_factory=list)  # per entry: iteration start pos
    children: list[int] = field(default_factory=list)  # indices in Trace.loops
    unroll: int = 0  # iterations emitted per entry

    @property
    def missing(self) -> float:
        """Emitted-size iterations the emulation must add: (count - accounted) / weight."""
        if self.weight <= 0:
            return 0.0
        return max(self.count - self.accounted, 0.0) / self.weight


@dataclass
class Trace:
    """Per position: static instruction index, weight, dependences; loops and their marks."""

    op: np.ndarray
    weight: np.ndarray
    deps: list[tuple[int, ...]]
    loops: list[LoopInfo]

    def __len__(self) -> int:
        return len(self.deps)


def build_trace(
    isa: KernelISA,
    classes: Sequence[CountClass],
    counts: Sequence[float] | np.ndarray,
    *,
    unroll_inner: int = UNROLL_INNER,
    unroll_outer: int = UNROLL_OUTER,
    entered_by_few: frozenset[str] = frozenset(),
) -> Trace:
    """The trace of one warp for these class counts (see the module docstring).
    `entered_by_few`: top-level classes whose count below 1 the kernel's parameters gave (the
    fraction of warps that reach them, `tripcounts.solve_counts`); a loop entered from one
    stands for that fraction of the warps."""
    cfg = isa.sass_cfg
    assert cfg is not None
    x = [max(float(c), 0.0) for c in counts]
    name_idx = {c.name: j for j, c in enumerate(classes)}
    class_of: dict[int, int] = {}
    for j, c in enumerate(classes):
        for b in c.blocks:
            class_of[b] = j
    loop_class = {}
    for li, lp in enumerate(cfg.loops):
        header_class = class_of.get(lp.header)
        if header_class is not None and classes[header_class].kind == "loop":
            loop_class[li] = header_class
    children: dict[int | None, list[int]] = {}
    for li, lp in enumerate(cfg.loops):
        children.setdefault(lp.parent, []).append(li)
    routine_entry = {
        cfg.blocks[c.blocks[0]].root: j for j, c in enumerate(classes) if c.kind == "routine"
    }
    routine_blocks = {r: sorted(b.index for b in cfg.blocks if b.root == r) for r in routine_entry}

    ops: list[int] = []
    weights: list[float] = []
    deps: list[tuple[int, ...]] = []
    writer: dict[str, int] = {}
    loops: list[LoopInfo] = []
    info_of: dict[int, int] = {}
    instrs = isa.instructions
    by_addr = {ins.addr: i for i, ins in enumerate(instrs)}

    def parent_count(j: int) -> float:
        p = classes[j].parent
        if p is None or p not in name_idx:
            return 1.0
        return x[name_idx[p]]

    def emit_block(b: int, w: float, depth_guard: int) -> None:
        blk = cfg.blocks[b]
        for i in range(blk.start, blk.end):
            ins = instrs[i]
            if ins.opcode in _SKIP:
                continue
            pos = len(ops)
            ops.append(i)
            weights.append(w)
            deps.append(tuple(sorted({writer[r] for r in ins.src if r in writer})))
            for r in ins.dst:
                writer[r] = pos
            if ins.opcode == "CALL" and ins.target is not None and depth_guard < 4:
                t = by_addr.get(ins.target)
                root = cfg.blocks[cfg.block_of[t]].root if t is not None else None
                j = routine_entry.get(root)
                if j is not None and x[j] > _MIN_COUNT:
                    site = x[class_of[b]] if class_of.get(b) is not None else 1.0
                    rw = w * min(1.0, x[j] / max(site, _MIN_COUNT))
                    emit_region(routine_blocks[root], rw, None, depth_guard + 1)

    def emit_region(
        blocks: Sequence[int], w: float, enclosing: int | None, depth_guard: int
    ) -> None:
        done: set[int] = set()
        for b in blocks:
            if b in done:
                continue
            blk = cfg.blocks[b]
            inner = [li for li in blk.loops if cfg.loops[li].parent == enclosing]
            if enclosing is not None and b not in cfg.loops[enclosing].blocks:
                continue
            if inner:
                li = inner[0]
                lp = cfg.loops[li]
                done.update(lp.blocks)
                emit_loop(li, w, depth_guard)
                continue
            j = class_of.get(b)
            bw = w
            if j is not None and classes[j].kind == "top":
                bw = x[j]
            emit_block(b, bw, depth_guard)

    def emit_loop(li: int, w_parent: float, depth_guard: int) -> None:
        j = loop_class.get(li)
        if j is None:
            return
        lp = cfg.loops[li]
        pc = parent_count(j)
        parent = classes[j].parent
        if parent in entered_by_few and pc > _MIN_COUNT:
            # Entered from top-level code that only some warps reach (an early `return` of whole
            # warps: GRAMSCHM k3's j <= k): those warps run every iteration, the others none;
            # each iteration stands for that fraction of the warps, not for all of them.
            w_parent = min(w_parent, pc)
        # A loop that runs was entered: where the counts give its enclosing code none (the
        # linear program's tie; GRAMSCHM k1's strided-load loop), take it as entered once.
        n = x[j] / pc if pc > _MIN_COUNT else x[j]
        if n <= _MIN_COUNT:
            return
        has_inner = bool(children.get(li))
        k_max = unroll_outer if has_inner else unroll_inner
        k = max(1, min(k_max, math.ceil(n - 1e-9)))
        w_iter = w_parent * min(1.0, n / k)
        if li not in info_of:
            info_of[li] = len(loops)
            loops.append(LoopInfo(j, classes[j].name, w_iter, count=x[j], unroll=k))
        info = loops[info_of[li]]
        info.weight = w_iter
        starts = []
        body = sorted(lp.blocks)
        for _ in range(k):
            starts.append(len(ops))
            emit_region(body, w_iter, li, depth_guard)
        info.instances.append(starts)
        info.accounted += k * w_iter

    main = sorted(b.index for b in cfg.blocks if b.root == 0)
    emit_region(main, 1.0, None, 0)
    for li, idx in info_of.items():
        loops[idx].children = [info_of[c] for c in children.get(li, []) if c in info_of]
    return Trace(
        np.asarray(ops, dtype=np.int64),
        np.asarray(weights, dtype=np.float64),
        deps,
        loops,
    )


__all__ = ["UNROLL_INNER", "UNROLL_OUTER", "LoopInfo", "Trace", "build_trace"]
