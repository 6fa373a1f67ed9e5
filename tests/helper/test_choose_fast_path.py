"""The fast path of a new D (`HelperProgram.choose`, `Selector.select`) against a plain reference:
the model and admission programs evaluated by `Program.evaluate` over every configuration, and
the choice rule written out in Python. Random joint spaces of program parameters and blocks
(ties, inadmissible configurations, non-finite predictions, a hot/cold switch on D, occupancy
fixed or depending on D), many D each; every choice, time and grid must be the same bits."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from klaraptor.core.types import BLOCK_VARS, ParamValues
from klaraptor.helper.program import HelperProgram, admit_program
from klaraptor.program import Expr, Program, ceil, const, table, var, where
from klaraptor.runtime.selector import Selection, Selector

INT32_MAX = 2**31 - 1
CLOCK_MHZ = 1980.0


def _values(rng: random.Random, n: int, pool: list[float], uniform: bool) -> list[float]:
    """n table values from a small pool (exact ties), or one value for all (a uniform table)."""
    if uniform:
        return [rng.choice(pool)] * n
    return [rng.choice(pool) for _ in range(n)]


def random_space(rng: random.Random, case: int) -> HelperProgram:
    """A helper over a random joint space: ITEMS and UNROLL variants times 1-D or 2-D blocks, a
    scaling-like model (hot/cold coefficients picked by D, a rational growth, waves) whose
    tables have ties, zeros, negatives, nan and inf, and an admission program with a constraint,
    a small grid limit and dynamic shared memory."""
    items = rng.sample([1, 2, 4, 8], rng.randint(1, 4))
    unroll = rng.sample([1, 2, 4], rng.randint(1, 3))
    two_d = rng.random() < 0.4
    blocks = (
        [(x, y, 1) for x in (8, 16, 32) for y in (4, 8, 16)]
        if two_d
        else [(t, 1, 1) for t in range(32, 1025, 32 * rng.choice([1, 2, 4]))]
    )
    configs = [(i, u, b) for i in sorted(items) for u in sorted(unroll) for b in blocks]
    rng.shuffle(configs)  # the index order is not the tie order
    n = len(configs)
    names = ("ITEMS", "UNROLL")
    variants = tuple(ParamValues(names, (i, u)) for i, u, _ in configs)
    attrs = tuple((16 + 4 * i + 2 * u, rng.choice([0, 0, 1024, 60000])) for i, u, _ in configs)
    cfg = var("cfg")
    pool = [0.25, 0.5, 0.5, 1.0, 1.0, 2.0, 3.0]
    bad = [0.0, -1.0, math.nan, math.inf]

    def coef(uniform: bool = False, with_bad: float = 0.0) -> Expr:
        vals = _values(rng, n, pool, uniform)
        for j in range(n):
            if rng.random() < with_bad:
                vals[j] = rng.choice(bad)
        return table(cfg, vals)

    N, bx, by, bz = var("N"), var("bx"), var("by"), var("bz")
    threads = bx * by * bz
    # The hot/cold switch: a scalar of D picks one of two coefficient tables (sometimes equal).
    cold = N * 8.0 > float(rng.choice([1 << 20, 1 << 24, 1 << 40]))
    a_hot = coef(uniform=rng.random() < 0.3, with_bad=0.05)
    a_cold = a_hot if rng.random() < 0.4 else coef(with_bad=0.05)
    d = where(cold, const(0.0), coef(uniform=rng.random() < 0.5) * 0.1)
    x = N / 65536.0
    p = ((const(1.0) + d) * x + (const(1.0) - d)) / ((const(1.0) - d) * x + (const(1.0) + d))
    blocks_expr = ceil(N / (bx * var("ITEMS")))
    waves = ceil(blocks_expr / (132.0 * coef(uniform=rng.random() < 0.3)))
    cycles = where(cold, a_cold, a_hot) * x * p * waves / var("UNROLL") * (CLOCK_MHZ * 1e3)
    if rng.random() < 0.3:  # many exactly equal predictions: the tie rule decides
        cycles = ceil(N / (threads * var("ITEMS"))) * 1000.0 * coef(uniform=True)
    occupancy_kind = case % 3  # fixed table, depending on D, or no occupancy output
    asg: list[tuple[str, Expr]] = [("cycles", cycles)]
    if occupancy_kind == 0:
        asg.append(("occupancy", coef()))
    elif occupancy_kind == 1:
        asg.append(("occupancy", where(N > float(rng.choice([500, 5000, 50000])), coef(), coef())))
    outputs = tuple(a for a, _ in asg)
    model = Program("rand_model", ("N", *BLOCK_VARS, "ITEMS", "UNROLL", "cfg"), asg, outputs)
    constraints = [(bx * var("ITEMS")) <= (N + 64.0)]  # wide configurations need a large N
    admit = admit_program(
        "admit",
        ("N",),
        (blocks_expr, const(1.0), const(1.0)),
        constraints,
        var("UNROLL") * threads * 8.0 + 16.0,
        static_smem=0,
        smem_limit=rng.choice([49152, 65536]),
        max_grid=(rng.choice([65535, INT32_MAX]), 65535, 65535),
        data_ranges=((1, INT32_MAX),),
        param_names=names,
    )
    return HelperProgram(
        kernel=f"test.random_space{case}",
        model_name="random",
        data_names=("N",),
        candidates=tuple(b for _, _, b in configs),
        model=model,
        admit=admit,
        hw={},
        clock_mhz=CLOCK_MHZ,
        band=rng.choice([0.0, 0.0, 0.02, 0.3, math.nan, -0.5, 1e308]),
        param_names=names,
        variants=variants,
        variant_attrs=attrs,
    )


def reference(h: HelperProgram, N: int, k: int) -> tuple[list[int], list[float], Any]:
    """The choice rule over `Program.evaluate`'s values, written out: valid = admitted with a
    finite positive prediction; the tied group (t <= t_min * (1 + band)) by (highest occupancy,
    fewest threads, lowest index), then the others by (t, the same keys)."""
    n = len(h.candidates)
    cand = np.array(h.candidates, dtype=np.float64)
    cols: dict[str, Any] = {"N": np.full(n, float(N)), "cfg": np.arange(n, dtype=np.float64)}
    cols.update({v: cand[:, j] for j, v in enumerate(BLOCK_VARS)})
    for j, name in enumerate(h.param_names):
        cols[name] = np.array([float(pv.values()[j]) for pv in h.variants])
    cols["kl_static_smem"] = np.array([float(m) for _, m in h.variant_attrs])
    cols["kl_regs"] = np.array([float(r) for r, _ in h.variant_attrs])
    mo = h.model.evaluate(**{i: cols[i] for i in h.model.inputs})
    ao = h.admit.evaluate(**{i: cols[i] for i in h.admit.inputs})
    t = [float(v) for v in np.broadcast_to(mo[h.model.outputs[0]], (n,))]
    ok = [bool(v != 0.0) for v in np.broadcast_to(ao["ok"], (n,))]
    occ = (
        [float(v) for v in np.broadcast_to(mo["occupancy"], (n,))]
        if "occupancy" in h.model.outputs
        else [0.0] * n
    )
    valid = [i for i in range(n) if ok[i] and math.isfinite(t[i]) and t[i] > 0.0]
    if not valid:
        return [], [], None
    tie = min(t[i] for i in valid) * (1.0 + h.band)
    threads = [b[0] * b[1] * b[2] for b in h.candidates]

    def tie_key(i: int) -> tuple[Any, ...]:  # nan occupancy last, as NumPy's lexsort puts it
        return (math.isnan(occ[i]), 0.0 if math.isnan(occ[i]) else -occ[i], threads[i], i)

    tied = [i for i in valid if t[i] <= tie]
    rest = [i for i in valid if not t[i] <= tie]
    order = sorted(tied, key=tie_key) + sorted(rest, key=lambda i: (t[i], *tie_key(i)))
    top = order[:k]
    grid = tuple(int(np.broadcast_to(ao[g], (n,))[top[0]]) for g in ("gx", "gy", "gz"))
    return top, [t[i] / (CLOCK_MHZ * 1e3) for i in top], grid


def sizes(rng: random.Random) -> list[int]:
    out = [1, 2, 31, 32, 33, 100, 1000, 4095, 4096, 65536, 1 << 20, (1 << 20) + 1]
    out += [1 << 24, 1 << 27, 1 << 28, 3 << 28, INT32_MAX - 1, INT32_MAX]
    out += [rng.randint(1, 1 << rng.randint(4, 31)) for _ in range(40)]
    return out


def test_choose_and_select_equal_the_plain_reference() -> None:
    rng = random.Random(32)
    paths = {True: 0, False: 0}
    for case in range(18):
        h = random_space(rng, case)
        paths[h._positional] += 1
        sel = Selector(h)
        none = tied = 0
        for N in sizes(rng):
            D = h.data_schema.parse(N)
            for k in (1, 2, 4, 9, len(h.candidates)):
                want = reference(h, N, k)
                got = h.choose(D, k)
                assert got == want, (case, N, k, h.band, got, want)
            top, ms, grid = reference(h, N, sel.k)
            if not top:
                none += 1
                continue
            tied += len(reference(h, N, 2)[0]) == 2 and ms[0] == reference(h, N, 2)[1][1]
            got_sel = sel.select(N)
            assert got_sel == Selection(
                D=D,
                block=h.candidates[top[0]],
                grid=grid,
                predicted_ms=ms[0],
                topk=tuple(zip([h.keys[i] for i in top], ms)),
                source="model",
                params=h.variants[top[0]],
            )
            assert sel.select((N,)) is got_sel and sel.select(D) is got_sel
        assert none < len(sizes(random.Random(0)))  # most sizes have an admissible choice
    # Both orders were exercised: fixed (evaluated in tie order) and depending on D.
    assert paths[True] >= 4 and paths[False] >= 4, paths


def test_the_fast_selection_equals_the_dataclass() -> None:
    """The Selector builds its model selections without the dataclass constructor: the same
    object in every respect the dataclass gives (fields, equality, hash, repr)."""
    from klaraptor.runtime.selector import _model_selection

    h = random_space(random.Random(5), 0)
    D = h.data_schema.parse(5000)
    c = h.config(3)
    fast = _model_selection(D, c, (4, 1, 1), 0.5, ((h.keys[3], 0.5),), "far", 128)
    slow = Selection(
        D=D,
        block=c.block,
        grid=(4, 1, 1),
        predicted_ms=0.5,
        topk=((h.keys[3], 0.5),),
        source="model",
        extrapolated="far",
        params=c.params,
        smem=128,
    )
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert vars(fast) == vars(slow)


def _no_args(D: Any, rng: Any) -> tuple[Any, ...]:
    raise AssertionError("nothing is launched here")


def test_the_shared_memory_of_the_choice_equals_the_specs() -> None:
    """`Selector._smem_at` (the spec's formula folded over every candidate once) gives what
    `KernelSpec.dynamic_smem_for` gives, for a formula of the block and parameters only (a
    table) and one of D too (a program per D), and defers to it where the value is not a byte
    count (its error)."""
    import pytest

    from klaraptor.core.errors import SpecError
    from klaraptor.spec import DataParam, KernelSpec

    def smem_spec(name: str, formula: str) -> KernelSpec:
        return KernelSpec(
            name=name,
            source='extern "C" __global__ void k(float* a, int n) {}',
            kernel="k",
            data=(DataParam("N", arg=1),),
            dim=2,
            grid=("ceil(N / (bx * ITEMS))", "1", "1"),
            make_args=_no_args,
            params={"ITEMS": (1, 2, 4, 8), "UNROLL": (1, 2, 4)},
            dynamic_smem=formula,
        )

    h = random_space(random.Random(11), 0)
    for formula, per_d in (
        ("UNROLL * bx * by * 8 + 16", False),
        ("ITEMS * bx * 4 + N % 3 * 128", True),
        ("ceil(N / bx) * UNROLL", True),
    ):
        spec = smem_spec("test.smem", formula)
        sel = Selector(h, spec=spec)
        for N in (1, 7, 100, 4097, 1 << 20, INT32_MAX):
            D = spec.data_schema.parse(N)
            for i in range(0, len(h.candidates), 3):
                assert sel._smem_at(D, i) == sel._smem(D, h.config(i)), (formula, N, i)
        assert callable(sel._smem_table) == per_d
    bad = smem_spec("test.smem_bad", "N / 3 - bx")
    sel = Selector(h, spec=bad)
    with pytest.raises(SpecError, match="non-negative integer"):
        sel._smem_at(bad.data_schema.parse(4), 0)
