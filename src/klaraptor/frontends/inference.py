"""Argument factories inferred from a kernel's first real call.

Collection launches a kernel at training sizes smaller than the call's, so it needs arguments for
any data size D. From the first call's arguments and its D, every argument is described once:
- an array (CuPy, Numba device array, torch tensor, NumPy, anything with
  `__cuda_array_interface__`): its dtype, its layout (C or F order) and each axis length as an
  `Extent` of D: a data value (`n`), a product of two (`n * m`), a small multiple (`2 * n`), a
  data value plus or minus a small offset (`n + 2`, for halos), else a constant;
- a scalar: its type (a Python int stays a Python int, an np.int32 an np.int32) and its value as
  an `Extent` when it matches one (the size argument `n` becomes D["n"]), else the constant.

`InferredArgs(D, rng)` then makes arguments of the same types and shapes for any D, filled with
random data: floats uniform in [0, 1), integers in [0, 8), booleans random. Kernels whose
behaviour depends on the values (indices, CSR structures) or whose shapes follow other rules need
an explicit `make_args`. Inference refuses what it cannot describe (non-contiguous arrays, None,
objects of unknown types, raw pointers), naming the argument.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from klaraptor.core.errors import SpecError

MAX_OFFSET = 16  # |c| in n ± c (halo widths)
MAX_MULTIPLE = 8  # c in c · n (interleaved components)
ARRAY_KINDS = ("cupy", "numba")


class InferenceError(SpecError):
    """An argument of the first call that klaraptor cannot reproduce at other data sizes."""


@dataclass(frozen=True)
class Extent:
    """factor · Π D[names] + offset (a constant when `names` is empty)."""

    names: tuple[str, ...] = ()
    factor: int = 1
    offset: int = 0

    def __call__(self, D: Mapping[str, int]) -> int:
        if not self.names:
            return self.offset
        return self.factor * math.prod(int(D[n]) for n in self.names) + self.offset

    def describe(self) -> str:
        if not self.names:
            return str(self.offset)
        text = " * ".join(self.names)
        if self.factor != 1:
            text = f"{self.factor} * {text}"
        if self.offset:
            text += f" {'+' if self.offset > 0 else '-'} {abs(self.offset)}"
        return text


def match_extent(value: int, D: Mapping[str, int]) -> Extent:
    """The simplest Extent of D equal to `value` (see the module doc), else the constant."""
    names = list(D)
    for n in names:
        if D[n] == value:
            return Extent((n,))
    for a, b in itertools.combinations_with_replacement(names, 2):
        if D[a] * D[b] == value:
            return Extent((a, b))
    for c in range(2, MAX_MULTIPLE + 1):
        for n in names:
            if c * D[n] == value:
                return Extent((n,), factor=c)
    for n in names:
        off = value - D[n]
        if 0 < abs(off) <= MAX_OFFSET and D[n] > 2 * MAX_OFFSET:
            return Extent((n,), offset=off)
    return Extent((), offset=value)


@dataclass(frozen=True)
class ArgInfo:
    """How to make one argument: an array, a NumPy scalar or a Python scalar."""

    kind: str  # "array", "numpy", "int", "float", "bool"
    dtype: str = ""
    shape: tuple[Extent, ...] = ()
    order: str = "C"
    value: Extent | float | bool | None = None
    origin: str = ""  # the first call's type, for messages

    def describe(self) -> str:
        if self.kind == "array":
            dims = ", ".join(e.describe() for e in self.shape)
            return f"{self.dtype}[{dims}] ({self.order} order, from {self.origin})"
        v = self.value.describe() if isinstance(self.value, Extent) else repr(self.value)
        t = f"np.{self.dtype}" if self.kind == "numpy" else self.kind
        return f"{t} {v}"


def _torch_dtype(t: Any) -> np.dtype:
    name = str(t.dtype).removeprefix("torch.")
    try:
        return np.dtype(name)
    except TypeError:
        raise InferenceError(f"torch dtype {t.dtype} has no NumPy equivalent") from None


def array_facts(obj: Any) -> tuple[tuple[int, ...], np.dtype, str] | None:
    """(shape, dtype, order) of an array-like argument ("" order: not contiguous); None if the
    object is no array klaraptor knows."""
    mod = type(obj).__module__ or ""
    if mod.startswith("torch") and hasattr(obj, "is_contiguous"):
        order = "C" if obj.is_contiguous() else ""
        return tuple(int(s) for s in obj.shape), _torch_dtype(obj), order
    if isinstance(obj, np.ndarray) or (hasattr(obj, "shape") and hasattr(obj, "dtype")):
        shape = tuple(int(s) for s in obj.shape)
        dtype = np.dtype(obj.dtype)
        flags = getattr(obj, "flags", None)
        if flags is not None and hasattr(flags, "c_contiguous"):
            c, f = bool(flags.c_contiguous), bool(flags.f_contiguous)
        elif hasattr(obj, "is_c_contiguous"):  # Numba device arrays
            c, f = bool(obj.is_c_contiguous()), bool(obj.is_f_contiguous())
        else:
            c, f = _cai_order(obj)
        return shape, dtype, "C" if c else ("F" if f else "")
    if hasattr(obj, "__cuda_array_interface__"):
        cai = obj.__cuda_array_interface__
        c, f = _cai_order(obj)
        return (
            tuple(int(s) for s in cai["shape"]),
            np.dtype(cai["typestr"]),
            "C" if c else ("F" if f else ""),
        )
    return None


def _cai_order(obj: Any) -> tuple[bool, bool]:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return True, False
    strides = cai.get("strides")
    if strides is None:
        return True, len(cai["shape"]) <= 1
    shape = tuple(cai["shape"])
    item = np.dtype(cai["typestr"]).itemsize
    c_strides = tuple(
        int(np.prod(shape[i + 1 :], dtype=np.int64)) * item for i in range(len(shape))
    )
    f_strides = tuple(int(np.prod(shape[:i], dtype=np.int64)) * item for i in range(len(shape)))
    return tuple(strides) == c_strides, tuple(strides) == f_strides


def describe_args(
    args: Sequence[Any],
    D: Mapping[str, int],
    names: Sequence[str] | None = None,
    *,
    ints_are_pointers: bool = False,
) -> tuple[ArgInfo, ...]:
    """ArgInfo for every argument of a call whose data size is D (InferenceError if one cannot
    be reproduced). `ints_are_pointers`: a Python int that is no data value is a device address
    (cuda.core passes Python ints as pointers), which cannot be reproduced."""
    D = {k: int(v) for k, v in D.items()}
    out = []
    for i, a in enumerate(args):
        label = f"argument {i}" + (f" ({names[i]})" if names and i < len(names) else "")
        out.append(_describe(a, D, label, ints_are_pointers))
    return tuple(out)


def _describe(a: Any, D: dict[str, int], label: str, ints_are_pointers: bool) -> ArgInfo:
    hint = "; pass make_args=(D, rng) -> args to klaraptor.tune"
    if isinstance(a, (bool, np.bool_)):
        return ArgInfo("bool" if isinstance(a, bool) else "numpy", "bool", value=bool(a))
    if isinstance(a, np.generic):
        dtype = np.dtype(type(a))
        value: Extent | float | bool | None
        if dtype.kind in "iu":
            value = match_extent(int(a), D)
        else:
            value = a.item()
        return ArgInfo("numpy", dtype.name, value=value, origin=type(a).__name__)
    if isinstance(a, int):
        ext = match_extent(a, D)
        if ints_are_pointers and not ext.names:
            raise InferenceError(
                f"{label} is the Python int {a}, which cuda.core passes as a pointer and which is "
                "no data size; pass the array itself (klaraptor takes its pointer)" + hint
            )
        return ArgInfo("int", "int64", value=ext, origin="int")
    if isinstance(a, float):
        return ArgInfo("float", "float64", value=a, origin="float")
    facts = array_facts(a)
    if facts is None:
        raise InferenceError(
            f"{label} is a {type(a).__module__}.{type(a).__qualname__}, which klaraptor cannot "
            "make at other data sizes" + hint
        )
    shape, dtype, order = facts
    if not order:
        raise InferenceError(
            f"{label} is a non-contiguous array (shape {shape}); klaraptor makes contiguous "
            "arrays for measuring. Pass a contiguous one (.copy(), .contiguous())" + hint
        )
    return ArgInfo(
        "array",
        dtype.name if dtype.names is None else dtype.str,
        tuple(match_extent(s, D) for s in shape),
        order,
        origin=f"{type(a).__module__.split('.')[0]}.{type(a).__name__}",
    )


@dataclass(frozen=True)
class InferredArgs:
    """make_args(D, rng) from ArgInfo: same types and shapes as the first call, random values.

    `array_kind` is the kind of device array the measuring backend launches with ("cupy" or
    "numba"). Picklable, so collection workers can use it."""

    args: tuple[ArgInfo, ...]
    array_kind: str = "cupy"

    def __post_init__(self) -> None:
        if self.array_kind not in ARRAY_KINDS:
            raise SpecError(f"array_kind must be one of {ARRAY_KINDS}, got {self.array_kind!r}")

    def __call__(self, D: Mapping[str, int], rng: np.random.Generator) -> tuple[Any, ...]:
        to_device = _device_maker(self.array_kind)
        return tuple(_make(info, D, rng, to_device) for info in self.args)

    def host(self, D: Mapping[str, int], rng: np.random.Generator) -> tuple[Any, ...]:
        """The same arguments with NumPy arrays (no GPU needed)."""
        return tuple(_make(info, D, rng, lambda x: x) for info in self.args)

    def describe(self) -> list[str]:
        return [info.describe() for info in self.args]

    def nbytes(self, D: Mapping[str, int]) -> int:
        """Bytes of the array arguments at D, as the arrays made there would have, without
        making them (the collection worker's footprint count needs no random data)."""
        total = 0
        for info in self.args:
            if info.kind == "array" and info.shape:
                shape = tuple(int(e(D)) for e in info.shape)
                total += math.prod(shape) * np.dtype(info.dtype).itemsize
        return total


def _device_maker(kind: str) -> Any:
    if kind == "numba":
        from klaraptor.backends.numba_backend import numba_cuda

        return numba_cuda().to_device
    import cupy

    return cupy.asarray


def _make(info: ArgInfo, D: Mapping[str, int], rng: np.random.Generator, to_device: Any) -> Any:
    if info.kind == "array":
        shape = tuple(e(D) for e in info.shape)
        if any(s < 0 for s in shape):
            raise SpecError(f"inferred shape {shape} is negative at D={dict(D)}")
        host = random_array(shape, np.dtype(info.dtype), rng)
        if info.order == "F":
            host = np.asfortranarray(host)
        return to_device(host)
    v = info.value(D) if isinstance(info.value, Extent) else info.value
    if info.kind == "numpy":
        return np.dtype(info.dtype).type(v)
    if info.kind == "int":
        return int(v)  # type: ignore[arg-type]
    if info.kind == "float":
        return float(v)  # type: ignore[arg-type]
    return bool(v)


def random_array(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Random contents of one dtype: floats in [0, 1), integers in [0, 8), random booleans."""
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float64).astype(dtype)
    if dtype.kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 8, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return np.zeros(shape, dtype=dtype)
