"""Benchmark of SNOWPACK's prediction for a new D over all candidates (issue 12: <= 1 ms).

    python benchmarks/bench_snowpack_predict.py [OUTDIR] [--model FILE] [--calls N] [--learners]

For every one of the 44 recorded H200 suite kernels, a `Predictor` of the shipped model (or
--model FILE) predicts the time of each of the kernel's recorded candidate blocks (10 to 231) at
`--calls` distinct sizes D beyond its training sizes, each call a D never predicted before:
(a) the first call of a kernel (it builds the per-kernel feature cache and the level line),
(b) every later call for a new D: the whole `Predictor.predict_ms` (features + regressor),
(c) its parts: the D-dependent feature assembly alone, and the regressor alone on those rows.
With --learners it also fits every grid entry of every learner (targets and views as the shipped
model) on the recorded rows and times the regressor alone on 256 rows, beside the cost the
search's tie-break estimates from the model's size (`COST_NS`); --learners-only skips the rest
and writes OUTDIR/snowpack_cost_model.json instead.

One thread (threadpoolctl; set OMP_NUM_THREADS=1 too), the garbage collector off while timing,
time.perf_counter_ns around each call. Writes OUTDIR/bench_snowpack_predict.json (default
benchmarks/results/) with medians, p10, p90 and max in milliseconds, per kernel and over all
calls, and provenance; prints a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from klaraptor import suite
from klaraptor.core.provenance import stamp
from klaraptor.models.snowpack.model import Predictor, load_shipped
from klaraptor.suite.recorded import recorded_datasets

ROOT = Path(__file__).resolve().parent
TARGET_MS = 1.0
LEARNER_ROWS = 256  # candidate rows each learner is timed on


def stats(ms: list[float] | np.ndarray) -> dict[str, float]:
    a = np.asarray(ms, dtype=np.float64)
    return {
        "median_ms": float(np.median(a)),
        "p10_ms": float(np.percentile(a, 10)),
        "p90_ms": float(np.percentile(a, 90)),
        "max_ms": float(a.max()),
        "n": int(a.size),
    }


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    """(ms, result) of fn(*args)."""
    t0 = time.perf_counter_ns()
    out = fn(*args)
    return (time.perf_counter_ns() - t0) / 1e6, out


def bench_kernels(reg: Any, calls: int) -> dict[str, Any]:
    per_kernel: dict[str, Any] = {}
    every: dict[str, list[float]] = {"first": [], "new_D": [], "features": [], "regressor": []}
    for data in recorded_datasets().values():
        device = data.profile()
        for name, kd in sorted(data.kernels.items()):
            spec = suite.get(name)
            blocks = sorted({b for _, b in kd.times()})
            top = max(spec.size(n).values()[0] for n in spec.meta["eval_sizes"])
            sizes = [spec.size(top + i) for i in range(calls + 1)]  # all distinct, all new
            pred = Predictor(spec, device, regressor=reg)
            gc.collect()
            gc.disable()
            try:
                first, _ = timed(pred.predict_ms, sizes[0], blocks)
                whole = [timed(pred.predict_ms, D, blocks)[0] for D in sizes[1:]]
                cf = pred.features(blocks)
                feats, regs = [], []
                for D in sizes[1:]:
                    t, X = timed(cf.at, D)
                    rows = X[np.isfinite(X).all(axis=1)]
                    feats.append(t)
                    line = reg.fitted.level_line(rows[0])
                    regs.append(timed(reg.predict_log, rows, line)[0])
            finally:
                gc.enable()
            per_kernel[name] = {
                "candidates": len(blocks),
                "first_ms": first,
                "new_D": stats(whole),
                "features_median_ms": float(np.median(feats)),
                "regressor_median_ms": float(np.median(regs)),
            }
            every["first"].append(first)
            every["new_D"] += whole
            every["features"] += feats
            every["regressor"] += regs
    return {"overall": {k: stats(v) for k, v in every.items()}, "per_kernel": per_kernel}


def bench_learners(reg: Any) -> dict[str, Any]:
    """Every hyper-parameter entry of every learner's grid, fitted on the recorded rows (targets
    and views as the shipped model), timed on 256 rows, beside the cost the search's tie-break
    estimates for it (`Fitted.cost_ns`, `COST_NS`): the check of that cost model."""
    from klaraptor.models.snowpack.learner import fit_rows
    from klaraptor.models.snowpack.search import default_grids
    from klaraptor_bench.snowpack_eval import recorded_corpus

    c, _, _ = recorded_corpus()
    groups, counts = np.unique(c.group, return_counts=True)
    batch = np.resize(c.X[c.group == groups[np.argmax(counts)]], (LEARNER_ROWS, c.X.shape[1]))
    out = {}
    for learner, grid in default_grids().items():
        rows = np.arange(len(c)) if learner != "svr" else np.arange(0, len(c), len(c) // 2500)
        for i, params in enumerate(grid):
            fitted = fit_rows(c, learner, params, reg.target, reg.view, rows)
            line = fitted.level_line(batch[0])
            fitted.predict(batch, line)
            s = stats([timed(fitted.predict, batch, line)[0] for _ in range(50)])
            estimate = fitted.cost_ns() * len(batch) / 1e6
            out[f"{learner}[{i}]"] = {
                "params": params,
                "fit_rows": int(len(rows)),
                "parameters": fitted.parameters(),
                "estimated_ms": estimate,
                "measured_over_estimated": s["median_ms"] / estimate,
                **s,
            }
    return out


def fit_cost_model(timed_learners: dict[str, Any]) -> dict[str, Any]:
    """ns per candidate row = fixed + per-unit cost × units (perceptron weights, SVR numbers,
    trees), fitted by non-negative relative least squares to the timed grid entries; beside it
    `COST_NS` as the code has it, and each entry's timing over that estimate."""
    from scipy.optimize import nnls

    from klaraptor.models.snowpack.learner import COST_NS

    learners = ("mlp", "svr", "hgb")
    A, y = [], []
    for key, e in timed_learners.items():
        learner = key.split("[")[0]
        units = e["params"]["max_iter"] if learner == "hgb" else e["parameters"]
        A.append([1.0] + [units if learner == x else 0.0 for x in learners])
        y.append(e["median_ms"] * 1e6 / LEARNER_ROWS)
    a, t = np.array(A), np.array(y)
    sol, _ = nnls(a / t[:, None], np.ones(len(t)))
    in_code = np.array([COST_NS["fixed"], *(COST_NS[x] for x in learners)])
    return {
        "fitted_ns": dict(zip(("fixed", *learners), map(float, sol), strict=True)),
        "in_code_ns": COST_NS,
        "timed_over_in_code": dict(zip(timed_learners, map(float, t / (a @ in_code)), strict=True)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "results"))
    ap.add_argument("--model", help="a SNOWPACK model file (default: the shipped one)")
    ap.add_argument("--calls", type=int, default=100, help="new sizes D per kernel")
    ap.add_argument("--learners", action="store_true", help="also time each learner")
    ap.add_argument("--learners-only", action="store_true", help="time the learners alone")
    args = ap.parse_args(argv)
    reg = load_shipped(args.model)
    with threadpool_limits(1):
        result: dict[str, Any] = {
            "model": {
                "learner": reg.learner,
                "params": reg.params,
                "target": reg.target,
                "view": reg.view,
            },
            "target_ms": TARGET_MS,
        }
        if not args.learners_only:
            result.update(bench_kernels(reg, args.calls))
        if args.learners or args.learners_only:
            result["learners_256_rows"] = bench_learners(reg)
            result["cost_model"] = fit_cost_model(result["learners_256_rows"])
    result["machine"] = {"cpu": platform.processor() or platform.machine(), "threads": 1}
    result["provenance"] = stamp("python benchmarks/bench_snowpack_predict.py")
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    # The learners alone go to their own file, not over the kernels' figures.
    name = "snowpack_cost_model.json" if args.learners_only else "bench_snowpack_predict.json"
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    print(f"model: {reg.learner} ({reg.target}, {reg.view} columns)")
    if "overall" in result:
        o = result["overall"]
        for key, label in (
            ("new_D", "predict_ms, new D (features + regressor)"),
            ("features", "  feature assembly"),
            ("regressor", "  regressor"),
            ("first", "first call of a kernel (cache build)"),
        ):
            s = o[key]
            print(
                f"{label:44s} median {s['median_ms']:.3f}  p10 {s['p10_ms']:.3f}  "
                f"p90 {s['p90_ms']:.3f}  max {s['max_ms']:.3f} ms  (n={s['n']})"
            )
        worst = max(result["per_kernel"].items(), key=lambda kv: kv[1]["new_D"]["median_ms"])
        print(
            f"slowest kernel: {worst[0]} ({worst[1]['candidates']} candidates), median "
            f"{worst[1]['new_D']['median_ms']:.3f} ms; target <= {TARGET_MS} ms"
        )
    for learner, s in result.get("learners_256_rows", {}).items():
        print(
            f"learner {learner:7s} on 256 rows: median {s['median_ms']:.3f} ms, estimated "
            f"{s['estimated_ms']:.3f} ms ({s['measured_over_estimated']:.2f}x)"
        )
    if "cost_model" in result:
        print("cost model fitted to this run (ns per row):", result["cost_model"]["fitted_ns"])
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
