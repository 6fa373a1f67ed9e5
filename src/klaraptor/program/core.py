"""`Program`: validation, call analysis, binding and serialisation.

Evaluation, specialisation and code generation live in their own modules; `Program` calls them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from klaraptor.core.errors import ProgramError
from klaraptor.program.emit_c import c_source
from klaraptor.program.emit_py import python_module
from klaraptor.program.evaluate import evaluate_program
from klaraptor.program.expr import NAME_RE, Expr, ExprLike, as_expr, check_var_name
from klaraptor.program.specialize import SpecializedFunction, specialize_program


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
        self.inputs: tuple[str, ...] = tuple(check_var_name(n, f"{where_}: input") for n in inputs)
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
            check_var_name(target, f"{where_}: assigned name")
            if target in defined:
                raise ProgramError(f"{where_}: {target!r} is defined twice")
            expr = as_expr(expr)
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
        return evaluate_program(self, {**(values or {}), **inputs}, intermediates)

    # -- fast path ---------------------------------------------------------------------------
    def specialize(
        self,
        fixed: Mapping[str, Any],
        *,
        outputs: Sequence[str] | None = None,
        as_tuple: bool = False,
    ) -> SpecializedFunction:
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
        return specialize_program(self, fixed, outputs, as_tuple)

    # -- (b) Python --------------------------------------------------------------------------
    def to_python(self, prefix: str = "") -> str:
        """A standalone Python module (stdlib ``math`` only) with one function per
        (sub-)program; see the `klaraptor.program` docstring for the naming scheme."""
        self._require_bound("generate Python for")
        _check_prefix(prefix)
        return python_module(self, prefix)

    # -- (c) C -------------------------------------------------------------------------------
    def to_c(self, prefix: str = "kp_") -> str:
        """Standalone C99 source (``<math.h>`` only) with one function per (sub-)program;
        see the `klaraptor.program` docstring for the naming scheme and the required
        compiler flags."""
        self._require_bound("generate C for")
        _check_prefix(prefix)
        return c_source(self, prefix)


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
    if not isinstance(prefix, str) or (prefix and not NAME_RE.match(prefix)):
        raise ProgramError(f"a name prefix must be empty or an identifier, got {prefix!r}")
