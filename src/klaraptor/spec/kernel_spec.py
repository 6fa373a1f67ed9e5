"""KernelSpec: what a kernel is, how its data parameters are read and how it is launched.

D enters here and leaves as a `DataSize`: `KernelSpec.size(raw)` for what a user typed or passed,
`KernelSpec.read_data(args)` for a call's arguments. Both go through the spec's `DataSchema`, the
one place a data size is validated.

Spec expressions (grid, constraints, dynamic shared memory) are Python-syntax strings over the
data-parameter names and `bx, by, bz`, parsed once (cached on the spec) and evaluated with NumPy
by `spec_expressions`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorWarning, SpecError
from klaraptor.core.types import (
    BLOCK_VARS,
    INT32_MAX,
    Block,
    DataSchema,
    DataSize,
    ParamStyle,
    ParamValues,
)
from klaraptor.program import Expr
from klaraptor.spec.cuda_source import c_int_max, has_global_function, kernel_parameters
from klaraptor.spec.data_param import Data, DataParam, data_name_problem
from klaraptor.spec.expressions import (
    accepts_positional,
    block_problem,
    callable_name,
    constraint_masks,
    constraint_text,
    env_shape,
    evaluate_exprs,
    is_int,
    parse_constraint,
    try_parse,
)
from klaraptor.spec.params import (
    ProgramParam,
    normalize_params,
    params_problems,
)

# A constraint is an expression over data names and bx, by, bz, or a callable (D, block) -> bool.
Constraint = str | Callable[[Data, Block], bool]
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# Values by name: a data size D, program parameter values.
Named = Mapping[str, Any]


@dataclass(frozen=True)
class KernelSpec:
    """Everything klaraptor needs to compile, measure, model and launch one kernel.

    - `name`: the store key, e.g. "polybench.gemm".
    - `source`, `kernel`: CUDA C++ source for NVRTC and the `__global__` function's name
      (declare it `extern "C"` so the name is not mangled).
    - `data`: the data parameters, in order.
    - `dim`: block dimensionality 1, 2 or 3 (unused block dims are 1).
    - `grid`: three expressions over data names and bx, by, bz, e.g. ("ceil(N / bx)", "ceil(N / by)", "1").
    - `make_args(D, rng)`: builds valid launch arguments (CuPy arrays and NumPy scalars) for data D.
      It must be an importable top-level function: collection runs in a worker subprocess.
    - `constraints`: extra conditions a block must satisfy (expressions or callables).
    - `dynamic_smem`: expression for dynamic shared memory in bytes (None = 0).
    - `options`: NVRTC options.
    - `idempotent`: the kernel may be re-run on the same inputs (online refinement needs it).
    - `default_block`: the block a user would hand-pick (the benchmark's default).
    - `reference(D, host_args) -> {arg_index: expected ndarray}`: optional output check computed on
      host copies of the inputs; `outputs` lists the argument indices the kernel writes.
    - `rtol`: relative tolerance of the output check.
    - `params`: compile-time program parameters, name -> the values each may take (e.g.
      `{"ITEMS": (1, 2, 4, 8)}`); each combination is one compiled variant. Spec expressions may
      use their names. `param_style` says how they are compiled in: `"define"` (`-DITEMS=4`;
      the kernel is `extern "C"`) or `"template"` (`kernel<4>` through NVRTC name expressions,
      template arguments in the order of `params`). `default_params` is the variant the kernel's
      author would ship (the first value of each parameter when not given).

    The spec validates itself on construction (SpecError listing every problem).
    """

    name: str
    source: str
    kernel: str
    data: tuple[DataParam, ...]
    dim: int
    grid: tuple[str, str, str]
    make_args: Callable[[Data, np.random.Generator], tuple[Any, ...]]
    constraints: tuple[Constraint, ...] = ()
    dynamic_smem: str | None = None
    options: tuple[str, ...] = ("--std=c++17",)
    idempotent: bool = True
    default_block: Block | None = None
    reference: Callable[[Data, tuple[Any, ...]], dict[int, np.ndarray]] | None = None
    outputs: tuple[int, ...] = ()
    rtol: float = 1e-3
    description: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    params: tuple[ProgramParam, ...] = ()
    param_style: ParamStyle = ParamStyle.DEFINE
    default_params: ParamValues | None = None

    @property
    def data_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.data)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def variants(self) -> list[ParamValues]:
        """Every compiled variant: the parameter values' cartesian product, the first parameter
        varying slowest ([ParamValues.NONE] for a kernel without parameters)."""
        names = self.param_names
        return [
            ParamValues(names, vals) for vals in itertools.product(*(p.values for p in self.params))
        ]

    def param_values(self, raw: Mapping[str, Any] | None) -> ParamValues:
        """`raw` (a mapping by name) as this kernel's ParamValues; SpecError when a name is
        missing or unknown or a value is not one the parameter may take."""
        if raw is None:
            raw = {}
        if type(raw) is ParamValues and raw.names == self.param_names:
            pv = raw
        else:
            if not isinstance(raw, Mapping):
                raise SpecError(
                    f"kernel {self.name!r}: parameter values must be a mapping by name, got "
                    f"{type(raw).__name__} {raw!r}"
                )
            missing = [n for n in self.param_names if n not in raw]
            unknown = [str(k) for k in raw if k not in self.param_names]
            if missing or unknown:
                raise SpecError(
                    f"kernel {self.name!r}: parameter values {dict(raw)} must name exactly "
                    f"{list(self.param_names)}"
                    + (f"; missing {missing}" if missing else "")
                    + (f"; unknown {unknown}" if unknown else "")
                )
            pv = ParamValues(self.param_names, [raw[n] for n in self.param_names])
        for prm in self.params:
            if pv[prm.name] not in prm.values:
                raise SpecError(
                    f"kernel {self.name!r}: parameter {prm.name} = {pv[prm.name]} is not one of "
                    f"its values {list(prm.values)}"
                )
        return pv

    @property
    def default_variant(self) -> ParamValues:
        """The author's variant: `default_params`, else the first value of every parameter."""
        if self.default_params is not None:
            return self.default_params
        return ParamValues(self.param_names, [p.values[0] for p in self.params])

    def variant_options(self, pv: ParamValues) -> tuple[str, ...]:
        """The NVRTC options that compile variant `pv` (the defines of the define style)."""
        if self.param_style is ParamStyle.DEFINE and pv:
            return (*self.options, *(f"-D{n}={v}" for n, v in pv.items()))
        return self.options

    def variant_kernel(self, pv: ParamValues) -> str:
        """The name to look the compiled variant up by: the kernel's name, or the template
        instance `kernel<v1, v2>` (an NVRTC name expression) in the template style."""
        if self.param_style is ParamStyle.TEMPLATE and pv:
            return f"{self.kernel}<{', '.join(str(v) for v in pv.values())}>"
        return self.kernel

    # -- construction and validation ----------------------------------------------------------

    def __post_init__(self) -> None:
        # Lists are accepted for convenience but stored as tuples, so the spec stays hashable.
        for name in ("data", "grid", "constraints", "options", "outputs"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if isinstance(self.default_block, list):
            object.__setattr__(self, "default_block", tuple(self.default_block))
        object.__setattr__(self, "_cache", {})
        self._normalize_params()
        self.validate()
        self._warn_unused_block_dims()

    def _warn_unused_block_dims(self) -> None:
        """A rule over by (bz) with dim=1 (1 or 2) is legal, as the unused block dimensions are
        1, but it is likely a mistake: warn naming the rule."""
        unused = BLOCK_VARS[self.dim :]
        cache = self.__dict__["_cache"]
        rules: list[tuple[str, str | None, Any]]
        rules = [(f"grid[{i}]", t, e) for i, (t, e) in enumerate(zip(self.grid, cache["grid"]))]
        rules += [(f"constraints[{i}]", t, e) for i, (t, e) in enumerate(cache["constraints"])]
        if "smem" in cache:
            rules.append(("dynamic_smem", self.dynamic_smem, cache["smem"]))
        for where, text, e in rules:
            used = sorted(set(unused) & set(getattr(e, "variables", frozenset)()))
            if used:
                warnings.warn(
                    KlaraptorWarning(
                        f"kernel {self.name!r}: {where} {text!r} uses {', '.join(used)}, but "
                        f"dim={self.dim} makes every block {self.dim}-D ({', '.join(unused)} "
                        f"= 1); give dim={BLOCK_VARS.index(used[-1]) + 1} for such blocks, or "
                        "write the rule without them"
                    ),
                    stacklevel=4,
                )
                return

    def _normalize_params(self) -> None:
        """`params` given as a mapping becomes ProgramParams; the style and the default variant
        become their types. Problems are left for validate() to report with the others."""
        params, style, default = normalize_params(
            self.params, self.param_style, self.default_params
        )
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "param_style", style)
        object.__setattr__(self, "default_params", default)

    def __getstate__(self) -> dict[str, Any]:
        # Parsed expressions are a cache: rebuild them in the receiving process.
        state = dict(self.__dict__)
        state.pop("_cache", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "_cache", {})

    @property
    def allowed_names(self) -> tuple[str, ...]:
        """Variables a spec expression may use: the data names, the program parameters' names
        and bx, by, bz."""
        return (*self.data_names, *self.param_names, *BLOCK_VARS)

    def validate(self) -> None:
        """Raise SpecError naming the spec and every bad field; parse and cache expressions."""
        problems: list[str] = []

        def bad(fld: str, msg: str) -> None:
            problems.append(f"{fld}: {msg}")

        # name, source, kernel
        if not isinstance(self.name, str) or not _DOTTED.match(self.name):
            bad("name", f"{self.name!r} is not a dotted identifier (e.g. 'polybench.gemm')")
        if not isinstance(self.source, str) or not self.source.strip():
            bad("source", "is empty")
        if not isinstance(self.kernel, str) or not _IDENT.match(self.kernel):
            bad("kernel", f"{self.kernel!r} is not a C identifier")
        elif isinstance(self.source, str) and self.source.strip():
            problem = self.kernel_source_problem()
            if problem:
                bad("kernel", problem)

        # dim
        dim_ok = isinstance(self.dim, int) and not isinstance(self.dim, bool) and 1 <= self.dim <= 3
        if not dim_ok:
            bad("dim", f"must be 1, 2 or 3, got {self.dim!r}")

        # data parameters, program parameters
        names_ok = self._validate_data(bad)
        names_ok = self._validate_params(bad) and names_ok
        self._validate_arg_indices(bad)

        # expressions: only when the names are sound, else every parse error would be noise
        if names_ok:
            self._validate_exprs(bad)

        # make_args, reference, outputs, rtol, options, default_block
        if not callable(self.make_args):
            bad(
                "make_args",
                f"must be callable (D, rng) -> args, got {type(self.make_args).__name__}",
            )
        elif not accepts_positional(self.make_args, 2):
            bad("make_args", f"{callable_name(self.make_args)} must accept (D, rng)")
        if self.reference is not None:
            if not callable(self.reference):
                bad("reference", "must be callable (D, host_args) -> {index: ndarray}")
            elif not accepts_positional(self.reference, 2):
                bad("reference", f"{callable_name(self.reference)} must accept (D, host_args)")
            if not self.outputs:
                bad("outputs", "a reference is given but no output argument indices")
        if not isinstance(self.outputs, tuple) or not all(
            is_int(i) and i >= 0 for i in self.outputs
        ):
            bad("outputs", f"must be non-negative argument indices, got {self.outputs!r}")
        elif len(set(self.outputs)) != len(self.outputs):
            bad("outputs", f"has duplicates: {self.outputs!r}")
        try:
            rtol_ok = float(self.rtol) > 0 and math.isfinite(float(self.rtol))
        except (TypeError, ValueError):
            rtol_ok = False
        if not rtol_ok:
            bad("rtol", f"must be a finite number > 0, got {self.rtol!r}")
        if not isinstance(self.options, tuple) or not all(isinstance(o, str) for o in self.options):
            bad("options", f"must be a tuple of strings, got {self.options!r}")
        if not isinstance(self.idempotent, bool):
            bad("idempotent", f"must be a bool, got {self.idempotent!r}")
        if self.default_block is not None:
            msg = block_problem(self.default_block, self.dim if dim_ok else 3)
            if msg:
                bad("default_block", msg)
        if not isinstance(self.meta, dict):
            bad("meta", f"must be a dict, got {type(self.meta).__name__}")

        if problems:
            label = self.name if isinstance(self.name, str) else repr(self.name)
            raise SpecError(f"invalid KernelSpec {label!r}:\n  - " + "\n  - ".join(problems))

    def kernel_source_problem(self) -> str:
        """Why `source` does not define `kernel` ('' when it does). CUDA C++ here; front-ends whose
        kernels are written in another language (Numba) override it."""
        if has_global_function(self.source, self.kernel):
            return ""
        return (
            f"no __global__ function named {self.kernel!r} in the source "
            '(declare it `extern "C" __global__ void ' + self.kernel + "(...)`)"
        )

    def _validate_data(self, bad: Callable[[str, str], None]) -> bool:
        if not isinstance(self.data, tuple) or not self.data:
            bad("data", "needs at least one DataParam")
            return False
        ok = True
        seen: set[str] = set()
        for i, p in enumerate(self.data):
            where = f"data[{i}]"
            if not isinstance(p, DataParam):
                bad(where, f"must be a DataParam, got {type(p).__name__}")
                ok = False
                continue
            where = f"data[{i}] ({p.name!r})"
            problem = data_name_problem(p.name)
            if problem:
                bad(where, problem)
                ok = False
            elif p.name in seen:
                bad(where, f"duplicate data parameter name {p.name!r}")
                ok = False
            if isinstance(p.name, str):
                seen.add(p.name)
            given = [m for m in ("arg", "shape_of", "reader") if getattr(p, m) is not None]
            if len(given) != 1:
                bad(where, f"give exactly one of arg / shape_of / reader (got {given or 'none'})")
            if p.arg is not None and not (is_int(p.arg) and p.arg >= 0):
                bad(where, f"arg must be a non-negative argument index, got {p.arg!r}")
            if p.shape_of is not None and not (
                isinstance(p.shape_of, tuple)
                and len(p.shape_of) == 2
                and all(is_int(x) for x in p.shape_of)
                and p.shape_of[0] >= 0
            ):
                bad(where, f"shape_of must be (argument index, axis), got {p.shape_of!r}")
            if p.reader is not None and not callable(p.reader):
                bad(where, f"reader must be callable args -> int, got {type(p.reader).__name__}")
            if not (is_int(p.lo) and is_int(p.hi)):
                bad(where, f"lo and hi must be integers, got {p.lo!r}, {p.hi!r}")
            elif p.lo > p.hi:
                bad(where, f"lo {p.lo} > hi {p.hi}")
        return ok

    def _validate_params(self, bad: Callable[[str, str], None]) -> bool:
        data_names = {p.name for p in self.data if isinstance(p, DataParam)}
        return params_problems(self.params, self.param_style, self.default_params, data_names, bad)

    def _validate_arg_indices(self, bad: Callable[[str, str], None]) -> None:
        """Argument indices (data parameters, outputs) must exist in the kernel's signature."""
        if not (isinstance(self.source, str) and isinstance(self.kernel, str)):
            return
        params = kernel_parameters(self.source, self.kernel)
        if params is None or not isinstance(self.data, tuple):
            return
        n = len(params)
        shown = f"{self.kernel}({', '.join(params)})" if n else f"{self.kernel}()"

        def check(where: str, i: Any) -> None:
            if is_int(i) and i >= n:
                bad(where, f"argument {i} does not exist: the kernel has {n} parameters, {shown}")

        for k, p in enumerate(self.data):
            if isinstance(p, DataParam):
                if p.arg is not None:
                    check(f"data[{k}] ({p.name!r})", p.arg)
                    if is_int(p.arg) and p.arg < n and is_int(p.hi):
                        self._check_c_range(k, p, params[p.arg], bad)
                if isinstance(p.shape_of, tuple) and p.shape_of:
                    check(f"data[{k}] ({p.name!r}) shape_of", p.shape_of[0])
        if isinstance(self.outputs, tuple):
            for i in self.outputs:
                check("outputs", i)

    def _check_c_range(
        self, k: int, p: DataParam, declaration: str, bad: Callable[[str, str], None]
    ) -> None:
        """D is passed to the kernel as argument `p.arg`: its C type bounds D. The default hi
        (INT32_MAX) is narrowed to a smaller type's maximum; a larger hi given is refused."""
        found = c_int_max(declaration)
        if found is None or p.hi <= found[1]:
            return
        ctype, most = found
        if p.hi == INT32_MAX:  # the default range, not a user's choice: narrow it to the type
            data = list(self.data)
            data[k] = dataclasses.replace(p, hi=most)
            object.__setattr__(self, "data", tuple(data))
            return
        bad(
            f"data[{k}] ({p.name!r})",
            f"hi={p.hi} exceeds what argument {p.arg} ({declaration.strip()}) can hold: a C "
            f"{ctype} holds at most {most}; lower hi (e.g. hi={most}) or widen the parameter",
        )

    def _validate_exprs(self, bad: Callable[[str, str], None]) -> None:
        allowed = self.allowed_names
        cache: dict[str, Any] = self.__dict__["_cache"]
        grid_ok = (
            isinstance(self.grid, tuple)
            and len(self.grid) == 3
            and all(isinstance(g, str) for g in self.grid)
        )
        if not grid_ok:
            bad("grid", f"must be three expression strings (x, y, z), got {self.grid!r}")
        else:
            exprs = []
            for axis, text in enumerate(self.grid):
                e = try_parse(text, allowed, f"grid[{axis}]", bad)
                exprs.append(e)
            if all(e is not None for e in exprs):
                cache["grid"] = tuple(exprs)

        if not isinstance(self.constraints, tuple):
            bad("constraints", f"must be a tuple, got {type(self.constraints).__name__}")
        else:
            parsed: list[tuple[str, Any]] = []
            for i, c in enumerate(self.constraints):
                item = parse_constraint(c, allowed, f"constraints[{i}]", bad)
                if item is not None:
                    parsed.append(item)
            if len(parsed) == len(self.constraints):
                cache["constraints"] = tuple(parsed)

        if self.dynamic_smem is not None:
            if not isinstance(self.dynamic_smem, str):
                bad(
                    "dynamic_smem",
                    f"must be an expression string or None, got {self.dynamic_smem!r}",
                )
            else:
                e = try_parse(self.dynamic_smem, allowed, "dynamic_smem", bad)
                if e is not None:
                    cache["smem"] = e

    # -- reading a call's data parameters ------------------------------------------------------

    @property
    def data_schema(self) -> DataSchema:
        """The data parameters' names and ranges: the parser of this kernel's D."""
        cache = self.__dict__["_cache"]
        schema = cache.get("schema")
        if schema is None:
            schema = cache["schema"] = DataSchema(
                self.data_names, tuple((p.lo, p.hi) for p in self.data), self.name
            )
        return schema

    def size(self, D: Any) -> DataSize:
        """D as a DataSize, from a DataSize, an int (one parameter), a sequence ordered as the
        data names, a mapping by name or text ("N=4096"); DataSizeError when it is not one."""
        return self.data_schema.parse(D)

    def read_data(self, args: Sequence[Any]) -> DataSize:
        """The data size of a call: its data parameters read from the arguments and checked."""
        try:
            raw = [p.read(args) for p in self.data]
        except SpecError as exc:
            raise SpecError(f"kernel {self.name!r}: {exc}") from None
        return self.data_schema.parse(raw)

    def normalize_data(self, D: Any) -> DataSize:
        """Same as `size` (kept for the 0.1 API)."""
        return self.data_schema.parse(D)

    def data_tuple(self, D: Any) -> tuple[int, ...]:
        """D as a tuple ordered as data_names (kept for the 0.1 API)."""
        return self.data_schema.parse(D).values()

    # -- parsed expressions ----------------------------------------------------------------------

    def _parsed(self) -> dict[str, Any]:
        cache: dict[str, Any] = self.__dict__["_cache"]
        if "grid" not in cache:  # emptied by pickling: parse again
            self.validate()
        return cache

    def grid_exprs(self) -> tuple[Expr, Expr, Expr]:
        """The grid formulas as program.Expr (x, y, z)."""
        return self._parsed()["grid"]

    def smem_expr(self) -> Expr | None:
        """The dynamic shared memory formula as program.Expr, or None (no dynamic smem)."""
        return self._parsed().get("smem")

    def constraint_exprs(self) -> tuple[Expr, ...]:
        """The expression constraints as program.Expr (callable constraints are not included)."""
        return tuple(e for _, e in self._parsed()["constraints"] if not callable(e))

    def constraint_items(self) -> tuple[tuple[str, Any], ...]:
        """Every constraint as (label, Expr or callable), in the spec's order."""
        return self._parsed()["constraints"]

    # -- evaluation ---------------------------------------------------------------------------

    def _env(
        self, D: Named, bx: Any, by: Any, bz: Any, params: Named | None = None
    ) -> dict[str, Any]:
        if not isinstance(D, Mapping):
            D = self.size(D)
        missing = [n for n in self.data_names if n not in D]
        if missing:
            raise SpecError(f"kernel {self.name!r}: D={dict(D)} lacks data parameters {missing}")
        env: dict[str, Any] = {n: D[n] for n in self.data_names}
        if self.params:
            if params is None:
                raise SpecError(
                    f"kernel {self.name!r} has program parameters {list(self.param_names)}: "
                    "its grid, shared memory and constraints need their values"
                )
            lacking = [n for n in self.param_names if n not in params]
            if lacking:
                raise SpecError(f"kernel {self.name!r}: parameter values lack {lacking}")
            env.update({n: params[n] for n in self.param_names})
        env.update(bx=bx, by=by, bz=bz)
        return env

    def grid_arrays(
        self, D: Named, bx: Any, by: Any, bz: Any, params: Named | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The grid over arrays of block dims (and D values), as float64 arrays of one shape.

        Entries are the formulas' raw values: a caller must treat non-finite, non-integral or
        non-positive entries as unlaunchable (`grid_valid` does that).
        """
        env = self._env(D, bx, by, bz, params)
        out = evaluate_exprs(dict(zip(("gx", "gy", "gz"), self.grid_exprs())), env)
        # Broadcast to every input's shape: a formula may ignore some (e.g. the grid "1").
        shape = env_shape(env)
        return (
            np.array(np.broadcast_to(out["gx"], shape), dtype=np.float64),
            np.array(np.broadcast_to(out["gy"], shape), dtype=np.float64),
            np.array(np.broadcast_to(out["gz"], shape), dtype=np.float64),
        )

    @staticmethod
    def grid_valid(gx: np.ndarray, gy: np.ndarray, gz: np.ndarray) -> np.ndarray:
        """Mask of grid entries that are finite positive integers on every axis."""
        ok = np.ones(np.broadcast(gx, gy, gz).shape, dtype=bool)
        for g in (gx, gy, gz):
            g = np.asarray(g, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                ok &= np.isfinite(g) & (g >= 1) & (g == np.floor(g))
        return ok

    def grid_for(
        self, D: Mapping[str, Any], block: Block, params: Mapping[str, Any] | None = None
    ) -> tuple[int, int, int]:
        """The launch grid for data D and a block; SpecError if it is not positive integers."""
        bx, by, bz = block
        vals = [
            float(np.asarray(a).reshape(-1)[0]) for a in self.grid_arrays(D, bx, by, bz, params)
        ]
        for axis, v in enumerate(vals):
            if not (math.isfinite(v) and v >= 1 and v.is_integer()):
                raise SpecError(
                    f"kernel {self.name!r}: grid[{axis}] = {self.grid[axis]!r} gives {v:g} for "
                    f"D={dict(D)}, block={tuple(block)}"
                    + (f", {ParamValues(tuple(params), tuple(params.values()))}" if params else "")
                    + "; a grid dimension must be a positive "
                    "integer (use ceil(...) for a partial last block)"
                )
        return (int(vals[0]), int(vals[1]), int(vals[2]))

    def dynamic_smem_arrays(
        self, D: Named, bx: Any, by: Any, bz: Any, params: Named | None = None
    ) -> np.ndarray:
        """Dynamic shared memory (bytes) over arrays of block dims, as float64 (0 when None)."""
        env = self._env(D, bx, by, bz, params)
        shape = env_shape(env)
        e = self.smem_expr()
        if e is None:
            return np.zeros(shape)
        out = evaluate_exprs({"smem": e}, env)["smem"]
        return np.array(np.broadcast_to(out, shape), dtype=np.float64)

    def dynamic_smem_for(
        self, D: Mapping[str, Any], block: Block, params: Mapping[str, Any] | None = None
    ) -> int:
        """Dynamic shared memory in bytes for data D and a block (0 when the spec has none)."""
        if self.smem_expr() is None:
            return 0
        v = float(np.asarray(self.dynamic_smem_arrays(D, *block, params=params)).reshape(-1)[0])
        if not (math.isfinite(v) and v >= 0 and v.is_integer()):
            raise SpecError(
                f"kernel {self.name!r}: dynamic_smem = {self.dynamic_smem!r} gives {v:g} for "
                f"D={dict(D)}, block={tuple(block)}; it must be a non-negative integer of bytes"
            )
        return int(v)

    def constraint_masks(
        self, D: Named, bx: Any, by: Any, bz: Any, params: Named | None = None
    ) -> list[tuple[str, np.ndarray]]:
        """(label, satisfied mask) per constraint, over arrays of block dims."""
        return constraint_masks(self.constraint_items(), self._env(D, bx, by, bz, params))

    def satisfies_constraints(
        self, D: Mapping[str, Any], block: Block, params: Mapping[str, Any] | None = None
    ) -> tuple[bool, str]:
        """(True, "") or (False, reason naming the first failing constraint)."""
        for label, mask in self.constraint_masks(D, *block, params=params):
            if not bool(np.asarray(mask).reshape(-1)[0]):
                return False, f"constraint {label} is false"
        return True, ""

    # -- identity -------------------------------------------------------------------------------

    def fingerprint(self) -> str:
        """sha256 of everything that changes what the kernel computes or how it is launched.

        Covers source, kernel, options, grid, constraints, dynamic_smem and dim, plus the data
        parameter names (stored D tuples are ordered by them). A callable constraint enters by
        its qualified name only: editing its body is not detected.
        """
        cache = self.__dict__["_cache"]
        if "fingerprint" not in cache:
            payload: dict[str, Any] = {
                "source": self.source,
                "kernel": self.kernel,
                "options": list(self.options),
                "grid": list(self.grid),
                "constraints": [constraint_text(c) for c in self.constraints],
                "dynamic_smem": self.dynamic_smem,
                "dim": self.dim,
                "data": list(self.data_names),
            }
            if self.params:  # absent without parameters: earlier fingerprints stay valid
                payload["params"] = {p.name: list(p.values) for p in self.params}
                payload["param_style"] = str(self.param_style)
            blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
            cache["fingerprint"] = hashlib.sha256(blob).hexdigest()
        return cache["fingerprint"]

    def to_summary(self) -> dict[str, Any]:
        """A JSON-safe description of the spec (what the store keeps next to the fingerprint)."""
        meta: dict[str, Any] = {}
        for k, v in self.meta.items():
            try:
                json.dumps(v)
            except (TypeError, ValueError):
                v = repr(v)
            meta[str(k)] = v
        return {
            "name": self.name,
            "kernel": self.kernel,
            "description": self.description,
            "dim": self.dim,
            "data": [
                {"name": p.name, "read": p.describe(), "lo": p.lo, "hi": p.hi} for p in self.data
            ],
            "grid": list(self.grid),
            "constraints": [constraint_text(c) for c in self.constraints],
            "dynamic_smem": self.dynamic_smem,
            "options": list(self.options),
            "idempotent": self.idempotent,
            "default_block": list(self.default_block) if self.default_block else None,
            "outputs": list(self.outputs),
            "has_reference": self.reference is not None,
            "rtol": float(self.rtol),
            "make_args": callable_name(self.make_args),
            **(
                {
                    "params": {p.name: list(p.values) for p in self.params},
                    "param_style": str(self.param_style),
                    "default_params": dict(self.default_variant),
                }
                if self.params
                else {}
            ),
            "fingerprint": self.fingerprint(),
            "source_sha256": hashlib.sha256(self.source.encode()).hexdigest(),
            "meta": meta,
        }
