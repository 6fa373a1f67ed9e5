"""`klaraptor bench report`: the evaluation written as JSON, Markdown tables and plots.

Both recorded suites (PolyBench: data/h200_suite.json.gz; Rodinia-style: data/h200_rodinia.json.gz)
are evaluated (`klaraptor_bench.evaluate`), reported separately and together. Outputs (in --out,
default benchmarks/results/h200/):
- summary.json: per suite and overall, per method geomean/max/median r, `within_5pct` (fraction
  of pairs with r ≤ 1.05), `mean_S_pct`, pairs within noise, wins/losses against tune-once and
  the online methods' k; a `cost` block per kernel (the default build's measurement seconds,
  tune-once's, their ratio; `max_build_over_tune_once`); the ×2 fold score beside the true score
  per kernel and their Spearman correlation; the targets of issue 10, met or not; provenance;
- pairs.json: every (kernel, N) with every method's choice, tried blocks, time, r, S% and Error%;
- table_6_1.md (klaraptor per pair, like thesis Table 6.1), table_6_2.md (costs per benchmark,
  like Table 6.2), table_methods.md (every method per suite), losses.md (every pair where
  klaraptor loses to tune-once or is far from the best, with the recorded data behind it),
  folds.md (the ×2 fold score beside the true score per kernel, and their rank correlation);
- best_worst_chosen.png (like thesis Figure 1.1) and predicted_vs_measured.png.

SAAKE joins the comparison with `--saake` as `saake_model_only` and `saake_top4` (slow: its
emulator is fitted per kernel); its Table 1,
search and bottlenecks come from `klaraptor bench saake` (`bench.saake_eval`).

Kernels are evaluated in parallel worker processes (`--jobs`); results do not depend on it.
Other methods join through `klaraptor_bench.evaluate.register_provider` (every later report
includes them) or `write_report(..., providers=[...])`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import ExtrapolationWarning
from klaraptor.suite.recorded import RecordedDataset
from klaraptor_bench import supplement as sup
from klaraptor_bench.evaluate import (
    OPT_IN_COMPARISONS,
    KernelResult,
    Provider,
    comparison_providers,
    default_providers,
    evaluate_kernel,
    geomean,
    kernel_costs,
    method_stats,
)

SUITES = ("polybench", "rodinia")
# Methods in the order the tables list them (others follow).
ORDER = (
    "klaraptor",
    "klaraptor_topk",
    "tune_once",
    "nearest_size",
    "scaling_full",
    "scaling_full_topk",
    "time_fit",
    "time_fit_topk",
    "mwp_cwp",
    "mwp_cwp_topk",
    "saake_model_only",
    "saake_top4",
    "default",
    "occ",
    "exhaustive",
)
TARGETS = {
    "model_geomean_max": 1.03,
    "model_max_r_max": 1.15,
    "model_within_5pct_min": 0.85,
    "model_below_tune_once_by": 0.005,
    "topk_geomean_max": 1.01,
    "build_over_tune_once_max": 1.5,
}

_DATA: dict[str, RecordedDataset] = {}


def _dataset(suite: str) -> RecordedDataset:
    """The suite's shipped dataset with the shipped supplement of issue 36 merged
    (`bench.supplement`: truth measured later, builds timed, N = 128 sweeps)."""
    if suite not in _DATA:
        _DATA[suite] = sup.load_suite(suite)
    return _DATA[suite]


def _providers(group: str, extra: Sequence[Provider]) -> list[Provider]:
    if group == "main":
        return [*default_providers(), *extra]
    return [p for name, p in comparison_providers().items() if name == group]


def _evaluate_task(
    suite: str, name: str, group: str, extra: Sequence[Provider] = ()
) -> KernelResult:
    """One kernel under one group of providers ("main": the default build, the baselines and
    any extra providers; else one comparison model)."""
    data = _dataset(suite)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # Every evaluation size lies beyond the training sizes by design: no news to report.
        warnings.simplefilter("ignore", ExtrapolationWarning)
        store = data.to_store(Path(tmp) / "k.sqlite", kernels=[name])
        try:
            return evaluate_kernel(
                store,
                data,
                name,
                providers=_providers(group, extra),
                cost=kernel_costs(data)[name],
                suite_name=suite,
            )
        finally:
            store.close()


def _merge(main: KernelResult, others: Sequence[KernelResult]) -> KernelResult:
    """The main group's result with the comparison groups' methods added to every pair."""
    for other in others:
        for p, q in zip(main.pairs, other.pairs):
            assert (p.kernel, p.N) == (q.kernel, q.N)
            p.choices.update(q.choices)
            p.times.update(q.times)
            p.tried.update(q.tried)
        main.costs.update(other.costs)
    return main


def evaluate_suites(
    suites: Sequence[str] = SUITES,
    *,
    compare: bool = True,
    opt_in: Sequence[str] = (),
    jobs: int | None = None,
    providers: Sequence[Provider] = (),
    console: Any | None = None,
) -> dict[str, list[KernelResult]]:
    """Every kernel of every suite, in `jobs` worker processes (default: the CPU count); each
    comparison model of a kernel is its own task, so the slow ones run side by side."""
    chosen = [g for g in comparison_providers() if g not in OPT_IN_COMPARISONS or g in opt_in]
    groups = ["main", *(chosen if compare else ())]
    tasks = [(s, n, g) for s in suites for n in sorted(_dataset(s).kernels) for g in groups]
    jobs = max(1, jobs if jobs is not None else os.cpu_count() or 1)
    # The slowest first, so the pool ends together (3D kernels have the most points).
    tasks.sort(key=lambda t: (-len(_dataset(t[0]).kernels[t[1]].time), t[2] == "main"))
    done: dict[tuple[str, str, str], KernelResult] = {}
    with _task_progress(console, len(tasks)) as advance:
        if jobs == 1:
            for t in tasks:
                done[t] = _evaluate_task(*t, providers)
                advance(t)
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
                futures = {pool.submit(_evaluate_task, *t, tuple(providers)): t for t in tasks}
                for f in as_completed(futures):
                    done[futures[f]] = f.result()
                    advance(futures[f])
    out: dict[str, list[KernelResult]] = {}
    for s in suites:
        out[s] = []
        for n in sorted(_dataset(s).kernels):
            r = _merge(done[(s, n, "main")], [done[(s, n, g)] for g in groups[1:]])
            _progress(console, r)
            out[s].append(r)
    return out


@contextlib.contextmanager
def _task_progress(console: Any | None, total: int) -> Iterator[Callable[[tuple[str, ...]], None]]:
    """A rich progress bar over the evaluation's tasks (kernel × method group), with the
    elapsed and remaining time; a no-op without a console."""
    if console is None:
        yield lambda task: None
        return
    from rich.progress import Progress

    from klaraptor.collect.progress import progress_columns

    columns = progress_columns("{task.description}", "left")
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("evaluating (kernel, method group) tasks", total=total)

        def advance(task: tuple[str, ...]) -> None:
            progress.update(bar, advance=1, description=f"evaluated {task[1]} ({task[2]})")

        yield advance


def _progress(console: Any | None, r: KernelResult) -> None:
    if console is not None:
        rs = ", ".join(f"N={p.N}: {p.r('klaraptor'):.3f}" for p in r.pairs)
        console.print(f"  {r.kernel:32s} {rs}")


# ---------------------------------------------------------------------------------------------
# summary.json


def _ordered(names: Sequence[str]) -> list[str]:
    return [m for m in ORDER if m in names] + [m for m in names if m not in ORDER]


def suite_summary(results: Sequence[KernelResult]) -> dict[str, Any]:
    pairs = [p for r in results for p in r.pairs]
    names = _ordered(list(dict.fromkeys(m for p in pairs for m in p.times)))
    noise = [p.noise for p in pairs if math.isfinite(p.noise)]
    return {
        "pairs": len(pairs),
        "kernels": len(results),
        "methods": {m: method_stats(pairs, m) for m in names},
        "noise_band": {
            "median": float(np.median(noise)) if noise else math.nan,
            "p90": float(np.percentile(noise, 90)) if noise else math.nan,
        },
    }


def cost_block(results: Sequence[KernelResult]) -> dict[str, Any]:
    """Per kernel: the default build's measurement seconds, tune-once's, their ratio, and the
    other methods' measurement seconds; `max_build_over_tune_once` over the kernels. No CPU wall
    times: the report regenerates byte for byte."""
    per: dict[str, Any] = {}
    for r in results:
        plan = r.info.get("plan") or {}
        build = float(plan.get("spent_s", r.costs.get("klaraptor", math.nan)))
        tune = float(plan.get("tune_once_s", r.costs.get("tune_once", math.nan)))
        per[r.kernel] = {
            "build_measurement_s": build,
            "tune_once_s": tune,
            "build_over_tune_once": build / tune,
            "plan_counts": plan.get("counts"),
            "methods_s": {m: v for m, v in r.costs.items() if not m.endswith("_topk")},
            "exhaustive_search_s": r.truth_s,
        }
    ratios = [v["build_over_tune_once"] for v in per.values()]
    return {
        "what": "seconds of device measurement (cost model over the recorded times of the "
        "points each method used; per-point overhead fitted on each kernel's recorded training "
        "phase); tune-once = one sweep of every candidate at the largest training size",
        "max_build_over_tune_once": float(max(ratios)) if ratios else math.nan,
        "total_build_s": float(sum(v["build_measurement_s"] for v in per.values())),
        "total_tune_once_s": float(sum(v["tune_once_s"] for v in per.values())),
        "kernels": per,
    }


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(spearmanr(a, b).statistic)


def fold_block(results: Sequence[KernelResult]) -> dict[str, Any]:
    """The ×2 fold score of the chosen model (training data only) beside its true geomean r."""
    rows = {}
    for r in results:
        if not r.pairs:
            continue
        rows[r.kernel] = {
            "model": r.info.get("model"),
            "fold_r": r.info.get("fold_r"),
            "true_geomean_r": geomean([p.r("klaraptor") for p in r.pairs]),
            "tune_once_geomean_r": geomean([p.r("tune_once") for p in r.pairs]),
        }
    ok = [v for v in rows.values() if v["fold_r"] is not None]
    return {
        "spearman": spearman([v["fold_r"] for v in ok], [v["true_geomean_r"] for v in ok]),
        "kernels": rows,
    }


def targets(s: dict[str, Any], costs: dict[str, Any]) -> dict[str, Any]:
    """Issue 10's targets on these results, each met or not."""
    m, k, to = s["methods"]["klaraptor"], s["methods"]["klaraptor_topk"], s["methods"]["tune_once"]
    t = TARGETS
    rows = {
        "model_geomean": (m["geomean_r"], f"<= {t['model_geomean_max']}"),
        "model_max_r": (m["max_r"], f"<= {t['model_max_r_max']}"),
        "model_within_5pct": (m["within_5pct"], f">= {t['model_within_5pct_min']}"),
        "model_below_tune_once_by": (
            to["geomean_r"] - m["geomean_r"],
            f">= {t['model_below_tune_once_by']}",
        ),
        "topk_geomean": (k["geomean_r"], f"<= {t['topk_geomean_max']}"),
        "build_over_tune_once_max": (
            costs["max_build_over_tune_once"],
            f"<= {t['build_over_tune_once_max']}",
        ),
    }
    out = {}
    for key, (v, rule) in rows.items():
        op, bound = rule.split()
        met = v <= float(bound) + 1e-12 if op == "<=" else v >= float(bound) - 1e-12
        out[key] = {"value": v, "target": rule, "met": bool(met)}
    return out


def summary_json(results: dict[str, list[KernelResult]], command: str) -> dict[str, Any]:
    from klaraptor.core.provenance import stamp

    everything = [r for rs in results.values() for r in rs]
    groups = {**results, "all": everything}
    out: dict[str, Any] = {
        "gpu": _dataset(next(iter(results))).provenance.get("gpu"),
        "headline": "klaraptor = the default build: model='auto' (the scaling model unless a x2 "
        "fold inside the training data says otherwise), budget 1.5 x tune-once; klaraptor_topk = "
        "its online refinement (adaptive k, tune-once's block always tried)",
        "suites": {},
    }
    for g, rs in groups.items():
        s = suite_summary(rs)
        costs = cost_block(rs)
        s["cost"] = costs
        s["folds"] = fold_block(rs)
        s["targets"] = targets(s, costs)
        s["table_6_2"] = table_6_2_rows(rs)
        s["models_chosen"] = {
            m: sum(r.info.get("model") == m for r in rs)
            for m in sorted({str(r.info.get("model")) for r in rs})
        }
        if g != "all":
            specs = [_spec(r.kernel) for r in rs]
            s["train_sizes"] = sorted({tuple(sp.meta["train_sizes"]) for sp in specs})
            s["eval_sizes"] = sorted({tuple(sp.meta["eval_sizes"]) for sp in specs})
            s["evaluated_sizes"] = {r.kernel: [p.N for p in r.pairs] for r in rs}
            s["skipped_sizes"] = {
                r.kernel: {str(n): why for n, why in r.skipped.items()} for r in rs if r.skipped
            }
            s["data_provenance"] = _dataset(g).provenance
        out["suites"][g] = s
    out["report"] = stamp(command)
    return out


def _spec(name: str) -> Any:
    from klaraptor import suite

    return suite.get(name)


# ---------------------------------------------------------------------------------------------
# Tables


def _fmt_block(b: Any) -> str:
    return "—" if b is None else ",".join(str(v) for v in b[: 2 if b[2] == 1 else 3])


def _short(kernel: str) -> str:
    return kernel.removeprefix("polybench.").removeprefix("rodinia.")


# Table 6.1's methods after klaraptor's own columns: (method, header).
TABLE_6_1_METHODS = (
    ("klaraptor_topk", "online top-k r (k)"),
    ("tune_once", "tune-once r"),
    ("mwp_cwp", "mwp_cwp r (faithful)"),
    ("default", "default r"),
    ("occ", "OCC r"),
)
ESTIMATE_MARK = "*"


def _method_r(p: Any, m: str) -> str:
    if m not in p.times:
        return "—"
    mark = ESTIMATE_MARK if m in p.info.get("estimated_methods", ()) else ""
    k = f" ({len(p.tried.get(m, []))})" if m.endswith("_topk") else ""
    return f"{p.r(m):.3f}{mark}{k}"


def table_6_1(results: Sequence[KernelResult]) -> str:
    """klaraptor per pair against exhaustive search, with every other method's r beside it; a
    `*` marks a time (or, on Error %, the worst time) that is a race's first estimate."""
    heads = " | ".join(h for _, h in TABLE_6_1_METHODS)
    lines = [
        "| Kernel | N | regime | klaraptor config | klaraptor ms | optimal config | optimal ms | r "
        f"| S % | Error % | {heads} |",
        "|---|---:|---|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(TABLE_6_1_METHODS),
    ]
    for r in results:
        for p in r.pairs:
            est = ESTIMATE_MARK if "klaraptor" in p.info.get("estimated_methods", ()) else ""
            worst = ESTIMATE_MARK if p.info.get("worst_estimated") else ""
            others = " | ".join(_method_r(p, m) for m, _ in TABLE_6_1_METHODS)
            lines.append(
                f"| {_short(r.kernel)} | {p.N} | {p.info.get('regime', '')} | "
                f"{_fmt_block(p.choices['klaraptor'])} | {p.times['klaraptor']:.4g}{est} | "
                f"{_fmt_block(p.best)} | {p.t_best:.4g} | {p.r('klaraptor'):.3f}{est} | "
                f"{(p.r('klaraptor') - 1) * 100:.1f} | {p.error_pct('klaraptor'):.1f}{worst} | "
                f"{others} |"
            )
    return "\n".join(lines)


def table_6_2_rows(results: Sequence[KernelResult]) -> list[dict[str, Any]]:
    """Per benchmark: measured build walls (device), the plan's and tune-once's cost, the
    exhaustive search summed over the powers of two from 128 to the largest evaluation size
    (thesis Table 6.2), and the fastest and slowest candidate at that size for the main kernel
    (the one with the slowest best time there)."""
    from klaraptor_bench.evaluate import kernel_costs

    by_bench: dict[str, list[KernelResult]] = {}
    for r in results:
        by_bench.setdefault(r.benchmark, []).append(r)
    rows = []
    for bench, rs in by_bench.items():
        c = cost_block(rs)
        walls, ex, ex_missing, top = [], 0.0, set(), None
        for r in rs:
            data = _dataset(r.suite or r.kernel.split(".")[0])
            kd = data.kernels[r.kernel]
            spec = _spec(r.kernel)
            hi = max(int(n) for n in spec.meta["eval_sizes"])
            e = sup.exhaustive_sum(
                kd, kernel_costs(data)[r.kernel], sup.pow2_sizes(sup.SWEEP_N, hi)
            )
            ex += e["seconds"]
            ex_missing |= set(e["missing"])
            if "build_wall_s" in kd.costs:
                walls.append(float(kd.costs["build_wall_s"]))
            at = {b: t[0] for (D, b), t in kd.times().items() if D.values()[0] == hi}
            if at and (top is None or min(at.values()) > top["min_ms"]):
                est = {
                    tuple(int(v) for v in x[1:4])
                    for x in (kd.summary.get("supplement") or {}).get("estimated", [])
                    if int(x[0]) == hi
                }
                worst = max(at, key=at.__getitem__)
                top = {
                    "kernel": r.kernel,
                    "N": hi,
                    "min_ms": min(at.values()),
                    "max_ms": at[worst],
                    "max_estimated": worst in est,
                }
        rows.append(
            {
                "benchmark": bench,
                "kernels": len(rs),
                "build_wall_s": sum(walls) if len(walls) == len(rs) else None,
                "builds_measured": len(walls),
                "build_plan_s": c["total_build_s"],
                "tune_once_s": c["total_tune_once_s"],
                "max_build_over_tune_once": c["max_build_over_tune_once"],
                "exhaustive_s": ex if not ex_missing else None,
                "exhaustive_missing_sizes": sorted(ex_missing),
                "main": top,
            }
        )
    return rows


def table_6_2(results: Sequence[KernelResult]) -> str:
    lines = [
        "| Benchmark | kernels | build s (measured on the device) | build measurement s (plan) | "
        "tune-once s | build / tune-once (max over kernels) | exhaustive s (Σ powers of two "
        "128 … N) | build / exhaustive | main kernel at N | min ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in table_6_2_rows(results):
        wall = row["build_wall_s"]
        ex = row["exhaustive_s"]
        wall_s = (
            f"{wall:.1f}"
            if wall is not None
            else f"— ({row['builds_measured']} of {row['kernels']})"
        )
        gaps = row["exhaustive_missing_sizes"]
        listed = ", ".join(map(str, gaps)) if len(gaps) <= 4 else f"{len(gaps)} sizes"
        ex_s = f"{ex:.1f}" if ex is not None else f"— (no sweep at N = {listed})"
        ratio = f"{wall / ex:.3f}" if wall is not None and ex else "—"
        m = row["main"] or {}
        main = f"{_short(m['kernel'])} at {m['N']}" if m else "—"
        mx = f"{m['max_ms']:.4g}{ESTIMATE_MARK if m.get('max_estimated') else ''}" if m else "—"
        mn = f"{m['min_ms']:.4g}" if m else "—"
        lines.append(
            f"| {row['benchmark']} | {row['kernels']} | {wall_s} | {row['build_plan_s']:.1f} | "
            f"{row['tune_once_s']:.1f} | {row['max_build_over_tune_once']:.2f} | {ex_s} | "
            f"{ratio} | {main} | {mn} | {mx} |"
        )
    return "\n".join(lines)


def table_methods(summary: dict[str, Any]) -> str:
    lines = []
    for g, s in summary["suites"].items():
        lines += [
            f"## {g}: {s['pairs']} pairs, {s['kernels']} kernels",
            "",
            "| method | geomean r | max r | within 5 % | mean S % | within noise | wins / losses "
            "vs tune-once | mean k |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m, v in s["methods"].items():
            if not v.get("pairs"):
                continue
            wl = (
                f"{v['wins_vs_tune_once']} / {v['losses_vs_tune_once']}"
                if "wins_vs_tune_once" in v
                else ""
            )
            k = f"{v['mean_k']:.1f}" if "mean_k" in v else ""
            lines.append(
                f"| {m} | {v['geomean_r']:.4f} | {v['max_r']:.3f} | {v['within_5pct']:.1%} | "
                f"{v['mean_S_pct']:.2f} | {v['within_noise']}/{v['pairs']} | {wl} | {k} |"
            )
        lines.append("")
    return "\n".join(lines)


def table_folds(summary: dict[str, Any]) -> str:
    """Per kernel: the ×2 fold score of the deployed model (training data only) beside its true
    geomean r at the evaluation sizes, and their Spearman correlation across kernels."""
    lines = []
    for g, s in summary["suites"].items():
        if g == "all":
            continue
        f = s["folds"]
        lines += [
            f"## {g}: Spearman ρ(fold r, true r) = {f['spearman']:.3f} over "
            f"{sum(v['fold_r'] is not None for v in f['kernels'].values())} kernels",
            "",
            "| kernel | model | fold r (×2, training data) | true geomean r | tune-once geomean r |",
            "|---|---|---:|---:|---:|",
        ]
        for k, v in f["kernels"].items():
            fold = "—" if v["fold_r"] is None else f"{v['fold_r']:.3f}"
            lines.append(
                f"| {_short(k)} | {v['model']} | {fold} | {v['true_geomean_r']:.3f} | "
                f"{v['tune_once_geomean_r']:.3f} |"
            )
        lines.append("")
    rho = summary["suites"]["all"]["folds"]["spearman"]
    lines.append(f"Both suites together: Spearman ρ = {rho:.3f}.")
    return "\n".join(lines) + "\n"


def _anchor_ranks(suite: str, kernel: str) -> dict[str, Any]:
    """Hot and cold medians at the largest training size, the argument bytes and the DRAM bytes
    the counters saw there (median over the profiled blocks), from the recorded dataset."""
    data = _dataset(suite)
    kd = data.kernels[kernel]
    L = max(int(n) for n in _spec(kernel).meta["train_sizes"])
    hot = {b: t[0] for (D, b), t in kd.times().items() if D.values() == (L,)}
    cold = {b: t[0] for (D, b), t in kd.cold_times().items() if D.values() == (L,)}
    dram = [
        r[-1]["dram__bytes_read.sum"] + r[-1]["dram__bytes_write.sum"]
        for r in kd.ncu
        if r[0] == L and "dram__bytes_read.sum" in r[-1]
    ]
    args = dict(kd.facts(data.device_key).arg_bytes)
    return {
        "L": L,
        "hot": hot,
        "cold": cold,
        "dram_L": float(np.median(dram)) if dram else math.nan,
        "args_L": float(args.get((L,), math.nan)),
        "l2": float(data.profile().l2_bytes),
    }


def _rank(times: dict[Any, float], b: Any) -> str:
    if b not in times:
        return "not timed"
    order = sorted(times, key=times.__getitem__)
    return f"rank {order.index(b) + 1} ({times[b] / times[order[0]]:.3f}× the fastest)"


def losses_md(results: dict[str, list[KernelResult]], big: float = 1.10) -> str:
    """Every pair where klaraptor loses to tune-once (outside the pair's noise band), and every
    pair with r > `big`, with the recorded data behind the choice."""
    lines = [
        "# Where klaraptor (model only) loses to tune-once, or is far from the best",
        "",
        "Generated by `klaraptor bench report` from the recorded data. For each pair: the regime "
        "the model put N in, and where the chosen block, tune-once's block and the best block at "
        "N ranked among the hot and the L2-flushed (cold) times measured at the largest training "
        "size L; the argument bytes at L against the DRAM bytes Nsight Compute saw there (caches "
        "flushed) say whether the kernel touches all of its arguments.",
        "",
    ]
    for suite, rs in results.items():
        for r in rs:
            for p in r.pairs:
                rk, rt = p.r("klaraptor"), p.r("tune_once")
                loss = rk > rt * (1 + max(p.noise, 0.0))
                if not (loss or rk > big):
                    continue
                a = _anchor_ranks(suite, r.kernel)
                ch, to = p.choices["klaraptor"], p.choices["tune_once"]
                touched = (
                    ""
                    if not math.isfinite(a["dram_L"])
                    else f"; DRAM bytes at L {a['dram_L'] / 1e6:.2f} MB of {a['args_L'] / 1e6:.1f} "
                    f"MB of arguments"
                )
                lines.append(
                    f"- **{r.kernel} N={p.N}** ({'loss' if loss else 'far'}; "
                    f"{p.info.get('regime', '?')} regime): r = {rk:.3f} against tune-once's "
                    f"{rt:.3f} (noise band {p.noise:.1%}), online top-k {p.r('klaraptor_topk'):.3f} "
                    f"with {len(p.tried.get('klaraptor_topk', []))} blocks. Chose "
                    f"{_fmt_block(ch)}: hot {_rank(a['hot'], ch)}, cold {_rank(a['cold'], ch)} at "
                    f"L={a['L']}. Tune-once {_fmt_block(to)}: cold {_rank(a['cold'], to)}. Best "
                    f"at N: {_fmt_block(p.best)}: hot {_rank(a['hot'], p.best)}, cold "
                    f"{_rank(a['cold'], p.best)}{touched}."
                )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Plots


def plot_best_worst(
    results: Mapping[str, Sequence[KernelResult]] | Sequence[KernelResult],
    path: Path,
    *,
    gpu: str = "H200",
) -> None:
    """Best, worst and chosen block per kernel at its largest evaluated N: one panel per suite
    (`results` by suite) or one panel (a plain list, as `klaraptor demo` gives). Marks every method
    of klaraptor (model only), tune-once and the default block that the pairs carry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = dict(results) if isinstance(results, Mapping) else {"": list(results)}
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, 4.6 * len(groups)), squeeze=False)
    for ax, (suite, rs) in zip(axes[:, 0], groups.items()):
        rows = [(_short(r.kernel), max(r.pairs, key=lambda q: q.N)) for r in rs if r.pairs]
        x = np.arange(len(rows))
        ax.bar(x, [p.t_worst for _, p in rows], color="#dddddd", label="worst block")
        ax.scatter(x, [p.t_best for _, p in rows], marker="_", s=300, color="black", zorder=3,
                   label="best block (exhaustive)")  # fmt: skip
        for m, mark, col, lab in (
            ("klaraptor", "o", "#d62728", "klaraptor (model only)"),
            ("tune_once", "x", "#1f77b4", "tune-once"),
            ("default", "+", "#2ca02c", "default block"),
        ):
            if not rows or any(m not in p.times for _, p in rows):
                continue
            ax.scatter(x, [p.times[m] for _, p in rows], marker=mark, s=22, color=col, zorder=4,
                       label=lab)  # fmt: skip
        ax.set_yscale("log")
        ax.set_ylabel("kernel time (ms, log)")
        ax.set_xticks(x, [f"{k}\nN={p.N}" for k, p in rows], rotation=90, fontsize=7)
        where = f"{gpu}, {suite}" if suite else gpu
        ax.set_title(f"{where}: best, worst and chosen block at the largest evaluated N")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_pred_vs_measured(results: dict[str, list[KernelResult]], path: Path, n: int = 6) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = sorted(
        (p for rs in results.values() for r in rs for p in r.pairs if p.predicted_ms),
        key=lambda p: (-p.r("klaraptor"), p.kernel, p.N),
    )[:n]
    cols = (n + 1) // 2
    fig, axes = plt.subplots(2, cols, figsize=(4 * cols, 7.5))
    for ax, p in zip(axes.ravel(), pairs):
        bs = [b for b in p.measured_ms if np.isfinite(p.predicted_ms.get(b, np.nan))]
        ax.scatter([p.measured_ms[b] for b in bs], [p.predicted_ms[b] for b in bs], s=8,
                   color="#d62728", alpha=0.7)  # fmt: skip
        ax.axvline(p.t_best, color="black", lw=0.8, ls=":")
        ax.axvline(p.times["klaraptor"], color="#d62728", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(
            f"{_short(p.kernel)} N={p.N} ({p.info.get('regime', '')})\nr={p.r('klaraptor'):.3f}",
            fontsize=9,
        )
        ax.set_xlabel("measured ms")
        ax.set_ylabel("predicted ms")
    fig.suptitle("klaraptor: predicted vs measured per candidate (its worst pairs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def write_report(args: argparse.Namespace, providers: Sequence[Provider] = ()) -> int:
    from rich.console import Console

    console = Console()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compare = not getattr(args, "no_compare", False)
    opt_in = ("saake",) if getattr(args, "saake", False) else ()
    results = evaluate_suites(
        compare=compare,
        opt_in=opt_in,
        jobs=getattr(args, "jobs", None),
        providers=providers,
        console=console,
    )
    command = "klaraptor bench report --recorded --out " + str(args.out)
    if not compare:
        command += " --no-compare"
    if opt_in:
        command += " --saake"
    summary = summary_json(results, command)
    kept = sup.keep_foreign_blocks(summary, out / "summary.json")
    (out / "summary.json").write_text(json.dumps(kept, indent=1, default=str) + "\n")
    pairs = {s: [p.to_dict() for r in rs for p in r.pairs] for s, rs in results.items()}
    (out / "pairs.json").write_text(json.dumps(pairs, indent=1, default=str) + "\n")
    everything = [r for rs in results.values() for r in rs]
    (out / "table_6_1.md").write_text(
        "# klaraptor vs exhaustive search on the H200 (like thesis Table 6.1)\n\n"
        "Default build (model `auto`, budget 1.5 × tune-once). Times are CUDA-event medians in ms; "
        "r = t(chosen)/t(best), S = (r−1)·100 %, Error = (t − t_best)/(t_worst − t_best)·100 %; "
        "regime: whether the model treats N as beyond the L2 (cold) or not (hot). The other "
        "methods' r: online top-k (blocks tried), tune-once, the faithful MWP-CWP model on the full "
        "training data, the benchmark's default block and OCC (median over the blocks of maximum "
        f"occupancy). {ESTIMATE_MARK}: the time is a race's first estimate, not a full "
        "measurement (pairs measured by scripts/device_table61.py; on Error %, the worst block's "
        "time).\n\n" + table_6_1(everything) + "\n"
    )
    (out / "table_6_2.md").write_text(
        "# Measurement cost against tune-once and exhaustive search (like thesis Table 6.2)\n\n"
        "Build s (measured) = the wall of `klaraptor.build(spec, train_sizes)` as a user calls "
        "it (model auto, budget 1.5 × tune-once, a fresh store), timed on the device by "
        "scripts/device_table61.py, summed over the benchmark's kernels. Build measurement s "
        "(plan) and tune-once s: the cost model over the recorded times of the points each used. "
        "Exhaustive s: as the thesis, a search over every candidate at every power of two from "
        "128 to the largest evaluation size (8192; 3DCONV 512), priced by the same cost model "
        "over the recorded times of every candidate there. Min and max ms: the fastest and "
        f"slowest candidate at that size for the main kernel (the slowest best time); "
        f"{ESTIMATE_MARK}: a race's first estimate.\n\n" + table_6_2(everything) + "\n"
    )
    (out / "table_methods.md").write_text(
        "# Every method per suite (H200, recorded data)\n\n" + table_methods(summary)
    )
    (out / "losses.md").write_text(losses_md(results))
    (out / "folds.md").write_text(
        "# The ×2 fold score beside the true score, per kernel (H200, recorded data)\n\n"
        "The fold fits the deployed model on the training sizes ≤ L/2 and scores its choice at the "
        "largest training size L (hot, unpadded candidates; `klaraptor.assemble.model_selection`); "
        "the true score is the geomean r of the default build over the kernel's evaluation "
        "sizes.\n\n" + table_folds(summary)
    )
    plot_best_worst(results, out / "best_worst_chosen.png")
    plot_pred_vs_measured(results, out / "predicted_vs_measured.png")
    for g, s in summary["suites"].items():
        m = s["methods"]
        console.print(
            f"[bold]{g}[/bold]: {s['pairs']} pairs; klaraptor {m['klaraptor']['geomean_r']:.4f} "
            f"(max {m['klaraptor']['max_r']:.3f}, within 5 % {m['klaraptor']['within_5pct']:.1%}), "
            f"top-k {m['klaraptor_topk']['geomean_r']:.4f}, tune-once "
            f"{m['tune_once']['geomean_r']:.4f}; build/tune-once max "
            f"{s['cost']['max_build_over_tune_once']:.2f}"
        )
    console.print(
        f"wrote {out}/summary.json, pairs.json, losses.md, folds.md, three tables and two plots"
    )
    # SNOWPACK (issue 12) beside the default build's choices just scored.
    from klaraptor_bench.snowpack_eval import write_snowpack

    auto = {(p.kernel, p.N): (p.r("klaraptor") - 1) * 100 for r in everything for p in r.pairs}
    write_snowpack(out, console=console, auto=auto, command=command)
    return 0


__all__ = ["evaluate_suites", "summary_json", "write_report"]
