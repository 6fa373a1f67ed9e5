"""SNOWPACK as a build's prior: time only its top k blocks at the largest training size.

    python experiments/snowpack_prior.py [OUTDIR] [--seeds 3]

What `klaraptor.build(..., prior="snowpack", prior_keep=k)` buys and loses, on the recorded H200
suites, for kernels SNOWPACK never saw (leave one benchmark out, as `klaraptor bench snowpack`'s
unseen kernels). Each fold fits one fixed candidate (the perceptron 64x64, alpha 0.01, `relative`
target, all columns, averaged over `--seeds` initialisations: `experiments/snowpack_seeds.py`'s
candidate; no search, so it is not the per-fold procedure of `bench snowpack`) on the other
benchmarks' rows at every size. For each held-out kernel it ranks the candidates at the kernel's
largest training size L, "times" the top k there (the recorded timings at L), keeps the fastest
of them and reuses it at every evaluation size: tune-once over SNOWPACK's top k. k = all is
tune-once itself. Reported per k: mean and median S% over the (kernel, evaluation size) pairs
and the share of tune-once's sweep timed (k / candidates). Writes OUTDIR/snowpack_prior.json
(default experiments/results/h200).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from klaraptor.core.provenance import stamp
from klaraptor.models.snowpack.learner import fit_rows
from klaraptor_bench.snowpack_eval import recorded_corpus

ROOT = Path(__file__).resolve().parent
PARAMS = {"hidden": [64, 64], "alpha": 0.01}
TARGET, VIEW = "relative", "all"
KS = (1, 2, 4, 8, 16, 32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "results" / "h200"))
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    c, is_train, _ = recorded_corpus()
    S: dict[str, list[float]] = {f"top{k}": [] for k in KS} | {"tune_once": [], "snowpack": []}
    share: dict[str, list[float]] = {f"top{k}": [] for k in KS}
    t0 = time.perf_counter()
    for bench in sorted(set(c.bench.tolist())):
        held = c.bench == bench
        tr = c.subset(~held)
        f = fit_rows(tr, "mlp", PARAMS, TARGET, VIEW, np.arange(len(tr)), args.seeds)
        pred = f.predict(c.X[held])
        te = c.subset(held)
        for kernel in sorted(set(te.kernel.tolist())):
            k_rows = te.kernel == kernel
            train_rank = te.size_rank[k_rows & is_train[held]]
            L = train_rank.max()
            at_L = np.flatnonzero(k_rows & is_train[held] & (te.size_rank == L))
            blocks_L = [tuple(b) for b in te.blocks[at_L]]
            order = [blocks_L[i] for i in np.argsort(pred[at_L], kind="stable")]
            t_L = dict(zip(blocks_L, te.ms[at_L], strict=True))
            evals = np.unique(te.group[k_rows & ~is_train[held]])
            for g in evals:
                i = np.flatnonzero(te.group == g)
                t = {tuple(b): ms for b, ms in zip(te.blocks[i], te.ms[i], strict=True)}
                S["tune_once"].append(_s(t, min(t_L, key=t_L.__getitem__)))
                S["snowpack"].append(_s(t, tuple(te.blocks[i][int(np.argmin(pred[i]))])))
                for k in KS:
                    S[f"top{k}"].append(_s(t, min(order[:k], key=t_L.__getitem__)))
            for k in KS:
                share[f"top{k}"].append(min(k, len(blocks_L)) / len(blocks_L))
        print(f"{bench}: {time.perf_counter() - t0:.0f} s", flush=True)

    def stats(v: list[float]) -> dict[str, float]:
        x = np.array(v, dtype=np.float64)
        x = x[np.isfinite(x)]
        return {"mean_S_pct": float(x.mean()), "median_S_pct": float(np.median(x)),
                "max_S_pct": float(x.max()), "pairs": int(x.size)}  # fmt: skip

    result = {
        "scenario": "unseen kernels (leave one benchmark out); S at the evaluation sizes",
        "candidate": {
            "learner": "mlp",
            "params": PARAMS,
            "target": TARGET,
            "view": VIEW,
            "seeds": args.seeds,
        },  # fmt: skip
        "methods": {m: stats(v) for m, v in S.items()},
        "sweep_share": {m: float(np.mean(v)) for m, v in share.items()},
        "notes": {
            "tune_once": "every candidate timed at L, the fastest reused (sweep share 1)",
            "snowpack": "no timing: the argmin of the prediction at each evaluation size",
            "topk": "SNOWPACK's k best at L timed there, the fastest of them reused",
        },
        "wall_s": time.perf_counter() - t0,
        "provenance": stamp("python experiments/snowpack_prior.py"),
    }
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "snowpack_prior.json").write_text(json.dumps(result, indent=1) + "\n")
    for m, v in result["methods"].items():
        sh = result["sweep_share"].get(m, 1.0 if m == "tune_once" else 0.0)
        print(
            f"{m:10s} mean S {v['mean_S_pct']:6.2f}%  median {v['median_S_pct']:5.2f}%  "
            f"sweep share {sh:.2f}"
        )
    print(f"wrote {out / 'snowpack_prior.json'}")
    return 0


def _s(t: dict[tuple[int, ...], float], block: tuple[int, ...]) -> float:
    """S% of `block` among the measured times `t` of one (kernel, D)."""
    return (t[block] / min(t.values()) - 1) * 100 if block in t else math.nan


if __name__ == "__main__":
    raise SystemExit(main())
