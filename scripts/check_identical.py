"""Fingerprint of klaraptor's observable behaviour, to prove a refactor changes nothing.

Usage: python scripts/check_identical.py OUT.json
Run it before and after a change (same machine, same NumPy) and compare the two files byte for
byte (`cmp before.json after.json`). No GPU needed: it builds from the recorded H200 dataset.

Recorded per kernel and model (mwp_cwp, time_fit, auto): the exported C header and Python module,
the stored helper program, the generated source of the specialised programs, the build report
(wall times dropped), the selection (block, grid, topk) and `helper.predict` outputs for several
D. Also `fit_rational` / `fit_rational_table` results on synthetic problems under default and
non-default options. Every float is written as `float.hex`, so equal files mean equal bits.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.fit import fit_rational, fit_rational_table
from klaraptor.suite.recorded import load_recorded

KERNELS = (
    "polybench.conv3d.conv3d",
    "polybench.gemm.gemm",
    "polybench.atax.k1",
    "polybench.gramschm.k1",
    "polybench.fdtd2d.k1",
    "polybench.corr.k1",
)
MODELS = ("mwp_cwp", "time_fit", "auto")
SIZES = (2048, 3000, 4096, 8192)
WALL_KEYS = {"fit_wall_s", "total_wall_s", "wall_s", "fit_s"}  # wall-clock seconds


def exact(x: Any) -> Any:
    """JSON-safe copy with every float (and float array) as hex, wall-clock times dropped."""
    if isinstance(x, float | np.floating):
        return float.hex(float(x))
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, np.ndarray):
        return exact(x.tolist()) if x.dtype != object else [exact(v) for v in x]
    if isinstance(x, dict):
        return {str(k): exact(v) for k, v in x.items() if k not in WALL_KEYS}
    if isinstance(x, list | tuple):
        return [exact(v) for v in x]
    if x is None or isinstance(x, str):
        return x
    if hasattr(x, "to_dict"):
        return exact(x.to_dict())
    return repr(x)


def failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def kernels_part() -> dict[str, Any]:
    data = load_recorded()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = data.to_store(Path(tmp) / "store.sqlite", kernels=KERNELS)
        for name in KERNELS:
            spec = suite.get(name)
            train = [{"N": n} for n in spec.meta["train_sizes"]]
            sizes = sorted({*SIZES, *spec.meta.get("eval_sizes", ())})
            for model in MODELS:
                rec: dict[str, Any] = {}
                out[f"{name}/{model}"] = rec
                try:
                    kern = build(
                        spec,
                        train,
                        model=model,
                        store=store,
                        device=data.profile(),
                        collect_data=False,
                        progress=False,
                    )
                except Exception as exc:  # noqa: BLE001 - the failure itself is the fingerprint
                    rec["build_error"] = failure(exc)
                    continue
                helper = kern.helper
                rec["export_c"] = kern.export_c()
                rec["export_python"] = kern.export_python()
                rec["helper"] = exact(helper.to_dict())
                rec["report"] = exact(kern.report)
                rec["specialized"] = {
                    f: getattr(helper, f).source for f in ("_model_fn", "_admit_fn", "_choose_fn")
                }
                for n in sizes:
                    at: dict[str, Any] = {}
                    rec[f"N={n}"] = at
                    try:
                        sel = kern.select({"N": n})
                        at["block"] = list(sel.block)
                        at["grid"] = list(sel.grid)
                        at["predicted_ms"] = exact(sel.predicted_ms)
                        at["topk"] = [[list(b), exact(t)] for b, t in sel.topk]
                    except Exception as exc:  # noqa: BLE001
                        at["select_error"] = failure(exc)
                    try:
                        pred = helper.predict((n,))
                        at["predict_ms"] = exact(pred.ms)
                        at["predict_order"] = exact(pred.order)
                        at["predict_valid"] = exact(pred.valid)
                        at["predict_grid"] = exact(pred.grid)
                        at["predict_outputs"] = {k: exact(v) for k, v in pred.outputs.items()}
                    except Exception as exc:  # noqa: BLE001
                        at["predict_error"] = failure(exc)
                kern.selector.flush()
    return out


def fits_part() -> dict[str, Any]:
    rng = np.random.default_rng(20240611)
    out: dict[str, Any] = {}
    n = np.array([16, 24, 32, 48, 64, 96, 128, 192, 256], dtype=float)
    shapes = [(bx, 256 // bx) for bx in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    N = np.repeat(n, len(shapes))
    BX = np.tile([s[0] for s in shapes], len(n)).astype(float)
    BY = np.tile([s[1] for s in shapes], len(n)).astype(float)

    problems: dict[str, tuple[Any, Any, dict[str, Any]]] = {
        "poly2": ({"N": n}, 3.0 * n**2 + 2.0 * n + 7.0, {}),
        "rational": ({"N": n}, (n**2 + 5.0) / (n + 3.0), {}),
        "noisy": (
            {"N": N, "bx": BX},
            (N**2 / BX + 40.0 * BX) * (1.0 + 0.02 * rng.standard_normal(N.size)),
            {"data_vars": ["N"]},
        ),
        "collinear": ({"N": N, "bx": BX, "by": BY}, N * (BX + 3.0) + BY, {"data_vars": ["N"]}),
        "options": (
            {"N": N, "bx": BX},
            N**2 / (BX + 1.0) + N,
            {
                "data_vars": ["N"],
                "max_degree": [3, 1],
                "max_den_degree": 1,
                "max_total_degree": 3,
                "holdout_fraction": 0.4,
                "rtol_accept": 0.2,
                "atol_accept": 1e-3,
                "pole_factor": 8.0,
            },
        ),
        "no_holdout": (
            {"N": n},
            n**1.5 + rng.uniform(0, 1, n.size),
            {"holdout": "none", "outlier_filter": False},
        ),
        "bad_degree": ({"N": n}, n, {"max_degree": -1}),
        "all_zero": ({"N": n}, np.zeros_like(n), {}),
    }
    for key, (X, y, kw) in problems.items():
        try:
            fit = fit_rational(X, y, **kw)
            grid = {k: np.linspace(1, 4096, 7) for k in X}
            out[f"rational/{key}"] = {
                "fit": exact(fit.to_dict()),
                "num_coefficients": exact(fit.num_coefficients),
                "den_coefficients": exact(fit.den_coefficients),
                "values": exact(fit(grid)),
                "program": fit.to_program("f").to_c(),
                "repr": repr(fit),
            }
        except Exception as exc:  # noqa: BLE001
            out[f"rational/{key}"] = failure(exc)

    # Bad calls: the error (type and message) is part of the behaviour.
    bad_calls: dict[str, Any] = {
        "unknown_keyword": lambda: fit_rational({"N": n}, n, bogus=1),
        "positional_option": lambda: fit_rational({"N": n}, n, None),
        "degree_list": lambda: fit_rational({"N": N, "bx": BX}, N, max_degree=[3, -1]),
        "degree_length": lambda: fit_rational({"N": n}, n, max_den_degree=[1, 1]),
        "fraction": lambda: fit_rational({"N": n}, n, holdout_fraction=1.5),
        "pole_factor": lambda: fit_rational({"N": n}, n, pole_factor=0.5),
        "two_errors": lambda: fit_rational(np.zeros((0, 1)), [], holdout="bogus"),
        "table_unknown_keyword": lambda: fit_rational_table(N, N, N * 0, 1, degree=2),
        "table_pole_factor": lambda: fit_rational_table(N, N, N * 0, 1, pole_factor=0),
    }
    for key, fn in bad_calls.items():
        try:
            out[f"bad/{key}"] = exact(fn().to_dict())
        except Exception as exc:  # noqa: BLE001
            out[f"bad/{key}"] = failure(exc)

    cfg = np.tile(np.arange(len(shapes)), len(n))
    table_problems: dict[str, tuple[Any, Any, dict[str, Any]]] = {
        "per_cfg": (N, N**2 / BX + 5.0 * BY * N + 11.0, {}),
        "noisy": (N, (N / BX + BY) * (1.0 + 0.03 * rng.standard_normal(N.size)), {}),
        "options": (
            N,
            (N**2 + BX) / (N + BY),
            {
                "max_degree": 2,
                "max_den_degree": 1,
                "holdout_fraction": 0.3,
                "rtol_accept": 0.05,
                "outlier_filter": False,
            },
        ),
        "no_holdout": (N, N * BX + 1.0, {"holdout": "none", "max_total_degree": 2}),
        "bad_holdout": (N, N, {"holdout": "smallest"}),
    }
    for key, (X, y, kw) in table_problems.items():
        try:
            tf = fit_rational_table(X, y, cfg, len(shapes), names=["N"], **kw)
            out[f"table/{key}"] = {
                "fit": exact(tf.to_dict()),
                "values": exact(
                    tf({"N": np.linspace(1, 4096, 5)[:, None]}, np.arange(len(shapes)))
                ),
                "program": tf.to_program("g").to_python(),
                "repr": repr(tf),
            }
        except Exception as exc:  # noqa: BLE001
            out[f"table/{key}"] = failure(exc)
    return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    result: dict[str, Any] = {}
    for part, fn in (("kernels", kernels_part), ("fits", fits_part)):
        try:
            result[part] = fn()
        except Exception:  # noqa: BLE001 - record and keep going
            result[part] = {"error": traceback.format_exc()}
    Path(sys.argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
