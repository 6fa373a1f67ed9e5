"""CPU: the cost of SAAKE's emulation (issue 11's targets: <= 50 ms per (kernel, config, D),
<= 2 s to rank every candidate of a kernel).

Per kernel, on the recorded H200 data: the emulator is fitted from the training points (trip
counts, memory behaviour, coalescing: `fit_s`), then every candidate is emulated COLD (empty
memo) at the kernel's smallest evaluation size (`rank_s`, `ms_per_config`), then one
sensitivity analysis of the fastest (`sensitivity_s`, 36 emulations of one configuration).

Usage: .venv/bin/python benchmarks/bench_saake.py OUT.json [kernel ...]   (default: all 44)
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    from klaraptor import suite
    from klaraptor.assemble import make_job
    from klaraptor.models.saake.emulator import KernelEmulator
    from klaraptor.models.saake.sensitivity import analyse
    from klaraptor_bench.saake_eval import datasets

    out = Path(sys.argv[1])
    load_at_start = round(os.getloadavg()[0], 2)
    wanted = set(sys.argv[2:])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, data in enumerate(datasets()):
            names = [n for n in data.kernels if not wanted or n in wanted]
            if not names:
                continue
            store = data.to_store(Path(tmp) / f"b{k}.sqlite", kernels=names)
            for name in names:
                spec = suite.get(name)
                train = [spec.size(n) for n in spec.meta["train_sizes"]]
                job = make_job(spec, store, data.profile(), train)
                t0 = time.perf_counter()
                em = KernelEmulator.from_job(job)
                fit = time.perf_counter() - t0
                D = spec.size(min(spec.meta["eval_sizes"])).values()
                t1 = time.perf_counter()
                cyc = em.cycles_all(D)
                rank = time.perf_counter() - t1
                best = int(np.nanargmin(np.where(np.isfinite(cyc), cyc, np.nan)))
                t2 = time.perf_counter()
                analyse(em, D, best)
                sens = time.perf_counter() - t2
                row = {
                    "kernel": name,
                    "D": list(D),
                    "candidates": len(em.candidates),
                    "fit_s": round(fit, 3),
                    "rank_s": round(rank, 3),
                    "ms_per_config": round(1e3 * rank / len(em.candidates), 2),
                    "sensitivity_s": round(sens, 3),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
            store.close()
    per = [r["ms_per_config"] for r in rows]
    summary = {
        "kernels": len(rows),
        "ms_per_config_median": float(np.median(per)),
        "ms_per_config_max": float(np.max(per)),
        "rank_s_median": float(np.median([r["rank_s"] for r in rows])),
        "rank_s_max": float(np.max([r["rank_s"] for r in rows])),
        "within_50ms_per_config": sum(p <= 50 for p in per),
        "within_2s_rank": sum(r["rank_s"] <= 2 for r in rows),
    }
    from klaraptor.core.provenance import stamp

    prov = stamp(
        cpus=os.cpu_count(),
        load_average_1min_at_start=load_at_start,
        note="CPU wall times on this machine; other jobs running raise them (see the load)",
    )
    out.write_text(
        json.dumps({"summary": summary, "kernels": rows, "provenance": prov}, indent=1) + "\n"
    )
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
