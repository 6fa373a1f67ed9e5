"""Helper programs: the exported C header and Python module choose exactly what the Selector
chooses; building a helper from a TrainingSet; the build round trip through the store."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from klaraptor.assemble import Kernel, load
from klaraptor.assemble.api import job_from_training
from klaraptor.core.errors import BuildError, KlaraptorError
from klaraptor.core.types import DataSize
from klaraptor.fit.training import FitOptions
from klaraptor.helper.program import HelperProgram
from klaraptor.models import get_model
from klaraptor.runtime.selector import Selector
from klaraptor.store import KernelRecord, Store
from tests import helpers as hs

CC = shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler")
CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"]

# 40 sizes from 1 to 20000, mostly not powers of two (and a few that are, and their neighbours).
SIZES = sorted(
    {
        1,
        2,
        3,
        7,
        15,
        16,
        17,
        31,
        33,
        63,
        64,
        65,
        100,
        127,
        129,
        255,
        257,
        333,
        511,
        512,
        513,
        777,
        1000,
        1023,
        1025,
        1500,
        2047,
        2049,
        3001,
        4095,
        4097,
        5000,
        7919,
        8191,
        8193,
        10007,
        12345,
        16383,
        16385,
        20000,
    }
)
assert len(SIZES) == 40


def helpers() -> dict[str, HelperProgram]:
    return {
        "mwp_1d": hs.mwp_helper(hs.KERNEL_1D)[1],
        "mwp_2d": hs.mwp_helper(hs.KERNEL_2D)[1],
        "tie": hs.tie_helper(),
        "tie_no_band": hs.tie_helper(0.0),
        "mn": hs.mn_helper(),
        "gated": hs.gated_helper(),  # no admissible candidate for N < 64
    }


def sizes_for(h: HelperProgram) -> list[DataSize]:
    schema = h.data_schema
    if len(h.data_names) == 1:
        return [schema.parse(n) for n in SIZES]
    # (M, N) pairs: both orders of unequal sizes, so a swapped D would show.
    return [schema.parse((m, SIZES[(i * 7 + 3) % len(SIZES)])) for i, m in enumerate(SIZES)]


def expected(h: HelperProgram, Ds: list[DataSize]) -> list[tuple[tuple[int, ...], ...] | None]:
    sel = Selector(h)
    out: list[tuple[tuple[int, ...], ...] | None] = []
    for D in Ds:
        try:
            s = sel.select(D)
        except KlaraptorError:
            out.append(None)
            continue
        out.append((s.grid, s.block))
    return out


def run_c(
    h: HelperProgram, Ds: list[DataSize], where: Path
) -> list[tuple[tuple[int, ...], ...] | None]:
    """Compile the header with a main that prints `rc gx gy gz bx by bz` per line of D."""
    d = where
    d.mkdir()
    (d / "helper.h").write_text(h.to_c_header())
    nd = len(h.data_names)
    (d / "main.c").write_text(
        f"""#include <stdio.h>
#include "helper.h"
int main(void) {{
    long D[{nd}];
    int grid[3] = {{0, 0, 0}}, block[3] = {{0, 0, 0}}, i;
    for (;;) {{
        int rc;
        for (i = 0; i < {nd}; ++i)
            if (scanf("%ld", &D[i]) != 1) return 0;
        rc = klaraptor_{h.c_name}_best(D, grid, block);
        printf("%d %d %d %d %d %d %d\\n", rc, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    }}
}}
"""
    )
    exe = d / "choose"
    res = subprocess.run(
        [CC, *CFLAGS, "-o", str(exe), str(d / "main.c"), "-lm"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    stdin = "\n".join(" ".join(str(v) for v in D.values()) for D in Ds) + "\n"
    run = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True)
    out: list[tuple[tuple[int, ...], ...] | None] = []
    for line in run.stdout.splitlines():
        rc, *v = (int(x) for x in line.split())
        out.append(None if rc != 0 else (tuple(v[:3]), tuple(v[3:])))
    assert len(out) == len(Ds)
    return out


def run_python(h: HelperProgram, Ds: list[DataSize]) -> list[tuple[tuple[int, ...], ...] | None]:
    ns: dict = {}
    exec(compile(h.to_python_module(), f"<helper {h.kernel}>", "exec"), ns)
    out: list[tuple[tuple[int, ...], ...] | None] = []
    for D in Ds:
        try:
            grid, block = ns["best"](D.values())
        except ValueError:
            out.append(None)
            continue
        out.append((tuple(grid), tuple(block)))
    return out


@needs_cc
def test_c_header_chooses_what_the_selector_chooses(tmp_path: Path) -> None:
    for name, h in helpers().items():
        Ds = sizes_for(h)
        want = expected(h, Ds)
        assert sum(w is not None for w in want) >= (25 if name == "gated" else 35), name
        got = run_c(h, Ds, tmp_path / name)
        bad = [(D, g, w) for D, g, w in zip(Ds, got, want) if g != w]
        assert not bad, (name, bad[:5])


def test_python_module_chooses_what_the_selector_chooses() -> None:
    for name, h in helpers().items():
        Ds = sizes_for(h)
        got, want = run_python(h, Ds), expected(h, Ds)
        if name == "gated":
            assert want[:10] == [None] * 10 and None not in want[11:]
        bad = [(D, g, w) for D, g, w in zip(Ds, got, want) if g != w]
        assert not bad, (name, bad[:5])


def test_tie_rule_is_exercised() -> None:
    """The tie helper's choices are decided by the tie rule (not by the smallest prediction
    alone), including the occupancy and thread-count tie breaks and excluded candidates."""
    h = hs.tie_helper()
    for n in (1, 100, 5000):
        p = h.predict(h.data_schema.parse(n))
        t = p.ms[p.valid]
        tied = np.flatnonzero(p.valid & (p.ms <= t.min() * (1 + h.band)))
        assert len(tied) >= 3  # several candidates tie
        best = int(p.order[0])
        occ = p.outputs["occupancy"]
        assert occ[best] == occ[tied].max()
        same_occ = tied[occ[tied] == occ[best]]
        threads = [np.prod(h.candidates[i]) for i in same_occ]
        assert np.prod(h.candidates[best]) == min(threads)
        assert best == min(i for i in same_occ if np.prod(h.candidates[i]) == min(threads))
    p = h.predict(h.data_schema.parse(100))
    assert (~p.valid).sum() >= 3  # nan, inf and constraint exclusions


def test_choose_equals_predict_order() -> None:
    """The selector's fast path gives exactly the documented order (rank), its times and grid."""
    cases = (
        list(helpers().values())
        + [hs.tie_helper(b) for b in (1.0, math.nan, -0.5, 1e308)]
        + [hs.mn_helper(0.0), hs.tiny_1d_helper()]
    )
    for h in cases:
        for D in sizes_for(h)[::3]:
            p = h.predict(D)
            for k in (1, 2, 4, 9, 100):
                top, ms, grid = h.choose(D, k)
                assert top == [int(i) for i in p.order[:k]], (h.kernel, h.band, D, k)
                assert ms == [float(p.ms[i]) for i in top]
                if top:
                    assert grid == tuple(int(g) for g in p.grid[top[0]])
                else:
                    assert grid is None


# -- build --------------------------------------------------------------------------------------
def test_make_helper_from_synthetic_training_set() -> None:
    spec, helper, report, rejected = hs.mwp_helper(hs.KERNEL_1D)
    model = get_model("mwp_cwp")
    assert set(report["metrics"]) == set(model.metrics)
    for name, m in report["metrics"].items():
        assert m["method"] in ("constant", "table", "joint"), name
        assert "validation_max" in m and "validation_median" in m, name
    methods = {k: v["method"] for k, v in report["metrics"].items()}
    # Metrics with the same value at every point are bound as constants, not fitted.
    assert methods["sync_per_warp"] == "constant"  # 0 everywhere
    assert methods["uncoal_mem_per_warp"] == "constant"  # 1-D: every bx >= 32 is coalesced
    assert methods["inst_per_warp"] != "constant"
    assert report["metrics"]["sync_per_warp"]["validation_max"] == 0.0
    assert rejected == {}
    assert len(helper.candidates) == 32 and helper.band == pytest.approx(0.02)
    # A metric made constant at every point becomes a constant fit too.
    job = job_from_training(
        spec,
        hs.profile(),
        hs.ATTRS,
        hs.training_set(spec, constant={"inst_per_warp": 123.0}),
        fit=FitOptions(mode="table"),
    )
    _, rep2 = model.make_helper(job)
    assert rep2["metrics"]["inst_per_warp"] == {
        "method": "constant",
        "validation_max": 0.0,
        "validation_median": 0.0,
        "value": 123.0,
    }
    # The fitted metrics reproduce the (noise-free) training values.
    for name in ("inst_per_warp", "coal_mem_per_warp"):
        assert report["metrics"][name]["validation_max"] < 1e-6, name


@needs_cc
def test_export_c_compiles(tmp_path: Path) -> None:
    spec, helper, report, rejected = hs.mwp_helper(hs.KERNEL_2D)
    kern = Kernel(helper, spec=spec, store=None, device_key="dev", rejected=rejected)
    src = tmp_path / "h.c"
    src.write_text(
        kern.export_c() + "\nint use(const long *D, int *g, int *b) {\n"
        f"    return klaraptor_{helper.c_name}_best(D, g, b);\n}}\n"
    )
    res = subprocess.run(
        [CC, *CFLAGS, "-c", "-o", str(tmp_path / "h.o"), str(src)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert "def best(D)" in kern.export_python()


def same_prediction(a: HelperProgram, b: HelperProgram, D: DataSize) -> None:
    pa, pb = a.predict(D), b.predict(D)
    for x, y in [(pa.ms, pb.ms), (pa.grid, pb.grid), (pa.order, pb.order), (pa.valid, pb.valid)]:
        assert x.tobytes() == y.tobytes()
    assert pa.outputs.keys() == pb.outputs.keys()
    for k in pa.outputs:
        assert pa.outputs[k].tobytes() == pb.outputs[k].tobytes(), k


def test_to_dict_from_dict_round_trip_is_bit_exact() -> None:
    for h in (hs.mwp_helper(hs.KERNEL_2D)[1], hs.tie_helper(), hs.mn_helper()):
        again = HelperProgram.from_dict(json.loads(json.dumps(h.to_dict())))
        assert again.to_dict() == h.to_dict()
        for D in sizes_for(h)[::4]:
            same_prediction(h, again, D)
            assert again.choose(D, 4) == h.choose(D, 4)


def test_load_restores_the_build(tmp_path: Path) -> None:
    spec, helper, report, rejected = hs.mwp_helper(hs.KERNEL_2D)
    store = Store(tmp_path / "k.db")
    device = hs.profile().key
    store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
    store.put_build(
        spec.name,
        device,
        helper.model_name,
        helper.to_dict(),
        {"fits": report},
        {(1024, 1, 1): "too many registers"},
    )
    kern = load(spec.name, store=store)
    assert kern.device_key == device and kern.spec is not None and kern.spec.name == spec.name
    for D in [spec.size(n) for n in SIZES[::5]]:
        same_prediction(helper, kern.helper, D)
        assert kern.select(D) == Selector(helper).select(D)
    rows = kern.explain(1000)
    assert (
        rows[-1].block == (1024, 1, 1)
        and "rejected at build: too many registers" in rows[-1].excluded
    )
    store.close()


def test_load_errors_name_the_problem(tmp_path: Path) -> None:
    empty = Store(tmp_path / "empty.db")
    with pytest.raises(BuildError, match=r"no build of kernel 'polybench\.gemm\.gemm'.*empty\.db"):
        load("polybench.gemm.gemm", store=empty)
    spec, helper, _, _ = hs.mwp_helper(hs.KERNEL_2D)
    store = Store(tmp_path / "one.db")
    store.put_kernel(KernelRecord(spec.name, spec.fingerprint(), spec.data_names))
    store.put_build(spec.name, "dev-a", helper.model_name, helper.to_dict(), {})
    # A name the store does not know is an unknown kernel, with the closest names offered.
    with pytest.raises(BuildError, match=r"unknown kernel 'no\.such\.kernel'"):
        load("no.such.kernel", store=store)
    with pytest.raises(BuildError, match=r"unknown kernel .*did you mean 'polybench\.gemm\.gemm'"):
        load("polybench.gemm.gem", store=store)
    with pytest.raises(BuildError, match=r"built on \['dev-a'\], not on 'dev-b'.*force"):
        load(spec.name, store=store, device="dev-b")
    with pytest.warns(UserWarning, match="forced"):
        assert load(spec.name, store=store, device="dev-b", force=True).device_key == "dev-a"
    with pytest.raises(BuildError, match=r"with model 'other'"):
        load(spec.name, store=store, model="other")
    empty.close()
    store.close()


def test_the_subset_order_equals_the_full_tie_order() -> None:
    """Where the occupancy depends on D, `choose` orders only the tied group and the k smallest
    predictions: the same first k as the full tie order, on random predictions with exact ties,
    near-ties within the band, equal occupancies, inf and nan (the joint-space fast path)."""
    h = hs.mn_helper(0.0)
    n = len(h.candidates)
    rng = np.random.default_rng(7)
    compared = 0
    for trial in range(400):
        score = rng.choice([1.0, 1.0005, 1.002, 1.3, 2.0, 5.0], size=n) * rng.uniform(0.5, 2.0)
        if trial % 3 == 0:
            score = rng.uniform(1.0, 3.0, size=n)
        bad = rng.random(n) < 0.2
        score[bad] = np.inf
        if trial % 5 == 0:
            score[rng.random(n) < 0.1] = np.nan
        occ = rng.choice([0.25, 0.5, 1.0, np.nan], size=n)
        tmin = float(np.minimum.reduce(score))
        if not tmin < math.inf:
            continue
        tie = tmin * (1.0 + h.band + rng.choice([0.0, 0.001, 0.01]))
        tied = score <= tie if tie < math.inf else score < tie
        perm = np.lexsort((np.arange(n), h._threads, -occ))
        for k in (1, 2, 3, 5, 9, n):
            want = h._top_by_perm(score, tied, perm, k)
            got = h._top_by_subset(score, tied, occ, k)
            assert got is None or got == want, (trial, k, got, want)
            compared += got is not None
    assert compared > 1000  # the subset path decided, not only its fallback
