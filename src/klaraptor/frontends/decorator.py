"""`klaraptor.tune`: a tuned launch for kernels written where Python users already write them.

    @klaraptor.tune(data={"n": lambda x, y, n: n}, grid="ceil(n / bx)")
    @cuda.jit
    def scale(x, y, n): ...

    scale(x, y, n)   # the block chosen for this n (µs once, then cached), then the launch

It wraps a `numba.cuda.jit` kernel, a `cupy.RawKernel` (or `RawModule.get_function(name)`) or a
`frontends.cuda_core.compile_kernel(...)`; the arguments may be torch tensors (`frontends.torch`).
The user names the data parameters and the grid rule once; the rest is inferred:
- `data`: name → how to read it from a call: a parameter name ("n"), "x.shape[0]", "len(x)",
  "x.size", an argument index, or a callable taking the call's arguments;
- `grid`: one expression for x (1D) or up to three, over the data names and bx, by, bz; the
  kernel's dimensionality is the highest block dimension the rule uses (`dim=` overrides);
- the argument factory (`make_args`) from the first call's arguments (`frontends.inference`),
  unless one is given.

On the first call the kernel is bound (its signature, for Numba), its KernelSpec made and its
build looked up in the store. Builds are keyed by kernel source, compile options and GPU: the
store name ends in the spec's fingerprint (`tuned.name`), so an edited kernel gets a new name and
is never served a stale build, and builds are per GPU. With no build, `on_missing` decides:
"build" (default) measures the kernel now, saying so, with rich progress bars, at sizes below
the first call's (its data values divided by 16, 8, 4 and 2; `sizes=` to choose), or
"default" launches with a default block (256; 32×8; 32×4×2) and warns once; `tuned.build()`
builds later.

Per call after the first one for a size: one dict lookup of the launch for that size, then the
front-end's own launch (`kernel[grid, block, stream, smem](*args)`, `raw(grid, block, args, ...)`,
`launch(stream, config, kernel, *args)`). A new size costs one `select` (tens of µs).

Online refinement (`refine=k`, opt-in, with a build): the first calls of each new size launch
the model's top candidates in turn (at most k, within the model's band at that size), timed by
the front-end's own CUDA events on the stream each call launches on (torch's events for torch
tensors); once every timing has completed, the fastest is pinned for that size and kept in the
store's history, so the next process starts from it. `tuned.settle()` waits for pending timings
and pins them (e.g. before exit). The same launcher serves `Kernel.tuned` (runtime.launcher).

Program parameters (`params={"ITEMS": (1, 2, 4)}`): compile-time values chosen per call with the
block. The grid, `dynamic_smem` and `constraints` may name them. A CuPy RawKernel's source is
compiled per variant (`param_style="define"`: `-DITEMS=4`; "template": the instance
`kernel<4>` of a `template <int ITEMS> __global__` kernel); for Numba, decorate a kernel
factory, a function of the parameter values (keywords) returning a `cuda.jit` kernel
(`frontends.numba`). Each variant is compiled once per process, on its first launch.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from klaraptor.assemble.arguments import check_device, check_store
from klaraptor.core.errors import (
    BuildError,
    CollectError,
    KlaraptorError,
    KlaraptorWarning,
    SpecError,
)
from klaraptor.core.types import (
    INT32_MAX,
    Block,
    DataSchema,
    DataSize,
    LaunchConfig,
)
from klaraptor.core.validate import (
    check_block,
    check_bool,
    check_int,
    check_list,
    check_sizes,
    check_store_name,
    check_text,
)
from klaraptor.frontends.adapters import TuneAdapter
from klaraptor.frontends.inference import InferredArgs, describe_args
from klaraptor.frontends.torch import TorchBridge, is_tensor
from klaraptor.frontends.tune_rules import check_params, grid_dim, grid_rule
from klaraptor.runtime.launcher import Launcher, Planned
from klaraptor.spec import DataParam, KernelSpec, data_name_problem

ON_MISSING = ("build", "default")
DEFAULT_BLOCKS: dict[int, Block] = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 4, 2)}
TRAINING_DIVISORS = (16, 8, 4, 2)
_SHAPE = re.compile(r"^([A-Za-z_]\w*)\.shape\[(-?\d+)\]$")
_LEN = re.compile(r"^len\(([A-Za-z_]\w*)\)$")
_SIZE = re.compile(r"^([A-Za-z_]\w*)\.size$")
_IDENT = re.compile(r"^[A-Za-z_]\w*$")


# ---------------------------------------------------------------------------------------------
# Data rules: how each data parameter is read from a call


class CallRule:
    """A user's callable over the call's arguments, as a DataParam reader.

    Pickled as a placeholder: collection workers make their own arguments and never read D from
    a call, so a lambda here does not stop the spec from travelling to them."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn = fn
        self.name = name
        self.__qualname__ = getattr(fn, "__qualname__", repr(fn))
        self.__module__ = getattr(fn, "__module__", None) or "?"

    def __call__(self, args: Sequence[Any]) -> Any:
        return self.fn(*args)

    def __reduce__(self) -> tuple[Any, ...]:
        return (UnavailableRule, (self.name,))


class UnavailableRule:
    """A data rule that stayed in the calling process (see CallRule)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, args: Sequence[Any]) -> Any:
        raise SpecError(
            f"data parameter {self.name!r} is read by a function of the calling process only"
        )


@dataclasses.dataclass(frozen=True)
class AttrRule:
    """`args[index].<attr>` (e.g. x.size), or `tuple(args[index].<attr>)[axis]`; picklable."""

    index: int
    attr: str
    axis: int | None = None

    def __call__(self, args: Sequence[Any]) -> Any:
        value = getattr(args[self.index], self.attr)
        return value if self.axis is None else tuple(value)[self.axis]


def data_params(
    data: Mapping[str, Any], params: Sequence[str] | None, kernel: str
) -> tuple[tuple[DataParam, ...], Callable[[Sequence[Any]], Any]]:
    """DataParams for the rules in `data` and a fast `args -> key` reader of their raw values.

    SpecError names a rule that does not fit the kernel's parameters."""
    if not isinstance(data, Mapping) or not data:
        raise SpecError(
            f"{kernel}: data must be a dict naming at least one data parameter, e.g. "
            "data={'n': 'n'} or data={'n': lambda x, y, n: n}"
        )
    where = f"{kernel}({', '.join(params)})" if params is not None else kernel
    out: list[DataParam] = []
    getters: list[Callable[[Sequence[Any]], Any]] = []
    for name, rule in data.items():
        problem = data_name_problem(name)
        if problem:  # before the rule and the grid, which would blame something else
            raise SpecError(f"{kernel}: data {name!r}: {problem}")
        p = _one_param(str(name), rule, params, where)
        out.append(p)
        if isinstance(p.reader, CallRule):
            getters.append(_spread_into(p.reader.fn))
        else:
            getters.append(p.getter())
    if len(getters) == 1:
        return tuple(out), getters[0]
    return tuple(out), lambda args: tuple([g(args) for g in getters])


def _spread_into(fn: Callable[..., Any]) -> Callable[[Sequence[Any]], Any]:
    """A getter that calls `fn` with the call's arguments spread out."""
    return lambda args: fn(*args)


def _param_index(name: str, params: Sequence[str] | None, what: str, where: str) -> int:
    if params is None:
        raise SpecError(
            f"data {what}: the parameter names of {where} cannot be read; give an argument "
            "index or a callable instead"
        )
    if name not in params:
        raise SpecError(f"data {what}: {name!r} is not a parameter of {where}")
    return list(params).index(name)


def _one_param(name: str, rule: Any, params: Sequence[str] | None, where: str) -> DataParam:
    what = f"{name!r}"
    if isinstance(rule, bool):
        raise SpecError(f"data {what}: {rule!r} is not a rule")
    if isinstance(rule, int):
        if params is not None and not 0 <= rule < len(params):
            raise SpecError(f"data {what}: argument {rule} does not exist in {where}")
        return DataParam(name, arg=rule, lo=1, hi=INT32_MAX)
    if isinstance(rule, str):
        text = rule.replace(" ", "")
        if _IDENT.match(text):
            return DataParam(name, arg=_param_index(text, params, what, where))
        if m := _SHAPE.match(text):
            i, axis = _param_index(m.group(1), params, what, where), int(m.group(2))
            if axis < 0:  # counted from the end: not every array type indexes shapes so
                return DataParam(name, reader=AttrRule(i, "shape", axis))
            return DataParam(name, shape_of=(i, axis))
        if m := _LEN.match(text):
            return DataParam(name, shape_of=(_param_index(m.group(1), params, what, where), 0))
        if m := _SIZE.match(text):
            i = _param_index(m.group(1), params, what, where)
            return DataParam(name, reader=AttrRule(i, "size"))
        raise SpecError(
            f"data {what}: cannot read {rule!r}; use a parameter name ('n'), 'x.shape[0]', "
            "'len(x)', 'x.size', an argument index or a callable over the arguments"
        )
    if callable(rule):
        if params is not None and not _accepts(rule, len(params)):
            raise SpecError(
                f"data {what}: {getattr(rule, '__qualname__', rule)!r} must accept the "
                f"{len(params)} arguments of {where}"
            )
        return DataParam(name, reader=CallRule(rule, name))
    raise SpecError(f"data {what}: expected a parameter name, an index or a callable, got {rule!r}")


def _accepts(fn: Callable[..., Any], n: int) -> bool:
    import inspect

    try:
        inspect.signature(fn).bind(*([None] * n))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): give it the benefit of the doubt
        return True
    return True


# ---------------------------------------------------------------------------------------------
# Training sizes


def default_training_sizes(spec: KernelSpec, D: DataSize) -> list[DataSize]:
    """Sizes below the first call's: its data values divided by 16, 8, 4 and 2 (at least lo)."""
    out: list[DataSize] = []
    for div in TRAINING_DIVISORS:
        vals = {p.name: max(p.lo, D[p.name] // div) for p in spec.data}
        size = spec.size(vals)
        if size not in out and size != D:
            out.append(size)
    if len(out) < 2:
        raise BuildError(
            f"{spec.name}: the first call's size {dict(D)} is too small to measure below it; "
            "pass sizes=[...] to klaraptor.tune"
        )
    return out


# ---------------------------------------------------------------------------------------------
# The tuned kernel


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """What `klaraptor.tune` was given (see its docstring)."""

    data: Mapping[str, Any]
    grid: Any
    name: str | None = None
    make_args: Callable[..., Any] | None = None
    sizes: Sequence[Any] | None = None
    on_missing: str = "build"
    model: str = "auto"
    store: Any = None
    device: Any = None
    collect_options: Any = None
    constraints: tuple[Any, ...] = ()
    dynamic_smem: str | None = None
    default_block: Block | None = None
    dim: int | None = None
    reference: Callable[..., Any] | None = None
    outputs: tuple[int, ...] = ()
    rtol: float = 1e-3
    idempotent: bool = True
    progress: bool = True
    params: Mapping[str, Sequence[int]] | None = None
    param_style: str = "define"
    default_params: Mapping[str, int] | None = None
    refine: int = 0


class Tuned(Launcher):
    """A kernel whose launches get the block klaraptor chooses for each call's data size.

    Call it as the kernel (`tuned(*args)`, optionally `stream=`); `plan_for(*args)` gives the
    (grid, block, dynamic shared memory) a call would use, `build()` builds now, `settle()` pins
    pending online refinements, `spec`, `kernel` (the klaraptor Kernel, None without a build)
    and `name` describe it. The per-call path is `runtime.launcher.Launcher`'s, the one every
    front-end and `Kernel.tuned` share."""

    _adapter: TuneAdapter

    def __init__(self, adapter: TuneAdapter, options: TuneOptions, wrapped: Any) -> None:
        if options.on_missing not in ON_MISSING:
            raise SpecError(f"on_missing must be one of {ON_MISSING}, got {options.on_missing!r}")
        fname = adapter.function_name
        self._options = options
        self._params, fast_read = data_params(options.data, adapter.param_names, fname)
        super().__init__(adapter, refine=options.refine, read=fast_read)
        names = tuple(p.name for p in self._params)
        self._grid = grid_rule(options.grid, names, fname, tuple(options.params or ()))
        self._dim = options.dim or grid_dim(self._grid)
        self._schema = DataSchema(names, tuple((p.lo, p.hi) for p in self._params), fname)
        self._kernel: Any = None
        self._store: Any = options.store
        self.__wrapped__ = wrapped
        self.__name__ = fname
        self.__doc__ = getattr(wrapped, "__doc__", None)

    # -- once per new size -------------------------------------------------------------------

    def _plan(self, args: tuple[Any, ...]) -> Callable[[tuple[Any, ...]], None]:
        with self._lock:
            if self._spec is None:
                self._first_call(args)
            return super()._plan(args)

    def _check_call(self, args: Sequence[Any]) -> None:
        super()._check_call(args)
        if self._context is not None:
            self._context.check(args)

    def _choose(self, D: DataSize) -> Planned:
        if self._kernel is not None:
            return super()._choose(D)
        spec = self._spec
        assert spec is not None
        pv = spec.default_variant
        block = spec.default_block or DEFAULT_BLOCKS[spec.dim]
        device = self._options.device
        if device is not None:  # the GPU's own limit, where klaraptor knows it
            check_block(
                block, "default_block", max_threads=getattr(device, "max_threads_per_block", None)
            )
        grid = spec.grid_for(D, block, pv)
        return Planned(
            D, LaunchConfig(pv, block, grid, spec.dynamic_smem_for(D, block, pv)), "default"
        )

    def _first_call(self, args: tuple[Any, ...]) -> None:
        from klaraptor.collect.worker import IN_WORKER_ENV

        if os.environ.get(IN_WORKER_ENV):
            raise CollectError(
                f"{self.__name__} was called while a collection worker re-ran your script as "
                "__main__ to find its functions; put the script's work under "
                "`if __name__ == '__main__':`"
            )
        adapter = self._adapter
        adapter.bind(args)
        if any(is_tensor(a) for a in args):
            self._context = TorchBridge(args, adapter.param_names, self.__name__)
        D = self._schema.parse([p.read(args) for p in self._params])
        self._spec = self._make_spec(args, D)
        try:
            self._use(self._find_build(D))
        except BaseException:
            self._spec = None  # the next call tries again, never silently unbuilt
            raise

    def _make_spec(self, args: Sequence[Any], D: DataSize) -> KernelSpec:
        o, adapter = self._options, self._adapter
        make_args = o.make_args
        if make_args is None:
            info = describe_args(
                args, D, adapter.param_names, ints_are_pointers=adapter.ints_are_pointers
            )
            make_args = InferredArgs(info, adapter.array_kind)
        fields = dict(
            data=self._params,
            dim=self._dim,
            grid=self._grid,
            make_args=make_args,
            constraints=tuple(o.constraints),
            dynamic_smem=o.dynamic_smem,
            default_block=tuple(o.default_block) if o.default_block else None,
            idempotent=o.idempotent,
            reference=o.reference,
            outputs=tuple(o.outputs),
            rtol=o.rtol,
            description=f"{adapter.frontend} kernel {self.__name__} (klaraptor.tune)",
            meta={"frontend": adapter.frontend, "first_call": dict(D)},
        )
        if o.params:
            fields.update(
                params=o.params, param_style=o.param_style, default_params=o.default_params
            )
        base = _dotted(o.name or adapter.base_name)
        spec = adapter.make_spec(name=base, **fields)
        return dataclasses.replace(spec, name=f"{base}.v{spec.fingerprint()[:12]}")

    # -- builds ------------------------------------------------------------------------------

    def _open_store(self) -> Any:
        if self._store is None:
            from klaraptor.store import Store

            self._store = Store()
        return self._store

    def _find_build(self, D: DataSize) -> Any:
        from klaraptor.assemble import load

        spec = self._spec
        assert spec is not None
        device = self._options.device
        try:
            return load(
                spec.name,
                store=self._open_store(),
                device=None if device is None else device.key,
                spec=spec,
            )
        except BuildError:
            pass
        if self._options.on_missing == "default":
            block = spec.default_block or DEFAULT_BLOCKS[spec.dim]
            warnings.warn(
                KlaraptorWarning(
                    f"klaraptor: no build of {self.__name__} ({spec.name}) for this GPU: "
                    f"launching with the default block {block}. Build it with "
                    f"{self.__name__}.build() or klaraptor.tune(..., on_missing='build')"
                ),
                stacklevel=5,
            )
            return None
        # The measuring worker is prestarted by build() itself; what the first launch needs
        # (Numba's JIT compile) starts now, to overlap the build's measuring.
        self._adapter.prepare_launch()
        return self._build(self._options.sizes, D)

    def _build(self, sizes: Sequence[Any] | None, D: DataSize | None) -> Any:
        from rich.console import Console

        from klaraptor.assemble import build

        spec = self._spec
        assert spec is not None
        if sizes is None:
            if D is None:
                raise BuildError(f"{self.__name__}: give sizes=[...] (no call has been made yet)")
            sizes = default_training_sizes(spec, D)
        sizes = [spec.size(s) for s in check_sizes(sizes, f"{self.__name__}: sizes") or ()]
        console = Console(stderr=True)
        o = self._options
        gpu = o.device.name if o.device is not None else "this GPU"
        shown = ", ".join(str(dict(s)) for s in sizes)
        console.print(
            f"[bold]klaraptor[/bold]: no build of {self.__name__} for {gpu} yet; measuring it "
            f"now at {shown} (once per kernel version and GPU; on_missing='default' launches "
            "with a default block instead)",
            highlight=False,
        )
        t0 = time.perf_counter()
        kernel = build(
            spec,
            sizes,
            model=o.model,
            store=self._open_store(),
            device=o.device,
            collect_options=o.collect_options,
            progress=o.progress,
        )
        model = kernel.report.model if kernel.report is not None else o.model
        console.print(
            f"[bold]klaraptor[/bold]: built {spec.name} in {time.perf_counter() - t0:.1f} s "
            f"(model {model})",
            highlight=False,
        )
        return kernel

    def build(self, sizes: Sequence[Any] | None = None) -> Any:
        """Build now (at `sizes`, else the tune's sizes, else below the first call's size) and
        use the build from the next call on; returns the klaraptor Kernel."""
        with self._lock:
            if self._spec is None:
                raise BuildError(
                    f"{self.__name__}: call the kernel once first (klaraptor infers its arguments "
                    "and binds its signature from a real call)"
                )
            first = self._spec.meta.get("first_call")
            D = self._spec.size(first) if first else None
            self._use(self._build(sizes or self._options.sizes, D))
            self._forget()
            return self._kernel

    def _use(self, kernel: Any) -> None:
        """Launch with `kernel`'s choices (None: the default block) from the next new size on."""
        self._kernel = kernel
        self._selector = None if kernel is None else kernel.selector

    # -- failures ----------------------------------------------------------------------------

    def _launch_failed(self, exc: Exception, args: tuple[Any, ...], stream: Any) -> None:
        if isinstance(exc, KlaraptorError):
            raise exc
        from klaraptor.backends.numba_backend import incompatible_numpy

        unusable = incompatible_numpy(exc)
        if unusable is not None:
            raise unusable from exc
        tensors_now = any(is_tensor(a) for a in args)
        if tensors_now != (self._context is not None):  # the kinds of arguments changed
            with self._lock:
                self._context = (
                    TorchBridge(args, self._adapter.param_names, self.__name__)
                    if tensors_now
                    else None
                )
                self._forget()
            go = self._plan(args)
            if stream is None:
                go(args)
            else:
                self._streamed[self._key(args)](args, stream)
            return
        if self._context is not None:
            self._context.check(args)
        super()._launch_failed(exc, args, stream)

    # -- description -------------------------------------------------------------------------

    @property
    def spec(self) -> KernelSpec | None:
        """The KernelSpec (made on the first call)."""
        return self._spec

    @property
    def kernel(self) -> Any:
        """The klaraptor Kernel of the build in use (None while launching a default block)."""
        return self._kernel

    @property
    def name(self) -> str | None:
        """The store name: the kernel's name and the spec's fingerprint."""
        return None if self._spec is None else self._spec.name

    def __repr__(self) -> str:
        state = "unbuilt" if self._kernel is None else f"built ({self._kernel.helper.model_name})"
        return f"<klaraptor.Tuned {self._adapter.frontend} kernel {self.__name__}: {state}>"


def _dotted(name: str) -> str:
    parts = [re.sub(r"\W", "_", p) or "_" for p in name.split(".")]
    return ".".join(p if not p[0].isdigit() else f"_{p}" for p in parts)


# ---------------------------------------------------------------------------------------------
# tune


def adapter_for(kernel: Any, params: Mapping[str, Any] | None = None) -> TuneAdapter:
    """The front-end adapter of a kernel object (SpecError for anything else). With program
    parameters, a plain function is a Numba kernel factory (`frontends.numba`)."""
    from klaraptor.frontends.cuda_core import CoreAdapter, CoreKernel
    from klaraptor.frontends.cupy_wrap import CupyAdapter, is_raw_kernel
    from klaraptor.frontends.numba import NumbaAdapter, is_numba_kernel

    if is_numba_kernel(kernel):
        if params:
            raise SpecError(
                f"{kernel.py_func.__name__}: a Numba kernel's program parameters are chosen "
                "through a kernel factory: decorate a function of the parameter values that "
                "returns the cuda.jit kernel (see klaraptor.frontends.numba)"
            )
        return NumbaAdapter(kernel)
    if is_raw_kernel(kernel):
        return CupyAdapter(kernel, params=bool(params))
    if isinstance(kernel, CoreKernel):
        return CoreAdapter(kernel, params=bool(params))
    if params and callable(kernel) and hasattr(kernel, "__code__"):
        return NumbaAdapter.from_factory(kernel, params)
    if (type(kernel).__module__ or "").startswith("cuda.core"):
        raise SpecError(
            "klaraptor measures a cuda.core kernel from its source: compile it with "
            "klaraptor.frontends.cuda_core.compile_kernel(source, name, options)"
        )
    if callable(kernel) and hasattr(kernel, "__code__"):
        raise SpecError(
            f"{getattr(kernel, '__name__', kernel)!r} is a plain Python function: put "
            "@klaraptor.tune(...) above @cuda.jit, not below it"
        )
    raise SpecError(
        "klaraptor.tune wraps a numba.cuda.jit kernel, a cupy.RawKernel (or RawModule."
        "get_function) or a klaraptor.frontends.cuda_core.compile_kernel(...) result; got a "
        f"{type(kernel).__module__}.{type(kernel).__qualname__}"
    )


def tune(
    data: Mapping[str, Any],
    grid: str | Sequence[str],
    *,
    name: str | None = None,
    make_args: Callable[..., Any] | None = None,
    sizes: Sequence[Any] | None = None,
    on_missing: str = "build",
    model: str = "auto",
    store: Any = None,
    device: Any = None,
    collect_options: Any = None,
    constraints: Sequence[Any] = (),
    dynamic_smem: str | None = None,
    default_block: Block | None = None,
    dim: int | None = None,
    reference: Callable[..., Any] | None = None,
    outputs: Sequence[int] = (),
    rtol: float = 1e-3,
    idempotent: bool = True,
    progress: bool = True,
    params: Mapping[str, Sequence[int]] | None = None,
    param_style: str = "define",
    default_params: Mapping[str, int] | None = None,
    refine: int = 0,
) -> Callable[[Any], Tuned]:
    """Decorate (or wrap) a kernel so each call launches with the block klaraptor chooses.

    `data` and `grid` are required (module doc). `name`: the store name's prefix (default:
    front-end, module and function). `make_args(D, rng)`: arguments for measuring (default:
    inferred from the first call). `sizes`: training sizes (default: below the first call's).
    `on_missing`: "build" or "default" (module doc). `model`: the build's model ("auto",
    "time_fit", "mwp_cwp"). `store`: the klaraptor Store (default: the user's). `device`: a
    DeviceProfile to build with and for (default: this GPU's, measured once and cached).
    `collect_options`: `gpu.collect.CollectOptions` (e.g. counters=False). `constraints`,
    `dynamic_smem`, `default_block`, `dim`, `reference`, `outputs`, `rtol`, `idempotent`: as in
    KernelSpec. `progress`: rich progress bars while building. `params`, `param_style`,
    `default_params`: compile-time program parameters chosen per call with the block, as in
    KernelSpec (module doc). `refine=k`: online refinement, the first calls of each new size
    time the model's top k on the GPU (CUDA events on the call's stream) and keep the fastest,
    in the store too (module doc).
    """
    # Each argument checked here, at decoration, not at the first call (validate.py).
    if name is not None:
        check_store_name(name, "tune(name=...)")
    if dim is not None:
        dim = check_int(dim, "tune(dim=...)", minimum=1, maximum=3, error=SpecError)
    if default_block is not None:
        default_block = check_block(
            default_block,
            "tune(default_block=...)",
            dim=dim or 3,
            max_threads=getattr(device, "max_threads_per_block", None),
        )
    if sizes is not None:
        sizes = check_sizes(sizes, "tune(sizes=...)")
    check_text(model, "tune(model=...)", SpecError)
    check_device(device, "tune(device=...)")
    check_bool(progress, "tune(progress=...)")
    refine = check_int(refine, "tune(refine=...)", minimum=0, error=SpecError)
    options = TuneOptions(
        data=dict(data) if isinstance(data, Mapping) else data,
        grid=grid,
        name=name,
        make_args=make_args,
        sizes=sizes,
        on_missing=on_missing,
        model=model,
        store=check_store(store),
        device=device,
        collect_options=collect_options,
        constraints=tuple(
            check_list(constraints, "tune(constraints=...)", "['bx <= n']", SpecError)
        ),
        dynamic_smem=dynamic_smem,
        default_block=default_block,
        dim=dim,
        reference=reference,
        outputs=tuple(check_list(outputs, "tune(outputs=...)", "[1]", SpecError)),
        rtol=rtol,
        idempotent=idempotent,
        progress=progress,
        params=check_params(params, param_style, default_params),
        param_style=param_style,
        default_params=None if default_params is None else dict(default_params),
        refine=refine,
    )
    if on_missing not in ON_MISSING:
        raise SpecError(f"on_missing must be one of {ON_MISSING}, got {on_missing!r}")

    def wrap(kernel: Any) -> Tuned:
        return Tuned(adapter_for(kernel, options.params), options, kernel)

    return wrap


__all__ = ["Tuned", "TuneOptions", "tune"]
