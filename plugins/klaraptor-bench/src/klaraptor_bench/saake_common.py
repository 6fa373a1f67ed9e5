"""What the SAAKE evaluations share: the ground truth at the evaluation sizes and the time error
of a helper against it (saake_eval and saake_unseen both score with these)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from klaraptor.suite.recorded import RecordedDataset


def _truth(data: RecordedDataset, name: str, spec: Any) -> dict[int, dict[tuple, float]]:
    times = data.kernels[name].times()
    out: dict[int, dict[tuple, float]] = {}
    for N in spec.meta["eval_sizes"]:
        m = {b: t[0] for (D, b), t in times.items() if D.values() == (int(N),)}
        if m:
            out[int(N)] = m
    return out


def _mape(
    helper: Any,
    spec: Any,
    truth: Mapping[int, Mapping[tuple, float]],
    blocks: Sequence[tuple[int, ...]] | None = None,
) -> float | None:
    """Mean |predicted/measured - 1| over the configurations with ground truth (`blocks`: only
    those) at the evaluation sizes."""
    errs = []
    for N, measured in truth.items():
        pred = helper.predict(spec.size(N))
        for i, b in enumerate(helper.candidates):
            if b in measured and pred.valid[i] and (blocks is None or b in blocks):
                errs.append(abs(float(pred.ms[i]) / measured[b] - 1.0))
    return float(np.mean(errs)) if errs else None
