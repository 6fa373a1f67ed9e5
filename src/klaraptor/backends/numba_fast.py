"""Fast repeated launches of one compiled Numba kernel on the same arguments (issue 33: Numba's
slow host launches).

`kernel[grid, block, stream, smem](*args)` costs tens of microseconds of host time in
numba-cuda: a launch configuration object, typing of every argument, overload selection,
launch-config sensitivity bookkeeping, then the conversion of every argument to the kernel's
parameters (an array becomes meminfo, parent, size, itemsize, data, shape, strides). Timing a
microsecond kernel takes thousands of launches, so the measuring bar of the README's Numba
example ran 15-24 s, against 2 s for the same kernel launched by CuPy.

A `FastLauncher` does what numba-cuda's own `_Kernel.launch` does, with Numba's own functions,
but converts the arguments once per argument tuple (they are the same objects for every launch
of a measured point) and keeps one `LaunchConfig` per (grid, block, smem): a launch is then one
call of cuda.core's `launch`, on the stream Numba itself launches on for stream 0. It refuses
(`unavailable` says why) whatever it does not mirror exactly: debug kernels (their exception
slot), argument extensions, arguments Numba would copy to the device and back (host arrays),
launch-config-sensitive kernels, another numba-cuda than the one it was written against (no
`_prepare_args` or `cuda.core` launch). The caller then launches the usual way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any


class FastLaunchUnavailable(Exception):
    """This kernel or these arguments cannot take the fast path (the message says why)."""


class FastLauncher:
    """Launches of one compiled overload (`dispatcher.overloads[argtypes]`) with arguments
    converted once per argument tuple."""

    def __init__(self, dispatcher: Any, argtypes: tuple[Any, ...], keep: int = 4) -> None:
        from numba.cuda import dispatcher as nd  # numba-cuda's own launch names
        from numba.cuda.cudadrv import driver

        overload = dispatcher.overloads[argtypes]
        for needed in ("_prepare_args", "_codelibrary", "argument_types"):
            if not hasattr(overload, needed):
                raise FastLaunchUnavailable(f"this numba-cuda's kernels have no {needed}")
        if not all(hasattr(nd, n) for n in ("launch", "LaunchConfig", "CUDA_CORE_GE_1_0")):
            raise FastLaunchUnavailable("this numba-cuda does not launch through cuda.core")
        if getattr(overload, "debug", False):
            raise FastLaunchUnavailable("a debug kernel (its exception slot is read per launch)")
        if getattr(overload, "extensions", None):
            raise FastLaunchUnavailable("the kernel has argument extensions")
        if getattr(overload, "launch_config_sensitive", False):
            raise FastLaunchUnavailable("the kernel is launch-configuration sensitive")
        self._overload = overload
        self._launch = nd.launch  # type: ignore[attr-defined]
        self._config_cls = nd.LaunchConfig  # type: ignore[attr-defined]
        self._new_style = bool(nd.CUDA_CORE_GE_1_0)  # type: ignore[attr-defined]
        self._cooperative = bool(getattr(overload, "cooperative", False))
        self._kernel = overload._codelibrary.get_cufunc().kernel
        self._stream = driver._to_core_stream(0)  # type: ignore[attr-defined]  # what kernel[grid, block, 0, smem] uses
        self._keep = max(1, int(keep))
        # id(args) -> (args, converted parameters): the args object is kept so its id stays its
        self._params: OrderedDict[int, tuple[Any, list[Any]]] = OrderedDict()
        self._configs: dict[tuple[Any, ...], Any] = {}

    def parameters(self, args: Sequence[Any]) -> list[Any]:
        """The kernel parameters of `args`, as numba-cuda converts them (cached per tuple)."""
        hit = self._params.get(id(args))
        if hit is not None and hit[0] is args:
            self._params.move_to_end(id(args))
            return hit[1]
        o = self._overload
        if len(args) != len(o.argument_types):
            raise FastLaunchUnavailable(
                f"{len(args)} arguments for a kernel of {len(o.argument_types)}"
            )
        retr: list[Any] = []
        params: list[Any] = []
        for ty, value in zip(o.argument_types, args, strict=True):
            o._prepare_args(ty, value, self._stream, retr, params)
        if retr:
            raise FastLaunchUnavailable("an argument is a host array Numba copies back")
        self._params[id(args)] = (args, params)
        while len(self._params) > self._keep:
            self._params.popitem(last=False)
        return params

    def config(self, grid: tuple[int, ...], block: tuple[int, ...], smem: int) -> Any:
        key = (grid, block, smem)
        cfg = self._configs.get(key)
        if cfg is None:
            coop = {
                "is_cooperative" if self._new_style else "cooperative_launch": self._cooperative
            }
            cfg = self._config_cls(grid=grid, block=block, shmem_size=smem, **coop)
            self._configs[key] = cfg
        return cfg

    def __call__(
        self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], smem: int = 0
    ) -> None:
        params = self.parameters(args)
        self._launch(
            self._stream, self.config(tuple(grid), tuple(block), int(smem)), self._kernel, *params
        )


__all__ = ["FastLaunchUnavailable", "FastLauncher"]
