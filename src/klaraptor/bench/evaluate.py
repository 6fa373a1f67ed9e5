"""The methods side by side against exhaustive search (DESIGN.md "How we judge a choice").

For every kernel and evaluation size N with ground truth (every candidate timed):
- klaraptor (model only): the helper program built from the TRAINING sizes only chooses;
- klaraptor + online top-k: the best measured of the model's top-k (what `refine=k` does on the
  first k real calls; the times are the ground-truth measurements of those blocks);
- default: the benchmark's default block;
- OCC: the median time over the blocks reaching the maximum theoretical occupancy (SNOWPACK);
- tune-once: the best block measured at the largest training size, reused at every size;
- exhaustive: the best measured block (r = 1 by definition).

Scores: r = t(chosen) / t(best), S = (r − 1)·100 %, Error = (t − t_best) / (t_worst − t_best)·100 %.
The noise band of a (kernel, N) is the relative interquartile range of the best block's samples.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.bench.dataset import RecordedDataset
from klaraptor.errors import KlaraptorError
from klaraptor.store import Store
from klaraptor.types import Block, KernelAttributes

METHODS = ("klaraptor", "klaraptor_top4", "default", "occ", "tune_once", "exhaustive")


@dataclass
class PairResult:
    """One (kernel, N): the ground truth and each method's choice."""

    kernel: str
    N: int
    best: Block
    t_best: float
    worst: Block
    t_worst: float
    noise: float
    n_candidates: int
    choices: dict[str, Block | None] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    predicted_ms: dict[Block, float] = field(default_factory=dict)
    measured_ms: dict[Block, float] = field(default_factory=dict)

    def r(self, method: str) -> float:
        return self.times[method] / self.t_best

    def error_pct(self, method: str) -> float:
        span = self.t_worst - self.t_best
        return 0.0 if span <= 0 else (self.times[method] - self.t_best) / span * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "N": self.N,
            "best": list(self.best),
            "t_best_ms": self.t_best,
            "worst": list(self.worst),
            "t_worst_ms": self.t_worst,
            "noise_band": self.noise,
            "candidates": self.n_candidates,
            "methods": {
                m: {
                    "block": None if self.choices.get(m) is None else list(self.choices[m]),  # type: ignore[arg-type]
                    "ms": self.times[m],
                    "r": self.r(m),
                    "S_pct": (self.r(m) - 1) * 100,
                    "error_pct": self.error_pct(m),
                }
                for m in self.times
            },
        }


@dataclass
class KernelResult:
    kernel: str
    benchmark: str
    pairs: list[PairResult]
    build_s: float  # collection (timing + counters) + fitting
    fit_s: float
    truth_s: float  # exhaustive search at the evaluated sizes
    skipped: dict[int, str]  # evaluation sizes without ground truth, with the budget reason
    fits: dict[str, Any] = field(default_factory=dict)


def _occupancy(
    dim_blocks: Sequence[Block],
    attrs: KernelAttributes,
    cc: Sequence[int],
    smem_dyn: Sequence[float],
) -> np.ndarray:
    from klaraptor.occupancy import active_blocks_per_sm

    threads = np.array([b[0] * b[1] * b[2] for b in dim_blocks], dtype=np.float64)
    smem = float(attrs.static_smem) + np.asarray(smem_dyn, dtype=np.float64)
    blocks = active_blocks_per_sm(threads, float(attrs.num_regs), smem, tuple(cc))
    return blocks * np.ceil(threads / 32)


def evaluate_kernel(
    store: Store,
    data: RecordedDataset,
    name: str,
    *,
    model: str,
    topk: int = 4,
) -> KernelResult:
    """Build the helper from the training sizes and score every method at every evaluated N."""
    from klaraptor import suite
    from klaraptor.build import build

    spec = suite.get(name)
    kd = data.kernels[name]
    device = data.profile()
    train = [int(n) for n in spec.meta["train_sizes"]]
    evals = [int(n) for n in spec.meta["eval_sizes"]]
    times = kd.times()
    t0 = time.perf_counter()
    kern = build(
        spec, [{"N": n} for n in train], model=model, store=store, device=device, collect_data=False
    )
    fit_s = time.perf_counter() - t0
    attrs = kd.facts(data.device_key).attributes
    largest = max(train)
    at_largest = {b: t[0] for (D, b), t in times.items() if D.values() == (largest,)}
    tune_once = min(at_largest, key=at_largest.__getitem__)
    pairs = []
    skipped: dict[int, str] = {}
    decisions = kd.truth(data.device_key)
    for N in evals:
        measured = {b: t for (D, b), t in times.items() if D.values() == (N,)}
        if not measured:
            dec = decisions.get(spec.size(N))
            skipped[N] = dec.reason if dec is not None else "no ground truth recorded"
            continue
        med = {b: t[0] for b, t in measured.items()}
        best = min(med, key=med.__getitem__)
        worst = max(med, key=med.__getitem__)
        q = measured[best]
        pr = PairResult(
            name,
            N,
            best,
            med[best],
            worst,
            med[worst],
            noise=(q[2] - q[1]) / q[0] if q[0] > 0 else math.nan,
            n_candidates=len(med),
            measured_ms=med,
        )
        sel = kern.select(N)
        pred = kern.helper.predict(sel.D)
        pr.predicted_ms = {b: float(pred.ms[i]) for i, b in enumerate(kern.helper.candidates)}
        top = [b for b, _ in sel.topk[:topk] if b in med]
        choices: dict[str, Block | None] = {
            "klaraptor": sel.block,
            "klaraptor_top4": min(top, key=med.__getitem__) if top else sel.block,
            "default": spec.default_block,
            "tune_once": tune_once,
            "exhaustive": best,
        }
        for m, b in choices.items():
            if b not in med:
                raise KlaraptorError(f"{name} N={N}: {m} chose {b}, which has no ground-truth time")
            pr.choices[m] = b
            pr.times[m] = med[b]
        # OCC (SNOWPACK's protocol): the median time over the max-occupancy blocks.
        blocks = sorted(med)
        dyn = [spec.dynamic_smem_for(sel.D, b) for b in blocks]
        occ = _occupancy(blocks, attrs, device.cc, dyn)
        top_occ = [b for b, o in zip(blocks, occ) if o == occ.max()]
        ts = sorted(med[b] for b in top_occ)
        t_occ = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
        pr.choices["occ"] = None
        pr.times["occ"] = t_occ
        pairs.append(pr)
    kern.selector.flush()
    costs = kd.costs
    return KernelResult(
        kernel=name,
        benchmark=str(spec.meta.get("benchmark", name)),
        pairs=pairs,
        build_s=float(costs.get("train_time_s", math.nan))
        + float(costs.get("train_ncu_s", math.nan))
        + fit_s,
        fit_s=fit_s,
        truth_s=float(costs.get("truth_s", math.nan)),
        skipped=skipped,
        fits=kern.report.fits if kern.report is not None else {},
    )


def evaluate_kernels(
    store: Store,
    data: RecordedDataset,
    *,
    model: str = "mwp_cwp",
    kernels: Sequence[str] | None = None,
    console: Any | None = None,
) -> list[KernelResult]:
    out = []
    for name in kernels or sorted(data.kernels):
        res = evaluate_kernel(store, data, name, model=model)
        if console is not None:
            rs = ", ".join(f"N={p.N}: r={p.r('klaraptor'):.3f}" for p in res.pairs)
            console.print(f"  {name:28s} {rs}")
        out.append(res)
    return out


def geomean(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=np.float64)
    return float(np.exp(np.mean(np.log(a)))) if a.size else math.nan


def summarize(results: Sequence[KernelResult]) -> dict[str, Any]:
    pairs = [p for r in results for p in r.pairs]
    out: dict[str, Any] = {"pairs": len(pairs), "kernels": len(results), "methods": {}}
    for m in METHODS:
        rs = [p.r(m) for p in pairs]
        errs = [p.error_pct(m) for p in pairs]
        within = [p.r(m) <= 1 + max(p.noise, 0.0) for p in pairs]
        out["methods"][m] = {
            "geomean_r": geomean(rs),
            "max_r": float(max(rs)) if rs else math.nan,
            "median_r": float(np.median(rs)) if rs else math.nan,
            "mean_error_pct": float(np.mean(errs)) if errs else math.nan,
            "within_noise": int(sum(within)),
        }
    noise = [p.noise for p in pairs if math.isfinite(p.noise)]
    out["noise_band"] = {
        "median": float(np.median(noise)) if noise else math.nan,
        "p90": float(np.percentile(noise, 90)) if noise else math.nan,
    }
    out["build_s"] = float(np.nansum([r.build_s for r in results]))
    out["truth_s"] = float(np.nansum([r.truth_s for r in results]))
    return out


def format_summary(results: Sequence[KernelResult]) -> str:
    s = summarize(results)
    lines = [
        f"{s['pairs']} (kernel, N) pairs over {s['kernels']} kernels; slowdown r = t(chosen) / t(best)",
        f"{'method':16s} {'geomean r':>10s} {'max r':>8s} {'mean Error%':>12s} {'within noise':>13s}",
    ]
    for m, v in s["methods"].items():
        lines.append(
            f"{m:16s} {v['geomean_r']:10.3f} {v['max_r']:8.2f} {v['mean_error_pct']:12.1f} {v['within_noise']:>8d}/{s['pairs']}"
        )
    lines.append(
        f"noise band (median relative IQR of the best block): {s['noise_band']['median']:.2%}"
    )
    return "\n".join(lines)
