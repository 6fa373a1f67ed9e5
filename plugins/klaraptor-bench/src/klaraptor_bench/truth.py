"""GPU collection of the ground truth for the benchmark suite (the training points are
collected by the product's protocol, `klaraptor.suite.protocol`).

Ground truth is every candidate timed at every evaluation size. Where that would take too long a
size is skipped by a budget rule decided BEFORE measuring it, from training data only, and
recorded with the reason: every candidate's time at the largest training size is scaled by the
kernel's complexity ((N / N_train)^p, p from `meta["complexity"]`), and

    estimate = sum over candidates of t_c(N) × (warm-up + minimum repeats) + PER_POINT_S × candidates

must stay under `budget_s`. Every decision is written to the store's kernel summary under
the store's truth decisions (`Store.put_truth_decisions`).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from klaraptor.collect.collector import CollectOptions, CollectReport, collect
from klaraptor.collect.measure import MEASURE_OPTIONS
from klaraptor.spec import KernelSpec
from klaraptor.store import Store, TruthDecision

PER_POINT_S = 0.05  # measured host overhead of one timed point (worker, events, bookkeeping)
# The ground truth's protocol is the product's measuring protocol for chosen configurations
# (`klaraptor search --measure` times by it too, so the two compare like for like).
TRUTH_OPTIONS = MEASURE_OPTIONS


def complexity_power(spec: KernelSpec) -> float:
    m = re.fullmatch(r"\s*N\s*(?:\^\s*(\d+))?\s*", str(spec.meta.get("complexity", "N^2")))
    return float(m.group(1) or 1) if m else 2.0


@dataclass
class SizeDecision:
    N: int
    measure: bool
    estimate_s: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"measure": self.measure, "estimate_s": self.estimate_s, "reason": self.reason}


def plan_truth(
    spec: KernelSpec,
    store: Store,
    device: str,
    *,
    sizes: Sequence[int],
    budget_s: float,
    options: CollectOptions = TRUTH_OPTIONS,
) -> list[SizeDecision]:
    """Which evaluation sizes fit the budget, from every candidate's largest-training-size time."""
    ok = [
        m
        for m in store.measurements(spec.name, device, kind="time", status="ok")
        if m.D.values()[0] < min(sizes)
    ]
    if not ok:
        return [
            SizeDecision(int(n), False, math.nan, "no training times to budget from") for n in sizes
        ]
    n_ref = max(m.D.values()[0] for m in ok)
    t_ref = [float(m.value["median_ms"]) / 1e3 for m in ok if m.D.values()[0] == n_ref]
    p = complexity_power(spec)
    launches = options.warmup + options.min_repeats
    out = []
    for n in sizes:
        scale = (n / n_ref) ** p
        est = sum(t * scale for t in t_ref) * launches + PER_POINT_S * len(t_ref)
        fits = est <= budget_s
        why = (
            f"estimated {est:.0f} s (the {len(t_ref)} candidates' times at N={n_ref} × (N/{n_ref})^{p:g} "
            f"× {launches} launches + {PER_POINT_S:g} s per point) {'within' if fits else 'over'} "
            f"the {budget_s:.0f} s budget"
        )
        out.append(SizeDecision(int(n), fits, est, why))
    return out


def record_decisions(
    store: Store, spec: KernelSpec, device: str, decisions: Sequence[SizeDecision]
) -> None:
    decided = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    store.put_truth_decisions(
        spec.name,
        device,
        [
            TruthDecision(spec.size(d.N), d.measure, d.estimate_s, d.reason, decided)
            for d in decisions
        ],
    )


def collect_truth(
    spec: KernelSpec,
    store: Store,
    device: Any,
    *,
    sizes: Sequence[int] | None = None,
    budget_s: float = 60.0,
    progress: bool = True,
) -> tuple[list[SizeDecision], CollectReport | None, float]:
    """Exhaustive timing at the evaluation sizes that fit the budget; returns the decisions,
    the collection report and its wall time (the exhaustive-search time)."""
    sizes = list(sizes or spec.meta["eval_sizes"])
    decisions = plan_truth(spec, store, device.key, sizes=sizes, budget_s=budget_s)
    record_decisions(store, spec, device.key, decisions)
    chosen = [{"N": d.N} for d in decisions if d.measure]
    if not chosen:
        return decisions, None, 0.0
    t = time.perf_counter()
    rep = collect(
        spec, chosen, store=store, device=device, options=TRUTH_OPTIONS, progress=progress
    )
    return decisions, rep, time.perf_counter() - t
