"""The thesis's configuration-level outlier fence for the MWP-CWP model (Jeshani 2023, §5.4).

§5.4: "we first profile our program P for small input sizes of N and obtain the MWP-CWP
estimation for clock-cycles for various thread block configurations. Next, we calculate the first
and third quartiles (Q1 and Q3) along with the interquartile range (IQR) for the estimated
clock-cycles. [...] we determine the upper inner fence [UIF = Q3 + 1.5 IQR] and identify the thread
block configurations exceeding this threshold as outliers. Once the outliers are identified, we
remove them from the dataset before proceeding with the parameter estimation process."

So, per training size N (the "small input sizes"), over the configurations measured there:
1. each point's estimated clock-cycles: the MWP-CWP template evaluated with the point's own
   measured metric values (`MwpCwpModel.point_values`, not fitted ones) and the exact kernel
   quantities;
2. Q1 and Q3 of those estimates (numpy's linear-interpolation percentiles, as the repeat-level
   fence `klaraptor.fit.iqr_upper_fence` uses), UIF = Q3 + 1.5 (Q3 − Q1);
3. the points above the UIF leave the training data before the metrics are fitted.

Where the thesis is silent we chose: quartiles per training size (estimated cycles grow with N,
so a fence over every size pooled would remove the largest size's points, not outliers); a size
with fewer than 3 configurations is not fenced (the repeat-level fence's rule); a non-finite
estimate (a block that cannot launch) is left alone; a candidate that loses every training
point is moved to `rejected` (no metric can be fitted for it), with the reason.

It is an option (`MwpCwpModel(config_fence=True)`), off by default: every default build stays as
it was. `experiments/mwp_cwp_fence.py` reports its effect on the recorded suites.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import BuildError
from klaraptor.core.types import BLOCK_VARS, WARP_SIZE
from klaraptor.fit import iqr_upper_fence
from klaraptor.fit.training import exact_subprograms, hardware_inputs
from klaraptor.program import Program, var

if TYPE_CHECKING:
    from klaraptor.models.base import HelperJob, TemplateModel

MIN_CONFIGURATIONS = 3  # fewer configurations at a size: not fenced
POINT_PREFIX = "pt_"  # the template's inputs carrying a point's measured metric values
FENCE_REASON = (
    "above the configuration-level outlier fence (thesis §5.4: estimated MWP-CWP cycles above "
    "Q3 + 1.5 IQR over the configurations) at every training size"
)


def estimated_cycles(model: TemplateModel, job: HelperJob) -> tuple[np.ndarray, np.ndarray]:
    """(indices of the training points with counters on a candidate block, their MWP-CWP
    estimated cycles from their own measured metrics)."""
    train = job.train
    index = {b: i for i, b in enumerate(job.candidates)}
    points: list[int] = []
    values: list[dict[str, float]] = []
    for i, d in enumerate(train.derived):
        b = tuple(int(v) for v in train.blocks[i])
        if b not in index or "inst_per_warp" not in d:
            continue
        if job.sync_per_warp is not None and "sync_per_warp" not in d:
            d = {**d, "sync_per_warp": float(job.sync_per_warp)}
        threads = b[0] * b[1] * b[2]
        points.append(i)
        values.append(model.point_values(d, b, threads, -(-threads // WARP_SIZE)))
    if not points:
        raise BuildError(
            f"{job.spec.name}: no training point has hardware counters; the configuration fence "
            "of mwp_cwp needs them (collect with counters, i.e. with Nsight Compute available)"
        )
    idx = np.array(points, dtype=np.int64)
    names = tuple(job.spec.data_names)
    measured = tuple(POINT_PREFIX + m for m in model.metrics)
    subs: dict[str, Program] = dict(exact_subprograms(job.spec, job.attrs))
    for m, inp in zip(model.metrics, measured):
        subs[m] = Program(m, [inp], [("value", var(inp))], ["value"])
    prog = model.program((*names, *BLOCK_VARS, "cfg", *measured))
    prog = prog.bind({k: v for k, v in subs.items() if k in prog.unbound_calls()})
    hw = hardware_inputs(job.profile)
    inputs: dict[str, Any] = {h: hw[h] for h in model.hardware if h in prog.inputs}
    for j, n in enumerate(names):
        inputs[n] = train.D[idx, j]
    for j, v in enumerate(BLOCK_VARS):
        inputs[v] = train.blocks[idx, j]
    inputs["cfg"] = np.array(
        [index[tuple(int(v) for v in train.blocks[i])] for i in idx], dtype=np.float64
    )
    for m, inp in zip(model.metrics, measured):
        inputs[inp] = np.array([v[m] for v in values], dtype=np.float64)
    cycles = np.asarray(prog.evaluate(inputs)["cycles"], dtype=np.float64)
    return idx, np.broadcast_to(cycles, idx.shape).copy()


def configuration_fence(model: TemplateModel, job: HelperJob) -> tuple[HelperJob, dict[str, Any]]:
    """`job` without the training points above the fence (and without the candidates left with
    no point), and a JSON-safe account of what was removed per training size."""
    idx, cycles = estimated_cycles(model, job)
    train = job.train
    drop: set[int] = set()
    per_size: list[dict[str, Any]] = []
    sizes = [tuple(float(x) for x in train.D[i]) for i in idx]
    for D in sorted(set(sizes)):
        at = np.array([k for k, s in enumerate(sizes) if s == D], dtype=np.int64)
        finite = at[np.isfinite(cycles[at])]
        entry: dict[str, Any] = {"D": [int(x) for x in D], "configurations": int(at.size)}
        if finite.size < MIN_CONFIGURATIONS:
            entry["fenced"] = False
            per_size.append(entry)
            continue
        q1, q3 = np.percentile(cycles[finite], [25.0, 75.0])
        out = finite[~iqr_upper_fence(cycles[finite])]
        drop.update(int(idx[k]) for k in out)
        entry.update(
            fenced=True,
            q1_cycles=float(q1),
            q3_cycles=float(q3),
            fence_cycles=float(q3 + 1.5 * (q3 - q1)),
            removed=[[int(v) for v in train.blocks[idx[k]]] for k in out],
        )
        per_size.append(entry)
    keep = [i for i in range(train.n) if i not in drop]
    fenced = replace(job, train=train.take(keep))
    # The model fits only points with counters: a candidate whose every such point was removed
    # cannot be fitted any more.
    block_of = {int(i): tuple(int(v) for v in train.blocks[i]) for i in idx}
    had = set(block_of.values())
    left = {b for i, b in block_of.items() if i not in drop}
    gone = [b for b in job.candidates if b in had and b not in left]
    if gone:
        if len(gone) == len(job.candidates):
            raise BuildError(f"{job.spec.name}: the configuration fence removed every candidate")
        fenced = replace(
            fenced,
            candidates=tuple(b for b in job.candidates if b in left),
            rejected={**job.rejected, **dict.fromkeys(gone, FENCE_REASON)},
        )
    report = {
        "rule": "per training size, points whose MWP-CWP estimated cycles exceed Q3 + 1.5 IQR "
        "over the configurations measured there are removed before fitting (thesis §5.4)",
        "points_removed": len(drop),
        "points": int(idx.size),
        "candidates_removed": [list(b) for b in gone],
        "sizes": per_size,
    }
    return fenced, report


__all__ = ["FENCE_REASON", "configuration_fence", "estimated_cycles"]
