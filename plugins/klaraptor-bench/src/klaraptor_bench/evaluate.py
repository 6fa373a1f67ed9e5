"""The methods side by side against exhaustive search (DESIGN.md "How we judge a choice").

For every kernel and evaluation size N with ground truth (every candidate timed), each method
names the block it launches, or for an online method the blocks it tries on the first calls
(the best measured of them counts). Methods come from providers, functions of a
`KernelContext` returning `MethodResult`s, so other models add themselves with one call
(`register_provider`). Built in:
- `klaraptor`: the tool's default build (`model="auto"`, the budgeted plan) trained on the
  training sizes only, model alone; `klaraptor_topk`: the same build's online refinement
  (`Selector.refine_blocks`: adaptive k, tune-once's block always in);
- tune-once: the best block measured at the largest training size, reused at every size;
  nearest-size: the best block at the training size nearest N (log scale);
- default: the benchmark's default block; OCC: the median time over the blocks reaching the
  maximum theoretical occupancy (SNOWPACK's protocol); exhaustive: the best measured block.
`comparison_providers()` adds `scaling_full` (every recorded training point, no budget),
`time_fit` and `mwp_cwp` (full training data, as KLARAPTOR collects), each model-only and
`_topk`, and on request SAAKE's `saake_model_only` and `saake_top4` (its four fastest predicted).

Scores: r = t(chosen) / t(best), S = (r − 1)·100 %, Error = (t − t_best) / (t_worst − t_best)·100 %.
The noise band of a (kernel, N) is the relative interquartile range of the best block's samples.
Each method's measurement cost (seconds of device collection) comes from the cost model
(`klaraptor.collect.plan.CostModel`, per-point overhead fitted on the kernel's recorded training
phase) applied to the recorded times of the points it used.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from klaraptor.collect.plan import H200_COST, CostModel, fit_cost_model
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.types import Block, KernelAttributes
from klaraptor.device.profile import DeviceProfile
from klaraptor.spec import KernelSpec
from klaraptor.store import Store
from klaraptor.suite.recorded import KernelData, RecordedDataset

BASELINES = ("tune_once", "nearest_size", "default", "occ", "exhaustive")
METHODS = ("klaraptor", "klaraptor_topk", *BASELINES)


@dataclass
class KernelContext:
    """What a method provider gets for one kernel: the recorded data in a store of its own,
    the training and evaluated sizes, the ground truth and the kernel's cost model."""

    name: str
    spec: KernelSpec
    data: RecordedDataset
    kd: KernelData
    store: Store
    device: DeviceProfile
    train: list[int]
    evals: list[int]  # evaluation sizes with ground truth
    truth: dict[int, dict[Block, float]]
    cost: CostModel

    def at(self, n: int) -> dict[Block, float]:
        """Hot median ms of every candidate measured at training size n."""
        return {b: t[0] for (D, b), t in self.kd.times().items() if D.values() == (n,)}

    def training_cost(self, *, counters: bool = False, cold: bool = False) -> float:
        """A full training collection: every recorded training point timed (one session),
        plus the recorded counter phase and the L2-flushed sweep at L when asked."""
        hot = [t[0] for (D, _), t in self.kd.times().items() if D.values()[0] in self.train]
        s = self.cost.sweep_s(hot)
        if cold:
            s += sum(self.cost.cold_point_s(t[0]) for t in self.kd.cold_times().values())
        if counters:
            s += float(self.kd.costs.get("train_ncu_s", math.nan))
        return s


@dataclass
class MethodResult:
    """One method on one kernel: per evaluated N the blocks it tries (one for a model-only
    method; the best measured of them counts) or, for OCC, a time; its measurement seconds."""

    name: str
    tried: dict[int, list[Block]] = field(default_factory=dict)
    time_ms: dict[int, float] = field(default_factory=dict)
    cost_s: float = math.nan
    info: dict[str, Any] = field(default_factory=dict)


Provider = Callable[[KernelContext], list[MethodResult]]
_EXTRA: list[Provider] = []


def register_provider(provider: Provider) -> None:
    """Add a method provider to every evaluation (`klaraptor bench report` included)."""
    if provider not in _EXTRA:
        _EXTRA.append(provider)


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
    suite: str = ""
    choices: dict[str, Block | None] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    tried: dict[str, list[Block]] = field(default_factory=dict)
    predicted_ms: dict[Block, float] = field(default_factory=dict)
    measured_ms: dict[Block, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def r(self, method: str) -> float:
        return self.times[method] / self.t_best

    def error_pct(self, method: str) -> float:
        span = self.t_worst - self.t_best
        return 0.0 if span <= 0 else (self.times[method] - self.t_best) / span * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "kernel": self.kernel,
            "N": self.N,
            "best": list(self.best),
            "t_best_ms": self.t_best,
            "worst": list(self.worst),
            "t_worst_ms": self.t_worst,
            "noise_band": self.noise,
            "candidates": self.n_candidates,
            **self.info,
            "methods": {
                m: {
                    "block": None if self.choices.get(m) is None else list(self.choices[m]),  # type: ignore[arg-type]
                    "tried": [list(b) for b in self.tried.get(m, [])],
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
    build_s: float  # the default build's measurement (plan) seconds + fitting
    fit_s: float
    truth_s: float  # exhaustive search at the evaluated sizes
    skipped: dict[int, str]  # evaluation sizes without ground truth, with the budget reason
    fits: dict[str, Any] = field(default_factory=dict)
    suite: str = ""
    costs: dict[str, float] = field(default_factory=dict)  # method -> measurement seconds
    info: dict[str, Any] = field(default_factory=dict)


def _occupancy(
    dim_blocks: Sequence[Block],
    attrs: KernelAttributes,
    cc: Sequence[int],
    smem_dyn: Sequence[float],
) -> np.ndarray:
    from klaraptor.device.occupancy import active_blocks_per_sm

    threads = np.array([b[0] * b[1] * b[2] for b in dim_blocks], dtype=np.float64)
    smem = float(attrs.static_smem) + np.asarray(smem_dyn, dtype=np.float64)
    blocks = active_blocks_per_sm(threads, float(attrs.num_regs), smem, tuple(cc))
    return blocks * np.ceil(threads / 32)


# ---------------------------------------------------------------------------------------------
# Providers


def _recorded_build(ctx: KernelContext, model: str, budget: float | None) -> tuple[Any, float]:
    """The tool's build of `model` from the kernel's recorded training points, and its seconds."""
    from klaraptor.assemble import build

    t0 = time.perf_counter()
    kern = build(
        ctx.spec,
        [{"N": n} for n in ctx.train],
        model=model,
        budget=budget,
        store=ctx.store,
        device=ctx.device,
        collect_data=False,
        cost=ctx.cost,
        progress=False,
    )
    return kern, time.perf_counter() - t0


def klaraptor_provider(
    model: str = "auto", *, budget: float | None = 1.5, name: str = "klaraptor"
) -> Provider:
    """The tool's build (`model`, `budget`) from the training sizes: `name` (the model's
    choice) and `name`_topk (online refinement's blocks)."""

    def provide(ctx: KernelContext) -> list[MethodResult]:
        kern, fit_s = _recorded_build(ctx, model, budget)
        rep = kern.report
        assert rep is not None
        if budget is None:
            cost = ctx.training_cost(
                counters=get_needs_counters(rep.model), cold=rep.model == "scaling"
            )
            plan = None
        else:
            done = rep.collect.plan if rep.collect is not None else None
            plan = {} if done is None else done.to_dict()
            cost = float(plan.get("spent_s", math.nan))
        chosen = {N: [kern.select(N).block] for N in ctx.evals}
        topk = {N: kern.selector.refine_blocks(N) for N in ctx.evals}
        pred = {N: kern.helper.predict(kern.selector.size(N)) for N in ctx.evals}
        sel = {} if rep.selection is None else rep.selection.to_dict()
        fold = None if rep.selection is None else rep.selection.fold_r(rep.model)
        info = {
            "model": rep.model,
            "fit_s": fit_s,
            "plan": plan,
            "fold_r": fold,
            "model_selection": sel,
            "predicted_ms": {
                N: {b: float(p.ms[i]) for i, b in enumerate(kern.helper.candidates)}
                for N, p in pred.items()
            },
            "regime": {
                N: ("cold" if float(p.outputs["cold"][0]) else "hot")
                for N, p in pred.items()
                if "cold" in p.outputs
            },
            "tune_once_index": kern.helper.tune_once_index,
        }
        kern.selector.flush()
        return [
            MethodResult(name, chosen, cost_s=cost, info=info),
            MethodResult(f"{name}_topk", topk, cost_s=cost),
        ]

    return provide


def saake_provider(ctx: KernelContext) -> list[MethodResult]:
    """SAAKE's build on every recorded training point: `saake_model_only` (its fastest
    predicted block) and `saake_top4` (its four fastest, timed on the first calls; the best
    measured counts), the names of issue 11."""
    kern, fit_s = _recorded_build(ctx, "saake", None)
    cost = ctx.training_cost(counters=get_needs_counters("saake"))
    chosen: dict[int, list[Block]] = {}
    top4: dict[int, list[Block]] = {}
    for N in ctx.evals:
        pred = kern.helper.predict(kern.selector.size(N))
        ms = np.where(pred.valid, pred.ms, np.inf)
        order = [int(i) for i in np.argsort(ms, kind="stable") if np.isfinite(ms[i])]
        chosen[N] = [kern.select(N).block]
        top4[N] = [kern.helper.candidates[i] for i in order[:4]] or chosen[N]
    kern.selector.flush()
    info = {"model": "saake", "fit_s": fit_s}
    return [
        MethodResult("saake_model_only", chosen, cost_s=cost, info=info),
        MethodResult("saake_top4", top4, cost_s=cost),
    ]


def get_needs_counters(model: str) -> bool:
    from klaraptor.models import get_model

    return bool(get_model(model).needs_counters)


def baseline_provider(ctx: KernelContext) -> list[MethodResult]:
    """tune-once, nearest-size, default, OCC and exhaustive (module docstring)."""
    L = max(ctx.train)
    at_L = ctx.at(L)
    tune_once = min(at_L, key=at_L.__getitem__)
    nearest: dict[int, list[Block]] = {}
    for N in ctx.evals:
        near = min(ctx.train, key=lambda t: abs(math.log(N / t)))
        at = ctx.at(near)
        nearest[N] = [min(at, key=at.__getitem__)]
    attrs = ctx.kd.facts(ctx.data.device_key).attributes
    assert attrs is not None
    occ: dict[int, float] = {}
    for N, med in ctx.truth.items():
        blocks = sorted(med)
        D = ctx.spec.size(N)
        dyn = [ctx.spec.dynamic_smem_for(D, b) for b in blocks]
        o = _occupancy(blocks, attrs, ctx.device.cc, dyn)
        occ[N] = float(np.median([med[b] for b, v in zip(blocks, o) if v == o.max()]))
    full_time = ctx.training_cost()
    return [
        MethodResult(
            "tune_once",
            {N: [tune_once] for N in ctx.evals},
            cost_s=ctx.cost.sweep_s(list(at_L.values())),
        ),
        MethodResult("nearest_size", nearest, cost_s=full_time),
        MethodResult("default", {N: [ctx.spec.default_block] for N in ctx.evals}, cost_s=0.0),
        MethodResult("occ", time_ms=occ, cost_s=0.0),
        MethodResult(
            "exhaustive",
            {N: [min(m, key=m.__getitem__)] for N, m in ctx.truth.items()},
            cost_s=float(ctx.kd.costs.get("truth_s", math.nan)),
        ),
    ]


def default_providers(model: str = "auto") -> list[Provider]:
    return [klaraptor_provider(model), baseline_provider, *_EXTRA]


def comparison_providers() -> dict[str, Provider]:
    """The models on every recorded training point (no budget), for comparison, by name."""
    return {
        "scaling_full": klaraptor_provider("scaling", budget=None, name="scaling_full"),
        "time_fit": klaraptor_provider("time_fit", budget=None, name="time_fit"),
        "mwp_cwp": klaraptor_provider("mwp_cwp", budget=None, name="mwp_cwp"),
        # Opt-in (`bench report --saake`): fitting the emulator takes 10-20 s a kernel.
        "saake": saake_provider,
    }


OPT_IN_COMPARISONS = ("saake",)


# ---------------------------------------------------------------------------------------------
# Evaluation


def kernel_costs(data: RecordedDataset) -> dict[str, CostModel]:
    """Each kernel's cost model: the shared constants with its own per-point overhead, fitted on
    its recorded training phase (`fit_cost_model`)."""
    phases = []
    for n, k in data.kernels.items():
        train = {int(v) for v in (k.summary.get("meta") or {}).get("train_sizes", [])}
        phases.append(
            {
                "kernel": n,
                "train_time_s": k.costs.get("train_time_s", math.nan),
                "time_ms": [t[0] for (D, _), t in k.times().items() if D.values()[0] in train],
                "train_ncu_s": k.costs.get("train_ncu_s", math.nan),
                "ncu": [
                    (r[-1]["gpu__time_duration.sum"] / 1e6, r[-1]["profiler__replayer_passes"])
                    for r in k.ncu
                    if "gpu__time_duration.sum" in r[-1] and "profiler__replayer_passes" in r[-1]
                ],
            }
        )
    model, per_kernel = fit_cost_model(phases)
    base = H200_COST
    return {
        n: CostModel(**{**base.__dict__, "per_point_s": per_kernel.get(n, model.per_point_s)})
        for n in data.kernels
    }


def evaluate_kernel(
    store: Store,
    data: RecordedDataset,
    name: str,
    *,
    model: str = "auto",
    providers: Sequence[Provider] | None = None,
    cost: CostModel | None = None,
    suite_name: str = "",
) -> KernelResult:
    """Score every method of `providers` (default: the tool's build with `model` and the
    baselines) at every evaluated N of kernel `name`; `store` must hold its recorded data."""
    from klaraptor import suite

    spec = suite.get(name)
    kd = data.kernels[name]
    times = kd.times()
    evals_all = [int(n) for n in spec.meta["eval_sizes"]]
    truth: dict[int, dict[Block, float]] = {}
    full: dict[int, dict[Block, tuple[float, float, float]]] = {}
    skipped: dict[int, str] = {}
    decisions = kd.truth(data.device_key)
    for N in evals_all:
        measured = {b: t for (D, b), t in times.items() if D.values() == (N,)}
        if measured:
            truth[N] = {b: t[0] for b, t in measured.items()}
            full[N] = measured
        else:
            dec = decisions.get(spec.size(N))
            skipped[N] = dec.reason if dec is not None else "no ground truth recorded"
    ctx = KernelContext(
        name,
        spec,
        data,
        kd,
        store,
        data.profile(),
        [int(n) for n in spec.meta["train_sizes"]],
        sorted(truth),
        truth,
        cost or kernel_costs(data)[name],
    )
    results: list[MethodResult] = []
    for provide in providers if providers is not None else default_providers(model):
        results += provide(ctx)
    pairs = []
    for N, med in truth.items():
        best = min(med, key=med.__getitem__)
        worst = max(med, key=med.__getitem__)
        q = full[N][best]
        pr = PairResult(
            name,
            N,
            best,
            med[best],
            worst,
            med[worst],
            noise=(q[2] - q[1]) / q[0] if q[0] > 0 else math.nan,
            n_candidates=len(med),
            suite=suite_name,
            measured_ms=med,
        )
        for res in results:
            if N in res.time_ms:
                pr.choices[res.name], pr.times[res.name] = None, res.time_ms[N]
                continue
            tried = res.tried.get(N)
            if not tried:
                raise KlaraptorError(f"{name} N={N}: method {res.name} chose nothing")
            missing = [b for b in tried if b not in med]
            if missing:
                raise KlaraptorError(
                    f"{name} N={N}: {res.name} tries {missing}, which have no ground-truth time"
                )
            pick = min(tried, key=med.__getitem__)
            pr.choices[res.name], pr.times[res.name] = pick, med[pick]
            pr.tried[res.name] = list(tried)
        # Truth rows added by a race's first estimate (`bench.supplement`): say which methods'
        # times rest on one, and whether the worst does.
        estimated = {
            tuple(int(v) for v in e[1:4])
            for e in (kd.summary.get("supplement") or {}).get("estimated", [])
            if int(e[0]) == N
        }
        if estimated:
            pr.info["estimated_blocks"] = len(estimated)
            pr.info["estimated_methods"] = sorted(
                m for m, b in pr.choices.items() if b is not None and b in estimated
            )
            pr.info["worst_estimated"] = worst in estimated
        head = next((r for r in results if r.name == "klaraptor"), None)
        if head is not None:
            pr.predicted_ms = head.info.get("predicted_ms", {}).get(N, {})
            regime = head.info.get("regime", {}).get(N)
            if regime is not None:
                pr.info["regime"] = regime
        pairs.append(pr)
    head = next((r for r in results if r.name == "klaraptor"), None)
    info = {} if head is None else {k: v for k, v in head.info.items() if k != "predicted_ms"}
    fit_s = float(info.get("fit_s", 0.0))
    return KernelResult(
        kernel=name,
        benchmark=str(spec.meta.get("benchmark", name)),
        pairs=pairs,
        build_s=(head.cost_s if head is not None else math.nan) + fit_s,
        fit_s=fit_s,
        truth_s=float(kd.costs.get("truth_s", math.nan)),
        skipped=skipped,
        fits={"model_selection": info["model_selection"]} if info.get("model_selection") else {},
        suite=suite_name,
        costs={r.name: r.cost_s for r in results},
        info=info,
    )


def evaluate_kernels(
    store: Store,
    data: RecordedDataset,
    *,
    model: str = "auto",
    kernels: Sequence[str] | None = None,
    console: Any | None = None,
) -> list[KernelResult]:
    out = []
    costs = kernel_costs(data)
    for name in kernels or sorted(data.kernels):
        res = evaluate_kernel(store, data, name, model=model, cost=costs[name])
        if console is not None:
            rs = ", ".join(f"N={p.N}: r={p.r('klaraptor'):.3f}" for p in res.pairs)
            console.print(f"  {name:28s} {rs}")
        out.append(res)
    return out


def geomean(xs: Sequence[float]) -> float:
    a = np.asarray(xs, dtype=np.float64)
    return float(np.exp(np.mean(np.log(a)))) if a.size else math.nan


def method_stats(pairs: Sequence[PairResult], method: str) -> dict[str, Any]:
    """geomean/max/median r, within_5pct (fraction of pairs with r ≤ 1.05), mean S %, pairs
    within their noise band, mean Error %, and wins/losses against tune-once (outside the
    pair's noise band)."""
    ps = [p for p in pairs if method in p.times]
    rs = np.array([p.r(method) for p in ps])
    if not rs.size:
        return {"pairs": 0}
    out: dict[str, Any] = {
        "pairs": int(rs.size),
        "geomean_r": geomean(rs),
        "max_r": float(rs.max()),
        "median_r": float(np.median(rs)),
        "within_5pct": float(np.mean(rs <= 1.05)),
        "mean_S_pct": float(np.mean(rs - 1.0) * 100.0),
        "within_noise": int(sum(p.r(method) <= 1 + max(p.noise, 0.0) for p in ps)),
        "mean_error_pct": float(np.mean([p.error_pct(method) for p in ps])),
    }
    if all("tune_once" in p.times for p in ps):
        band = [max(p.noise, 0.0) for p in ps]
        to = [p.r("tune_once") for p in ps]
        out["wins_vs_tune_once"] = int(sum(t > r * (1 + b) for r, t, b in zip(rs, to, band)))
        out["losses_vs_tune_once"] = int(sum(r > t * (1 + b) for r, t, b in zip(rs, to, band)))
    tried = [len(p.tried[method]) for p in ps if method in p.tried]
    if tried and max(tried) > 1:
        out["mean_k"] = float(np.mean(tried))
        out["max_k"] = int(max(tried))
    return out


def summarize(results: Sequence[KernelResult]) -> dict[str, Any]:
    pairs = [p for r in results for p in r.pairs]
    names = list(dict.fromkeys(m for p in pairs for m in p.times))
    out: dict[str, Any] = {"pairs": len(pairs), "kernels": len(results), "methods": {}}
    for m in names:
        out["methods"][m] = method_stats(pairs, m)
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
        f"{'method':22s} {'geomean r':>10s} {'max r':>8s} {'within 5%':>10s} {'mean S%':>8s}",
    ]
    for m, v in s["methods"].items():
        if not v.get("pairs"):
            continue
        lines.append(
            f"{m:22s} {v['geomean_r']:10.4f} {v['max_r']:8.3f} {v['within_5pct']:10.1%} "
            f"{v['mean_S_pct']:8.2f}"
        )
    lines.append(
        f"noise band (median relative IQR of the best block): {s['noise_band']['median']:.2%}"
    )
    return "\n".join(lines)
