"""`Program.specialize`: fixed inputs folded into generated Python/NumPy code (the fast path).

The program is inlined into value-numbered instructions; those that depend only on fixed inputs
are evaluated once (`_Specializer.fold`), exact IEEE identities forward values (`forward`),
independent arithmetic over the fixed shape is stacked into single NumPy calls (`batches`), and
`_Writer` turns what is left into the source of one function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from klaraptor.core.errors import ProgramError
from klaraptor.program.emit_py import PY_HELPER_NS, PY_OPS, py_float
from klaraptor.program.evaluate import NP_BINARY, NP_UNARY, coerce_inputs, np_bool, np_table
from klaraptor.program.expr import COMPARISONS, LOGICAL, float_key
from klaraptor.program.lower import Lowered, ProgramLike
from klaraptor.program.np_code import NP_NS, NP_OPS
from klaraptor.program.runtime_bounds import (
    _ARRAY,
    _CHOICE,
    _DECIDABLE,
    _FIXED,
    _SCALAR,
    RuntimeBounds,
)

_BOOL_OPS = frozenset((*COMPARISONS, *LOGICAL))


class SpecializedFunction(Protocol):
    """What `Program.specialize` returns: the generated function, with what it was made of."""

    source: str  # the generated Python source
    inputs: tuple[str, ...]  # the inputs left to pass, in order
    outputs: tuple[str, ...]
    constant_outputs: Mapping[str, np.ndarray]  # outputs that depend on fixed inputs only

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


def specialize_program(
    prog: ProgramLike,
    fixed: Mapping[str, Any],
    outputs: Sequence[str] | None,
    as_tuple: bool,
) -> SpecializedFunction:
    """`Program.specialize` of a bound program (see there)."""
    unknown = sorted(set(fixed) - set(prog.inputs))
    if unknown:
        raise ProgramError(f"specialize: {unknown} are not inputs of program {prog.name!r}")
    if outputs is not None:
        outputs = tuple(outputs)
        bad = [o for o in outputs if o not in prog.outputs]
        if bad or len(set(outputs)) != len(outputs) or not outputs:
            raise ProgramError(
                f"specialize: outputs {list(outputs)} must be distinct outputs of program "
                f"{prog.name!r} (outputs: {list(prog.outputs)})"
            )
    values = coerce_inputs(prog, dict(fixed), partial=True)
    try:
        shape = np.broadcast_shapes(*(a.shape for a in values.values()))
    except ValueError as exc:
        raise ProgramError(f"specialize: fixed inputs do not broadcast together: {exc}") from None
    return _Specializer(prog, values, shape).build(outputs, as_tuple)


# Comparisons whose truth implies that neither operand is nan.
_ORDERED = frozenset(("lt", "le", "gt", "ge", "eq"))
_TEMP_RE = re.compile(r"\b_kp_(?:t\d+[fv]?|b\d+)\b")
# Elementwise arithmetic that `_Specializer.batches` may compute for several instructions at once.
_BATCH_OPS = frozenset(("add", "sub", "mul", "div", "floordiv", "mod", "neg", "floor", "ceil"))


def _same_bits(a: np.ndarray) -> bool:
    """Every element of float64 array ``a`` has the same bits (nan payloads, zero signs)."""
    bits = np.ascontiguousarray(a).reshape(-1).view(np.int64)
    return bool(np.all(bits == bits[0]))


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
    """Constant folding, forwarding and batching of one program over fixed inputs."""

    def __init__(
        self, prog: ProgramLike, fixed: dict[str, np.ndarray], shape: tuple[int, ...]
    ) -> None:
        self.prog = prog
        self.fixed = fixed
        self.shape = shape
        self.low = Lowered(prog._registry, inline=True)
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
        # Choices: (the scalar whose truth picks, (value if true, value if false)).
        self.choice: dict[int, tuple[int, tuple[np.ndarray, np.ndarray]]] = {}

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
            self.set_fixed(t, self.evaluate(t, [self.value[o] for o in ops]))
            return
        if (
            op == "where"
            and kinds == [_SCALAR, _FIXED, _FIXED]
            and any(isinstance(self.value[o], np.ndarray) for o in ops[1:])
        ):
            # A scalar picks one of two fixed arrays: nothing to compute per call but the pick.
            self.set_choice(t, ops[0], (self.value[ops[1]], self.value[ops[2]]))
            return
        picks = {self.choice[o][0] for o, k in zip(ops, kinds) if k == _CHOICE}
        if len(picks) == 1 and all(k in (_FIXED, _CHOICE) for k in kinds):
            # Fixed arrays and choices by one scalar: both outcomes are computed now.
            alts = [
                self.evaluate(
                    t,
                    [
                        self.choice[o][1][j] if k == _CHOICE else self.value[o]
                        for o, k in zip(ops, kinds)
                    ],
                )
                for j in (0, 1)
            ]
            self.set_choice(t, picks.pop(), (alts[0], alts[1]))
            return
        array = any(
            k in (_ARRAY, _CHOICE) or (k == _FIXED and isinstance(self.value[o], np.ndarray))
            for o, k in zip(ops, kinds)
        )
        self.kind[t] = _ARRAY if array else _SCALAR
        if array:
            self.vshape[t] = np.broadcast_shapes(*(self.shape_of(o) for o in ops))
            self.forward(t, op, ops)

    def evaluate(self, t: int, args: list[Any]) -> Any:
        """Instruction ``t`` on fixed operand values (as `Program.evaluate` computes it)."""
        op = self.low.ops[t]
        if op in NP_BINARY:
            return NP_BINARY[op](*args)
        if op in NP_UNARY:
            return NP_UNARY[op](*args)
        if op == "where":
            return np.where(np_bool(args[0]), args[1], args[2])
        return np_table(args[0], np.asarray(self.low.data[t]))  # table

    def set_choice(self, t: int, pick: int, alts: tuple[Any, Any]) -> None:
        """``t`` is ``alts[0]`` where the scalar ``pick`` is true (nonzero or nan), else
        ``alts[1]``; fixed when the two are the same bits."""
        with np.errstate(all="ignore"):
            a = np.asarray(alts[0], dtype=np.float64)
            b = np.asarray(alts[1], dtype=np.float64)
        shape = np.broadcast_shapes(a.shape, b.shape)
        a = np.ascontiguousarray(np.broadcast_to(a, shape))
        b = np.ascontiguousarray(np.broadcast_to(b, shape))
        if a.tobytes() == b.tobytes():
            self.set_fixed(t, a)
            return
        a.flags.writeable = False
        b.flags.writeable = False
        self.kind[t] = _CHOICE
        self.vshape[t] = shape
        self.choice[t] = (pick, (a, b))

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
            if op == "and":
                # x and (y == y) = x where x's truth implies y is not nan (x is a comparison of
                # y other than !=, or a conjunction of one): the grid check "g == floor(g)"
                # left as "g == g" once floor(ceil(..)) is forwarded.
                for x, f in ((ops[0], ops[1]), (ops[1], ops[0])):
                    fo = self.opnds.get(f, ())
                    if (
                        self.kind[f] == _ARRAY
                        and self.low.ops[f] == "eq"
                        and fo[0] == fo[1]
                        and self.is_bool_array(x)
                        and self.shape_of(x) == shape
                        and self.implies_not_nan(x, fo[0], 16)
                    ):
                        self.rep[t] = x
                        return
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

    def implies_not_nan(self, x: int, y: int, depth: int) -> bool:
        """The truth of bool array ``x`` implies that ``y`` is not nan."""
        if depth <= 0 or self.kind[x] != _ARRAY:
            return False
        op, xo = self.low.ops[x], self.opnds[x]
        if op in _ORDERED:
            return y in xo
        if op == "and":
            return any(self.implies_not_nan(o, y, depth - 1) for o in xo)
        return False

    def set_fixed(self, t: int, v: Any) -> None:
        a = np.asarray(v, dtype=np.float64)
        self.kind[t] = _FIXED
        if a.ndim == 0:
            self.value[t] = float(a)
        elif a.size and _same_bits(a):
            # Every element the same bits: the scalar computes the same per element (NumPy
            # broadcasts it), and operations on it alone become scalar ones.
            self.value[t] = float(a.reshape(-1)[0])
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
                    sliced = tuple(
                        d if d == "K" or d[0] != "B" else ("B", d[1], *next(it)) for d in descs
                    )
                    self._add_batch(groups, member_of, op, sliced, [t for _, t in rowed])
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
    ) -> SpecializedFunction:
        """Fold, find what is left to compute for ``outputs``, and write it as one function."""
        with np.errstate(all="ignore"):
            for t in self.low.live(self.roots):
                self.fold(t)
        names = tuple(self.prog.outputs if outputs is None else outputs)
        by_name = dict(zip(self.prog.outputs, self.roots))
        roots = [self.rep.get(by_name[n], by_name[n]) for n in names]
        return _Writer(self, self.residual(roots), roots).function(names, as_tuple)

    def residual(self, roots: list[int]) -> list[int]:
        """The non-fixed instructions the roots depend on, in program order."""
        need: set[int] = set()
        stack = list(roots)
        while stack:
            t = stack.pop()
            if t in need or self.kind[t] == _FIXED:
                continue
            need.add(t)
            stack.extend((self.choice[t][0],) if self.kind[t] == _CHOICE else self.opnds[t])
        return sorted(need)


class _Writer(RuntimeBounds):
    """Writes and compiles the specialised function for the residual instructions ``live``."""

    def __init__(self, spec: _Specializer, live: list[int], roots: list[int]) -> None:
        self.spec = spec
        self.live = live
        self.roots = roots
        self.is_bool = {t for t in live if spec.is_bool_array(t)}
        self.groups, self.member_of = spec.batches(live)
        # A group is computed where its first member (in program order) was: every member's
        # operands, and the earlier groups they read, are ready there.
        self.first = {min(g.members): gi for gi, g in enumerate(self.groups)}
        self.as_row = self.rows_read_singly()
        self.as_0d = self.shared_scalars()
        self.needs_float: set[int] = set()  # bool arrays also needed as 1.0/0.0
        # Run-time bounds (see `bounds`): their names per instruction, and the statements that
        # compute them, written before the statement that needs them.
        self.bound_names: dict[int, tuple[str, str] | None] = {}
        self.pre: list[tuple[str, str, int | None]] = []
        # Bool arrays that may be, at run time, the shared all-true or all-false array of their
        # shape (`whole`): their users test for those by identity.
        self.may_be_whole: set[int] = set()

    def function(self, names: tuple[str, ...], as_tuple: bool) -> SpecializedFunction:
        body = self.body()
        returns, constant_outputs = self.returns(names, as_tuple)
        lines = self.release_dead(self.with_conversions(body), returns)
        remaining = [n for n in self.spec.prog.inputs if n not in self.spec.fixed]
        source = self.source(remaining, lines, returns, as_tuple)
        spec = self.spec
        ns: dict[str, Any] = {**PY_HELPER_NS, **NP_NS, **spec.consts, "_kp_shape": spec.shape}
        exec(compile(source, f"<klaraptor specialized {spec.prog.name}>", "exec"), ns)
        fn: SpecializedFunction = ns["_kp_specialized"]
        fn.source = source
        fn.inputs = tuple(remaining)
        fn.outputs = names
        fn.constant_outputs = MappingProxyType(constant_outputs)
        return fn

    # -- planning --------------------------------------------------------------------------------
    def rows_read_singly(self) -> set[int]:
        """Group members read one by one (by an unbatched instruction, as a group's shared
        operand, or as an output): they are bound to their row of the group's result (a view)."""
        member_of = self.member_of
        as_row: set[int] = {t for t in self.roots if t in member_of}
        for t in self.live:
            if t not in member_of:
                as_row.update(o for o in self.spec.opnds[t] if o in member_of)
        for g in self.groups:
            as_row.update(d[1] for d in g.descs if d != "K" and d[0] == "x" and d[1] in member_of)
        return as_row

    def shared_scalars(self) -> set[int]:
        """Scalars read by two or more array operations: converted to 0-d arrays once, since
        NumPy takes a 0-d array operand faster than a Python float (same value and result)."""
        spec = self.spec
        vector_uses: dict[int, int] = {}
        for t in self.live:
            if spec.kind[t] != _ARRAY or t in self.member_of:
                continue
            op = spec.low.ops[t]
            for i, o in enumerate(spec.opnds[t]):
                if spec.kind[o] == _SCALAR and not (op in LOGICAL or (op == "where" and i == 0)):
                    vector_uses[o] = vector_uses.get(o, 0) + 1
        for g in self.groups:
            for d in g.descs:
                if d != "K" and d[0] == "x" and spec.kind[d[1]] == _SCALAR:
                    vector_uses[d[1]] = vector_uses.get(d[1], 0) + 1
        return {o for o, n in vector_uses.items() if n >= 2}

    # -- operands --------------------------------------------------------------------------------
    def fx(self, t: int, vector: bool = False) -> str:
        """Instruction ``t`` as a float operand (``vector``: of an array operation)."""
        spec = self.spec
        if spec.kind[t] == _FIXED:
            v = spec.value[t]
            if not isinstance(v, float):
                return spec.const_name(v, t)
            # NumPy takes a 0-d array operand faster than a Python float (same value).
            return spec.const_name(np.array(v), ("0d", float_key(v))) if vector else py_float(v)
        if t in self.is_bool:
            return f"_kp_t{t}f"
        return f"_kp_t{t}v" if vector and t in self.as_0d else f"_kp_t{t}"

    def bx(self, t: int) -> str:
        """Instruction ``t`` as a truth-value operand."""
        spec = self.spec
        if t in self.is_bool:
            return f"_kp_t{t}"
        if spec.kind[t] == _FIXED and not isinstance(spec.value[t], float):
            truth = np.not_equal(spec.value[t], 0.0)
            truth.flags.writeable = False
            return spec.const_name(truth, ("truth", t))
        if spec.kind[t] in (_ARRAY, _CHOICE):
            return f"_np_not_equal({self.fx(t)}, 0.0)"
        return f"({self.fx(t)} != 0.0)"

    def array_operand(self, o: int) -> str:
        """``o`` as a float operand of an array operation, noting a bool array's conversion."""
        if o in self.is_bool:
            self.needs_float.add(o)
        return self.fx(o, vector=True)

    # -- statements ------------------------------------------------------------------------------
    def body(self) -> list[tuple[str, str, int | None]]:
        """(target, expression, instruction) per statement, in program order."""
        spec, low = self.spec, self.spec.low
        body: list[tuple[str, str, int | None]] = []
        for t in self.live:
            if t in self.member_of:
                gi = self.first.get(t)
                if gi is not None:  # else computed with its group, at the group's first member
                    body.extend(self.group_statements(gi))
            elif low.ops[t] == "input":
                body.append((f"_kp_t{t}", f"_kp_float({low.data[t]})", t))
            elif spec.kind[t] == _CHOICE:
                pick, (a, b) = spec.choice[t]
                ka = spec.const_name(a, ("choice", t, 0))
                kb = spec.const_name(b, ("choice", t, 1))
                body.append((f"_kp_t{t}", f"({ka} if {self.fx(pick)} != 0.0 else {kb})", t))
            elif spec.kind[t] == _SCALAR:
                body.append((f"_kp_t{t}", self.scalar_expression(t), t))
            else:
                expr = self.array_expression(t)
                body.extend(self.pre)
                self.pre.clear()
                body.append((f"_kp_t{t}", expr, t))
        return body

    def group_statements(self, gi: int) -> list[tuple[str, str, int | None]]:
        """Group ``gi`` as one NumPy operation on stacked operands, then its rows read singly."""
        g = self.groups[gi]
        fields = {}
        for i, d in enumerate(g.descs):
            if d == "K":
                fields["abc"[i]] = self.spec.const_name(g.stacked[i], ("batch", gi, i))
            elif d[0] == "B":
                _, src, start, step = d
                stop = start + step * len(g.members)
                whole = start == 0 and step == 1 and stop == len(self.groups[src].members)
                fields["abc"[i]] = f"_kp_b{src}" if whole else f"_kp_b{src}[{start}:{stop}:{step}]"
            else:
                fields["abc"[i]] = self.array_operand(d[1])
        out: list[tuple[str, str, int | None]] = [
            (f"_kp_b{gi}", NP_OPS[g.op].format(**fields), None)
        ]
        out.extend(
            (f"_kp_t{m}", f"_kp_b{gi}[{r}]", None)
            for r, m in enumerate(g.members)
            if m in self.as_row
        )
        return out

    def scalar_expression(self, t: int) -> str:
        spec = self.spec
        op = spec.low.ops[t]
        fields = {"abc"[i]: self.fx(o) for i, o in enumerate(spec.opnds[t])}
        if op == "table":
            fields["T"] = spec.const_name(spec.low.data[t], ("table", t))
        return PY_OPS[op].format(**fields)

    def array_expression(self, t: int) -> str:
        spec = self.spec
        op, ops = spec.low.ops[t], spec.opnds[t]
        fields = {}
        for i, o in enumerate(ops):
            if op in LOGICAL or (op == "where" and i == 0):
                fields["b" + "abc"[i]] = self.bx(o)
            else:
                fields["abc"[i]] = self.array_operand(o)
        if op == "table":
            fields["T"] = spec.const_name(
                np.asarray(spec.low.data[t], dtype=np.float64), ("table", t)
            )
        template = NP_OPS[op]
        picked = self.picked_by_scalar(t)
        if picked is not None:
            return picked
        if op in _DECIDABLE:
            return self.decided_comparison(t, template.format(**fields))
        if op in ("and", "or", "where"):
            return self.whole_tests(t, template.format(**fields))
        if op in ("min", "max"):
            # With a fixed operand free of nan and of zeros, `a if a <= b else b` is exactly
            # fmin(a, K) (a nan gives K) and minimum(K, b) (a nan b propagates); equal values
            # are then the same bits. Likewise for max. One ufunc instead of two and a where.
            if spec.plain_const(ops[1]):
                template = "_np_fmin({a}, {b})" if op == "min" else "_np_fmax({a}, {b})"
            elif spec.plain_const(ops[0]):
                template = "_np_minimum({a}, {b})" if op == "min" else "_np_maximum({a}, {b})"
        return template.format(**fields)

    def picked_by_scalar(self, t: int) -> str | None:
        """``x and s``, ``x or s`` and ``where(s, a, b)`` with ``s`` a scalar, as a pick between
        arrays instead of an array operation: the same values, and no copy."""
        spec = self.spec
        op, ops = spec.low.ops[t], spec.opnds[t]
        shape = spec.shape_of(t)
        if op in ("and", "or"):
            for s, x in ((ops[0], ops[1]), (ops[1], ops[0])):
                if spec.kind[s] != _SCALAR or spec.shape_of(x) != shape:
                    continue
                # The outcome when s decides it: all false (and) or all true (or).
                k = self.whole(shape, op == "or")
                self.may_be_whole.add(t)
                if op == "and":
                    return f"({self.bx(x)} if {self.fx(s)} != 0.0 else {k})"
                return f"({k} if {self.fx(s)} != 0.0 else {self.bx(x)})"
            return None
        if op == "where" and spec.kind[ops[0]] == _SCALAR:
            a, b = ops[1], ops[2]
            if self.array_of_shape(a, shape) and self.array_of_shape(b, shape):
                fa, fb = self.array_operand(a), self.array_operand(b)
                return f"({fa} if {self.fx(ops[0])} != 0.0 else {fb})"
        return None

    def array_of_shape(self, o: int, shape: tuple[int, ...]) -> bool:
        """Whether operand ``o`` is, as written (`array_operand`), an array of ``shape``: a fixed
        value folded to a float is written as a 0-d array, whatever shape its instruction has."""
        spec = self.spec
        if spec.shape_of(o) != shape:
            return False
        if spec.kind[o] == _FIXED:
            v = spec.value[o]
            return isinstance(v, np.ndarray) and v.shape == shape
        return True

    def returns(
        self, names: tuple[str, ...], as_tuple: bool
    ) -> tuple[list[str], dict[str, np.ndarray]]:
        """The returned expressions (dict entries unless ``as_tuple``), and the outputs that
        depend on fixed inputs only."""
        spec = self.spec
        returns: list[str] = []
        constant_outputs: dict[str, np.ndarray] = {}
        for name, t in zip(names, self.roots):
            k = spec.kind[t]
            if k == _FIXED:
                full = np.array(np.broadcast_to(spec.value[t], spec.shape), dtype=np.float64)
                full.flags.writeable = False
                expr = spec.const_name(full, ("out", t))
                constant_outputs[name] = spec.consts[expr]
            elif k == _SCALAR:
                expr = f"_np_full(_kp_shape, {self.fx(t)})"
            elif k == _CHOICE:  # a fresh array, as every output computed per call
                expr = f"_np_broadcast_to({self.fx(t)}, _kp_shape).copy()"
            else:
                if t in self.is_bool:
                    self.needs_float.add(t)
                expr = self.fx(t)
                if spec.shape_of(t) != spec.shape:
                    expr = f"_np_broadcast_to({expr}, _kp_shape).copy()"
            returns.append(expr if as_tuple else f"{name!r}: {expr}")
        return returns, constant_outputs

    def with_conversions(self, body: list[tuple[str, str, int | None]]) -> list[str]:
        """Statement lines, with 1.0/0.0 conversions right after the bool arrays that need them
        and 0-d copies right after the scalars read by several array operations."""
        lines: list[str] = []
        for target, rhs, t in body:
            lines.append(f"{target} = {rhs}")
            if t in self.needs_float:
                lines.append(f"_kp_t{t}f = _np_multiply(_kp_t{t}, 1.0)")
            if t in self.as_0d:
                lines.append(f"_kp_t{t}v = _np_array(_kp_t{t})")
        return lines

    def release_dead(self, lines: list[str], returns: list[str]) -> list[str]:
        """Drop each temporary array right after its last use: freed arrays go back to NumPy's
        cache of small allocations, so the next results reuse them instead of growing the heap
        (a large part of the cost for arrays of tens of elements)."""
        live, kind = self.live, self.spec.kind
        arrays = (
            {f"_kp_t{t}" for t in live if kind[t] == _ARRAY}
            | {f"_kp_t{t}{s}" for t in live for s in "fv"}
            | {f"_kp_b{gi}" for gi in range(len(self.groups))}
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
        return [
            ln2
            for i, ln in enumerate(lines)
            for ln2 in (
                [ln, "del " + ", ".join(sorted(dead_after[i]))] if i in dead_after else [ln]
            )
        ]

    def source(
        self, remaining: list[str], lines: list[str], returns: list[str], as_tuple: bool
    ) -> str:
        src = [f"def _kp_specialized({', '.join(remaining)}):"]
        ret = (
            "return (" + "".join(r + ", " for r in returns) + ")"
            if as_tuple
            else "return {" + ", ".join(returns) + "}"
        )
        if any(self.spec.kind[t] == _ARRAY for t in self.live):
            # NumPy's floating-point errors are ignored (IEEE results, no warnings) for the body.
            src.append("    _kp_tok = _np_errors_ignore()")
            src.append("    try:")
            src.extend("        " + ln for ln in lines)
            src.append("    finally:")
            src.append("        _np_errors_restore(_kp_tok)")
        else:
            src.extend("    " + ln for ln in lines)
        src.append("    " + ret)
        return "\n".join(src) + "\n"
