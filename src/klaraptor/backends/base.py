"""What a GPU backend is: the methods collection and the runtime call (`GpuBackend`), and the
output check every backend runs the same way (`OutputCheck`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from klaraptor.core.types import KernelAttributes

# A grid or a block: (x, y, z), as any sequence of ints.
Dims = Sequence[int]


@runtime_checkable
class OutputCheck(Protocol):
    """`check_outputs` for a backend that defines `poison`, `synchronize` and how far each
    output is from its reference (`output_errors`): the output-checking part of `GpuBackend`,
    which backends subclass to share the one check."""

    def poison(self, args: Sequence[Any], indices: Sequence[int]) -> None:
        raise NotImplementedError

    def synchronize(self, what: str = "") -> None:
        raise NotImplementedError

    def output_errors(
        self, args: Sequence[Any], expected: Mapping[int, np.ndarray]
    ) -> dict[str, float]:
        """{arg index as text: relative error of that output against `expected`}."""
        raise NotImplementedError

    def check_outputs(
        self,
        launch_fn: Callable[[Sequence[Any]], None],
        args: Sequence[Any],
        expected: Mapping[int, np.ndarray],
        *,
        poison_indices: Sequence[int],
        rtol: float,
    ) -> dict[str, Any]:
        """Launch once on `args` and compare the outputs with `expected` ({arg index: array}).

        `expected` must come from the inputs as they are before this launch (compute it from
        `self.to_host(args)` first), so in-place updates are checked too. Outputs in
        `poison_indices` are filled with NaN before the launch. Returns
        `{"ok", "rtol", "max_rel_err", "errors": {arg index: relative error}}`.
        """
        self.poison(args, poison_indices)
        launch_fn(args)
        self.synchronize("checked launch")
        errors = self.output_errors(args, expected)
        worst = max(errors.values(), default=0.0)
        ok = all(e <= rtol for e in errors.values())  # NaN compares False: a NaN output fails
        return {"ok": bool(ok), "rtol": float(rtol), "max_rel_err": worst, "errors": errors}


@runtime_checkable
class GpuBackend(OutputCheck, Protocol):
    """A GPU backend of collection and launching (CuPy's, Numba's): compile a kernel, read its
    attributes, launch and time it, check its outputs. Kernels, arrays and timers are the
    backend's own objects (`Any` here)."""

    name: str

    def module(self) -> Any: ...
    def use_device(self, device_id: int) -> None: ...
    def max_dynamic_smem_optin(self, device_id: int = 0) -> int: ...
    def timer(self, clock_mhz: float, *, flush_bytes: int = 0) -> Any: ...
    def compile(self, source: str, name: str, options: Sequence[str] = ()) -> Any: ...
    def compile_spec(self, spec: Any, params: Any = None) -> Any: ...
    def kernel_ptx(self, spec: Any, fn: Any, arch: str, params: Any = None) -> tuple[str, str]: ...
    def attributes(self, fn: Any) -> KernelAttributes: ...
    def opt_in_dynamic_smem(self, fn: Any, nbytes: int) -> None: ...
    def ptx(self, source: str, options: Sequence[str], arch: str) -> str: ...
    def launch(
        self, fn: Any, grid: Dims, block: Dims, args: Sequence[Any], shared_mem: int = 0
    ) -> None: ...
    def context_alive(self) -> bool: ...
    def free_memory(self) -> None: ...
    def profile_one(self, launch_fn: Callable[[], None], range_name: str) -> None: ...
    def to_host(self, args: Sequence[Any]) -> tuple[Any, ...]: ...
    def clone_args(self, args: Sequence[Any]) -> tuple[Any, ...]: ...
    def device_clock_mhz(self, device_id: int = 0) -> float: ...
    def l2_bytes(self, device_id: int = 0) -> int: ...
