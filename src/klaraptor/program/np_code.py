"""The NumPy side of `Program.specialize`'s generated code: the vectorised operation templates
and the namespace the generated function runs in (NumPy's ufuncs under short names, and a fast
way to ignore floating-point errors for the function's body)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from klaraptor.program.evaluate import np_table

# Vectorised templates for `specialize`; comparisons and logic yield bool arrays ({B} operands
# are truth values), converted to 1.0/0.0 only where a float is needed.
NP_OPS = {
    "add": "_np_add({a}, {b})",
    "sub": "_np_subtract({a}, {b})",
    "mul": "_np_multiply({a}, {b})",
    "div": "_np_divide({a}, {b})",
    "floordiv": "_np_floor(_np_divide({a}, {b}))",
    "mod": "_np_subtract({a}, _np_multiply({b}, _np_floor(_np_divide({a}, {b}))))",
    "lt": "_np_less({a}, {b})",
    "le": "_np_less_equal({a}, {b})",
    "gt": "_np_greater({a}, {b})",
    "ge": "_np_greater_equal({a}, {b})",
    "eq": "_np_equal({a}, {b})",
    "ne": "_np_not_equal({a}, {b})",
    "and": "_np_logical_and({ba}, {bb})",
    "or": "_np_logical_or({ba}, {bb})",
    "not": "_np_logical_not({ba})",
    "neg": "_np_negative({a})",
    "floor": "_np_floor({a})",
    "ceil": "_np_ceil({a})",
    "min": "_np_where(_np_less_equal({a}, {b}), {a}, {b})",
    "max": "_np_where(_np_greater_equal({a}, {b}), {a}, {b})",
    "where": "_np_where({ba}, {b}, {c})",
    "table": "_np_table({a}, {T})",
}


def _errstate_fast() -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """(enter, exit) of ``np.errstate(all="ignore")`` for the specialised code's hot path.

    NumPy keeps the error state in a context variable; setting it to a prebuilt state is several
    times cheaper than entering an errstate object. Falls back to np.errstate where NumPy's
    internals differ."""
    try:
        from numpy._core._multiarray_umath import _make_extobj
        from numpy._core._ufunc_config import _extobj_contextvar  # type: ignore[attr-defined]

        ignore = _make_extobj(all="ignore")
        cv_set, cv_reset = _extobj_contextvar.set, _extobj_contextvar.reset
        with np.errstate(all="ignore"):
            expect = _extobj_contextvar.get()
        token = cv_set(ignore)
        try:
            ok = np.geterr() == {k: "ignore" for k in np.geterr()}
        finally:
            cv_reset(token)
        if ok and type(expect) is type(ignore):
            return (lambda: cv_set(ignore)), cv_reset
    except (ImportError, AttributeError, TypeError, ValueError, LookupError):
        pass

    def enter() -> Any:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    return enter, (lambda state: state.__exit__(None, None, None))


_errors_ignore, _errors_restore = _errstate_fast()
_INF = float("inf")


def _span(*corners: float) -> tuple[float, float]:
    """The smallest and largest of the corners of an operation on bounds; (-inf, inf) unless
    every corner is finite, so a nan corner (0 * inf) or an infinite one decides nothing."""
    for c in corners:
        if not -_INF < c < _INF:
            return -_INF, _INF
    return min(corners), max(corners)


NP_NS: dict[str, Any] = {
    "_np_add": np.add,
    "_np_subtract": np.subtract,
    "_np_multiply": np.multiply,
    "_np_divide": np.true_divide,
    "_np_floor": np.floor,
    "_np_ceil": np.ceil,
    "_np_negative": np.negative,
    "_np_less": np.less,
    "_np_less_equal": np.less_equal,
    "_np_greater": np.greater,
    "_np_greater_equal": np.greater_equal,
    "_np_equal": np.equal,
    "_np_not_equal": np.not_equal,
    "_np_logical_and": np.logical_and,
    "_np_logical_or": np.logical_or,
    "_np_logical_not": np.logical_not,
    "_np_where": np.where,
    "_np_table": np_table,
    "_np_full": np.full,
    "_np_array": np.array,
    "_np_broadcast_to": np.broadcast_to,
    "_np_errstate": np.errstate,
    "_np_fmin": np.fmin,
    "_np_fmax": np.fmax,
    "_np_minimum": np.minimum,
    "_np_maximum": np.maximum,
    "_np_errors_ignore": _errors_ignore,
    "_np_errors_restore": _errors_restore,
    "_kp_span": _span,
}
