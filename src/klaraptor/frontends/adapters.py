"""What `klaraptor.tune` needs from a front-end: the launcher's adapter protocol
(`runtime.adapter.LaunchAdapter`: launch functions, argument checks, CUDA events) plus what the
first call needs to make the kernel's spec. `frontends.decorator.adapter_for` picks the adapter
of a kernel object: `NumbaAdapter`, `CupyAdapter` or `CoreAdapter`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from klaraptor.runtime.adapter import LaunchAdapter
from klaraptor.spec import KernelSpec


@runtime_checkable
class TuneAdapter(LaunchAdapter, Protocol):
    """A front-end of `klaraptor.tune`.

    `param_names`: the kernel's parameter names (None where they cannot be read); `base_name`:
    the store name's default prefix; `array_kind`: the arrays the inferred argument factory
    makes ("cupy", "numba"); `ints_are_pointers`: whether a Python int argument may be a device
    address (cuda.core). `bind(args)` binds the kernel to the first call (Numba's signature);
    `make_spec(**fields)` makes the KernelSpec the build measures; `prepare_launch()` starts, in the
    background, what the first launch after a first-call build would otherwise do then (Numba's
    JIT compile of the bound signature), so it overlaps the build's measuring."""

    @property
    def param_names(self) -> tuple[str, ...] | None: ...
    @property
    def base_name(self) -> str: ...
    @property
    def array_kind(self) -> str: ...
    @property
    def ints_are_pointers(self) -> bool: ...

    def bind(self, args: Sequence[Any]) -> None: ...

    def make_spec(self, **fields: Any) -> KernelSpec: ...

    def prepare_launch(self) -> None: ...


__all__ = ["TuneAdapter"]
