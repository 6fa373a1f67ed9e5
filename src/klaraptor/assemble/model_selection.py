"""`model="auto"`: the scaling model, unless a ×2 fold inside the training data says otherwise.

The fold is built like deployment: every candidate model is fitted on the training sizes up to
M, the largest size ≤ L/2 (an extrapolation by L/M ≥ 2, as deployment extrapolates by 1.3-5×),
exactly as it would be deployed (the same model, the same kind of data), and chooses a block for
L. Its score is the measured slowdown there, r = t(choice) / t(best), both measured hot at L.
Padding is not allowed to decide it: the choice and the best are taken among the candidates that
launch no padding thread at M or at L (from the grid formula; all candidates when fewer than two
qualify), since a block wasted by padding at L alone says nothing about larger sizes.

`scaling` is chosen unless another model's fold r is lower by more than twice the timing noise
band (an r compares two measured times, each within the band); a model that cannot be fitted
from the training points (e.g. `mwp_cwp` without counters) is not a candidate. No
evaluation-size data is used, and the rule was fixed before any evaluation of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from klaraptor.assemble.report import ModelSelection
from klaraptor.core.errors import BuildError, KlaraptorError
from klaraptor.core.types import Config, DataSize
from klaraptor.models import HelperJob, auto_candidates, get_model


def _scalar(D: DataSize) -> float:
    return float(np.prod(np.asarray(D.values(), dtype=np.float64)))


def fold_sizes(sizes: Sequence[DataSize]) -> tuple[list[DataSize], DataSize] | None:
    """(training sizes up to M, L) of the ×2 fold, or None when no size is ≤ L/2."""
    by = sorted(sizes, key=lambda D: (_scalar(D), D.values()))
    L = by[-1]
    below = [D for D in by if _scalar(D) <= _scalar(L) / 2]
    if not below:
        return None
    M = below[-1]
    return [D for D in by if _scalar(D) <= _scalar(M)], L


def _unpadded(job: HelperJob, D: DataSize) -> np.ndarray:
    """Candidates whose grid launches exactly the threads of the smallest launch at D (for a
    kernel with program parameters: the fewest threads for the work each variant does, the
    smallest launch of its own variant)."""
    cand = np.asarray(job.blocks, dtype=np.float64)
    params = None
    if job.spec.params:
        params = {
            n: np.array([float(c.params[n]) for c in job.configs]) for n in job.spec.param_names
        }
    gx, gy, gz = job.spec.grid_arrays(dict(D.items()), cand[:, 0], cand[:, 1], cand[:, 2], params)
    launched = gx * gy * gz * cand.prod(axis=1)
    if not job.spec.params:
        return launched <= launched.min() * (1 + 1e-9)
    out = np.zeros(len(cand), dtype=bool)
    variants = [c.params for c in job.configs]
    for pv in set(variants):
        mine = np.array([v == pv for v in variants])
        out |= mine & (launched <= launched[mine].min() * (1 + 1e-9))
    return out


def _described(candidate: Any) -> Any:
    """A candidate as the report shows it: its block, or its variant and block."""
    if isinstance(candidate, Config):
        return {"params": dict(candidate.params), "block": list(candidate.block)}
    return list(candidate)


def fold_score(job: HelperJob, model: str) -> dict[str, Any]:
    """The ×2 fold of `model` on `job` (module docstring): {"r", "block", "sizes", "compared"}."""
    fs = fold_sizes(job.train.sizes())
    if fs is None:
        raise BuildError(f"{job.spec.name}: no training size is at most half the largest")
    lower, L = fs
    train = job.train
    measured = {
        job.key(train.config(i)): float(train.derived[i]["time_ms"])
        for i in range(train.n)
        if train.size_of(i) == L
    }
    helper, _ = get_model(model).make_helper(job.subset(lower))
    pred = helper.predict(L)
    clean = _unpadded(job, lower[-1]) & _unpadded(job, L)
    at_L = np.array([measured.get(b, math.nan) for b in job.candidates])
    pool = np.isfinite(at_L) & (clean if (clean & np.isfinite(at_L)).sum() >= 2 else True)
    if not (pool & pred.valid).any():
        # The candidates the lower sizes measured may all be padded at one of the two sizes (a
        # 3-D kernel's plan times a few at its one smaller size): compare them anyway.
        pool = np.isfinite(at_L)
    score = np.where(pool & pred.valid, pred.ms, np.inf)
    if not np.isfinite(score).any():
        raise BuildError(f"{model} predicts no compared candidate at {L}")
    choice = int(np.argmin(score))
    return {
        "r": float(at_L[choice] / np.min(at_L[pool])),
        "block": _described(job.candidates[choice]),
        "sizes": [list(D.values()) for D in lower] + [list(L.values())],
        "compared": int(pool.sum()),
    }


def select_model(
    job: HelperJob, *, candidates: Sequence[str] | None = None
) -> tuple[str, ModelSelection]:
    """The chosen model's name and how it was chosen (see the module docstring). The
    candidates are the models tagged with an `auto_rank` (the first the default); for a kernel
    with program parameters only those that support them."""
    if candidates is None:
        candidates = auto_candidates(params=bool(job.spec.params))
    default = candidates[0]
    band = job.noise_band()
    if fold_sizes(job.train.sizes()) is None:
        return default, ModelSelection(default, "no size ≤ L/2 to fold on")
    scores: dict[str, Any] = {}
    for name in candidates:
        try:
            scores[name] = fold_score(job, name)
        except KlaraptorError as exc:
            scores[name] = {"error": str(exc)}
    base = scores.get(default, {}).get("r", math.inf)
    chosen, reason = default, "the default"
    better = [
        n
        for n in candidates[1:]
        if "r" in scores[n] and scores[n]["r"] < base * (1 - 2 * band) and scores[n]["r"] < base
    ]
    if better:
        chosen = min(better, key=lambda n: (scores[n]["r"], candidates.index(n)))
        reason = f"its fold r beats {default}'s by more than twice the noise band"
    elif not math.isfinite(base):
        ok = [n for n in candidates if "r" in scores[n]]
        if not ok:
            raise BuildError(f"{job.spec.name}: no model could be validated: {scores}")
        chosen = min(ok, key=lambda n: (scores[n]["r"], candidates.index(n)))
        reason = f"{default} could not be validated"
    return chosen, ModelSelection(chosen, reason, scores, noise_band=band)
