"""The thesis's configuration-level outlier fence (§5.4) and the faithful `mwp_cwp` model, on the
recorded H200 suites: the model built with and without the fence, side by side.

    python experiments/mwp_cwp_fence.py [OUTDIR] [--kernels K1,K2,...]

For every kernel of both recorded suites, `mwp_cwp` is built from every recorded training point
(as `klaraptor bench report` builds its `mwp_cwp` comparison: no budget) twice: as shipped, and
with the thesis's configuration-level fence (`mwp_cwp_fenced`, i.e.
`MwpCwpModel(config_fence=True)`, `klaraptor.models.mwp_cwp_fence`); each chooses a block
at every evaluation size with ground truth, scored against the recorded exhaustive search
(S = t / t_best − 1). The unfenced column must reproduce the committed report's `mwp_cwp` (checked
against `benchmarks/results/h200/pairs.json` pair by pair: any difference is an error). Writes
OUTDIR/mwp_cwp_fence.json and OUTDIR/mwp_cwp_fence.md (default experiments/results/h200).
A report: nothing in the default build changes with it.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.errors import ExtrapolationWarning
from klaraptor.core.provenance import stamp
from klaraptor.models.mwp_cwp import FENCED_NAME
from klaraptor.suite.recorded import load_recorded, recorded_path
from klaraptor_bench.evaluate import (
    KernelContext,
    MethodResult,
    evaluate_kernel,
    geomean,
    kernel_costs,
    klaraptor_provider,
)

ROOT = Path(__file__).resolve().parent
# The product evaluation's committed figures (`klaraptor bench report`), compared pair by pair.
REPORTED = ROOT.parent / "benchmarks" / "results" / "h200"
SUITES = ("polybench", "rodinia")
FENCED = FENCED_NAME  # the registered model MwpCwpModel(config_fence=True)


FENCES: dict[str, dict[str, Any]] = {}  # kernel -> the fenced build's account of the fence


def fenced_provider(ctx: KernelContext) -> list[MethodResult]:
    """The fenced model built as the report builds `mwp_cwp` (every training point, no budget),
    its choice at every evaluated N; the fence's account is kept in FENCES."""
    from klaraptor.assemble import build

    kern = build(
        ctx.spec,
        [{"N": n} for n in ctx.train],
        model=FENCED,
        budget=None,
        store=ctx.store,
        device=ctx.device,
        collect_data=False,
        cost=ctx.cost,
        progress=False,
    )
    FENCES[ctx.name] = dict(kern.helper.info["fits"]["configuration_fence"])
    chosen = {N: [kern.select(N).block] for N in ctx.evals}
    kern.selector.flush()
    return [MethodResult(FENCED, chosen)]


def stats(s: list[float]) -> dict[str, Any]:
    a = np.asarray(s, dtype=np.float64)
    return {
        "pairs": int(a.size),
        "mean_S_pct": float(a.mean()),
        "median_S_pct": float(np.median(a)),
        "geomean_r": geomean(1.0 + a / 100.0),
        "max_S_pct": float(a.max()),
        "within_5pct": float(np.mean(a <= 5.0)),
    }


def main(argv: list[str]) -> int:
    kernels = None
    args = list(argv)
    if "--kernels" in args:
        i = args.index("--kernels")
        kernels = set(args[i + 1].split(","))
        del args[i : i + 2]
    out = Path(args[0]) if args else ROOT / "results" / "h200"
    committed = json.loads((REPORTED / "pairs.json").read_text())
    reported = {
        (p["kernel"], int(p["N"])): p["methods"]["mwp_cwp"]["S_pct"]
        for rows in committed.values()
        for p in rows
        if "mwp_cwp" in p.get("methods", {})
    }
    providers = [klaraptor_provider("mwp_cwp", budget=None, name="mwp_cwp"), fenced_provider]
    pairs: list[dict[str, Any]] = []
    per_kernel: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for suite in SUITES:
        data = load_recorded(recorded_path(suite))
        costs = kernel_costs(data)
        for name in sorted(data.kernels):
            if kernels is not None and name not in kernels:
                continue
            with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore", ExtrapolationWarning)
                store = data.to_store(Path(tmp) / "k.sqlite", kernels=[name])
                try:
                    res = evaluate_kernel(
                        store, data, name, providers=providers, cost=costs[name], suite_name=suite
                    )
                finally:
                    store.close()
            for p in res.pairs:
                row = {
                    "suite": suite,
                    "kernel": name,
                    "N": p.N,
                    "mwp_cwp": (p.r("mwp_cwp") - 1) * 100,
                    FENCED: (p.r(FENCED) - 1) * 100,
                    "mwp_cwp_block": list(p.choices["mwp_cwp"] or ()),
                    "fenced_block": list(p.choices[FENCED] or ()),
                }
                want = reported.get((name, p.N))
                if want is not None and not math.isclose(row["mwp_cwp"], want, abs_tol=1e-9):
                    raise SystemExit(
                        f"{name} N={p.N}: mwp_cwp S {row['mwp_cwp']} differs from the committed "
                        f"report's {want}: the unfenced model is not the one reported"
                    )
                row["reproduces_report"] = want is not None
                pairs.append(row)
            per_kernel.append({"kernel": name, "suite": suite, **FENCES.pop(name)})
            mine = [r for r in pairs if r["kernel"] == name]
            print(
                f"{name:32s} mwp_cwp {np.mean([r['mwp_cwp'] for r in mine]):8.2f}%  fenced "
                f"{np.mean([r[FENCED] for r in mine]):8.2f}%  removed "
                f"{per_kernel[-1].get('points_removed', '?')} of "
                f"{per_kernel[-1].get('points', '?')} points",
                flush=True,
            )
    summary: dict[str, Any] = {}
    for scope in (*SUITES, "all"):
        rows = [r for r in pairs if scope in ("all", r["suite"])]
        if not rows:
            continue
        a = np.array([r["mwp_cwp"] for r in rows])
        b = np.array([r[FENCED] for r in rows])
        d = b - a
        summary[scope] = {
            "mwp_cwp": stats(list(a)),
            FENCED: stats(list(b)),
            "paired_diff_mean_pct": float(d.mean()),
            "paired_diff_se_pct": float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0,
            "better_pairs": int((d < -1e-9).sum()),
            "worse_pairs": int((d > 1e-9).sum()),
            "same_block_pairs": int(sum(r["mwp_cwp_block"] == r["fenced_block"] for r in rows)),
        }
    result = {
        "summary": summary,
        "per_kernel": per_kernel,
        "pairs": pairs,
        "reproduces_report_pairs": int(sum(r["reproduces_report"] for r in pairs)),
        "wall_s": time.perf_counter() - t0,
        "provenance": stamp(" ".join(["python", "experiments/mwp_cwp_fence.py", *argv])),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "mwp_cwp_fence.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "mwp_cwp_fence.md").write_text(markdown(result))
    for scope, s in summary.items():
        print(
            f"{scope:10s} mwp_cwp mean S {s['mwp_cwp']['mean_S_pct']:.2f}% -> fenced "
            f"{s[FENCED]['mean_S_pct']:.2f}% ({s['paired_diff_mean_pct']:+.2f} ± "
            f"{s['paired_diff_se_pct']:.2f} points; {s['better_pairs']} pairs better, "
            f"{s['worse_pairs']} worse)"
        )
    return 0


def markdown(result: dict[str, Any]) -> str:
    prov = result["provenance"]
    lines = [
        "# The thesis's configuration-level outlier fence and `mwp_cwp` (H200, recorded data)",
        "",
        f"`{prov['command']}` at {prov['commit'][:12]}, {prov['date']}. `mwp_cwp` built from "
        "every recorded training point, with and without the fence of thesis §5.4 (per training "
        "size, points whose MWP-CWP estimated cycles exceed Q3 + 1.5 IQR over the "
        "configurations are removed before fitting); S = t(chosen) / t(best) − 1 at the "
        f"evaluation sizes. The unfenced column reproduces `pairs.json` "
        f"({result['reproduces_report_pairs']} pairs checked).",
        "",
        "| scope | pairs | mwp_cwp mean S | fenced mean S | mwp_cwp median S | fenced median S "
        "| paired difference | better / worse pairs |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for scope, s in result["summary"].items():
        a, b = s["mwp_cwp"], s[FENCED]
        lines.append(
            f"| {scope} | {a['pairs']} | {a['mean_S_pct']:.2f} % | {b['mean_S_pct']:.2f} % | "
            f"{a['median_S_pct']:.2f} % | {b['median_S_pct']:.2f} % | "
            f"{s['paired_diff_mean_pct']:+.2f} ± {s['paired_diff_se_pct']:.2f} points | "
            f"{s['better_pairs']} / {s['worse_pairs']} |"
        )
    lines += [
        "",
        "| kernel | points removed | candidates removed | mwp_cwp mean S | fenced mean S |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for k in result["per_kernel"]:
        mine = [r for r in result["pairs"] if r["kernel"] == k["kernel"]]
        lines.append(
            f"| {k['kernel']} | {k.get('points_removed', 0)} of {k.get('points', 0)} | "
            f"{len(k.get('candidates_removed', []))} | "
            f"{np.mean([r['mwp_cwp'] for r in mine]):.2f} % | "
            f"{np.mean([r[FENCED] for r in mine]):.2f} % |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
