"""cuda.core front-end: kernels compiled with `cuda.core.Program`, launched with `cuda.core.launch`.

    from klaraptor.frontends.cuda_core import compile_kernel
    scale = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")(compile_kernel(SRC, "scale"))
    scale(x, y, np.int32(n))

`compile_kernel(source, name, options)` compiles CUDA C++ with cuda.core's Program for the
current GPU and keeps the source and NVRTC options beside the kernel: klaraptor measures the
kernel from them (the CuPy backend compiles the same source with the same options). A tuned call
launches with `launch(stream, LaunchConfig(grid=..., block=..., shmem_size=...), kernel, *args)`,
the LaunchConfig made once per (grid, block, shared memory) and the launch function generated
once per data size (`launch_functions`). cuda.core passes a Python int as a pointer, so array
arguments (CuPy arrays, torch tensors, anything with `__cuda_array_interface__`) are turned into
their device addresses; the first call's arrays also give the shapes klaraptor measures with.
Scalars must have the C type of the parameter (np.int32(n) for an `int`), as with cuda.core.

With program parameters (`klaraptor.tune(params=...)`), give `kernel_source(source, name,
options)` instead: nothing compiles until a variant is launched, then cuda.core's Program
compiles that variant once (the values as defines, or the template instance `name<v1, v2>` by
NVRTC name expression, as `param_style` says) and the call launches it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klaraptor.core.errors import LaunchError, MissingDependencyError, SpecError
from klaraptor.core.types import Block, Grid
from klaraptor.frontends.torch import TorchBridge, TorchClock, is_tensor
from klaraptor.runtime.adapter import EventClock, Launchers, stream_handle
from klaraptor.spec import KernelSpec
from klaraptor.spec.cuda_source import c_param_names

_FLAG_OPTIONS = {
    "--use_fast_math": ("use_fast_math", True),
    "-use_fast_math": ("use_fast_math", True),
    "-lineinfo": ("lineinfo", True),
    "--generate-line-info": ("lineinfo", True),
    "-G": ("debug", True),
    "--device-debug": ("debug", True),
    "--extra-device-vectorization": ("extra_device_vectorization", True),
    "-default-device": ("device_as_default_execution_space", True),
    "--device-as-default-execution-space": ("device_as_default_execution_space", True),
}
_VALUE_OPTIONS = {
    "std": "std",
    "maxrregcount": "max_register_count",
    "ftz": "ftz",
    "prec-div": "prec_div",
    "prec-sqrt": "prec_sqrt",
    "fmad": "fma",
}
_VALUE = re.compile(r"^--?([a-z-]+)=(.+)$")


def cuda_core_module() -> Any:
    """The cuda.core namespace with Program, LaunchConfig and launch (new or experimental)."""
    try:
        import cuda.core as core

        if hasattr(core, "launch") and hasattr(core, "Program"):
            return core
    except ImportError:
        pass
    try:
        import cuda.core.experimental as core
    except ImportError as exc:
        raise MissingDependencyError(
            "cuda.core kernels need cuda-python's cuda.core: pip install 'klaraptor[cuda-core]'"
        ) from exc
    return core


def program_options_kwargs(options: Sequence[str]) -> dict[str, Any]:
    """cuda.core ProgramOptions keywords for NVRTC options (SpecError naming one it cannot map)."""
    kw: dict[str, Any] = {}
    macros: list[Any] = []
    includes: list[str] = []
    for opt in options:
        if opt in _FLAG_OPTIONS:
            key, on = _FLAG_OPTIONS[opt]
            kw[key] = on
        elif opt.startswith(("-D", "--define-macro=")):
            text = opt.removeprefix("--define-macro=").removeprefix("-D")
            name, eq, value = text.partition("=")
            macros.append((name, value) if eq else name)
        elif opt.startswith(("-I", "--include-path=")):
            includes.append(opt.removeprefix("--include-path=").removeprefix("-I"))
        elif (m := _VALUE.match(opt)) and m.group(1) in _VALUE_OPTIONS:
            key, text = _VALUE_OPTIONS[m.group(1)], m.group(2)
            if key == "std":
                kw[key] = text
            elif key == "max_register_count":
                kw[key] = int(text)
            else:
                kw[key] = text.lower() == "true"
        else:
            raise SpecError(
                f"NVRTC option {opt!r} has no cuda.core ProgramOptions equivalent klaraptor knows "
                "(--std=, --use_fast_math, -D, -I, -lineinfo, -G, --maxrregcount=, --ftz=, "
                "--prec-div=, --prec-sqrt=, --fmad=, --extra-device-vectorization, "
                "--device-as-default-execution-space)"
            )
    if macros:
        kw["define_macro"] = macros
    if includes:
        kw["include_path"] = includes
    return kw


@dataclass
class CoreKernel:
    """A cuda.core Kernel with the source and NVRTC options it was compiled from (`kernel` None:
    not compiled yet, its program-parameter variants are, see `kernel_source`)."""

    kernel: Any
    source: str
    name: str
    options: tuple[str, ...]
    device_id: int = 0


def compile_kernel(
    source: str, name: str, options: Sequence[str] = ("--std=c++17",), *, device_id: int = 0
) -> CoreKernel:
    """Compile `name` in `source` with cuda.core for GPU `device_id` (made current).

    `options` are NVRTC options, translated to cuda.core ProgramOptions. The kernel must be
    `extern "C"` so klaraptor finds it by name."""
    ck = CoreKernel(None, source, name, tuple(options), device_id)
    ck.kernel = compile_variant(ck, name, options)
    return ck


def kernel_source(
    source: str, name: str, options: Sequence[str] = ("--std=c++17",), *, device_id: int = 0
) -> CoreKernel:
    """A cuda.core kernel with program parameters, for `klaraptor.tune(params=...)`: nothing is
    compiled here (the source needs the parameters' values); each variant is compiled with
    cuda.core's Program when first launched: with the values as defines (`param_style="define"`,
    `name` an `extern "C"` kernel) or as template arguments (`"template"`, `name` the template,
    instantiated through an NVRTC name expression)."""
    return CoreKernel(None, source, name, tuple(options), device_id)


def compile_variant(ck: CoreKernel, name: str, options: Sequence[str]) -> Any:
    """The cuda.core Kernel `name` (a kernel's name or a name expression such as `k<4, 2>`)
    compiled from `ck`'s source with the NVRTC `options`, for its GPU (made current)."""
    core = cuda_core_module()
    dev = core.Device(ck.device_id)
    dev.set_current()
    cc = dev.compute_capability
    program = core.Program(
        ck.source,
        code_type="c++",
        options=core.ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}", **program_options_kwargs(options)),
    )
    expressions = (name,) if name != ck.name else ()
    return program.compile("cubin", name_expressions=expressions).get_kernel(name)


class _ExternalStream:
    """A stream handle for `Device.create_stream` (the `__cuda_stream__` protocol)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = int(ptr)

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def array_pointer(a: Any) -> int:
    """The device address of an array argument (CuPy array, anything with the CUDA array
    interface); Python ints and NumPy scalars pass unchanged."""
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    if isinstance(ptr, int):
        return ptr
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    return a


def _is_cupy(a: Any) -> bool:
    return type(a).__name__ == "ndarray" and (type(a).__module__ or "").startswith("cupy")


def _is_array(a: Any) -> bool:
    return hasattr(a, "__cuda_array_interface__") or _is_cupy(a)


class CoreAdapter:
    """What `klaraptor.tune` needs from a `CoreKernel`."""

    frontend = "cuda.core"
    array_kind = "cupy"  # measured by the CuPy backend from the same source and options
    ints_are_pointers = True

    def __init__(self, ck: CoreKernel, *, params: bool = False) -> None:
        self.core = cuda_core_module()
        self.ck = ck
        self.function_name = ck.name
        self.param_names = c_param_names(ck.source, ck.name)
        self.base_name = f"cuda_core.{ck.name}"
        self.has_params = params
        self._spec: KernelSpec | None = None
        self._variants: dict[Any, Any] = {}
        self._default_stream: Any = None
        self._streams: dict[int, Any] = {}
        self._launch_configs: dict[tuple[Any, ...], Any] = {}

    def variant(self, params: Any) -> Any:
        """The cuda.core Kernel of one program-parameter variant, compiled once per process."""
        kernel = self._variants.get(params)
        if kernel is None:
            spec = self._spec
            assert spec is not None, "make_spec runs before the first launch"
            kernel = compile_variant(
                self.ck, spec.variant_kernel(params), spec.variant_options(params)
            )
            self._variants[params] = kernel
        return kernel

    def bind(self, args: Sequence[Any]) -> None:
        """Nothing to bind: cuda.core checks argument types at launch."""

    def prepare_launch(self) -> None:
        """Nothing to start: `compile_kernel` compiled the kernel (a variant of `kernel_source`
        is compiled when the choice names it)."""

    def check_call(self, args: Sequence[Any]) -> None:
        """The number of arguments, where the source names the parameters (cuda.core checks
        the rest at launch). Run per new size and when a launch fails."""
        names = self.param_names
        if names is not None and len(args) != len(names):
            raise LaunchError(
                f"{self.function_name}({', '.join(names)}) takes {len(names)} arguments, "
                f"got {len(args)}"
            )

    def make_spec(self, **fields: Any) -> KernelSpec:
        spec = KernelSpec(
            source=self.ck.source, kernel=self.ck.name, options=self.ck.options, **fields
        )
        self._spec = spec
        return spec

    def stream_for(self, ptr: int) -> Any:
        s = self._streams.get(ptr)
        if s is None:
            if not ptr:  # the legacy default stream
                return self.default_stream()
            dev = self.core.Device(self.ck.device_id)
            s = self._streams[ptr] = dev.create_stream(_ExternalStream(ptr))
        return s

    def default_stream(self) -> Any:
        """The device's default stream, where a launch without `stream=` goes."""
        if self._default_stream is None:
            self._default_stream = self.core.Device(self.ck.device_id).default_stream
        return self._default_stream

    def clock(self, context: TorchBridge | None) -> EventClock:
        """cuda.core's events on the stream a launch goes on (torch's with tensors)."""
        return CoreClock(self) if context is None else TorchClock(context)

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
        core = self.core
        kernel = self.variant(params) if params else self.ck.kernel
        if kernel is None:
            raise LaunchError(
                f"{self.function_name}: a kernel_source() kernel is compiled per program-parameter "
                "variant: give klaraptor.tune params=, or compile it with compile_kernel()"
            )
        config = self._launch_configs.get((grid, block, smem))
        if config is None:
            config = core.LaunchConfig(grid=grid, block=block, shmem_size=smem)
            self._launch_configs[(grid, block, smem)] = config
        self.default_stream()
        getters: dict[int, Callable[[Any], Any] | None] = {}
        if torch is not None:
            tconvs = torch.pointer_converters(args, as_numpy=False)
            getters = {i: tconvs[i] for i, a in enumerate(args) if is_tensor(a)}
        # Only array positions are converted (CuPy arrays read inline: `.data.ptr`).
        for i, a in enumerate(args):
            if i not in getters and _is_array(a):
                getters[i] = None if _is_cupy(a) else array_pointer
        return launch_functions(
            core.launch,
            config,
            kernel,
            len(args),
            getters,
            default=self._default_stream,
            stream_for=self.stream_for,
            current=None if torch is None else torch.current_stream,
            name=self.function_name,
        )


class CoreClock:
    """cuda.core's CUDA events (timing enabled), recorded on cuda.core streams."""

    def __init__(self, adapter: CoreAdapter) -> None:
        self.adapter = adapter
        self.options = adapter.core.EventOptions(timing_enabled=True)

    def stream(self, stream: Any | None) -> Any:
        if stream is None:
            return self.adapter.default_stream()
        if (type(stream).__module__ or "").startswith("cuda.core"):
            return stream
        return self.adapter.stream_for(stream_handle(stream))  # torch, CuPy, Numba or a handle

    def record(self, stream: Any) -> Any:
        return stream.record(options=self.options)

    def done(self, event: Any) -> bool:
        return bool(event.is_done)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(end - start)

    def wait(self, event: Any) -> None:
        event.sync()


_UNCHANGED = object()
_LAUNCH_TEMPLATE = """
def go(args):
    {unpack} = args
    launch({stream}, config, kernel{call})

def go_on(args, stream):
    if not (type(stream).__module__ or "").startswith("cuda.core"):
        stream = stream_for(stream_handle(stream))  # torch, CuPy, Numba or a handle
    {unpack} = args
    launch(stream, config, kernel{call})
"""


def launch_functions(
    launch: Callable[..., Any],
    config: Any,
    kernel: Any,
    n_args: int,
    getters: Mapping[int, Callable[[Any], Any] | None],
    *,
    default: Any,
    stream_for: Callable[[int], Any],
    current: Callable[[], int] | None = None,
    name: str = "kernel",
) -> tuple[Callable[[tuple[Any, ...]], None], Callable[[tuple[Any, ...], Any], None]]:
    """(go(args), go_on(args, stream)): `launch(stream, config, kernel, *converted args)` for
    calls of `n_args` arguments, on `default` (or `stream_for(current())` when `current` is
    given) and on a given stream. `getters[i]` turns argument i into its device address (None:
    a CuPy array, `.data.ptr`); the others pass unchanged.

    The two functions are generated for this argument list, so a call unpacks its arguments and
    converts the array ones inline: no per-call list, loop or extra Python frame (the generic
    loop did, at about 0.5 µs per call: benchmarks/bench_call_overhead.py)."""
    names = [f"a{i}" for i in range(n_args)]
    call = []
    scope: dict[str, Any] = {
        "launch": launch,
        "config": config,
        "kernel": kernel,
        "default": default,
        "stream_for": stream_for,
        "stream_handle": stream_handle,
        "current": current,
    }
    for i, a in enumerate(names):
        get = getters.get(i, _UNCHANGED)
        if get is _UNCHANGED:
            call.append(a)
        elif get is None:
            call.append(f"{a}.data.ptr")
        else:
            scope[f"get{i}"] = get
            call.append(f"get{i}({a})")
    code = _LAUNCH_TEMPLATE.format(
        unpack="(" + "".join(f"{a}, " for a in names) + ")",
        stream="default" if current is None else "stream_for(current())",
        call="".join(f", {c}" for c in call),
    )
    exec(compile(code, f"<klaraptor cuda.core launch of {name}>", "exec"), scope)  # noqa: S102
    return scope["go"], scope["go_on"]
