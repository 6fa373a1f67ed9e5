"""Spec expressions: parse grid, shared-memory and constraint rules once, evaluate them with NumPy.

Expressions are Python-syntax strings over the data-parameter names and `bx, by, bz`; the
selector evaluates them over every candidate at once, and the generated Python / C helper programs
use the very same formulas (`program.Expr`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from klaraptor.core.errors import ProgramError, SpecError
from klaraptor.core.validate import block_limit_problem
from klaraptor.program import Expr, Program, parse_expr


def parse_expression(text: str, allowed: Sequence[str]) -> Expr:
    """Parse a spec expression into program.Expr (ProgramError on bad syntax / unknown names)."""
    return parse_expr(text, allowed)


def try_parse(
    text: str, allowed: Sequence[str], where: str, bad: Callable[[str, str], None]
) -> Expr | None:
    if not text.strip():
        bad(where, "is an empty expression")
        return None
    try:
        e = parse_expression(text, allowed)
    except ProgramError as exc:
        bad(where, f"{text!r}: {exc} (allowed names: {', '.join(allowed)})")
        return None
    unknown = sorted(set(e.variables()) - set(allowed))
    if unknown:
        bad(where, f"{text!r} uses unknown variables {unknown} (allowed: {', '.join(allowed)})")
        return None
    return e


def parse_constraint(
    c: Any, allowed: Sequence[str], where: str, bad: Callable[[str, str], None]
) -> tuple[str, Any] | None:
    """(label, Expr or callable) for one constraint, or None after reporting a problem."""
    if isinstance(c, str):
        e = try_parse(c, allowed, where, bad)
        return None if e is None else (repr(c), e)
    if callable(c):
        if not accepts_positional(c, 2):
            bad(where, f"callable {callable_name(c)} must accept (D, block) and return a bool")
            return None
        return (f"{callable_name(c)}(D, block)", c)
    bad(where, f"must be an expression string or a callable (D, block) -> bool, got {c!r}")
    return None


def parse_constraints(
    constraints: Sequence[Any], allowed: Sequence[str], owner: str
) -> tuple[tuple[str, Any], ...]:
    """Parse constraints, raising one SpecError (naming `owner`) that lists every problem."""
    problems: list[str] = []
    out = []
    for i, c in enumerate(constraints):
        item = parse_constraint(
            c, allowed, f"constraints[{i}]", lambda f, m: problems.append(f"{f}: {m}")
        )
        if item is not None:
            out.append(item)
    if problems:
        raise SpecError(f"{owner}:\n  - " + "\n  - ".join(problems))
    return tuple(out)


@functools.lru_cache(maxsize=512)
def _program_for(items: tuple[tuple[str, Expr], ...], inputs: tuple[str, ...]) -> Program:
    return Program("spec_exprs", inputs, items, tuple(n for n, _ in items))


def evaluate_exprs(exprs: Mapping[str, Expr], env: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Evaluate named program.Expr over an environment of scalars / arrays (vectorised, IEEE).

    The expressions run as one `program.Program` (cached per expression set), so the values are
    exactly those of the generated Python and C code.
    """
    used: set[str] = set()
    for e in exprs.values():
        used |= set(e.variables())
    missing = sorted(used - set(env))
    if missing:
        raise SpecError(f"cannot evaluate: no value for {missing}")
    inputs = tuple(sorted(used))
    # Output names must not collide with an input name (a data parameter may be called "o0").
    internal: dict[str, str] = {}
    for i, k in enumerate(exprs):
        name = f"o{i}"
        while name in used:
            name += "_"
        internal[k] = name
    prog = _program_for(tuple((internal[k], e) for k, e in exprs.items()), inputs)
    try:
        result = prog.evaluate({n: env[n] for n in inputs})
    except ProgramError as exc:
        raise SpecError(f"cannot evaluate spec expressions: {exc}") from exc
    return {k: result[internal[k]] for k in exprs}


def constraint_masks(
    items: Sequence[tuple[str, Any]], env: Mapping[str, Any]
) -> list[tuple[str, np.ndarray]]:
    """Satisfied-masks of parsed constraints over an environment (data names, bx, by, bz).

    An expression holds when its value is non-zero (NaN counts as true, as everywhere in
    klaraptor.program). Callables run once per block (they are scalar code).
    """
    shape = env_shape(env)
    exprs = {f"c{i}": e for i, (_, e) in enumerate(items) if not callable(e)}
    values = evaluate_exprs(exprs, env) if exprs else {}
    out: list[tuple[str, np.ndarray]] = []
    for i, (label, e) in enumerate(items):
        if callable(e):
            out.append((label, _callable_mask(label, e, env, shape)))
        else:
            # Truth as in klaraptor.program (x != 0, so NaN is true): the generated code agrees.
            v = np.broadcast_to(np.asarray(values[f"c{i}"], dtype=np.float64), shape)
            out.append((label, np.not_equal(v, 0.0)))
    return out


def _callable_mask(
    label: str, fn: Callable[..., Any], env: Mapping[str, Any], shape: tuple[int, ...]
) -> np.ndarray:
    arrays = {k: np.broadcast_to(np.asarray(v), shape) for k, v in env.items()}
    mask = np.zeros(shape, dtype=bool)
    for idx in np.ndindex(*shape):
        vals = {k: a[idx].item() for k, a in arrays.items()}
        block = (int(vals.pop("bx")), int(vals.pop("by")), int(vals.pop("bz")))
        D = {k: int(v) for k, v in vals.items()}
        try:
            mask[idx] = bool(fn(D, block))
        except Exception as exc:
            raise SpecError(
                f"constraint {label} raised {type(exc).__name__}: {exc} (D={D}, block={block})"
            ) from exc
    return mask


# ---------------------------------------------------------------------------------------------
# Small utilities


def env_shape(env: Mapping[str, Any]) -> tuple[int, ...]:
    """The broadcast shape of an evaluation environment's values."""
    try:
        return np.broadcast_shapes(*(np.shape(v) for v in env.values()))
    except ValueError as exc:
        raise SpecError(f"data and block arrays do not broadcast together: {exc}") from None


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def block_problem(block: Any, dim: int) -> str:
    """Why `block` is not a valid block of dimensionality `dim` ('' when it is)."""
    if not isinstance(block, tuple) or len(block) != 3 or not all(is_int(b) for b in block):
        return f"must be three integers (bx, by, bz), got {block!r}"
    if any(b < 1 for b in block):
        return f"dimensions must be >= 1, got {block!r}"
    unused = block[dim:]
    if any(b != 1 for b in unused):
        return f"{block!r} uses dimensions beyond dim={dim} (they must be 1)"
    return block_limit_problem(block)


def callable_name(fn: Any) -> str:
    mod = getattr(fn, "__module__", None) or "?"
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{mod}.{qual}"


def constraint_text(c: Any) -> str:
    return c if isinstance(c, str) else f"<callable {callable_name(c)}>"


def accepts_positional(fn: Callable[..., Any], n: int) -> bool:
    """Whether fn can be called with n positional arguments (True when it cannot be inspected)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # builtins / C callables without a signature: give them the benefit
    try:
        sig.bind(*([None] * n))
    except TypeError:
        return False
    return True
