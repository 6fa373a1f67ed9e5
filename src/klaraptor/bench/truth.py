"""GPU collection for the benchmark suite: training points and exhaustive ground truth.

Ground truth is every candidate timed at every evaluation size. Where that would take too long a
size is skipped by a budget rule decided BEFORE measuring it, and recorded with the reason:
the default block's time at the evaluation size is estimated from its time at the largest training
size scaled by the kernel's complexity ((N / N_train)^p, p from `meta["complexity"]`), and

    estimate = t_default(N) × candidates × (warm-up + minimum repeats) × SLOWDOWN_ALLOWANCE

must stay under `budget_s` (the average candidate is assumed SLOWDOWN_ALLOWANCE times slower
than the default block). Every decision is written to the store's kernel summary under
`summary["truth"][device][N]`.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klaraptor.collect import CollectOptions, CollectReport, collect
from klaraptor.configspace import ConfigSpace
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

SLOWDOWN_ALLOWANCE = 3.0
TRUTH_OPTIONS = CollectOptions(
    counters=False, check=False, warmup=1, min_time_ms=20.0, min_repeats=3, max_repeats=30, timeout_s=120.0
)
TRAIN_OPTIONS = CollectOptions(
    counters=False, check=True, warmup=2, min_time_ms=5.0, min_repeats=5, max_repeats=30,
    target_sample_ms=0.2, ncu_batch=150,
)
# Counters at three of the training sizes (the per-configuration fits need three to validate).
NCU_SIZES = (512, 1024, 1536)
NCU_SIZES_3D = (48, 64, 96)


def ncu_sizes_for(spec: KernelSpec) -> tuple[int, ...]:
    return NCU_SIZES_3D if spec.dim == 3 else NCU_SIZES


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
    """Which evaluation sizes fit the budget, from the default block's training time."""
    block = spec.default_block
    train = [
        m for m in store.measurements(spec.name, device, kind="time", status="ok")
        if m.block == block and m.D[0] < min(sizes)
    ]
    if not train:
        return [SizeDecision(int(n), False, math.nan, "no training time of the default block to budget from") for n in sizes]
    ref = max(train, key=lambda m: m.D[0])
    t_ref = float(ref.value["median_ms"]) / 1e3
    p = complexity_power(spec)
    n_cand = len(ConfigSpace.for_spec(spec).candidates)
    per_launch = options.warmup + options.min_repeats
    out = []
    for n in sizes:
        t = t_ref * (n / ref.D[0]) ** p
        est = t * n_cand * per_launch * SLOWDOWN_ALLOWANCE
        ok = est <= budget_s
        why = (
            f"estimated {est:.0f} s ({t * 1e3:.3g} ms default-block launch × {n_cand} candidates × "
            f"{per_launch} launches × {SLOWDOWN_ALLOWANCE:g}) {'within' if ok else 'over'} the {budget_s:.0f} s budget"
        )
        out.append(SizeDecision(int(n), ok, est, why))
    return out


def record_decisions(store: Store, spec: KernelSpec, device: str, decisions: Sequence[SizeDecision]) -> None:
    kern = store.kernel(spec.name)
    summary = dict(kern["summary"]) if kern else spec.to_summary()
    truth = dict(summary.get("truth") or {})
    per = dict(truth.get(device) or {})
    for d in decisions:
        per[str(d.N)] = {**d.to_dict(), "decided": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    truth[device] = per
    summary["truth"] = truth
    store.put_kernel(spec.name, spec.fingerprint(), summary)


def collect_timing(spec: KernelSpec, store: Store, *, device: Any, progress: bool = True) -> CollectReport:
    """Timing (with the output check) of every candidate at every training size."""
    sizes = [{"N": n} for n in spec.meta["train_sizes"]]
    return collect(spec, sizes, store=store, device=device, options=TRAIN_OPTIONS, progress=progress)


def collect_counters(
    spec: KernelSpec, store: Store, *, device: Any, sizes: Sequence[int] | None = None, progress: bool = True
) -> CollectReport:
    """Hardware counters (one ncu session per batch) at the counter sizes (timed points only)."""
    sizes = list(sizes or ncu_sizes_for(spec))
    opts = CollectOptions(**{**TRAIN_OPTIONS.__dict__, "timing": False, "counters": True})
    return collect(spec, [{"N": n} for n in sizes], store=store, device=device, options=opts, progress=progress)


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
    rep = collect(spec, chosen, store=store, device=device, options=TRUTH_OPTIONS, progress=progress)
    return decisions, rep, time.perf_counter() - t


def sizes_of(store: Store, spec: KernelSpec, device: str) -> Mapping[int, int]:
    """How many candidates are timed (ok) per N."""
    out: dict[int, int] = {}
    for m in store.measurements(spec.name, device, kind="time", status="ok"):
        out[m.D[0]] = out.get(m.D[0], 0) + 1
    return out
