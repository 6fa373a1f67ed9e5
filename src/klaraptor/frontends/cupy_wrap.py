"""CuPy front-end: `klaraptor.tune` over a `cupy.RawKernel` (or `RawModule.get_function(name)`).

The kernel is measured from its own source and NVRTC options (the CuPy backend compiles the
same module), and launched through the user's RawKernel object itself:
`raw(grid, block, args, shared_mem=..., stream=...)`. With torch tensors the arguments become
device addresses and the launch goes to torch's current stream (`frontends.torch`).

With program parameters (`klaraptor.tune(params=...)`) the RawKernel gives the source, the
kernel's name and the NVRTC options; each variant launched is compiled from them once per
process: a RawKernel with the variant's defines, or a RawModule's template instance
`name<v1, v2>` (an NVRTC name expression), as the spec's `param_style` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from klaraptor.core.errors import SpecError
from klaraptor.core.types import Block, Grid
from klaraptor.frontends.torch import TorchBridge, TorchClock
from klaraptor.runtime.adapter import EventClock, Launchers
from klaraptor.runtime.cupy_launch import OPT_IN_ABOVE, CupyClock, cupy_launchers, cupy_stream
from klaraptor.spec import KernelSpec
from klaraptor.spec.cuda_source import c_param_names

__all__ = ["CupyAdapter", "cupy_stream", "is_raw_kernel"]


def is_raw_kernel(obj: Any) -> bool:
    """Whether `obj` is a cupy.RawKernel (without importing CuPy)."""
    t = type(obj)
    return t.__name__ == "RawKernel" and (t.__module__ or "").startswith("cupy")


class CupyAdapter:
    """What `klaraptor.tune` needs from a CuPy RawKernel."""

    frontend = "cupy"
    array_kind = "cupy"
    ints_are_pointers = False

    def __init__(self, raw: Any, *, params: bool = False) -> None:
        # Some fields are Cython attributes without Python accessors; the pickling state has all.
        try:
            state = dict(raw.__getstate__())
        except (AttributeError, TypeError):
            state = {}

        def field(name: str, default: Any = None) -> Any:
            return state.get(name, getattr(raw, name, default))

        problems = []
        if field("code") is None:
            problems.append(
                "it was loaded from a cubin/PTX file; klaraptor measures kernels compiled from "
                "their source, so give the RawModule code="
            )
        if field("name_expressions"):
            problems.append(
                "it is a C++ template instance (name_expressions); wrap it in an "
                '`extern "C" __global__` kernel'
            )
        if field("backend", "nvrtc") != "nvrtc":
            problems.append(f"backend {field('backend')!r}: klaraptor compiles with NVRTC")
        for flag in ("jitify", "translate_cucomplex", "enable_cooperative_groups"):
            if field(flag, False):
                problems.append(f"{flag}=True is not supported")
        if problems:
            raise SpecError(
                f"cannot tune the RawKernel {field('name', '?')!r}: " + "; ".join(problems)
            )
        self.raw = raw
        self.function_name = str(raw.name)
        self.source = str(raw.code)
        self.options = tuple(raw.options)
        self.param_names = c_param_names(self.source, self.function_name)
        self.base_name = f"cupy.{self.function_name}"
        self.has_params = params
        self._spec: KernelSpec | None = None
        self._variants: dict[Any, Any] = {}

    def variant(self, params: Any) -> Any:
        """The RawKernel of one compiled variant (compiled by CuPy on its first launch, and
        cached on disk by CuPy as every RawKernel is)."""
        raw = self._variants.get(params)
        if raw is None:
            import cupy

            spec = self._spec
            assert spec is not None, "make_spec runs before the first launch"
            name = spec.variant_kernel(params)
            options = spec.variant_options(params)
            if name == spec.kernel:  # the define style: one extern "C" kernel per define set
                raw = cupy.RawKernel(self.source, name, options=options)
            else:
                module = cupy.RawModule(code=self.source, options=options, name_expressions=(name,))
                raw = module.get_function(name)
            self._variants[params] = raw
        return raw

    def bind(self, args: Sequence[Any]) -> None:
        """Nothing to bind: a RawKernel takes any arguments its C signature accepts."""

    def prepare_launch(self) -> None:
        """Nothing to start: CuPy compiles a RawKernel in milliseconds, from its disk cache
        after the build's worker compiled the same source."""

    def check_call(self, args: Sequence[Any]) -> None:
        """No per-size check for CuPy kernels."""

    def make_spec(self, **fields: Any) -> KernelSpec:
        spec = KernelSpec(
            source=self.source, kernel=self.function_name, options=self.options, **fields
        )
        self._spec = spec
        return spec

    def launcher(
        self,
        grid: Grid,
        block: Block,
        smem: int,
        torch: TorchBridge | None,
        args: Sequence[Any],
        params: Any = None,
    ) -> Launchers:
        """(launch on the current stream, launch on a given stream) for one configuration (of
        the compiled variant `params`, for a kernel with program parameters)."""
        raw = self.variant(params) if params else self.raw
        if smem > OPT_IN_ABOVE and smem > raw.max_dynamic_shared_size_bytes:
            raw.max_dynamic_shared_size_bytes = smem
        return cupy_launchers(raw, grid, block, smem, torch, args)

    def clock(self, context: TorchBridge | None) -> EventClock:
        """CuPy's events on CuPy's current stream; torch's with tensors (torch's stream)."""
        return CupyClock() if context is None else TorchClock(context)
