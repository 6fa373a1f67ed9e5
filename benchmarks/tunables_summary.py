"""The tunables suite's figures in benchmarks/results/h200/summary.json, from the committed runs of
benchmarks/bench_tunables.py (CPU; no GPU needed).

    python benchmarks/tunables_summary.py [--quality FILE] [--cost FILE]

`--quality`: the run whose choices are scored (every method at every evaluation size);
`--cost`: the run whose build and Kernel Tuner walls are compared (the same device call). The
`tunables` suite gets the methods' geomean/max r, within-5 % and the joint-over-block-only
speedup per kernel, and the summary's `cost` block `build_over_kernel_tuner` (per kernel and the
maximum). Each figure keeps its run's provenance. `klaraptor bench report` rewrites
summary.json without this block: run this script after it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "h200"
METHODS = {
    "klaraptor": "klaraptor",
    "online_topk": "klaraptor_topk",
    "tune_once": "tune_once",
    "default": "default",
    "block_only": "block_only",
    "kernel_tuner": "kernel_tuner",
}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def suite_block(run: dict[str, Any]) -> dict[str, Any]:
    kernels = [k for k in run["kernels"] if k.get("pairs")]
    pairs = [p for k in kernels for p in k["pairs"]]
    methods = {}
    for ours, name in METHODS.items():
        rs = [p["r"][ours] for p in pairs if p["r"].get(ours) is not None]
        if rs:
            methods[name] = {
                "pairs": len(rs),
                "geomean_r": geomean(rs),
                "max_r": max(rs),
                "within_5pct": sum(r <= 1.05 for r in rs) / len(rs),
                "mean_S_pct": 100 * (sum(rs) / len(rs) - 1),
            }
    joint = {
        k["kernel"]: geomean([p["r"]["block_only"] / p["r"]["klaraptor"] for p in k["pairs"]])
        for k in kernels
    }
    return {
        "pairs": len(pairs),
        "kernels": len(kernels),
        "not_evaluated": {
            k["kernel"]: k.get("error", "") for k in run["kernels"] if not k.get("pairs")
        },
        "methods": methods,
        "joint_over_block_only": joint,
        "provenance": run["provenance"],
    }


def merged_runs(paths: list[Path]) -> dict[str, Any]:
    """One run of every kernel scored in `paths` (the suite split over the GPUs of one machine,
    one bench process per GPU, or a kernel finished in a later device call); each kernel keeps
    the run it came from, and every run's provenance is kept."""
    kernels: dict[str, dict[str, Any]] = {}
    provenance = []
    for path in paths:
        run = json.loads(path.read_text())
        provenance.append({"file": path.name, **run["provenance"]})
        for k in run["kernels"]:
            if k.get("pairs") or k["kernel"] not in kernels:
                kernels[k["kernel"]] = {**k, "run": path.name}
    return {"kernels": list(kernels.values()), "provenance": provenance}


def cost_block(run: dict[str, Any]) -> dict[str, Any]:
    per = {
        k["kernel"]: {
            "build_s": k["build_s"],
            "kernel_tuner_s": k["kernel_tuner"]["wall_s"],
            "build_over_kernel_tuner": k["build_over_kernel_tuner"],
        }
        for k in run["kernels"]
        if k.get("build_over_kernel_tuner")
    }
    ratios = [v["build_over_kernel_tuner"] for v in per.values()]
    return {
        "per_kernel": per,
        "geomean": geomean(ratios) if ratios else None,
        "max": max(ratios) if ratios else None,
        "what": "klaraptor's default build of the joint space (compilation of every variant "
        "included) over one Kernel Tuner brute-force tune of the same space at the largest "
        "training size, both in the same device call",
        "provenance": run["provenance"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quality",
        type=Path,
        nargs="+",
        default=[RESULTS / f"bench_tunables_dc0480d_gpu{i}.json" for i in (1, 2, 3)],
        help="runs whose choices are scored; a kernel scored in a later run replaces an earlier",
    )
    ap.add_argument(
        "--cost",
        type=Path,
        nargs="+",
        default=[RESULTS / f"bench_tunables_dc0480d_gpu{i}.json" for i in (1, 2, 3)],
        help="runs whose build and Kernel Tuner walls are compared (each kernel within one run)",
    )
    ap.add_argument(
        "--replay",
        type=Path,
        nargs="*",
        default=sorted(RESULTS.glob("tunables_replay_*_on_*.json")),
        help="benchmarks/tunables_replay.py results: the product at a later commit rebuilt "
        "offline from a run's training rows and scored on its ground truth",
    )
    ap.add_argument(
        "--other",
        type=str,
        nargs="*",
        default=["34ed03a:0,1,2", "d714813:0,1,2", "a02ca89:0,1,2"],
        help="earlier live runs, COMMIT:GPUS (bench_tunables_COMMIT_gpuI.json), summarised "
        "beside the headline: the run-to-run spread of the same methods",
    )
    ap.add_argument("--summary", type=Path, default=RESULTS / "summary.json")
    a = ap.parse_args(argv)
    summary = json.loads(a.summary.read_text())
    summary["suites"]["tunables"] = suite_block(merged_runs(a.quality))
    summary["suites"]["tunables"]["replays"] = [
        {"file": path.name, **json.loads(path.read_text())["summary"]["methods"],
         "provenance": json.loads(path.read_text())["provenance"]}
        for path in a.replay
    ]  # fmt: skip
    others = []
    for item in a.other:
        commit, _, gpus = item.partition(":")
        paths = [RESULTS / f"bench_tunables_{commit}_gpu{g}.json" for g in gpus.split(",")]
        run = merged_runs([p for p in paths if p.is_file()])
        block = suite_block(run)
        cost = cost_block(run)
        others.append(
            {
                "commit": commit,
                "methods": {m: {k: v[k] for k in ("geomean_r", "max_r")} for m, v in block["methods"].items()},
                "build_over_kernel_tuner": {"geomean": cost["geomean"], "max": cost["max"]},
            }
        )  # fmt: skip
    summary["suites"]["tunables"]["other_live_runs"] = others
    summary.setdefault("cost", {})["build_over_kernel_tuner"] = cost_block(merged_runs(a.cost))
    a.summary.write_text(json.dumps(summary, indent=1) + "\n")
    t = summary["suites"]["tunables"]["methods"]
    print(
        ", ".join(f"{m} {v['geomean_r']:.4f} (max {v['max_r']:.3f})" for m, v in t.items()),
        f"; build/KT {summary['cost']['build_over_kernel_tuner']['geomean']:.3f}",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
