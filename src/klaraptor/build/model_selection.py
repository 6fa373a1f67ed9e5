"""`model="auto"`: the model that extrapolates best INSIDE the training data.

For each of the `folds` largest training sizes, every candidate model is built on the sizes below
it and chooses a block there; the score is the geometric mean over folds of the measured slowdown
of those choices, r = t(choice) / t(best). Scores within the measured noise band of the best are
tied; among tied models the one whose predictions rank all candidates best (mean Spearman
correlation with the measured times over the folds) wins, then the earlier in `candidates`. No
evaluation-size data is used.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from klaraptor.errors import BuildError, KlaraptorError
from klaraptor.models import HelperJob, get_model

# Candidates of model="auto", in the order ties are broken (the first wins a tie).
AUTO_MODELS = ("mwp_cwp", "time_fit")


def select_model(
    job: HelperJob, *, candidates: Sequence[str] = AUTO_MODELS, folds: int = 2
) -> tuple[str, dict[str, Any]]:
    """The chosen model's name and the selection report (see the module docstring)."""
    train = job.train
    sizes = train.sizes()
    if len(sizes) < folds + 2:
        raise BuildError(
            f"{job.spec.name}: model='auto' needs at least {folds + 2} training sizes, "
            f"got {[str(s) for s in sizes]}"
        )
    band = float(np.nanmedian(train.spread)) if np.isfinite(train.spread).any() else 0.0
    scores: dict[str, Any] = {}
    for name in candidates:
        rs, rhos, per = [], [], []
        try:
            model = get_model(name)
            for k in range(len(sizes) - folds, len(sizes)):
                held = sizes[k]
                helper, _ = model.make_helper(job.subset(sizes[:k]))
                measured = {
                    tuple(int(v) for v in train.blocks[i]): train.derived[i]["time_ms"]
                    for i in range(train.n)
                    if train.size_of(i) == held
                }
                pred = helper.predict(held)
                block = helper.candidates[int(pred.order[0])]
                rs.append(
                    measured[block] / min(measured.values()) if block in measured else math.inf
                )
                both = [
                    (float(pred.ms[i]), measured[b])
                    for i, b in enumerate(helper.candidates)
                    if b in measured and pred.valid[i]
                ]
                with warnings.catch_warnings():  # a model may predict one time for every block
                    warnings.simplefilter("ignore")
                    rho = spearmanr(*zip(*both)).statistic if len(both) > 2 else math.nan
                rhos.append(float(rho) if math.isfinite(rho) else -1.0)
                per.append(
                    {
                        "held_out": list(held.values()),
                        "block": list(block),
                        "r": rs[-1],
                        "spearman": rhos[-1],
                    }
                )
        except KlaraptorError as e:
            scores[name] = {"error": str(e)}
            continue
        scores[name] = {
            "r": float(np.exp(np.mean(np.log(rs)))),
            "spearman": float(np.mean(rhos)),
            "folds": per,
        }
    ok = {n: s for n, s in scores.items() if "r" in s and math.isfinite(s["r"])}
    if not ok:
        raise BuildError(f"{job.spec.name}: no model could be validated: {scores}")
    r_min = min(s["r"] for s in ok.values())
    tied = [n for n in candidates if n in ok and ok[n]["r"] <= r_min * (1 + band)]
    chosen = max(tied, key=lambda n: (ok[n]["spearman"], -tied.index(n)))
    return chosen, {"folds": folds, "noise_band": band, "scores": scores, "chosen": chosen}
