"""Compile-time program parameters of a kernel (tile sizes, work per thread, unrolling): their
declaration, and the checks a KernelSpec runs on them."""

from __future__ import annotations

import keyword
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from klaraptor.core.types import BLOCK_VARS, ParamStyle, ParamValues
from klaraptor.spec.expressions import is_int

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names an expression may call; no parameter may shadow them (the same set as data parameters).
RESERVED_NAMES = frozenset({"ceil", "floor", "min", "max", "where", "and", "or", "not"})


@dataclass(frozen=True)
class ProgramParam:
    """One compile-time program parameter and the values it may take, in the order given."""

    name: str
    values: tuple[int, ...]


def normalize_params(raw: Any, style: Any, default: Any) -> tuple[Any, Any, Any]:
    """The spec's (params, param_style, default_params) as given by a user, turned into their
    types where they are well formed (a mapping of values, a style name, a mapping of defaults);
    anything else is returned as it is, for `params_problems` to report."""
    params = raw
    if isinstance(raw, Mapping):
        params = tuple(
            ProgramParam(name, tuple(v) if isinstance(v, (list, tuple, range)) else v)
            for name, v in raw.items()
        )
    elif isinstance(raw, list):
        params = tuple(raw)
    if isinstance(style, str) and not isinstance(style, ParamStyle):
        try:
            style = ParamStyle(style)
        except ValueError:
            pass
    if isinstance(default, Mapping) and not isinstance(default, ParamValues):
        names = (
            [p.name for p in params if isinstance(p, ProgramParam)]
            if isinstance(params, tuple)
            else []
        )
        if set(default) == set(names) and all(is_int(v) for v in default.values()):
            default = ParamValues(names, [default[n] for n in names])
    return params, style, default


def params_problems(
    params: Any,
    style: Any,
    default: Any,
    data_names: Collection[str],
    bad: Callable[[str, str], None],
) -> bool:
    """Report every problem of a spec's program parameters through `bad`; True when the names
    are sound (so expressions over them can be checked)."""
    ok = True
    if not isinstance(params, tuple):
        bad("params", f"must map names to value tuples, got {type(params).__name__}")
        return False
    seen: set[str] = set()
    for i, prm in enumerate(params):
        if not isinstance(prm, ProgramParam):
            bad(f"params[{i}]", f"must be a ProgramParam, got {type(prm).__name__}")
            ok = False
            continue
        where = f"params[{prm.name!r}]"
        if not isinstance(prm.name, str) or not _IDENT.match(prm.name):
            bad(where, "the name must be an identifier")
            ok = False
        elif (
            prm.name in BLOCK_VARS
            or prm.name in RESERVED_NAMES
            or keyword.iskeyword(prm.name)
            or prm.name.startswith("_kp_")
        ):
            bad(where, f"the name {prm.name!r} is reserved (block variable or function)")
            ok = False
        elif prm.name in data_names:
            bad(where, f"{prm.name!r} is also a data parameter's name")
            ok = False
        elif prm.name in seen:
            bad(where, f"duplicate program parameter name {prm.name!r}")
            ok = False
        seen.add(str(prm.name))
        vals = prm.values
        if not isinstance(vals, tuple) or not vals:
            bad(where, f"needs a non-empty sequence of integer values, got {vals!r}")
            ok = False
        elif not all(is_int(v) for v in vals):
            bad(where, f"values must be integers, got {list(vals)!r}")
            ok = False
        elif len(set(vals)) != len(vals):
            bad(where, f"values have duplicates: {list(vals)!r}")
            ok = False
    if not isinstance(style, ParamStyle):
        bad("param_style", f"must be 'define' or 'template', got {style!r}")
    if default is not None:
        dp = default
        if not isinstance(dp, ParamValues):
            bad(
                "default_params",
                f"must map every parameter {[p.name for p in params]} to one of its values, "
                f"got {dp!r}",
            )
        elif ok:
            for prm in params:
                if dp[prm.name] not in prm.values:
                    bad(
                        "default_params",
                        f"{prm.name} = {dp[prm.name]} is not one of its values {list(prm.values)}",
                    )
    return ok
