"""SAAKE's raw emulation against the recorded H200 timings, per kernel and size: the ratio
emulated / measured over every configuration (median, p10, p90) and Table 1's raw error (mean
|ratio - 1| at the evaluation sizes), at the training sizes too (which a change may be judged on
before the evaluation sizes are looked at).

Usage (repository root, CPU):
    PYTHONPATH=src:plugins/klaraptor-bench/src python experiments/saake_raw_ratios.py \
        [--jobs J] [--train-only] [--out OUT.json] [KERNEL ...]     (default: all 44)
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np


def _one(args: tuple[str, bool]) -> dict[str, Any]:
    name, train_only = args
    from klaraptor import suite
    from klaraptor.models.saake.model import SaakeModel
    from klaraptor_bench.saake_eval import recorded_job

    spec = suite.get(name)
    train = [int(n) for n in spec.meta["train_sizes"]]
    evals = [] if train_only else [int(n) for n in spec.meta["eval_sizes"]]
    with recorded_job(name) as (data, job):
        model = SaakeModel()
        grid = model.emulated(job)
        helper, _ = model.helper_from(job, grid, calibrated=False)
        times = data.kernels[name].times()
        out: dict[str, Any] = {"kernel": name, "sizes": {}}
        errs = []
        for N in train + evals:
            measured = {b: t[0] for (D, b), t in times.items() if D.values() == (N,)}
            if not measured:
                continue
            pred = helper.predict(spec.size(N))
            ratios = [
                float(pred.ms[i]) / measured[b]
                for i, b in enumerate(helper.candidates)
                if b in measured and pred.valid[i]
            ]
            if not ratios:
                continue
            r = np.asarray(ratios)
            out["sizes"][N] = {
                "train": N in train,
                "median": float(np.median(r)),
                "p10": float(np.percentile(r, 10)),
                "p90": float(np.percentile(r, 90)),
                "err": float(np.mean(np.abs(r - 1.0))),
            }
            if N not in train:
                errs.extend(np.abs(r - 1.0).tolist())
        out["raw_error"] = float(np.mean(errs)) if errs else None
        tr = [v["err"] for v in out["sizes"].values() if v["train"]]
        out["raw_error_train"] = float(np.mean(tr)) if tr else None
        return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--train-only", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    from klaraptor_bench.saake_eval import recorded_kernel_names

    names = a.kernels or recorded_kernel_names()
    work = [(n, a.train_only) for n in names]
    if a.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(a.jobs) as pool:
            rows = list(pool.map(_one, work))
    else:
        rows = [_one(w) for w in work]
    for row in rows:
        cells = " ".join(
            f"{N}{'t' if v['train'] else ''}:{v['median']:.2f}[{v['p10']:.2f},{v['p90']:.2f}]"
            for N, v in sorted(row["sizes"].items())
        )
        e, et = row["raw_error"], row["raw_error_train"]
        es = f"{100 * e:5.1f}" if e is not None else "  -  "
        print(f"{row['kernel']:34s} raw {es} train {100 * (et or 0):5.1f}  {cells}", flush=True)
    for key in ("raw_error", "raw_error_train"):
        vals = [r[key] for r in rows if r[key]]
        if vals:
            g = math.exp(sum(math.log(v) for v in vals) / len(vals))
            print(f"geomean {key}: {100 * g:.2f} % over {len(vals)} kernels")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
