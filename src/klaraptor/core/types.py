"""The value types every stage shares: the data size D, block and grid shapes, kernel attributes.

`DataSize` is the one representation of D after the boundary: it is built once, by
`DataSchema.parse` from whatever a user typed or passed (`4096`, `(4096,)`, `{"N": 4096}`,
`"N=4096"`, `"rows=512,cols=1024"`) or by `KernelSpec.read_data` from a call's arguments, and
every stage downstream (configspace, store keys, helper, selector, launcher, history) takes only
that type. `DataSchema.parse` is the only place D is validated; every problem raises
`DataSizeError`.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from klaraptor.core.errors import DataSizeError, SpecError

WARP_SIZE = 32
BLOCK_VARS: tuple[str, str, str] = ("bx", "by", "bz")
INT32_MAX = 2**31 - 1

Block = tuple[int, int, int]
Grid = tuple[int, int, int]


class _NamedInts(Mapping[str, int]):
    """Named ints in a fixed order, immutable and hashable: what `DataSize` and `ParamValues`
    share. A subclass's `__init__` checks and sets `_names`, `_values` and `_hash`."""

    __slots__ = ("_hash", "_names", "_values")
    _names: tuple[str, ...]
    _values: tuple[int, ...]
    _hash: int

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def values(self) -> tuple[int, ...]:  # type: ignore[override]
        """The values ordered as `names`."""
        return self._values

    def keys(self) -> tuple[str, ...]:  # type: ignore[override]
        return self._names

    def items(self) -> tuple[tuple[str, int], ...]:  # type: ignore[override]
        return tuple(zip(self._names, self._values))

    def __getitem__(self, name: str) -> int:
        try:
            return self._values[self._names.index(name)]
        except ValueError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return self._values == other._values and self._names == other._names  # type: ignore[attr-defined]
        return Mapping.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self})"

    def __str__(self) -> str:
        return ", ".join(f"{n}={v}" for n, v in zip(self._names, self._values))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._names, self._values))


class DataSize(_NamedInts):
    """D: the values of a kernel's data parameters, by name, ordered as the spec declares them.

    Immutable and hashable (equal sizes of one kernel are equal keys everywhere). It reads like a
    mapping (`D["N"]`, `dict(D)`), and `D.values()` is the ordered tuple of ints (the store key).
    Construct it with `DataSchema.parse`; the constructor only checks shape.
    """

    __slots__ = ()

    def __init__(self, names: Sequence[str], values: Sequence[int]) -> None:
        names_t = tuple(names)
        values_t = tuple(values)
        if len(names_t) != len(values_t):
            raise DataSizeError(f"data size: {len(values_t)} values for names {names_t}")
        self._names = names_t
        self._values = values_t
        self._hash = hash((names_t, values_t))


_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([^,\s]+)\s*")


@dataclass(frozen=True)
class DataSchema:
    """The data parameters of one kernel: their names and sane ranges, and the parser of D.

    `owner` names the kernel in error messages.
    """

    names: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...] = ()
    owner: str = ""

    def __post_init__(self) -> None:
        if not self.ranges:
            object.__setattr__(self, "ranges", tuple((1, INT32_MAX) for _ in self.names))

    def _fail(self, message: str) -> DataSizeError:
        return DataSizeError(f"kernel {self.owner!r}: {message}" if self.owner else message)

    def parse(self, raw: Any) -> DataSize:
        """D from what a user gave: a DataSize, an int (one parameter), a sequence in order, a
        mapping by name, or text ("4096", "N=4096", "rows=512,cols=1024"). Values must be
        integers (integral floats such as 4096.0 are accepted) inside their ranges."""
        names = self.names
        if isinstance(raw, np.ndarray) and raw.ndim == 0:
            raw = raw[()]  # a 0-d array (np.array(4096), a reduction's result) is its scalar
        if type(raw) is DataSize:
            if raw.names != names:
                raise self._fail(f"D={raw} names {list(raw.names)}, expected {list(names)}")
            values: Sequence[Any] = raw.values()
        elif isinstance(raw, Mapping):
            values = self._from_mapping(raw)
        elif isinstance(raw, str):
            values = self._from_text(raw)
        elif isinstance(raw, bytes):
            raise self._fail(f"D={raw!r} is bytes, not a size")
        elif isinstance(raw, (Sequence, np.ndarray)):
            values = list(raw)
            if len(values) != len(names):
                raise self._fail(
                    f"D={tuple(values)} has {len(values)} values; expected {len(names)}, "
                    f"ordered as {list(names)}"
                )
        else:
            if len(names) != 1:
                raise self._fail(
                    f"a single size {raw!r} is ambiguous with data parameters {list(names)}; "
                    "name them, e.g. " + ",".join(f"{n}=..." for n in names)
                )
            values = [raw]
        ints = tuple(self.check(n, lo, hi, v) for n, (lo, hi), v in zip(names, self.ranges, values))
        return DataSize(names, ints)

    def _from_mapping(self, raw: Mapping[Any, Any]) -> list[Any]:
        missing = [n for n in self.names if n not in raw]
        unknown = [str(k) for k in raw if k not in self.names]
        if missing or unknown:
            raise self._fail(
                f"D={dict(raw)} must name exactly {list(self.names)}"
                + (f"; missing {missing}" if missing else "")
                + (f"; unknown {unknown}" if unknown else "")
            )
        return [raw[n] for n in self.names]

    def _from_text(self, text: str) -> list[Any]:
        s = text.strip()
        if "=" not in s:
            if len(self.names) != 1:
                raise self._fail(
                    f"size {text!r} gives no names; use " + ",".join(f"{n}=..." for n in self.names)
                )
            return [_int_text(s, self.names[0], text, self._fail)]
        pairs: dict[str, Any] = {}
        for part in re.split(r"[,\s]+", s):
            if not part:
                continue
            m = _PAIR.fullmatch(part)
            if m is None:
                raise self._fail(f"bad size {text!r}: {part!r} is not NAME=VALUE")
            name, value = m.group(1), m.group(2)
            if name in pairs:
                raise self._fail(f"bad size {text!r}: {name} is given twice")
            pairs[name] = _int_text(value, name, text, self._fail)
        return self._from_mapping(pairs)

    def check(self, name: str, lo: int, hi: int, value: Any) -> int:
        """One value as an int inside [lo, hi]."""
        if type(value) is int:
            v = value
        elif isinstance(value, (bool, np.bool_)):
            raise self._fail(f"data parameter {name!r} must be an integer, got {value!r}")
        else:
            try:
                v = operator.index(value)
            except TypeError:
                if isinstance(value, (float, np.floating)) and float(value).is_integer():
                    v = int(value)
                else:
                    raise self._fail(
                        f"data parameter {name!r} must be an integer, got "
                        f"{type(value).__name__} {value!r}"
                    ) from None
        if not lo <= v <= hi:
            raise self._fail(f"data parameter {name!r} = {v} is outside its range [{lo}, {hi}]")
        return int(v)


def _int_text(value: str, name: str, text: str, fail: Any) -> int:
    try:
        return int(value.replace("_", ""))
    except ValueError:
        raise fail(f"bad size {text!r}: {name} = {value!r} is not an integer") from None


@dataclass(frozen=True)
class KernelAttributes:
    """Static attributes of a compiled kernel (cuFuncGetAttribute).

    `max_threads_per_block` is the function's own limit (lower than the device's when the kernel
    uses many registers); `max_dynamic_smem` is its current
    cudaFuncAttributeMaxDynamicSharedMemorySize (raised above the 48 KB default = opted in).
    """

    num_regs: int
    static_smem: int
    const_size: int
    local_size: int
    max_threads_per_block: int
    max_dynamic_smem: int

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelAttributes:
        try:
            return cls(**{k: int(d[k]) for k in cls.__dataclass_fields__})
        except KeyError as exc:
            raise SpecError(f"kernel attributes lack {exc.args[0]!r}: {dict(d)}") from None


class ParamStyle(StrEnum):
    """How a kernel's program parameters are compiled in."""

    DEFINE = (
        "define"  # a preprocessor define per parameter (-DNAME=value); the kernel is extern "C"
    )
    TEMPLATE = (
        "template"  # template arguments, in the spec's parameter order (NVRTC name expressions)
    )


class ParamValues(_NamedInts):
    """The compile-time parameter values of one compiled variant, by name, in the spec's order.

    Immutable and hashable, like `DataSize`. `ParamValues.NONE` is the variant of a kernel
    without program parameters (every kernel before they existed)."""

    __slots__ = ()
    NONE: ParamValues

    def __init__(self, names: Sequence[str] = (), values: Sequence[int] = ()) -> None:
        names_t = tuple(names)
        values_t = tuple(int(v) for v in values)
        if len(names_t) != len(values_t):
            raise SpecError(f"parameter values: {len(values_t)} values for names {names_t}")
        self._names = names_t
        self._values = values_t
        self._hash = hash(("P", names_t, values_t))

    def __bool__(self) -> bool:
        return bool(self._names)


ParamValues.NONE = ParamValues()


@dataclass(frozen=True, slots=True)
class Config:
    """A configuration: one value of the program parameters P — the compile-time parameter
    values (one compiled variant of the kernel; `ParamValues.NONE` without parameters) and the
    thread block."""

    params: ParamValues
    block: Block


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What one launch is: a configuration with the grid and the dynamic shared memory (bytes)
    that the data size of the call gives it."""

    params: ParamValues
    block: Block
    grid: Grid
    smem: int

    @property
    def config(self) -> Config:
        return Config(self.params, self.block)


def threads_of(block: Sequence[int]) -> int:
    """Threads in a block."""
    return int(block[0]) * int(block[1]) * int(block[2])


__all__ = [
    "BLOCK_VARS",
    "WARP_SIZE",
    "Block",
    "Config",
    "LaunchConfig",
    "ParamStyle",
    "ParamValues",
    "DataSchema",
    "DataSize",
    "Grid",
    "KernelAttributes",
    "threads_of",
]
