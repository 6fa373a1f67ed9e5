"""One validation layer for what a user hands klaraptor: the public API's arguments and the
command line's option values.

Every entry point (`build`, `plan`, `load`, `Kernel.select`/`launcher`, `tune`, the CLI) checks
its arguments here before any work, so a wrong type or value is refused where it enters, with a
message naming the argument, what it must be and what was given, instead of failing deep inside
(a `TypeError` from a comparison, a string iterated letter by letter, a `bool` taken as 1).

The rules, once each:
- numbers: a `bool` is never a number; a string is never a number (the API takes numbers; the
  CLI's `arg_*` types parse text); budgets, timeouts and counts are finite and in range;
- sequences of things (training sizes, constraints, outputs): a list or tuple, never a string
  (iterating 'big' gives 'b', 'i', 'g'), a mapping or a single number;
- names: non-empty strings; store names are dotted identifiers, refused rather than rewritten;
- blocks: three positive integers within CUDA's limits (1024 threads per block, 1024 × 1024 × 64)
  or the device's, where one is known;
- stores: a `Store` or a path to one;
- output paths: not empty, not a directory, in an existing directory, checked before long work.

The `arg_*` functions are argparse `type=` callables: a bad value is a usage error (exit 2, with
the usage line), as README "Exit codes" documents.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import BuildError, DataSizeError, KlaraptorError, SpecError

# CUDA's limits on a thread block (every compute capability since 2.0).
CUDA_MAX_THREADS_PER_BLOCK = 1024
CUDA_MAX_BLOCK_DIM = (1024, 1024, 64)
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def shown(value: Any) -> str:
    """A value as an error message shows it: its type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def is_integer(value: Any) -> bool:
    """An int (Python or NumPy), never a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: Any) -> bool:
    """An int or a float (Python or NumPy), never a bool or a string."""
    return is_integer(value) or isinstance(value, (float, np.floating))


# -- numbers --------------------------------------------------------------------------------------


def check_int(
    value: Any,
    what: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[KlaraptorError] = KlaraptorError,
) -> int:
    """`value` as an int inside [minimum, maximum]; `error` naming `what` otherwise."""
    if not is_integer(value):
        raise error(f"{what} must be an integer, got {shown(value)}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise error(f"{what} must be at least {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise error(f"{what} must be at most {maximum}, got {v}")
    return v


def check_number(
    value: Any,
    what: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    error: type[KlaraptorError] = KlaraptorError,
) -> float:
    """`value` as a finite float, >= `minimum` / > `above`; `error` naming `what` otherwise."""
    if not is_number(value):
        raise error(f"{what} must be a number, got {shown(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise error(f"{what} must be a finite number, got {v!r}")
    if minimum is not None and v < minimum:
        raise error(f"{what} must be at least {minimum:g}, got {v:g}")
    if above is not None and not v > above:
        raise error(f"{what} must be greater than {above:g}, got {v:g}")
    return v


def check_budget(value: Any, what: str = "budget") -> float | None:
    """A measurement budget: None (measure every candidate at every size) or a finite number
    >= 1 (a multiple of tune-once's cost)."""
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(float(value)) or float(value) < 1.0:
        raise BuildError(
            f"{what} must be a number >= 1 (a multiple of tune-once's measurement cost) or None "
            f"(every candidate at every size), got {shown(value)}"
        )
    return float(value)


# -- names ----------------------------------------------------------------------------------------


def check_text(value: Any, what: str, error: type[KlaraptorError] = KlaraptorError) -> str:
    """A non-empty string."""
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {shown(value)}")
    if not value.strip():
        raise error(f"{what} is empty")
    return value


def check_kernel_name(value: Any, what: str = "the kernel name") -> str:
    """The name of a kernel in the store (e.g. 'polybench.gemm.gemm')."""
    if not isinstance(value, str):
        raise KlaraptorError(
            f"{what} must be a string such as 'polybench.gemm.gemm', got {shown(value)}"
        )
    if not value.strip():
        raise KlaraptorError(f"{what} is empty; give one such as 'polybench.gemm.gemm'")
    return value


def check_store_name(value: Any, what: str = "name") -> str:
    """A store name: a dotted identifier ('my.kernels.scale'); refused, never rewritten."""
    check_text(value, what, SpecError)
    if not _DOTTED.match(value):
        raise SpecError(
            f"{what} {value!r} is not a dotted identifier (letters, digits and _ in parts "
            "joined by '.', e.g. 'my.scale'); klaraptor keeps builds under it"
        )
    return value


# -- collections ----------------------------------------------------------------------------------


def check_list(
    value: Any, what: str, example: str, error: type[KlaraptorError] = KlaraptorError
) -> list[Any]:
    """A list or tuple (or another non-text sequence) as a list; a string, bytes, a mapping, a
    number or anything not iterable is refused (`example` shows the expected form)."""
    if isinstance(value, (str, bytes)):
        raise error(
            f"{what} must be a list such as {example}, got the {type(value).__name__} "
            f"{value!r} (a string is not a list of them)"
        )
    if isinstance(value, Mapping):
        raise error(f"{what} must be a list such as {example}, got a mapping {shown(value)}")
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise error(f"{what} must be a list such as {example}, got {shown(value)}")
        return list(value)
    if isinstance(value, (Sequence, set, frozenset)) or hasattr(value, "__next__"):
        return list(value)
    raise error(f"{what} must be a list such as {example}, got {shown(value)}")


def check_sizes(value: Any, what: str = "sizes") -> list[Any] | None:
    """Training sizes: None, or a list of sizes (each checked later by the spec's schema)."""
    if value is None:
        return None
    return check_list(value, what, "[256, 512, 1024] or [{'M': 256, 'N': 512}, ...]", DataSizeError)


# -- blocks ---------------------------------------------------------------------------------------


def block_limit_problem(block: Sequence[int], max_threads: int | None = None) -> str:
    """Why a block of three positive ints exceeds CUDA's limits, or the device's `max_threads`
    per block when known ('' when it fits)."""
    limit = CUDA_MAX_THREADS_PER_BLOCK if max_threads is None else int(max_threads)
    threads = int(block[0]) * int(block[1]) * int(block[2])
    if threads > limit:
        where = "CUDA allows" if max_threads is None else "this GPU allows"
        return f"{tuple(block)!r} has {threads} threads; {where} at most {limit} per block"
    for axis, (b, most) in enumerate(zip(block, CUDA_MAX_BLOCK_DIM)):
        if b > most:
            return f"{tuple(block)!r}: block dimension {'xyz'[axis]} is {b}; CUDA allows {most}"
    return ""


def check_block(
    block: Any, what: str, *, dim: int = 3, max_threads: int | None = None
) -> tuple[int, int, int]:
    """A block (bx, by, bz) of positive ints within the limits, unused dimensions 1."""
    if isinstance(block, list):
        block = tuple(block)
    if not (isinstance(block, tuple) and len(block) == 3 and all(is_integer(b) for b in block)):
        raise SpecError(f"{what} must be three integers (bx, by, bz), got {shown(block)}")
    if any(b < 1 for b in block):
        raise SpecError(f"{what}: dimensions must be >= 1, got {block!r}")
    if any(b != 1 for b in block[dim:]):
        raise SpecError(f"{what}: {block!r} uses dimensions beyond dim={dim} (they must be 1)")
    problem = block_limit_problem(block, max_threads)
    if problem:
        raise SpecError(f"{what}: {problem}")
    return (int(block[0]), int(block[1]), int(block[2]))


def check_bool(value: Any, what: str) -> bool:
    """A bool (True/False, or NumPy's); 'yes', 1 and None are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise KlaraptorError(f"{what} must be True or False, got {shown(value)}")
    return bool(value)


def check_instance(value: Any, kind: type, what: str, example: str) -> Any:
    """None or an instance of `kind` (`example` shows how to make one)."""
    if value is not None and not isinstance(value, kind):
        raise KlaraptorError(f"{what} must be a {kind.__name__} ({example}), got {shown(value)}")
    return value


# -- output files ---------------------------------------------------------------------------------


def check_output_file(path: Any, what: str) -> Path:
    """A file to write: not empty, not a directory, in a directory that exists (none is made)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    text = check_text(path, what)
    out = Path(text).expanduser()
    if out.is_dir():
        raise KlaraptorError(f"{what} {text}: is a directory; name a file in it")
    parent = out.parent
    if not parent.is_dir():
        raise KlaraptorError(
            f"{what} {text}: the directory {parent} does not exist; create it first"
        )
    if not os.access(parent, os.W_OK):
        raise KlaraptorError(f"{what} {text}: the directory {parent} is not writable")
    return out


def plot_formats() -> tuple[str, ...]:
    """The file formats matplotlib can write (its canvas's list), or the common ones when
    matplotlib is missing (the plot then fails with its own message)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return ("png", "pdf", "svg")
    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def check_plot_file(path: Any, what: str) -> Path:
    """An image to write: an output file whose suffix is a format matplotlib writes."""
    out = check_output_file(path, what)
    fmt = out.suffix.lstrip(".").lower()
    formats = plot_formats()
    if not fmt:  # also '.png', a hidden file with no suffix
        raise KlaraptorError(
            f"{what} {out}: give a file name with an image suffix ({', '.join(formats)})"
        )
    if fmt not in formats:
        raise KlaraptorError(
            f"{what} {out}: format {fmt!r} is not one matplotlib writes ({', '.join(formats)})"
        )
    return out


# -- argparse types (a bad value: usage error, exit 2) ----------------------------------------


def _argtype(check: Any, name: str) -> Any:
    def parse(text: str) -> Any:
        try:
            return check(text)
        except (KlaraptorError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("the value ")) from None

    parse.__name__ = name  # argparse names the type in "invalid <name> value"
    return parse


def _positive_int(text: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        raise KlaraptorError(f"{text!r} is not an integer") from None
    return check_int(v, "the value", minimum=1)


def _positive_float(text: str) -> float:
    try:
        v = float(text.strip())
    except ValueError:
        raise KlaraptorError(f"{text!r} is not a number") from None
    return check_number(v, "the value", above=0.0)


def _budget(text: str) -> float | None:
    if text.strip().lower() in ("none", "full", "inf"):
        return None
    try:
        v = float(text.strip())
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v >= 1.0):
        raise KlaraptorError(
            f"must be a number >= 1 (a multiple of tune-once's measurement cost) or 'none', "
            f"got {text!r}"
        )
    return v


def _nonempty(text: str) -> str:
    return check_text(text, "the value")


arg_positive_int = _argtype(_positive_int, "positive integer")
arg_positive_float = _argtype(_positive_float, "positive number")
arg_budget = _argtype(_budget, "budget")
arg_nonempty = _argtype(_nonempty, "non-empty")
arg_output_file = _argtype(lambda t: check_output_file(t, "the value"), "output file")
arg_plot_file = _argtype(lambda t: check_plot_file(t, "the value"), "plot file")


__all__ = [
    "CUDA_MAX_BLOCK_DIM",
    "CUDA_MAX_THREADS_PER_BLOCK",
    "arg_budget",
    "arg_nonempty",
    "arg_output_file",
    "arg_plot_file",
    "arg_positive_float",
    "arg_positive_int",
    "block_limit_problem",
    "check_block",
    "check_budget",
    "check_int",
    "check_kernel_name",
    "check_list",
    "check_number",
    "check_output_file",
    "check_plot_file",
    "check_sizes",
    "check_store_name",
    "check_text",
    "is_integer",
    "is_number",
]
