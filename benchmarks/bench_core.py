"""CPU benchmarks of the core: helper-program evaluation and rational fitting.

    python benchmarks/bench_core.py [--quick]

(i)  the specialised evaluation of a helper-sized program: the MWP-CWP template with occupancy,
     the kernel quantities (blocks, threads, regs, smem) and six fitted metric functions (four
     per-configuration TableFits, two joint RationalFits) bound in, over 100 candidate blocks;
(ii) a 3-variable `fit_rational` with degree search on 500 noisy samples.

Prints a table (median, p10, p90) and writes benchmarks/results/cpu_core.json with the machine,
the date and the commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from klaraptor.device.occupancy import arch_params
from klaraptor.fit import fit_rational, fit_rational_table
from klaraptor.models.mwp_cwp import MwpCwpModel
from klaraptor.program import Program, ceil, const, var

ROOT = Path(__file__).resolve().parent
HW = {
    "hw_clock_ghz": 1.98,
    "hw_mem_bw_gbs": 4300.0,
    "hw_n_sm": 132.0,
    "hw_mem_ld": 600.0,
    "hw_dep_del_coal": 4.0,
    "hw_dep_del_uncoal": 40.0,
    "hw_issue_cycles": 4.0,
}


def candidates(n: int = 100) -> np.ndarray:
    """``n`` power-of-two blocks (bx, by, bz) with 32 <= threads <= 1024, spread evenly."""
    pow2 = [2**i for i in range(11)]
    shapes = sorted(
        (bx, by, bz)
        for bx, by, bz in itertools.product(pow2, pow2, (1, 2, 4, 8))
        if 32 <= bx * by * bz <= 1024
    )
    pick = np.linspace(0, len(shapes) - 1, n).round().astype(int)
    return np.array([shapes[i] for i in pick], dtype=np.float64)


def helper_program(cands: np.ndarray) -> Program:
    """The MWP-CWP template with synthetic metrics of a 2-D stencil-like kernel fitted in."""
    n_cfg = len(cands)
    bx, by, bz = cands.T
    sizes = np.array([64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0])
    n = np.repeat(sizes, n_cfg)
    cfg = np.tile(np.arange(n_cfg), sizes.size)
    bxs, bys = bx[cfg], by[cfg]
    rng = np.random.default_rng(1)
    noise = lambda: 1 + 0.002 * rng.standard_normal(n.size)  # noqa: E731
    strided = bxs < 32
    table_metrics = {
        "inst_per_warp": (40 + 6 * n / bys) * noise(),
        "coal_mem_per_warp": np.where(strided, 0.5, 2 + n / (8 * bys)) * noise(),
        "uncoal_mem_per_warp": np.where(strided, 2 + n / (8 * bys), 0.5) * noise(),
        "uncoal_per_mw": np.where(strided, 32 / bxs, 1.0) * noise(),
    }
    subs: dict[str, Program] = {
        name: fit_rational_table(n, y, cfg, n_cfg, names=["N"]).to_program(name)
        for name, y in table_metrics.items()
    }
    joint = {"N": n, "bx": bxs, "by": bys}
    subs["load_bytes_per_warp"] = fit_rational(
        joint, (128 * n + 64 * bxs) / (n + 4) * noise(), data_vars=["N"]
    ).to_program("load_bytes_per_warp")
    subs["sync_per_warp"] = fit_rational(
        {"N": n, "bx": bxs}, (n / 16 + 1) * noise(), data_vars=["N"]
    ).to_program("sync_per_warp")
    N, BX, BY, BZ = var("N"), var("bx"), var("by"), var("bz")
    subs["blocks"] = Program(
        "blocks", ["N", "bx", "by"], [("g", ceil(N / BX) * ceil(N / BY))], ["g"]
    )
    subs["threads"] = Program("threads", ["bx", "by", "bz"], [("t", BX * BY * BZ)], ["t"])
    subs["regs"] = Program("regs", [], [("r", const(32.0))], ["r"])
    subs["smem"] = Program("smem", ["bx", "by"], [("s", (BX + 2) * (BY + 2) * 4)], ["s"])
    return MwpCwpModel().program(["N", "bx", "by", "bz", "cfg"]).bind(subs)


def timed(fn: Callable[[], object], repeats: int, warmup: int) -> np.ndarray:
    for _ in range(warmup):
        fn()
    out = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        out[i] = time.perf_counter_ns() - t0
    return out


def summary(ns: np.ndarray) -> dict[str, float]:
    p10, med, p90 = np.percentile(ns, [10, 50, 90])
    return {
        "median_s": med * 1e-9,
        "p10_s": p10 * 1e-9,
        "p90_s": p90 * 1e-9,
        "repeats": int(ns.size),
    }


def commit() -> str | None:
    from klaraptor.core.provenance import commit as _commit

    return _commit()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args()
    eval_repeats, fit_repeats = (200, 3) if args.quick else (5000, 15)

    cands = candidates()
    prog = helper_program(cands)
    fixed = {
        "bx": cands[:, 0],
        "by": cands[:, 1],
        "bz": cands[:, 2],
        "cfg": np.arange(len(cands), dtype=np.float64),
        **HW,
        **arch_params((9, 0)).hw_inputs(),
    }
    fn = prog.specialize(fixed)
    cycles = fn(N=4096.0)["cycles"]
    assert cycles.shape == (len(cands),) and np.isfinite(cycles).all()
    np.testing.assert_array_equal(cycles, prog.evaluate(N=4096.0, **fixed)["cycles"])
    results = {
        "helper_specialized_eval_100_candidates": summary(
            timed(lambda: fn(N=4096.0), eval_repeats, 200)
        ),
        "helper_tree_walk_eval_100_candidates": summary(
            timed(lambda: prog.evaluate(N=4096.0, **fixed), max(eval_repeats // 50, 20), 5)
        ),
    }

    rng = np.random.default_rng(0)
    a = rng.integers(1, 9, 500).astype(float) * 32
    b = 2.0 ** rng.integers(0, 6, 500)
    c = 2.0 ** rng.integers(0, 4, 500)
    y = (a * a / b + 5 * c + 1) / (c + 1) * (1 + 0.01 * rng.standard_normal(500))
    X = {"N": a, "bx": b, "by": c}
    results["fit_rational_3var_500_samples"] = summary(
        timed(lambda: fit_rational(X, y, data_vars=["N"]), fit_repeats, 1)
    )

    print(f"{'benchmark':44s} {'median':>12s} {'p10':>12s} {'p90':>12s} {'repeats':>8s}")
    for name, r in results.items():
        cells = [
            f"{r[k] * 1e6:10.1f} us" if r[k] < 0.1 else f"{r[k] * 1e3:10.1f} ms"
            for k in ("median_s", "p10_s", "p90_s")
        ]
        print(f"{name:44s} {cells[0]:>12s} {cells[1]:>12s} {cells[2]:>12s} {r['repeats']:8d}")

    report = {
        "results": results,
        "program": {
            "bound_subprograms": sorted(prog.subprograms),
            "candidates": len(cands),
            "specialized_statements": fn.source.count("\n") - 2,
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": "python benchmarks/bench_core.py" + (" --quick" if args.quick else ""),
    }
    out = ROOT / "results" / "cpu_core.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT.parent)}")


if __name__ == "__main__":
    main()
