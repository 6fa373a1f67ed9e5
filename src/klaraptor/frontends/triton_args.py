"""The checks of `klaraptor.triton.autotune`'s arguments (`frontends.triton`): each bad value is a
`SpecError` naming the argument and the kernel."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from klaraptor.core.errors import SpecError
from klaraptor.core.types import ParamValues

__all__ = ["flag", "key_values", "non_negative", "param_values"]


def param_values(config: Any, where: str) -> ParamValues:
    """A Triton config's program parameters: its kwargs (integers), num_warps, num_stages."""
    names, values = [], []
    for name, value in config.kwargs.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SpecError(
                f"{where}: kwarg {name!r} = {value!r} is not an integer; klaraptor.triton models "
                "integer meta-parameters only"
            )
        names.append(str(name))
        values.append(int(value))
    names += ["num_warps", "num_stages"]
    values += [int(config.num_warps), int(config.num_stages)]
    return ParamValues(names, values)


def non_negative(name: str, what: str, value: Any) -> float:
    """`warmup` and `rep` (ms, as `triton.testing.do_bench` takes them) as a float >= 0."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not math.isfinite(v) or v < 0:
        raise SpecError(
            f"klaraptor.triton.autotune({name}): {what}={value!r} must be a number of "
            "milliseconds >= 0"
        )
    return v


def flag(name: str, what: str, value: Any) -> bool:
    """A yes/no argument: a bool, nothing else (a string "False" would read as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise SpecError(
            f"klaraptor.triton.autotune({name}): {what}={value!r} must be True or False"
        )
    return bool(value)


def key_values(name: str, key: Sequence[str], size: Any) -> tuple[Any, ...]:
    """A training size as the key's values: a mapping by key name, a tuple in the key's order,
    or one number for a one-value key."""
    if isinstance(size, Mapping):
        missing = [k for k in key if k not in size]
        if missing:
            raise SpecError(f"{name}: size {dict(size)} lacks key values {missing}")
        return tuple(size[k] for k in key)
    if isinstance(size, (int, np.integer)) and len(key) == 1:
        return (size,)
    if isinstance(size, Sequence) and not isinstance(size, str) and len(size) == len(key):
        return tuple(size)
    raise SpecError(f"{name}: size {size!r} must give the key {list(key)} (mapping or tuple)")
