"""Extrapolation study on the recorded H200 suite (CPU only, deterministic, about a minute).

    .venv/bin/python benchmarks/extrapolation_study.py [--out benchmarks/results/h200]

Writes extrapolation_study.json and extrapolation_study.md: per method the geometric-mean and
maximum slowdown, the fraction of pairs within 5 % and the mean S %, over the 77 (kernel, N)
pairs; each method's measurement cost from the recorded times of the points it used (cost model
fitted on the recorded training phases); per kernel the ×2 fold score beside the true score and
their Spearman correlation; every pair where the scaling model loses to tune-once, with the data
that explains it.

Measurements are the recorded ones (`klaraptor.bench.dataset`): hot timings are CUDA-event
medians of back-to-back launches; "cold" timings at the largest training size are Nsight
Compute's gpu__time_duration, taken with ncu's default cache control (caches flushed before each
profiled launch), standing in for timings with the L2 flushed (`CollectOptions.flush_l2`), which
the recorded dataset does not have. The plan prices a cold point as a flushed timing in the same
session (`CostModel.cold_point_s`).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from klaraptor import suite
from klaraptor.bench.dataset import RecordedDataset, load_recorded
from klaraptor.build_plan import CostModel, TableMeasurer, fit_cost_model, ladder, run_plan
from klaraptor.models.scaling import (
    Footprint,
    ScalingFit,
    ScalingTable,
    exact_quantities,
    fit_scaling,
)

ROOT = Path(__file__).resolve().parents[1]
PAIRS = ROOT / "benchmarks/results/h200/pairs.json"
KMAX = 8
Key = tuple[tuple[int, ...], int]


@dataclass
class Case:
    """One kernel: candidates, recorded measurements, exact quantities."""

    name: str
    spec: Any
    blocks: list[tuple[int, int, int]]
    attrs: dict[str, Any]
    train: list[int]
    evals: list[int]
    hot: dict[Key, tuple[float, float]]
    cold: dict[Key, tuple[float, float]]  # at the largest counter size (= L)
    profiled: dict[Key, dict[str, float]]
    truth: dict[int, np.ndarray]  # N -> ms per candidate (nan where missing)
    truth_noise: dict[int, float]
    footprint: Footprint
    waves: dict[int, np.ndarray]  # training N -> exact waves per candidate
    unpadded: dict[float, np.ndarray]  # training N -> candidates launching no padding thread


def argument_footprint(spec: Any, sizes: list[int]) -> Footprint:
    """Bytes of the array arguments (exact) at a few sizes, as a polynomial in N."""
    rng = np.random.default_rng(0)
    nb = []
    for n in sizes:
        args = spec.make_args({"N": n}, rng, device=False)
        nb.append(sum(a.nbytes for a in args if isinstance(a, np.ndarray) and a.ndim > 0))
    return Footprint.fit_exact(("N",), np.array(sizes, dtype=np.float64)[:, None], nb)


def load_case(data: RecordedDataset, name: str) -> Case:
    spec = suite.get(name)
    kd = data.kernels[name]
    # The study keys sizes by their value tuple (one data parameter, N).
    times = {(D.values(), b): v for (D, b), v in kd.times().items()}
    train = [int(n) for n in spec.meta["train_sizes"]]
    evals = [int(n) for n in spec.meta["eval_sizes"]]
    L = max(train)
    blocks = sorted(b for (D, b) in times if D == (L,))
    idx = {b: i for i, b in enumerate(blocks)}
    hot = {
        ((D[0],), idx[b]): (v[0], (v[2] - v[1]) / v[0])
        for (D, b), v in times.items()
        if D[0] in train and b in idx
    }
    cold, profiled = {}, {}
    for r in kd.ncu:
        D, b, m = (int(r[0]),), tuple(int(v) for v in r[1:4]), r[4]
        if b not in idx:
            continue
        ms = m["gpu__time_duration.sum"] / 1e6
        profiled[(D, idx[b])] = {
            "ms": ms,
            "passes": m["profiler__replayer_passes"],
            "dram_bytes": m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"],
        }
        if D == (L,):
            cold[(D, idx[b])] = (ms, math.nan)
    truth, noise = {}, {}
    for N in evals:
        ms = np.array([times.get(((N,), b), (math.nan,))[0] for b in blocks])
        if np.isfinite(ms).any():
            truth[N] = ms
            q = times[((N,), blocks[int(np.nanargmin(ms))])]
            noise[N] = (q[2] - q[1]) / q[0]
    attrs = kd.facts(data.device_key).attributes.to_dict()
    prof = data.profile()
    exact = {
        n: exact_quantities(
            spec, blocks, {"N": n}, attrs, cc=tuple(prof.cc), sm_count=prof.sm_count
        )
        for n in train
    }
    waves = {n: q.waves for n, q in exact.items()}
    unpadded = {
        float(n): q.launched_threads <= q.launched_threads.min() * (1 + 1e-9)
        for n, q in exact.items()
    }
    fp = argument_footprint(spec, sorted(train)[:4])
    return Case(
        name,
        spec,
        blocks,
        attrs,
        train,
        evals,
        hot,
        cold,
        profiled,
        truth,
        noise,
        fp,
        waves,
        unpadded,
    )


def table_from(points: list[dict[str, Any]], case: Case) -> ScalingTable:
    D = np.array([p["D"] for p in points], dtype=np.float64)
    cfg = np.array([p["cfg"] for p in points])
    return ScalingTable(
        D=D,
        cfg=cfg,
        time_ms=np.array([p["ms"] for p in points]),
        cold=np.array([p["kind"] == "cold" for p in points]),
        spread=np.array([p["spread"] for p in points]),
        waves=np.array([case.waves[int(d[0])][c] for d, c in zip(D, cfg)]),
    )


def touched_footprint(profiled: list[dict[str, Any]]) -> Footprint | None:
    """DRAM bytes of the profiled points (caches flushed by ncu: the bytes the kernel touches),
    as c · N^p; None with fewer than two sizes."""
    if len({p["D"][0] for p in profiled}) < 2:
        return None
    return Footprint.fit_power(
        ("N",),
        np.array([p["D"] for p in profiled], dtype=np.float64),
        [p["dram_bytes"] for p in profiled],
    )


def build_scaling(
    case: Case,
    cost: CostModel,
    L: int,
    *,
    full: bool = False,
    counters: bool = False,
    regime: bool = True,
    cold_session: bool = False,
    l2: float,
) -> tuple[ScalingFit, dict[str, Any]]:
    """The plan (or every recorded point when `full`) and the fitted model, anchored at L."""
    sizes = [n for n in case.train if n <= L]
    n_cfg = len(case.blocks)
    needs_cold = regime and case.footprint.bytes([[float(max(case.evals))]])[0] > l2
    if full:
        pts = [
            {"D": list(D), "cfg": c, "kind": "time", "ms": v[0], "spread": v[1]}
            for (D, c), v in sorted(case.hot.items())
            if D[0] in sizes
        ]
        if needs_cold and L == max(case.train):
            pts += [
                {"D": list(D), "cfg": c, "kind": "cold", "ms": v[0], "spread": v[1]}
                for (D, c), v in sorted(case.cold.items())
            ]
        plan_info = {"ratio": math.nan, "points": len(pts)}
        fp = case.footprint
    else:
        hot = {k: v for k, v in case.hot.items() if k[0][0] in sizes}
        cold = case.cold if L == max(case.train) else {}
        meas = TableMeasurer(hot, cold, case.profiled)
        if cold_session:
            cost = CostModel(**{**cost.__dict__, "cold_session_s": cost.session_s})
        small = [(n,) for n in ladder(L, sizes)]
        # Counters exist at a few recorded sizes: L and the largest of them ≤ L/2.
        ncu_sizes = sorted({D[0] for D, _ in case.profiled})
        below = [n for n in ncu_sizes if n <= L / 2]
        plan = run_plan(
            meas,
            cost,
            n_cfg,
            (L,),
            small,
            needs_cold=needs_cold and bool(cold),
            counters=counters,
            force_counters=counters,
            counter_sizes=[(L,), (max(below),)] if below else [(L,)],
        )
        pts = [p for p in plan.points if p["kind"] in ("time", "cold")]
        plan_info = {
            "ratio": plan.ratio,
            "spent_s": plan.spent_s,
            "tune_once_s": plan.tune_once_s,
            "points": len(pts),
            "cold_points": sum(p["kind"] == "cold" for p in pts),
            "notes": plan.notes,
        }
        fp = (touched_footprint(plan.counters) or case.footprint) if counters else case.footprint
    tab = table_from(pts, case)
    fit = fit_scaling(
        tab,
        n_cfg,
        footprint=fp if regime else None,
        l2_bytes=l2,
        waves_ref=case.waves[L],
        unpadded=case.unpadded,
    )
    return fit, plan_info


def score_choice(case: Case, N: int, b: int) -> float:
    ms = case.truth[N]
    if not np.isfinite(ms[b]):
        raise RuntimeError(f"{case.name} N={N}: block {case.blocks[b]} has no ground truth")
    return float(ms[b] / np.nanmin(ms))


def method_rows(case: Case, fit: ScalingFit) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {"model": {}, "topk": {}, "k": {}}
    for N, ms in case.truth.items():
        out["model"][N] = score_choice(case, N, fit.choose((N,)))
        top = fit.topk((N,), KMAX)
        out["topk"][N] = float(np.nanmin(ms[top]) / np.nanmin(ms))
        out["k"][N] = len(top)
    return out


def stats(rs: list[float]) -> dict[str, float]:
    a = np.asarray(rs, dtype=np.float64)
    return {
        "geomean_r": float(np.exp(np.mean(np.log(a)))),
        "max_r": float(a.max()),
        "within_5pct": float(np.mean(a <= 1.05)),
        "mean_S_pct": float(np.mean(a - 1.0) * 100.0),
        "pairs": int(a.size),
    }


def baseline_costs(case: Case, cost: CostModel, h: float) -> dict[str, float]:
    c = CostModel(**{**cost.__dict__, "per_point_s": h})
    L = max(case.train)
    t_L = [v[0] for (D, _), v in case.hot.items() if D[0] == L]
    all_t = [v[0] for v in case.hot.values()]
    ncu = [(v["ms"], v["passes"]) for v in case.profiled.values()]
    return {
        "tune_once": c.sweep_s(t_L),
        "full_training_time_only": c.sweep_s(all_t),
        "full_training_with_counters": c.sweep_s(all_t) + c.ncu_s(ncu),
    }


def explain_loss(case: Case, fit: ScalingFit, N: int, r_model: float, r_to: float) -> str:
    """The data behind a loss: regime and footprints, ranks of the chosen and the best block in
    the anchors at L, and what the counters say about the bytes really touched."""
    ms = case.truth[N]
    best = int(np.nanargmin(ms))
    ch = fit.choose((N,))
    to = fit.tune_once
    cold = fit.is_cold((N,))
    anchor = fit.a_cold if cold else fit.a_hot
    rank = np.argsort(np.argsort(anchor))
    L = max(case.train)
    b = case.blocks
    regime = "cold" if cold else "hot"
    txt = (
        f"{regime} regime (argument footprint {case.footprint.bytes([[float(N)]])[0] / 1e6:.0f} MB"
        f" vs L2 {fit.l2_bytes / 1e6:.0f} MB). Chose {b[ch]} (rank {rank[ch] + 1} of the "
        f"{regime} times at N={L}); tune-once {b[to]}; the best at N={N} is {b[best]}, rank "
        f"{rank[best] + 1} there ({anchor[best] / anchor.min():.3f}× the fastest)"
    )
    if cold and fit.cold_measured.any():
        txt += f", rank {np.argsort(np.argsort(fit.a_hot))[best] + 1} hot"
    txt += "."
    # DRAM bytes per size (median over the profiled blocks): the footprint the kernel touches.
    by_size: dict[int, list[float]] = {}
    for (D, _), v in case.profiled.items():
        by_size.setdefault(D[0], []).append(v["dram_bytes"])
    if len(by_size) >= 2:
        sizes = sorted(by_size)
        touched = Footprint.fit_power(
            ("N",), [[n] for n in sizes], [float(np.median(by_size[n])) for n in sizes]
        )
        t_L = float(np.median(by_size[max(sizes)]))
        a_L = case.footprint.bytes([[float(max(sizes))]])[0]
        if t_L < 0.5 * a_L:
            t_N = touched.bytes([[float(N)]])[0]
            txt += (
                f" The counters show it touches {t_L / 1e6:.2f} MB of its {a_L / 1e6:.1f} MB of "
                f"arguments at N={max(sizes)}; by that footprint ({t_N / 1e6:.1f} MB at N={N}) "
                f"N={N} is {'cold' if t_N > fit.l2_bytes else 'hot'}: the argument footprint "
                "misplaces the regime."
            )
    if rank[best] > 0 and anchor[best] / anchor.min() > 1 + fit.band_at((N,)):
        txt += (
            f" The best block's lead at N={N} is outside the band the training data allow "
            f"({fit.band_at((N,)):.1%}): no measurement at N≤{L} shows it."
        )
    elif rank[best] > 0:
        txt += (
            f" Within the model's band ({fit.band_at((N,)):.1%}): online top-k tries "
            f"{len(fit.topk((N,)))} blocks here."
        )
    return txt


def spearman(a: list[float], b: list[float]) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def recorded_phases(data: RecordedDataset, cases: dict[str, Case]) -> list[dict[str, Any]]:
    return [
        {
            "kernel": n,
            "train_time_s": data.kernels[n].costs.get("train_time_s", math.nan),
            "time_ms": [v[0] for v in c.hot.values()],
            "train_ncu_s": data.kernels[n].costs.get("train_ncu_s", math.nan),
            "ncu": [(v["ms"], v["passes"]) for v in c.profiled.values()],
        }
        for n, c in cases.items()
    ]


def existing_methods(names: list[str]) -> dict[str, dict[tuple[str, int], float]]:
    """auto, time_fit, mwp_cwp (model only and top-4) from the committed pairs.json."""
    if not PAIRS.exists():
        return {}
    pairs = json.loads(PAIRS.read_text())
    out: dict[str, dict[tuple[str, int], float]] = {}
    for model, label in (("auto", "auto"), ("time_fit", "time_fit"), ("mwp_cwp", "mwp_cwp")):
        for p in pairs.get(model, []):
            if p["kernel"] not in names:
                continue
            out.setdefault(label, {})[(p["kernel"], p["N"])] = p["methods"]["klaraptor"]["r"]
            out.setdefault(f"{label}_top4", {})[(p["kernel"], p["N"])] = p["methods"][
                "klaraptor_top4"
            ]["r"]
    return out


def measured_cold(path: Path, cases: dict[str, Case]) -> list[str]:
    """Replace the ncu stand-ins by flushed CUDA-event timings from bench_cold.py; returns the
    kernels replaced."""
    done = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        case = cases.get(row["kernel"])
        if row.get("pass") != "cold" or case is None or not row.get("points"):
            continue
        idx = {b: i for i, b in enumerate(case.blocks)}
        case.cold = {
            ((int(row["N"]),), idx[tuple(p["block"])]): (
                p["median_ms"],
                (p["q3_ms"] - p["q1_ms"]) / p["median_ms"],
            )
            for p in row["points"]
            if tuple(p["block"]) in idx
        }
        done.append(case.name)
    return done


def run(out_dir: Path, cold_file: Path | None = None) -> dict[str, Any]:
    data = load_recorded()
    l2 = float(data.profile().l2_bytes)
    names = sorted(data.kernels)
    cases = {n: load_case(data, n) for n in names}
    cold_source = "ncu gpu__time_duration at L (caches flushed by ncu)"
    if cold_file is not None:
        replaced = measured_cold(cold_file, cases)
        cold_source = f"flushed CUDA-event timings from {cold_file} for {len(replaced)} kernels"
    cost, h_kernel = fit_cost_model(recorded_phases(data, cases))
    variants = {
        "scaling": {},
        "scaling_counters_footprint": {"counters": True},
        "scaling_separate_cold_session": {"cold_session": True},
        "scaling_full_data": {"full": True},
        "hot_only_full_data": {"full": True, "regime": False},
    }
    per_pair: list[dict[str, Any]] = []
    per_kernel: list[dict[str, Any]] = []
    losses: list[dict[str, Any]] = []
    costs: dict[str, dict[str, float]] = {}
    fits: dict[str, dict[str, Any]] = {}
    for n, case in cases.items():
        kcost = CostModel(**{**cost.__dict__, "per_point_s": h_kernel[n]})
        L = max(case.train)
        base = baseline_costs(case, cost, h_kernel[n])
        rows: dict[str, dict[int, float]] = {}
        vinfo: dict[str, Any] = {}
        main_fit = None
        for v, kw in variants.items():
            fit, info = build_scaling(case, kcost, L, l2=l2, **kw)
            m = method_rows(case, fit)
            rows[v] = m["model"]
            rows[f"{v}_topk"] = m["topk"]
            vinfo[v] = {"plan": info, "k": m["k"], "lambda": fit.report.get("lambda")}
            if v == "scaling":
                main_fit = fit
                fits[n] = {
                    "report": fit.report,
                    "plan": info,
                    "cold_measured": int(fit.cold_measured.sum()),
                }
        assert main_fit is not None
        to = main_fit.tune_once
        # Nearest measured size: the best block at the training size nearest (log) to N.
        rows["tune_once"], rows["nearest_size"] = {}, {}
        for N in case.truth:
            rows["tune_once"][N] = score_choice(case, N, to)
            near = min(case.train, key=lambda t: abs(math.log(N / t)))
            at = np.array([case.hot[((near,), c)][0] for c in range(len(case.blocks))])
            rows["nearest_size"][N] = score_choice(case, N, int(np.argmin(at)))
        # The ×2 fold: the same plan and model anchored at the largest size ≤ L/2, scored at L.
        M = max(s for s in case.train if s <= L / 2)
        ffit, _ = build_scaling(case, kcost, M, l2=l2)
        at_L = np.array([case.hot[((L,), c)][0] for c in range(len(case.blocks))])
        fold_r = float(at_L[ffit.choose((L,))] / at_L.min())
        true_r = float(np.exp(np.mean(np.log(list(rows["scaling"].values())))))
        costs[n] = {
            **base,
            "scaling": vinfo["scaling"]["plan"]["spent_s"],
            "scaling_counters_footprint": vinfo["scaling_counters_footprint"]["plan"]["spent_s"],
            "scaling_separate_cold_session": vinfo["scaling_separate_cold_session"]["plan"][
                "spent_s"
            ],
            "per_point_s": h_kernel[n],
        }
        per_kernel.append(
            {
                "kernel": n,
                "fold": f"anchor N={M} -> N={L}",
                "fold_r": fold_r,
                "true_geomean_r": true_r,
                "tune_once_geomean_r": float(
                    np.exp(np.mean(np.log(list(rows["tune_once"].values()))))
                ),
                "plan_ratio": vinfo["scaling"]["plan"]["ratio"],
                "lambda": vinfo["scaling"]["lambda"],
                "cold_points": vinfo["scaling"]["plan"].get("cold_points"),
            }
        )
        for N in case.truth:
            row = {"kernel": n, "N": N, "noise": case.truth_noise[N]}
            row.update({m: rows[m][N] for m in rows})
            row["scaling_k"] = vinfo["scaling"]["k"][N]
            row["regime"] = "cold" if main_fit.is_cold((N,)) else "hot"
            per_pair.append(row)
            r_s, r_t = rows["scaling"][N], rows["tune_once"][N]
            if r_s > r_t * (1 + max(case.truth_noise[N], 0.0)):
                losses.append(
                    {
                        "kernel": n,
                        "N": N,
                        "r_scaling": r_s,
                        "r_tune_once": r_t,
                        "why": explain_loss(case, main_fit, N, r_s, r_t),
                    }
                )
    existing = existing_methods(names)
    methods: dict[str, Any] = {}
    order = ["scaling", "scaling_topk", "tune_once", "nearest_size"] + [
        k for k in rows if k not in ("scaling", "scaling_topk", "tune_once", "nearest_size")
    ]
    for m in order:
        methods[m] = stats([p[m] for p in per_pair])
    for m, vals in existing.items():
        methods[m] = stats(list(vals.values()))
    for m in methods:
        methods[m]["max_cost_over_tune_once"] = None
    for m, key in (
        ("scaling", "scaling"),
        ("scaling_topk", "scaling"),
        ("scaling_counters_footprint", "scaling_counters_footprint"),
        ("scaling_separate_cold_session", "scaling_separate_cold_session"),
        ("tune_once", "tune_once"),
        ("nearest_size", "tune_once"),
        ("scaling_full_data", "full_training_with_counters"),
        ("auto", "full_training_with_counters"),
        ("mwp_cwp", "full_training_with_counters"),
        ("time_fit", "full_training_time_only"),
    ):
        if m in methods:
            ratios = [c[key] / c["tune_once"] for c in costs.values()]
            methods[m]["max_cost_over_tune_once"] = float(max(ratios))
            methods[m]["total_cost_s"] = float(sum(c[key] for c in costs.values()))
    fold = [k["fold_r"] for k in per_kernel]
    true = [k["true_geomean_r"] for k in per_kernel]
    result = {
        "what": "extrapolation study on the recorded H200 suite (benchmarks/extrapolation_study.py)",
        "data": data.provenance.get("gpu"),
        "data_date": data.provenance.get("date"),
        "commit": _commit(),
        "l2_bytes": l2,
        "cold_source": cold_source,
        "cost_model": {k: v for k, v in cost.__dict__.items() if k != "protocol"},
        "methods": methods,
        "per_kernel": per_kernel,
        "fold_vs_true_spearman": spearman(fold, true),
        "costs": costs,
        "losses_to_tune_once": losses,
        "pairs": per_pair,
        "fits": fits,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "extrapolation_study.json").write_text(json.dumps(result, indent=1, default=_j))
    (out_dir / "extrapolation_study.md").write_text(markdown(result))
    return result


def _j(v: Any) -> Any:
    if isinstance(v, np.integer | np.floating):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def markdown(res: dict[str, Any]) -> str:
    m = res["methods"]
    lines = [
        "# Extrapolation study (recorded H200 suite, CPU)",
        "",
        f"Data: {res['data']}, recorded {res['data_date']}. Regenerate with "
        "`.venv/bin/python benchmarks/extrapolation_study.py` (commit "
        f"{res['commit']}). Pairs: {m['scaling']['pairs']}. Cold anchors: {res['cold_source']}.",
        "",
        "Methods: `scaling` = the scaling model (klaraptor.models.scaling) built from the budgeted "
        "plan (klaraptor.build_plan, budget 1.5× tune-once, argument footprint); `_topk` = the "
        "best measured of its adaptive online top-k (always with tune-once's block, at most "
        f"{KMAX} + 1); `scaling_counters_footprint` = the footprint from DRAM counters of two "
        "profiled points (cost counted, over budget); `scaling_separate_cold_session` = the cold "
        "sweep priced as its own collection; `scaling_full_data` = every recorded training point, "
        "no budget; `hot_only_full_data` = no cache regime; `auto`, `time_fit`, `mwp_cwp` from "
        "pairs.json (their cost: the full training collection). Costs come from the cost model "
        "(`fit_cost_model` on the recorded training phases) applied to the recorded times of the "
        "points each method used.",
        "",
        "| method | geomean r | max r | within 5 % | mean S % | max cost / tune-once |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for k, v in m.items():
        c = v.get("max_cost_over_tune_once")
        lines.append(
            f"| {k} | {v['geomean_r']:.4f} | {v['max_r']:.3f} | {v['within_5pct']:.1%} | "
            f"{v['mean_S_pct']:.2f} | {'—' if c is None else f'{c:.2f}'} |"
        )
    lines += [
        "",
        "## Per kernel: ×2 fold inside the training data vs the true evaluation score",
        "",
        f"Spearman correlation across kernels: {res['fold_vs_true_spearman']:.2f}.",
        "",
        "| kernel | fold | fold r | true geomean r | tune-once r | tune-once s | plan s | "
        "plan / tune-once | full training s | λ | cold points |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k in res["per_kernel"]:
        c = res["costs"][k["kernel"]]
        lines.append(
            f"| {k['kernel']} | {k['fold']} | {k['fold_r']:.3f} | {k['true_geomean_r']:.3f} | "
            f"{k['tune_once_geomean_r']:.3f} | {c['tune_once']:.1f} | {c['scaling']:.1f} | "
            f"{k['plan_ratio']:.2f} | {c['full_training_with_counters']:.1f} | "
            f"{k['lambda']:.0f} | {k['cold_points']} |"
        )
    lines += ["", "## Pairs where the scaling model loses to tune-once", ""]
    for x in res["losses_to_tune_once"]:
        lines.append(
            f"- **{x['kernel']} N={x['N']}**: r = {x['r_scaling']:.3f} vs {x['r_tune_once']:.3f}. "
            f"{x['why']}"
        )
    if not res["losses_to_tune_once"]:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/h200"))
    ap.add_argument("--cold", default=None, help="cold_timing.jsonl from benchmarks/bench_cold.py")
    args = ap.parse_args(argv)
    res = run(Path(args.out), Path(args.cold) if args.cold else None)
    for k, v in res["methods"].items():
        c = v.get("max_cost_over_tune_once")
        print(
            f"{k:32s} geomean {v['geomean_r']:.4f} max {v['max_r']:.3f} within5 "
            f"{v['within_5pct']:.3f} S% {v['mean_S_pct']:.2f} cost {c if c is None else round(c, 2)}"
        )
    print(f"fold vs true Spearman: {res['fold_vs_true_spearman']:.2f}")
    print(f"losses to tune-once: {len(res['losses_to_tune_once'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
