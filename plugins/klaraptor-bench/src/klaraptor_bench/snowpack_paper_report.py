"""The result of SNOWPACK under the paper's protocol (`bench.snowpack_paper`): the harder figures
from committed results, figures like the paper's Figs. 2-6, tables beside its Tables 3 and 4, and
snowpack_paper.json / .md (`klaraptor bench snowpack --protocol paper`).

The harder figures (`harder`) come from committed results: leave one benchmark out
(`snowpack.json`) and the 16 never-seen pattern kernels (`snowpack_new_kernels.json`), each with
the autotuner, OCC's worst block and the match rates added.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor_bench.snowpack_eval import recorded_corpus
from klaraptor_bench.snowpack_paper import (
    PAPER_K40,
    SCENARIOS,
    Group,
    corpus_groups,
    diff_vs,
    evaluate_paper,
    nelder_mead_tune,
    rows_of,
    summarize,
    time_of,
)

# ---------------------------------------------------------------------------------------------
# The harder figures, from committed results


def _autotune_pairs(
    pairs: Sequence[Mapping[str, Any]], groups: Mapping[tuple[str, int], Group]
) -> list[dict[str, Any]]:
    """`pairs` ({kernel, N, method: S%}) with OCC's worst block and the autotuner added (tuned at
    each kernel's smallest listed N, reused at its others). Every pair's `occ` must equal this
    module's OCC (the same definition): checked."""
    out = []
    by_kernel: dict[str, list[Mapping[str, Any]]] = {}
    for p in pairs:
        by_kernel.setdefault(p["kernel"], []).append(p)
    for k, mine in sorted(by_kernel.items()):
        mine = sorted(mine, key=lambda p: int(p["N"]))
        first = groups[(k, int(mine[0]["N"]))]
        at = nelder_mead_tune(first.blocks, first.ms)
        for p in mine:
            g = groups[(k, int(p["N"]))]
            if "occ" in p and not math.isclose(float(p["occ"]), g.occ_pct, rel_tol=1e-9):
                raise KlaraptorError(f"{k} N={p['N']}: OCC {p['occ']} in the result, {g.occ_pct}")
            rec = dict(p)
            rec["occ_worst"] = g.occ_worst_pct
            rec["autotuner"] = g.s_pct(time_of(at.block, g.blocks, g.ms))
            rec["tuned_here"] = g is first
            rec["autotuner_evaluations"] = at.evaluations if g is first else 0
            rec["autotuner_tune_ms"] = at.tune_ms if g is first else 0.0
            out.append(rec)
    return out


def harder_figures(results: Path) -> dict[str, Any]:
    """Leave one benchmark out (`snowpack.json`) and the 16 never-seen pattern kernels
    (`snowpack_new_kernels.json`) under `results`, with the autotuner, OCC's worst block and the
    match rates added; each with the provenance of the result it reads."""
    c, is_train, _ = recorded_corpus(patterns=True)
    groups = {(g.kernel, g.N): g for g in corpus_groups(c, is_train).values()}
    out: dict[str, Any] = {}
    lobo_path, new_path = results / "snowpack.json", results / "snowpack_new_kernels.json"
    if lobo_path.is_file():
        doc = json.loads(lobo_path.read_text())
        pairs = [
            {k: p[k] for k in ("kernel", "N", "snowpack", "svr", "hgb", "mlp", "occ")}
            for p in doc["unseen_kernels"]["per_pair"]
        ]
        protocol = (
            "leave one benchmark out (25 folds), evaluation sizes only (beyond every training "
            "size); svr: the searched SVR"
        )
        source = {"file": lobo_path.name, **doc["report"]}
        out["leave_one_benchmark_out"] = _block(pairs, groups, source, protocol)
    if new_path.is_file():
        doc = json.loads(new_path.read_text())
        pairs = [{k: p[k] for k in ("kernel", "N", "snowpack", "occ")} for p in doc["per_pair"]]
        protocol = (
            "the shipped model (trained on the 44 suite kernels) on the 16 pattern kernels "
            "written and timed after it, at their larger recorded sizes"
        )
        source = {"file": new_path.name, **doc["provenance"]}
        out["new_pattern_kernels"] = _block(pairs, groups, source, protocol)
    return out


# ---------------------------------------------------------------------------------------------
# Figures (the paper's Figs. 2-6), tables (beside Tables 3 and 4), the result file


FIG_METHODS = (
    ("snowpack", "SNOWPACK (shipped procedure)", "-"),
    ("svr_paper", "SVR (the paper's learner)", ":"),
    ("occ", "OCC (median max-occupancy block)", "--"),
    ("autotuner", "autotuner (Nelder-Mead, first size)", "-."),
)


def plot_paper(result: Mapping[str, Any], out: Path) -> list[Path]:
    """snowpack_paper_cdf.png (Fig. 2), snowpack_paper_hist.png (Figs. 3, 5) and
    snowpack_paper_vs_autotuner.png (Figs. 4, 6) under `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scen = [s for s in SCENARIOS if s in result]
    recs = {s: rows_of(result[s]["per_sample"]) for s in scen}
    title = {"unseen_kernels": "unseen kernels", "unseen_sizes": "unseen input sizes"}
    paths = []

    fig, axes = plt.subplots(1, len(scen), figsize=(5.5 * len(scen), 4.2), squeeze=False)
    for ax, s in zip(axes[0], scen):
        for m, label, style in FIG_METHODS:
            x = np.sort([r[m] for r in recs[s]])
            ax.step(x, np.arange(1, x.size + 1) / x.size, style, where="post", label=label)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("suboptimality S (%)")
        ax.set_ylabel("CDF over tested (kernel, size)")
        ax.set_title(f"{title[s]} ({len(recs[s])} samples, {result['protocol']['repeats']} splits)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("H200, the paper's protocol: CDF of S per method (cf. SNOWPACK Fig. 2)")
    fig.tight_layout()
    paths.append(out / "snowpack_paper_cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    def hist(ax: Any, values: np.ndarray, label: str, lo: float, hi: float) -> None:
        bins = np.linspace(lo, hi, 41)
        ax.hist(np.clip(values, lo, hi), bins=bins, label=label, alpha=0.6)

    for name, what, key, lo in (
        ("snowpack_paper_hist.png", "suboptimality S (%)", None, 0.0),
        ("snowpack_paper_vs_autotuner.png", "time relative to the autotuner's (%)", "diff", -50.0),
    ):
        fig, axes = plt.subplots(1, len(scen), figsize=(5.5 * len(scen), 4.0), squeeze=False)
        for ax, s in zip(axes[0], scen):
            hi = 100.0
            for m, label in (("snowpack", "SNOWPACK"), ("svr_paper", "SVR (paper)")):
                v = np.array([r[m] for r in recs[s]])
                if key == "diff":
                    v = diff_vs(v, np.array([r["autotuner"] for r in recs[s]]))
                over, under = int((v > hi).sum()), int((v < lo).sum())
                clipped = f"{over} above {hi:g} % in the last bin" + (
                    f", {under} below {lo:g} % in the first" if key == "diff" else ""
                )
                hist(ax, v, f"{label} ({clipped})", lo, hi)
            ax.set_xlabel(what)
            ax.set_ylabel("samples")
            ax.set_title(title[s])
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        figs = "Figs. 3, 5" if key is None else "Figs. 4, 6"
        fig.suptitle(f"H200, the paper's protocol (cf. SNOWPACK {figs})")
        fig.tight_layout()
        paths.append(out / name)
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def _pct(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.2f} %"


def _never_drawn(result: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """Which kernels no split of this scenario tested (every kernel appears in some scenario)."""
    every = {
        r["kernel"] for s in SCENARIOS if s in result for r in rows_of(result[s]["per_sample"])
    }
    tested = {r["kernel"] for r in rows_of(b["per_sample"])}
    missing = sorted(every - tested)
    if not missing:
        return "every kernel tested in some split"
    return "never held out: " + ", ".join(f"`{k}`" for k in missing)


def _learners(kept_as: Mapping[str, int]) -> str:
    names = {"mlp": "perceptron", "hgb": "trees", "svr": "SVR"}
    kept = sorted({k.split("/")[0] for k in kept_as})
    return " or ".join(names.get(k, k) for k in kept)


def _ms(x: Any) -> str:
    return "–" if x is None else f"{x:.2f} ms"


def markdown(result: Mapping[str, Any]) -> str:
    """Tables beside the paper's Tables 3 and 4, and the other figures, as Markdown."""
    prov = result.get("provenance", {})
    lines = [
        "# SNOWPACK under the paper's protocol (H200, recorded data)",
        "",
        f"`{prov.get('command', '')}` at {prov.get('commit', '?')[:12]}, {prov.get('date', '')}; "
        f"{result['protocol']['repeats']} seeded random 75:25 splits per scenario, no kernel "
        f"excluded, {result['protocol']['kernels']} kernels of the PolyBench and Rodinia-style "
        "suites. S = t(chosen) / t(best) − 1. The K40 columns are the paper's (Tables 3 and 4; "
        f"{PAPER_K40['setup']}); its SNOWPACK is an SVR, so its figures stand beside both "
        "SNOWPACK rows.",
        "",
    ]
    table_no = {"unseen_kernels": 3, "unseen_sizes": 4}
    for s in SCENARIOS:
        if s not in result:
            continue
        b, k40 = result[s], PAPER_K40[s]
        lines += [
            f"## {s.replace('_', ' ')} (beside Table {table_no[s]})",
            "",
            f"{b['samples']} tested (kernel, size) samples of {b['kernels']} kernels "
            f"(pooled over the repeats; {_never_drawn(result, b)}). Kept by the procedure: "
            + ", ".join(f"{k} ×{v}" for k, v in b["kept_as"].items())
            + ".",
            "",
            "| method | H200 mean S | H200 median S | H200 mean prediction time "
            "| K40 mean S | K40 median S | K40 mean prediction time |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| SNOWPACK, the shipped procedure ({_learners(b['kept_as'])}) | "
            f"**{_pct(b['mean_S_pct'])}** | "
            f"{_pct(b['median_S_pct'])} | {_ms(b.get('snowpack_predict_ms'))} | "
            f"{_pct(k40['snowpack']['mean_S_pct'])} | {_pct(k40['snowpack']['median_S_pct'])} | "
            f"{_ms(k40['snowpack']['predict_ms'])} |",
            f"| SNOWPACK with the paper's learner: SVR on log time, all features | "
            f"{_pct(b['svr_paper_mean_S_pct'])} | {_pct(b['svr_paper_median_S_pct'])} | "
            f"{_ms(b.get('svr_paper_predict_ms'))} | "
            + f"{_pct(k40['snowpack']['mean_S_pct'])} | {_pct(k40['snowpack']['median_S_pct'])} | "
            f"{_ms(k40['snowpack']['predict_ms'])} |",
            f"| OCC | {_pct(b['occ_mean_S_pct'])} | {_pct(b['occ_median_S_pct'])} | – | "
            f"{_pct(k40['occ']['mean_S_pct'])} | {_pct(k40['occ']['median_S_pct'])} | – |",
            f"| autotuner (Nelder-Mead at the first size) | {_pct(b['autotuner_mean_S_pct'])} | "
            f"{_pct(b['autotuner_median_S_pct'])} | {_ms(b.get('autotuner_tune_ms_mean'))} "
            f"kernel time, {b['autotuner_evaluations_mean']:.1f} runs | "
            f"{_pct(k40['autotuner']['mean_S_pct'])} | {_pct(k40['autotuner']['median_S_pct'])} "
            f"| {_ms(k40['autotuner']['predict_ms'])} |",
            "",
            "| figure | SNOWPACK | SVR (paper's) | K40 (paper) |",
            "| --- | ---: | ---: | ---: |",
            f"| matched or exceeded OCC | {_pct(b['matched_or_exceeded_occ_pct'])} | "
            f"{_pct(b['svr_paper_matched_or_exceeded_occ_pct'])} | "
            f"{_pct(k40['matched_or_exceeded_occ_pct'])} |",
            f"| matched or exceeded OCC's worst block | "
            f"{_pct(b['matched_or_exceeded_worst_occ_pct'])} | "
            f"{_pct(b['svr_paper_matched_or_exceeded_worst_occ_pct'])} | "
            f"{_pct(k40['matched_or_exceeded_worst_occ_pct'])} |",
            f"| matched or exceeded the autotuner | "
            f"{_pct(b['matched_or_exceeded_autotuner_pct'])} | "
            f"{_pct(b['svr_paper_matched_or_exceeded_autotuner_pct'])} | "
            f"{_pct(k40['matched_or_exceeded_autotuner_pct'])} |",
            f"| optimal-block match rate | {_pct(100 * b['match_rate'])} | "
            f"{_pct(100 * b['svr_paper_match_rate'])} | – |",
            f"| time relative to the autotuner's: mean / median (mean absolute) | "
            f"{_pct(b['diff_vs_autotuner_mean_pct'])} / {_pct(b['diff_vs_autotuner_median_pct'])}"
            f" ({_pct(b['abs_diff_vs_autotuner_mean_pct'])}) | "
            f"{_pct(b['svr_paper_diff_vs_autotuner_mean_pct'])} / "
            f"{_pct(b['svr_paper_diff_vs_autotuner_median_pct'])} "
            f"({_pct(b['svr_paper_abs_diff_vs_autotuner_mean_pct'])}) | "
            f"{_pct(k40['diff_vs_autotuner_mean_pct'])} / "
            f"{_pct(k40.get('diff_vs_autotuner_median_pct'))} (paper: 'mean difference') |",
            "",
            f"Other learners (best of the inner cross-validation, refitted): SVR as searched "
            f"{_pct(b['svr_mean_S_pct'])}, trees {_pct(b['hgb_mean_S_pct'])}, perceptron "
            f"{_pct(b['mlp_mean_S_pct'])}. OCC's worst block {_pct(b['occ_worst_mean_S_pct'])}. "
            f"The best block of the first size reused (a perfect autotuner) "
            f"{_pct(b['first_size_best_mean_S_pct'])}; the autotuner's match rate at all tested "
            f"sizes {_pct(100 * b['autotuner_match_rate'])}. Spread of the per-split means (sd): "
            f"SNOWPACK {b['repeat_spread']['snowpack_mean_S_pct_sd']:.2f}, OCC "
            f"{b['repeat_spread']['occ_mean_S_pct_sd']:.2f} points.",
            "",
        ]
        e = b["eval_sizes_only"]
        if e.get("samples"):
            lines += [
                f"At the evaluation sizes only ({e['samples']} samples, sizes beyond every size "
                f"`klaraptor bench snowpack` trains at): SNOWPACK {_pct(e['mean_S_pct'])} "
                f"(median {_pct(e['median_S_pct'])}), paper SVR {_pct(e['svr_paper_mean_S_pct'])}, "
                f"OCC {_pct(e['occ_mean_S_pct'])}, autotuner {_pct(e['autotuner_mean_S_pct'])}.",
                "",
            ]
        x = b["exclusion"]
        names = ", ".join(f"`{f['kernel']}`" for f in x["excluded"]) or "none"
        lines += [
            f"Sensitivity, the paper's exclusion rule ({x['rule']}): excluded {names}. Without "
            f"them: SNOWPACK {_pct(x.get('mean_S_pct'))} (median {_pct(x.get('median_S_pct'))}), "
            f"OCC {_pct(x.get('occ_mean_S_pct'))}, autotuner {_pct(x.get('autotuner_mean_S_pct'))}."
            " Not the headline.",
            "",
        ]
    hard = result.get("harder", {})
    if hard:
        lines += [
            "## The harder figures",
            "",
            "| scenario | samples | SNOWPACK mean / median S | OCC mean S | autotuner mean S "
            "| match rate | matched or exceeded OCC | source |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for name, b in hard.items():
            src = b["source"]
            lines.append(
                f"| {name.replace('_', ' ')} | {b['samples']} | {_pct(b['mean_S_pct'])} / "
                f"{_pct(b['median_S_pct'])} | {_pct(b['occ_mean_S_pct'])} | "
                f"{_pct(b['autotuner_mean_S_pct'])} | {_pct(100 * b['match_rate'])} | "
                f"{_pct(b['matched_or_exceeded_occ_pct'])} | `{src['file']}` at "
                f"{src['commit'][:7]} |"
            )
        lines.append("")
    lines += [
        "Definitions: OCC is the median time over the blocks of maximum theoretical occupancy; "
        "the autotuner is scipy's Nelder-Mead over the block-index space with the recorded "
        "times as its objective, points rounded to the nearest valid block, tuned at the "
        "kernel's first (smallest) tested size and reused at its others; its prediction time "
        "here is the kernel time of the blocks it runs (one launch each, a lower bound on its "
        "cost). SNOWPACK's prediction time is the wall time of one prediction of every candidate "
        "at a new size (features and regressor, median of 5 calls) on the 2-core CPU that ran "
        "the evaluation.",
        "",
    ]
    return "\n".join(lines)


def dumps(result: Mapping[str, Any]) -> str:
    """The result as JSON, indented, with each tested sample on one line (the rows are most of
    the file)."""
    rows = {s: result[s]["per_sample"]["rows"] for s in SCENARIOS if s in result}
    shallow = {
        k: ({**v, "per_sample": {**v["per_sample"], "rows": f"__rows_{k}__"}} if k in rows else v)
        for k, v in result.items()
    }
    text = json.dumps(shallow, indent=1, default=float)
    for s, r in rows.items():
        lines = ",\n".join("    " + json.dumps(x, default=float) for x in r)
        text = text.replace(f'"__rows_{s}__"', "[\n" + lines + "\n   ]")
    return text + "\n"


def write_paper(
    out: Path,
    *,
    console: Any | None = None,
    quick: bool = False,
    results: Path | None = None,
    command: str = "klaraptor bench snowpack --protocol paper",
) -> dict[str, Any]:
    """Run the paper's protocol and write snowpack_paper.json, snowpack_paper.md and the figures
    under `out`; the harder figures read `results` (default `out`)."""
    from klaraptor.core.provenance import stamp
    from klaraptor_bench.snowpack_eval import QUICK

    kw: dict[str, Any] = {"console": console}
    if quick:
        kw.update(repeats=2, kernel_settings=QUICK, size_settings=QUICK)
    result = evaluate_paper(**kw)
    result["harder"] = harder_figures(results or out)
    result["paper_k40"] = PAPER_K40
    result["provenance"] = stamp(command + (" --quick" if quick else ""))
    out.mkdir(parents=True, exist_ok=True)
    name = "snowpack_paper_quick" if quick else "snowpack_paper"
    (out / f"{name}.json").write_text(dumps(result))
    (out / f"{name}.md").write_text(markdown(result))
    if not quick:
        plot_paper(result, out)
    if console is not None:
        for s in SCENARIOS:
            b = result[s]
            console.print(
                f"{s}: SNOWPACK mean S {b['mean_S_pct']:.2f}% (median {b['median_S_pct']:.2f}%), "
                f"paper SVR {b['svr_paper_mean_S_pct']:.2f}%, OCC {b['occ_mean_S_pct']:.2f}%, "
                f"autotuner {b['autotuner_mean_S_pct']:.2f}%, match rate {b['match_rate']:.1%}"
            )
    return result


__all__ = ["dumps", "harder_figures", "markdown", "plot_paper", "write_paper"]


def _block(
    pairs: Sequence[Mapping[str, Any]],
    groups: Mapping[tuple[str, int], Group],
    source: dict[str, Any],
    protocol: str,
) -> dict[str, Any]:
    """The autotuner summary of `pairs`, with where it comes from and under what protocol."""
    block = summarize(_autotune_pairs(pairs, groups))
    block["source"] = source
    block["protocol"] = protocol
    return block
