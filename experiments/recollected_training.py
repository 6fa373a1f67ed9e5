"""The suites' choice quality with their training timings re-collected under today's protocol.

    python experiments/recollected_training.py OUT.json STORE [STORE ...] [--jobs N]

Issue 33 asks that racing (a first estimate for every candidate, the full protocol only for the
contenders) leave the suites' choices as they were: klaraptor's geomean r on each suite within
0.003 of the recorded report's, or better. The recorded datasets' training timings were taken
with the earlier protocol (every point to the full 5 ms floor). The STOREs hold the same
kernels' training timings re-collected on the device by `klaraptor bench collect --phase time`
(racing on, the device's noise band; `scripts/device_parallel.sh` step `recollect`).

For every kernel found in a STORE, the recorded dataset's rows at the kernel's training sizes
are replaced by the re-collected ones; everything else stays as recorded (the ground truth at
the evaluation sizes, the cold timings, the counters, the per-kernel cost model), so the only
change is the training timings. Both datasets are then evaluated by the report's own code (the
default build `auto`, budget 1.5, and the baselines), and OUT.json gets, per suite, the methods'
geomean r on the recorded and on the re-collected timings, per kernel, with the re-collection's
own figures (points, race stages, wall seconds) and provenance.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.core.provenance import stamp
from klaraptor.store import Store
from klaraptor.suite.recorded import RecordedDataset

SUITES = ("polybench", "rodinia")


def recollected_rows(store: Store, name: str, train: set[int]) -> tuple[list[list[float]], dict]:
    """The store's ok timing rows of kernel `name` at its training sizes (the dataset's row
    form) and what the race did (points per race stage)."""
    (key,) = store.device_profiles()
    rows: list[list[float]] = []
    stages: dict[str, int] = {}
    for m in store.measurements(name, key, kind="time", status="ok"):
        if int(m.D.values()[0]) not in train:
            continue
        v = m.value
        rows.append([*m.D.values(), *m.block, v["median_ms"], v["q1_ms"], v["q3_ms"]])
        stage = str(v.get("race_stage", "none"))
        stages[stage] = stages.get(stage, 0) + 1
    return sorted(rows), stages


def swapped(data: RecordedDataset, name: str, rows: list[list[float]], train: set[int]) -> None:
    """Replace kernel `name`'s rows at the training sizes by `rows` (in place)."""
    kd = data.kernels[name]
    kd.time = sorted([r for r in kd.time if int(r[0]) not in train] + rows)


def evaluate(args: tuple[str, str, RecordedDataset]) -> dict[str, Any]:
    """One kernel of one dataset through the report's evaluation (default providers)."""
    from klaraptor.core.errors import ExtrapolationWarning
    from klaraptor_bench.evaluate import default_providers, evaluate_kernel, kernel_costs

    suite, name, data = args
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        store = data.to_store(Path(tmp) / "k.sqlite", kernels=[name])
        try:
            res = evaluate_kernel(
                store,
                data,
                name,
                providers=default_providers(),
                cost=kernel_costs(data)[name],
                suite_name=suite,
            )
        finally:
            store.close()
    out: dict[str, list[float]] = {}
    for p in res.pairs:
        for m in p.times:
            out.setdefault(m, []).append(p.r(m))
    return {"kernel": name, "r": out, "N": [p.N for p in res.pairs]}


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return float(np.exp(np.mean(np.log(xs)))) if xs else math.nan


def main(argv: list[str] | None = None) -> int:
    from klaraptor import suite as ksuite
    from klaraptor_bench.supplement import load_suite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)

    stores = [Store(p, must_exist=True) for p in args.stores]
    result: dict[str, Any] = {"suites": {}, "stores": [str(p) for p in args.stores]}
    for suite in SUITES:
        recorded = load_suite(suite)
        fresh = copy.deepcopy(recorded)
        per_kernel: dict[str, Any] = {}
        for name in sorted(recorded.kernels):
            train = {int(n) for n in ksuite.get(name).meta["train_sizes"]}
            for store in stores:
                if store.kernel(name) is None:
                    continue
                rows, stages = recollected_rows(store, name, train)
                old = [r for r in recorded.kernels[name].time if int(r[0]) in train]
                if len(rows) < len(old):
                    print(
                        f"{name}: {len(rows)} of {len(old)} training points re-collected: kept as recorded"
                    )
                    break
                swapped(fresh, name, rows, train)
                per_kernel[name] = {
                    "points": len(rows),
                    "recorded_points": len(old),
                    "race_stages": stages,
                }
                break
        names = sorted(per_kernel)
        if not names:
            continue
        tasks = [(suite, n, d) for d in (recorded, fresh) for n in names]
        with ProcessPoolExecutor(args.jobs) as pool:
            got = list(pool.map(evaluate, tasks))
        before, after = got[: len(names)], got[len(names) :]
        methods = sorted(before[0]["r"])
        summary: dict[str, Any] = {}
        for m in methods:
            rb = [x for g in before for x in g["r"].get(m, [])]
            ra = [x for g in after for x in g["r"].get(m, [])]
            summary[m] = {
                "recorded": geomean(rb),
                "recollected": geomean(ra),
                "max_recorded": max(rb),
                "max_recollected": max(ra),
                "pairs": len(ra),
            }
        for b, a in zip(before, after):
            per_kernel[b["kernel"]]["klaraptor_r_recorded"] = b["r"].get("klaraptor")
            per_kernel[b["kernel"]]["klaraptor_r_recollected"] = a["r"].get("klaraptor")
        result["suites"][suite] = {
            "kernels": len(names),
            "all_kernels": len(recorded.kernels),
            "methods": summary,
            "per_kernel": per_kernel,
        }
        k = summary.get("klaraptor", {})
        print(
            f"{suite}: {len(names)} kernels; klaraptor geomean r {k.get('recorded', math.nan):.4f} "
            f"recorded -> {k.get('recollected', math.nan):.4f} re-collected"
        )
    result["provenance"] = stamp(command=" ".join(["python", *sys.argv]))
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
