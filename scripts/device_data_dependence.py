"""Which suite kernels are not data-oblivious? The data-dependence check over the suites (GPU).

Usage (device machine, repository root; about 1-2 minutes on an H200):
    KLARAPTOR_COMMIT=<sha> PYTHONPATH=src python3 scripts/device_data_dependence.py OUTDIR \
        [--suites polybench,rodinia,patterns] [--kernels A,B] [--budget-s 110]

For every kernel, `klaraptor.collect.data_dependence.check_data_dependence` at its smallest training
size (where a build measures; a random input's variation is largest at small sizes): three
launchable blocks spread over the thread counts, each timed alternately on two random inputs of
that size (the collection's `make_args`, seeds 0 and 1), two rounds each. All kernels run in this
one process (one CuPy import; `in_process=True`) to fit the budget; a kernel whose check fails is
recorded with the error and the next one goes on; kernels left when `--budget-s` has passed are
listed as not checked. Writes OUTDIR/data_dependence.json (every verdict with its timings, the
list of kernels flagged, provenance) and prints one line per kernel. rodinia.bfs.expand (a BFS
frontier of a random graph) is the kernel expected to be flagged.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from klaraptor import suite
from klaraptor.collect.collector import CollectOptions
from klaraptor.collect.data_dependence import check_data_dependence
from klaraptor.core.errors import DataDependenceWarning
from klaraptor.core.provenance import stamp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--suites", default="polybench,rodinia,patterns")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--budget-s", type=float, default=110.0)
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = [n for s in args.suites.split(",") for n in suite.suites()[s]]
    if args.kernels:
        wanted = args.kernels.split(",")
        names = [n for n in names if n in wanted]
    options = CollectOptions(min_time_ms=10.0, check=False)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for name in names:
        if time.perf_counter() - t0 > args.budget_s:
            skipped.append(name)
            continue
        spec = suite.get(name)
        n = int(spec.meta["train_sizes"][0])
        t = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DataDependenceWarning)  # reported below
                v = check_data_dependence(spec, n, options=options, in_process=True)
            row = {**v.to_dict(), "wall_s": time.perf_counter() - t}
            mark = "DATA-DEPENDENT" if v.dependent else "oblivious"
            print(
                f"{name:36s} N={n:<9d} {mark:14s} effect {v.effect:6.1%}  "
                + "  ".join(
                    f"{b.block}: {b.effect:.1%} (band {b.threshold:.1%})" for b in v.blocks
                ),
                flush=True,
            )
        except Exception as exc:  # noqa: BLE001 - record it and go on with the next kernel
            row = {
                "kernel": name,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-2000:],
                "wall_s": time.perf_counter() - t,
            }
            print(f"{name:36s} N={n:<9d} ERROR {row['error']}", flush=True)
        rows.append(row)
    result = {
        "dependent": [r["kernel"] for r in rows if r.get("dependent")],
        "checked": len([r for r in rows if "error" not in r]),
        "errors": [r["kernel"] for r in rows if "error" in r],
        "not_checked_budget": skipped,
        "options": {"min_time_ms": options.min_time_ms, "seeds": [0, 1], "size": "smallest train"},
        "wall_s": time.perf_counter() - t0,
        "kernels": rows,
        "provenance": stamp(),
    }
    try:
        from klaraptor.device.profile import query_device

        result["device"] = query_device(0).key
    except Exception as exc:  # noqa: BLE001 - the device name is a nicety
        result["device"] = f"unknown ({exc})"
    (out / "data_dependence.json").write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"flagged {len(result['dependent'])} of {result['checked']} checked: "
        f"{', '.join(result['dependent']) or 'none'}; errors {len(result['errors'])}, "
        f"not checked (budget) {len(skipped)}; {result['wall_s']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
