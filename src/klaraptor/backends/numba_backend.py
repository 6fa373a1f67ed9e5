"""The Numba backend: collection and launching of `numba.cuda.jit` kernels.

The same methods as `CupyBackend`, so the collection worker runs a Numba kernel as it runs a CuPy
one (`CollectOptions.backend`, or a spec whose `backend` is "numba"):
- compiling: the spec carries the dispatcher and the argument types it was bound to
  (`frontends.numba.NumbaKernelSpec`); `compile_spec` compiles exactly that signature;
- static attributes (registers, shared, constant and local memory, max threads) come from Numba's
  compiled kernel for that signature; the PTX (for the barrier count) from `inspect_asm`;
- launching: `kernel[grid, block, stream, smem](*args)` on Numba's default stream, or the same
  launch without Numba's per-call dispatch (`numba_fast`: arguments converted once per argument
  tuple), which numba-cuda's tens of microseconds a launch made the measuring bar wait for;
- timing: Numba events on that stream, with the spin kernel of `backend.Timer` in front of every
  sample. Numba has no clock64 intrinsic, so the spin is a dependent chain of float32 FMAs (each
  waits for the previous one: at least 4 SM cycles, Hopper's FFMA latency), which makes it at
  least as long as asked;
- counters: one launch between cuProfilerStart/Stop inside an NVTX range, as `CupyBackend` does
  (NVTX through CuPy, else the `nvtx` package).

Numba (and CuPy for the NVTX range and device query the worker uses) is imported on first use.
Dynamic shared memory stays at the 48 KB every kernel may use without opting in.
"""

from __future__ import annotations

import functools
import math
import os
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.backends.base import Dims, OutputCheck
from klaraptor.backends.cupy_backend import _MIN_SPIN_US, Timer, relative_error
from klaraptor.core.errors import CollectError, LaunchError, MissingDependencyError
from klaraptor.core.types import KernelAttributes

DEFAULT_DYNAMIC_SMEM = 48 * 1024  # usable by every kernel without cudaFuncSetAttribute
FAST_ENV = "KLARAPTOR_NUMBA_FAST_LAUNCH"  # "0": always launch through Numba's dispatcher
_FFMA_LATENCY_CYCLES = 4
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_NUMPY_NAME = re.compile(r"module 'numpy' has no attribute '(\w+)'")


def numba_cuda() -> Any:
    """`numba.cuda`, or MissingDependencyError naming the extra that installs it."""
    try:
        from numba import cuda
    except ImportError as exc:
        raise MissingDependencyError(
            "Numba kernels need numba-cuda: pip install 'klaraptor[numba]'"
        ) from exc
    return cuda


def incompatible_numpy(exc: BaseException) -> MissingDependencyError | None:
    """The error to raise instead of `exc` when `exc` is numba-cuda failing on a name this NumPy
    no longer has (an AttributeError raised inside Numba's code: numba-cuda 0.30.4 registers
    `overload(np.row_stack)` on its first compilation, and NumPy removed `row_stack`); else None.
    """
    m = _NUMPY_NAME.search(str(exc)) if isinstance(exc, AttributeError) else None
    frames = traceback.extract_tb(exc.__traceback__)
    in_numba = any({"numba", "numba_cuda"} & set(f.filename.split(os.sep)) for f in frames)
    if m is None or not in_numba:
        return None
    try:
        from importlib.metadata import version

        numba_cuda_version = version("numba-cuda")
    except Exception:  # noqa: BLE001 - the version is only for the message
        numba_cuda_version = "(version unknown)"
    return MissingDependencyError(
        f"this numba-cuda {numba_cuda_version} does not work with NumPy {np.__version__}: it uses "
        f"numpy.{m.group(1)}, which this NumPy no longer has, so Numba cannot compile any kernel. "
        "Install releases that work together: a numba-cuda that supports this NumPy "
        "(pip install -U 'klaraptor[numba]') or a NumPy this numba-cuda supports. Where neither "
        "can change, docs/frontends.md describes a compatibility shim for numpy.row_stack"
    )


def is_simulator() -> bool:
    """True under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return True
    try:
        from numba import config
    except ImportError:
        return False
    return bool(getattr(config, "ENABLE_CUDASIM", False))


@dataclass
class NumbaCompiled:
    """A dispatcher compiled for one signature: what the worker launches and measures."""

    dispatcher: Any
    argtypes: tuple[Any, ...]
    name: str
    # The fast launch path (`numba_fast`): its launcher, why it is off ("" = not refused), and
    # whether a fast launch has succeeded (after which its failures are the launch's own).
    fast: Any = field(default=None, compare=False, repr=False)
    fast_off: str = field(default="", compare=False)
    fast_ok: bool = field(default=False, compare=False)

    @property
    def overload(self) -> Any:
        return self.dispatcher.overloads[self.argtypes]


# The backend's own kernels. Numba resolves `cuda` among their globals when it compiles them,
# and the simulator swaps it there, so it is a module global, set on first use (not at import).
cuda: Any = None


def _spin(iters, a, b, out):  # noqa: ANN001 - a Numba kernel
    x = out[0]
    for _ in range(iters):
        x = x * a + b  # dependent chain: every FMA waits for the last
    if x == -1.0:  # never true for a, b > 0; keeps the chain from being removed
        out[0] = x


def _fill(buf, value):  # noqa: ANN001
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < buf.size:
        buf[i] = value
        i += stride


def _probe(a):  # noqa: ANN001
    a[0] += 1


@functools.cache
def _device_kernels() -> dict[str, Any]:
    """The spin, fill and probe kernels, compiled on first use."""
    global cuda
    cuda = numba_cuda()
    return {"spin": cuda.jit(_spin), "fill": cuda.jit(_fill), "probe": cuda.jit(_probe)}


class NumbaTimer(Timer):
    """`backend.Timer` on Numba: events on Numba's default stream, a Numba spin kernel."""

    def __init__(self, backend: NumbaBackend, clock_mhz: float, *, flush_bytes: int = 0) -> None:
        cuda = numba_cuda()
        self._cuda = cuda
        self._backend = backend  # type: ignore[assignment]
        self._kernels = _device_kernels()
        self._clock_mhz = float(clock_mhz)
        self._spin_us = _MIN_SPIN_US
        self._spin_out = cuda.to_device(np.ones(1, dtype=np.float32))
        self._start = cuda.event()  # timing events (Numba's default)
        self._end = cuda.event()
        self._flush_buf = (
            cuda.device_array(int(flush_bytes), dtype=np.uint8) if flush_bytes else None
        )
        self._flush_value = 0
        # Numba compiles on first call: compile the spin (and the flush) here, not inside the
        # first sample, whose host time would otherwise include the JIT.
        self._kernels["spin"][1, 1](
            np.int64(1), np.float32(1.0000001), np.float32(1e-7), self._spin_out
        )
        if self._flush_buf is not None:
            self._flush()
        cuda.synchronize()

    def _flush(self) -> None:
        assert self._flush_buf is not None
        self._flush_value = (self._flush_value + 1) % 251
        self._kernels["fill"][1024, 256](self._flush_buf, np.uint8(self._flush_value))

    # `Timer.sample`'s loop, in Numba's terms.
    def _stream(self) -> Any:
        return self._cuda.default_stream()

    def _launch_spin(self, stream: Any) -> None:
        iters = spin_iterations(self._spin_us, self._clock_mhz)
        self._kernels["spin"][1, 1, stream](
            np.int64(iters), np.float32(1.0000001), np.float32(1e-7), self._spin_out
        )

    def _elapsed_ms(self) -> float:
        try:
            self._end.synchronize()
        except Exception as exc:  # noqa: BLE001 - a CUDA error of a timed launch
            raise LaunchError(f"{type(exc).__name__}: {exc}") from None
        return float(self._start.elapsed_time(self._end))


def _nvtx() -> tuple[Callable[[str], Any], Callable[[], Any]]:
    """(push, pop) of an NVTX range: CuPy's, else the nvtx package's."""
    try:
        from cupy.cuda import nvtx as cupy_nvtx

        return cupy_nvtx.RangePush, cupy_nvtx.RangePop
    except ImportError:
        pass
    try:
        import nvtx

        return nvtx.push_range, nvtx.pop_range
    except ImportError as exc:
        raise MissingDependencyError(
            "profiling a Numba kernel with Nsight Compute needs NVTX ranges: install CuPy "
            "(pip install 'klaraptor[cuda]') or the nvtx package"
        ) from exc


class NumbaBackend(OutputCheck):
    """The GPU backend of collection for `numba.cuda.jit` kernels (see the module doc)."""

    name = "numba"

    def module(self) -> Any:
        """`numba.cuda` (MissingDependencyError naming the extra when it is missing)."""
        return numba_cuda()

    def use_device(self, device_id: int) -> None:
        numba_cuda().select_device(int(device_id))

    def max_dynamic_smem_optin(self, device_id: int = 0) -> int:
        """48 KB: this backend does not opt kernels in to more dynamic shared memory."""
        return DEFAULT_DYNAMIC_SMEM

    def timer(self, clock_mhz: float, *, flush_bytes: int = 0) -> NumbaTimer:
        return NumbaTimer(self, clock_mhz, flush_bytes=flush_bytes)

    def compile(self, source: str, name: str, options: Sequence[str] = ()) -> Any:
        raise CollectError(
            "the Numba backend compiles Numba kernels, not CUDA C++ source: give it a "
            "NumbaKernelSpec (klaraptor.tune over a numba.cuda.jit kernel makes one)"
        )

    def ptx(self, source: str, options: Sequence[str], arch: str) -> str:
        raise CollectError(
            "the Numba backend has no CUDA C++ source to compile; kernel_ptx gives the PTX of a "
            "compiled Numba kernel"
        )

    def compile_spec(self, spec: Any, params: Any = None) -> NumbaCompiled:
        """Compile the spec's dispatcher for the argument types it was bound to (a kernel with
        program parameters: the dispatcher its kernel factory makes for `params`)."""
        factory = getattr(spec, "kernel_factory", None)
        if params and factory is not None:
            dispatcher = factory(**dict(params))
        else:
            dispatcher = getattr(spec, "numba_kernel", None)
        argtypes = tuple(getattr(spec, "argtypes", ()) or ())
        if dispatcher is None or not argtypes:
            raise CollectError(
                f"kernel spec {getattr(spec, 'name', '?')!r} has no Numba kernel and signature; "
                "the Numba backend needs a NumbaKernelSpec"
            )
        numba_cuda()
        try:
            dispatcher.compile(argtypes)
        except Exception as exc:  # noqa: BLE001 - Numba's typing and lowering errors
            unusable = incompatible_numpy(exc)
            if unusable is not None:
                raise unusable from None
            raise CollectError(
                f"Numba could not compile {spec.kernel} for ({', '.join(map(str, argtypes))}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return NumbaCompiled(dispatcher, argtypes, spec.kernel)

    def kernel_ptx(
        self, spec: Any, fn: NumbaCompiled, arch: str, params: Any = None
    ) -> tuple[str, str]:
        """(PTX of the compiled signature, its entry name): Numba names entries mangled."""
        ptx = fn.dispatcher.inspect_asm(fn.argtypes)
        if isinstance(ptx, bytes):
            ptx = ptx.decode("utf-8", errors="replace")
        entries = _ENTRY.findall(ptx)
        if not entries:
            raise CollectError(f"the PTX Numba produced for {fn.name} has no .entry")
        return ptx, entries[0]

    def attributes(self, fn: NumbaCompiled) -> KernelAttributes:
        """Static attributes of the compiled signature (Numba's cuFuncGetAttribute values)."""
        o = fn.overload
        static = int(o.shared_mem_per_block)
        return KernelAttributes(
            num_regs=int(o.regs_per_thread),
            static_smem=static,
            const_size=int(o.const_mem_size),
            local_size=int(o.local_mem_per_thread),
            max_threads_per_block=int(o.max_threads_per_block),
            max_dynamic_smem=max(0, DEFAULT_DYNAMIC_SMEM - static),
        )

    def opt_in_dynamic_smem(self, fn: NumbaCompiled, nbytes: int) -> None:
        if nbytes > DEFAULT_DYNAMIC_SMEM:
            raise LaunchError(
                f"{fn.name}: {nbytes} B of dynamic shared memory is above the {DEFAULT_DYNAMIC_SMEM} "
                "B the Numba backend launches with (it does not opt kernels in to more)"
            )

    def _fast(self, fn: NumbaCompiled) -> Any:
        """The fast launcher of `fn`, or None (off, refused, or the simulator)."""
        if fn.fast is None and not fn.fast_off:
            if is_simulator() or os.environ.get(FAST_ENV, "1") == "0":
                fn.fast_off = "switched off" if not is_simulator() else "the simulator"
            else:
                from klaraptor.backends.numba_fast import FastLauncher

                try:
                    fn.fast = FastLauncher(fn.dispatcher, fn.argtypes)
                except Exception as exc:  # noqa: BLE001 - any refusal: launch the usual way
                    fn.fast_off = f"{type(exc).__name__}: {exc}"
        return None if fn.fast_off else fn.fast

    def launch(
        self, fn: NumbaCompiled, grid: Dims, block: Dims, args: Sequence[Any], shared_mem: int = 0
    ) -> None:
        """`kernel[grid, block, 0, smem](*args)`, through the fast path when it takes the kernel
        (`numba_fast`: the same launch without Numba's per-call dispatch); errors become
        LaunchError naming the configuration."""
        fast = self._fast(fn)
        if fast is not None:
            try:
                fast(grid, block, args, shared_mem)
                fn.fast_ok = True
                return
            except Exception as exc:  # noqa: BLE001 - decided below
                from klaraptor.backends.numba_fast import FastLaunchUnavailable

                if fn.fast_ok and not isinstance(exc, FastLaunchUnavailable):
                    raise LaunchError(
                        f"launch of {fn.name} with grid {tuple(grid)}, block {tuple(block)}, "
                        f"{int(shared_mem)} B dynamic shared memory failed: "
                        f"{type(exc).__name__}: {exc}"
                    ) from None
                # Never worked, or not for these arguments: the usual launch from now on.
                fn.fast_off = f"{type(exc).__name__}: {exc}"
        try:
            fn.dispatcher[tuple(grid), tuple(block), 0, int(shared_mem)](*args)
        except Exception as exc:  # noqa: BLE001 - Numba raises many types for a bad launch
            raise LaunchError(
                f"launch of {fn.name} with grid {tuple(grid)}, block {tuple(block)}, "
                f"{int(shared_mem)} B dynamic shared memory failed: {type(exc).__name__}: {exc}"
            ) from None

    def synchronize(self, what: str = "") -> None:
        try:
            numba_cuda().synchronize()
        except Exception as exc:  # noqa: BLE001 - CUDA errors surface at synchronisation
            raise LaunchError(f"{what + ': ' if what else ''}{type(exc).__name__}: {exc}") from None

    def context_alive(self) -> bool:
        """False when the CUDA context is poisoned (a sticky error such as an illegal address)."""
        cuda = numba_cuda()
        try:
            cuda.synchronize()
            a = cuda.to_device(np.zeros(1, dtype=np.int32))
            _device_kernels()["probe"][1, 1](a)
            return int(a.copy_to_host()[0]) == 1
        except Exception:  # noqa: BLE001 - any failure means the context is unusable
            return False

    def free_memory(self) -> None:
        """Release memory Numba holds for deferred deallocation (between data sizes)."""
        try:
            numba_cuda().current_context().deallocations.clear()
        except Exception:  # noqa: BLE001, S110 - best effort: memory is also freed lazily
            pass

    def profile_one(self, launch_fn: Callable[[], None], range_name: str) -> None:
        """One launch between cuProfilerStart/Stop inside the NVTX range `range_name` (for ncu)."""
        cuda = numba_cuda()
        push, pop = _nvtx()
        push(range_name)
        try:
            cuda.profile_start()
            try:
                launch_fn()
                self.synchronize(range_name)
            finally:
                cuda.profile_stop()
        finally:
            pop()

    def to_host(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """Host copies of launch arguments (device arrays → NumPy, scalars unchanged)."""
        cuda = numba_cuda()
        out = []
        for a in args:
            if hasattr(a, "copy_to_host"):
                out.append(a.copy_to_host())
            elif hasattr(a, "__cuda_array_interface__"):
                out.append(cuda.as_cuda_array(a).copy_to_host())
            else:
                out.append(a)
        return tuple(out)

    def clone_args(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """Launch arguments with every device array copied on the GPU (scalars unchanged)."""
        cuda = numba_cuda()
        out = []
        for a in args:
            if hasattr(a, "copy_to_device") or hasattr(a, "__cuda_array_interface__"):
                src = a if hasattr(a, "copy_to_device") else cuda.as_cuda_array(a)
                dst = cuda.device_array_like(src)
                dst.copy_to_device(src)
                out.append(dst)
            else:
                out.append(a)
        return tuple(out)

    def poison(self, args: Sequence[Any], indices: Sequence[int]) -> None:
        """Fill floating-point output arrays with NaN, so values a kernel fails to write show."""
        for i in indices:
            a = args[i]
            if hasattr(a, "copy_to_device") and np.dtype(a.dtype).kind in "fc":
                a.copy_to_device(np.full(a.shape, np.nan, dtype=a.dtype))

    def output_errors(
        self, args: Sequence[Any], expected: Mapping[int, np.ndarray]
    ) -> dict[str, float]:
        """Each output's relative error, on the host (see `OutputCheck.check_outputs`)."""
        host = self.to_host([args[int(i)] for i in expected])
        return {str(i): relative_error(h, ref) for (i, ref), h in zip(expected.items(), host)}

    def device_clock_mhz(self, device_id: int = 0) -> float:
        """The SM clock the device reports (kHz attribute → MHz); sizes the spin kernel (the
        timer lengthens a spin that turns out too short, so a fallback clock is harmless)."""
        try:
            return float(numba_cuda().get_current_device().CLOCK_RATE) / 1000.0
        except Exception:  # noqa: BLE001 - an attribute this driver no longer reports
            return 2000.0

    def l2_bytes(self, device_id: int = 0) -> int:
        return int(numba_cuda().get_current_device().L2_CACHE_SIZE)


def spin_iterations(spin_us: float, clock_mhz: float) -> int:
    """FMA-chain iterations of a spin of at least `spin_us` microseconds at `clock_mhz`."""
    return max(1, math.ceil(spin_us * clock_mhz / _FFMA_LATENCY_CYCLES))
