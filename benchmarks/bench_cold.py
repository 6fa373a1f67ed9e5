"""GPU: hot and L2-flushed ("cold") timings of every suite candidate at the largest training size.

The scaling model (`klaraptor.models.scaling`) anchors sizes whose footprint exceeds the L2 on
timings taken with the L2 flushed before each launch. This script measured them for the recorded
datasets (benchmarks/results/h200/cold/, merged into the datasets by
`benchmarks/record_cold.py`); each pass's wall also gives a real tune-once sweep without the
output check.

Per kernel, at N = max(train_sizes), with the training protocol less the output check:
  1. hot: every candidate, back-to-back launches (as the training sweep, check=False);
  2. cold: every candidate, `flush_l2=True` (a 2 × L2 buffer rewritten before every sample).
Each pass is its own collection (own store, own worker), so its wall time includes one worker
start-up. One JSON line per (kernel, pass) is appended to OUT/cold_timing.jsonl as soon as it is
measured: an interrupted run keeps what it finished. Kernels run cheapest first.

Usage (repository root, GPU machine): PYTHONPATH=src python3 benchmarks/bench_cold.py OUT [names]
(or as a session stage: bash scripts/gpu_session.sh OUT 600 bench_cold). About 3-5 minutes for
the 30 suite kernels on an H200 (3DCONV's 231 candidates and the two O(N^3) kernels dominate).
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

from klaraptor import suite
from klaraptor.store import Store
from klaraptor.suite.protocol import TRAIN_OPTIONS

ORDER_LAST = ("conv3d", "corr.k4", "covar.k3")  # the slow ones at the end


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else ".")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "cold_timing.jsonl"
    names = argv[1:] or [s.name for s in suite.all_specs() if s.name.startswith("polybench.")]
    names = sorted(names, key=lambda n: (any(k in n for k in ORDER_LAST), n))
    from klaraptor.collect.collector import collect

    base = replace(TRAIN_OPTIONS, check=False, counters=False)
    for name in names:
        spec = suite.get(name)
        L = max(int(n) for n in spec.meta["train_sizes"])
        for label, opts in (("hot", base), ("cold", replace(base, flush_l2=True))):
            row: dict = {
                "kernel": name,
                "pass": label,
                "N": L,
                "utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "commit": _commit(),
            }
            t0 = time.perf_counter()
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    store = Store(Path(tmp) / "s.sqlite")
                    rep = collect(spec, [{"N": L}], store=store, options=opts, progress=False)
                    row["wall_s"] = time.perf_counter() - t0
                    row["steps"] = rep.wall_s
                    row["counts"] = rep.counts
                    row["failures"] = [f"{f.block}: {f.reason}" for f in rep.failures][:10]
                    row["points"] = [
                        {
                            "block": list(m.block),
                            "median_ms": m.value["median_ms"],
                            "q1_ms": m.value["q1_ms"],
                            "q3_ms": m.value["q3_ms"],
                            "repeats": m.value.get("repeats"),
                            "inner": m.value.get("inner"),
                        }
                        for m in store.measurements(name, rep.device, kind="time", status="ok")
                    ]
                    store.close()
            except Exception as exc:  # noqa: BLE001 - record and go on with the next kernel
                row["wall_s"] = time.perf_counter() - t0
                row["error"] = f"{type(exc).__name__}: {exc}"
                row["traceback"] = traceback.format_exc()[-2000:]
            with log.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(
                f"{name} {label}: {row['wall_s']:.1f} s, {len(row.get('points', []))} points"
                + (f" ERROR {row['error']}" if "error" in row else ""),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
