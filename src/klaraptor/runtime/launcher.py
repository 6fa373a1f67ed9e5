"""The one launcher: read D from a call's arguments, select, launch through any front-end.

`Launcher` serves `Kernel.tuned` and `Kernel.launcher` (a KernelSpec compiled by CuPy:
`TunedKernel`) and `klaraptor.tune` (Numba, CuPy, cuda.core, torch tensors:
`frontends.decorator.Tuned`), over the adapter protocol of `runtime.adapter`.

The per-call path is: read D (precompiled readers), one dict lookup of the launch function for
that D, the front-end's own launch. Everything else (evaluating the helper program, range
checks, history, making the launch function) runs once per new D.

Online refinement (`refine=k`, opt-in): for a new D whose choice comes from the model, the
first real calls launch the model's choice and the candidates of `Selector.refine_blocks(D, k)`
in turn (the best predictions within the model's band at D, at most k, plus the one measured
fastest at the largest training size), each bracketed by the front-end's CUDA events on the
stream the call launches on; no extra launches and no synchronisation are added. Once every
event has completed (checked without blocking on later calls, which launch the model's choice
meanwhile), the fastest measured candidate is pinned for that D and persisted as a 'refined'
history row, so the next process starts with it. While a D refines, its entry in the plan dict
is a refining function; once pinned, it is the plain launch again, so refinement costs the
cached path nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.backends.base import GpuBackend
from klaraptor.core.errors import KlaraptorError, LaunchError
from klaraptor.core.types import Block, Config, DataSize, Grid, LaunchConfig, ParamValues
from klaraptor.core.validate import check_int
from klaraptor.runtime.adapter import EventClock, LaunchAdapter
from klaraptor.runtime.selector import Selector
from klaraptor.spec import KernelSpec

Go = Callable[[tuple[Any, ...]], None]
GoOn = Callable[[tuple[Any, ...], Any], None]


@dataclass(frozen=True)
class Planned:
    """The launch of one data size and where it comes from: "model" (the build), "refined" (a
    configuration measured on real calls) or "default" (no build)."""

    D: DataSize
    launch: LaunchConfig
    source: str


@dataclass
class _Trial:
    candidate: Any  # the selector's key: a block, or a Config for a kernel with parameters
    launch: LaunchConfig
    go: Go
    go_on: GoOn


@dataclass
class _Refinement:
    """One D's online refinement: candidates still to launch, and (trial, start, end) events
    of the ones launched."""

    D: DataSize
    clock: EventClock
    todo: list[_Trial]
    model: _Trial  # launched while the timings are pending
    timed: list[tuple[_Trial, Any, Any]] = field(default_factory=list)


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


def _no_plan(args: Sequence[Any]) -> Any:
    raise KeyError("first call")


class Launcher(functools.partial):  # type: ignore[type-arg]
    """A kernel launcher that picks the configuration per call: `launcher(*args, stream=None)`.

    `plan_for(*args)` gives the (grid, block, dynamic shared memory) the next call with these
    arguments uses, `launch_for(*args)` the whole LaunchConfig, `plan_params`/`plan_source` its
    compiled variant and where it comes from; `settle()` pins pending refinements.

    A `functools.partial` over a closure: calling it goes from C straight into the closure,
    which is what keeps the per-call path at a dict lookup plus the launch."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Launcher:
        plans: dict[Any, Go] = {}
        streamed: dict[Any, GoOn] = {}
        read: Callable[[Sequence[Any]], Any] = _no_plan

        def call(*args: Any, stream: Any = None) -> None:
            try:
                go = plans[read(args)]
            except (KeyError, TypeError, IndexError, AttributeError):  # a new size, bad args
                go = me._plan(args)
            try:
                if stream is None:
                    go(args)
                else:
                    streamed[read(args)](args, stream)
            except Exception as exc:  # noqa: BLE001 - costs nothing unless raised
                me._launch_failed(exc, args, stream)

        def set_read(reader: Callable[[Sequence[Any]], Any]) -> None:
            nonlocal read
            read = reader

        me = super().__new__(cls, call)
        me._plans, me._streamed, me._set_read = plans, streamed, set_read
        me._current_read = lambda: read
        return me

    _plans: dict[Any, Go]
    _streamed: dict[Any, GoOn]
    _set_read: Callable[[Callable[[Sequence[Any]], Any]], None]
    _current_read: Callable[[], Callable[[Sequence[Any]], Any]]

    def __init__(
        self,
        adapter: LaunchAdapter,
        *,
        spec: KernelSpec | None = None,
        selector: Selector | None = None,
        refine: int = 0,
        read: Callable[[Sequence[Any]], Any] | None = None,
        clock: EventClock | None = None,
    ) -> None:
        """`adapter` launches; `spec` reads and checks D (given later by a subclass that makes
        it on the first call); `selector` chooses (None: `_choose` is the subclass's);
        `refine=k` refines online over the model's top k; `read` is the fast raw-D reader
        (default: the spec's); `clock` times refinement (default: the adapter's events)."""
        self._adapter = adapter
        self._spec = spec
        self._selector = selector
        self._refine = check_int(refine, "refine", minimum=0, error=LaunchError)
        if read is None and spec is not None:
            read = data_reader(spec)
        self._fast_read = read
        self._clock = clock
        self._context: Any = None  # the front-end's per-call-kind context (the torch bridge)
        self._configs: dict[Any, Planned] = {}
        self._refining: dict[Any, _Refinement] = {}
        self._lock = threading.RLock()

    def __reduce__(self) -> Any:
        raise TypeError(f"a tuned kernel ({self._name()}) cannot be pickled; pickle its spec")

    @property
    def refine(self) -> int:
        """How many candidates online refinement tries for a new D (0 or 1: none)."""
        return self._refine

    @property
    def adapter(self) -> LaunchAdapter:
        """The front-end adapter this launcher launches through."""
        return self._adapter

    def _name(self) -> str:
        return str(getattr(self._adapter, "function_name", "kernel"))

    # -- what a call uses ------------------------------------------------------------------------

    def _key(self, args: Sequence[Any]) -> Any:
        try:
            return self._current_read()(args)
        except (KeyError, TypeError, IndexError, AttributeError):
            return None

    def _next(self, args: Sequence[Any]) -> tuple[Planned, LaunchConfig]:
        """What the next call with these arguments launches (planning its size if new)."""
        key = self._key(args)
        if key not in self._configs:
            self._plan(tuple(args))
            key = self._key(args)
        planned = self._configs[key]
        refining = self._refining.get(key)
        if refining is not None and refining.todo:
            return planned, refining.todo[0].launch
        return planned, planned.launch

    def plan_for(self, *args: Any) -> tuple[Grid, Block, int]:
        """(grid, block, dynamic shared memory) the next call with these arguments uses (a
        first call's work, a build included, happens here if no call came before)."""
        launch = self._next(args)[1]
        return launch.grid, launch.block, launch.smem

    def launch_for(self, *args: Any) -> LaunchConfig:
        """The whole launch configuration the next call with these arguments uses."""
        return self._next(args)[1]

    def plan_params(self, *args: Any) -> ParamValues:
        """The program parameter values (the compiled variant) the next call with these
        arguments launches (ParamValues.NONE for a kernel without parameters)."""
        return self._next(args)[1].params

    def plan_source(self, *args: Any) -> str:
        """Where a call's configuration comes from: "model" (the build), "refined" (measured
        on real calls, now or in an earlier process) or "default" (no build)."""
        return self._next(args)[0].source

    # -- once per new size ---------------------------------------------------------------------

    def _plan(self, args: tuple[Any, ...]) -> Go:
        with self._lock:
            spec = self._spec
            if spec is None or self._fast_read is None:
                raise LaunchError(f"{self._name()}: launching needs the kernel's KernelSpec")
            D = spec.read_data(args)  # checked: integer, inside the sane range
            self._check_call(args)
            planned = self._choose(D)
            go, go_on = self._launchers(planned.launch, args)
            reader = self._fast_read
            key = reader(args)
            try:
                hash(key)
            except TypeError:  # e.g. 0-d arrays as sizes: key the plans by ints instead
                fast, multi = self._fast_read, len(spec.data) > 1

                def reader(a: Sequence[Any]) -> Any:
                    return tuple(int(v) for v in (fast(a) if multi else (fast(a),)))

                key = reader(args)
            self._set_read(reader)
            self._configs[key] = planned
            self._refining.pop(key, None)
            model = _Trial(None, planned.launch, go, go_on)
            trials = self._trials(planned, model, args)
            if trials:
                clock = self._clock or self._adapter.clock(self._context)
                self._refining[key] = _Refinement(D, clock, trials, model)
                go, go_on = self._refining_launchers(key)
            self._plans[key] = go
            self._streamed[key] = go_on
            return go

    def _check_call(self, args: Sequence[Any]) -> None:
        """A KlaraptorError naming what is wrong with a new size's arguments."""
        self._adapter.check_call(args)

    def _choose(self, D: DataSize) -> Planned:
        """The launch for D (the selector's choice)."""
        if self._selector is None:
            raise LaunchError(f"{self._name()}: no selector to choose a configuration with")
        sel = self._selector.select(D)
        return Planned(D, self._launch(D, sel.config, sel.grid), sel.source)

    def _launch(self, D: DataSize, config: Config, grid: Grid) -> LaunchConfig:
        spec = self._spec
        assert spec is not None
        smem = spec.dynamic_smem_for(D, config.block, config.params if spec.params else None)
        return LaunchConfig(config.params, config.block, grid, smem)

    def _launchers(self, launch: LaunchConfig, args: Sequence[Any]) -> tuple[Go, GoOn]:
        a = self._adapter
        if launch.params:
            return a.launcher(
                launch.grid, launch.block, launch.smem, self._context, args, params=launch.params
            )
        # kernels without parameters launch exactly as before parameters existed
        return a.launcher(launch.grid, launch.block, launch.smem, self._context, args)

    def _forget(self) -> None:
        """Drop every planned size (a new build, other kinds of arguments)."""
        with self._lock:
            self._plans.clear()
            self._streamed.clear()
            self._configs.clear()
            self._refining.clear()

    # -- online refinement -----------------------------------------------------------------------

    def _trials(self, planned: Planned, model: _Trial, args: Sequence[Any]) -> list[_Trial]:
        """The candidates to time for a model's choice (none unless refine >= 2 and the band
        at D holds more than one); `model` is the choice's own launch."""
        sel = self._selector
        if self._refine < 2 or planned.source != "model" or sel is None:
            return []
        D = planned.D
        candidates = sel.refine_blocks(D, self._refine)
        if not candidates:
            return []
        # The model's choice first, whatever the ranking by raw prediction says: the choice rule
        # may pick another candidate within the band (refine_blocks ranks by prediction alone).
        launch = planned.launch
        chosen: Any = launch.config if isinstance(candidates[0], Config) else launch.block
        candidates = [chosen, *(c for c in candidates if c != chosen)]
        if len(candidates) < 2:
            return []
        out = []
        for cand in candidates:
            if cand == chosen:  # launched as planned: its launch functions are made already
                out.append(_Trial(cand, model.launch, model.go, model.go_on))
                continue
            c = cand if isinstance(cand, Config) else Config(ParamValues.NONE, cand)
            launch = self._launch(D, c, sel.grid_for(D, cand))
            out.append(_Trial(cand, launch, *self._launchers(launch, args)))
        return out

    def _refining_launchers(self, key: Any) -> tuple[Go, GoOn]:
        def go(args: tuple[Any, ...]) -> None:
            self._refining_call(key, args, None)

        def go_on(args: tuple[Any, ...], stream: Any) -> None:
            self._refining_call(key, args, stream)

        return go, go_on

    def _refining_call(self, key: Any, args: tuple[Any, ...], stream: Any) -> None:
        with self._lock:
            r = self._refining.get(key)
            if r is None:  # pinned meanwhile (settle(), another thread) or forgotten
                go = self._plans.get(key) or self._plan(args)
                if stream is None:
                    go(args)
                else:
                    self._streamed[key](args, stream)
                return
            if r.todo:
                trial = r.todo.pop(0)
                clock = r.clock
                s = clock.stream(stream)
                start = clock.record(s)
                trial.go_on(args, s)
                end = clock.record(s)
                r.timed.append((trial, start, end))
                return
            if all(r.clock.done(end) for _, _, end in r.timed):
                self._pin(key, r)
                go, go_on = self._plans[key], self._streamed[key]
            else:
                go, go_on = r.model.go, r.model.go_on
        if stream is None:
            go(args)
        else:
            go_on(args, stream)

    def _pin(self, key: Any, r: _Refinement) -> None:
        """Pin the fastest timed candidate for this D (persisted as a 'refined' history row) and
        put its plain launch functions in the plan dicts."""
        del self._refining[key]
        if not r.timed:
            return
        times = [(r.clock.elapsed_ms(s, e), i) for i, (_, s, e) in enumerate(r.timed)]
        ms, i = min(times)
        trial = r.timed[i][0]
        assert self._selector is not None
        sel = self._selector.fix(r.D, trial.candidate, ms)
        self._configs[key] = Planned(r.D, trial.launch, sel.source)
        self._plans[key], self._streamed[key] = trial.go, trial.go_on

    def settle(self) -> None:
        """Wait for pending refinement timings and pin their winners (e.g. before exit); a D
        whose candidates were not all launched yet is pinned among the ones that were."""
        with self._lock:
            for key, r in list(self._refining.items()):
                for _, _, end in r.timed:
                    r.clock.wait(end)
                self._pin(key, r)
            if self._selector is not None:
                self._selector.flush()

    # -- failures --------------------------------------------------------------------------------

    def _launch_failed(self, exc: Exception, args: tuple[Any, ...], stream: Any) -> None:
        if isinstance(exc, KlaraptorError):
            raise exc
        self._adapter.check_call(args)
        planned = self._configs.get(self._key(args))
        shown = ""
        if planned is not None:
            launch = planned.launch
            shown = f" (grid {launch.grid}, block {launch.block}, {launch.smem} B)"
        raise LaunchError(
            f"launch of {self._name()}{shown} failed: {type(exc).__name__}: {exc}"
        ) from exc

    def __repr__(self) -> str:
        return f"<klaraptor.Launcher {self._adapter.frontend} kernel {self._name()}>"


class TunedKernel(Launcher):
    """`Kernel.tuned`'s launcher: a KernelSpec's CUDA C++ kernel compiled by CuPy, the
    configuration chosen by a Selector; `tuned(*args, stream=None)`."""

    def __init__(
        self,
        spec: KernelSpec,
        selector: Selector,
        *,
        refine: int = 0,
        backend: GpuBackend | None = None,
        clock: EventClock | None = None,
    ) -> None:
        from klaraptor.backends.cupy_backend import CupyBackend
        from klaraptor.runtime.cupy_launch import SpecAdapter

        self.backend: GpuBackend = backend or CupyBackend()
        super().__init__(
            SpecAdapter(spec, self.backend),
            spec=spec,
            selector=selector,
            refine=refine,
            clock=clock,
        )

    @property
    def spec(self) -> KernelSpec:
        assert self._spec is not None
        return self._spec

    @property
    def selector(self) -> Selector:
        assert self._selector is not None
        return self._selector

    def __repr__(self) -> str:
        return f"<klaraptor.TunedKernel {self._name()} (refine={self._refine})>"


__all__ = ["Launcher", "Planned", "TunedKernel", "data_reader"]
