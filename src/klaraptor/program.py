"""Rational programs: the IR that every model, fitted function and helper program is written in.

A `Program` is a straight-line sequence of let-bindings (three-address-code style) over named
inputs, with named outputs (the first is the primary one) and named sub-programs it may call.
Expressions (`Expr`) are built with Python operators, the helpers below, or `parse_expr` from
Python-syntax strings such as ``"ceil(N / bx)"``.

The same program runs in four ways, which agree bit for bit (tests prove it):

* `Program.evaluate` - a NumPy tree walk, vectorised by broadcasting (the reference);
* `Program.specialize` - generated Python/NumPy code with the fixed inputs folded in (fast path);
* `Program.to_python` - a standalone module needing only the stdlib `math`;
* `Program.to_c` - standalone C99 needing only `<math.h>`.

Evaluation semantics (identical in every backend)
-------------------------------------------------
* Every value is an IEEE-754 double. Division by zero gives +-inf or nan and never raises.
* ``a // b`` is ``floor(a / b)`` and ``a % b`` is ``a - b * floor(a / b)`` (so ``%`` takes the
  sign of the divisor, as in Python; for integer-valued operands both match Python's ``//``, ``%``).
  `floor` and `ceil` pass inf and nan through and keep the sign of a zero result, as C does.
* Comparisons give 1.0 or 0.0 (any comparison with nan is false, except ``!=``).
* Truth is ``x != 0.0``, so nan counts as true. ``and``/``or``/``not`` give 1.0 or 0.0 and do not
  short-circuit; ``where(c, a, b)`` is ``a`` if ``c`` is true else ``b``. Every operand is always
  evaluated (evaluation cannot fail, so this only matters for speed).
* ``min(a, b) = a if a <= b else b`` and ``max(a, b) = a if a >= b else b``; the n-ary forms fold
  from the left. Being defined by comparison, they treat nan identically everywhere.
* ``table(i, values)`` is ``values[i]`` when ``i`` is an integer in ``[0, len(values))``, else nan.
* Generated C must be compiled without ``-ffast-math`` and without floating-point contraction
  (``-ffp-contract=off``, which ``-std=c99`` implies for GCC) so that no FMA changes a rounding.

Names and scoping
-----------------
Variable names (inputs and assigned names) are ASCII identifiers (``[A-Za-z_][A-Za-z0-9_]*``),
not Python keywords and not starting with ``_kp_`` (reserved for generated code). Each name is
bound once and must be bound before it is used. ``call(name)`` refers to a sub-program by the
key under which it is bound in ``subprograms`` of the calling program or of an enclosing one;
within one program tree a key denotes one program. A call with ``args=None`` passes the callee's
inputs by name from the caller's variables at that point. A call whose name is bound nowhere is
*unbound* (`Program.unbound_calls`); `Program.bind` supplies it. Only fully bound programs can be
evaluated or turned into code.

Generated code naming (deterministic)
-------------------------------------
``san(s)`` replaces every character outside ``[A-Za-z0-9_]`` by ``_``. A generated function name
is prefixed with ``p`` if it would not start with a letter, gets ``_`` appended if it is a reserved
word of the target language, and gets ``_2``, ``_3``, ... appended if it is still taken (names are
handed out top function first, then sub-programs sorted by key, then tables).

* C: the top program is ``<prefix><san(name)>`` (``prefix`` defaults to ``kp_``); the sub-program
  bound under key ``f`` is ``static <prefix><san(name)>__<san(f)>``; a table of function ``F`` is
  ``static const double F_tab<k>[]``. Parameters and locals are ``v_<variable>``, temporaries
  ``t<k>``. Each function returns its primary output; a function with several outputs takes a
  trailing ``double *out`` (may be NULL) that receives all outputs in order.
* Python: the top program is ``<prefix><san(name)>`` (``prefix`` defaults to ``""``), taking the
  inputs as (keyword) arguments; sub-programs are ``_kp_f_<san(name)>__<san(f)>``, tables
  ``_kp_T<k>``, helpers ``_kp_*``. Locals keep the variable names, temporaries are ``_kp_t<k>``.
  A function returns a float if its program has one output, else a tuple of all outputs in order.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from klaraptor.errors import ProgramError

__all__ = [
    "Expr",
    "Program",
    "call",
    "ceil",
    "const",
    "floor",
    "maximum",
    "minimum",
    "parse_expr",
    "table",
    "var",
    "where",
]

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
_COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
_LOGICAL = ("and", "or", "not")
# Printing precedence (higher binds tighter); mirrors Python's.
_PREC = {
    "or": 1,
    "and": 2,
    "not": 3,
    **dict.fromkeys(_COMPARISONS, 4),
    "add": 5,
    "sub": 5,
    "mul": 6,
    "div": 6,
    "floordiv": 6,
    "mod": 6,
    "neg": 7,
}
_ATOM = 9
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_POWER = 64

ExprLike = Any  # Expr or a real number; kept loose because NumPy scalars qualify too


def _check_var_name(name: object, what: str) -> str:
    if (
        not isinstance(name, str)
        or not _NAME_RE.match(name)
        or keyword.iskeyword(name)
        or name.startswith("_kp_")
    ):
        raise ProgramError(
            f"{what} {name!r} is not a valid variable name (an ASCII identifier, "
            "not a Python keyword, not starting with '_kp_')"
        )
    return name


def _float_key(v: float) -> str:
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
                d: Any = _float_key(self.data)
            elif self.op == "table":
                d = tuple(_float_key(v) for v in self.data)
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
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= _MAX_POWER:
            raise ProgramError(
                f"only integer powers 0..{_MAX_POWER} are supported (they expand to products), got {k!r}"
            )
        if k == 0:
            return const(1.0)
        out = self
        for _ in range(int(k) - 1):
            out = Expr("mul", (out, self))
        return out

    def eq(self, other: ExprLike) -> Expr:
        """The comparison ``self == other`` (1.0 or 0.0)."""
        return Expr("eq", (self, _as_expr(other)))

    def ne(self, other: ExprLike) -> Expr:
        """The comparison ``self != other`` (1.0 or 0.0)."""
        return Expr("ne", (self, _as_expr(other)))

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


def _as_expr(x: object) -> Expr:
    e = _coerce(x)
    if e is None:
        raise ProgramError(f"expected an Expr or a real number, got {x!r}")
    return e


# -- public constructors -------------------------------------------------------------------------
def const(value: float) -> Expr:
    """A constant."""
    return _as_expr(value)


def var(name: str) -> Expr:
    """A named input or previously assigned variable."""
    return Expr("var", (), _check_var_name(name, "variable"))


def floor(x: ExprLike) -> Expr:
    """Largest integer <= x (inf and nan pass through)."""
    return Expr("floor", (_as_expr(x),))


def ceil(x: ExprLike) -> Expr:
    """Smallest integer >= x (inf and nan pass through)."""
    return Expr("ceil", (_as_expr(x),))


def minimum(*xs: ExprLike) -> Expr:
    """n-ary minimum, folded from the left with ``a if a <= b else b``."""
    if not xs:
        raise ProgramError("minimum() needs at least one argument")
    return Expr("min", tuple(_as_expr(x) for x in xs)) if len(xs) > 1 else _as_expr(xs[0])


def maximum(*xs: ExprLike) -> Expr:
    """n-ary maximum, folded from the left with ``a if a >= b else b``."""
    if not xs:
        raise ProgramError("maximum() needs at least one argument")
    return Expr("max", tuple(_as_expr(x) for x in xs)) if len(xs) > 1 else _as_expr(xs[0])


def where(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    """``a`` where ``cond != 0`` (nan counts as true), else ``b``."""
    return Expr("where", (_as_expr(cond), _as_expr(a), _as_expr(b)))


def table(index: ExprLike, values: Sequence[float] | np.ndarray) -> Expr:
    """``values[index]`` for an integer-valued index in range, else nan."""
    try:
        vals = tuple(float(v) for v in np.asarray(values, dtype=np.float64).ravel())
    except (TypeError, ValueError) as exc:
        raise ProgramError(f"table values must be real numbers: {exc}") from None
    if not vals:
        raise ProgramError("a table needs at least one value")
    return Expr("table", (_as_expr(index),), vals)


def call(name: str, args: Mapping[str, ExprLike] | None = None, output: str | None = None) -> Expr:
    """Call the sub-program bound under ``name``; its primary output unless ``output`` names
    another one. ``args=None`` passes the callee's inputs by name from the caller's variables."""
    if not isinstance(name, str) or not name:
        raise ProgramError(f"a call needs a non-empty sub-program name, got {name!r}")
    if output is not None:
        _check_var_name(output, f"output selected in call of {name!r}:")
    if args is None:
        return Expr("call", (), (name, None, output))
    items = sorted(
        ((_check_var_name(k, f"argument of call {name!r}:"), _as_expr(v)) for k, v in args.items()),
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
        if lp < p or (lp == p and op in _COMPARISONS):
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


# -- parsing -------------------------------------------------------------------------------------
_AST_BIN = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
}
_AST_CMP = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_FUNC_ARITY = {"floor": (1, 1), "ceil": (1, 1), "min": (1, None), "max": (1, None), "where": (3, 3)}


def parse_expr(text: str, allowed: Collection[str]) -> Expr:
    """Parse a Python-syntax expression over the variable names in ``allowed``.

    Supported: numbers, names, ``+ - * / // %``, ``**`` with a literal integer exponent 0..64,
    unary ``-``/``+``, comparisons (chains become ``and``), ``and``/``or``/``not``,
    ``a if c else b``, and the functions ``floor, ceil, min, max, where``.
    Raises ProgramError quoting ``text`` for anything else.
    """
    if not isinstance(text, str):
        raise ProgramError(f"an expression must be a string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ProgramError(f"cannot parse expression {text!r}: {exc.msg}") from None
    return _Parser(text.strip(), frozenset(allowed)).visit(tree.body)


class _Parser:
    def __init__(self, text: str, allowed: frozenset[str]) -> None:
        self.text = text
        self.allowed = allowed

    def fail(self, node: ast.AST, why: str) -> ProgramError:
        seg = ast.get_source_segment(self.text, node)
        at = f" at {seg!r}" if seg and seg != self.text else ""
        return ProgramError(f"in expression {self.text!r}{at}: {why}")

    def visit(self, node: ast.AST) -> Expr:
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool | int | float):
                try:
                    return const(float(v))
                except OverflowError:
                    raise self.fail(node, "number too large for a double") from None
            raise self.fail(node, f"unsupported constant {v!r}")
        if isinstance(node, ast.Name):
            if node.id in self.allowed:
                return var(node.id)
            if node.id in _FUNC_ARITY:
                raise self.fail(node, f"{node.id!r} is a function; call it")
            allowed = ", ".join(sorted(self.allowed)) or "none"
            raise self.fail(node, f"unknown name {node.id!r} (allowed: {allowed})")
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                k = node.right
                if not (isinstance(k, ast.Constant) and type(k.value) is int):
                    raise self.fail(node, "the exponent of ** must be a literal integer")
                if not 0 <= k.value <= _MAX_POWER:
                    raise self.fail(node, f"the exponent of ** must be in 0..{_MAX_POWER}")
                return self.visit(node.left) ** k.value
            op = _AST_BIN.get(type(node.op))
            if op is None:
                raise self.fail(node, f"unsupported operator {type(node.op).__name__}")
            return Expr(op, (self.visit(node.left), self.visit(node.right)))
        if isinstance(node, ast.UnaryOp):
            x = self.visit(node.operand)
            if isinstance(node.op, ast.USub):
                return -x
            if isinstance(node.op, ast.UAdd):
                return x
            if isinstance(node.op, ast.Not):
                return ~x
            raise self.fail(node, f"unsupported operator {type(node.op).__name__}")
        if isinstance(node, ast.BoolOp):
            op = "and" if isinstance(node.op, ast.And) else "or"
            out = self.visit(node.values[0])
            for v in node.values[1:]:
                out = Expr(op, (out, self.visit(v)))
            return out
        if isinstance(node, ast.Compare):
            terms = [self.visit(node.left), *(self.visit(c) for c in node.comparators)]
            out: Expr | None = None
            for i, cop in enumerate(node.ops):
                op = _AST_CMP.get(type(cop))
                if op is None:
                    raise self.fail(node, f"unsupported comparison {type(cop).__name__}")
                c = Expr(op, (terms[i], terms[i + 1]))
                out = c if out is None else Expr("and", (out, c))
            assert out is not None  # a Compare has at least one operator
            return out
        if isinstance(node, ast.IfExp):
            return where(self.visit(node.test), self.visit(node.body), self.visit(node.orelse))
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNC_ARITY:
                raise self.fail(
                    node, f"unknown function (allowed: {', '.join(sorted(_FUNC_ARITY))})"
                )
            fname = node.func.id
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise self.fail(node, f"{fname}() takes positional arguments only")
            lo, hi = _FUNC_ARITY[fname]
            n = len(node.args)
            if n < lo or (hi is not None and n > hi):
                want = str(lo) if lo == hi else f"at least {lo}"
                raise self.fail(node, f"{fname}() takes {want} argument(s), got {n}")
            args = [self.visit(a) for a in node.args]
            if fname == "floor":
                return floor(args[0])
            if fname == "ceil":
                return ceil(args[0])
            if fname == "min":
                return minimum(*args)
            if fname == "max":
                return maximum(*args)
            return where(*args)
        raise self.fail(node, f"unsupported syntax ({type(node).__name__})")


# -- NumPy semantics (shared by evaluate and specialize's constant folding) ---------------------
def _np_floordiv(a: Any, b: Any) -> Any:
    return np.floor(np.true_divide(a, b))


def _np_mod(a: Any, b: Any) -> Any:
    return np.subtract(a, np.multiply(b, np.floor(np.true_divide(a, b))))


def _np_bool(x: Any) -> Any:
    return np.not_equal(x, 0.0)


def _np_table(index: Any, values: np.ndarray) -> np.ndarray:
    idx = np.asarray(index, dtype=np.float64)
    ok = (idx >= 0.0) & (idx < values.shape[0]) & (np.floor(idx) == idx)
    picked = values[np.where(ok, idx, 0.0).astype(np.intp)]
    return np.where(ok, picked, np.nan)


def _as_float(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    return lambda a, b: np.asarray(fn(a, b), dtype=np.float64)


_NP_BINARY: dict[str, Callable[[Any, Any], Any]] = {
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
    "and": _as_float(lambda a, b: np.logical_and(_np_bool(a), _np_bool(b))),
    "or": _as_float(lambda a, b: np.logical_or(_np_bool(a), _np_bool(b))),
    "min": lambda a, b: np.where(np.less_equal(a, b), a, b),
    "max": lambda a, b: np.where(np.greater_equal(a, b), a, b),
}
_NP_UNARY: dict[str, Callable[[Any], Any]] = {
    "neg": np.negative,
    "not": lambda a: np.asarray(np.equal(a, 0.0), dtype=np.float64),
    "floor": np.floor,
    "ceil": np.ceil,
}


# -- scalar Python semantics (exec'd here for `specialize`, emitted verbatim by `to_python`) -----
_PY_HELPERS = '''
_kp_inf = float("inf")
_kp_nan = float("nan")
_kp_float = float


def _kp_div(a, b):
    """IEEE division: x / 0 is +-inf or nan instead of ZeroDivisionError."""
    if b != 0.0:
        return a / b
    if a != a or a == 0.0:
        return _kp_nan
    return math.copysign(_kp_inf, a) * math.copysign(1.0, b)


def _kp_floor(x):
    """floor as in C: inf and nan pass through, a zero result keeps the sign of x."""
    if not math.isfinite(x):
        return x
    r = _kp_float(math.floor(x))
    return r if r != 0.0 else math.copysign(0.0, x)


def _kp_ceil(x):
    """ceil as in C: inf and nan pass through, a zero result keeps the sign of x."""
    if not math.isfinite(x):
        return x
    r = _kp_float(math.ceil(x))
    return r if r != 0.0 else math.copysign(0.0, x)


def _kp_mod(a, b):
    """a - b * floor(a / b): the sign follows the divisor."""
    return a - b * _kp_floor(_kp_div(a, b))


def _kp_table(values, i):
    """values[i] for an integer-valued i in range, else nan."""
    if 0.0 <= i < len(values) and i == math.floor(i):
        return values[int(i)]
    return _kp_nan
'''
_PY_HELPER_NS: dict[str, Any] = {"math": math}
exec(compile(_PY_HELPERS, "<klaraptor.program helpers>", "exec"), _PY_HELPER_NS)


def _py_float(v: float) -> str:
    if math.isnan(v):
        return "_kp_nan"
    if math.isinf(v):
        return "_kp_inf" if v > 0 else "-_kp_inf"
    return repr(v)


def _c_float(v: float) -> str:
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "-INFINITY"
    s = repr(v)
    return s if any(c in s for c in ".en") else s + ".0"


# Scalar operation templates ({a}, {b}, {c} are operand texts).
_PY_OPS = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "mul": "{a} * {b}",
    "div": "_kp_div({a}, {b})",
    "floordiv": "_kp_floor(_kp_div({a}, {b}))",
    "mod": "_kp_mod({a}, {b})",
    "lt": "(1.0 if {a} < {b} else 0.0)",
    "le": "(1.0 if {a} <= {b} else 0.0)",
    "gt": "(1.0 if {a} > {b} else 0.0)",
    "ge": "(1.0 if {a} >= {b} else 0.0)",
    "eq": "(1.0 if {a} == {b} else 0.0)",
    "ne": "(1.0 if {a} != {b} else 0.0)",
    "and": "(1.0 if ({a} != 0.0 and {b} != 0.0) else 0.0)",
    "or": "(1.0 if ({a} != 0.0 or {b} != 0.0) else 0.0)",
    "not": "(1.0 if {a} == 0.0 else 0.0)",
    "neg": "-({a})",
    "floor": "_kp_floor({a})",
    "ceil": "_kp_ceil({a})",
    "min": "({a} if {a} <= {b} else {b})",
    "max": "({a} if {a} >= {b} else {b})",
    "where": "({b} if {a} != 0.0 else {c})",
    "table": "_kp_table({T}, {a})",
}
_C_OPS = {
    "add": "{a} + {b}",
    "sub": "{a} - {b}",
    "mul": "{a} * {b}",
    "div": "{a} / {b}",
    "floordiv": "floor({a} / {b})",
    "mod": "{a} - {b} * floor({a} / {b})",
    "lt": "({a} < {b} ? 1.0 : 0.0)",
    "le": "({a} <= {b} ? 1.0 : 0.0)",
    "gt": "({a} > {b} ? 1.0 : 0.0)",
    "ge": "({a} >= {b} ? 1.0 : 0.0)",
    "eq": "({a} == {b} ? 1.0 : 0.0)",
    "ne": "({a} != {b} ? 1.0 : 0.0)",
    "and": "(({a} != 0.0 && {b} != 0.0) ? 1.0 : 0.0)",
    "or": "(({a} != 0.0 || {b} != 0.0) ? 1.0 : 0.0)",
    "not": "({a} == 0.0 ? 1.0 : 0.0)",
    "neg": "-({a})",
    "floor": "floor({a})",
    "ceil": "ceil({a})",
    "min": "({a} <= {b} ? {a} : {b})",
    "max": "({a} >= {b} ? {a} : {b})",
    "where": "({a} != 0.0 ? {b} : {c})",
    "table": "(({a} >= 0.0 && {a} < {N} && {a} == floor({a})) ? {T}[(int){a}] : NAN)",
}
# Vectorised templates for `specialize`; comparisons and logic yield bool arrays ({B} operands
# are truth values), converted to 1.0/0.0 only where a float is needed.
_NP_OPS = {
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
        from numpy._core._ufunc_config import _extobj_contextvar

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
_NP_NS: dict[str, Any] = {
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
    "_np_table": _np_table,
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
}
_BOOL_OPS = frozenset((*_COMPARISONS, *_LOGICAL))

_C_RESERVED = frozenset(
    """auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union
    unsigned void volatile while _Bool _Complex _Imaginary main NAN INFINITY HUGE_VAL acos asin atan
    atan2 cos sin tan acosh asinh atanh cosh sinh tanh exp exp2 expm1 frexp ldexp log log10 log1p log2
    logb modf scalbn cbrt fabs hypot pow sqrt erf erfc lgamma tgamma ceil floor nearbyint rint lrint
    round lround trunc fmod remainder copysign nan nextafter fdim fmax fmin fma isnan isinf isfinite
    signbit fpclassify""".split()
)
_PY_RESERVED = frozenset((*keyword.kwlist, "math"))


def _sanitize(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", s)


class _Names:
    """Hands out unique identifiers deterministically (see the module docstring)."""

    def __init__(self, reserved: frozenset[str]) -> None:
        self.reserved = reserved
        self.used: set[str] = set()

    def take(self, want: str, internal: bool = False) -> str:
        # Internal names start with '_kp_'; user-derived ones must start with a letter.
        if not internal and not (want[:1].isascii() and want[:1].isalpha()):
            want = "p" + want
        if want in self.reserved:
            want += "_"
        name, i = want, 2
        while name in self.used or name in self.reserved:
            name, i = f"{want}_{i}", i + 1
        self.used.add(name)
        return name


# -- lowering to value-numbered straight-line code ----------------------------------------------
class _Lowered:
    """A value-numbered instruction list. Instruction ``t`` is ``(ops[t], data[t], operands[t])``;
    ops are those of `Expr` plus ``input``, ``call`` (all outputs of a callee) and ``proj``."""

    def __init__(self, registry: Mapping[str, Program], inline: bool) -> None:
        self.registry = registry
        self.inline = inline
        self.ops: list[str] = []
        self.data: list[Any] = []
        self.operands: list[tuple[int, ...]] = []
        self.labels: dict[int, str] = {}
        self._vn: dict[tuple, int] = {}

    def emit(self, op: str, data: Any, operands: tuple[int, ...]) -> int:
        if op == "const":
            dkey: Any = _float_key(data)
        elif op == "table":
            dkey = tuple(_float_key(v) for v in data)
        else:
            dkey = data
        key = (op, dkey, operands)
        t = self._vn.get(key)
        if t is None:
            t = len(self.ops)
            self.ops.append(op)
            self.data.append(data)
            self.operands.append(operands)
            self._vn[key] = t
        return t

    def program(self, prog: Program, args: Sequence[int] | None, label: bool) -> list[int]:
        """Lower ``prog``; ``args`` None means its inputs are the function's parameters."""
        if args is None:
            scope = {n: self.emit("input", n, ()) for n in prog.inputs}
        else:
            scope = dict(zip(prog.inputs, args))
        if label:
            for n in prog.inputs:
                self.labels.setdefault(scope[n], n)
        memo: dict[int, int] = {}
        for target, expr in prog.assignments:
            t = self.expr(expr, scope, memo)
            scope[target] = t
            if label:
                self.labels.setdefault(t, target)
        return [scope[o] for o in prog.outputs]

    def expr(self, e: Expr, scope: dict[str, int], memo: dict[int, int]) -> int:
        t = memo.get(id(e))
        if t is not None:
            return t
        op = e.op
        if op == "const":
            t = self.emit("const", e.data, ())
        elif op == "var":
            t = scope[e.data]
        elif op in ("min", "max"):
            t = self.expr(e.args[0], scope, memo)
            for a in e.args[1:]:
                t = self.emit(op, None, (t, self.expr(a, scope, memo)))
        elif op == "call":
            t = self.call(e, scope, memo)
        else:
            operands = tuple(self.expr(a, scope, memo) for a in e.args)
            t = self.emit(op, e.data if op == "table" else None, operands)
        memo[id(e)] = t
        return t

    def call(self, e: Expr, scope: dict[str, int], memo: dict[int, int]) -> int:
        name, argnames, output = e.data
        callee = self.registry[name]
        if argnames is None:
            args = [scope[i] for i in callee.inputs]
        else:
            given = dict(zip(argnames, e.args))
            args = [self.expr(given[i], scope, memo) for i in callee.inputs]
        index = 0 if output is None else callee.outputs.index(output)
        if self.inline:
            return self.program(callee, args, label=False)[index]
        c = self.emit("call", name, tuple(args))
        return c if len(callee.outputs) == 1 else self.emit("proj", index, (c,))

    def live(self, roots: Iterable[int]) -> list[int]:
        """Instructions the roots depend on, in order."""
        need = set(roots)
        for t in range(len(self.ops) - 1, -1, -1):
            if t in need:
                need.update(self.operands[t])
        return sorted(need)

    def tables(self, live: Iterable[int]) -> list[tuple[float, ...]]:
        out: dict[tuple, tuple[float, ...]] = {}
        for t in live:
            if self.ops[t] == "table":
                out.setdefault(tuple(_float_key(v) for v in self.data[t]), self.data[t])
        return list(out.values())


# -- programs ------------------------------------------------------------------------------------
class Program:
    """A rational program: inputs, let-bindings, outputs (first = primary), sub-programs.

    Programs are immutable; ``==`` is structural equality.
    """

    __slots__ = (
        "name",
        "inputs",
        "assignments",
        "outputs",
        "subprograms",
        "_registry",
        "_unbound",
        "_key",
    )

    def __init__(
        self,
        name: str,
        inputs: Sequence[str],
        assignments: Sequence[tuple[str, ExprLike]],
        outputs: Sequence[str],
        subprograms: Mapping[str, Program] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ProgramError(f"a program needs a non-empty name, got {name!r}")
        self.name = name
        where_ = f"program {name!r}"
        if isinstance(inputs, str) or isinstance(outputs, str):
            raise ProgramError(
                f"{where_}: inputs and outputs must be sequences of names, not strings"
            )
        self.inputs: tuple[str, ...] = tuple(_check_var_name(n, f"{where_}: input") for n in inputs)
        defined: set[str] = set()
        for n in self.inputs:
            if n in defined:
                raise ProgramError(f"{where_}: input {n!r} is listed twice")
            defined.add(n)
        assigned: list[tuple[str, Expr]] = []
        for i, item in enumerate(assignments):
            try:
                target, expr = item
            except (TypeError, ValueError):
                raise ProgramError(
                    f"{where_}: assignment #{i} must be a (name, Expr) pair, got {item!r}"
                ) from None
            _check_var_name(target, f"{where_}: assigned name")
            if target in defined:
                raise ProgramError(f"{where_}: {target!r} is defined twice")
            expr = _as_expr(expr)
            missing = expr.variables() - defined
            if missing:
                raise ProgramError(
                    f"{where_}: assignment {target} = {expr} uses {sorted(missing)} before they are defined"
                )
            defined.add(target)
            assigned.append((target, expr))
        self.assignments: tuple[tuple[str, Expr], ...] = tuple(assigned)
        outs = tuple(outputs)
        if not outs:
            raise ProgramError(f"{where_}: needs at least one output")
        for o in outs:
            if o not in defined:
                raise ProgramError(f"{where_}: output {o!r} is not an input or an assigned name")
        if len(set(outs)) != len(outs):
            raise ProgramError(f"{where_}: outputs {list(outs)} repeat a name")
        self.outputs: tuple[str, ...] = outs
        subs = dict(subprograms or {})
        for k, v in subs.items():
            if not isinstance(k, str) or not k:
                raise ProgramError(
                    f"{where_}: sub-program keys must be non-empty strings, got {k!r}"
                )
            if not isinstance(v, Program):
                raise ProgramError(
                    f"{where_}: sub-program {k!r} is not a Program ({type(v).__name__})"
                )
        self.subprograms: Mapping[str, Program] = MappingProxyType(subs)
        self._key: tuple | None = None
        self._registry, self._unbound = self._analyse()

    # -- structure ---------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        """A hashable structural key."""
        if self._key is None:
            self._key = (
                self.name,
                self.inputs,
                tuple((n, e.key) for n, e in self.assignments),
                self.outputs,
                tuple(sorted((k, v.key) for k, v in self.subprograms.items())),
            )
        return self._key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and (self is other or self.key == other.key)

    def __hash__(self) -> int:
        return hash(self.key)

    def _analyse(self) -> tuple[dict[str, Program], frozenset[str]]:
        """Resolve calls lexically; check call compatibility, name uniqueness and recursion."""
        registry: dict[str, Program] = {}
        unbound: set[str] = set()
        edges: dict[str | None, set[str]] = {}

        def visit(prog: Program, env: Mapping[str, Program], me: str | None) -> None:
            if prog.subprograms:
                env = {**env, **prog.subprograms}
            for k, sub in prog.subprograms.items():
                prev = registry.setdefault(k, sub)
                if prev is not sub and prev.key != sub.key:
                    raise ProgramError(
                        f"program {self.name!r}: the sub-program key {k!r} denotes two different "
                        "programs; a key must denote one program within a program tree"
                    )
            calls = edges.setdefault(me, set())
            defined = set(prog.inputs)
            for target, expr in prog.assignments:
                for node in expr._walk():
                    if node.op == "call":
                        callee = env.get(node.data[0])
                        if callee is None:
                            unbound.add(node.data[0])
                        else:
                            calls.add(node.data[0])
                            _check_call(prog, target, node, callee, defined)
                defined.add(target)
            for k, sub in prog.subprograms.items():
                visit(sub, env, k)

        visit(self, {}, None)
        state: dict[str | None, int] = {}

        def dfs(n: str | None, path: list[str]) -> None:
            state[n] = 1
            for m in sorted(edges.get(n, ())):
                if state.get(m) == 1:
                    cycle = " -> ".join([*path[path.index(m) :], m]) if m in path else m
                    raise ProgramError(f"program {self.name!r}: recursive calls {cycle}")
                if m not in state:
                    dfs(m, [*path, m])
            state[n] = 2

        for n in list(edges):
            if n not in state:
                dfs(n, [] if n is None else [n])
        return registry, frozenset(unbound)

    def unbound_calls(self) -> frozenset[str]:
        """Names called somewhere in the program tree but bound nowhere visible."""
        return self._unbound

    def bind(self, subprograms: Mapping[str, Program], *, allow_unused: bool = False) -> Program:
        """Return a copy with ``subprograms`` bound at the top level (e.g. fitted functions
        substituted into a model template). Each must be compatible with its call sites.
        Binding a name that is not an unbound call is an error unless ``allow_unused``."""
        extra = sorted(set(subprograms) - self._unbound)
        if extra and not allow_unused:
            raise ProgramError(
                f"bind: {extra} are not unbound calls of program {self.name!r} "
                f"(unbound: {sorted(self._unbound) or 'none'})"
            )
        merged = {**self.subprograms, **subprograms}
        return Program(self.name, self.inputs, self.assignments, self.outputs, merged)

    def _require_bound(self, what: str) -> None:
        if self._unbound:
            raise ProgramError(
                f"cannot {what} program {self.name!r}: unbound calls {sorted(self._unbound)}; bind() them first"
            )

    # -- printing / serialisation ------------------------------------------------------------
    def __str__(self) -> str:
        head = f"program {self.name}({', '.join(self.inputs)}) -> {', '.join(self.outputs)}"
        lines = [head] + [f"    {n} = {e}" for n, e in self.assignments]
        for k, sub in self.subprograms.items():
            lines.append(f"  sub-program {k!r}:")
            lines.extend("    " + ln for ln in str(sub).splitlines())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Program {self.name!r} ({', '.join(self.inputs)}) -> ({', '.join(self.outputs)})>"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; `Program.from_dict` inverts it."""
        return {
            "name": self.name,
            "inputs": list(self.inputs),
            "assignments": [[n, e.to_json()] for n, e in self.assignments],
            "outputs": list(self.outputs),
            "subprograms": {k: v.to_dict() for k, v in self.subprograms.items()},
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Program:
        """Rebuild (and re-validate) a program from `Program.to_dict` output."""
        try:
            return Program(
                d["name"],
                d["inputs"],
                [(n, Expr.from_json(e)) for n, e in d["assignments"]],
                d["outputs"],
                {k: Program.from_dict(v) for k, v in d.get("subprograms", {}).items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ProgramError(f"malformed serialised program: {exc!r}") from None

    # -- (a) vectorised evaluation -----------------------------------------------------------
    def evaluate(
        self,
        values: Mapping[str, Any] | None = None,
        /,
        *,
        intermediates: bool = False,
        **inputs: Any,
    ) -> dict[str, np.ndarray]:
        """Evaluate with NumPy broadcasting over the inputs (scalars or arrays).

        Returns the outputs (and, with ``intermediates=True``, every assigned name too) as
        float64 arrays of the inputs' common broadcast shape.
        """
        self._require_bound("evaluate")
        given = {**(values or {}), **inputs}
        arrays = _coerce_inputs(self, given)
        try:
            shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
        except ValueError as exc:
            raise ProgramError(
                f"program {self.name!r}: inputs do not broadcast together: {exc}"
            ) from None
        with np.errstate(all="ignore"):
            scope = _eval_program(self, arrays, self._registry)
        names = list(self.outputs)
        if intermediates:
            names += [n for n, _ in self.assignments if n not in self.outputs]
        return {n: np.array(np.broadcast_to(scope[n], shape), dtype=np.float64) for n in names}

    # -- fast path ---------------------------------------------------------------------------
    def specialize(
        self,
        fixed: Mapping[str, Any],
        *,
        outputs: Sequence[str] | None = None,
        as_tuple: bool = False,
    ) -> Callable[..., Any]:
        """Fold the ``fixed`` inputs (scalars or arrays, e.g. candidate shapes and hardware
        constants) into generated code and return ``f(**remaining_scalar_inputs)``.

        Everything that depends only on fixed inputs is precomputed (cached, read-only arrays);
        what is left runs as plain Python floats where it is scalar and as NumPy ufuncs where it
        mixes in arrays. ``f`` returns the outputs as arrays of the fixed inputs' broadcast shape
        (outputs that depend only on fixed inputs are shared read-only arrays): a dict by name,
        or with ``as_tuple`` a tuple in order. ``outputs`` (default: all) selects which outputs
        are computed, in that order; only what they depend on is evaluated. The generated
        source is ``f.source``; the remaining input names, in order, ``f.inputs`` (they may also
        be passed positionally); the output names ``f.outputs``; and the outputs that depend on
        fixed inputs only, by name, ``f.constant_outputs``.
        """
        self._require_bound("specialize")
        unknown = sorted(set(fixed) - set(self.inputs))
        if unknown:
            raise ProgramError(f"specialize: {unknown} are not inputs of program {self.name!r}")
        if outputs is not None:
            outputs = tuple(outputs)
            bad = [o for o in outputs if o not in self.outputs]
            if bad or len(set(outputs)) != len(outputs) or not outputs:
                raise ProgramError(
                    f"specialize: outputs {list(outputs)} must be distinct outputs of program "
                    f"{self.name!r} (outputs: {list(self.outputs)})"
                )
        values = _coerce_inputs(self, dict(fixed), partial=True)
        try:
            shape = np.broadcast_shapes(*(a.shape for a in values.values()))
        except ValueError as exc:
            raise ProgramError(
                f"specialize: fixed inputs do not broadcast together: {exc}"
            ) from None
        return _Specializer(self, values, shape).build(outputs, as_tuple)

    # -- (b) Python --------------------------------------------------------------------------
    def to_python(self, prefix: str = "") -> str:
        """A standalone Python module (stdlib ``math`` only) with one function per
        (sub-)program; see the module docstring for the naming scheme."""
        self._require_bound("generate Python for")
        _check_prefix(prefix)
        return _PyGen(self, prefix).module()

    # -- (c) C -------------------------------------------------------------------------------
    def to_c(self, prefix: str = "kp_") -> str:
        """Standalone C99 source (``<math.h>`` only) with one function per (sub-)program;
        see the module docstring for the naming scheme and the required compiler flags."""
        self._require_bound("generate C for")
        _check_prefix(prefix)
        return _CGen(self, prefix).source()


def _check_call(prog: Program, target: str, node: Expr, callee: Program, defined: set[str]) -> None:
    name, argnames, output = node.data
    at = f"call of {name!r} in assignment {target!r} of program {prog.name!r}"
    if argnames is None:
        missing = [i for i in callee.inputs if i not in defined]
        if missing:
            raise ProgramError(
                f"{at}: the callee's inputs {missing} are not defined at that point (a call "
                "without args passes the callee's inputs by name)"
            )
    elif set(argnames) != set(callee.inputs):
        raise ProgramError(
            f"{at}: arguments {list(argnames)} do not match the callee's inputs {list(callee.inputs)}"
        )
    if output is not None and output not in callee.outputs:
        raise ProgramError(
            f"{at}: the callee has no output {output!r} (outputs: {list(callee.outputs)})"
        )


def _check_prefix(prefix: str) -> None:
    if not isinstance(prefix, str) or (prefix and not _NAME_RE.match(prefix)):
        raise ProgramError(f"a name prefix must be empty or an identifier, got {prefix!r}")


def _coerce_inputs(
    prog: Program, given: Mapping[str, Any], partial: bool = False
) -> dict[str, np.ndarray]:
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
    prog: Program, values: Mapping[str, Any], registry: Mapping[str, Program]
) -> dict[str, Any]:
    scope: dict[str, Any] = dict(values)
    memo: dict[int, Any] = {}
    for target, expr in prog.assignments:
        scope[target] = _eval_expr(expr, scope, memo, registry)
    return scope


def _eval_expr(
    e: Expr, scope: dict[str, Any], memo: dict[int, Any], registry: Mapping[str, Program]
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
        fn = _NP_BINARY[op]
        v = _eval_expr(e.args[0], scope, memo, registry)
        for a in e.args[1:]:
            v = fn(v, _eval_expr(a, scope, memo, registry))
    elif op in _NP_BINARY:
        v = _NP_BINARY[op](
            _eval_expr(e.args[0], scope, memo, registry),
            _eval_expr(e.args[1], scope, memo, registry),
        )
    elif op in _NP_UNARY:
        v = _NP_UNARY[op](_eval_expr(e.args[0], scope, memo, registry))
    elif op == "where":
        c, a, b = (_eval_expr(x, scope, memo, registry) for x in e.args)
        v = np.where(_np_bool(c), a, b)
    elif op == "table":
        v = _np_table(_eval_expr(e.args[0], scope, memo, registry), np.asarray(e.data))
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


# -- specialisation ------------------------------------------------------------------------------
_FIXED, _SCALAR, _ARRAY = 0, 1, 2
_TEMP_RE = re.compile(r"\b_kp_(?:t\d+[fv]?|b\d+)\b")
# Elementwise arithmetic that `_Specializer.batches` may compute for several instructions at once.
_BATCH_OPS = frozenset(("add", "sub", "mul", "div", "floordiv", "mod", "neg", "floor", "ceil"))


class _Batch:
    """A group of instructions computed as one NumPy operation (see `_Specializer.batches`)."""

    __slots__ = ("op", "descs", "members", "stacked")

    def __init__(
        self, op: str, descs: tuple, members: list[int], stacked: dict[int, np.ndarray]
    ) -> None:
        self.op = op
        self.descs = descs
        self.members = members
        self.stacked = stacked


class _Specializer:
    def __init__(self, prog: Program, fixed: dict[str, np.ndarray], shape: tuple[int, ...]) -> None:
        self.prog = prog
        self.fixed = fixed
        self.shape = shape
        self.low = _Lowered(prog._registry, inline=True)
        self.roots = self.low.program(prog, None, label=False)
        self.kind: dict[int, int] = {}
        self.value: dict[int, Any] = {}  # fixed values: float or read-only ndarray
        self.vshape: dict[int, tuple[int, ...]] = {}  # static shapes of array values
        self.consts: dict[str, Any] = {}
        self.const_names: dict[Any, str] = {}
        # Operands after forwarding: an instruction whose value is, element for element and in
        # the same representation, that of an earlier one (e.g. `x and <fixed, all true>`) is
        # replaced by it (`rep`), and its users read the earlier one instead.
        self.rep: dict[int, int] = {}
        self.opnds: dict[int, tuple[int, ...]] = {}

    def fold(self, t: int) -> None:
        low = self.low
        op = low.ops[t]
        ops = tuple(self.rep.get(o, o) for o in low.operands[t])
        self.opnds[t] = ops
        if op == "input":
            name = low.data[t]
            if name not in self.fixed:
                self.kind[t] = _SCALAR
                return
            self.set_fixed(t, self.fixed[name])
            return
        if op == "const":
            self.set_fixed(t, np.float64(low.data[t]))
            return
        kinds = [self.kind[o] for o in ops]
        if all(k == _FIXED for k in kinds):
            args = [self.value[o] for o in ops]
            if op in _NP_BINARY:
                v = _NP_BINARY[op](*args)
            elif op in _NP_UNARY:
                v = _NP_UNARY[op](*args)
            elif op == "where":
                v = np.where(_np_bool(args[0]), args[1], args[2])
            else:  # table
                v = _np_table(args[0], np.asarray(low.data[t]))
            self.set_fixed(t, v)
            return
        array = any(
            k == _ARRAY or (k == _FIXED and isinstance(self.value[o], np.ndarray))
            for o, k in zip(ops, kinds)
        )
        self.kind[t] = _ARRAY if array else _SCALAR
        if array:
            self.vshape[t] = np.broadcast_shapes(*(self.shape_of(o) for o in ops))
            self.forward(t, op, ops)

    # -- forwarding (exact: the replaced value is bit for bit the same) --------------------------
    def truth(self, o: int) -> bool | None:
        """True / False when `o` is fixed and its truth is the same everywhere, else None."""
        if self.kind[o] != _FIXED:
            return None
        tv = np.not_equal(self.value[o], 0.0)
        if np.all(tv):
            return True
        if not np.any(tv):
            return False
        return None

    def plain_const(self, o: int) -> bool:
        """`o` is fixed and has no nan and no zero of either sign."""
        if self.kind[o] != _FIXED:
            return False
        v = np.asarray(self.value[o])
        return not (np.any(np.isnan(v)) or np.any(v == 0.0))

    def is_bool_array(self, o: int) -> bool:
        return self.kind[o] == _ARRAY and self.low.ops[o] in _BOOL_OPS

    def fixed_all(self, o: int, test: Callable[[np.ndarray], np.ndarray]) -> bool:
        return self.kind[o] == _FIXED and bool(np.all(test(np.asarray(self.value[o]))))

    def same_float(self, x: int, shape: tuple[int, ...]) -> bool:
        """`x` is a float array of exactly `shape`, so `t = x` keeps value and representation."""
        return self.kind[x] == _ARRAY and not self.is_bool_array(x) and self.shape_of(x) == shape

    def forward(self, t: int, op: str, ops: tuple[int, ...]) -> None:
        shape = self.vshape[t]
        if op in ("mul", "div", "add", "sub"):
            # IEEE identities, exact for every x (nan, inf and signed zeros included):
            # x * 1 = 1 * x = x / 1 = x, x + (-0) = (-0) + x = x, x - (+0) = x.
            one = lambda v: v == 1.0  # noqa: E731
            neg0 = lambda v: (v == 0.0) & np.signbit(v)  # noqa: E731
            pos0 = lambda v: (v == 0.0) & ~np.signbit(v)  # noqa: E731
            a, b = ops
            if op == "mul":
                cands = [(a, b, one), (b, a, one)]
            elif op == "div":
                cands = [(a, b, one)]
            elif op == "add":
                cands = [(a, b, neg0), (b, a, neg0)]
            else:
                cands = [(a, b, pos0)]
            for x, k, test in cands:
                if self.same_float(x, shape) and self.fixed_all(k, test):
                    self.rep[t] = x
                    return
        elif op in ("floor", "ceil"):
            # floor and ceil of an integral value (or inf, nan, a signed zero) return it.
            x = ops[0]
            if self.same_float(x, shape) and self.low.ops[x] in ("floor", "ceil"):
                self.rep[t] = x
        elif op in ("and", "or"):
            # x and <all true> = truth(x); x and <all false> = false (dually for or).
            for x, f in ((ops[0], ops[1]), (ops[1], ops[0])):
                tv = self.truth(f)
                if tv is None:
                    continue
                if tv == (op == "or"):
                    self.set_fixed(t, np.full(shape, 1.0 if tv else 0.0))
                elif self.is_bool_array(x) and self.shape_of(x) == shape:
                    self.rep[t] = x
                return
        elif op == "where":
            tv = self.truth(ops[0])
            if tv is None:
                return
            p = ops[1] if tv else ops[2]
            if self.kind[p] == _FIXED:
                self.set_fixed(t, np.broadcast_to(self.value[p], shape))
            elif self.same_float(p, shape):
                self.rep[t] = p
        elif op == "ne":
            # where(c, a, b) != 0 with fixed scalars a (true) and b (zero) is the truth of c.
            for x, z in ((ops[0], ops[1]), (ops[1], ops[0])):
                zv = self.value.get(z) if self.kind[z] == _FIXED else None
                if not (isinstance(zv, float) and zv == 0.0):
                    continue
                if self.kind[x] != _ARRAY or self.low.ops[x] != "where":
                    continue
                c, a, b = self.opnds[x]
                if (
                    self.kind[a] == _FIXED
                    and self.kind[b] == _FIXED
                    and isinstance(self.value[a], float)
                    and isinstance(self.value[b], float)
                    and self.value[a] != 0.0
                    and self.value[b] == 0.0
                    and self.is_bool_array(c)
                    and self.shape_of(c) == shape
                ):
                    self.rep[t] = c
                    return

    def set_fixed(self, t: int, v: Any) -> None:
        a = np.asarray(v, dtype=np.float64)
        self.kind[t] = _FIXED
        if a.ndim == 0:
            self.value[t] = float(a)
        else:
            a = a.copy()
            a.flags.writeable = False
            self.value[t] = a
            self.vshape[t] = a.shape

    def shape_of(self, t: int) -> tuple[int, ...]:
        return self.vshape.get(t, ())

    def const_name(self, value: np.ndarray, key: Any) -> str:
        name = self.const_names.get(key)
        if name is None:
            name = f"_kp_k{len(self.consts)}"
            self.consts[name] = value
            self.const_names[key] = name
        return name

    def batches(self, live: list[int]) -> tuple[list[_Batch], dict[int, tuple[int, int]]]:
        """Groups of independent arithmetic instructions computed as one NumPy operation on
        stacked operands (e.g. the per-configuration coefficients of several fitted metrics
        times the same N): element for element the same IEEE operations, so the same bits.

        A group shares the operation and, per operand position, either one operand (``x``),
        fixed arrays of the full shape (stacked into one constant, ``K``), or rows of an earlier
        group, row ``start + i * step`` for member i (``B``; a view of that group's result).
        Returns the groups and each member's (group, row).
        """
        shape = self.shape
        if not shape:
            return [], {}
        low = self.low
        groups: list[_Batch] = []
        member_of: dict[int, tuple[int, int]] = {}
        cand = [
            t
            for t in live
            if self.kind[t] == _ARRAY and low.ops[t] in _BATCH_OPS and self.vshape[t] == shape
        ]

        def is_k(o: int) -> bool:  # fixed, and of the full shape or a scalar
            v = self.value.get(o) if self.kind[o] == _FIXED else None
            return isinstance(v, float) or (isinstance(v, np.ndarray) and v.shape == shape)

        changed = True
        while changed:
            changed = False
            # Shared operands and stacked constants.
            by_sig: dict[tuple, list[int]] = {}
            for t in cand:
                if t in member_of:
                    continue
                descs = tuple("K" if is_k(o) else ("x", o) for o in self.opnds[t])
                if "K" in descs:
                    by_sig.setdefault((low.ops[t], descs), []).append(t)
            # Rows of earlier groups: member i reads row start + i * step of each such group.
            by_rows: dict[tuple, list[tuple[tuple[int, ...], int]]] = {}
            for t in cand:
                if t in member_of:
                    continue
                descs_r: list[Any] = []
                rows: list[int] = []
                for o in self.opnds[t]:
                    if o in member_of:
                        g, r = member_of[o]
                        descs_r.append(("B", g))
                        rows.append(r)
                    else:
                        descs_r.append("K" if is_k(o) else ("x", o))
                if rows:
                    by_rows.setdefault((low.ops[t], tuple(descs_r)), []).append((tuple(rows), t))
            for (op, descs), members in by_sig.items():
                if len(members) >= 2:
                    self._add_batch(groups, member_of, op, descs, members)
                    changed = True
            for (op, descs), rowed in by_rows.items():
                if len(rowed) < 2 or any(t in member_of for _, t in rowed):
                    continue
                rowed.sort()
                slices = []
                for p in range(len(rowed[0][0])):
                    rs = [rows[p] for rows, _ in rowed]
                    step = rs[1] - rs[0]
                    if step < 1 or any(b - a != step for a, b in zip(rs, rs[1:])):
                        break
                    slices.append((rs[0], step))
                else:
                    it = iter(slices)
                    descs = tuple(
                        d if d == "K" or d[0] != "B" else ("B", d[1], *next(it)) for d in descs
                    )
                    self._add_batch(groups, member_of, op, descs, [t for _, t in rowed])
                    changed = True
        return groups, member_of

    def _add_batch(
        self,
        groups: list[_Batch],
        member_of: dict[int, tuple[int, int]],
        op: str,
        descs: tuple,
        members: list[int],
    ) -> None:
        g = len(groups)
        stacked: dict[int, np.ndarray] = {}
        for p, d in enumerate(descs):
            if d == "K":
                k = np.stack(
                    [np.broadcast_to(self.value[self.opnds[t][p]], self.shape) for t in members]
                )
                k.flags.writeable = False
                stacked[p] = k
        groups.append(_Batch(op, descs, members, stacked))
        for i, t in enumerate(members):
            member_of[t] = (g, i)

    def build(
        self, outputs: Sequence[str] | None = None, as_tuple: bool = False
    ) -> Callable[..., Any]:
        low = self.low
        with np.errstate(all="ignore"):
            for t in low.live(self.roots):
                self.fold(t)
        names = tuple(self.prog.outputs if outputs is None else outputs)
        by_name = dict(zip(self.prog.outputs, self.roots))
        roots = [self.rep.get(by_name[n], by_name[n]) for n in names]
        # What is left to compute: the non-fixed instructions the requested outputs depend on.
        need: set[int] = set()
        stack = list(roots)
        while stack:
            t = stack.pop()
            if t in need or self.kind[t] == _FIXED:
                continue
            need.add(t)
            stack.extend(self.opnds[t])
        live = sorted(need)
        is_bool = {t for t in live if self.is_bool_array(t)}
        remaining = [n for n in self.prog.inputs if n not in self.fixed]

        groups, member_of = self.batches(live)
        # A group is computed where its first member (in program order) was: every member's
        # operands, and the earlier groups they read, are ready there.
        first = {min(g.members): gi for gi, g in enumerate(groups)}
        # Members read one by one (by an unbatched instruction, as a group's shared operand, or
        # as an output) are bound to their row of the group's result (a view).
        as_row: set[int] = {t for t in roots if t in member_of}
        for t in live:
            if t not in member_of:
                as_row.update(o for o in self.opnds[t] if o in member_of)
        for g in groups:
            as_row.update(d[1] for d in g.descs if d != "K" and d[0] == "x" and d[1] in member_of)

        # Scalars read by two or more array operations are converted to 0-d arrays once: NumPy
        # takes a 0-d array operand faster than a Python float (same float64 value and result).
        vector_uses: dict[int, int] = {}
        for t in live:
            if self.kind[t] != _ARRAY or t in member_of:
                continue
            op = low.ops[t]
            for i, o in enumerate(self.opnds[t]):
                if self.kind[o] == _SCALAR and not (op in _LOGICAL or (op == "where" and i == 0)):
                    vector_uses[o] = vector_uses.get(o, 0) + 1
        for g in groups:
            for d in g.descs:
                if d != "K" and d[0] == "x" and self.kind[d[1]] == _SCALAR:
                    vector_uses[d[1]] = vector_uses.get(d[1], 0) + 1
        as_0d = {o for o, n in vector_uses.items() if n >= 2}

        def fx(t: int, vector: bool = False) -> str:  # a float operand
            k = self.kind[t]
            if k == _FIXED:
                v = self.value[t]
                if not isinstance(v, float):
                    return self.const_name(v, t)
                # NumPy takes a 0-d array operand faster than a Python float (same value).
                return (
                    self.const_name(np.array(v), ("0d", _float_key(v))) if vector else _py_float(v)
                )
            if t in is_bool:
                return f"_kp_t{t}f"
            return f"_kp_t{t}v" if vector and t in as_0d else f"_kp_t{t}"

        def bx(t: int) -> str:  # a truth-value operand
            if t in is_bool:
                return f"_kp_t{t}"
            if self.kind[t] == _FIXED and not isinstance(self.value[t], float):
                truth = np.not_equal(self.value[t], 0.0)
                truth.flags.writeable = False
                return self.const_name(truth, ("truth", t))
            if self.kind[t] == _ARRAY:
                return f"_np_not_equal({fx(t)}, 0.0)"
            return f"({fx(t)} != 0.0)"

        body: list[tuple[str, str, int | None]] = []  # (target, expression, instruction)
        needs_float: set[int] = set()
        for t in live:
            op, ops = low.ops[t], self.opnds[t]
            k = self.kind[t]
            if t in member_of:
                gi = first.get(t)
                if gi is None:
                    continue  # computed with its group, at the group's first member
                g = groups[gi]
                fields = {}
                for i, d in enumerate(g.descs):
                    if d == "K":
                        fields["abc"[i]] = self.const_name(g.stacked[i], ("batch", gi, i))
                    elif d[0] == "B":
                        _, src, start, step = d
                        stop = start + step * len(g.members)
                        whole = start == 0 and step == 1 and stop == len(groups[src].members)
                        fields["abc"[i]] = (
                            f"_kp_b{src}" if whole else f"_kp_b{src}[{start}:{stop}:{step}]"
                        )
                    else:
                        fields["abc"[i]] = fx(d[1], vector=True)
                        if d[1] in is_bool:
                            needs_float.add(d[1])
                body.append((f"_kp_b{gi}", _NP_OPS[g.op].format(**fields), None))
                body.extend(
                    (f"_kp_t{m}", f"_kp_b{gi}[{r}]", None)
                    for r, m in enumerate(g.members)
                    if m in as_row
                )
                continue
            if op == "input":
                body.append((f"_kp_t{t}", f"_kp_float({low.data[t]})", t))
                continue
            if k == _SCALAR:
                fields = {"abc"[i]: fx(o) for i, o in enumerate(ops)}
                if op == "table":
                    fields["T"] = self.const_name(low.data[t], ("table", t))
                body.append((f"_kp_t{t}", _PY_OPS[op].format(**fields), t))
                continue
            fields = {}
            for i, o in enumerate(ops):
                if op in _LOGICAL or (op == "where" and i == 0):
                    fields["b" + "abc"[i]] = bx(o)
                else:
                    fields["abc"[i]] = fx(o, vector=True)
                    if o in is_bool:
                        needs_float.add(o)
            if op == "table":
                fields["T"] = self.const_name(
                    np.asarray(low.data[t], dtype=np.float64), ("table", t)
                )
            template = _NP_OPS[op]
            if op in ("min", "max"):
                # With a fixed operand free of nan and of zeros, `a if a <= b else b` is exactly
                # fmin(a, K) (a nan gives K) and minimum(K, b) (a nan b propagates); equal values
                # are then the same bits. Likewise for max. One ufunc instead of two and a where.
                if self.plain_const(ops[1]):
                    template = "_np_fmin({a}, {b})" if op == "min" else "_np_fmax({a}, {b})"
                elif self.plain_const(ops[0]):
                    template = "_np_minimum({a}, {b})" if op == "min" else "_np_maximum({a}, {b})"
            body.append((f"_kp_t{t}", template.format(**fields), t))
        returns: list[str] = []
        constant_outputs: dict[str, np.ndarray] = {}
        for name, t in zip(names, roots):
            k = self.kind[t]
            if k == _FIXED:
                full = np.array(np.broadcast_to(self.value[t], self.shape), dtype=np.float64)
                full.flags.writeable = False
                expr = self.const_name(full, ("out", t))
                constant_outputs[name] = self.consts[expr]
            elif k == _SCALAR:
                expr = f"_np_full(_kp_shape, {fx(t)})"
            else:
                if t in is_bool:
                    needs_float.add(t)
                expr = fx(t)
                if self.shape_of(t) != self.shape:
                    expr = f"_np_broadcast_to({expr}, _kp_shape).copy()"
            returns.append(expr if as_tuple else f"{name!r}: {expr}")
        # Insert 1.0/0.0 conversions right after the bool arrays that need them, and 0-d copies
        # right after the scalars read by several array operations.
        lines: list[str] = []
        for target, rhs, t in body:
            lines.append(f"{target} = {rhs}")
            if t in needs_float:
                lines.append(f"_kp_t{t}f = _np_multiply(_kp_t{t}, 1.0)")
            if t in as_0d:
                lines.append(f"_kp_t{t}v = _np_array(_kp_t{t})")
        # Drop each temporary right after its last use: freed arrays go back to NumPy's cache of
        # small allocations, so the next results reuse them instead of growing the heap (this
        # is a large part of the cost for arrays of tens of elements).
        arrays = (
            {f"_kp_t{t}" for t in live if self.kind[t] == _ARRAY}
            | {f"_kp_t{t}{s}" for t in live for s in "fv"}
            | {f"_kp_b{gi}" for gi in range(len(groups))}
        )
        returned = set(_TEMP_RE.findall(" ".join(returns)))
        last: dict[str, int] = {}
        for i, ln in enumerate(lines):
            for name in _TEMP_RE.findall(ln.split(" = ", 1)[1]):
                last[name] = i
        dead_after: dict[int, list[str]] = {}
        for name, i in last.items():
            if name not in returned and name in arrays:
                dead_after.setdefault(i, []).append(name)
        lines = [
            ln2
            for i, ln in enumerate(lines)
            for ln2 in (
                [ln, "del " + ", ".join(sorted(dead_after[i]))] if i in dead_after else [ln]
            )
        ]
        params = ", ".join(remaining)
        src = [f"def _kp_specialized({params}):"]
        ret = (
            "return (" + "".join(r + ", " for r in returns) + ")"
            if as_tuple
            else "return {" + ", ".join(returns) + "}"
        )
        if any(self.kind[t] == _ARRAY for t in live):
            # NumPy's floating-point errors are ignored (IEEE results, no warnings) for the body.
            src.append("    _kp_tok = _np_errors_ignore()")
            src.append("    try:")
            src.extend("        " + ln for ln in lines)
            src.append("    finally:")
            src.append("        _np_errors_restore(_kp_tok)")
        else:
            src.extend("    " + ln for ln in lines)
        src.append("    " + ret)
        source = "\n".join(src) + "\n"
        ns: dict[str, Any] = {**_PY_HELPER_NS, **_NP_NS, **self.consts, "_kp_shape": self.shape}
        exec(compile(source, f"<klaraptor specialized {self.prog.name}>", "exec"), ns)
        fn = ns["_kp_specialized"]
        fn.source = source
        fn.inputs = tuple(remaining)
        fn.outputs = names
        fn.constant_outputs = MappingProxyType(constant_outputs)
        return fn


# -- code generation -----------------------------------------------------------------------------
class _CodeGen:
    """Shared by the C and Python generators: per-function lowering of the live call tree."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.lowered: dict[str | None, tuple[_Lowered, list[int], list[int]]] = {}
        order: list[str] = []

        def visit(key: str | None) -> None:
            low = _Lowered(prog._registry, inline=False)
            roots = low.program(prog if key is None else prog._registry[key], None, label=True)
            live = low.live(roots)
            self.lowered[key] = (low, roots, live)
            for t in live:
                callee = low.data[t]
                if low.ops[t] == "call" and callee not in self.lowered:
                    visit(callee)
            if key is not None:
                order.append(key)

        visit(None)
        # Callees before callers, so C needs no prototypes; only sub-programs still live.
        self.subs = order


class _CGen(_CodeGen):
    def __init__(self, prog: Program, prefix: str) -> None:
        super().__init__(prog)
        names = _Names(_C_RESERVED)
        top = _sanitize(prog.name)
        self.fname: dict[str | None, str] = {None: names.take(prefix + top)}
        for k in sorted(self.subs):
            self.fname[k] = names.take(f"{prefix}{top}__{_sanitize(k)}")
        self.names = names

    def source(self) -> str:
        prog = self.prog
        sig_outputs = ", ".join(prog.outputs)
        head = [
            f"/* Generated by klaraptor from rational program {_c_comment(prog.name)}.",
            f" * {self.fname[None]}({', '.join(prog.inputs)}) -> {_c_comment(sig_outputs)}",
            " * Semantics: IEEE doubles; x/0 is +-inf or nan; min/max/where are comparisons.",
            " * Compile without -ffast-math and with -ffp-contract=off (implied by -std=c99 for GCC).",
            " */",
            "#include <math.h>",
            "",
        ]
        tables: list[str] = []
        funcs: list[str] = []
        for k in [*self.subs, None]:
            p = self.prog if k is None else self.prog._registry[k]
            funcs.append(self.function(p, k, tables))
        return "\n".join(head + tables + ([""] if tables else []) + funcs)

    def function(self, prog: Program, key: str | None, tables: list[str]) -> str:
        fname, static = self.fname[key], key is not None
        low, roots, live = self.lowered[key]
        tab_names: dict[tuple, str] = {}
        for vals in low.tables(live):
            tname = self.names.take(f"{fname}_tab{len(tab_names)}")
            tab_names[tuple(_float_key(v) for v in vals)] = tname
            body = ", ".join(_c_float(v) for v in vals)
            tables.append(f"static const double {tname}[{len(vals)}] = {{{body}}};")

        def name(t: int) -> str:
            op = low.ops[t]
            if t in low.labels:
                return "v_" + low.labels[t]
            if op == "const":
                return _c_float(low.data[t])
            if op == "proj":
                return f"t{low.operands[t][0]}[{low.data[t]}]"
            return f"t{t}"

        params = [f"double v_{n}" for n in prog.inputs]
        multi = len(prog.outputs) > 1
        if multi:
            params.append("double *out")
        sig = f"{'static ' if static else ''}double {fname}({', '.join(params) or 'void'})"
        lines = [sig, "{"]
        used = {o for t in live for o in low.operands[t]} | set(roots)
        for n in prog.inputs:
            if low.emit("input", n, ()) not in used:
                lines.append(f"    (void)v_{n};")
        for t in live:
            op = low.ops[t]
            if op == "input" or (op in ("const", "proj") and t not in low.labels):
                continue
            ops = [name(o) for o in low.operands[t]]
            if op == "const" or op == "proj":
                rhs = (
                    _c_float(low.data[t])
                    if op == "const"
                    else f"t{low.operands[t][0]}[{low.data[t]}]"
                )
            elif op == "call":
                callee = self.prog._registry[low.data[t]]
                if len(callee.outputs) > 1:
                    lines.append(f"    double t{t}[{len(callee.outputs)}];")
                    lines.append(
                        f"    (void){self.fname[low.data[t]]}({', '.join([*ops, f't{t}'])});"
                    )
                    continue
                rhs = f"{self.fname[low.data[t]]}({', '.join(ops)})"
            else:
                fields = {"abc"[i]: s for i, s in enumerate(ops)}
                if op == "table":
                    vals = low.data[t]
                    fields["T"] = tab_names[tuple(_float_key(v) for v in vals)]
                    fields["N"] = _c_float(float(len(vals)))
                rhs = _C_OPS[op].format(**fields)
            lines.append(f"    double {name(t)} = {rhs};")
        if multi:
            lines.append("    if (out) {")
            lines.extend(f"        out[{i}] = {name(t)};" for i, t in enumerate(roots))
            lines.append("    }")
        lines.append(f"    return {name(roots[0])};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _c_comment(s: str) -> str:
    return s.replace("*/", "* /")


class _PyGen(_CodeGen):
    def __init__(self, prog: Program, prefix: str) -> None:
        super().__init__(prog)
        names = _Names(_PY_RESERVED)
        top = _sanitize(prog.name)
        self.fname: dict[str | None, str] = {None: names.take(prefix + top)}
        for k in sorted(self.subs):
            self.fname[k] = names.take(f"_kp_f_{top}__{_sanitize(k)}", internal=True)
        self.names = names
        self.tables: dict[tuple, str] = {}
        self.table_defs: list[str] = []

    def module(self) -> str:
        prog = self.prog
        funcs = [
            self.function(self.prog if k is None else self.prog._registry[k], k)
            for k in [*self.subs, None]
        ]
        outs = ", ".join(prog.outputs)
        ret = "a float" if len(prog.outputs) == 1 else f"the tuple ({outs})"
        doc = [
            '"""Generated by klaraptor from rational program '
            + repr(prog.name).replace('"""', "'''")
            + ".",
            "",
            f"{self.fname[None]}({', '.join(prog.inputs)}) returns {ret}.",
            "Semantics: IEEE doubles; x/0 is +-inf or nan (never an exception); min/max/where are",
            "defined by comparisons, exactly as in klaraptor's NumPy evaluation and generated C.",
            '"""',
            "",
            "import math",
        ]
        return "\n".join(doc + [_PY_HELPERS, *self.table_defs, "", *funcs])

    def function(self, prog: Program, key: str | None) -> str:
        fname = self.fname[key]
        low, roots, live = self.lowered[key]

        def name(t: int) -> str:
            op = low.ops[t]
            if t in low.labels:
                return low.labels[t]
            if op == "const":
                return _py_float(low.data[t])
            if op == "proj":
                return f"_kp_t{low.operands[t][0]}[{low.data[t]}]"
            return f"_kp_t{t}"

        lines = [f"def {fname}({', '.join(prog.inputs)}):"]
        used = {o for t in live for o in low.operands[t]} | set(roots)
        for t in live:
            op = low.ops[t]
            if op == "input":
                if t in used:
                    lines.append(f"    {name(t)} = _kp_float({low.data[t]})")
                continue
            if op in ("const", "proj") and t not in low.labels:
                continue
            ops = [name(o) for o in low.operands[t]]
            if op == "const":
                rhs = _py_float(low.data[t])
            elif op == "proj":
                rhs = f"_kp_t{low.operands[t][0]}[{low.data[t]}]"
            elif op == "call":
                rhs = f"{self.fname[low.data[t]]}({', '.join(ops)})"
            else:
                fields = {"abc"[i]: s for i, s in enumerate(ops)}
                if op == "table":
                    fields["T"] = self.table(low.data[t])
                rhs = _PY_OPS[op].format(**fields)
            lines.append(f"    {name(t)} = {rhs}")
        if len(roots) == 1:
            lines.append(f"    return {name(roots[0])}")
        else:
            lines.append(f"    return ({', '.join(name(t) for t in roots)},)")
        return "\n".join(lines) + "\n\n"

    def table(self, vals: tuple[float, ...]) -> str:
        key = tuple(_float_key(v) for v in vals)
        tname = self.tables.get(key)
        if tname is None:
            tname = self.names.take(f"_kp_T{len(self.tables)}", internal=True)
            self.tables[key] = tname
            self.table_defs.append(f"{tname} = ({', '.join(_py_float(v) for v in vals)},)")
        return tname
