"""How much a SNOWPACK perceptron's choices depend on its random initialisation (training sizes).

    python experiments/snowpack_seeds.py [OUTDIR] [--seeds 5] [--without busy_sms,...] [--risk 0.5,1]

Leave one benchmark out on the TRAINING sizes of the recorded suites alone (as
`experiments/snowpack_procedure.py`), with one fixed candidate: the perceptron 64x64, alpha 0.01,
`relative` target, all columns (the unseen-kernel search's most frequent pick). Each fold fits it
with random initialisations 0..seeds-1 and scores each one alone and the average of the first k
(k = 2..seeds) of their predicted log times. This is what `SearchSettings.final_seeds` rests on;
no evaluation size is read. `--without NAMES` holds those feature columns constant (no
information: what the features add). `--risk L,...` also scores a risk-averse choice over all
the seeds: argmin of mean + L x standard deviation of the members' predicted log times. Writes
OUTDIR/snowpack_seeds.json, or snowpack_seeds_without.json with `--without` (default OUTDIR:
experiments/results/h200).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.provenance import stamp
from klaraptor.models.snowpack.features import FEATURE_SET, feature_names
from klaraptor.models.snowpack.learner import Fitted, fit_rows, suboptimality
from klaraptor_bench.snowpack_eval import recorded_corpus

ROOT = Path(__file__).resolve().parent
CANDIDATE = {"learner": "mlp", "params": {"hidden": [64, 64], "alpha": 0.01}}
TARGET, VIEW = "relative", "all"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "results" / "h200"))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--without", default="", help="feature columns held constant")
    ap.add_argument("--risk", default="", help="weights L of the members' spread (mean + L sd)")
    args = ap.parse_args(argv)
    c, is_train, _ = recorded_corpus()
    c = c.subset(is_train)
    without = [n for n in args.without.split(",") if n]
    for name in without:
        c.X[:, feature_names().index(name)] = 0.0
    groups = np.unique(c.group)
    # Predicted log time per row and seed, filled fold by fold (each row is held out once).
    pred = np.full((args.seeds, len(c)), np.nan)
    t0 = time.perf_counter()
    for bench in sorted(set(c.bench.tolist())):
        held = c.bench == bench
        tr = c.subset(~held)
        f = fit_rows(tr, "mlp", CANDIDATE["params"], TARGET, VIEW, np.arange(len(tr)), args.seeds)
        for s, member in enumerate(f.members):
            alone = Fitted((member,), f.level, f.target, f.view)
            pred[s, held] = alone.predict(c.X[held])
        print(f"{bench}: {time.perf_counter() - t0:.0f} s", flush=True)

    def score(p: np.ndarray) -> dict[str, Any]:
        S = suboptimality(c, p)
        return {"mean_S_pct": float(S.mean()), "median_S_pct": float(np.median(S)),
                "max_S_pct": float(S.max()), "per_pair": S.tolist()}  # fmt: skip

    single = {str(s): score(pred[s]) for s in range(args.seeds)}
    averaged = {str(k): score(pred[:k].mean(axis=0)) for k in range(2, args.seeds + 1)}
    risk = {
        lam: score(pred.mean(axis=0) + float(lam) * pred.std(axis=0))
        for lam in (r for r in args.risk.split(",") if r)
    }
    means = [v["mean_S_pct"] for v in single.values()]
    result = {
        "sizes": "training sizes only (leave one benchmark out)",
        "candidate": {**CANDIDATE, "target": TARGET, "view": VIEW},
        "feature_set": FEATURE_SET,
        "without": without,
        "pairs": len(groups),
        "single_seed": single,
        "single_seed_mean_S_pct": {
            "min": min(means),
            "max": max(means),
            "average": float(np.mean(means)),
        },  # fmt: skip
        "average_of_first_k": averaged,
        **({"risk_averse_all_seeds": risk} if risk else {}),
        "wall_s": time.perf_counter() - t0,
        "provenance": stamp(
            "python experiments/snowpack_seeds.py"
            + (f" --without {args.without}" if without else "")
        ),
    }
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    name = "snowpack_seeds_without.json" if without else "snowpack_seeds.json"
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    for s, v in single.items():
        print(f"seed {s}: mean S {v['mean_S_pct']:6.2f}%  median {v['median_S_pct']:5.2f}%")
    for k, v in averaged.items():
        print(f"average of {k}: mean S {v['mean_S_pct']:6.2f}%  median {v['median_S_pct']:5.2f}%")
    for lam, v in risk.items():
        print(f"mean + {lam} sd: mean S {v['mean_S_pct']:6.2f}%  median {v['median_S_pct']:5.2f}%")
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
