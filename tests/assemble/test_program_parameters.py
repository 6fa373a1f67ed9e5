"""Program parameters end to end on the CPU: a kernel whose work per thread (ITEMS) is a
compile-time parameter, built from a store of timed points, chooses (variant, block) per D, and
every export and the history carry the variant.

The timings are a synthetic law in the test (no GPU here): more items per thread amortise the
index arithmetic, but ITEMS = 8 spills registers, so the best variant is ITEMS = 4 with 256
threads. The GPU path (compiling variants, measuring them) is tested on the device by
tests/suite/test_tunables_gpu.py."""

from __future__ import annotations

import math
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from klaraptor.assemble import build, load, plan
from klaraptor.core.errors import BuildError
from klaraptor.core.types import Config, KernelAttributes, ParamValues
from klaraptor.device.profile import recorded_profile
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import CollectFacts, KernelRecord, Measurement, Store
from klaraptor.store.records import params_text

SRC = r"""extern "C" __global__ void scale(const float* x, float* y, int n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
    #pragma unroll
    for (int j = 0; j < ITEMS; ++j) {
        long i = i0 + j;
        if (i < n) y[i] = 2.0f * x[i];
    }
}"""
ITEMS = (1, 2, 4, 8)
REGS = {1: 16, 2: 18, 4: 24, 8: 64}
TRAIN = (1 << 16, 1 << 17, 1 << 18, 1 << 19)


def make_args(D: Any, rng: np.random.Generator) -> tuple[Any, ...]:
    import cupy as cp

    n = D["n"]
    return cp.asarray(rng.random(n, dtype=np.float32)), cp.empty(n, cp.float32), np.int32(n)


SPEC = KernelSpec(
    name="test.items.scale",
    source=SRC,
    kernel="scale",
    data=(DataParam("n", arg=2),),
    dim=1,
    grid=("ceil(n / (bx * ITEMS))", "1", "1"),
    make_args=make_args,
    params={"ITEMS": ITEMS},
    default_params={"ITEMS": 1},
    constraints=("bx * ITEMS <= 4096",),
    default_block=(256, 1, 1),
    meta={"train_sizes": list(TRAIN)},
)


def law_ms(n: int, bx: int, items: int) -> float:
    """The synthetic time of one launch."""
    per_elem = 1e-6 * (0.4 + 0.6 / items) * (1.0 + 0.15 * abs(math.log2(bx / 256)))
    spill = 1.6 if items == 8 else 1.0
    blocks = math.ceil(n / (bx * items))
    return n * per_elem * spill + 2e-5 * blocks / 132 + 3e-3


def sm_bound_ms(n: int, bx: int, items: int) -> float:
    """A synthetic SM-bound time: the busiest SM's blocks, ceil(blocks / 132), each costing its
    work (bx * items elements) plus a fixed 256, ITEMS = 8 spilling. At 2^19 the largest blocks
    (4096 elements, 128 of them: one per SM) win; at 600000 they need two rows of blocks and
    1024-element blocks win."""
    blocks = math.ceil(n / (bx * items))
    spill = 1.3 if items == 8 else 1.0
    return 1e-2 * math.ceil(blocks / 132) * (bx * items + 256) / 256 * spill


def _store(path: Path, law: Any = law_ms) -> tuple[Store, str]:
    prof = recorded_profile("h200")
    store = Store(path)
    store.put_kernel(
        KernelRecord(SPEC.name, SPEC.fingerprint(), SPEC.data_names, SPEC.to_summary())
    )
    attrs = {
        params_text(ParamValues(("ITEMS",), (i,))): KernelAttributes(REGS[i], 0, 0, 0, 1024, 49152)
        for i in ITEMS
    }
    store.put_collect_facts(
        SPEC.name,
        prof.key,
        CollectFacts(
            device_name=prof.name,
            attributes=attrs["ITEMS=1"],
            variant_attributes=attrs,
            arg_bytes=tuple(((n,), 8 * n) for n in TRAIN),
        ),
    )
    store.save_profile(prof)
    rows = []
    for n in TRAIN:
        D = SPEC.size(n)
        for items in ITEMS:
            pv = SPEC.param_values({"ITEMS": items})
            for t in range(32, 1025, 32):
                if t * items > 4096:
                    continue
                block = (t, 1, 1)
                ms = law(n, t, items)
                grid = SPEC.grid_for(D, block, pv)
                value = {"median_ms": ms, "spread": 0.01, "grid": list(grid)}
                rows.append(
                    Measurement(SPEC.name, prof.key, D, block, "time", "ok", value, params=pv)
                )
    store.put_measurements(rows)
    return store, prof.key


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store, _ = _store(tmp_path_factory.mktemp("params") / "s.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = build(
            SPEC,
            model="scaling",
            store=store,
            device=recorded_profile("h200"),
            collect_data=False,
            budget=None,
            progress=False,
        )
    return kern, store


def test_the_joint_choice_picks_the_variant_and_block_the_law_favours(built: Any) -> None:
    kern, _ = built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = kern.select(1 << 24)
    assert sel.params == ParamValues(("ITEMS",), (4,))
    assert sel.block == (256, 1, 1)
    assert sel.grid == (math.ceil((1 << 24) / (256 * 4)), 1, 1)
    assert sel.launch.params["ITEMS"] == 4 and sel.launch.block == sel.block
    assert all(isinstance(c, Config) for c, _ in sel.topk) and sel.topk[0][0] == sel.config
    # The candidates of every variant compete; the register-hungry ITEMS=8 is never the best.
    n_items = {c.params["ITEMS"] for c in kern.helper.keys}
    assert n_items == set(ITEMS)


def test_explain_shows_each_variants_rows(built: Any) -> None:
    kern, _ = built
    rows = kern.explain(1 << 22)
    assert {r.params["ITEMS"] for r in rows} == set(ITEMS)
    best = min((r for r in rows if r.rank is not None), key=lambda r: r.rank)
    assert best.params["ITEMS"] == 4


def test_the_c_header_returns_the_parameters_and_chooses_as_select(
    built: Any, tmp_path: Path
) -> None:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    kern, _ = built
    header = kern.export_c()
    assert "int params[1]" in header and "ITEMS" in header
    c_name = kern.helper.c_name
    (tmp_path / "h.h").write_text(header)
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "h.h"\n'
        "int main(void) { long D[1]; int g[3], b[3], p[1];\n"
        '  while (scanf("%ld", &D[0]) == 1) {\n'
        f'    if (klaraptor_{c_name}_best(D, g, b, p) != 0) {{ puts("none"); continue; }}\n'
        '    printf("%d %d %d %d\\n", g[0], b[0], b[1], p[0]); }\n  return 0; }\n'
    )
    exe = tmp_path / "a.out"
    subprocess.run(
        [
            cc,
            "-std=c99",
            "-O1",
            "-ffp-contract=off",
            str(tmp_path / "main.c"),
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
        capture_output=True,
    )
    sizes = [1 << 16, 100_003, 1 << 20, 3 << 21, 1 << 25]
    out = subprocess.run(
        [str(exe)], input="\n".join(map(str, sizes)), capture_output=True, text=True, check=True
    ).stdout.split("\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, line in zip(sizes, out):
            sel = kern.select(n)
            assert line.split() == [
                str(sel.grid[0]),
                str(sel.block[0]),
                str(sel.block[1]),
                str(sel.params["ITEMS"]),
            ]


def test_the_python_export_returns_the_parameters(built: Any) -> None:
    kern, _ = built
    ns: dict[str, Any] = {}
    exec(compile(kern.export_python(), "<export>", "exec"), ns)  # noqa: S102 - our own output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (1 << 18, 1 << 23):
            grid, block, params = ns["best"]((n,))
            sel = kern.select(n)
            assert (tuple(grid), tuple(block), params) == (sel.grid, sel.block, dict(sel.params))


def test_history_and_reload_keep_the_variant(built: Any) -> None:
    kern, store = built
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = kern.select(1 << 21)
        kern.selector.flush()
        rows = store.history(SPEC.name, kern.device_key)
        again = load(SPEC.name, store=store, spec=SPEC)
        assert again.select(1 << 21).params == sel.params
    assert any(r.params == sel.params and r.D == sel.D for r in rows)


def test_a_model_without_parameter_support_is_refused(built: Any) -> None:
    _, store = built
    with pytest.raises(
        BuildError, match="program parameters .* which model 'mwp_cwp' does not model"
    ):
        build(
            SPEC, model="mwp_cwp", store=store, device=recorded_profile("h200"), collect_data=False
        )


def test_the_budgeted_build_plans_over_the_joint_space(tmp_path: Path) -> None:
    store, _ = _store(tmp_path / "b.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = build(
            SPEC, store=store, device=recorded_profile("h200"), collect_data=False, progress=False
        )
        sel = kern.select(1 << 24)
    assert sel.params["ITEMS"] == 4
    assert kern.report.collect is not None and kern.report.collect.plan is not None
    assert kern.report.collect.plan.ratio <= 1.5 + 1e-9
    p = plan(SPEC, device=recorded_profile("h200"), store=store)
    measured = [pt for pt in p if pt.status == "measure"]
    assert {pt.params["ITEMS"] for pt in measured} == set(ITEMS)
    assert all(pt.block[0] * pt.params["ITEMS"] <= 4096 for pt in measured)


def test_the_launch_quantity_is_vetoed_where_the_fold_contradicts_it(built: Any) -> None:
    """The synthetic law above is far from its footprint's DRAM time (SM-bound), but its times
    do not follow the busiest SM's blocks: the ×2 fold vetoes them, the model is as before."""
    kern, _ = built
    q = kern.report.fits["scaling"]["report"]["launch_quantity"]
    assert kern.report.fits["sm_bound_ratio"] >= 10
    assert q["form"] == "busiest_sm" and q["used"] is False
    assert q["fold"]["r_with"] > q["fold"]["r_without"]
    assert kern.helper.model.inputs == ("n", "cfg")


def test_the_launch_quantity_reaches_select_and_the_exports(tmp_path: Path) -> None:
    """Times that follow the busiest SM's blocks: the fold keeps them, the program takes each
    candidate's block and parameters, and select and the Python export choose the fastest
    configuration of the law at sizes never trained."""
    store, _ = _store(tmp_path / "sm.sqlite", law=sm_bound_ms)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kern = build(SPEC, model="scaling", store=store, device=recorded_profile("h200"),
                     collect_data=False, budget=None, progress=False)  # fmt: skip
        q = kern.report.fits["scaling"]["report"]["launch_quantity"]
        assert q["form"] == "busiest_sm" and q["used"] is True
        assert {"bx", "ITEMS", "cfg"} <= set(kern.helper.model.inputs)
        ns: dict[str, Any] = {}
        exec(compile(kern.export_python(), "<export>", "exec"), ns)  # noqa: S102 - our own output
        for n in (600_000, 700_000, 1 << 21, 3_000_000):
            sel = kern.select(n)
            best = min(sm_bound_ms(n, c.block[0], c.params["ITEMS"]) for c in kern.helper.keys)
            assert sm_bound_ms(n, sel.block[0], sel.params["ITEMS"]) == pytest.approx(best)
            grid, block, params = ns["best"]((n,))
            assert (tuple(grid), tuple(block), params) == (sel.grid, sel.block, dict(sel.params))
