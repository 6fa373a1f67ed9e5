"""Lowering shared by the backends: programs as value-numbered straight-line instructions.

The backends read a program only through `ProgramLike`, so they do not import `core`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from klaraptor.program.expr import Expr, float_key


class ProgramLike(Protocol):
    """What the backends read of a `Program`."""

    @property
    def name(self) -> str: ...

    @property
    def inputs(self) -> tuple[str, ...]: ...

    @property
    def assignments(self) -> tuple[tuple[str, Expr], ...]: ...

    @property
    def outputs(self) -> tuple[str, ...]: ...

    @property
    def _registry(self) -> Mapping[str, ProgramLike]: ...


def sanitize(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", s)


class Names:
    """Hands out unique identifiers deterministically (see the `klaraptor.program` docstring)."""

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


class Lowered:
    """A value-numbered instruction list. Instruction ``t`` is ``(ops[t], data[t], operands[t])``;
    ops are those of `Expr` plus ``input``, ``call`` (all outputs of a callee) and ``proj``."""

    def __init__(self, registry: Mapping[str, ProgramLike], inline: bool) -> None:
        self.registry = registry
        self.inline = inline
        self.ops: list[str] = []
        self.data: list[Any] = []
        self.operands: list[tuple[int, ...]] = []
        self.labels: dict[int, str] = {}
        self._vn: dict[tuple, int] = {}

    def emit(self, op: str, data: Any, operands: tuple[int, ...]) -> int:
        if op == "const":
            dkey: Any = float_key(data)
        elif op == "table":
            dkey = tuple(float_key(v) for v in data)
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

    def program(self, prog: ProgramLike, args: Sequence[int] | None, label: bool) -> list[int]:
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
                out.setdefault(tuple(float_key(v) for v in self.data[t]), self.data[t])
        return list(out.values())


class CodeGen:
    """Shared by the C and Python generators: per-function lowering of the live call tree."""

    def __init__(self, prog: ProgramLike) -> None:
        self.prog = prog
        self.lowered: dict[str | None, tuple[Lowered, list[int], list[int]]] = {}
        order: list[str] = []

        def visit(key: str | None) -> None:
            low = Lowered(prog._registry, inline=False)
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

    def name_functions(
        self, names: Names, prefix: str, sub_prefix: str, *, internal: bool = False
    ) -> None:
        """Names each generated function from `names`: the program `<prefix><name>`, each
        sub-program `<sub_prefix><name>__<sub-program>` (`internal` names for those)."""
        top = sanitize(self.prog.name)
        self.fname: dict[str | None, str] = {None: names.take(prefix + top)}
        for k in sorted(self.subs):
            self.fname[k] = names.take(f"{sub_prefix}{top}__{sanitize(k)}", internal)
        self.names = names
