"""What the launcher needs from a front-end: the `LaunchAdapter` protocol and its `EventClock`.

One launcher (`runtime.launcher.Launcher`) serves every front-end: `Kernel.tuned` and
`Kernel.launcher` (a KernelSpec compiled by CuPy, `runtime.cupy_launch.SpecAdapter`) and
`klaraptor.tune` over Numba, CuPy RawKernels and cuda.core kernels, with or without torch
tensors (`frontends.*`). A front-end is an adapter that makes the launch functions of one
configuration and, for online refinement, the CUDA events that time launches on its streams.

`context` is what a front-end needs per call kind beyond the arguments (for `klaraptor.tune`:
the torch bridge when the call passes tensors, else None); the launcher passes it through.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from klaraptor.core.errors import LaunchError
from klaraptor.core.types import Block, Grid

# What an adapter's `launcher` gives for one configuration: (launch on the current stream,
# launch on a given stream), each taking the call's arguments.
Launchers = tuple[Callable[[tuple[Any, ...]], None], Callable[[tuple[Any, ...], Any], None]]


@runtime_checkable
class EventClock(Protocol):
    """CUDA events of one front-end, for timing the launches of online refinement.

    `stream(s)` is the stream a launch given `stream=s` goes on (None: the one a launch without
    `stream=` goes on), in a form both `record` and the adapter's launch-on-a-stream function
    take, so that the events bracket exactly the launch they time."""

    def stream(self, stream: Any | None) -> Any: ...
    def record(self, stream: Any) -> Any: ...
    def done(self, event: Any) -> bool: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def wait(self, event: Any) -> None: ...


@runtime_checkable
class LaunchAdapter(Protocol):
    """A front-end as the launcher sees it.

    `launcher(...)` returns the launch functions of one configuration (of the compiled variant
    `params`, for a kernel with program parameters); it runs once per data size and candidate,
    never per call, so it may compile, opt in to shared memory and generate code.
    `check_call(args)` raises a KlaraptorError naming what is wrong with a call's arguments
    (run per new size and when a launch fails). `clock(context)` gives the events that time
    launches on the streams this front-end launches on."""

    @property
    def frontend(self) -> str: ...
    @property
    def function_name(self) -> str: ...

    def launcher(
        self,
        grid: Grid,
        block: Block,
        smem: int,
        context: Any,
        args: Sequence[Any],
        params: Any = None,
    ) -> Launchers: ...

    def check_call(self, args: Sequence[Any]) -> None: ...

    def clock(self, context: Any) -> EventClock: ...


class HostClock:
    """Host time around a launch: the clock of front-ends that launch synchronously (Numba's CUDA
    simulator runs the kernel before the launch returns), where the host time is the kernel's."""

    def stream(self, stream: Any | None) -> Any:
        return 0 if stream is None else stream

    def record(self, stream: Any) -> int:
        return time.perf_counter_ns()

    def done(self, event: Any) -> bool:
        return True

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return (int(end) - int(start)) / 1e6

    def wait(self, event: Any) -> None:
        """Nothing to wait for: the launch has finished when it returns."""


def stream_handle(stream: Any) -> int:
    """The raw handle of a stream: torch, CuPy, Numba, cuda.core (`__cuda_stream__`) or an int."""
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    handle = getattr(stream, "handle", None)
    if handle is not None:
        try:
            return int(handle)
        except (TypeError, ValueError):
            pass
    raise LaunchError(f"cannot read a CUDA stream handle from {type(stream).__name__}")
