"""The shipped SNOWPACK model on kernels it never saw: the training-only patterns suite.

    python benchmarks/snowpack_new_kernels.py [OUTDIR] [--leave-one-out]

The shipped model (`data/snowpack_h200.bin`) was trained on the 44 PolyBench and Rodinia-style
kernels; the 16 kernels of `klaraptor.suite.patterns` were written and timed later and never
trained it. For each of them, at its larger recorded sizes (`meta["eval_sizes"]`, timed
exhaustively), the block SNOWPACK chooses from features alone is scored against the recorded
optimum, beside OCC (median over the max-occupancy blocks) and tune-once (the best block at the
largest training size, reused). No measurement of the kernel enters SNOWPACK's choice. Also
SNOWPACK as a build's prior: its `PRIOR_KEEP` best-predicted blocks timed at the largest training
size (the recorded times), the fastest reused at every larger size. Writes
OUTDIR/snowpack_new_kernels.json (default benchmarks/results/h200).

`--leave-one-out` asks instead what breadth of training buys a new kernel: each pattern
(benchmark) is held out in turn and the whole procedure (`train`, `SearchSettings()`, as the
unseen-kernel evaluation) learns from the 44 suite kernels AND the other patterns, then chooses
for the held-out one at its larger sizes. A report, nothing is chosen from it. Writes
OUTDIR/snowpack_new_kernels_loo.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from klaraptor import suite
from klaraptor.core.provenance import stamp
from klaraptor.models.snowpack.learner import Corpus, suboptimality
from klaraptor.models.snowpack.model import load_regressor
from klaraptor.models.snowpack.search import train
from klaraptor_bench.snowpack_eval import baselines, recorded_corpus

ROOT = Path(__file__).resolve().parent
PRIOR_KEEP = 8


def prior_blocks(c: Corpus, is_train: np.ndarray, pred: np.ndarray) -> dict[str, tuple]:
    """Per kernel: the fastest measured of SNOWPACK's PRIOR_KEEP best-predicted blocks at the
    largest training size."""
    out = {}
    for k in np.unique(c.kernel):
        m = (c.kernel == k) & is_train
        at = np.flatnonzero(m & (c.size_rank == c.size_rank[m].max()))
        top = at[np.argsort(pred[at], kind="stable")[:PRIOR_KEEP]]
        out[k] = tuple(c.blocks[top[int(np.argmin(c.ms[top]))]])
    return out


def main(argv: list[str]) -> int:
    loo = "--leave-one-out" in argv
    args = [a for a in argv if a != "--leave-one-out"]
    out = Path(args[0]) if args else ROOT / "results" / "h200"
    c, _, datasets = recorded_corpus(patterns=True)
    new = np.char.startswith(c.kernel.astype(str), "patterns.")
    everything = c
    c = c.subset(new)
    train_sizes = {k: {suite.get(k).size(s) for s in suite.get(k).meta["train_sizes"]}
                   for k in set(c.kernel.tolist())}  # fmt: skip
    is_train = np.array([c.sizes[g][1] in train_sizes[c.sizes[g][0]] for g in c.group])
    evals = c.subset(~is_train)
    device = next(iter(datasets.values())).device_key
    reg = load_regressor(None, device)
    assert not set(evals.kernel.tolist()) & set(reg.info["kernels"]), "the model saw them"
    pred = reg.predict_log(c.X)
    if loo:  # every pattern's rows predicted by the fold that held it out
        for bench in sorted(set(c.bench.tolist())):
            fold, _ = train(everything.subset(everything.bench != bench), device, "kernels")
            held = c.bench == bench
            pred[held] = fold.predict_log(c.X[held])
            print(f"{bench}: kept {fold.learner}/{fold.target}/{fold.view}", flush=True)
    s = suboptimality(evals, pred[~is_train])
    base = baselines(c, is_train, evals)
    groups = np.unique(evals.group)
    chosen = prior_blocks(c, is_train, pred)
    prior = []
    for g in groups:
        i = np.flatnonzero(evals.group == g)
        blocks = [tuple(b) for b in evals.blocks[i]]
        t = evals.ms[i]
        prior.append((t[blocks.index(chosen[evals.kernel[i[0]]])] / t.min() - 1) * 100)
    base["prior_top8"] = np.array(prior)
    pairs = [
        {"kernel": evals.sizes[g][0], "N": evals.sizes[g][1].values()[0], "snowpack": float(s[i]),
         "occ": float(base["occ"][i]), "tune_once": float(base["tune_once"][i]),
         "prior_top8": float(base["prior_top8"][i])}
        for i, g in enumerate(groups)
    ]  # fmt: skip
    summary = {
        m: {"mean_S_pct": float(np.mean(v)), "median_S_pct": float(np.median(v))}
        for m, v in (("snowpack", s), *base.items())
    }
    result = {
        "model": {k: reg.info.get(k) for k in ("validation", "fit_rows")}
        | {"learner": reg.learner, "target": reg.target, "trained_on": len(reg.info["kernels"])},
        "kernels": len(set(evals.kernel.tolist())),
        "pairs": len(pairs),
        "summary": summary,
        "per_pair": pairs,
        "provenance": stamp(" ".join(["python", "benchmarks/snowpack_new_kernels.py", *argv])),
    }
    out.mkdir(parents=True, exist_ok=True)
    if loo:
        result["model"] = {"leave_one_out": "each pattern held out; trained on the 44 suite kernels "
                           "and the other patterns (train(..., 'kernels'), SearchSettings())"}  # fmt: skip
    name = "snowpack_new_kernels_loo.json" if loo else "snowpack_new_kernels.json"
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    for r in pairs:
        print(f"{r['kernel']:40s} N={r['N']:<9d} SNOWPACK {r['snowpack']:7.1f}%  "
              f"OCC {r['occ']:7.1f}%  tune-once {r['tune_once']:6.1f}%  "
              f"top-8 prior {r['prior_top8']:6.1f}%")  # fmt: skip
    for m, v in summary.items():
        print(f"{m:10s} mean S {v['mean_S_pct']:6.2f}%  median {v['median_S_pct']:5.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
