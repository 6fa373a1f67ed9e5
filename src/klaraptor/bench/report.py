"""`klaraptor bench report`: the evaluation written as JSON, Markdown tables and plots.

Outputs (in --out, default benchmarks/results/h200/):
- summary.json: per method the geometric-mean and maximum slowdown r over all (kernel, N), the
  number of pairs, training/evaluation sizes, the noise band, build and exhaustive-search times,
  and provenance (GPU, dates, commands, commits of the data; command and commit of the report);
- pairs.json: every (kernel, N) with every method's choice, time, r, S% and Error%;
- table_6_1.md (like thesis Table 6.1) and table_6_2.md (like Table 6.2);
- best_worst_chosen.png (like thesis Figure 1.1) and predicted_vs_measured.png.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.bench.dataset import RecordedDataset, load_recorded
from klaraptor.bench.evaluate import KernelResult, evaluate_kernels, geomean, summarize

MODELS = ("auto", "mwp_cwp", "time_fit")  # "auto" is the tool's default: the headline


def _fmt_block(b: Any) -> str:
    return "—" if b is None else ",".join(str(v) for v in b[: 2 if b[2] == 1 else 3])


def evaluate_all(
    data: RecordedDataset, console: Any | None = None
) -> dict[str, list[KernelResult]]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            if console is not None:
                console.print(f"[bold]model {model}[/bold]")
            store = data.to_store(Path(tmp) / f"{model}.sqlite")
            out[model] = evaluate_kernels(store, data, model=model, console=console)
            store.close()
    return out


def build_cost(r: KernelResult, data: RecordedDataset, model: str) -> float:
    """Collection + fitting seconds the model needs (time_fit needs no counters)."""
    c = data.kernels[r.kernel].costs
    ncu = 0.0 if model == "time_fit" else float(c.get("train_ncu_s", math.nan))
    return float(c.get("train_time_s", math.nan)) + ncu + r.fit_s


def skipped_estimate(data: RecordedDataset, results: Sequence[KernelResult]) -> float:
    """Estimated seconds of the exhaustive search at the sizes the budget skipped (the budget
    rule's own estimate, from training times)."""
    total = 0.0
    for r in results:
        kd = data.kernels[r.kernel]
        decisions = {D.values()[0]: t for D, t in kd.truth(data.device_key).items()}
        total += sum(decisions[n].estimate_s for n in r.skipped if n in decisions)
    return total


def summary_json(
    data: RecordedDataset, results: dict[str, list[KernelResult]], command: str
) -> dict[str, Any]:
    from klaraptor import suite
    from klaraptor.provenance import stamp

    head = results["auto"]
    s = summarize(head)
    methods = dict(s["methods"])
    for model in MODELS[1:]:
        sm = summarize(results[model])["methods"]
        methods[f"{model}_model_only"] = sm["klaraptor"]
        methods[f"{model}_top4"] = sm["klaraptor_top4"]
    specs = {r.kernel: suite.get(r.kernel) for r in head}
    build = {m: float(np.nansum([build_cost(r, data, m) for r in results[m]])) for m in MODELS}
    truth = float(np.nansum([r.truth_s for r in head]))
    truth_all = truth + skipped_estimate(data, head)
    return {
        "gpu": data.provenance.get("gpu"),
        "pairs": s["pairs"],
        "kernels": s["kernels"],
        "headline_model": "auto (training-only choice between mwp_cwp and time_fit per kernel)",
        "methods": methods,
        "noise_band": s["noise_band"],
        "train_sizes": sorted({tuple(sp.meta["train_sizes"]) for sp in specs.values()}),
        "eval_sizes": sorted({tuple(sp.meta["eval_sizes"]) for sp in specs.values()}),
        "evaluated_sizes": {r.kernel: [p.N for p in r.pairs] for r in head},
        "skipped_sizes": {
            r.kernel: {str(n): why for n, why in r.skipped.items()} for r in head if r.skipped
        },
        "build_s": build,
        "exhaustive_search_s": truth,
        "build_over_exhaustive": {m: build[m] / truth for m in MODELS},
        "exhaustive_search_all_sizes_s_estimated": truth_all,
        "build_over_exhaustive_all_sizes": {m: build[m] / truth_all for m in MODELS},
        "data_provenance": data.provenance,
        "report": stamp(command),
    }


def table_6_1(results: Sequence[KernelResult]) -> str:
    lines = [
        "| Kernel | N | klaraptor config | klaraptor ms | optimal config | optimal ms | r | S % | Error % |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for p in r.pairs:
            lines.append(
                f"| {r.kernel.removeprefix('polybench.')} | {p.N} | {_fmt_block(p.choices['klaraptor'])} | "
                f"{p.times['klaraptor']:.4g} | {_fmt_block(p.best)} | {p.t_best:.4g} | {p.r('klaraptor'):.3f} | "
                f"{(p.r('klaraptor') - 1) * 100:.1f} | {p.error_pct('klaraptor'):.1f} |"
            )
    return "\n".join(lines)


def table_6_2(data: RecordedDataset, results: Sequence[KernelResult]) -> str:
    by_bench: dict[str, list[KernelResult]] = {}
    for r in results:
        by_bench.setdefault(r.benchmark, []).append(r)
    lines = [
        "| Benchmark | kernels | build s (collect + fit) | exhaustive s (evaluated N) | build / exhaustive | exhaustive s, all of 2048–8192 (skipped sizes estimated) | build / that | largest N | min ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for bench, rs in by_bench.items():
        b = sum(build_cost(r, data, "auto") for r in rs)
        t = sum(r.truth_s for r in rs)
        t_all = t + skipped_estimate(data, rs)
        nmax = max((p.N for r in rs for p in r.pairs), default=0)
        ps = [p for r in rs for p in r.pairs if p.N == nmax]
        lines.append(
            f"| {bench} | {len(rs)} | {b:.1f} | {t:.1f} | {b / t:.2f} | {t_all:.0f} | {b / t_all:.3f} | {nmax} | "
            f"{sum(p.t_best for p in ps):.4g} | {sum(p.t_worst for p in ps):.4g} |"
        )
    return "\n".join(lines)


def plot_best_worst(
    results: Sequence[KernelResult], path: Path, *, gpu: str = "H200", chosen: str = "auto"
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    for r in results:
        p = max(r.pairs, key=lambda q: q.N)
        rows.append((r.kernel.removeprefix("polybench."), p))
    fig, ax = plt.subplots(figsize=(13, 5))
    x = np.arange(len(rows))
    ax.bar(x, [p.t_worst for _, p in rows], color="#dddddd", label="worst block")
    ax.scatter(
        x,
        [p.t_best for _, p in rows],
        marker="_",
        s=300,
        color="black",
        label="best block (exhaustive)",
        zorder=3,
    )
    ax.scatter(
        x,
        [p.times["klaraptor"] for _, p in rows],
        marker="o",
        s=22,
        color="#d62728",
        label=f"klaraptor ({chosen})",
        zorder=4,
    )
    ax.scatter(
        x,
        [p.times["default"] for _, p in rows],
        marker="x",
        s=22,
        color="#1f77b4",
        label="default block",
        zorder=4,
    )
    ax.set_yscale("log")
    ax.set_ylabel("kernel time (ms, log)")
    ax.set_xticks(x, [f"{k}\nN={p.N}" for k, p in rows], rotation=90, fontsize=7)
    ax.set_title(f"{gpu}: best, worst and chosen block per kernel at its largest evaluated N")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_pred_vs_measured(results: dict[str, list[KernelResult]], path: Path, n: int = 6) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = sorted(
        (p for r in results["mwp_cwp"] for p in r.pairs), key=lambda p: -p.r("klaraptor")
    )[:n]
    tf = {(p.kernel, p.N): p for r in results["time_fit"] for p in r.pairs}
    fig, axes = plt.subplots(2, (n + 1) // 2, figsize=(4 * ((n + 1) // 2), 7.5))
    for ax, p in zip(axes.ravel(), pairs):
        for res, colour, label in (
            (p, "#1f77b4", "mwp_cwp"),
            (tf[(p.kernel, p.N)], "#2ca02c", "time_fit"),
        ):
            xs = [res.measured_ms[b] for b in res.measured_ms if b in res.predicted_ms]
            ys = [res.predicted_ms[b] for b in res.measured_ms if b in res.predicted_ms]
            ax.scatter(xs, ys, s=8, color=colour, alpha=0.7, label=label)
        lo = min(p.measured_ms.values())
        ax.axvline(lo, color="black", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(
            f"{p.kernel.removeprefix('polybench.')} N={p.N}\nmwp_cwp r={p.r('klaraptor'):.2f}",
            fontsize=9,
        )
        ax.set_xlabel("measured ms")
        ax.set_ylabel("predicted ms")
        ax.legend(fontsize=7)
    fig.suptitle("Predicted vs measured time per candidate block (the worst mwp_cwp cases)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from klaraptor.bench.evaluate import format_summary

    console = Console()
    data = load_recorded()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = evaluate_all(data, console)
    command = "klaraptor bench report --out " + str(args.out)
    summary = summary_json(data, results, command)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    pairs = {m: [p.to_dict() for r in results[m] for p in r.pairs] for m in MODELS}
    (out / "pairs.json").write_text(json.dumps(pairs, indent=1) + "\n")
    (out / "table_6_1.md").write_text(
        "# klaraptor (auto) vs exhaustive search on the H200 (like thesis Table 6.1)\n\n"
        "Times are CUDA-event medians in ms; r = t(chosen)/t(best), S = (r−1)·100 %, "
        "Error = (t − t_best)/(t_worst − t_best)·100 %.\n\n" + table_6_1(results["auto"]) + "\n"
    )
    (out / "table_6_2.md").write_text(
        "# Build time against exhaustive search (like thesis Table 6.2)\n\n"
        "Build = training collection (timing + counters) + fitting; exhaustive search = timing every "
        "candidate at the evaluated sizes; min/max = best and worst block at the largest evaluated N "
        "(summed over the benchmark's kernels).\n\n" + table_6_2(data, results["auto"]) + "\n"
    )
    plot_best_worst(results["auto"], out / "best_worst_chosen.png")
    plot_pred_vs_measured(results, out / "predicted_vs_measured.png")
    for m in MODELS:
        console.print(f"\n[bold]{m}[/bold]\n" + format_summary(results[m]))
    console.print(f"wrote {out}/summary.json, pairs.json, table_6_1.md, table_6_2.md and two plots")
    from klaraptor.bench.snowpack_eval import write_snowpack  # SNOWPACK (issue 12)

    write_snowpack(out, console=console)
    return 0


__all__ = ["evaluate_all", "geomean", "summary_json", "write_report"]
