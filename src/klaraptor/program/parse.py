"""`parse_expr`: Python-syntax strings such as ``"ceil(N / bx)"`` to `Expr`."""

from __future__ import annotations

import ast
from collections.abc import Collection

from klaraptor.core.errors import ProgramError
from klaraptor.program.expr import (
    MAX_POWER,
    Expr,
    ceil,
    const,
    floor,
    maximum,
    minimum,
    var,
    where,
)

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
                if not 0 <= k.value <= MAX_POWER:
                    raise self.fail(node, f"the exponent of ** must be in 0..{MAX_POWER}")
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
            acc = self.visit(node.values[0])
            for operand in node.values[1:]:
                acc = Expr(op, (acc, self.visit(operand)))
            return acc
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
