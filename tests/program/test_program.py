"""Tests of the rational-program IR: semantics, validation, and agreement of the four backends
(NumPy evaluation, specialised code, generated Python, generated C compiled with `cc`)."""

from __future__ import annotations

import ctypes
import json
import math
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klaraptor.core.errors import ProgramError
from klaraptor.program import (
    Expr,
    Program,
    call,
    ceil,
    const,
    floor,
    maximum,
    minimum,
    parse_expr,
    table,
    var,
    where,
)

CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared"]

N, BX = var("N"), var("bx")


def ev(expr: Expr | float, **inputs: object) -> np.ndarray:
    """Evaluate a single expression as a one-output program."""
    prog = Program("e", sorted(inputs), [("r", expr)], ["r"])
    return prog.evaluate(**inputs)["r"]


def same(a: float, b: float) -> bool:
    """Bitwise-equal up to the nan payload (signed zeros must match)."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def py_module(prog: Program) -> dict:
    ns: dict = {}
    exec(compile(prog.to_python(), f"<gen {prog.name}>", "exec"), ns)
    return ns


def compile_c(sources: list[str], tmp_path: Path) -> ctypes.CDLL:
    # A fresh directory per library: overwriting a loaded .so in place would crash the process.
    where = Path(tempfile.mkdtemp(dir=tmp_path))
    src = where / "gen.c"
    src.write_text("\n".join(sources))
    lib = where / "gen.so"
    res = subprocess.run(
        [CC, *CFLAGS, "-o", str(lib), str(src), "-lm"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr + "\n" + src.read_text()
    return ctypes.CDLL(str(lib))


def c_function(lib: ctypes.CDLL, name: str, prog: Program):
    fn = getattr(lib, name)
    fn.restype = ctypes.c_double
    n_out = len(prog.outputs)
    fn.argtypes = [ctypes.c_double] * len(prog.inputs) + (
        [ctypes.POINTER(ctypes.c_double)] if n_out > 1 else []
    )

    def run(*args: float) -> tuple[float, ...]:
        if n_out == 1:
            return (fn(*args),)
        out = (ctypes.c_double * n_out)()
        primary = fn(*args, out)
        assert same(primary, out[0])
        return tuple(out)

    return run


# -- parsing ---------------------------------------------------------------------------------------
def test_parse_examples() -> None:
    e = parse_expr("ceil(N / bx)", ["N", "bx"])
    assert e == ceil(N / BX)
    assert e.variables() == {"N", "bx"}
    c = parse_expr("bx * by <= N*N and bx >= 4", ["N", "bx", "by"])
    assert float(ev(c, N=16, bx=4, by=8)) == 1.0
    assert float(ev(c, N=16, bx=2, by=8)) == 0.0
    w = parse_expr("where(N > 1024, 2*N, N)", ["N"])
    assert ev(w, N=np.array([10.0, 2048.0])).tolist() == [10.0, 4096.0]
    assert float(ev(parse_expr("min(bx, 32)", ["bx"]), bx=64)) == 32.0
    assert float(ev(parse_expr("max(bx, 3, 40)", ["bx"]), bx=5)) == 40.0
    assert float(ev(parse_expr("N ** 3 - -N", ["N"]), N=2)) == 10.0
    assert float(ev(parse_expr("2 if N > 1 else 3", ["N"]), N=0)) == 3.0
    assert float(ev(parse_expr("1 < N <= 4", ["N"]), N=5)) == 0.0
    assert float(ev(parse_expr("not (N > 1) or N == 7", ["N"]), N=7)) == 1.0
    assert float(ev(parse_expr("N // 4 + N % 4", ["N"]), N=-7)) == -2.0 + 1.0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("N + M", "unknown name 'M'"),
        ("sqrt(N)", "unknown function"),
        ("N ** 0.5", "exponent"),
        ("N ** bx", "exponent"),
        ("N[1]", "unsupported syntax"),
        ("N +", "cannot parse"),
        ("'a'", "unsupported constant"),
        ("min()", "at least 1"),
        ("where(N, 1)", "takes 3"),
        ("floor(N, key=1)", "positional"),
        ("N is bx", "unsupported comparison"),
        ("floor", "is a function"),
        ("N @ N", "unsupported operator"),
    ],
)
def test_parse_errors_quote_the_text(text: str, fragment: str) -> None:
    with pytest.raises(ProgramError) as err:
        parse_expr(text, ["N", "bx"])
    assert fragment in str(err.value)
    assert repr(text.strip()) in str(err.value)


def test_str_is_readable_python() -> None:
    e = (N - (BX - 1)) / (N * 2) - -BX
    assert str(e) == "(N - (bx - 1)) / (N * 2) - -bx"
    assert parse_expr(str(e), ["N", "bx"]) == e
    assert str(~(N < 3) & where(BX, N, 1)) == "not N < 3 and where(bx, N, 1)"
    assert "table(N, [1, 2.5])" == str(table(N, [1, 2.5]))


# -- semantics -------------------------------------------------------------------------------------
def test_division_by_zero_is_ieee_and_never_raises() -> None:
    r = ev(
        var("a") / var("b"), a=np.array([1.0, -1.0, 0.0, 1.0]), b=np.array([0.0, 0.0, 0.0, -0.0])
    )
    assert r[0] == math.inf and r[1] == -math.inf and math.isnan(r[2]) and r[3] == -math.inf
    assert math.isnan(float(ev(var("a") % 0, a=3.0)))
    assert float(ev(var("a") // 0, a=3.0)) == math.inf


def test_floor_mod_follow_python_for_integers() -> None:
    a = np.array([7.0, -7.0, 7.0, -7.0, 0.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0])
    assert ev(var("a") // var("b"), a=a, b=b).tolist() == [x // y for x, y in zip(a, b)]
    assert ev(var("a") % var("b"), a=a, b=b).tolist() == [x % y for x, y in zip(a, b)]
    r = ev(ceil(var("a")), a=np.array([-0.5, 0.5, math.inf, math.nan]))
    assert same(r[0], -0.0) and r[1] == 1.0 and r[2] == math.inf and math.isnan(r[3])


def test_min_max_are_defined_by_comparison() -> None:
    a = var("a")
    # min(a, b) = a if a <= b else b: a nan on the left loses, on the right wins.
    assert float(ev(minimum(a, 1.0), a=math.nan)) == 1.0
    assert math.isnan(float(ev(minimum(1.0, a), a=math.nan)))
    assert float(ev(maximum(a, 2.0), a=math.nan)) == 2.0
    assert same(float(ev(minimum(0.0, a), a=-0.0)), 0.0)
    assert float(ev(minimum(a, 3, 2), a=5)) == 2.0


def test_logic_and_where_treat_nan_as_true() -> None:
    a = np.array([0.0, 1.0, math.nan, -0.0])
    assert ev(~var("a"), a=a).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert ev(var("a") & 1, a=a).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert ev(var("a") | 0, a=a).tolist() == [0.0, 1.0, 1.0, 0.0]
    assert ev(where(var("a"), 5, 6), a=a).tolist() == [6.0, 5.0, 5.0, 6.0]
    assert ev(var("a").eq(1) + var("a").ne(1), a=a).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_table_lookup() -> None:
    i = np.array([0.0, 2.0, 3.0, -1.0, 1.5, math.nan, math.inf, -0.0])
    r = ev(table(var("i"), [10.0, 11.0, 12.0]), i=i)
    assert r[:2].tolist() == [10.0, 12.0] and r[7] == 10.0
    assert np.isnan(r[2:7]).all()
    with pytest.raises(ProgramError):
        table(N, [])


def test_evaluate_broadcasts_and_returns_intermediates() -> None:
    prog = Program(
        "p",
        ["N", "bx"],
        [("g", ceil(N / BX)), ("w", BX / 32), ("t", var("g") * var("w"))],
        ["t", "w"],
    )
    bx = np.array([32.0, 64.0, 128.0])
    out = prog.evaluate(N=1000, bx=bx)
    assert set(out) == {"t", "w"}
    assert out["t"].tolist() == [32.0, 32.0, 32.0]
    full = prog.evaluate({"N": 1000}, bx=bx, intermediates=True)
    assert full["g"].tolist() == [32.0, 16.0, 8.0] and full["g"].shape == (3,)
    const_prog = Program("c", ["N"], [("k", const(3))], ["k"])
    assert const_prog.evaluate(N=np.zeros((2, 2)))["k"].shape == (2, 2)


def test_evaluate_input_errors() -> None:
    prog = Program("p", ["N"], [("y", N + 1)], ["y"])
    with pytest.raises(ProgramError, match="missing inputs"):
        prog.evaluate()
    with pytest.raises(ProgramError, match="no inputs"):
        prog.evaluate(N=1, M=2)
    with pytest.raises(ProgramError, match="not numeric"):
        prog.evaluate(N="x")
    two = Program("q", ["a", "b"], [("y", var("a") + var("b"))], ["y"])
    with pytest.raises(ProgramError, match="broadcast"):
        two.evaluate(a=np.zeros(2), b=np.zeros(3))


# -- validation ------------------------------------------------------------------------------------
def test_program_validation_errors() -> None:
    with pytest.raises(ProgramError, match="defined twice"):
        Program("p", ["N"], [("N", const(1))], ["N"])
    with pytest.raises(ProgramError, match="before they are defined"):
        Program("p", ["N"], [("a", var("b")), ("b", N)], ["a"])
    with pytest.raises(ProgramError, match="not an input or an assigned name"):
        Program("p", ["N"], [("a", N)], ["z"])
    with pytest.raises(ProgramError, match="at least one output"):
        Program("p", ["N"], [], [])
    with pytest.raises(ProgramError, match="listed twice"):
        Program("p", ["N", "N"], [], ["N"])
    with pytest.raises(ProgramError, match="not a valid variable name"):
        Program("p", ["for"], [], ["for"])
    with pytest.raises(ProgramError, match="not a valid variable name"):
        var("_kp_x")
    with pytest.raises(ProgramError, match="pair"):
        Program("p", ["N"], [("a",)], ["N"])
    with pytest.raises(ProgramError, match="no truth value"):
        bool(N < 3)


def test_calls_binding_and_compatibility() -> None:
    sq = Program("sq", ["x"], [("y", var("x") * var("x"))], ["y"])
    two = Program("two", ["N", "bx"], [("a", N + BX), ("b", N - BX)], ["a", "b"])
    tmpl = Program(
        "tmpl",
        ["N", "bx"],
        [("s", call("sq", {"x": N})), ("d", call("two", output="b")), ("r", var("s") + var("d"))],
        ["r"],
    )
    assert tmpl.unbound_calls() == {"sq", "two"}
    with pytest.raises(ProgramError, match="unbound calls"):
        tmpl.evaluate(N=1, bx=1)
    with pytest.raises(ProgramError, match="not unbound calls"):
        tmpl.bind({"sq": sq, "two": two, "other": sq})
    bound = tmpl.bind({"sq": sq, "two": two})
    assert bound.unbound_calls() == frozenset()
    assert float(bound.evaluate(N=5, bx=2)["r"]) == 25 + 3
    # Explicit arguments must match the callee's inputs exactly.
    with pytest.raises(ProgramError, match="do not match"):
        tmpl.bind({"sq": Program("sq", ["z"], [], ["z"]), "two": two})
    # By-name calls need the callee's inputs defined at the call site.
    with pytest.raises(ProgramError, match="not defined at that point"):
        tmpl.bind({"sq": sq, "two": Program("two", ["M"], [], ["M"])})
    with pytest.raises(ProgramError, match="no output 'b'"):
        tmpl.bind({"sq": sq, "two": Program("two", ["N"], [], ["N"])})


def test_nested_calls_resolve_lexically_and_names_are_unique() -> None:
    inner = Program("inner", ["x"], [("y", call("leaf") + 1)], ["y"])
    leaf = Program("leaf", ["x"], [("z", var("x") * 10)], ["z"])
    outer = Program("outer", ["x"], [("r", call("inner"))], ["r"], {"inner": inner})
    assert outer.unbound_calls() == {"leaf"}
    bound = outer.bind({"leaf": leaf})
    assert float(bound.evaluate(x=2)["r"]) == 21.0
    other_leaf = Program("leaf", ["x"], [("z", var("x") * 11)], ["z"])
    deep = Program("deep", ["x"], [("y", call("leaf"))], ["y"], {"leaf": leaf})
    with pytest.raises(ProgramError, match="denotes two different programs"):
        Program(
            "top",
            ["x"],
            [("r", call("deep") + call("leaf"))],
            ["r"],
            {"deep": deep, "leaf": other_leaf},
        )


def test_recursion_is_rejected() -> None:
    a = Program("a", ["x"], [("y", call("b"))], ["y"])
    b = Program("b", ["x"], [("y", call("a"))], ["y"])
    with pytest.raises(ProgramError, match="recursive"):
        Program("top", ["x"], [("r", call("a"))], ["r"], {"a": a, "b": b})


def test_structural_equality_and_serialisation() -> None:
    e1 = where(N > 3, floor(N / 2), table(N % 4, [1, -0.0, math.inf, math.nan]))
    e2 = where(N > 3, floor(N / 2), table(N % 4, [1, -0.0, math.inf, math.nan]))
    assert e1 == e2 and hash(e1) == hash(e2)
    assert const(0.0) != const(-0.0)
    assert Expr.from_json(json.loads(json.dumps(e1.to_json()))) == e1
    sub = Program("s", ["N"], [("y", N * 2)], ["y"])
    prog = Program(
        "p", ["N"], [("a", call("s", {"N": N + 1})), ("b", call("s"))], ["a", "b"], {"s": sub}
    )
    again = Program.from_dict(json.loads(json.dumps(prog.to_dict())))
    assert again == prog
    with pytest.raises(ProgramError, match="malformed"):
        Expr.from_json(["bogus", 1])


# -- specialisation --------------------------------------------------------------------------------
def test_specialize_agrees_and_folds_fixed_parts() -> None:
    occ = Program(
        "occ", ["bx", "regs"], [("b", minimum(32, floor(65536 / (var("regs") * BX))))], ["b"]
    )
    prog = Program(
        "p",
        ["N", "bx", "regs"],
        [
            ("b", call("occ")),
            ("grid", ceil(N / BX)),
            ("waves", ceil(var("grid") / var("b"))),
            ("fast", (var("waves") < 3) & (N > 100)),
            ("t", where(var("fast"), var("waves"), N / 7) + table(BX / 32 - 1, [1, 2, 3, 4])),
            ("k", var("b") * 2),
            ("s", N * 3),
        ],
        ["t", "k", "s", "fast"],
        {"occ": occ},
    )
    bx = np.array([32.0, 64.0, 96.0, 128.0])
    fn = prog.specialize({"bx": bx, "regs": 40})
    assert fn.inputs == ("N",)
    assert "_kp_float(N)" in fn.source and "65536" not in fn.source  # occupancy folded away
    for n in (1.0, 150.0, 5000.0, 0.0):
        got, want = fn(n), prog.evaluate(N=n, bx=bx, regs=40)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
            assert got[k].shape == (4,)
    assert not fn(N=5.0)["k"].flags.writeable
    with pytest.raises(ProgramError, match="not inputs"):
        prog.specialize({"M": 1})


# -- generated code --------------------------------------------------------------------------------
def test_python_and_c_naming_is_deterministic_and_sanitised(tmp_path: Path) -> None:
    sub_a = Program("a", ["x"], [("y", var("x") + 1)], ["y"])
    sub_b = Program("b", ["x"], [("y", var("x") + 2), ("z", var("x") * 3)], ["y", "z"])
    prog = Program(
        "my-helper.v2",
        ["x", "out", "int"],
        [("r", call("s-1") + call("s_1", output="z") + var("int"))],
        ["r", "out"],
        {"s-1": sub_a, "s_1": sub_b},
    )
    c = prog.to_c()
    assert c == prog.to_c()
    assert "double kp_my_helper_v2(double v_x, double v_out, double v_int, double *out)" in c
    assert (
        "static double kp_my_helper_v2__s_1(" in c and "static double kp_my_helper_v2__s_1_2(" in c
    )
    py = prog.to_python()
    assert "def my_helper_v2(x, out, int):" in py
    ns = py_module(prog)
    assert ns["my_helper_v2"](1, 5, 7) == (2.0 + 3.0 + 7.0, 5.0)
    if CC is not None:
        lib = compile_c([c], tmp_path)
        run = c_function(lib, "kp_my_helper_v2", prog)
        assert run(1.0, 5.0, 7.0) == (12.0, 5.0)
    with pytest.raises(ProgramError, match="prefix"):
        prog.to_c(prefix="1x")


def test_generated_python_needs_only_math() -> None:
    prog = Program("p", ["N"], [("y", floor(N / 0) + table(N, [1.0, math.inf]))], ["y"])
    src = prog.to_python()
    imports = [ln for ln in src.splitlines() if ln.startswith(("import", "from"))]
    assert imports == ["import math"]
    assert py_module(prog)["p"](1) == math.inf


# -- random programs: all backends agree ----------------------------------------------------------
VALUES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    2.0,
    3.0,
    0.5,
    -2.5,
    7.0,
    32.0,
    33.0,
    1e300,
    -1e300,
    5e-324,
    math.inf,
    -math.inf,
    math.nan,
]
INPUT_POOL = ["x", "y", "N", "out", "int", "t1", "v_x", "float", "math"]
BINOPS = [
    "add",
    "sub",
    "mul",
    "div",
    "floordiv",
    "mod",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "and",
    "or",
]


def rand_value(rng: random.Random) -> float:
    return (
        rng.choice(VALUES)
        if rng.random() < 0.7
        else float(rng.randint(-40, 40)) / rng.choice([1, 2, 4])
    )


def rand_expr(rng: random.Random, names: list[str], subs: dict[str, Program], depth: int) -> Expr:
    if depth <= 0 or rng.random() < 0.2:
        return var(rng.choice(names)) if names and rng.random() < 0.75 else const(rand_value(rng))
    kind = rng.choice(
        ["bin"] * 8
        + ["neg", "not", "floor", "ceil", "min", "max", "where", "table", "call", "call"]
    )
    sub = lambda: rand_expr(rng, names, subs, depth - 1)  # noqa: E731
    if kind == "bin":
        return Expr(rng.choice(BINOPS), (sub(), sub()))
    if kind in ("neg", "not", "floor", "ceil"):
        return Expr(kind, (sub(),))
    if kind in ("min", "max"):
        return (minimum if kind == "min" else maximum)(*(sub() for _ in range(rng.randint(2, 3))))
    if kind == "where":
        return where(sub(), sub(), sub())
    if kind == "table":
        return table(
            sub() % rng.choice([3, 4]) if rng.random() < 0.7 else sub(),
            [rand_value(rng) for _ in range(rng.randint(1, 4))],
        )
    if not subs:
        return sub()
    key = rng.choice(sorted(subs))
    callee = subs[key]
    output = rng.choice([None, *callee.outputs])
    if all(i in names for i in callee.inputs) and rng.random() < 0.5:
        return call(key, output=output)
    return call(key, {i: sub() for i in callee.inputs}, output=output)


def rand_program(rng: random.Random, name: str, depth: int, counter: list[int]) -> Program:
    inputs = rng.sample(INPUT_POOL, rng.randint(1, 4))
    subs: dict[str, Program] = {}
    if depth > 0:
        for _ in range(rng.randint(0, 2)):
            counter[0] += 1
            key = rng.choice(["s", "s-", "s.", "s_"]) + str(counter[0] % 3) + f"x{counter[0]}"
            subs[key] = rand_program(rng, f"sub{counter[0]}", depth - 1, counter)
    names = list(inputs)
    assignments = []
    for i in range(rng.randint(1, 5)):
        target = f"a{i}"
        assignments.append((target, rand_expr(rng, names, subs, 3)))
        names.append(target)
    outputs = rng.sample(names, rng.randint(1, min(3, len(names))))
    return Program(name, inputs, assignments, outputs, subs)


def rand_case(rng: random.Random, i: int, rows: int = 5) -> tuple[Program, dict[str, np.ndarray]]:
    prog = rand_program(rng, rng.choice(["p", "prog-", "9p."]) + str(i), 2, [0])
    inputs = {n: np.array([rand_value(rng) for _ in range(rows)]) for n in prog.inputs}
    return prog, inputs


def check_backends(
    cases: list[tuple[Program, dict[str, np.ndarray]]], tmp_path: Path, rng: random.Random
) -> None:
    libs = (
        compile_c([p.to_c(prefix=f"c{i}_") for i, (p, _) in enumerate(cases)], tmp_path)
        if CC
        else None
    )
    for i, (prog, inputs) in enumerate(cases):
        want = prog.evaluate(**inputs)
        rows = len(next(iter(inputs.values())))
        ns = py_module(prog)
        pyfn = [v for k, v in ns.items() if not k.startswith("_") and callable(v)][-1]
        cfn = None
        if libs is not None:
            fname = prog.to_c(prefix=f"c{i}_").split("\ndouble ", 1)[1].split("(", 1)[0]
            cfn = c_function(libs, fname, prog)
        for r in range(rows):
            args = [float(inputs[n][r]) for n in prog.inputs]
            expect = tuple(float(want[o][r]) for o in prog.outputs)
            got_py = pyfn(*args)
            got_py = (got_py,) if len(prog.outputs) == 1 else got_py
            assert all(map(same, got_py, expect)), (str(prog), args, got_py, expect, "python")
            if cfn is not None:
                got_c = cfn(*args)
                assert all(map(same, got_c, expect)), (str(prog), args, got_c, expect, "C")
        # specialize: a random subset fixed as arrays, the rest as scalars (row 0).
        fixed = {n: inputs[n] for n in prog.inputs if rng.random() < 0.6}
        rest = {n: float(inputs[n][0]) for n in prog.inputs if n not in fixed}
        fn = prog.specialize(fixed)
        got = fn(**rest)
        ref = prog.evaluate(**fixed, **rest)
        for o in prog.outputs:
            assert got[o].shape == ref[o].shape
            assert all(map(same, got[o].ravel(), ref[o].ravel())), (
                str(prog),
                fixed,
                rest,
                fn.source,
            )


@needs_cc
def test_random_programs_batch_agree(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    cases = [rand_case(rng, i) for i in range(120)]
    check_backends(cases, tmp_path, rng)


@given(seed=st.randoms(use_true_random=False), n=st.integers(1, 4))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_programs_agree_property(tmp_path: Path, seed: random.Random, n: int) -> None:
    rng = random.Random(seed.getrandbits(64))
    cases = [rand_case(rng, i) for i in range(n)]
    check_backends(cases, tmp_path, rng)


def test_specialize_exact_rewrites() -> None:
    """specialize forwards identities (x * 1, x + -0, x and <all true>, where(<all true>, ..),
    floor(ceil(x)), where(c, 1, 0) != 0), uses fmin/minimum (fmax/maximum) against fixed
    operands free of nan and zeros, and drops dead temporaries: all bit-exact, nan, infinities
    and signed zeros included."""
    a = var("a")
    y = N * a  # an array that depends on the remaining input N
    c = y > 0
    k_plain = np.array([2.0, -3.0, np.inf, -np.inf, 0.5, 7.0, -1e300])  # no nan, no zero
    k_zero = np.array([2.0, -0.0, 0.0, 1.0, 0.5, 7.0, 3.0])  # zeros: the rewrite must not apply
    k_nan = np.array([2.0, np.nan, 1.0, 1.0, 0.5, 7.0, 3.0])  # nan: likewise
    exprs = {
        "mul1": y * var("one"),
        "mul1r": var("one") * y,
        "div1": y / var("one"),
        "addnz": y + var("nz"),
        "addnzr": var("nz") + y,
        "subpz": y - var("pz"),
        "addpz": y + var("pz"),  # not an identity (-0 + 0 = +0): must stay an addition
        "floorceil": floor(ceil(y)),
        "ceilfloor": ceil(floor(y)),
        "and_t": where(c & var("tr"), 1.0, 2.0),
        "and_f": where(var("fa") & c, 1.0, 2.0),
        "or_f": where(c | var("fa"), 1.0, 2.0),
        "or_t": where(var("tr") | c, 1.0, 2.0),
        "where_t": where(var("tr"), y, N),
        "where_f": where(var("fa"), y, N),
        "where_tk": where(var("tr"), var("kp"), y),
        "where_nan": where(var("nanv"), y, 5.0),
        "ne_where": where(where(c, 1.0, 0.0).ne(0.0), y, -y),
        "ne_where_r": where(const(0.0).ne(where(c, 3.0, -0.0)), y, -y),
        "min_yk": minimum(y, var("kp")),
        "min_ky": minimum(var("kp"), y),
        "max_yk": maximum(y, var("kp")),
        "max_ky": maximum(var("kp"), y),
        "min_zero": minimum(y, var("kz")),
        "max_zero": maximum(var("kz"), y),
        "min_nan": minimum(y, var("kn")),
        "max_nan": maximum(var("kn"), y),
    }
    fixed = {
        "a": np.array([1.0, -1.0, 0.0, -0.0, np.nan, np.inf, 2.5]),
        "one": np.ones(7),
        "nz": -0.0,
        "pz": np.zeros(7),
        "tr": np.array([1.0, -2.0, np.nan, 1, 1, 1, 1]),
        "fa": np.zeros(7),
        "nanv": np.nan,
        "kp": k_plain,
        "kz": k_zero,
        "kn": k_nan,
    }
    prog = Program("rw", ["N", *fixed], list(exprs.items()), list(exprs))
    fn = prog.specialize(fixed)
    src = fn.source
    assert "_np_fmin" in src and "_np_minimum" in src and "_np_fmax" in src and "_np_maximum" in src
    assert "del " in src and "_np_logical_and" not in src and "_np_logical_or" not in src
    for n in (1.5, -3.0, 0.0, -0.0, math.inf, -math.inf, math.nan, 1e-320):
        got, want = fn(n), prog.evaluate(N=n, **fixed)
        for k in exprs:
            assert got[k].shape == want[k].shape == (7,), k
            assert all(map(same, got[k], want[k])), (k, n, got[k], want[k])
    tup = prog.specialize(fixed, outputs=["min_yk", "mul1"], as_tuple=True)
    assert tup.outputs == ("min_yk", "mul1") and tup.inputs == ("N",)
    r = tup(2.0)
    assert isinstance(r, tuple) and len(r) == 2
    np.testing.assert_array_equal(r[1], prog.evaluate(N=2.0, **fixed)["mul1"])
    const_fn = prog.specialize({**fixed, "N": 3.0}, outputs=["where_t"])
    assert "where_t" in const_fn.constant_outputs
    with pytest.raises(ProgramError, match="outputs"):
        prog.specialize(fixed, outputs=["nope"])


def test_specialize_choices_uniform_arrays_and_implied_checks_agree() -> None:
    """A scalar picking one of two fixed arrays (a choice, both outcomes folded ahead), fixed
    arrays whose elements all have the same bits (folded to scalars), ``g == g`` dropped from a
    conjunction only where a comparison of g implies it, and and/or/where decided by a scalar
    (picks instead of array operations): the same bits as `evaluate`, on random fixed arrays
    with few distinct values, nan, infinities and signed zeros, and every kind of N."""
    rng = random.Random(3232)
    pool = [0.0, -0.0, 1.0, 2.0, -1.5, 0.25, math.inf, -math.inf, math.nan, 3.0]
    positive = [0.25, 1.0, 2.0, 3.0, 7.0, 32.0, 1e300]
    n_val = var("N")
    a, b, c, k = var("a"), var("b"), var("c"), var("k")
    s = n_val * 2.0 > 3.0  # a scalar condition
    pa = where(s, a, b)
    pb = where(s, 0.0, c)
    q = (const(1.0) + pb) * n_val + pa * (const(1.0) - pb)
    g = ceil(n_val / a)
    exprs = {
        "pick": pa,
        "pick2": pa * pb + b,  # choices and fixed arrays: folded per outcome
        "q": q,
        "ok": where((g >= 1.0) & (g <= 1e9) & g.eq(g), q, math.inf),
        "ok_nested": where(((n_val > 0.0) & (g < 5.0)) & g.eq(g), q, -1.0),
        "ok_ne": where((g.ne(3.0)) & g.eq(g), q, -1.0),  # != does not imply g is not nan
        "ok_other": where((n_val * b > 0.0) & g.eq(g), q, -1.0),  # a comparison of another value
        "s_and": where(s & (g > 2.0), 1.0, 0.0),
        "and_s": where((g > 2.0) & s, 1.0, 0.0),
        "s_or": where(s | (g > 2.0), 1.0, 0.0),
        "s_where": where(s, q, g),
        "s_where_k": where(s, a, q),
        "out_choice": where(s, b, c),  # an output that is a choice
    }
    # Comparisons that run-time bounds may decide for every element (k often all positive, so
    # that N / k has bounds), and the and/or/where that then test for the whole arrays.
    gk = ceil(n_val / k)
    m = gk * b - n_val
    exprs |= {
        "grid_ok": where((gk >= 1.0) & (gk <= 1e6) & gk.eq(gk), q, math.inf),
        "grid_or": where((gk < 0.0) | (m > 0.0), q, -1.0),
        "le_c": where(m <= c, 1.0, 0.0),
        "lt_fixed": where(gk < a, 1.0, 0.0),
        "mul_arrays": where(gk * gk >= 4.0, gk, 0.0),
        "neg_floor": where((-floor(n_val / k) + c) > 0.0, 1.0, 0.0),
        "pick_bound": where(pa * n_val + 1.0 > b, 1.0, 0.0),  # a choice's bounds
        "div_scalar": where(b / n_val >= 0.5, 1.0, 0.0),
        "div_mixed": where(n_val / a > 1.0, 1.0, 0.0),  # a of mixed signs: no bounds
        "ok_where_f": where((gk > 1e308) & (m > 0.0), 2.0, q),
        "ge_fixed": where(gk >= k, 1.0, 0.0),
        "gt_fixed": where(gk > k * 0.5, 1.0, 0.0),
        "le_fixed": where(gk <= k, 1.0, 0.0),
        "sub_arrays": where(n_val - gk >= 1.0, 1.0, 0.0),
        "sub_fixed": where(gk - k > 0.0, 1.0, 0.0),
    }
    prog = Program("choices", ["N", "a", "b", "c", "k"], list(exprs.items()), list(exprs))
    picks = 0
    for _ in range(250):
        n = rng.choice([1, 2, 5])
        fixed = {}
        for name in "abck":
            values = positive if name == "k" and rng.random() < 0.8 else pool
            if rng.random() < 0.4:
                fixed[name] = np.full(n, rng.choice(values))
            else:
                fixed[name] = np.array([rng.choice(values) for _ in range(n)])
        fn = prog.specialize(fixed)
        picks += " if " in fn.source
        for x in (1.5, -3.0, 0.0, -0.0, 7.0, 100.0, 1e5, 1e300, math.inf, -math.inf, math.nan):
            got, want = fn(x), prog.evaluate(N=x, **fixed)
            for k in exprs:
                assert got[k].shape == want[k].shape == (n,), k
                assert all(map(same, got[k], want[k])), (k, x, fixed, got[k], want[k], fn.source)
            # An output that is not constant is a fresh array (a choice's is copied).
            if "out_choice" not in fn.constant_outputs:
                got["out_choice"][...] = 0.0
    assert picks > 200


def test_specialize_batches_like_operations_exactly() -> None:
    """Independent instructions of the same kind over per-candidate constants (fitted metrics:
    rational functions of N with one coefficient per configuration) are computed as one NumPy
    operation on stacked operands; the results are the same bits."""
    rng = np.random.default_rng(7)
    n_cfg = 9
    cfg = var("cfg")

    def coeffs() -> list[float]:
        v = rng.normal(size=n_cfg) * 10.0 ** rng.integers(-3, 4, size=n_cfg)
        v[rng.integers(0, n_cfg)] = rng.choice([0.0, -0.0, math.inf, -math.inf, math.nan])
        return [float(x) for x in v]

    subs = {}
    for i in range(4):
        num = table(cfg, coeffs()) + table(cfg, coeffs()) * N + table(cfg, coeffs()) * (N * N)
        den = table(cfg, coeffs()) + table(cfg, coeffs()) * N
        subs[f"m{i}"] = Program(
            f"m{i}",
            ["N", "cfg"],
            [("num", num), ("den", den), ("v", var("num") / var("den"))],
            ["v"],
        )
    BY = var("by")
    prog = Program(
        "fits",
        ["N", "cfg", "bx", "by"],
        [
            ("gx", ceil(N / BX)),
            ("gy", ceil(N / BY)),
            ("g", -floor(var("gx") * var("gy") / 7)),
            *[(f"v{i}", call(f"m{i}")) for i in range(4)],
            ("r", var("v0") * var("v1") - var("v2") / var("v3") + var("g")),
        ],
        ["r", "v0", "v3", "gx", "g"],
        subs,
    )
    fixed = {
        "cfg": np.arange(n_cfg, dtype=np.float64),
        "bx": np.array([1.0, 2, 4, 8, 16, 32, 64, 3, 0.0]),
        "by": np.array([32.0, 16, 8, 4, 2, 1, -0.0, 5, 7]),
    }
    fn = prog.specialize(fixed)
    assert "_kp_b" in fn.source  # batched
    for n in (0.0, -0.0, 1.0, 3.0, 1000.0, -7.5, 1e200, math.inf, -math.inf, math.nan):
        got, want = fn(n), prog.evaluate(N=n, **fixed)
        for k in prog.outputs:
            assert all(map(same, got[k], want[k])), (k, n, got[k], want[k])


def test_specialize_random_batchable_programs_agree() -> None:
    """Random programs made of groups of like operations (per-candidate constants against a
    shared operand, chains over earlier groups' results, every row or every other one, groups
    combined with each other), their assignments in a random dependency-respecting order, agree
    with `evaluate` bit for bit, nan, infinities and signed zeros included."""
    rng = random.Random(31)
    n_cfg = 5
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, 3.0, 1e300, 5e-324]
    binops = ["add", "sub", "mul", "div", "floordiv", "mod"]
    batched = 0

    def coeffs() -> Expr:
        if rng.random() < 0.2:
            return const(rng.choice(specials))
        return table(
            var("cfg"),
            [
                rng.choice(specials) if rng.random() < 0.2 else rng.uniform(-9, 9)
                for _ in range(n_cfg)
            ],
        )

    for case in range(40):
        items: list[tuple[str, Expr]] = []
        layers: list[list[str]] = []
        base: list[Expr] = [N, N * N, N / var("cfg")]
        for li in range(rng.randint(2, 6)):
            op = rng.choice(binops)
            names: list[str] = []
            kind = rng.choice(["shared", "chain", "chain", "pair", "unary"]) if layers else "shared"
            if kind == "shared":
                x = rng.choice(base + [var(n) for lay in layers for n in lay])
                left = rng.random() < 0.5
                exprs = [
                    Expr(op, (coeffs(), x) if left else (x, coeffs()))
                    for _ in range(rng.randint(2, 5))
                ]
            elif kind == "chain":
                prev = rng.choice(layers)
                rows = prev[:: rng.choice([1, 1, 2])]
                left = rng.random() < 0.5
                exprs = [Expr(op, (coeffs(), var(r)) if left else (var(r), coeffs())) for r in rows]
            elif kind == "pair":
                p1, p2 = rng.choice(layers), rng.choice(layers)
                exprs = [Expr(op, (var(a), var(b))) for a, b in zip(p1, p2[::-1])]
            else:
                prev = rng.choice(layers)
                exprs = [Expr(rng.choice(["floor", "ceil", "neg"]), (var(r),)) for r in prev]
            for e in exprs:
                names.append(f"l{li}_{len(names)}")
                items.append((names[-1], e))
            layers.append(names)
        # A random order that respects the dependencies.
        pending = dict(items)
        done: set[str] = set()
        asg: list[tuple[str, Expr]] = []
        while pending:
            ready = [n for n, e in pending.items() if e.variables() <= done | {"N", "cfg"}]
            n = rng.choice(ready)
            asg.append((n, pending.pop(n)))
            done.add(n)
        outs = sorted(rng.sample([n for n, _ in asg], min(4, len(asg))))
        prog = Program(f"b{case}", ["N", "cfg"], asg, outs)
        fixed = {"cfg": np.arange(n_cfg, dtype=np.float64)}
        fn = prog.specialize(fixed)
        batched += fn.source.count("_kp_b") > 0
        for n in (rng.choice(specials), rng.uniform(-100, 100), float(rng.randint(1, 5000))):
            got, want = fn(n), prog.evaluate(N=n, **fixed)
            for k in outs:
                assert all(map(same, got[k], want[k])), (case, k, n, fn.source)
    assert batched >= 30


def test_a_scalar_pick_of_a_branch_folded_to_one_value_keeps_the_array_shape() -> None:
    # where(s, t or y s, y s + 1), s a remaining scalar, t fixed and nonzero everywhere:
    # `t or y s` is all true whatever s is, so it folds to the one value 1.0 while the other
    # branch stays an array; the pick between them must still return an array of the fixed
    # inputs' shape (it returned 1.0 as a 0-d value for s != 0; found by
    # test_random_programs_agree_property).
    s, t, y = var("s"), var("t"), var("y")
    prog = Program("p", ["s", "t", "y"], [("o", where(s, t | (y * s), y * s + 1))], ["o"])
    fixed = {"t": np.array([-1e300, np.inf, -2.5, -1.0, -np.inf]), "y": np.arange(5.0)}
    for sv in (7.5, 0.0):
        got = prog.specialize(fixed)(s=sv)["o"]
        ref = prog.evaluate(**fixed, s=sv)["o"]
        assert got.shape == ref.shape == (5,)
        assert np.array_equal(got, ref)
