"""A Kernel Tuner tuning problem as a KernelSpec with program parameters.

What a user passes to `kernel_tuner.tune_kernel` — the kernel's source and name, its problem
size, `tune_params`, `restrictions`, `grid_div_x/y/z`, `block_size_names`, `compiler_options` —
maps onto a KernelSpec whose candidate space is the same joint space, chosen per call:

- every tunable that is not a block dimension becomes a program parameter, compiled in as a
  define (`-Dtile_size_x=4`), as Kernel Tuner compiles it;
- a block dimension (`block_size_x/y/z`, or the names in `block_size_names`) is the launch's
  block: where the source reads it as a compile-time constant (e.g. to size shared arrays),
  it is a program parameter too, tied to the block by `bx == block_size_x`; otherwise the
  block is chosen at run time among the tuned values. An axis that is not tuned takes Kernel
  Tuner's default (x = 256, y = z = 1);
- the grid is Kernel Tuner's: `ceil(problem_size / product(grid_div))` per axis, with
  `grid_div_x` defaulting to the block's x dimension (an empty list: no division);
- the problem size is an expression per axis over the spec's data parameters (and the
  tunables, as Kernel Tuner allows a problem size named by a tunable);
- restrictions are Kernel Tuner's expression strings, over the same names; a restriction or
  grid divisor given as a Python function is refused (klaraptor evaluates its rules over
  every candidate at once and exports them to C);
- a source without `extern "C"` is wrapped in `extern "C" { ... }`, as Kernel Tuner's
  PyCUDA and C backends do, so the kernel is found by its name.

Values must be integers (a define of a float or a string is no program parameter). The
measurements of such a problem, from Kernel Tuner's files, import with
`import_kernel_tuner(path, spec, ...)`, each configuration under its variant.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from klaraptor.core.errors import SpecError
from klaraptor.core.types import BLOCK_VARS
from klaraptor.frontends.kernel_tuner import KT_DEFAULT_BLOCK
from klaraptor.frontends.kernel_tuner_files import BLOCK_NAMES
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.spec.expressions import is_int
from klaraptor.spec.params import ProgramParam

# Defines Kernel Tuner adds per configuration that depend on the launch, not on a tunable.
_GRID_DEFINES = ("grid_size_x", "grid_size_y", "grid_size_z")


def _uses(source: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", source) is not None


class _Rename(ast.NodeTransformer):
    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names:
            return ast.copy_location(ast.Name(self.names[node.id], node.ctx), node)
        return node


def _translate(text: Any, names: Mapping[str, str], what: str) -> str:
    """A Kernel Tuner expression with its block names replaced by bx, by, bz."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        kind = "a function" if callable(text) else type(text).__name__
        raise SpecError(
            f"{what}: {text!r} is {kind}; give it as an expression string over the tunables "
            "and data parameters (klaraptor evaluates rules over every candidate at once and "
            "exports them to C)"
        )
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"{what}: {text!r} is not an expression ({exc.msg})") from None
    return ast.unparse(_Rename(names).visit(tree))


def spec_from_tune_params(
    name: str,
    source: str,
    kernel: str,
    *,
    data: Sequence[DataParam],
    problem_size: Any,
    tune_params: Mapping[str, Sequence[Any]],
    make_args: Callable[..., Any],
    restrictions: Sequence[str] | None = None,
    grid_div_x: Sequence[str] | None = None,
    grid_div_y: Sequence[str] | None = None,
    grid_div_z: Sequence[str] | None = None,
    block_size_names: Sequence[str] | None = None,
    compiler_options: Sequence[str] | None = None,
    **fields: Any,
) -> KernelSpec:
    """The KernelSpec of a Kernel Tuner problem (module doc). `problem_size`: an expression
    (or int) per axis, over the data parameters' names, e.g. ("nx", "ny"); `fields`: further
    KernelSpec fields (reference, outputs, dynamic_smem, meta...). SpecError names the
    tunable, restriction or divisor that does not map."""
    where = f"Kernel Tuner problem {name!r}"
    if not isinstance(tune_params, Mapping) or not tune_params:
        raise SpecError(f"{where}: tune_params must map each tunable to its values")
    if callable(restrictions):
        raise SpecError(
            f"{where}: restrictions is a function; give Kernel Tuner's list of expression "
            "strings (klaraptor evaluates them over every candidate at once)"
        )
    block_names = tuple(block_size_names or BLOCK_NAMES)
    if len(block_names) > 3 or not all(isinstance(b, str) for b in block_names):
        raise SpecError(f"{where}: block_size_names must be up to three names, got {block_names}")
    to_block = dict(zip(block_names, BLOCK_VARS))
    sizes = list(problem_size) if isinstance(problem_size, (list, tuple)) else [problem_size]
    if not 1 <= len(sizes) <= 3:
        raise SpecError(f"{where}: problem_size needs one to three entries, got {problem_size!r}")
    for g in _GRID_DEFINES:
        if _uses(source, g):
            raise SpecError(
                f"{where}: the kernel reads {g}, a define Kernel Tuner sets per launch; klaraptor "
                "chooses the grid at run time, so read gridDim instead"
            )

    params: dict[str, tuple[int, ...]] = {}
    constraints: list[str] = []
    options = list(compiler_options) if compiler_options is not None else ["--std=c++17"]
    tuned_axes = [b for b in block_names if b in tune_params]
    dim = max(len(sizes), *(block_names.index(b) + 1 for b in tuned_axes), 1)
    for tunable, values in tune_params.items():
        vals = list(values) if isinstance(values, (list, tuple, range)) else values
        if not isinstance(vals, list) or not vals:
            raise SpecError(f"{where}: tune_params[{tunable!r}] must be a non-empty list")
        bad = [v for v in vals if isinstance(v, bool) or not is_int(v)]
        if bad:
            raise SpecError(
                f"{where}: tunable {tunable!r} has values {bad[:4]} that are not integers; "
                "klaraptor compiles program parameters in as integer defines"
            )
        vals = [int(v) for v in vals]
        if tunable in to_block:
            axis = to_block[tunable]
            if _uses(source, tunable):  # a compile-time constant of the kernel: a variant each
                params[tunable] = tuple(vals)
                constraints.append(f"{axis} == {tunable}")
            else:
                constraints.append(" or ".join(f"{axis} == {v}" for v in vals))
        else:
            params[tunable] = tuple(vals)
    for i, (bname, axis) in enumerate(zip(block_names, BLOCK_VARS)):
        if bname in tune_params or i >= dim:
            continue
        value = KT_DEFAULT_BLOCK[i]
        constraints.append(f"{axis} == {value}")
        if _uses(source, bname):
            options.append(f"-D{bname}={value}")
    for i, r in enumerate(restrictions or ()):
        constraints.append(_translate(r, to_block, f"{where}: restrictions[{i}]"))

    grid = []
    for i, (size, divs) in enumerate(zip(sizes, (grid_div_x, grid_div_y, grid_div_z))):
        axis = "xyz"[i]
        if callable(divs):
            raise SpecError(
                f"{where}: grid_div_{axis} is a function; give Kernel Tuner's list of names "
                "or expressions"
            )
        if divs is None:
            divs = [block_names[i]] if i < len(block_names) else []
        num = _translate(size, to_block, f"{where}: problem_size[{i}]")
        parts = [_translate(d, to_block, f"{where}: grid_div_{axis}") for d in divs]
        grid.append(f"ceil(({num}) / ({' * '.join(f'({p})' for p in parts)}))" if parts else num)
    grid += ["1"] * (3 - len(grid))
    grid_x, grid_y, grid_z = grid  # at most one per problem_size axis, padded to three

    if 'extern "C"' not in source and not re.search(r"\btemplate\s*<", source):
        source = 'extern "C" {\n' + source + "\n}\n"
    meta = dict(fields.pop("meta", {}) or {})
    meta.setdefault("kernel_tuner", {"tunables": list(tune_params)})
    return KernelSpec(
        name=name,
        source=source,
        kernel=kernel,
        data=tuple(data),
        dim=dim,
        grid=(grid_x, grid_y, grid_z),
        make_args=make_args,
        constraints=tuple(constraints),
        options=tuple(options),
        params=tuple(ProgramParam(n, values) for n, values in params.items()),
        meta=meta,
        **fields,
    )


__all__ = ["spec_from_tune_params"]
