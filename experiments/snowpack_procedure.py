"""SNOWPACK's unseen-kernel procedure, validated on training sizes only.

    python experiments/snowpack_procedure.py [OUTDIR] [--learners svr,hgb,mlp] [--keep any]
        [--patterns]

Leave one benchmark out exactly as `klaraptor bench snowpack` does for unseen kernels, but on
the TRAINING sizes of the recorded suites alone: each fold trains the whole procedure (the
search and the rule of `klaraptor.models.snowpack.search`) on the other benchmarks' training
sizes and chooses the held-out benchmark's blocks at its training sizes. Beside the procedure
as configured it scores each learner family's best candidate (a search restricted to that
family), so a choice between procedures can be made without the evaluation sizes. Writes
OUTDIR/snowpack_procedure.json (default experiments/results/) and prints the means.

It also scores two ensembles of those family-best models, their predicted log times averaged
row by row (`ENSEMBLES`: the trees with the perceptron, and all three learners). They were
added, and the rule that would adopt one fixed, before this script first ran with them: an
ensemble replaces the perceptron for unseen kernels only if its mean S here is lower by more
than one standard error of the paired difference over these (kernel, D) pairs.

With `--patterns` every fold also trains on the training-only corpus (`klaraptor.suite.patterns`,
all its recorded sizes; never held out). The rule that would have kept the corpus in SNOWPACK's
training rows, fixed before its first run (`--learners mlp --keep mlp --patterns`, the
unseen-kernel procedure): the perceptron's mean S over these (kernel, D) pairs lower with it than
without it (the `mlp` column of experiments/results/h200/snowpack_procedure.json, dace8bd, identical code) by
more than one standard error of the paired difference. It was not (+2.35 ± 1.80 points,
experiments/results/h200/snowpack_procedure_patterns.json), so the corpus is off by default.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.provenance import stamp
from klaraptor.models.snowpack.learner import Corpus, suboptimality
from klaraptor.models.snowpack.search import SearchSettings, default_grids, fit_fixed, train
from klaraptor_bench.snowpack_eval import evaluated_benchmarks, recorded_corpus

ROOT = Path(__file__).resolve().parent
ENSEMBLES = {"ens_hgb_mlp": ("hgb", "mlp"), "ens_all": ("svr", "hgb", "mlp")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "results"))
    ap.add_argument("--learners", default="svr,hgb,mlp", help="learner families searched")
    ap.add_argument(
        "--keep", default="any", help="learners the kept model may be ('any', or e.g. 'mlp')"
    )
    ap.add_argument("--patterns", action="store_true", help="with the training-only corpus")
    ap.add_argument("--name", default="snowpack_procedure.json", help="the output file's name")
    args = ap.parse_args(argv)
    grids = default_grids()
    settings = SearchSettings(
        grids={k: grids[k] for k in args.learners.split(",")},
        keep=None if args.keep == "any" else tuple(args.keep.split(",")),
    )
    c, is_train, _ = recorded_corpus(patterns=args.patterns)
    c = c.subset(is_train)
    held = evaluated_benchmarks(c)
    groups = np.unique(c.group[np.isin(c.bench, held)])
    per: dict[str, np.ndarray] = {
        m: np.full(len(groups), math.nan)
        for m in ("procedure", *settings.grids, *ENSEMBLES)
        if m not in ENSEMBLES or set(ENSEMBLES[m]) <= set(settings.grids)
    }
    kept = []
    t0 = time.perf_counter()
    for bench in held:
        tr, te = c.subset(c.bench != bench), c.subset(c.bench == bench)
        reg, rep = train(tr, "recorded", "kernels", settings)
        at = np.searchsorted(groups, np.unique(te.group))
        per["procedure"][at] = suboptimality(te, reg.predict_log(te.X))
        logs = {}
        for learner, cv in rep["learners"].items():
            best = fit_fixed(
                tr, "recorded", learner, cv["params"], cv["target"], cv["view"], settings
            )
            logs[learner] = best.predict_log(te.X)
            per[learner][at] = suboptimality(te, logs[learner])
        for name, members in ENSEMBLES.items():
            if name in per:
                mean_log = np.mean([logs[m] for m in members], axis=0)
                per[name][at] = suboptimality(te, mean_log)
        kept.append(f"{reg.learner}/{reg.target}/{reg.view}")
        print(
            f"{bench}: kept {kept[-1]}, S "
            + ", ".join(f"{m} {np.nanmean(v[at]):.1f}%" for m, v in per.items()),
            flush=True,
        )
    paired = {}
    for name in ENSEMBLES:
        if name in per and "mlp" in per:
            mean, se = paired_difference(per[name] - per["mlp"])
            paired[name] = {"mean_diff_vs_mlp_pct": mean, "se_pct": se}
    result: dict[str, Any] = {
        "sizes": "training sizes only",
        "ensembles": {k: list(v) for k, v in ENSEMBLES.items()},
        "ensemble_vs_mlp": paired,
        "pairs": len(groups),
        "mean_S_pct": {m: float(np.nanmean(v)) for m, v in per.items()},
        "median_S_pct": {m: float(np.nanmedian(v)) for m, v in per.items()},
        "kept": {k: kept.count(k) for k in sorted(set(kept))},
        "settings": settings.describe(),
        "wall_s": time.perf_counter() - t0,
    }
    result["training_only_kernels"] = sorted(
        set(c.kernel.tolist()) - set(c.kernel[np.isin(c.bench, held)].tolist())
    )
    write(Path(args.outdir) / args.name, result, c, groups, per)
    return 0


def paired_difference(d: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of paired S% differences (pairs scored by both sides only)."""
    d = d[np.isfinite(d)]
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))


def write(
    path: Path, result: dict[str, Any], c: Corpus, groups: np.ndarray, per: dict[str, np.ndarray]
) -> None:
    """Add the per-pair S% and the provenance to `result`, write it to `path`, print the means
    (shared with `snowpack_targets.py`)."""
    result["per_pair"] = [
        {"kernel": c.sizes[g][0], "D": c.sizes[g][1].values()[0]}
        | {m: float(v[i]) for m, v in per.items()}
        for i, g in enumerate(groups)
    ]
    result["provenance"] = stamp(
        " ".join(["python", f"experiments/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    for m in per:
        mean, median = result["mean_S_pct"][m], result["median_S_pct"][m]
        print(f"{m:12s} mean S {mean:6.2f}%  median {median:5.2f}%")
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
