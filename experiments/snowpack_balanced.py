"""SNOWPACK's perceptron fitted with every (kernel, D) weighing the same, validated on training
sizes only.

    python experiments/snowpack_balanced.py [OUTDIR] [--jobs 2]

S% weighs every (kernel, D) equally, but the fits weigh every row equally, so a (kernel, D)
weighs by its number of candidate blocks: 10 to 231, and 3DCONV alone is 11 % of the recorded
rows. `fit_rows(balanced=True)` weighs each row 1 / its group's size instead, so that the loss
the perceptron minimises counts the pairs as S% does.

Leave one benchmark out on the TRAINING sizes of the recorded suites alone (as
`experiments/snowpack_pessimism.py`, whose fold loop and verdict this reuses): each fold fits the
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
from functools import partial

import snowpack_pessimism as loop  # the sibling script (experiments/ is on sys.path)

VARIANTS = ("unweighted", "balanced")  # the first is the reference (the flag off)

if __name__ == "__main__":
    raise SystemExit(
        loop.main(
            sys.argv[1:],
            scores=partial(loop.setting_scores, field="balanced", levels=VARIANTS),
            levels=VARIANTS,
            name="snowpack_balanced.json",
        )
    )
