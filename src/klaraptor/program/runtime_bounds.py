"""Run-time bounds in `Program.specialize`'s generated code: a comparison of arrays decided for
every element at once, without an array operation, where cheap scalar bounds of its operands
settle it (a grid of ceil(N / (bx * ITEMS)) is >= 1 and <= the grid limit for every
configuration at most D; a positive prediction is > 0), and the and/or/where after it that then
test for the whole all-true or all-false array by identity.

A fixed or scalar value's bounds are exact. An array's are the same IEEE operations applied to
its operands' bounds: rounding is monotone, so for add, sub, neg, floor, ceil, mul and a division
by a divisor of one sign the corners bound every element; where both bounds are finite every
element is finite and between them (an infinite or nan corner makes them infinite), so any
doubt leaves the comparison to NumPy. The results are the same bits either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from klaraptor.program.emit_py import py_float

# What an instruction is once the fixed inputs are known: fixed (a value now), a scalar or an
# array computed per call, or a choice: one of two fixed arrays, picked per call by the truth of
# a scalar (e.g. a model's hot or cold coefficients, by whether D's footprint exceeds the L2).
_FIXED, _SCALAR, _ARRAY, _CHOICE = 0, 1, 2, 3
# Comparisons that run-time bounds may decide, and the operations bounds are carried through.
_DECIDABLE = frozenset(("lt", "le", "gt", "ge"))
_BOUNDED = frozenset(("add", "sub", "mul", "div", "neg", "floor", "ceil"))


def _exact_bounds(value: Any) -> tuple[str, str]:
    """The smallest and largest element of a fixed value as Python expressions (nan, nan where
    it has a nan: every comparison with them is false, so they decide nothing)."""
    v = np.asarray(value, dtype=np.float64)
    if np.any(np.isnan(v)):
        return "_kp_nan", "_kp_nan"
    return py_float(float(v.min())), py_float(float(v.max()))


class RuntimeBounds:
    """The bounds part of the specialiser's writer (`specialize._Writer`)."""

    spec: Any  # the `_Specializer`
    bound_names: dict[int, tuple[str, str] | None]
    pre: list[tuple[str, str, int | None]]
    may_be_whole: set[int]

    def fx(self, t: int, vector: bool = False) -> str:
        raise NotImplementedError

    def bx(self, t: int) -> str:
        raise NotImplementedError

    def array_operand(self, o: int) -> str:
        raise NotImplementedError

    def whole(self, shape: tuple[int, ...], truth: bool) -> str:
        """The shared read-only bool array of `shape` that is all `truth`."""
        arr = np.full(shape, truth)
        arr.flags.writeable = False
        return self.spec.const_name(arr, ("whole", truth, shape))

    def bounds(self, t: int, depth: int = 32) -> tuple[str, str] | None:
        """Python expressions of a lower and an upper bound of every element of ``t`` at run
        time, or None where no rule applies. A fixed or scalar value's bounds are exact (nan
        where it has a nan). An array's are computed by the same IEEE operations on its
        operands' bounds (rounding is monotone, so the corners bound every element), and where
        both are finite every element is finite and between them: an infinite or nan corner
        makes them infinite (`_kp_span`), so any doubt leaves the comparison to NumPy."""
        spec = self.spec
        kind = spec.kind[t]
        if kind == _FIXED:
            return _exact_bounds(spec.value[t])
        if kind == _SCALAR:
            return self.fx(t), self.fx(t)
        if t in self.bound_names:
            return self.bound_names[t]
        out: tuple[str, str] | None = None
        lo, hi = f"_kp_lo{t}", f"_kp_hi{t}"
        if kind == _CHOICE:
            pick, alts = spec.choice[t]
            (alo, ahi), (blo, bhi) = (_exact_bounds(v) for v in alts)
            s = f"{self.fx(pick)} != 0.0"
            self.pre.append((f"{lo}, {hi}", f"({alo}, {ahi}) if {s} else ({blo}, {bhi})", None))
            out = (lo, hi)
        elif depth > 0 and spec.low.ops[t] in _BOUNDED:
            op, ops = spec.low.ops[t], spec.opnds[t]
            obs = [self.bounds(o, depth - 1) for o in ops]
            if all(b is not None for b in obs) and (op != "div" or self.fixed_sign(ops[1])):
                a = obs[0]
                b = obs[-1]
                assert a is not None and b is not None
                if op == "add":
                    rhs = f"{a[0]} + {b[0]}, {a[1]} + {b[1]}"
                elif op == "sub":
                    rhs = f"{a[0]} - {b[1]}, {a[1]} - {b[0]}"
                elif op == "neg":
                    rhs = f"-({a[1]}), -({a[0]})"
                elif op in ("floor", "ceil"):
                    rhs = f"_kp_{op}({a[0]}), _kp_{op}({a[1]})"
                else:
                    # A fixed divisor's bounds are nonzero numbers (`fixed_sign`): plain `/`.
                    plain = op == "mul" or spec.kind[ops[1]] == _FIXED
                    f = "{} * {}" if op == "mul" else ("{} / {}" if plain else "_kp_div({}, {})")
                    # Each corner once (a scalar's bounds are one value).
                    corners = list(dict.fromkeys(f.format(x, y) for x in a for y in b))
                    if len(corners) == 2:
                        # Both corners kept, in order: a nan or infinite one stays a bound, so
                        # it still decides nothing (no min/max that could drop a nan).
                        self.pre.append((f"{lo}, {hi}", f"{corners[0]}, {corners[1]}", None))
                        rhs = f"({lo}, {hi}) if {lo} <= {hi} else ({hi}, {lo})"
                    else:
                        rhs = f"_kp_span({', '.join(corners)})"
                self.pre.append((f"{lo}, {hi}", rhs, None))
                out = (lo, hi)
        self.bound_names[t] = out
        return out

    def fixed_sign(self, o: int) -> bool:
        """A divisor whose bounds bound the quotient: one value (a scalar), or fixed elements
        that all have one sign, none zero or nan."""
        spec = self.spec
        if spec.kind[o] == _SCALAR:
            return True
        if spec.kind[o] != _FIXED:
            return False
        v = np.asarray(spec.value[o])
        return bool(np.all(v > 0.0) or np.all(v < 0.0))

    def decided_comparison(self, t: int, expr: str) -> str:
        """``a < b`` (<=, >, >=) as the whole all-true or all-false array where the operands'
        run-time bounds decide it for every element, else the array operation ``expr``."""
        spec = self.spec
        op, (a, b) = spec.low.ops[t], spec.opnds[t]
        pre, known = len(self.pre), set(self.bound_names)
        ba, bb = self.bounds(a), self.bounds(b)
        if ba is None or bb is None:
            # Undecidable: drop the bounds just written for it (nothing else reads them).
            del self.pre[pre:]
            for o in set(self.bound_names) - known:
                del self.bound_names[o]
            return expr
        finite = [
            f"-_kp_inf < {lo} and {hi} < _kp_inf"
            for o, (lo, hi) in ((a, ba), (b, bb))
            if spec.kind[o] == _ARRAY
        ]
        (alo, ahi), (blo, bhi) = ba, bb
        true, false = {
            "lt": (f"{ahi} < {blo}", f"{alo} >= {bhi}"),
            "le": (f"{ahi} <= {blo}", f"{alo} > {bhi}"),
            "gt": (f"{alo} > {bhi}", f"{ahi} <= {blo}"),
            "ge": (f"{alo} >= {bhi}", f"{ahi} < {blo}"),
        }[op]
        shape = spec.shape_of(t)
        self.may_be_whole.add(t)
        fin = "".join(f + " and " for f in finite)
        return (
            f"({self.whole(shape, True)} if {fin}{true} else "
            f"({self.whole(shape, False)} if {fin}{false} else {expr}))"
        )

    def whole_tests(self, t: int, expr: str) -> str:
        """``x and y``, ``x or y`` and ``where(x, a, b)`` where x may be a whole all-true or
        all-false array at run time: that case by identity, without an array operation."""
        spec = self.spec
        op, ops = spec.low.ops[t], spec.opnds[t]
        shape = spec.shape_of(t)
        tests: list[str] = []
        if op == "where":
            c, a, b = ops
            if c in self.may_be_whole:
                cs = self.bx(c)
                if spec.shape_of(a) == shape:
                    tests.append(f"{self.array_operand(a)} if {cs} is {self.whole(shape, True)}")
                if spec.shape_of(b) == shape:
                    tests.append(f"{self.array_operand(b)} if {cs} is {self.whole(shape, False)}")
        else:
            for x, y in ((ops[0], ops[1]), (ops[1], ops[0])):
                if x not in self.may_be_whole or spec.shape_of(y) != shape:
                    continue
                xs, ys = self.bx(x), self.bx(y)
                t_all, f_all = self.whole(shape, True), self.whole(shape, False)
                if op == "and":
                    tests += [f"{ys} if {xs} is {t_all}", f"{f_all} if {xs} is {f_all}"]
                else:
                    tests += [f"{t_all} if {xs} is {t_all}", f"{ys} if {xs} is {f_all}"]
                self.may_be_whole.add(t)
        if not tests:
            return expr
        return "(" + " else ".join(tests) + f" else {expr})"
