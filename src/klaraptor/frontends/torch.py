"""PyTorch tensors as kernel arguments: no copies, torch's current stream, clear device errors.

A tuned kernel (Numba, CuPy or cuda.core) called with torch tensors launches on them in place:
- CuPy and cuda.core kernels get each tensor's device address (`data_ptr()`), the same pointer
  a CuPy array would pass; Numba kernels take the tensor itself through
  `__cuda_array_interface__` (a view, no copy);
- the launch goes to torch's current stream on the tensors' device (or the `stream=` given: a
  `torch.cuda.Stream`, a raw handle, anything with `__cuda_stream__`), so it is ordered with the
  surrounding torch work, inside a model's forward pass too;
- a tensor on the CPU, or on another GPU than the first call's, is refused with an error naming
  the argument (checked on every call: a host address handed to a kernel would crash it).

torch is never imported by klaraptor unless tensors are passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from klaraptor.core.errors import LaunchError, MissingDependencyError
from klaraptor.runtime.adapter import Launchers, stream_handle


def torch_module() -> Any:
    """torch, or MissingDependencyError naming the extra."""
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(
            "torch tensors need PyTorch: pip install 'klaraptor[torch]'"
        ) from exc
    return torch


def is_tensor(x: Any) -> bool:
    """Whether `x` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


class TensorDeviceError(LaunchError):
    """A tensor argument is not on the GPU the kernel runs on."""


class TorchBridge:
    """What a tuned kernel needs to launch on torch tensors: pointers, the stream, checks.

    Made from the first call that passes tensors; `device` is their CUDA device index."""

    def __init__(self, args: Sequence[Any], names: Sequence[str] | None, kernel: str) -> None:
        self.torch = torch_module()
        self.names = tuple(names or ())
        self.kernel = kernel
        self.tensor_positions = tuple(i for i, a in enumerate(args) if is_tensor(a))
        first = args[self.tensor_positions[0]] if self.tensor_positions else None
        self.device = max(0, int(first.get_device())) if first is not None else 0
        self.check(args)
        raw = getattr(self.torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            dev = self.device
            self.current_stream: Callable[[], int] = lambda: raw(dev)
        else:  # public API (slower: makes a Stream object)
            cs = self.torch.cuda.current_stream
            self.current_stream = lambda: int(cs(self.device).cuda_stream)

    def label(self, i: int) -> str:
        return f"argument {i}" + (f" ({self.names[i]})" if i < len(self.names) else "")

    def check(self, args: Sequence[Any]) -> None:
        """TensorDeviceError naming the first tensor that is not on the kernel's GPU."""
        for i, a in enumerate(args):
            if is_tensor(a) and a.get_device() != self.device:
                where = "the CPU" if a.get_device() < 0 else f"cuda:{a.get_device()}"
                raise TensorDeviceError(
                    f"{self.label(i)} of {self.kernel} is a torch tensor on {where}, but the "
                    f"kernel runs on cuda:{self.device}; klaraptor launches on CUDA tensors of one "
                    f"GPU without copying them: move it first (.to('cuda:{self.device}'))"
                )

    def stream_ptr(self, stream: Any) -> int:
        """The raw handle of a stream given as `stream=` (see `stream_handle`)."""
        return stream_handle(stream)

    def pointer_converters(
        self, args: Sequence[Any], as_numpy: bool
    ) -> tuple[Callable[[Any], Any], ...]:
        """Per argument position: tensor → its checked device address (np.uint64 for CuPy's
        kernels, a Python int for cuda.core's), anything else unchanged."""
        dev = self.device
        kernel = self.kernel
        label = self.label

        def identity(a: Any) -> Any:
            return a

        def converter(i: int) -> Callable[[Any], Any]:
            def to_ptr(t: Any) -> Any:
                at = t.get_device()
                if at == dev:
                    return np.uint64(t.data_ptr()) if as_numpy else t.data_ptr()
                where = "the CPU" if at < 0 else f"cuda:{at}"
                raise TensorDeviceError(
                    f"{label(i)} of {kernel} is a torch tensor on {where}, not on cuda:{dev}; "
                    f"move it first (.to('cuda:{dev}'))"
                )

            return to_ptr

        return tuple(converter(i) if is_tensor(a) else identity for i, a in enumerate(args))


class TorchClock:
    """torch's CUDA events, on torch's current stream of the tensors' GPU (where a tuned call
    with tensors launches without `stream=`): online refinement of any front-end's kernel
    called with tensors."""

    def __init__(self, bridge: TorchBridge) -> None:
        self.torch = bridge.torch
        self.device = bridge.device

    def stream(self, stream: Any | None) -> Any:
        cuda = self.torch.cuda
        if stream is None:
            return cuda.current_stream(self.device)
        if isinstance(stream, cuda.Stream):
            return stream
        ptr = stream_handle(stream)
        if not ptr:
            return cuda.default_stream(self.device)
        return cuda.ExternalStream(ptr, device=self.device)

    def record(self, stream: Any) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def wait(self, event: Any) -> None:
        event.synchronize()


__all__ = [
    "Launchers",
    "TensorDeviceError",
    "TorchBridge",
    "TorchClock",
    "is_tensor",
    "stream_handle",
    "torch_module",
]
