"""SNOWPACK's perceptron fitted with every (kernel, D) weighing the same, validated on training
sizes only.

    python benchmarks/snowpack_balanced.py [OUTDIR] [--jobs 2]

S% weighs every (kernel, D) equally, but the fits weigh every row equally, so a (kernel, D)
weighs by its number of candidate blocks: 10 to 231, and 3DCONV alone is 11 % of the recorded
rows. `fit_rows(balanced=True)` weighs each row 1 / its group's size instead, so that the loss
the perceptron minimises counts the pairs as S% does.

Leave one benchmark out on the TRAINING sizes of the recorded suites alone (as
`benchmarks/snowpack_pessimism.py`, whose fold loop and verdict this reuses): each fold fits the
perceptron (the grid's first hyper-parameters, view `all`, `final_seeds` initialisations) per
target, unweighted and balanced, and scores the argmin at the held-out benchmark's training
sizes.

The rule, fixed before this script first ran: the balanced fit replaces the unweighted one
(`SearchSettings.balanced = True`) only if the mean, over the 219 (kernel, D) pairs, of its
paired S difference to the unweighted fit (each pair's difference averaged over the three
targets) is below minus one standard error of that mean. Writes OUTDIR/snowpack_balanced.json.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import snowpack_pessimism as loop  # the sibling script (benchmarks/ is on sys.path)

from klaraptor.models.snowpack.learner import Corpus, suboptimality
from klaraptor.models.snowpack.search import SearchSettings, default_grids, fit_fixed

VARIANTS = ("unweighted", "balanced")  # the first is the reference


def fold_scores(tr: Corpus, te: Corpus) -> dict[str, np.ndarray]:
    """S% per column (target, variant) for one held-out benchmark."""
    params, out = default_grids()["mlp"][0], {}
    for target in loop.TARGETS:
        for variant in VARIANTS:
            settings = replace(SearchSettings(), balanced=variant == "balanced")
            reg = fit_fixed(tr, "recorded", "mlp", params, target, "all", settings)
            out[loop.column(target, variant)] = suboptimality(te, reg.predict_log(te.X))
    return out


if __name__ == "__main__":
    raise SystemExit(
        loop.main(
            sys.argv[1:],
            scores=fold_scores,
            levels=VARIANTS,
            name="snowpack_balanced.json",
        )
    )
