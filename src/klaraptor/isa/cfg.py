"""Control-flow graphs of SASS and PTX functions: basic blocks, natural loops, loop depth.

Blocks start at the first instruction, at every branch or call target and after every branch,
exit, return and call. Edges are fall-through and branch edges; a call is an edge to the next
block plus a call record. Code reached only through CALL (an in-function subroutine such as
the compiler's slow path of an IEEE division, or a `__noinline__` device function) is a routine
of its own, rooted at the call target. Dominators (Cooper, Harvey & Kennedy's iterative
algorithm) are computed per routine; a back edge u→h is one whose target h dominates u; the
natural loop of h is h plus every block that reaches a latch without passing h. A block's loop
depth is the number of natural loops containing it; an instruction of a subroutine adds the
deepest loop depth of its call sites. A retreating edge that is not a back edge (irreducible
flow) is listed and gets no loop. Blocks no routine reaches (the `BRA self` + NOP padding after
the last EXIT) are unreachable: depth 0, not in any mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.isa.ptx import PtxFunction
from klaraptor.isa.sass import SassFunction

_MAX_CALL_PASSES = 32


@dataclass(frozen=True)
class Flow:
    """Control-flow role of one instruction."""

    kind: str = "none"  # none, branch, exit, return, call, indirect
    target: int | None = None  # instruction index of a branch/call target
    conditional: bool = False


@dataclass
class Block:
    index: int
    start: int  # first instruction index
    end: int  # one past the last instruction index
    succs: list[int] = field(default_factory=list)
    preds: list[int] = field(default_factory=list)
    root: int | None = None  # entry block of the routine it belongs to (None: unreachable)
    depth: int = 0  # natural-loop depth inside its routine
    loops: list[int] = field(default_factory=list)  # loops containing it, outermost first

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class Loop:
    header: int
    blocks: list[int]
    latches: list[int]
    depth: int = 1  # 1 for an outermost loop
    parent: int | None = None


@dataclass
class CFG:
    blocks: list[Block]
    loops: list[Loop]
    roots: list[int]  # block 0 (the entry) then subroutine entries
    calls: list[tuple[int, int]]  # (calling block, callee root block)
    block_of: list[int]  # instruction index → block index
    instr_depth: list[int]  # loop depth per instruction, call-site depth included
    irreducible: list[tuple[int, int]]  # retreating edges that are not back edges
    unresolved: list[int]  # instruction indices of indirect branches / unknown targets
    recursive: bool = False

    @property
    def reachable_blocks(self) -> list[Block]:
        return [b for b in self.blocks if b.root is not None]

    @property
    def max_depth(self) -> int:
        return max(self.instr_depth, default=0)

    def summary(self) -> dict[str, Any]:
        sizes = [b.size for b in self.reachable_blocks]
        return {
            "blocks": len(sizes),
            "block_size_min": min(sizes, default=0),
            "block_size_max": max(sizes, default=0),
            "block_size_mean": (sum(sizes) / len(sizes)) if sizes else 0.0,
            "loops": len(self.loops),
            "max_loop_depth": self.max_depth,
            "nested_loops": any(lp.depth > 1 for lp in self.loops),
            "subroutines": len(self.roots) - 1,
            "irreducible_edges": len(self.irreducible),
            "unresolved_branches": len(self.unresolved),
        }


def build_cfg(flows: Sequence[Flow]) -> CFG:
    """The CFG of a function whose instructions have these control-flow roles."""
    n = len(flows)
    if n == 0:
        return CFG([], [], [], [], [], [], [], [])
    unresolved = [i for i, f in enumerate(flows) if f.kind == "indirect"]
    leaders = {0}
    for i, f in enumerate(flows):
        if f.kind != "none":
            if i + 1 < n:
                leaders.add(i + 1)
            if f.target is not None and 0 <= f.target < n:
                leaders.add(f.target)
    starts = sorted(leaders)
    blocks = [
        Block(k, s, starts[k + 1] if k + 1 < len(starts) else n) for k, s in enumerate(starts)
    ]
    block_of = [0] * n
    for b in blocks:
        for i in range(b.start, b.end):
            block_of[i] = b.index

    calls: list[tuple[int, int]] = []
    for b in blocks:
        f = flows[b.end - 1]
        nxt = b.index + 1 if b.index + 1 < len(blocks) else None
        succ: list[int] = []
        if f.kind == "branch":
            if f.target is not None and 0 <= f.target < n:
                succ.append(block_of[f.target])
            if f.conditional and nxt is not None:
                succ.append(nxt)
        elif f.kind in ("exit", "return", "indirect"):
            if f.conditional and nxt is not None:
                succ.append(nxt)
        else:
            if f.kind == "call" and f.target is not None and 0 <= f.target < n:
                calls.append((b.index, block_of[f.target]))
            if nxt is not None:
                succ.append(nxt)
        b.succs = list(dict.fromkeys(succ))
    for b in blocks:
        for s in b.succs:
            blocks[s].preds.append(b.index)

    roots = list(dict.fromkeys([0] + [callee for _, callee in calls]))
    loops: list[Loop] = []
    irreducible: list[tuple[int, int]] = []
    for r in roots:
        region = _assign_region(blocks, r)
        if not region:
            continue
        idom = _dominators(blocks, r, region)
        loops += _natural_loops(blocks, r, region, idom, irreducible)
    _nest(blocks, loops)

    offset, recursive = _call_offsets(blocks, roots, calls)
    instr_depth = [0] * n
    for b in blocks:
        if b.root is not None:
            d = b.depth + offset.get(b.root, 0)
            for i in range(b.start, b.end):
                instr_depth[i] = d
    return CFG(
        blocks, loops, roots, calls, block_of, instr_depth, irreducible, unresolved, recursive
    )


def _assign_region(blocks: list[Block], root: int) -> list[int]:
    """Blocks reachable from `root` (not yet owned by an earlier routine), in DFS preorder."""
    if blocks[root].root is not None and blocks[root].root != root:
        return []
    order, stack, seen = [], [root], {root}
    while stack:
        b = stack.pop()
        if blocks[b].root is not None and blocks[b].root != root:
            continue
        blocks[b].root = root
        order.append(b)
        for s in reversed(blocks[b].succs):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return order


def _postorder(
    blocks: list[Block],
    root: int,
    region: set[int],
    retreating: list[tuple[int, int]] | None = None,
) -> list[int]:
    """The blocks of `region` reached from `root` depth first (successors in order), in
    postorder; with `retreating`, each edge to a block still on the DFS stack is added to it."""
    post: list[int] = []
    seen, on_stack = {root}, {root}
    stack = [(root, iter(blocks[root].succs))]
    while stack:
        node, it = stack[-1]
        for s in it:
            if s not in region:
                continue
            if s in on_stack:
                if retreating is not None:
                    retreating.append((node, s))
            elif s not in seen:
                seen.add(s)
                on_stack.add(s)
                stack.append((s, iter(blocks[s].succs)))
                break
        else:
            post.append(node)
            on_stack.discard(node)
            stack.pop()
    return post


def _dominators(blocks: list[Block], root: int, order: list[int]) -> dict[int, int]:
    region = set(order)
    post = _postorder(blocks, root, region)
    rpo = post[::-1]
    num = {b: i for i, b in enumerate(post)}
    idom = {root: root}
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            preds = [p for p in blocks[b].preds if p in idom and p in region]
            if not preds:
                continue
            new = preds[0]
            for p in preds[1:]:
                new = _intersect(p, new, idom, num)
            if idom.get(b) != new:
                idom[b] = new
                changed = True
    return idom


def _intersect(a: int, b: int, idom: dict[int, int], num: dict[int, int]) -> int:
    while a != b:
        while num[a] < num[b]:
            a = idom[a]
        while num[b] < num[a]:
            b = idom[b]
    return a


def _dominates(a: int, b: int, idom: dict[int, int]) -> bool:
    while True:
        if a == b:
            return True
        parent = idom.get(b)
        if parent is None or parent == b:
            return False
        b = parent


def _natural_loops(
    blocks: list[Block],
    root: int,
    order: list[int],
    idom: dict[int, int],
    irreducible: list[tuple[int, int]],
) -> list[Loop]:
    region = set(order)
    # Retreating edges: to a block still on the DFS stack.
    retreating: list[tuple[int, int]] = []
    _postorder(blocks, root, region, retreating)
    by_header: dict[int, set[int]] = {}
    latches: dict[int, list[int]] = {}
    for u, h in retreating:
        if not _dominates(h, u, idom):
            irreducible.append((u, h))
            continue
        body = by_header.setdefault(h, {h})
        latches.setdefault(h, []).append(u)
        work = [u]
        while work:
            x = work.pop()
            if x in body:
                continue
            body.add(x)
            work += [p for p in blocks[x].preds if p in region]
    return [Loop(h, sorted(body), latches[h]) for h, body in sorted(by_header.items())]


def _nest(blocks: list[Block], loops: list[Loop]) -> None:
    sets = [set(lp.blocks) for lp in loops]
    for i, lp in enumerate(loops):
        outer = [j for j in range(len(loops)) if j != i and sets[i] < sets[j]]
        lp.depth = 1 + len(outer)
        if outer:
            lp.parent = min(outer, key=lambda j: len(sets[j]))
    for i in sorted(range(len(loops)), key=lambda k: loops[k].depth):
        for b in loops[i].blocks:
            blocks[b].loops.append(i)
            blocks[b].depth += 1


def _call_offsets(
    blocks: list[Block], roots: list[int], calls: list[tuple[int, int]]
) -> tuple[dict[int, int], bool]:
    offset = {r: 0 for r in roots}
    for _ in range(_MAX_CALL_PASSES):
        changed = False
        for caller, callee in calls:
            croot = blocks[caller].root
            if croot is None:
                continue
            d = offset.get(croot, 0) + blocks[caller].depth
            if d > offset.get(callee, 0):
                offset[callee] = d
                changed = True
        if not changed:
            return offset, False
    return offset, True  # depths still growing: recursion


# ---------------------------------------------------------------------------------------------
# Flows of SASS and PTX instructions

_SASS_JUMPS = frozenset({"BRA", "JMP"})
_SASS_INDIRECT = frozenset({"BRX", "BRXU", "JMX", "JMXU"})


def sass_flows(fn: SassFunction) -> list[Flow]:
    """Control-flow role of every instruction of a SASS function."""
    by_addr = {ins.addr: i for i, ins in enumerate(fn.instructions)}
    flows = []
    for ins in fn.instructions:
        cond = ins.guarded or any(
            o.lstrip("!") not in ("PT", "UPT") and o.lstrip("!").lstrip("U").startswith("P")
            for o in ins.operands[:-1]
        )
        if ins.opcode in _SASS_JUMPS:
            if ins.target is not None and ins.target in by_addr:
                flows.append(Flow("branch", by_addr[ins.target], cond or "DIV" in ins.mods))
            else:
                flows.append(Flow("indirect", None, cond))
        elif ins.opcode in _SASS_INDIRECT:
            flows.append(Flow("indirect", None, cond))
        elif ins.opcode in ("EXIT", "KILL"):
            flows.append(Flow("exit", None, cond))
        elif ins.opcode in ("RET", "RTT"):
            flows.append(Flow("return", None, cond))
        elif ins.opcode == "CALL":
            target = by_addr.get(ins.target) if ins.target is not None else None
            flows.append(Flow("call", target, cond))
        else:
            flows.append(Flow())
    return flows


def ptx_flows(fn: PtxFunction) -> list[Flow]:
    """Control-flow role of every instruction of a PTX function (calls are not followed)."""
    labels = fn.label_index()
    n = len(fn.instructions)
    flows = []
    for ins in fn.instructions:
        if ins.op == "bra":
            t = labels.get(ins.target or "")
            if t is None:
                flows.append(Flow("indirect", None, ins.guarded))
            elif t >= n:
                flows.append(Flow("exit", None, ins.guarded))  # a jump to the closing brace
            else:
                flows.append(Flow("branch", t, ins.guarded))
        elif ins.op == "brx":
            flows.append(Flow("indirect", None, ins.guarded))
        elif ins.op in ("ret", "exit", "trap"):
            flows.append(Flow("return" if ins.op == "ret" else "exit", None, ins.guarded))
        else:
            flows.append(Flow())
    return flows


def sass_cfg(fn: SassFunction) -> CFG:
    return build_cfg(sass_flows(fn))


def ptx_cfg(fn: PtxFunction) -> CFG:
    return build_cfg(ptx_flows(fn))
