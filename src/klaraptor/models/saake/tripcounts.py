"""Trip counts: how often each part of a kernel's SASS runs per warp, from counters at training
sizes, as rational functions of D per configuration.

Count classes (`count_classes`). The reachable basic blocks of the SASS CFG are grouped into
classes whose blocks are assumed to run equally often per warp:

- ``entry``: block 0, run by every warp exactly once (count 1);
- ``top``: the other blocks of the kernel outside every loop, count in [0, 1]. A warp runs them
  at most once; the count is below 1 when some warps leave early (bounds checks with padding)
  or skip branches. SAAKE emulates every predicated path (§4.4); here the counters scale them;
- ``loop@<addr>``: the blocks whose innermost natural loop has its header at <addr>, count >= 0
  (iterations per warp, summed over every execution of the enclosing code);
- ``routine@<addr>``: code reached only by CALL (ptxas' slow paths of IEEE division and square
  root, `__noinline__` functions) outside its own loops, count >= 0.

Estimation (`solve_counts`), for one measured point: every per-warp counter m_k that Nsight
Compute gave (instructions, global loads and stores, shared-memory instructions and, where
collected, the warp instructions of each pipe) is a linear function of the class counts x with
the static per-class instruction counts A as coefficients: A x = m. The counts are the solution
of the linear program

    minimise  sum_k |(A x - m)_k| / m_k  +  eps * (sum_loops x_L - x_top + sum_routines x_R)
    subject to  x_entry = 1,  0 <= x_top <= 1,  x_L >= 0,  x_R >= 0

(scipy's HiGHS): the relative L1 misfit first; among fits that are equally good, the fewest loop
iterations (so the bulk of an unrolled loop's work goes to its widest unrolled body, as the
compiler intends), the conservative x_top = 1 and no slow path. The point's relative misfit is
kept as a diagnostic. `fit_counts` then fits every class count over the training sizes per
configuration with klaraptor's metric fitter (table or joint rational functions of D, the
largest size held out), like any other metric, except counts that grow faster than linearly
over the training sizes (a triangular loop's), which get the polynomial of their growth's
degree (`emulator._Quantity`).

Limits (documented in docs/saake.md): counts are averages over the warps of a launch, so a
divergent branch or a data-dependent trip count (BFS's frontier, a triangular loop) gets the
average, not the distribution; blocks inside one loop are assumed to run every iteration (an
`if` inside a loop body is emulated every iteration, scaled by nothing); when two classes have
proportional instruction mixes (e.g. two remainder loops of the same unrolled source loop) the
counters cannot tell them apart and the tie rule decides; counters exist at the counter sizes
only, so the counts at other sizes are extrapolated.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import linprog

from klaraptor.isa.analysis import KernelISA
from klaraptor.isa.sass import Instruction

# Per-warp counters and which static instructions each counts.
PIPES = ("fma", "alu", "fp64", "xu", "lsu", "adu", "cbu", "uniform")
COUNTERS: tuple[str, ...] = (
    "inst_per_warp",
    "gld_per_warp",
    "gst_per_warp",
    "shared_per_warp",
    *(f"pipe_{p}_per_warp" for p in PIPES),
)
_EPS = 1e-6  # tie-break weight per loop iteration (relative misfit units)


@dataclass(frozen=True)
class CountClass:
    """A set of basic blocks assumed to run equally often per warp."""

    name: str
    kind: str  # entry, top, loop, routine
    blocks: tuple[int, ...]
    parent: str | None  # the class whose one execution contains the loop (None: entry/top)
    header: int | None = None  # first instruction index (loop header / routine entry)

    @property
    def bounds(self) -> tuple[float, float | None]:
        return {"entry": (1.0, 1.0), "top": (0.0, 1.0)}.get(self.kind, (0.0, None))


def count_classes(isa: KernelISA) -> list[CountClass]:
    """The count classes of a kernel's SASS (see the module docstring), entry first."""
    cfg = isa.sass_cfg
    assert cfg is not None
    by_key: dict[str, list[int]] = {}
    meta: dict[str, tuple[str, str | None, int | None]] = {}

    def addr(block: int) -> str:
        return f"{isa.instructions[cfg.blocks[block].start].addr:#x}"

    top_class = _top_level_classes(isa)
    for b in cfg.blocks:
        if b.root is None:
            continue
        if b.loops:
            lp = cfg.loops[b.loops[-1]]
            key = f"loop@{addr(lp.header)}"
            if lp.parent is not None:
                parent: str | None = f"loop@{addr(cfg.loops[lp.parent].header)}"
            elif b.root != 0:
                parent = f"routine@{addr(b.root)}"
            else:
                parent = top_class.get(lp.header, "entry")
            meta[key] = ("loop", parent, cfg.blocks[lp.header].start)
        elif b.root != 0:
            key = f"routine@{addr(b.root)}"
            meta[key] = ("routine", None, cfg.blocks[b.root].start)
        else:
            key = top_class[b.index]
            meta[key] = ("entry" if key == "entry" else "top", None, None)
        by_key.setdefault(key, []).append(b.index)
    order = sorted(by_key, key=lambda k: (k != "entry", min(by_key[k])))
    return [CountClass(k, meta[k][0], tuple(by_key[k]), meta[k][1], meta[k][2]) for k in order]


def _top_level_classes(isa: KernelISA) -> dict[int, str]:
    """Class names of the main routine's blocks outside loops, and of loop headers (the class
    of the code that enters the loop): control-equivalent blocks (a dominates b and b
    post-dominates a) share a class; the class of block 0 is "entry", the others
    "top@<address of their first block>"."""
    cfg = isa.sass_cfg
    assert cfg is not None
    main = [b.index for b in cfg.blocks if b.root == 0]
    inside = set(main)
    succ = {b: [s for s in cfg.blocks[b].succs if s in inside] for b in main}
    pred = {b: [p for p in cfg.blocks[b].preds if p in inside] for b in main}
    exits = {b for b in main if not succ[b] or _ends_in_exit(isa, b)}
    dom = _dominator_sets(main, pred, {main[0]})
    pdom = _dominator_sets(main[::-1], succ, exits)
    # A loop's own blocks are never control-equivalent to code outside it; loop headers take
    # the class of the closest dominating top-level block so a loop knows its enclosing code.
    flat = [b for b in main if not cfg.blocks[b].loops]
    rep: dict[int, int] = {}
    for b in flat:
        rep[b] = next(
            (a for a in flat if a in rep and rep[a] == a and a in dom[b] and b in pdom[a]), b
        )
    names = {
        b: "entry"
        if rep[b] == main[0]
        else f"top@{isa.instructions[cfg.blocks[rep[b]].start].addr:#x}"
        for b in flat
    }
    for lp in cfg.loops:
        h = lp.header
        if h not in inside:
            continue
        around = [a for a in flat if a in dom[h] and a != h]
        names[h] = names[max(around, key=lambda a: len(dom[a]))] if around else "entry"
    return names


def _ends_in_exit(isa: KernelISA, block: int) -> bool:
    assert isa.sass_cfg is not None
    last = isa.instructions[isa.sass_cfg.blocks[block].end - 1]
    return last.opcode in ("EXIT", "RET", "KILL")


def _dominator_sets(
    order: Sequence[int], into: Mapping[int, Sequence[int]], roots: set[int]
) -> dict[int, set[int]]:
    """Dominator sets by the iterative data-flow equations: dom(b) = {b} ∪ ⋂ dom(p) over the
    `into` neighbours p of b; `roots` have only themselves. With `into` = successors and `roots`
    = the exits this gives post-dominators (every exit leads to one virtual exit)."""
    everything = set(order)
    dom = {b: ({b} if b in roots else set(everything)) for b in order}
    changed = True
    while changed:
        changed = False
        for b in order:
            if b in roots:
                continue
            ps = [dom[p] for p in into[b] if p in dom]
            new = {b} | (set.intersection(*ps) if ps else set())
            if new != dom[b]:
                dom[b] = new
                changed = True
    return dom


def ncu_pipe(ins: Instruction, pipe: str | None) -> str | None:
    """The pipe whose `smsp__inst_executed_pipe_*` counter counts `ins` on sm_90.

    The classification table's pipe, except where the H200's counters disagree with it (every
    recorded Rodinia kernel, e.g. rodinia.backprop.adjust_weights: 3 ULDC, 1 S2UR and 1 S2R of
    SR_CTAID.X give pipe_uniform 0 and pipe_adu = LDCs + 2; rodinia.streamcluster.pgain: its
    loop's BRA, 16 per warp, is missing from pipe_cbu): ULDC and BRA are in no pipe counter,
    and reads of SR_CTAID (S2R or S2UR) are counted on the ADU.
    """
    if ins.opcode in ("ULDC", "BRA", "UMOV"):
        return None
    if ins.opcode == "VIADD":
        return "fma"
    if ins.opcode in ("S2R", "S2UR") and any(o.startswith("SR_CTAID") for o in ins.operands):
        return "adu"
    return pipe


def block_counters(isa: KernelISA) -> list[dict[str, int]]:
    """Per basic block: its static contribution to each counter of COUNTERS."""
    cfg = isa.sass_cfg
    assert cfg is not None
    out = []
    for b in cfg.blocks:
        c = dict.fromkeys(COUNTERS, 0)
        if b.root is not None:
            for i in range(b.start, b.end):
                cls = isa.sass_classes[i]
                c["inst_per_warp"] += 1
                c["gld_per_warp"] += cls.cls == "global_load"
                c["gst_per_warp"] += cls.cls == "global_store"
                c["shared_per_warp"] += cls.cls in ("shared_load", "shared_store")
                pipe = ncu_pipe(isa.instructions[i], cls.pipe)
                if pipe in PIPES:
                    c[f"pipe_{pipe}_per_warp"] += 1
        out.append(c)
    return out


def static_matrix(isa: KernelISA, classes: Sequence[CountClass]) -> np.ndarray:
    """(len(COUNTERS), len(classes)): counter k's static count over class j's blocks."""
    per_block = block_counters(isa)
    a = np.zeros((len(COUNTERS), len(classes)))
    for j, c in enumerate(classes):
        for b in c.blocks:
            for k, name in enumerate(COUNTERS):
                a[k, j] += per_block[b][name]
    return a


@dataclass
class CountSolution:
    """Class counts of one measured point and how well they reproduce its counters."""

    counts: np.ndarray
    misfit: dict[str, float]  # counter -> relative error of A x against the measurement
    used: tuple[str, ...]
    # Top-level classes whose count the kernel's parameters held below 1 (`solve_counts`).
    limited: frozenset[int] = frozenset()

    @property
    def max_misfit(self) -> float:
        return max(self.misfit.values(), default=0.0)


def solve_counts(
    a: np.ndarray,
    classes: Sequence[CountClass],
    measured: Mapping[str, float],
    top_limits: Callable[[], Sequence[float] | None] | None = None,
) -> CountSolution:
    """The class counts of one point (the linear program of the module docstring).

    `top_limits()` (per class, from the kernel's parameters: `interp`; called only when needed):
    the fraction of warps that can reach each top-level class at all, an upper bound on its
    count. The counters alone cannot tell "half the warps run N iterations" from "every warp
    runs N / 2" when the code before a loop is short (an early `return` of whole blocks:
    GRAMSCHM k3's j <= k); the tie rule (x_top = 1) then gives every warp half the loop. Where
    the top-level counts are such a tie (the fit preferring the fewest gives others), the bound
    keeps the count the parameters allow; a bound the counters contradict (its misfit worse by
    more than 1 % of the measured counters) is dropped for that point."""
    free = _solve(a, classes, measured, None)
    if top_limits is None or not free.misfit:
        return free
    fewest = _solve(a, classes, measured, None, prefer_few_top=True)
    tops = [j for j, c in enumerate(classes) if c.kind == "top"]
    if all(abs(free.counts[j] - fewest.counts[j]) < 1e-6 for j in tops):
        return free  # the counters fix the top-level counts
    limits = top_limits()
    if limits is None:
        return free
    bounded = _solve(a, classes, measured, limits)
    if sum(bounded.misfit.values()) > sum(free.misfit.values()) + 0.01:
        return free
    held = frozenset(
        j for j in tops if limits[j] < 1.0 - 1e-9 and abs(bounded.counts[j] - limits[j]) < 1e-6
    )
    return CountSolution(bounded.counts, bounded.misfit, bounded.used, held)


def _solve(
    a: np.ndarray,
    classes: Sequence[CountClass],
    measured: Mapping[str, float],
    top_limits: Sequence[float] | None,
    *,
    prefer_few_top: bool = False,
) -> CountSolution:
    rows = [
        k
        for k, name in enumerate(COUNTERS)
        if name in measured and math.isfinite(measured[name]) and measured[name] >= 0
    ]
    n = len(classes)
    if not rows:
        return CountSolution(_default_counts(classes), {}, ())
    m = np.array([float(measured[COUNTERS[k]]) for k in rows])
    # Relative misfit per counter, but a rare kind (1 uniform instruction in 300) is judged
    # against 2 % of all instructions, not against itself.
    floor = max(1.0, 0.02 * float(measured.get("inst_per_warp", 0.0)))
    scale = 1.0 / np.maximum(m, floor)
    ak = a[rows] * scale[:, None]
    mk = m * scale
    r = len(rows)
    cost = np.zeros(n + 2 * r)
    for j, c in enumerate(classes):
        if c.kind == "loop":
            cost[j] = _EPS
        elif c.kind == "routine":
            cost[j] = _EPS
        elif c.kind == "top":
            cost[j] = _EPS if prefer_few_top else -_EPS
    cost[n:] = 1.0
    a_eq = np.hstack([ak, -np.eye(r), np.eye(r)])
    bounds = [c.bounds for c in classes] + [(0.0, None)] * (2 * r)
    if top_limits is not None:
        for j, c in enumerate(classes):
            if c.kind == "top":
                lo, hi = c.bounds
                bounds[j] = (lo, min(hi if hi is not None else 1.0, float(top_limits[j])))
    res = linprog(cost, A_eq=a_eq, b_eq=mk, bounds=bounds, method="highs")
    x = res.x[:n] if res.status == 0 else _default_counts(classes)
    fit = a[rows] @ x
    misfit = {COUNTERS[k]: float(abs(fit[i] - m[i]) * scale[i]) for i, k in enumerate(rows)}
    return CountSolution(np.asarray(x, dtype=np.float64), misfit, tuple(COUNTERS[k] for k in rows))


def _default_counts(classes: Sequence[CountClass]) -> np.ndarray:
    """Without counters: every non-loop class once, loops and slow paths not at all."""
    return np.array([1.0 if c.kind in ("entry", "top") else 0.0 for c in classes])


@dataclass
class TripCounts:
    """Class counts per training point, and their fits as functions of (D, configuration)."""

    classes: list[CountClass]
    matrix: np.ndarray
    points: list[tuple[tuple[int, ...], tuple[int, int, int], CountSolution]] = field(
        default_factory=list
    )
    programs: dict[str, Any] = field(default_factory=dict)  # class name -> Program
    report: dict[str, Any] = field(default_factory=dict)

    def median_misfit(self) -> float:
        vals = [s.max_misfit for _, _, s in self.points]
        return float(np.median(vals)) if vals else math.nan


def estimate_points(
    isa: KernelISA,
    rows: Sequence[tuple[tuple[int, ...], tuple[int, int, int], Mapping[str, float]]],
    top_limits: Callable[[tuple[int, ...], tuple[int, int, int]], Sequence[float] | None]
    | None = None,
) -> TripCounts:
    """Class counts of every (D values, block, derived metrics) row that has counters;
    `top_limits(D values, block)`: per class, the fraction of warps the kernel's parameters let
    reach it (None where they do not tell), see `solve_counts`."""
    classes = count_classes(isa)
    a = static_matrix(isa, classes)
    tc = TripCounts(classes, a)
    for d, block, derived in rows:
        if "inst_per_warp" not in derived:
            continue
        limits = None
        if top_limits is not None:
            limits = functools.partial(top_limits, tuple(d), block)
        sol = solve_counts(a, classes, derived, limits)
        tc.points.append((tuple(d), tuple(block), sol))  # type: ignore[arg-type]
    if top_limits is not None:
        tc.report["top_limited_points"] = sum(bool(s.limited) for _, _, s in tc.points)
    return tc


__all__ = [
    "COUNTERS",
    "CountClass",
    "CountSolution",
    "TripCounts",
    "block_counters",
    "count_classes",
    "estimate_points",
    "solve_counts",
    "static_matrix",
]
