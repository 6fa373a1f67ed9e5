"""A data parameter (e.g. N) of a kernel, and how its value is read from a call's arguments."""

from __future__ import annotations

import keyword
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from klaraptor.core.errors import KlaraptorError, SpecError
from klaraptor.core.types import BLOCK_VARS, INT32_MAX, DataSchema, DataSize
from klaraptor.spec.expressions import callable_name
from klaraptor.spec.params import RESERVED_NAMES

# What make_args, reference and callable constraints receive as D.
Data = DataSize
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class DataParam:
    """One data parameter (e.g. N) and how its value is read from a call's arguments.

    Exactly one of `arg`, `shape_of` or `reader` is given:
    - `arg=i`: the value is the integer argument `args[i]`;
    - `shape_of=(i, axis)`: the value is `args[i].shape[axis]`;
    - `reader`: a callable `args -> int`.
    `lo`/`hi` bound the sane range (inclusive); values outside it are rejected.
    """

    name: str
    arg: int | None = None
    shape_of: tuple[int, int] | None = None
    reader: Callable[[Sequence[Any]], int] | None = None
    lo: int = 1
    hi: int = INT32_MAX

    def getter(self) -> Callable[[Sequence[Any]], Any]:
        """A fast `args -> raw value` (no checks): the launcher's per-call reader."""
        if self.arg is not None:
            return operator.itemgetter(self.arg)
        if self.shape_of is not None:
            i, axis = self.shape_of
            return lambda args: args[i].shape[axis]
        if self.reader is not None:
            return self.reader
        raise SpecError(f"data parameter {self.name!r} has no read method")

    def read(self, args: Sequence[Any]) -> Any:
        """The raw value of this parameter in a call's arguments (not yet checked)."""
        if self.arg is not None:
            if not -len(args) <= self.arg < len(args):
                raise SpecError(
                    f"data parameter {self.name!r} is argument {self.arg}, "
                    f"but the call has {len(args)} arguments"
                )
            return args[self.arg]
        if self.shape_of is not None:
            i, axis = self.shape_of
            if not -len(args) <= i < len(args):
                raise SpecError(
                    f"data parameter {self.name!r} is the shape of argument {i}, "
                    f"but the call has {len(args)} arguments"
                )
            shape = getattr(args[i], "shape", None)
            if shape is None:
                raise SpecError(
                    f"data parameter {self.name!r} reads args[{i}].shape[{axis}], but argument "
                    f"{i} is a {type(args[i]).__name__} without a shape"
                )
            if not -len(shape) <= axis < len(shape):
                raise SpecError(
                    f"data parameter {self.name!r} reads axis {axis} of argument {i}, "
                    f"whose shape is {tuple(shape)}"
                )
            return shape[axis]
        if self.reader is not None:
            try:
                return self.reader(tuple(args))
            except KlaraptorError:
                raise
            except Exception as exc:
                raise SpecError(
                    f"data parameter {self.name!r}: its reader raised {type(exc).__name__}: {exc}"
                ) from exc
        raise SpecError(f"data parameter {self.name!r} has no read method")

    def check(self, value: Any) -> int:
        """`value` as an int inside [lo, hi], or DataSizeError."""
        return DataSchema((self.name,), ((self.lo, self.hi),)).check(
            self.name, self.lo, self.hi, value
        )

    def describe(self) -> str:
        """How the value is read, in words ("arg 2", "args[0].shape[1]", "reader f")."""
        if self.arg is not None:
            return f"arg {self.arg}"
        if self.shape_of is not None:
            return f"args[{self.shape_of[0]}].shape[{self.shape_of[1]}]"
        if self.reader is not None:
            return f"reader {callable_name(self.reader)}"
        return "unread"


def data_name_problem(name: Any) -> str:
    """Why `name` cannot name a data parameter ('' when it can): it must be an identifier that
    is not a block variable, an expression function, a Python keyword or klaraptor's prefix."""
    if not isinstance(name, str) or not _IDENT.match(name):
        return "the name must be an identifier"
    if (
        name in BLOCK_VARS
        or name in RESERVED_NAMES
        or keyword.iskeyword(name)
        or name.startswith("_kp_")  # klaraptor.program reserves it for generated code
    ):
        return f"the name {name!r} is reserved (block variable or function)"
    return ""
