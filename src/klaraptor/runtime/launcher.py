"""TunedKernel: read D from the call's arguments, select, launch through CuPy.

The per-call path is: read D (precompiled readers), one dict lookup of the launch plan for that
D, the CuPy launch. Everything else (evaluating the helper program, range checks, history) runs
once per new D.

Online refinement (`refine=k`, opt-in): for a new D, the first real calls launch the blocks of
`Selector.refine_blocks(D, k)` in turn (the model's best and the next ones within its band at
D, at most k, plus the block measured fastest at the largest training size), each bracketed by
CUDA events on the caller's stream; no extra launches and no synchronisation are added. Once every event has completed (checked without blocking on
later calls), the fastest measured block is pinned for that D and persisted as a 'refined'
history row, so the next process starts with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.backends.cupy_backend import CupyBackend
from klaraptor.core.errors import LaunchError
from klaraptor.core.types import Block, DataSize, Grid
from klaraptor.runtime.selector import Selection, Selector
from klaraptor.spec import KernelSpec


@dataclass
class _Plan:
    D: DataSize
    grid: Grid
    block: Block
    smem: int
    # Refinement state: blocks still to try, and (block, start, end) events of tried ones.
    todo: list[tuple[Block, Grid, int]] = field(default_factory=list)
    timed: list[tuple[Block, Any, Any]] = field(default_factory=list)


def data_reader(spec: KernelSpec) -> Callable[[Sequence[Any]], Any]:
    """A fast `args -> key` of the call's raw data parameters (no checks): the plan cache key.

    One parameter gives its raw value, several a tuple; equal sizes give equal keys (an
    `np.int32(4096)` and `4096` hash alike)."""
    getters = [p.getter() for p in spec.data]
    if len(getters) == 1:
        return getters[0]
    if len(getters) == 2:
        g0, g1 = getters
        return lambda args: (g0(args), g1(args))
    return lambda args: tuple([g(args) for g in getters])


class TunedKernel:
    """A kernel launcher that picks the block per call: `tuned(*args, stream=None)`."""

    def __init__(
        self,
        spec: KernelSpec,
        selector: Selector,
        *,
        refine: int = 0,
        backend: CupyBackend | None = None,
    ) -> None:
        if refine < 0:
            raise LaunchError(f"refine must be >= 0, got {refine}")
        self.spec = spec
        self.selector = selector
        self.refine = int(refine)
        self.backend = backend or CupyBackend()
        # The per-call path calls CuPy's RawKernel itself: no wrapper between the call and it.
        self._fn = self.backend.compile(spec.source, spec.kernel, spec.options)
        self._read = data_reader(spec)
        self._multi = len(spec.data) > 1
        self._plans: dict[Any, _Plan] = {}
        self._opted_smem = 0

    def __call__(self, *args: Any, stream: Any | None = None) -> None:
        try:
            plan = self._plans[self._read(args)]
        except (KeyError, TypeError):
            plan = self._new_plan(args)
        if plan.todo:
            self._refining_call(plan, args, stream)
            return
        if plan.timed:
            self._maybe_settle(plan)
        if stream is None:
            self._fn(plan.grid, plan.block, args, shared_mem=plan.smem)
        else:
            with stream:
                self._fn(plan.grid, plan.block, args, shared_mem=plan.smem)

    def plan_for(self, *args: Any) -> tuple[Grid, Block, int]:
        """(grid, block, dynamic shared memory) the next call with these arguments would use."""
        plan = self._plans.get(self._read(args)) or self._new_plan(args)
        if plan.todo:
            return plan.todo[0][1], plan.todo[0][0], plan.todo[0][2]
        return plan.grid, plan.block, plan.smem

    # -- once per new D -----------------------------------------------------------------------

    def _new_plan(self, args: tuple[Any, ...]) -> _Plan:
        D = self.spec.read_data(args)  # checked: integer, inside the sane range
        sel: Selection = self.selector.select(D)
        plan = _Plan(D, sel.grid, sel.block, self._smem(D, sel.block))
        if self.refine > 1 and sel.source == "model":
            blocks = self.selector.refine_blocks(D, self.refine)
            if len(blocks) > 1:
                for block in blocks:
                    grid = self.selector.grid_for(D, block)
                    plan.todo.append((block, grid, self._smem(D, block)))
        key = self._read(args)
        try:
            hash(key)
        except TypeError:  # e.g. 0-d arrays as sizes: key the plans by ints instead
            raw = self._read
            self._read = lambda a: tuple(int(v) for v in (raw(a) if self._multi else (raw(a),)))
            key = self._read(args)
        self._plans[key] = plan
        return plan

    def _smem(self, D: DataSize, block: Block) -> int:
        nbytes = self.spec.dynamic_smem_for(D, block)
        if nbytes > max(self._opted_smem, 48 * 1024):
            self.backend.opt_in_dynamic_smem(self._fn, nbytes)
            self._opted_smem = nbytes
        return nbytes

    # -- refinement ----------------------------------------------------------------------------

    def _refining_call(self, plan: _Plan, args: tuple[Any, ...], stream: Any | None) -> None:
        cupy = self.backend.module()
        block, grid, smem = plan.todo.pop(0)
        s = stream if stream is not None else cupy.cuda.get_current_stream()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(s)
        with s:
            self._fn(grid, block, args, shared_mem=smem)
        end.record(s)
        plan.timed.append((block, start, end))

    def _maybe_settle(self, plan: _Plan) -> None:
        """Pin the fastest measured block once all refinement launches have completed."""
        cupy = self.backend.module()

        if not all(end.done for _, _, end in plan.timed):
            return
        times = [(cupy.cuda.get_elapsed_time(s, e), b) for b, s, e in plan.timed]
        ms, block = min(times)
        sel = self.selector.fix(plan.D, block, ms)
        plan.grid, plan.block = sel.grid, sel.block
        plan.smem = self._smem(plan.D, sel.block)
        plan.timed = []

    def settle(self) -> None:
        """Wait for pending refinement timings and pin their winners (e.g. before exit)."""
        for plan in self._plans.values():
            for _, _, end in plan.timed:
                end.synchronize()
            if plan.timed:
                self._maybe_settle(plan)
        self.selector.flush()
