"""Expressions: the immutable `Expr` tree, its constructors, JSON encoding and printing."""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from klaraptor.core.errors import ProgramError

_BINARY = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "div": "/",
    "floordiv": "//",
    "mod": "%",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
    "and": "and",
    "or": "or",
}
_UNARY = ("neg", "not", "floor", "ceil")
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGICAL = ("and", "or", "not")
# Printing precedence (higher binds tighter); mirrors Python's.
_PREC = {
    "or": 1,
    "and": 2,
    "not": 3,
    **dict.fromkeys(COMPARISONS, 4),
    "add": 5,
    "sub": 5,
    "mul": 6,
    "div": 6,
    "floordiv": 6,
    "mod": 6,
    "neg": 7,
}
_ATOM = 9
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_POWER = 64

ExprLike = Any  # Expr or a real number; kept loose because NumPy scalars qualify too


def check_var_name(name: object, what: str) -> str:
    if (
        not isinstance(name, str)
        or not NAME_RE.match(name)
        or keyword.iskeyword(name)
        or name.startswith("_kp_")
    ):
        raise ProgramError(
            f"{what} {name!r} is not a valid variable name (an ASCII identifier, "
            "not a Python keyword, not starting with '_kp_')"
        )
    return name


def float_key(v: float) -> str:
    # float.hex tells 0.0 from -0.0 (which compare and hash equal) and maps every nan to 'nan'.
    return float.hex(v)


class Expr:
    """An immutable expression node. Build nodes with the module helpers, not this constructor.

    ``==`` is *structural* equality (so expressions can be compared and hashed); build an
    equality comparison with `Expr.eq` / `Expr.ne`. ``<, <=, >, >=`` build comparisons,
    ``&, |, ~`` logical and/or/not, ``**`` a small non-negative integer power (a product).
    """

    __slots__ = ("op", "args", "data", "_key", "_hash")
    # Make NumPy defer to our reflected operators (np.float64(2) * expr).
    __array_ufunc__ = None

    def __init__(self, op: str, args: tuple[Expr, ...] = (), data: Any = None) -> None:
        self.op = op
        self.args = args
        self.data = data
        self._key: tuple | None = None
        self._hash: int | None = None

    # -- structure ---------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        """A hashable structural key: equal keys mean the same expression."""
        k = self._key
        if k is None:
            if self.op == "const":
                d: Any = float_key(self.data)
            elif self.op == "table":
                d = tuple(float_key(v) for v in self.data)
            else:
                d = self.data
            k = (self.op, d, tuple(a.key for a in self.args))
            self._key = k
        return k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and (self is other or self.key == other.key)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = self._hash = hash(self.key)
        return h

    def __bool__(self) -> bool:
        raise ProgramError(
            f"the expression {self} has no truth value; combine conditions with &, |, ~ "
            "or where() instead of and/or/not/if"
        )

    def _walk(self) -> Iterable[Expr]:
        """Every distinct node (by identity) once, children before parents."""
        seen: set[int] = set()
        order: list[Expr] = []
        stack: list[tuple[Expr, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((a, False) for a in reversed(node.args))
        return order

    def variables(self) -> frozenset[str]:
        """Free variable names. A by-name call (``args=None``) contributes none of its callee's
        inputs here, since the callee may not be known yet; `Program` checks those."""
        return frozenset(n.data for n in self._walk() if n.op == "var")

    def calls(self) -> frozenset[str]:
        """Names of the sub-programs this expression calls."""
        return frozenset(n.data[0] for n in self._walk() if n.op == "call")

    # -- operators ---------------------------------------------------------------------------
    def _bin(self, op: str, other: object, reflected: bool = False) -> Expr:
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return Expr(op, (o, self) if reflected else (self, o))

    def __add__(self, o: object) -> Expr:
        return self._bin("add", o)

    def __radd__(self, o: object) -> Expr:
        return self._bin("add", o, True)

    def __sub__(self, o: object) -> Expr:
        return self._bin("sub", o)

    def __rsub__(self, o: object) -> Expr:
        return self._bin("sub", o, True)

    def __mul__(self, o: object) -> Expr:
        return self._bin("mul", o)

    def __rmul__(self, o: object) -> Expr:
        return self._bin("mul", o, True)

    def __truediv__(self, o: object) -> Expr:
        return self._bin("div", o)

    def __rtruediv__(self, o: object) -> Expr:
        return self._bin("div", o, True)

    def __floordiv__(self, o: object) -> Expr:
        return self._bin("floordiv", o)

    def __rfloordiv__(self, o: object) -> Expr:
        return self._bin("floordiv", o, True)

    def __mod__(self, o: object) -> Expr:
        return self._bin("mod", o)

    def __rmod__(self, o: object) -> Expr:
        return self._bin("mod", o, True)

    def __lt__(self, o: object) -> Expr:
        return self._bin("lt", o)

    def __le__(self, o: object) -> Expr:
        return self._bin("le", o)

    def __gt__(self, o: object) -> Expr:
        return self._bin("gt", o)

    def __ge__(self, o: object) -> Expr:
        return self._bin("ge", o)

    def __and__(self, o: object) -> Expr:
        return self._bin("and", o)

    def __rand__(self, o: object) -> Expr:
        return self._bin("and", o, True)

    def __or__(self, o: object) -> Expr:
        return self._bin("or", o)

    def __ror__(self, o: object) -> Expr:
        return self._bin("or", o, True)

    def __invert__(self) -> Expr:
        return Expr("not", (self,))

    def __neg__(self) -> Expr:
        return Expr("neg", (self,))

    def __pos__(self) -> Expr:
        return self

    def __pow__(self, k: object) -> Expr:
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= MAX_POWER:
            raise ProgramError(
                f"only integer powers 0..{MAX_POWER} are supported (they expand to products), got {k!r}"
            )
        if k == 0:
            return const(1.0)
        out = self
        for _ in range(int(k) - 1):
            out = Expr("mul", (out, self))
        return out

    def eq(self, other: ExprLike) -> Expr:
        """The comparison ``self == other`` (1.0 or 0.0)."""
        return Expr("eq", (self, as_expr(other)))

    def ne(self, other: ExprLike) -> Expr:
        """The comparison ``self != other`` (1.0 or 0.0)."""
        return Expr("ne", (self, as_expr(other)))

    # -- printing ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return _format(self)[0]

    def __repr__(self) -> str:
        return f"Expr({str(self)!r})"

    # -- serialisation -----------------------------------------------------------------------
    def to_json(self) -> list:
        """A JSON-safe nested list; `Expr.from_json` inverts it."""
        op, d = self.op, self.data
        if op == "const":
            return ["const", _json_float(d)]
        if op == "var":
            return ["var", d]
        if op == "table":
            return ["table", self.args[0].to_json(), [_json_float(v) for v in d]]
        if op == "call":
            name, argnames, output = d
            args = (
                None if argnames is None else {n: a.to_json() for n, a in zip(argnames, self.args)}
            )
            return ["call", name, args, output]
        return [op, *(a.to_json() for a in self.args)]

    @staticmethod
    def from_json(obj: Any) -> Expr:
        """Rebuild an expression from `Expr.to_json` output (validating it)."""
        try:
            op = obj[0]
            if op == "const":
                return const(_unjson_float(obj[1]))
            if op == "var":
                return var(obj[1])
            if op == "table":
                return table(Expr.from_json(obj[1]), [_unjson_float(v) for v in obj[2]])
            if op == "call":
                args = obj[2]
                return call(
                    obj[1],
                    None if args is None else {n: Expr.from_json(a) for n, a in args.items()},
                    output=obj[3],
                )
            children = [Expr.from_json(a) for a in obj[1:]]
        except (TypeError, IndexError, KeyError, AttributeError) as exc:
            raise ProgramError(f"malformed serialised expression {obj!r}: {exc}") from None
        if op in _BINARY and len(children) == 2:
            return Expr(op, tuple(children))
        if op in _UNARY and len(children) == 1:
            return Expr(op, tuple(children))
        if op in ("min", "max") and children:
            return Expr(op, tuple(children))
        if op == "where" and len(children) == 3:
            return Expr(op, tuple(children))
        raise ProgramError(f"malformed serialised expression {obj!r}")


def _json_float(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)  # 'inf', '-inf', 'nan'


def _unjson_float(v: Any) -> float:
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProgramError(f"expected a number in a serialised expression, got {v!r}")
    return float(v)


def _coerce(x: object) -> Expr | None:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool | np.bool_):
        return Expr("const", (), 1.0 if x else 0.0)
    if isinstance(x, int | float | np.integer | np.floating):
        try:
            return Expr("const", (), float(x))
        except OverflowError:
            raise ProgramError(f"constant {x!r} does not fit in a double") from None
    return None


def as_expr(x: object) -> Expr:
    e = _coerce(x)
    if e is None:
        raise ProgramError(f"expected an Expr or a real number, got {x!r}")
    return e


# -- public constructors -------------------------------------------------------------------------
def const(value: float) -> Expr:
    """A constant."""
    return as_expr(value)


def var(name: str) -> Expr:
    """A named input or previously assigned variable."""
    return Expr("var", (), check_var_name(name, "variable"))


def floor(x: ExprLike) -> Expr:
    """Largest integer <= x (inf and nan pass through)."""
    return Expr("floor", (as_expr(x),))


def ceil(x: ExprLike) -> Expr:
    """Smallest integer >= x (inf and nan pass through)."""
    return Expr("ceil", (as_expr(x),))


def minimum(*xs: ExprLike) -> Expr:
    """n-ary minimum, folded from the left with ``a if a <= b else b``."""
    if not xs:
        raise ProgramError("minimum() needs at least one argument")
    return Expr("min", tuple(as_expr(x) for x in xs)) if len(xs) > 1 else as_expr(xs[0])


def maximum(*xs: ExprLike) -> Expr:
    """n-ary maximum, folded from the left with ``a if a >= b else b``."""
    if not xs:
        raise ProgramError("maximum() needs at least one argument")
    return Expr("max", tuple(as_expr(x) for x in xs)) if len(xs) > 1 else as_expr(xs[0])


def where(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``a`` where ``cond != 0`` (nan counts as true), else ``b``."""
    return Expr("where", (as_expr(cond), as_expr(a), as_expr(b)))


def table(index: ExprLike, values: Sequence[float] | np.ndarray) -> Expr:
    """``values[index]`` for an integer-valued index in range, else nan."""
    try:
        vals = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    except (TypeError, ValueError) as exc:
        raise ProgramError(f"table values must be real numbers: {exc}") from None
    if not vals:
        raise ProgramError("a table needs at least one value")
    return Expr("table", (as_expr(index),), vals)


def call(name: str, args: Mapping[str, ExprLike] | None = None, output: str | None = None) -> Expr:
    """Call the sub-program bound under ``name``; its primary output unless ``output`` names
    another one. ``args=None`` passes the callee's inputs by name from the caller's variables."""
    if not isinstance(name, str) or not name:
        raise ProgramError(f"a call needs a non-empty sub-program name, got {name!r}")
    if output is not None:
        check_var_name(output, f"output selected in call of {name!r}:")
    if args is None:
        return Expr("call", (), (name, None, output))
    items = sorted(
        ((check_var_name(k, f"argument of call {name!r}:"), as_expr(v)) for k, v in args.items()),
        key=lambda kv: kv[0],
    )
    return Expr("call", tuple(e for _, e in items), (name, tuple(k for k, _ in items), output))


# -- printing ------------------------------------------------------------------------------------
def _num_str(v: float) -> str:
    if v.is_integer() and abs(v) < 1e16:
        return str(int(v)) if v != 0.0 or math.copysign(1.0, v) > 0 else "-0.0"
    return repr(v)


def _format(e: Expr) -> tuple[str, int]:
    op = e.op
    if op == "const":
        return _num_str(e.data), (_PREC["neg"] if math.copysign(1.0, e.data) < 0 else _ATOM)
    if op == "var":
        return e.data, _ATOM
    if op in _BINARY:
        p = _PREC[op]
        (ls, lp), (rs, rp) = _format(e.args[0]), _format(e.args[1])
        # Left-associative operators need no parentheses for an equal-precedence left operand;
        # comparisons do (Python would chain them).
        if lp < p or (lp == p and op in COMPARISONS):
            ls = f"({ls})"
        if rp <= p:
            rs = f"({rs})"
        return f"{ls} {_BINARY[op]} {rs}", p
    if op == "neg":
        s, p = _format(e.args[0])
        return (f"-{s}" if p > _PREC["neg"] else f"-({s})"), _PREC["neg"]
    if op == "not":
        s, p = _format(e.args[0])
        return (f"not {s}" if p >= _PREC["not"] else f"not ({s})"), _PREC["not"]
    if op in ("floor", "ceil", "min", "max", "where"):
        return f"{op}({', '.join(_format(a)[0] for a in e.args)})", _ATOM
    if op == "table":
        vals = ", ".join(_num_str(v) for v in e.data)
        return f"table({_format(e.args[0])[0]}, [{vals}])", _ATOM
    name, argnames, output = e.data
    parts = [repr(name)]
    if argnames is not None:
        inner = ", ".join(f"{k!r}: {_format(a)[0]}" for k, a in zip(argnames, e.args))
        parts.append("{" + inner + "}")
    if output is not None:
        parts.append(f"output={output!r}")
    return f"call({', '.join(parts)})", _ATOM
