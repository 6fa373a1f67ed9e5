"""SAAKE without counters: the trip counts the interpreter derives from a kernel's parameters
(`klaraptor.models.saake.interp`), against the recorded Nsight Compute counters of the 44 suite
kernels (H200), on the CPU.

    PYTHONPATH=src:plugins/klaraptor-bench/src python3 benchmarks/saake_interp_counts.py OUT.json [PER_KERNEL] [LIMIT_S]

For each kernel, PER_KERNEL (default 3) of its recorded counter points (seeded choice) are run
through the interpreter; the derived per-warp counters (instructions, global loads and stores,
shared accesses: the static matrix times the class counts) are compared with the measured ones:
the largest relative error per kernel and counter. A kernel whose counts need its data, or that
takes more than LIMIT_S seconds (default 90), is listed with why. Used to decide issue 37's
interpreter rewrite (whole sampled blocks, per-lane loop skipping) from measured errors.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

KEYS = ("inst_per_warp", "gld_per_warp", "gst_per_warp", "shared_per_warp")


class _Late(BaseException):
    """Raised by the alarm: a kernel over its time limit (not an Exception, so nothing in the
    interpreter swallows it)."""


def _alarm(*_: Any) -> None:
    raise _Late


def kernel_errors(spec: Any, job: Any, per_kernel: int, limit_s: int) -> dict[str, Any]:
    from klaraptor.models.saake import interp, tripcounts
    from klaraptor.models.saake.isa_source import kernel_isa

    isa, _ = kernel_isa(spec)
    classes = tripcounts.count_classes(isa)
    a = tripcounts.static_matrix(isa, classes)
    rows = [
        (tuple(job.train.D[i]), tuple(int(v) for v in job.train.blocks[i]), d)
        for i, d in enumerate(job.train.derived)
        if "inst_per_warp" in d
    ]
    rng = np.random.default_rng(0)
    if len(rows) > per_kernel:
        rows = [rows[i] for i in sorted(rng.choice(len(rows), per_kernel, replace=False))]
    t0 = time.perf_counter()
    try:
        runner = interp.WarpInterpreter(isa)
    except interp.DataDependent as exc:
        return {"status": str(exc), "s": time.perf_counter() - t0}
    errs: dict[str, list[float]] = {k: [] for k in KEYS}
    reason = None
    signal.alarm(limit_s)
    try:
        for d, block, m in rows:
            D = spec.size(dict(zip(spec.data_names, d)))
            pc = interp.counts_from_parameters(runner, classes, spec, D, block)
            if pc.counts is None:
                reason = pc.reason
                break
            pred = a @ pc.counts
            for k in KEYS:
                if m.get(k, 0) > 0:
                    errs[k].append(abs(pred[tripcounts.COUNTERS.index(k)] / m[k] - 1))
    except _Late:
        reason = f"over {limit_s} s"
    finally:
        signal.alarm(0)
    dt = time.perf_counter() - t0
    if reason:
        return {"status": reason[:200], "s": dt}
    return {
        "status": "ok",
        "s": dt,
        "points": len(rows),
        **{k: (float(np.max(v)) if v else None) for k, v in errs.items()},
    }


def summary(per: dict[str, Any]) -> dict[str, Any]:
    ok = [v for v in per.values() if v["status"] == "ok"]
    inst = [v["inst_per_warp"] for v in ok]
    mem = [max(x for x in (v["gld_per_warp"], v["gst_per_warp"]) if x is not None) for v in ok]
    return {
        "kernels": len(per),
        "derivable": len(ok),
        "inst_within_2pct": sum(x <= 0.02 for x in inst),
        "inst_within_10pct": sum(x <= 0.10 for x in inst),
        "global_accesses_within_2pct": sum(x <= 0.02 for x in mem),
        "cpu_s": sum(v.get("s", 0.0) for v in per.values()),
    }


def main() -> int:
    from klaraptor import suite
    from klaraptor.assemble import make_job
    from klaraptor.core.provenance import stamp
    from klaraptor_bench.saake_eval import datasets

    out = Path(sys.argv[1])
    per_kernel = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    limit_s = int(sys.argv[3]) if len(sys.argv) > 3 else 90
    signal.signal(signal.SIGALRM, _alarm)
    per: dict[str, Any] = {}
    for data in datasets():
        names = sorted(data.kernels)
        with tempfile.TemporaryDirectory() as tmp:
            store = data.to_store(Path(tmp) / "d.sqlite", kernels=names)
            try:
                for name in names:
                    spec = suite.get(name)
                    sizes = [spec.size(n) for n in spec.meta["train_sizes"]]
                    job = make_job(spec, store, data.profile(), sizes)
                    per[name] = kernel_errors(spec, job, per_kernel, limit_s)
                    print(name, json.dumps(per[name]), flush=True)
            finally:
                store.close()
    cmd = f"python3 benchmarks/saake_interp_counts.py {out} {per_kernel} {limit_s}"
    result = {"summary": summary(per), "kernels": per, "provenance": stamp(cmd)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
