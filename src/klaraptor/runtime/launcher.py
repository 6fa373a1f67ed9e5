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
from klaraptor.core.types import Block, Config, DataSize, Grid, LaunchConfig, ParamValues
from klaraptor.runtime.selector import Selection, Selector
from klaraptor.spec import KernelSpec


@dataclass
class _Plan:
    D: DataSize
    grid: Grid
    block: Block
    smem: int
    fn: Any  # the compiled kernel (for program parameters: the chosen variant)
    # Refinement state: candidates still to try as (candidate, fn, grid, block, smem), and
    # (candidate, start, end) events of tried ones.
    todo: list[tuple[Any, Any, Grid, Block, int]] = field(default_factory=list)
    timed: list[tuple[Any, Any, Any]] = field(default_factory=list)


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
        # A kernel with program parameters compiles each variant the first time it is chosen.
        self._fns: dict[ParamValues, Any] = {}
        self._opted: dict[int, int] = {}  # id(fn) -> dynamic shared memory opted in to
        self._fn = None if spec.params else self._variant_fn(ParamValues.NONE)
        self._read = data_reader(spec)
        self._multi = len(spec.data) > 1
        self._plans: dict[Any, _Plan] = {}

    def _variant_fn(self, pv: ParamValues) -> Any:
        fn = self._fns.get(pv)
        if fn is None:
            fn = self._fns[pv] = (
                self.backend.compile_spec(self.spec, pv)
                if pv
                else self.backend.compile(self.spec.source, self.spec.kernel, self.spec.options)
            )
        return fn

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
            plan.fn(plan.grid, plan.block, args, shared_mem=plan.smem)
        else:
            with stream:
                plan.fn(plan.grid, plan.block, args, shared_mem=plan.smem)

    def plan_for(self, *args: Any) -> tuple[Grid, Block, int]:
        """(grid, block, dynamic shared memory) the next call with these arguments would use
        (`launch_for` also gives the program parameters' values)."""
        plan = self._plans.get(self._read(args)) or self._new_plan(args)
        if plan.todo:
            _, _, grid, block, smem = plan.todo[0]
            return grid, block, smem
        return plan.grid, plan.block, plan.smem

    def launch_for(self, *args: Any) -> LaunchConfig:
        """The whole launch configuration the next call with these arguments would use."""
        plan = self._plans.get(self._read(args)) or self._new_plan(args)
        if plan.todo:
            cand, _, grid, block, smem = plan.todo[0]
            pv = cand.params if isinstance(cand, Config) else ParamValues.NONE
            return LaunchConfig(pv, block, grid, smem)
        sel = self.selector.select(plan.D)
        return LaunchConfig(sel.params, plan.block, plan.grid, plan.smem)

    # -- once per new D -----------------------------------------------------------------------

    def _new_plan(self, args: tuple[Any, ...]) -> _Plan:
        D = self.spec.read_data(args)  # checked: integer, inside the sane range
        sel: Selection = self.selector.select(D)
        fn = self._variant_fn(sel.params)
        plan = _Plan(D, sel.grid, sel.block, self._smem(D, sel.config, fn), fn)
        if self.refine > 1 and sel.source == "model":
            candidates = self.selector.refine_blocks(D, self.refine)
            if len(candidates) > 1:
                for cand in candidates:
                    c = cand if isinstance(cand, Config) else Config(ParamValues.NONE, cand)
                    cfn = self._variant_fn(c.params)
                    grid = self.selector.grid_for(D, cand)
                    plan.todo.append((cand, cfn, grid, c.block, self._smem(D, c, cfn)))
        key = self._read(args)
        try:
            hash(key)
        except TypeError:  # e.g. 0-d arrays as sizes: key the plans by ints instead
            raw = self._read
            self._read = lambda a: tuple(int(v) for v in (raw(a) if self._multi else (raw(a),)))
            key = self._read(args)
        self._plans[key] = plan
        return plan

    def _smem(self, D: DataSize, c: Config, fn: Any) -> int:
        nbytes = self.spec.dynamic_smem_for(D, c.block, c.params if self.spec.params else None)
        if nbytes > max(self._opted.get(id(fn), 0), 48 * 1024):
            self.backend.opt_in_dynamic_smem(fn, nbytes)
            self._opted[id(fn)] = nbytes
        return nbytes

    # -- refinement ----------------------------------------------------------------------------

    def _refining_call(self, plan: _Plan, args: tuple[Any, ...], stream: Any | None) -> None:
        cupy = self.backend.module()
        cand, fn, grid, block, smem = plan.todo.pop(0)
        s = stream if stream is not None else cupy.cuda.get_current_stream()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(s)
        with s:
            fn(grid, block, args, shared_mem=smem)
        end.record(s)
        plan.timed.append((cand, start, end))

    def _maybe_settle(self, plan: _Plan) -> None:
        """Pin the fastest measured block once all refinement launches have completed."""
        cupy = self.backend.module()

        if not all(end.done for _, _, end in plan.timed):
            return
        times = [(cupy.cuda.get_elapsed_time(s, e), i) for i, (_, s, e) in enumerate(plan.timed)]
        ms, i = min(times)
        sel = self.selector.fix(plan.D, plan.timed[i][0], ms)
        plan.fn = self._variant_fn(sel.params)
        plan.grid, plan.block = sel.grid, sel.block
        plan.smem = self._smem(plan.D, sel.config, plan.fn)
        plan.timed = []

    def settle(self) -> None:
        """Wait for pending refinement timings and pin their winners (e.g. before exit)."""
        for plan in self._plans.values():
            for _, _, end in plan.timed:
                end.synchronize()
            if plan.timed:
                self._maybe_settle(plan)
        self.selector.flush()
