"""`klaraptor bench`: collect the suite on the GPU and report against exhaustive search."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from klaraptor.errors import KlaraptorError

console = Console()


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="evaluation against exhaustive search (suite)")
    bs = b.add_subparsers(dest="bench_command", required=True)
    c = bs.add_parser("collect", help="GPU: training points and ground truth for suite kernels")
    c.add_argument("--kernels", default="polybench", help="suite prefix or comma-separated names")
    c.add_argument("--phase", choices=("train", "truth", "both"), default="both")
    c.add_argument("--ncu-sizes", default=None, help="training sizes that get counters (default: all)")
    c.add_argument("--budget", type=float, default=60.0, help="ground-truth seconds per (kernel, N)")
    c.add_argument("--log", default=None, help="append a JSON line per step here")
    c.set_defaults(bench_func=_collect)
    r = bs.add_parser("report", help="evaluate the methods and write benchmarks/results/<gpu>/")
    r.add_argument("--out", default="benchmarks/results/h200")
    r.add_argument("--recorded", action="store_true", help="use the shipped recorded dataset")
    r.set_defaults(bench_func=_report)
    e = bs.add_parser("export", help="write the recorded dataset from a store")
    e.add_argument("--out", required=True)
    e.add_argument("--kernels", default="polybench")
    e.set_defaults(bench_func=_export)


def run(args: argparse.Namespace) -> int:
    return int(args.bench_func(args) or 0)


def _specs(text: str) -> list[Any]:
    from klaraptor.cli import resolve_specs

    out = []
    for part in text.split(","):
        out += resolve_specs(part.strip())
    return out


def _collect(args: argparse.Namespace) -> int:
    from klaraptor.bench.truth import collect_training, collect_truth
    from klaraptor.build import current_profile, gpu_available
    from klaraptor.cli import _store

    if not gpu_available():
        raise KlaraptorError("bench collect needs a CUDA GPU with CuPy")
    store = _store(args)
    device = current_profile(store)
    ncu_sizes = None if args.ncu_sizes is None else [int(v) for v in args.ncu_sizes.split(",") if v]
    for spec in _specs(args.kernels):
        row: dict[str, Any] = {"kernel": spec.name, "device": device.key}
        if args.phase in ("train", "both"):
            t = time.perf_counter()
            reps = collect_training(spec, store, ncu_sizes=ncu_sizes, device=device)
            row["train"] = {"wall_s": time.perf_counter() - t, "reports": [{"wall_s": r.wall_s, "counts": r.counts, "ncu": r.ncu_status, "worker": r.worker} for r in reps]}
        if args.phase in ("truth", "both"):
            decisions, rep, wall = collect_truth(spec, store, device, budget_s=args.budget)
            row["truth"] = {"wall_s": wall, "decisions": {d.N: d.to_dict() for d in decisions},
                            "counts": None if rep is None else rep.counts}
        console.print(f"[bold]{spec.name}[/bold] {json.dumps({k: v for k, v in row.items() if k != 'device'}, default=str)[:400]}")
        if args.log:
            with Path(args.log).open("a") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
    return 0


def _report(args: argparse.Namespace) -> int:
    from klaraptor.bench.report import write_report

    return write_report(args)


def _export(args: argparse.Namespace) -> int:
    from klaraptor.bench.dataset import export_dataset
    from klaraptor.cli import _store

    path = export_dataset(_store(args), _specs(args.kernels), Path(args.out))
    console.print(f"wrote {path}")
    return 0
