"""Numba front-end: `klaraptor.tune` over a `numba.cuda.jit` kernel.

- Binding: a tuned Numba kernel is bound to one signature, the one its build measures: the
  kernel's first signature when it was compiled eagerly (`@cuda.jit("void(float32[::1], ...)")`),
  else the argument types of its first call. Calls whose arguments do not match it are refused
  with an error naming each mismatching argument (checked on the first call of every new data
  size; Numba itself refuses mismatches of eager kernels on every call).
- Measuring: a `NumbaKernelSpec` carries the dispatcher (pickled by Numba: the Python function
  and its options) and the bound argument types to the collection worker, which runs it on the
  Numba backend (`gpu.backend_numba`); builds are keyed by the function's source, its Numba
  options, the signature and the numba-cuda version.
- Launching: `kernel[grid, block, stream, smem](*args)`, the configured launcher cached per
  data size; torch tensors are passed as they are (Numba reads `__cuda_array_interface__`, no
  copy) on torch's current stream through `cuda.external_stream`.

- Program parameters: Numba has no preprocessor, but it freezes the globals and closure
  variables a kernel reads as compile-time constants. So a kernel with program parameters is
  given as a kernel factory, a function of the parameter values (keywords) returning a
  `cuda.jit` kernel that closes over them:

      @klaraptor.tune(data={"n": "n"}, grid="ceil(n / (bx * ITEMS))", params={"ITEMS": (1, 2, 4)})
      def scale(ITEMS):
          @cuda.jit
          def scale(x, y, n):
              i0 = cuda.grid(1) * ITEMS
              for j in range(ITEMS):  # unrolled: ITEMS is a constant
                  ...
          return scale

  The factory is called once per variant (cached); the default variant's kernel binds the
  signature. The collection worker calls it too, so it must be importable (a module-level
  function, as the kernels of `klaraptor.tune` are).

Under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) binding and launching work the same on the
CPU; measuring needs a GPU.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from klaraptor.backends.numba_backend import is_simulator, numba_cuda
from klaraptor.core.errors import SpecError
from klaraptor.core.types import Block, Grid
from klaraptor.frontends.torch import TorchBridge, TorchClock, is_tensor
from klaraptor.runtime.adapter import EventClock, HostClock, Launchers, stream_handle
from klaraptor.spec import KernelSpec

# Numba options that change the generated code (the others are bookkeeping).
_CODEGEN_OPTIONS = (
    "debug",
    "lineinfo",
    "opt",
    "fastmath",
    "link",
    "max_registers",
    "launch_bounds",
    "lto",
    "shared_memory_carveout",
    "inline",
    "forceinline",
)


class SignatureError(SpecError):
    """Arguments that do not match the signature a tuned Numba kernel is bound to."""


def is_numba_kernel(obj: Any) -> bool:
    """Whether `obj` is a `numba.cuda.jit` kernel (a dispatcher, or the simulator's)."""
    t = type(obj)
    return (t.__module__ or "").startswith("numba") and hasattr(obj, "py_func")


@dataclass(frozen=True)
class NumbaKernelSpec(KernelSpec):
    """A KernelSpec whose kernel is a Numba dispatcher bound to `argtypes`.

    `source` is the Python source of the kernel function (for the fingerprint), `kernel` its
    name, `options` the Numba options and the signature as text."""

    backend: ClassVar[str] = "numba"
    numba_kernel: Any = field(default=None, compare=False, hash=False)
    argtypes: tuple[Any, ...] = ()
    # With program parameters: a function of their values (keywords) returning the variant's
    # cuda.jit kernel; `numba_kernel` is then the default variant's.
    kernel_factory: Any = field(default=None, compare=False, hash=False)

    def kernel_source_problem(self) -> str:
        if self.numba_kernel is None or not hasattr(self.numba_kernel, "py_func"):
            return "a NumbaKernelSpec needs numba_kernel, a numba.cuda.jit kernel"
        if not self.argtypes:
            return "a NumbaKernelSpec needs argtypes, the signature it measures and launches"
        if self.params and not callable(self.kernel_factory):
            return (
                "a NumbaKernelSpec with program parameters needs kernel_factory, a function of "
                "the parameter values returning the variant's cuda.jit kernel"
            )
        return ""


def numba_types(args: Sequence[Any], kernel: Any) -> tuple[Any, ...]:
    """Numba's types of call arguments, as the dispatcher sees them (CUDA array interface
    objects, device arrays, NumPy arrays and scalars)."""
    typeof_pyval = getattr(kernel, "typeof_pyval", None)
    if typeof_pyval is not None and not is_simulator():
        return tuple(typeof_pyval(a) for a in args)
    from numba import typeof

    out = []
    for a in args:
        if hasattr(a, "copy_to_host"):  # simulator device arrays
            a = a.copy_to_host()
        elif is_tensor(a):
            a = a.detach().cpu().numpy() if not a.is_cuda else a
        out.append(typeof(a))
    return tuple(out)


def signature_problems(
    expected: Sequence[Any], given: Sequence[Any], names: Sequence[str] = ()
) -> list[str]:
    """Why arguments of types `given` cannot be passed where `expected` is declared.

    Arrays must agree in dtype and dimensions, and in layout unless the declared one is 'A'
    (any); scalars may be converted by Numba and always pass."""
    from numba.core import types

    problems = []
    if len(expected) != len(given):
        return [f"{len(given)} arguments given, the signature has {len(expected)}"]
    for i, (e, g) in enumerate(zip(expected, given)):
        label = f"argument {i}" + (f" ({names[i]})" if i < len(names) else "")
        if e == g:
            continue
        if isinstance(e, types.Array) and isinstance(g, types.Array):
            if e.dtype == g.dtype and e.ndim == g.ndim and e.layout in ("A", g.layout):
                continue
        elif isinstance(e, types.Number) and isinstance(g, (types.Number, types.Boolean)):
            continue
        elif isinstance(e, types.Boolean) and isinstance(g, (types.Number, types.Boolean)):
            continue
        problems.append(f"{label} is {g}, the signature declares {e}")
    return problems


def _format_types(ts: Sequence[Any]) -> str:
    return "(" + ", ".join(str(t) for t in ts) + ")"


class NumbaAdapter:
    """What `klaraptor.tune` needs from a Numba kernel."""

    frontend = "numba"
    array_kind = "numba"
    ints_are_pointers = False

    def __init__(self, kernel: Any) -> None:
        self.cuda = numba_cuda()
        self.kernel = kernel
        self.py_func = kernel.py_func
        self.function_name = self.py_func.__name__
        self.param_names = tuple(inspect.signature(self.py_func).parameters)
        module = (self.py_func.__module__ or "main").replace("__main__", "main")
        self.base_name = f"numba.{module}.{self.py_func.__qualname__}".replace("<locals>.", "")
        self.argtypes: tuple[Any, ...] = ()
        self.simulator = type(kernel).__name__ == "FakeCUDAKernel"
        self._external: dict[int, Any] = {}
        self.factory: Callable[..., Any] | None = None
        self._variants: dict[Any, Any] = {}

    @classmethod
    def from_factory(cls, factory: Callable[..., Any], params: Any) -> NumbaAdapter:
        """The adapter of a kernel factory: bound through the kernel it makes for the first
        value of every parameter (only its signature and names are read from it), named after
        the factory, fingerprinted by the factory's source (the kernel's is inside it)."""
        first = {name: tuple(values)[0] for name, values in dict(params).items()}
        fname = getattr(factory, "__qualname__", repr(factory))
        kernel = _call_factory(factory, first, fname)
        self = cls(kernel)
        self.factory = factory
        module = (factory.__module__ or "main").replace("__main__", "main")
        self.base_name = f"numba.{module}.{fname}".replace("<locals>.", "")
        return self

    def variant(self, params: Any) -> Any:
        """The factory's kernel for one set of parameter values (made once, then cached)."""
        kernel = self._variants.get(params)
        if kernel is None:
            assert self.factory is not None
            kernel = _call_factory(self.factory, dict(params), self.function_name)
            self._variants[params] = kernel
        return kernel

    # -- binding -----------------------------------------------------------------------------

    def declared_signature(self) -> tuple[Any, ...] | None:
        """The kernel's first signature when it was compiled eagerly (no compilation allowed
        for other types), else None."""
        if self.simulator or getattr(self.kernel, "_can_compile", True):
            return None
        sigs = list(getattr(self.kernel, "signatures", ()) or ())
        return tuple(sigs[0]) if sigs else None

    def bind(self, args: Sequence[Any]) -> None:
        """Bind to the declared signature (checking the call against it) or the call's types."""
        given = numba_types(args, self.kernel)
        declared = self.declared_signature()
        if declared is not None:
            self._check(declared, given, "was compiled for")
            self.argtypes = declared
        else:
            self.argtypes = given

    def prepare_launch(self) -> None:
        """JIT-compile the bound signature on a background thread: the first launch after a
        first-call build would compile it then (about a second of the first call, after the
        build); started before the build, the compile overlaps the build's measuring, in which
        this process mostly waits for the measuring worker. Numba's compiler lock makes the
        launch wait for a compile still running; a compile that fails is left to the launch,
        which compiles again and reports it."""
        if self.simulator or self.factory is not None or not self.argtypes:
            return
        if not getattr(self.kernel, "_can_compile", True):
            return  # compiled eagerly for its declared signature

        def compile_quietly() -> None:
            try:
                self.kernel.compile(self.argtypes)
            except Exception:  # noqa: BLE001 - the launch compiles again and says why
                pass

        threading.Thread(target=compile_quietly, name="klaraptor-numba-jit", daemon=True).start()

    def check_call(self, args: Sequence[Any]) -> None:
        """SignatureError unless the arguments match the bound signature."""
        self._check(self.argtypes, numba_types(args, self.kernel), "is bound to")

    def _check(self, expected: Sequence[Any], given: Sequence[Any], verb: str) -> None:
        problems = signature_problems(expected, given, self.param_names)
        if problems:
            raise SignatureError(
                f"Numba kernel {self.function_name} {verb} {_format_types(expected)}, but is "
                f"called with {_format_types(given)}:\n  - "
                + "\n  - ".join(problems)
                + "\n(klaraptor measures and launches one signature per tuned kernel: convert "
                "the arguments, or tune another kernel for the other types)"
            )

    # -- the spec ------------------------------------------------------------------------------

    def source_text(self) -> str:
        try:
            # a factory's source holds its kernel's
            return inspect.getsource(self.factory if self.factory is not None else self.py_func)
        except (OSError, TypeError):  # defined where no source file exists (a REPL)
            code = self.py_func.__code__
            blob = repr((code.co_code, code.co_consts, code.co_names)).encode()
            return f"# {self.function_name}: bytecode sha256 {hashlib.sha256(blob).hexdigest()}"

    def options_text(self) -> tuple[str, ...]:
        opts = getattr(self.kernel, "targetoptions", {}) or {}
        try:
            from importlib.metadata import version

            numba_cuda_version = version("numba-cuda")
        except Exception:  # noqa: BLE001 - the numba built into old numba releases
            import numba

            numba_cuda_version = f"numba {numba.__version__}"
        return (
            f"numba-cuda {numba_cuda_version}",
            *(f"{k}={opts[k]!r}" for k in _CODEGEN_OPTIONS if k in opts),
            f"signature={_format_types(self.argtypes)}",
        )

    def make_spec(self, **fields: Any) -> NumbaKernelSpec:
        if not self.argtypes:
            raise SpecError(f"Numba kernel {self.function_name} is not bound to a signature yet")
        return NumbaKernelSpec(
            source=self.source_text(),
            kernel=self.function_name,
            options=self.options_text(),
            numba_kernel=self.kernel,
            argtypes=self.argtypes,
            kernel_factory=self.factory,
            **fields,
        )

    # -- launching -----------------------------------------------------------------------------

    def native_stream(self, stream: Any) -> Any:
        """A stream Numba launches on: Numba's own and 0 as given; torch, CuPy, cuda.core streams
        and raw handles wrapped (`cuda.external_stream`, one per handle)."""
        if (
            (isinstance(stream, int) and stream == 0)
            or self.simulator
            or (type(stream).__module__ or "").startswith("numba")
        ):
            return stream
        ptr = stream_handle(stream)
        if not ptr:
            return 0
        s = self._external.get(ptr)
        if s is None:
            s = self._external[ptr] = self.cuda.external_stream(ptr)
        return s

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
        the factory's kernel for `params`, for a kernel with program parameters)."""
        kernel = self.variant(params) if params else self.kernel
        native = self.native_stream

        def go_on(args: tuple[Any, ...], stream: Any) -> None:
            kernel[grid, block, native(stream), smem](*args)

        if self.simulator:  # the simulator's kernel[...] configures the kernel object itself

            def go_sim(args: tuple[Any, ...]) -> None:
                kernel[grid, block, 0, smem](*args)

            return go_sim, go_on
        if torch is None:
            configured = kernel[grid, block, 0, smem]

            def go(args: tuple[Any, ...]) -> None:
                configured(*args)

            return go, go_on
        cuda = self.cuda
        streams: dict[int, Any] = {}
        current, given, check = torch.current_stream, torch.stream_ptr, torch.check

        def on(args: tuple[Any, ...], ptr: int) -> None:
            check(args)
            s = streams.get(ptr)
            if s is None:
                s = streams[ptr] = cuda.external_stream(ptr) if ptr else 0
            kernel[grid, block, s, smem](*args)

        return (lambda args: on(args, current())), (lambda args, stream: on(args, given(stream)))

    def clock(self, context: TorchBridge | None) -> EventClock:
        """Numba's events on the stream a launch goes on (torch's with tensors); the host's
        clock under the CUDA simulator, which runs each launch before it returns."""
        if self.simulator:
            return HostClock()
        return NumbaClock(self) if context is None else TorchClock(context)


class NumbaClock:
    """Numba's CUDA events; a launch without `stream=` goes on Numba's default stream (0)."""

    def __init__(self, adapter: NumbaAdapter) -> None:
        self.cuda = adapter.cuda
        self.native = adapter.native_stream

    def stream(self, stream: Any | None) -> Any:
        return 0 if stream is None else self.native(stream)

    def record(self, stream: Any) -> Any:
        event = self.cuda.event(timing=True)
        event.record(stream=stream)
        return event

    def done(self, event: Any) -> bool:
        return bool(event.query())

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self.cuda.event_elapsed_time(start, end))

    def wait(self, event: Any) -> None:
        event.synchronize()


def _call_factory(factory: Callable[..., Any], values: dict[str, int], where: str) -> Any:
    """factory(**values), which must be a cuda.jit kernel (SpecError naming what it was)."""
    try:
        kernel = factory(**values)
    except TypeError as exc:
        raise SpecError(
            f"kernel factory {where}: calling it with the parameter values {values} failed "
            f"({exc}); it must take each program parameter as a keyword"
        ) from None
    if not is_numba_kernel(kernel):
        raise SpecError(
            f"kernel factory {where}({', '.join(f'{k}={v}' for k, v in values.items())}) "
            f"returned a {type(kernel).__module__}.{type(kernel).__qualname__}, not a "
            "numba.cuda.jit kernel"
        )
    return kernel


def device_args(host_args: Sequence[Any]) -> tuple[Any, ...]:
    """Host arguments with NumPy arrays moved to Numba device arrays (for tests and examples)."""
    cuda = numba_cuda()
    return tuple(
        cuda.to_device(a) if isinstance(a, np.ndarray) and a.ndim > 0 else a for a in host_args
    )
