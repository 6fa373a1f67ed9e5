"""Which cost for the full waves after the first? Scores candidate forms of SAAKE's steady wave
on the recorded H200 timings at the TRAINING sizes only (issue 37; the form adopted in
`emulate.steady_wave_work` was chosen from this table; experiments/notes/saake_waves.md).

Per (kernel, training size, configuration) it records each wave's repetitions, the first full
wave's work T (the emulation as before), its busiest resource's cycles B, one block's work alone
on the SM L, and the measured time; then it scores, as Table 1's raw error (mean |pred/t - 1|
per size, mean over sizes, geomean over kernels), the later full waves costed as:

    serial          T (every wave as the first: the emulator before 46c5bcd)
    max_b_alone     max(B, L)
    max_b_mid       max(B, (T + L) / 2)
    b_half_alone    B + L / 2
    b_rho_alone     B + (1 - B / T) L

each at most T and at least the wave's dispatch. Usage (repository root, CPU; ~10 min on 2 cores):
    PYTHONPATH=src:plugins/klaraptor-bench/src python experiments/saake_waves.py OUT.json [KERNEL ...]
    python experiments/saake_waves.py --score OUT.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

FORMS = ("serial", "max_b_alone", "max_b_mid", "b_half_alone", "b_rho_alone")


def _rows(name: str) -> list[dict[str, Any]]:
    import numpy as np

    from klaraptor import suite
    from klaraptor.models.saake import ops
    from klaraptor.models.saake.model import SaakeModel
    from klaraptor_bench.saake_eval import recorded_job

    rows: list[dict[str, Any]] = []
    spec = suite.get(name)
    train = [int(n) for n in spec.meta["train_sizes"]]
    with recorded_job(name) as (data, job):
        em = SaakeModel().emulator(job)
        times = data.kernels[name].times()
        launch = ops.R["launch"]
        for N in train:
            D = spec.size(N).values()
            measured = {b: t[0] for (DD, b), t in times.items() if DD.values() == (N,)}
            q = em.quantities(D)
            for j, block in enumerate(em.candidates):
                shape = em.shape(D, j)
                if block not in measured or shape.active_blocks <= 0 or shape.blocks <= 0:
                    continue
                waves = []
                for reps, per_sm, share in shape.waves():
                    x, mem = q.counts[j], q.memory[j]
                    work, res = em.sm_work(j, x, mem, per_sm * shape.warps_per_block, share)
                    busy = np.asarray(res.busy, dtype=float).copy()
                    busy[launch] = 0.0
                    scale = work / res.emulated if res.emulated > 0 else 1.0
                    alone, _ = em.sm_work(j, x, mem, shape.warps_per_block, share)
                    waves.append(
                        {
                            "reps": reps,
                            "full": share >= 1.0,
                            "work": work,
                            "dispatch": res.dispatch,
                            "busiest": float(busy.max()) * scale,
                            "alone": alone,
                        }
                    )
                rows.append(
                    {
                        "kernel": name,
                        "N": N,
                        "block": list(block),
                        "measured_ms": measured[block],
                        "launch": float(em.params.lat[launch]),
                        "clock_khz": float(em.profile.sm_clock_mhz) * 1e3,
                        "waves": waves,
                    }
                )
    return rows


def steady(form: str, w: dict[str, float]) -> float:
    T, B, L = w["work"], w["busiest"], w["alone"]
    if form == "serial":
        s = T
    elif form == "max_b_alone":
        s = max(B, L)
    elif form == "max_b_mid":
        s = max(B, (T + L) / 2)
    elif form == "b_half_alone":
        s = B + L / 2
    elif form == "b_rho_alone":
        s = B + (1 - min(B / T, 1.0)) * L if T > 0 else T
    else:
        raise ValueError(form)
    return max(min(s, T), w["dispatch"])


def predicted_ms(row: dict[str, Any], form: str) -> float:
    total = row["launch"]
    for w in row["waves"]:
        first = max(w["work"], w["dispatch"])
        if w["reps"] >= 2 and w["full"]:
            total += first + (w["reps"] - 1) * steady(form, w)
        else:
            total += w["reps"] * first
    return total / row["clock_khz"]


def score(rows: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for form in FORMS:
        per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in rows:
            per[r["kernel"]][r["N"]].append(abs(predicted_ms(r, form) / r["measured_ms"] - 1))
        by_kernel = [
            sum(sum(v) / len(v) for v in sizes.values()) / len(sizes) for sizes in per.values()
        ]
        out[form] = 100 * math.exp(sum(math.log(e) for e in by_kernel) / len(by_kernel))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--score", action="store_true", help="score an earlier OUT.json")
    a = ap.parse_args()
    if not a.score:
        from klaraptor_bench.saake_eval import recorded_kernel_names

        names = a.kernels or recorded_kernel_names()
        with ProcessPoolExecutor(2) as pool:
            rows = [r for rs in pool.map(_rows, names) for r in rs]
        a.out.write_text(json.dumps(rows))
    rows = json.loads(a.out.read_text())
    for form, err in score(rows).items():
        print(f"{form:14s} raw error at the training sizes {err:5.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
