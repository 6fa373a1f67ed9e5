"""`klaraptor.triton.autotune`: a drop-in for `triton.autotune` that never re-benchmarks a new key.

`triton.autotune` times every config at every new value of its key. This front-end times the
configs at a few small key values once (a build), fits the waves model over (config, key)
(`models.wave_time`: the exact program count of each config from the user's grid over META, the
occupancy of each compiled variant, the launch cost and one wave's time fitted from the
measurements), and chooses every new key from the model in microseconds.

The program parameters of a Triton config are its kwargs, `num_warps` and `num_stages`
(`ParamValues`); its block is `num_warps · 32` threads. The key's values are D. Measurements go
to the klaraptor store, keyed by a fingerprint of the kernel source (with the jitted functions it
calls), the config list, the key, the argument dtypes and Triton's version, and by the GPU: a
Triton upgrade or an edited kernel never serves a stale build.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.backends.triton_backend import (
    CompiledResources,
    TritonDevice,
    compiled_resources,
    fix_interpreter_index,
    time_launch,
    triton_device,
)
from klaraptor.core.enums import MeasurementStatus
from klaraptor.core.errors import BuildError, KlaraptorError, SpecError
from klaraptor.core.types import DataSize
from klaraptor.frontends.triton_args import flag, key_values, non_negative, param_values
from klaraptor.frontends.triton_choice import Chooser, grid_dims, programs_vector, vector_meta
from klaraptor.frontends.triton_extend import (
    SizeExtension,
    TrainingPoints,
    extend_keys,
    key_checks,
    pick_check,
    read_points,
    scaled_down_keys,
)
from klaraptor.models.wave_time import WaveFit, choose_wave_fit, full_waves, wave_fill

__all__ = ["TritonBuild", "TritonTuner", "autotune"]

Sample = Callable[..., tuple[Any, Sequence[Any], Mapping[str, Any]]]
_KIND = "time"


def _triton() -> Any:
    try:
        import triton
    except ImportError as exc:
        from klaraptor.core.errors import MissingDependencyError

        raise MissingDependencyError(
            "klaraptor.triton needs triton and torch: pip install 'klaraptor[triton]'"
        ) from exc
    return triton


@dataclass
class TritonBuild:
    """One build: the measured points of one argument signature and the fitted model."""

    kernel: str
    device: str
    sizes: list[DataSize]
    fit: WaveFit
    resources: dict[int, CompiledResources]
    measured: int
    seconds: float
    from_store: bool
    active: np.ndarray  # programs resident per SM, per config (occupancy of its compiled variant)
    report: dict[str, Any] = field(default_factory=dict)
    # the training keys the build added where some configs never left a flat regime (None:
    # none added; `report["growth"]` has the rule's verdict either way)
    extension: SizeExtension | None = None
    # what a new key's choice needs that does not depend on the key (made on first use)
    chooser: Chooser | None = field(default=None, repr=False, compare=False)


class TritonTuner:
    """A `@triton.jit` function with klaraptor's choice of config per key (see the module doc).

    Launch it as Triton's: `kernel[grid](*args, **kwargs)`, the grid a tuple or a function of
    META. `build(sizes, sample)` builds ahead of time; `select(...)` tells the choice for a call
    without launching."""

    def __init__(
        self,
        fn: Any,
        configs: Sequence[Any],
        key: Sequence[str],
        *,
        prune_configs_by: Mapping[str, Any] | None = None,
        reset_to_zero: Sequence[str] | None = None,
        restore_value: Sequence[str] | None = None,
        warmup: float | None = None,
        rep: float | None = None,
        sample: Sample | None = None,
        sizes: Sequence[Any] | None = None,
        store: Any = None,
        refine: int = 0,
        progress: bool | None = None,
        extend_sizes: bool = True,
    ) -> None:
        fix_interpreter_index()
        self.fn = fn
        self.arg_names: list[str] = list(getattr(fn, "arg_names", []))
        name = getattr(getattr(fn, "fn", fn), "__name__", "kernel")
        self.name = str(name)
        if not configs:
            raise SpecError(f"klaraptor.triton.autotune({self.name}): configs is empty")
        self.configs = list(configs)
        self.params = [
            param_values(c, f"klaraptor.triton.autotune({self.name}) config {i}")
            for i, c in enumerate(self.configs)
        ]
        self._all_kwargs = [c.all_kwargs() for c in self.configs]
        self.key = [str(k) for k in key]
        missing = [k for k in self.key if k not in self.arg_names]
        if missing:
            raise SpecError(
                f"klaraptor.triton.autotune({self.name}): key {missing} names no argument of the "
                f"kernel (its arguments: {self.arg_names})"
            )
        if not self.key:
            raise SpecError(f"klaraptor.triton.autotune({self.name}): key is empty")
        self._key_pos = [self.arg_names.index(k) for k in self.key]
        prune = dict(prune_configs_by or {})
        unknown = set(prune) - {"early_config_prune", "perf_model", "top_k"}
        if unknown:
            raise SpecError(f"prune_configs_by: unknown entries {sorted(unknown)}")
        self.early_config_prune = prune.get("early_config_prune")
        self.perf_model = prune.get("perf_model")
        self.top_k = prune.get("top_k", 10)
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        for what, names in (
            ("reset_to_zero", self.reset_to_zero),
            ("restore_value", self.restore_value),
        ):
            bad = [n for n in names if n not in self.arg_names]
            if bad:
                raise SpecError(f"{what}: {bad} names no argument of {self.name}")
        self.warmup = 25.0 if warmup is None else non_negative(self.name, "warmup", warmup)
        self.rep = 100.0 if rep is None else non_negative(self.name, "rep", rep)
        self.sample = sample
        self.sizes = list(sizes) if sizes is not None else None
        self._store_arg = store
        self._store: Any = None
        if isinstance(refine, bool) or not isinstance(refine, (int, np.integer)) or refine < 0:
            raise SpecError(
                f"klaraptor.triton.autotune({self.name}): refine={refine!r} must be a whole "
                "number >= 0 (how many configs beyond the model's best to time on a new key)"
            )
        self.refine = int(refine)
        self.extend_sizes = flag(self.name, "extend_sizes", extend_sizes)
        self.progress = sys.stderr.isatty() if progress is None else bool(progress)
        self._device: TritonDevice | None = None
        self._builds: dict[tuple[str, ...], TritonBuild] = {}
        # key tuple (values + dtypes) -> (config index, the config's launch kwargs)
        self._cache: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] = {}
        self.best_config: Any = None
        self.last_select_us: float = math.nan
        self._meta_vec = vector_meta(self._all_kwargs)
        # grid function's code -> whether calling it once on META of arrays (one entry per
        # config) gives every config's grid, as checked against one call per config
        self._grid_vectorises: dict[Any, bool] = {}
        self._prunes = self.early_config_prune is not None or self.perf_model is not None

    # -- identity -------------------------------------------------------------------------------
    @property
    def device(self) -> TritonDevice:
        if self._device is None:
            self._device = triton_device()
        return self._device

    def _source(self) -> str:
        key = getattr(self.fn, "cache_key", None)  # JITFunction: source + the jitted callees
        if isinstance(key, str):
            return key
        return inspect.getsource(getattr(self.fn, "fn", self.fn))

    def kernel_name(self, dtypes: Sequence[str]) -> str:
        """The store's name of this kernel for one argument signature: a fingerprint of the
        source, the configs, the key, the dtypes and Triton's version."""
        triton = _triton()
        h = hashlib.sha256()
        for part in (
            self._source(),
            repr([(sorted(c.all_kwargs().items(), key=str)) for c in self.configs]),
            repr(self.key),
            repr(list(dtypes)),
            str(triton.__version__),
        ):
            h.update(part.encode())
            h.update(b"\0")
        return f"triton.{self.name}.{h.hexdigest()[:16]}"

    def _open_store(self) -> Any:
        if self._store is None:
            from klaraptor.store import Store

            arg = self._store_arg
            self._store = arg if isinstance(arg, Store) else Store(arg)
        return self._store

    # -- reading a call -------------------------------------------------------------------------
    def _named(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        named = dict(zip(self.arg_names, args))
        named.update({k: v for k, v in kwargs.items() if k in self.arg_names})
        return named

    def _key_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """The cache key, as Triton's: the key's values, then every tensor argument's dtype."""
        vals: list[Any] = []
        for name, pos in zip(self.key, self._key_pos):
            vals.append(args[pos] if pos < len(args) else kwargs[name])
        vals.extend(
            str(a.dtype)
            for a in (*args, *(kwargs[n] for n in kwargs if n in self.arg_names))
            if hasattr(a, "dtype")
        )
        return tuple(vals)

    def _size(self, values: Sequence[Any]) -> DataSize:
        ints = []
        for name, v in zip(self.key, values):
            if isinstance(v, (bool, np.bool_)):
                ints.append(int(v))
            elif isinstance(v, (int, np.integer)):
                ints.append(int(v))
            else:
                raise SpecError(
                    f"klaraptor.triton({self.name}): key argument {name!r} = {v!r} is not an "
                    "integer; the key's values are the data sizes D"
                )
        return DataSize(self.key, ints)

    def _candidates(self, named: Mapping[str, Any], kwargs: Mapping[str, Any]) -> list[int]:
        """Config indices left by `prune_configs_by` for this call."""
        idx = list(range(len(self.configs)))
        extra = {k: v for k, v in kwargs.items() if k not in self.arg_names and k != "grid"}
        if self.early_config_prune is not None:
            kept = self.early_config_prune(self.configs, dict(named), **extra)
            if not kept:
                raise KlaraptorError(f"{self.name}: early_config_prune left no config")
            ids = {id(c) for c in kept}
            idx = [i for i in idx if id(self.configs[i]) in ids] or [
                i for i in idx if self.configs[i] in kept
            ]
        if self.perf_model is not None:
            k = self.top_k
            k = int(len(self.configs) * k) if isinstance(k, float) and k <= 1.0 else int(k)
            est = {i: self.perf_model(**named, **extra, **self._all_kwargs[i]) for i in idx}
            idx = sorted(idx, key=lambda i: est[i])[: max(1, k)]
        return idx

    def _programs_all(self, grid: Any, named: Mapping[str, Any], cand: Sequence[int]) -> Any:
        """The program count of every config (an array over all configs; only `cand` entries
        are meaningful). One call of the user's grid function with META of arrays where that is
        known to give the same counts as one call per config (checked on the first call of each
        grid function's code: Triton's `cdiv` and integer arithmetic broadcast; anything that
        needs a scalar raises, and the grid is then called per config)."""
        if not callable(grid):
            return self._programs(grid, named, cand[0])
        code = getattr(grid, "__code__", None)
        meta = self._meta_vec
        ok = None if meta is not None and code is not None else False
        if ok is None:
            ok = self._grid_vectorises.get(code)
        if ok is not False and meta is not None:  # `ok` is False whenever `meta` is None
            try:
                vec = programs_vector(grid, named, meta, len(self.configs))
            except Exception:  # the grid needs scalars: one call per config from now on
                vec = None
            if ok is None:  # first sight of this grid code: check it against per-config calls
                loop = np.zeros(len(self.configs), dtype=np.int64)
                for i in range(len(self.configs)):
                    loop[i] = self._programs(grid, named, i)
                self._grid_vectorises[code] = vec is not None and bool(
                    np.all(np.asarray(vec) == loop)
                )
                return loop
            if vec is not None:
                return vec
        programs = np.zeros(len(self.configs), dtype=np.int64)
        for i in cand:
            programs[i] = self._programs(grid, named, i)
        return programs

    def _programs(self, grid: Any, named: Mapping[str, Any], i: int) -> int:
        g = grid({**named, **self._all_kwargs[i]}) if callable(grid) else grid
        g = tuple(g) + (1,) * (3 - len(tuple(g)))
        return int(g[0]) * int(g[1]) * int(g[2])

    def _active(self, res: CompiledResources | None) -> int:
        if res is None or not self.device.gpu:
            return 1
        from klaraptor.device.occupancy import active_blocks_per_sm

        a = active_blocks_per_sm(
            res.num_warps * 32, max(res.num_regs, 1), res.shared, self.device.cc
        )
        return int(np.asarray(a).reshape(-1)[0])

    # -- launching ------------------------------------------------------------------------------
    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """Launch with the config chosen for this call's key (chosen once per key)."""
        key = self._key_of(args, kwargs)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._choose(args, kwargs, grid, key)
        i, launch_kwargs = hit
        config = self.configs[i]
        if config.pre_hook is not None:
            config.pre_hook({**self._named(args, kwargs), **launch_kwargs})
        return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **launch_kwargs)

    def select(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        """The `triton.Config` this call would launch with (built and chosen if needed)."""
        key = self._key_of(args, kwargs)
        hit = self._cache.get(key) or self._choose(args, kwargs, grid, key)
        return self.configs[hit[0]]

    def _choose(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        grid: Any,
        key: tuple[Any, ...] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        if key is None:
            key = self._key_of(args, kwargs)
        nkey = len(self.key)
        dtypes = tuple(str(v) for v in key[nkey:])
        build = self._builds.get(dtypes)
        if build is None:
            build = self._build_for_call(dtypes, args, kwargs, grid)
        chooser = build.chooser  # made with the build; here only for a build made otherwise
        if chooser is None:
            chooser = build.chooser = Chooser(build.fit, build.active, self.device.sm_count)
        t0 = time.perf_counter()
        values = key[:nkey]
        if not all(type(v) is int for v in values):
            values = self._size(values).values()
        named = self._named(args, kwargs)
        every: Sequence[int] = range(len(self.configs))
        cand = self._candidates(named, kwargs) if self._prunes else every
        pred = chooser.predict(values, self._programs_all(grid, named, cand))
        if self._prunes:  # configs left out by pruning are never chosen
            left_out = np.ones(len(self.configs), dtype=bool)
            left_out[list(cand)] = False
            pred[left_out] = np.inf
        choice = int(pred.argmin())
        if not math.isfinite(pred[choice]):
            raise KlaraptorError(
                f"{self.name}: no config is launchable at {DataSize(self.key, list(values))}"
            )
        self.last_select_us = (time.perf_counter() - t0) * 1e6
        if self.refine > 0:
            D = DataSize(self.key, list(values))
            order = [int(i) for i in np.argsort(pred) if np.isfinite(pred[i])]
            choice = self._refine(order[: self.refine + 1], args, kwargs, grid, build, D)
        hit = (choice, dict(self._all_kwargs[choice]))
        self._cache[key] = hit
        self.best_config = self.configs[choice]
        return hit

    def _choose_per_config(
        self,
        build: TritonBuild,
        values: Sequence[int],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        grid: Any,
    ) -> np.ndarray:
        """The model's prediction for every config, one grid call and one config at a time
        (`full_waves` and `WaveFit.predict` as they stand): the reference the fast path
        (`Chooser`, one vectorised grid call) is tested against."""
        named = self._named(args, kwargs)
        cand = self._candidates(named, kwargs)
        waves = np.full(len(self.configs), np.inf)
        if callable(grid):
            programs = [self._programs(grid, named, i) for i in cand]
        else:
            programs = [self._programs(grid, named, cand[0])] * len(cand)
        waves[cand] = full_waves(programs, build.active[cand], self.device.sm_count)
        fill = np.zeros(len(self.configs))
        fill[cand] = wave_fill(
            programs, waves[cand], build.active[cand] * float(self.device.sm_count)
        )
        return build.fit.predict(values, waves, fill)

    # -- measuring ------------------------------------------------------------------------------
    def _time_config(
        self, i: int, grid: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """(Timing or the error, the compiled kernel) of config i on these arguments."""
        named = self._named(args, kwargs)
        all_kw = self._all_kwargs[i]
        config = self.configs[i]
        zero = [named[n] for n in self.reset_to_zero if n in named]

        def launch() -> Any:
            for t in zero:
                t.zero_()
            if config.pre_hook is not None:
                config.pre_hook({**named, **all_kw})
            return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **all_kw)

        try:
            compiled = launch()
            timing = time_launch(launch, warmup_ms=self.warmup, rep_ms=self.rep)
        except Exception as exc:  # a config that fails to compile or launch is refused, not fatal
            if type(exc).__name__ == "OutOfResources" or "out of resource" in str(exc).lower():
                return exc, None
            if isinstance(exc, KlaraptorError):
                raise
            return exc, None
        return timing, compiled

    def _measure_key(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        D: DataSize,
        cand: Sequence[int],
        kernel: str,
        store: Any,
    ) -> dict[int, CompiledResources]:
        from klaraptor.store import Measurement

        named = self._named(args, kwargs)
        saved = {n: named[n].clone() for n in self.restore_value if n in named}
        resources: dict[int, CompiledResources] = {}
        rows = []
        for i in cand:
            timing, compiled = self._time_config(i, grid, args, kwargs)
            pv = self.params[i]
            block = (int(self.configs[i].num_warps) * 32, 1, 1)
            res = compiled_resources(compiled, int(self.configs[i].num_warps))
            if res is not None:
                resources[i] = res
            programs = self._programs(grid, named, i)
            if isinstance(timing, Exception):
                rows.append(
                    Measurement(
                        kernel,
                        self.device.name,
                        D,
                        block,
                        _KIND,
                        MeasurementStatus.FAILED.value,
                        {"programs": programs},
                        reason=f"{type(timing).__name__}: {timing}"[:500],
                        params=pv,
                    )
                )
                continue
            value = {
                "median_ms": timing.median_ms,
                "spread": timing.spread,
                "samples": timing.samples,
                "programs": programs,
            }
            if res is not None:
                value.update(num_regs=res.num_regs, shared=res.shared)
            rows.append(
                Measurement(
                    kernel,
                    self.device.name,
                    D,
                    block,
                    _KIND,
                    MeasurementStatus.OK.value,
                    value,
                    params=pv,
                )
            )
        for n, t in saved.items():
            named[n].copy_(t)
        if callable(grid):  # learn now whether the grid vectorises: no check at a new key
            self._programs_all(grid, named, range(len(self.configs)))
        store.put_measurements(rows)
        return resources

    def _refine(
        self,
        top: Sequence[int],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        grid: Any,
        build: TritonBuild,
        D: DataSize,
    ) -> int:
        """Online refinement: time the model's top configs on this call and keep the fastest."""
        times = {}
        for i in top:
            timing, _ = self._time_config(int(i), grid, args, kwargs)
            if not isinstance(timing, Exception):
                times[int(i)] = timing.median_ms
        return min(times, key=times.__getitem__) if times else int(top[0])

    # -- building -------------------------------------------------------------------------------
    def _train_sizes(self, call_key: Sequence[Any]) -> list[tuple[int, ...]]:
        if self.sizes is not None:
            return [tuple(self._size(self._as_values(s)).values()) for s in self.sizes]
        return scaled_down_keys(call_key)

    def _as_values(self, size: Any) -> tuple[Any, ...]:
        return key_values(self.name, self.key, size)

    def _build_for_call(
        self, dtypes: tuple[str, ...], args: Sequence[Any], kwargs: Mapping[str, Any], grid: Any
    ) -> TritonBuild:
        kernel = self.kernel_name(dtypes)
        stored = self._from_store(kernel)
        if stored is not None:
            self._builds[dtypes] = stored
            return stored
        if self.sample is None and self.sizes is None:
            # No way to make smaller arguments: measure this call's own key (tune once).
            return self._build(dtypes, [(grid, args, kwargs)])
        call_key = self._key_of(args, kwargs)[: len(self.key)]
        return self.build(self._train_sizes(call_key), dtypes=dtypes)

    def build(
        self,
        sizes: Sequence[Any],
        sample: Sample | None = None,
        *,
        dtypes: Sequence[str] | None = None,
        extend_sizes: bool | None = None,
    ) -> TritonBuild:
        """Measure every config at each training size (key values) and fit the model.

        `sample(**key_values)` returns the call for a size: `(grid, args, kwargs)`, as a launch
        `kernel[grid](*args, **kwargs)` takes them. Every size given is measured; where some
        configs then show no growth with a key parameter while most grow, up to two larger keys
        are added (`frontends.triton_extend`, `TritonBuild.extension`). `extend_sizes=False`:
        the given sizes only (None: the tuner's `extend_sizes`)."""
        extend = (
            self.extend_sizes
            if extend_sizes is None
            else flag(self.name, "extend_sizes", extend_sizes)
        )
        sample = sample or self.sample
        if sample is None:
            raise SpecError(
                f"{self.name}: build(sizes) needs sample=, a function of the key values returning "
                "(grid, args, kwargs) for that size"
            )
        calls = []
        for s in sizes:
            grid, args, kwargs = sample(**dict(zip(self.key, self._as_values(s))))
            calls.append((grid, tuple(args), dict(kwargs)))
        if not calls:
            raise SpecError(f"{self.name}: build needs at least one size")
        sig = (
            tuple(dtypes)
            if dtypes is not None
            else tuple(str(v) for v in self._key_of(calls[0][1], calls[0][2])[len(self.key) :])
        )
        return self._build(sig, calls, sample if extend else None)

    def _build(
        self,
        dtypes: tuple[str, ...],
        calls: Sequence[tuple[Any, Sequence[Any], Mapping[str, Any]]],
        extend_with: Sample | None = None,
    ) -> TritonBuild:
        """Measure the calls, then (with `extend_with`, the sample) the keys the growth rule
        asks for, and fit."""
        t0 = time.perf_counter()
        kernel = self.kernel_name(dtypes)
        store = self._open_store()
        from klaraptor.store import KernelRecord

        record = KernelRecord(
            kernel,
            kernel.rsplit(".", 1)[1],
            tuple(self.key),
            {
                "frontend": "triton",
                "function": self.name,
                "configs": [str(c) for c in self.configs],
                "dtypes": list(dtypes),
            },
        )
        store.put_kernel(record)
        progress = None
        if self.progress:
            from rich.progress import Progress

            progress = Progress(transient=True)
            progress.start()
            task = progress.add_task(f"klaraptor: building {self.name}", total=len(calls))
        resources: dict[int, CompiledResources] = {}
        extension = None
        try:
            for grid, args, kwargs in calls:
                self._measure_call(grid, args, kwargs, kernel, store, resources)
                if progress is not None:
                    progress.advance(task)
            if extend_with is not None:
                extension = self._extend(kernel, store, resources, extend_with)
        finally:
            if progress is not None:
                progress.stop()
        if extension is not None:  # stored beside the kernel: a reload reports it too
            store.put_kernel(extension.recorded(record))
        build = self._fit(kernel, store, resources, from_store=False, extension=extension)
        build.seconds = time.perf_counter() - t0
        self._builds[dtypes] = build
        self._cache.clear()
        return build

    def _measure_call(
        self,
        grid: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        kernel: str,
        store: Any,
        resources: dict[int, CompiledResources],
    ) -> None:
        key = self._key_of(args, kwargs)
        D = self._size(key[: len(self.key)])
        cand = self._candidates(self._named(args, kwargs), kwargs)
        for i, r in self._measure_key(grid, args, kwargs, D, cand, kernel, store).items():
            resources.setdefault(i, r)

    def _extend(
        self,
        kernel: str,
        store: Any,
        resources: dict[int, CompiledResources],
        sample: Sample,
    ) -> SizeExtension | None:
        """The keys the growth rule asks for, measured (`frontends.triton_extend`)."""

        def measure(size: DataSize) -> int:
            before = len(self._points(kernel, store).t_rows)
            grid, args, kwargs = sample(**dict(size))
            self._measure_call(grid, tuple(args), dict(kwargs), kernel, store, resources)
            return len(self._points(kernel, store).t_rows) - before

        return extend_keys(
            lambda: self._points(kernel, store), measure, len(self.configs), self.key
        )

    def _points(self, kernel: str, store: Any) -> TrainingPoints:
        return read_points(
            store.measurements(kernel, self.device.name, _KIND),
            self.params,
            [int(c.num_warps) for c in self.configs],
        )

    def _from_store(self, kernel: str) -> TritonBuild | None:
        store = self._open_store()
        record = store.kernel(kernel)
        if record is None or not store.measurements(kernel, self.device.name, _KIND):
            return None
        extension = SizeExtension.from_record(record)
        return self._fit(kernel, store, None, from_store=True, extension=extension)

    def _fit(
        self,
        kernel: str,
        store: Any,
        resources: dict[int, CompiledResources] | None,
        *,
        from_store: bool,
        extension: SizeExtension | None = None,
    ) -> TritonBuild:
        pts = self._points(kernel, store)
        if not pts.t_rows:
            raise BuildError(
                f"{self.name}: no config could be measured: {sorted(set(pts.reasons))[:3]}"
            )
        res = {**pts.resources, **(resources or {})}
        active = np.array(
            [self._active(res.get(i)) for i in range(len(self.configs))], dtype=np.float64
        )
        programs, cfg_a, D_a = pts.programs, pts.cfg, pts.D
        w = full_waves(programs, active[cfg_a], self.device.sm_count)
        fill = wave_fill(programs, w, active[cfg_a] * float(self.device.sm_count))
        grid, n = grid_dims(D_a, cfg_a, programs), len(self.configs)
        # One set of growth checks serves both: the parameters every fold option must hold
        # (those driving the time) and the flat configs the report names.
        checks = key_checks(D_a, cfg_a, pts.t, programs, n, self.key)
        need = [c.index for c in checks if c.drives_time]
        fit = choose_wave_fit(
            D_a, cfg_a, w, pts.t, n, data_names=self.key, fill=fill, grid_dims=grid, required=need
        )
        check = pick_check(checks)
        report: dict[str, Any] = {
            "fit": fit.to_dict(),
            "active_per_sm": active.tolist(),
            "growth": None if check is None else check.to_dict(),
            "size_extension": None if extension is None else extension.to_dict(),
        }
        return TritonBuild(
            kernel,
            self.device.name,
            pts.sizes,
            fit,
            res,
            len(pts.t_rows),
            0.0,
            from_store,
            active,
            report,
            extension,
            Chooser(fit, active, self.device.sm_count),
        )


def autotune(
    configs: Sequence[Any],
    key: Sequence[str],
    prune_configs_by: Mapping[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Any = None,
    post_hook: Any = None,
    warmup: float | None = None,
    rep: float | None = None,
    use_cuda_graph: bool = False,
    do_bench: Any = None,
    cache_results: bool = False,
    *,
    sample: Sample | None = None,
    sizes: Sequence[Any] | None = None,
    store: Any = None,
    refine: int = 0,
    progress: bool | None = None,
    extend_sizes: bool = True,
) -> Callable[[Any], TritonTuner]:
    """Decorate a `@triton.jit` function as `triton.autotune` does (same arguments), choosing the
    config of each new key from a model built once instead of benchmarking every config.

    klaraptor's own arguments: `sample(**key_values) -> (grid, args, kwargs)` makes the call for
    a training size (the first call then builds at its key scaled down by 2..16; without it, the
    first call's own key is measured, which is tuning once); `sizes` the training key values;
    `store` the store's path (or a `Store`); `refine=k` times the model's k best configs at each
    new key and keeps the fastest; `progress` shows the build's progress bar; `extend_sizes`
    (default True) lets a build add up to two larger keys where some configs showed no growth
    with a key parameter over the training keys while most configs grew (`TritonTuner.build`)."""
    if pre_hook is not None or post_hook is not None:
        raise SpecError(
            "klaraptor.triton.autotune: pre_hook/post_hook are not supported; use "
            "reset_to_zero / restore_value or a Config's pre_hook"
        )
    if use_cuda_graph:
        raise SpecError("klaraptor.triton.autotune: use_cuda_graph is not supported")
    if do_bench is not None:
        raise SpecError(
            "klaraptor.triton.autotune: do_bench is not supported; klaraptor times "
            "with CUDA events (warmup=, rep= as triton.autotune)"
        )
    del cache_results  # klaraptor's store always keeps builds

    def decorator(fn: Any) -> TritonTuner:
        return TritonTuner(
            fn,
            configs,
            key,
            prune_configs_by=prune_configs_by,
            reset_to_zero=reset_to_zero,
            restore_value=restore_value,
            warmup=warmup,
            rep=rep,
            sample=sample,
            sizes=sizes,
            store=store,
            refine=refine,
            progress=progress,
            extend_sizes=extend_sizes,
        )

    return decorator
