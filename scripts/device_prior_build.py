"""Budgeted builds on the GPU with and without SNOWPACK's prior, for a few suite kernels.

Usage (device machine, repository root):
    KLARAPTOR_COMMIT=<sha> python3 scripts/device_prior_build.py OUTDIR [--keep 8] [--kernels A,B]

Per kernel, two builds into fresh stores, both with the default budget (1.5) and counters off:
the plain budgeted build, then `prior="snowpack", prior_keep=K` (the shipped SNOWPACK model,
which was trained on the recorded H200 suites, these kernels included: this checks the path and
the cost on a GPU, not the unseen-kernel quality, which `experiments/snowpack_prior.py` measures).
Writes OUTDIR/prior_build.json: per build the wall seconds, the plan's summary (spent, tune-once's
cost, counts), how many candidates were timed at L, and the chosen block at each evaluation
size, which a CPU then scores against the recorded exhaustive search.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from klaraptor import suite
from klaraptor.assemble import build
from klaraptor.collect.collector import CollectOptions
from klaraptor.core.provenance import stamp
from klaraptor.store import Store

KERNELS = ("polybench.gemm.gemm", "polybench.conv2d.conv2d", "polybench.atax.k1")


def one(name: str, stores: Path, prior: bool, keep: int) -> dict[str, Any]:
    spec = suite.get(name)
    store = Store(stores / f"{name}{'.prior' if prior else ''}.sqlite")
    kw: dict[str, Any] = {"prior": "snowpack", "prior_keep": keep} if prior else {}
    t0 = time.perf_counter()
    kern = build(spec, store=store, collect_options=CollectOptions(counters=False),
                 progress=False, **kw)  # fmt: skip
    wall = time.perf_counter() - t0
    rep = kern.report
    assert rep is not None
    L = max(spec.size(n).values() for n in spec.meta["train_sizes"])
    hot = store.measurements(name, kern.device_key, kind="time", status="ok")
    row = {
        "kernel": name,
        "prior": bool(prior),
        "keep": keep if prior else None,
        "wall_s": wall,
        "plan": rep.collect.plan.to_dict() if rep.collect and rep.collect.plan else None,
        "timed_at_L": len({tuple(m.block) for m in hot if m.D.values() == L}),
        "candidates": len(kern.helper.candidates),
        "chosen": {str(n): list(kern.select(n).block) for n in spec.meta["eval_sizes"]},
    }
    store.close()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--keep", type=int, default=8)
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--stores", default="/tmp/klaraptor_prior_build", help="where the stores go")
    args = ap.parse_args()
    out, stores = Path(args.outdir), Path(args.stores)
    out.mkdir(parents=True, exist_ok=True)
    stores.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.kernels.split(","):
        for prior in (False, True):
            try:
                rows.append(one(name, stores, prior, args.keep))
            except Exception as exc:  # noqa: BLE001 - recorded, the next build still runs
                rows.append(
                    {"kernel": name, "prior": prior, "error": f"{type(exc).__name__}: {exc}"}
                )
            r = rows[-1]
            print(name, "prior" if prior else "plain", r.get("wall_s"), r.get("timed_at_L"),
                  r.get("error", ""), flush=True)  # fmt: skip
    doc = {"builds": rows, "provenance": stamp("python3 scripts/device_prior_build.py")}
    (out / "prior_build.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
