"""Where a default build's time goes (issue 33): one build per kernel under cProfile, plus the
per-point walls the worker reports. Research, not a figure: bench_cost.py has the figures.

    PYTHONPATH=src python benchmarks/profile_build.py OUT [KERNEL ...]

Writes OUT/profile_build.json (per kernel: build wall, per-point wall/repeats/inner/stage
statistics by kind), OUT/profile_<kernel>.txt (the parent's top functions) and
OUT/profile_<kernel>_worker.txt (the measuring worker's, from the cProfile files it writes under
KLARAPTOR_WORKER_PROFILE_DIR, one per job).
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT = ("patterns.saxpy.saxpy", "polybench.fdtd2d.k1", "patterns.transpose.transpose_tiled")


def _points(store: Any, kernel: str) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for dev in {b.device for b in store.builds(kernel)} or set():
        for m in store.measurements(kernel, dev):
            by_kind.setdefault(str(m.kind), []).append(
                {
                    "D": dict(m.D),
                    "block": list(m.block),
                    "status": str(m.status),
                    **{
                        k: m.value.get(k)
                        for k in (
                            "wall_s",
                            "setup_s",
                            "repeats",
                            "inner",
                            "median_ms",
                            "race_stage",
                        )
                    },
                }
            )
    out: dict[str, Any] = {}
    for kind, rows in by_kind.items():
        walls = [r["wall_s"] for r in rows if isinstance(r.get("wall_s"), float)]
        out[kind] = {
            "n": len(rows),
            "wall_sum_s": sum(walls),
            "wall_median_ms": 1e3 * statistics.median(walls) if walls else None,
            "kernel_ms_sum": sum(
                (r.get("median_ms") or 0) * (r.get("repeats") or 0) * (r.get("inner") or 0)
                for r in rows
            ),
            "rows": rows,
        }
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    names = argv[1:] or list(DEFAULT)
    from klaraptor.assemble import build
    from klaraptor.collect.worker import PROFILE_DIR_ENV
    from klaraptor.device.profile import recorded_profile
    from klaraptor.spec import catalog
    from klaraptor.store import Store

    worker_dir = out / "worker_prof"
    os.environ[PROFILE_DIR_ENV] = str(worker_dir)  # before any worker starts: they inherit it
    res: dict[str, Any] = {}
    for name in names:
        spec = catalog.get(name)
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "s.sqlite")
            store.save_profile(recorded_profile("h200"))
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            kern = build(spec, store=store, progress=False)
            prof.disable()
            wall = time.perf_counter() - t0
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(45)
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
            (out / f"profile_{name}.txt").write_text(s.getvalue())
            jobs = sorted(worker_dir.glob("*.prof")) if worker_dir.exists() else []
            if jobs:
                w = io.StringIO()
                stats = pstats.Stats(str(jobs[0]), stream=w)
                for extra in jobs[1:]:
                    stats.add(str(extra))
                w.write(f"jobs: {[j.name for j in jobs]}\n")
                stats.sort_stats("cumulative").print_stats(45)
                stats.sort_stats("tottime").print_stats(30)
                (out / f"profile_{name}_worker.txt").write_text(w.getvalue())
                kept = out / f"worker_{name}"
                kept.mkdir(exist_ok=True)
                for j in jobs:
                    j.rename(kept / j.name)
            coll = kern.report.collect.to_dict() if kern.report.collect else {}
            res[name] = {"wall_s": wall, "collect": coll, "points": _points(store, spec.name)}
            print(
                name,
                f"{wall:.2f} s",
                {k: (v["n"], round(v["wall_sum_s"], 3)) for k, v in res[name]["points"].items()},
                flush=True,
            )
    (out / "profile_build.json").write_text(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
