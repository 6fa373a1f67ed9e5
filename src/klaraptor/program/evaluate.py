"""Vectorised NumPy evaluation of a program (the reference semantics), by a tree walk."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from klaraptor.core.errors import ProgramError
from klaraptor.program.expr import Expr
from klaraptor.program.lower import ProgramLike


# NumPy semantics of each operation, shared with `specialize`'s constant folding.
def _np_floordiv(a: Any, b: Any) -> Any:
    return np.floor(np.true_divide(a, b))


def _np_mod(a: Any, b: Any) -> Any:
    return np.subtract(a, np.multiply(b, np.floor(np.true_divide(a, b))))


def np_bool(x: Any) -> Any:
    return np.not_equal(x, 0.0)


def np_table(index: Any, values: np.ndarray) -> np.ndarray:
    idx = np.asarray(index, dtype=np.float64)
    ok = (idx >= 0.0) & (idx < values.shape[0]) & (np.floor(idx) == idx)
    picked = values[np.where(ok, idx, 0.0).astype(np.intp)]
    return np.where(ok, picked, np.nan)


def _as_float(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: np.asarray(fn(a, b), dtype=np.float64)


NP_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "floordiv": _np_floordiv,
    "mod": _np_mod,
    "lt": _as_float(np.less),
    "le": _as_float(np.less_equal),
    "gt": _as_float(np.greater),
    "ge": _as_float(np.greater_equal),
    "eq": _as_float(np.equal),
    "ne": _as_float(np.not_equal),
    "and": _as_float(lambda a, b: np.logical_and(np_bool(a), np_bool(b))),
    "or": _as_float(lambda a, b: np.logical_or(np_bool(a), np_bool(b))),
    "min": lambda a, b: np.where(np.less_equal(a, b), a, b),
    "max": lambda a, b: np.where(np.greater_equal(a, b), a, b),
}
NP_UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative,
    "not": lambda a: np.asarray(np.equal(a, 0.0), dtype=np.float64),
    "floor": np.floor,
    "ceil": np.ceil,
}


def evaluate_program(
    prog: ProgramLike, given: Mapping[str, Any], intermediates: bool
) -> dict[str, np.ndarray]:
    """`Program.evaluate` of a bound program: the outputs (and, with ``intermediates``, every
    assigned name) as float64 arrays of the inputs' broadcast shape."""
    arrays = coerce_inputs(prog, given)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    except ValueError as exc:
        raise ProgramError(
            f"program {prog.name!r}: inputs do not broadcast together: {exc}"
        ) from None
    with np.errstate(all="ignore"):
        scope = _eval_program(prog, arrays, prog._registry)
    names = list(prog.outputs)
    if intermediates:
        names += [n for n, _ in prog.assignments if n not in prog.outputs]
    return {n: np.array(np.broadcast_to(scope[n], shape), dtype=np.float64) for n in names}


def coerce_inputs(
    prog: ProgramLike, given: Mapping[str, Any], partial: bool = False
) -> dict[str, np.ndarray]:
    """The given inputs as float64 arrays; unknown names, and unless ``partial`` missing ones,
    are errors."""
    unknown = sorted(set(given) - set(prog.inputs))
    if unknown:
        raise ProgramError(
            f"program {prog.name!r} has no inputs {unknown} (inputs: {list(prog.inputs)})"
        )
    if not partial:
        missing = [n for n in prog.inputs if n not in given]
        if missing:
            raise ProgramError(f"program {prog.name!r}: missing inputs {missing}")
    out: dict[str, np.ndarray] = {}
    for n in prog.inputs:
        if n in given:
            try:
                out[n] = np.asarray(given[n], dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ProgramError(
                    f"program {prog.name!r}: input {n!r} is not numeric: {exc}"
                ) from None
    return out


def _eval_program(
    prog: ProgramLike, values: Mapping[str, Any], registry: Mapping[str, ProgramLike]
) -> dict[str, Any]:
    scope: dict[str, Any] = dict(values)
    memo: dict[int, Any] = {}
    for target, expr in prog.assignments:
        scope[target] = _eval_expr(expr, scope, memo, registry)
    return scope


def _eval_expr(
    e: Expr, scope: dict[str, Any], memo: dict[int, Any], registry: Mapping[str, ProgramLike]
) -> Any:
    hit = memo.get(id(e))
    if hit is not None:
        return hit
    op = e.op
    if op == "const":
        v: Any = np.float64(e.data)
    elif op == "var":
        v = scope[e.data]
    elif op in ("min", "max"):
        fn = NP_BINARY[op]
        v = _eval_expr(e.args[0], scope, memo, registry)
        for a in e.args[1:]:
            v = fn(v, _eval_expr(a, scope, memo, registry))
    elif op in NP_BINARY:
        v = NP_BINARY[op](
            _eval_expr(e.args[0], scope, memo, registry),
            _eval_expr(e.args[1], scope, memo, registry),
        )
    elif op in NP_UNARY:
        v = NP_UNARY[op](_eval_expr(e.args[0], scope, memo, registry))
    elif op == "where":
        c, a, b = (_eval_expr(x, scope, memo, registry) for x in e.args)
        v = np.where(np_bool(c), a, b)
    elif op == "table":
        v = np_table(_eval_expr(e.args[0], scope, memo, registry), np.asarray(e.data))
    else:  # call
        name, argnames, output = e.data
        callee = registry[name]
        if argnames is None:
            args = {i: scope[i] for i in callee.inputs}
        else:
            args = {k: _eval_expr(a, scope, memo, registry) for k, a in zip(argnames, e.args)}
        v = _eval_program(callee, args, registry)[output or callee.outputs[0]]
    memo[id(e)] = v
    return v
