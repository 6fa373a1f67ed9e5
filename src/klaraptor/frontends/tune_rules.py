"""The rules `klaraptor.tune` is given, checked at decoration: the grid rule (expressions over
the data parameters, the program parameters and bx, by, bz) and the program parameters."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

from klaraptor.core.errors import SpecError
from klaraptor.core.types import BLOCK_VARS

_FUNCTIONS = frozenset({"ceil", "floor", "min", "max", "where"})


def grid_rule(
    grid: Any, data_names: Sequence[str], kernel: str, param_names: Sequence[str] = ()
) -> tuple[str, str, str]:
    """The grid rule as three expressions; SpecError for a name that is neither a data
    parameter, a program parameter nor bx, by, bz."""
    if isinstance(grid, str):
        exprs = [grid]
    elif (
        isinstance(grid, Sequence) and 1 <= len(grid) <= 3 and all(isinstance(g, str) for g in grid)
    ):
        exprs = list(grid)
    else:
        raise SpecError(
            f"{kernel}: grid must be an expression such as 'ceil(n / bx)' or up to three of "
            f"them (x, y, z), got {grid!r}"
        )
    for text in exprs:
        unknown = sorted(
            _names_in(text, kernel) - set(data_names) - set(param_names) - set(BLOCK_VARS)
        )
        if unknown:
            also = f", a program parameter ({', '.join(param_names)})" if param_names else ""
            raise SpecError(
                f"{kernel}: the grid rule {text!r} names {', '.join(unknown)}, which is neither a "
                f"data parameter ({', '.join(data_names)}){also} nor a block dimension (bx, by, "
                "bz); name it in data={...}" + (" or params={...}" if param_names else "")
            )
    return tuple((exprs + ["1", "1"])[:3])  # type: ignore[return-value]


def _names_in(text: str, kernel: str) -> set[str]:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise SpecError(
            f"{kernel}: the grid rule {text!r} is not an expression ({exc.msg})"
        ) from None
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - _FUNCTIONS


def grid_dim(grid: Sequence[str]) -> int:
    """The block dimensionality a grid rule implies: the highest of bx, by, bz it uses."""
    used = set().union(*(_names_in(g, "grid") for g in grid))
    return 3 if "bz" in used else 2 if "by" in used else 1


def check_params(params: Any, style: Any, default: Any) -> dict[str, tuple[int, ...]] | None:
    """`tune(params=...)` checked at decoration, as KernelSpec checks it (SpecError naming the
    bad parameter)."""
    if params is None:
        return None
    if not isinstance(params, Mapping) or not params:
        raise SpecError(
            "tune(params=...) must map each program parameter to its values, e.g. "
            f"params={{'ITEMS': (1, 2, 4)}}, got {params!r}"
        )
    from klaraptor.spec.params import normalize_params, params_problems

    norm, style_n, default_n = normalize_params(dict(params), style, default)
    problems: list[str] = []
    params_problems(norm, style_n, default_n, (), lambda f, m: problems.append(f"{f}: {m}"))
    if problems:
        raise SpecError("tune(params=...): " + "; ".join(problems))
    return {p.name: p.values for p in norm}
