"""Launching CuPy RawKernels: the launch functions of one configuration, CuPy's streams and
events, and the adapter of a KernelSpec compiled by CuPy (`Kernel.tuned`, `Kernel.launcher`).

`frontends.cupy_wrap` (a user's RawKernel under `klaraptor.tune`) launches through the same
functions; CuPy is imported only when a kernel is launched.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from klaraptor.backends.base import GpuBackend
from klaraptor.core.types import Block, Grid, ParamValues
from klaraptor.runtime.adapter import EventClock, Launchers, stream_handle
from klaraptor.spec import KernelSpec

# Above this, a kernel's dynamic shared memory needs an explicit opt-in.
OPT_IN_ABOVE = 48 * 1024


def cupy_stream(stream: Any) -> Any:
    """A stream CuPy launches on: CuPy's own as given; torch, Numba, cuda.core streams and raw
    handles as `cupy.cuda.ExternalStream` (0: the null stream)."""
    if (type(stream).__module__ or "").startswith("cupy"):
        return stream
    import cupy

    ptr = stream_handle(stream)
    return cupy.cuda.Stream.null if not ptr else cupy.cuda.ExternalStream(ptr)


def cupy_launchers(
    raw: Any, grid: Grid, block: Block, smem: int, torch: Any, args: Sequence[Any]
) -> Launchers:
    """(launch on the current stream, launch on a given stream) of the RawKernel `raw` in one
    configuration. With a torch bridge (`frontends.torch.TorchBridge`), tensors become device
    addresses and the launch goes to torch's current stream."""
    if torch is None:

        def go_on(args: tuple[Any, ...], stream: Any) -> None:
            raw(grid, block, args, shared_mem=smem, stream=cupy_stream(stream))

        # A partial runs in C: the same call a user writes, nothing between.
        if smem:
            return functools.partial(raw, grid, block, shared_mem=smem), go_on
        return functools.partial(raw, grid, block), go_on
    import cupy

    convs = torch.pointer_converters(args, as_numpy=True)
    streams: dict[int, Any] = {0: cupy.cuda.Stream.null}
    current, given = torch.current_stream, torch.stream_ptr

    def on(args: tuple[Any, ...], ptr: int) -> None:
        s = streams.get(ptr)
        if s is None:
            s = streams[ptr] = cupy.cuda.ExternalStream(ptr)
        raw(grid, block, tuple([c(a) for c, a in zip(convs, args)]), shared_mem=smem, stream=s)

    return (lambda args: on(args, current())), (lambda args, stream: on(args, given(stream)))


class CupyClock:
    """CuPy's CUDA events, on CuPy's current stream (where a launch without `stream=` goes)."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def stream(self, stream: Any | None) -> Any:
        return self.cupy.cuda.get_current_stream() if stream is None else cupy_stream(stream)

    def record(self, stream: Any) -> Any:
        event = self.cupy.cuda.Event()
        event.record(stream)
        return event

    def done(self, event: Any) -> bool:
        return bool(event.done)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self.cupy.cuda.get_elapsed_time(start, end))

    def wait(self, event: Any) -> None:
        event.synchronize()


class SpecAdapter:
    """A KernelSpec's CUDA C++ kernel compiled by a GPU backend (CuPy's): the adapter behind
    `Kernel.tuned` and `Kernel.launcher`. Each compiled variant is compiled once, on the first
    launch that chooses it."""

    frontend = "cupy"

    def __init__(self, spec: KernelSpec, backend: GpuBackend) -> None:
        self.spec = spec
        self.backend = backend
        self.function_name = spec.kernel
        self._fns: dict[ParamValues, Any] = {}
        self._opted: dict[int, int] = {}  # id(fn) -> dynamic shared memory opted in to

    def variant(self, params: ParamValues) -> Any:
        """The compiled kernel of a variant (ParamValues.NONE: the spec's kernel as written)."""
        fn = self._fns.get(params)
        if fn is None:
            spec = self.spec
            fn = self._fns[params] = (
                self.backend.compile_spec(spec, params)
                if params
                else self.backend.compile(spec.source, spec.kernel, spec.options)
            )
        return fn

    def launcher(
        self,
        grid: Grid,
        block: Block,
        smem: int,
        context: Any,
        args: Sequence[Any],
        params: Any = None,
    ) -> Launchers:
        fn = self.variant(params or ParamValues.NONE)
        if smem > max(self._opted.get(id(fn), 0), OPT_IN_ABOVE):
            self.backend.opt_in_dynamic_smem(fn, smem)
            self._opted[id(fn)] = smem
        return cupy_launchers(fn, grid, block, smem, context, args)

    def check_call(self, args: Sequence[Any]) -> None:
        """Nothing to check: CuPy converts or refuses each argument at launch."""

    def clock(self, context: Any) -> EventClock:
        return CupyClock()
