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

Modules: `expr` (Expr and its constructors), `parse` (parse_expr), `core` (Program), `lower`
(the instruction form the backends share), then the backends `evaluate`, `specialize`,
`emit_py` and `emit_c`. Imports run in that order only.

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

from klaraptor.program.core import Program
from klaraptor.program.expr import (
    Expr,
    call,
    ceil,
    const,
    floor,
    maximum,
    minimum,
    table,
    var,
    where,
)
from klaraptor.program.parse import parse_expr

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
