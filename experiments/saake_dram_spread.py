"""DRAM's latency spread (sigma_dram) for SAAKE's "slowest line in flight" rule, from the
TRAINING-size counters: no timing at an evaluation size is read.

    PYTHONPATH=src python experiments/saake_dram_spread.py [OUT.json] [--sigmas 35,100,...]

A warp that consumes k loads sent at once waits for the slowest (`ops.op_tails`): the emulator
adds sigma e(k) to a load's latency, e(k) the expected largest of k standard normals. The L2's
sigma comes from the l2_scatter chase (a microbenchmark); DRAM has no such chase yet. Nsight
Compute flushes the caches before it profiles, so every counter point of every suite kernel
(the training sizes) loads from DRAM, and `sm_cycles` (sm__cycles_elapsed.avg) is its time. For
each sigma of the grid, every counter point is emulated with its own counters' memory behaviour
(L1/L2 hit rates, DRAM fraction, sectors per request) and compared with sm_cycles; the rule
takes the sigma with the least median |log(emulated / sm_cycles)| over all points of all 44
kernels. Writes, per sigma, that median, the mean, and per kernel its median (default
experiments/results/h200/saake_dram_spread.json).

Concluded: not adopted (notes/saake_slowest_line.md). The rule chose 350 cycles, driven by
kernels whose emulation misses ncu's cold-start launches for other reasons (GRAMSCHM k2, NW, LUD
perimeter want more, KMEANS assign less); the product keeps DRAM's spread at the L2's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from klaraptor import suite
from klaraptor.assemble import make_job
from klaraptor.core.provenance import stamp
from klaraptor.models.saake import ops
from klaraptor.models.saake.emulator import MEMORY, KernelEmulator, _rounded
from klaraptor_bench.dataset import each_recorded_kernel
from klaraptor_bench.saake_eval import datasets

OUT = Path(__file__).resolve().parent / "results" / "h200" / "saake_dram_spread.json"
SIGMAS = (35.0, 100.0, 150.0, 200.0, 250.0, 300.0, 350.0, 400.0, 500.0)


def counter_points(em: KernelEmulator, job: object) -> list[tuple]:
    """(D, configuration, the counters' memory behaviour, sm_cycles) of every counter point."""
    train = job.train  # type: ignore[attr-defined]
    index = {b: i for i, b in enumerate(em.candidates)}
    out = []
    for i, d in enumerate(train.derived):
        b = tuple(int(v) for v in train.blocks[i])
        if not d.get("sm_cycles") or b not in index:
            continue
        m = dict(d)
        frac = ops.dram_fraction(m)
        if frac is not None:
            m["dram_frac"] = frac
        mem = _rounded(ops.MemoryParams.from_metrics({k: m[k] for k in MEMORY if k in m}))
        out.append((tuple(int(v) for v in train.D[i]), index[b], mem, float(d["sm_cycles"])))
    return out


def log_ratios(em: KernelEmulator, points: list[tuple]) -> list[float]:
    """log(emulated / sm_cycles) per point: the waves' work, without the launch latency (which
    ncu's elapsed cycles do not hold)."""
    out = []
    for D, j, mem, cycles in points:
        q, shape = em.quantities(D), em.shape(D, j)
        total = 0.0
        for reps, per_sm, share in shape.waves():
            work, res = em.sm_work(j, q.counts[j], mem, per_sm * shape.warps_per_block, share)
            total += reps * res.wave_cycles(work)
        out.append(float(np.log(total / cycles)) if total > 0 else float("nan"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=str(OUT))
    ap.add_argument("--sigmas", default=",".join(str(s) for s in SIGMAS))
    ap.add_argument("--kernels", default=None)
    args = ap.parse_args()
    sigmas = [float(s) for s in args.sigmas.split(",")]
    kernels = args.kernels.split(",") if args.kernels else None
    per_kernel: dict[str, dict[str, list[float]]] = {}
    lat_dram = None
    with tempfile.TemporaryDirectory() as tmp:
        for data, store, name in each_recorded_kernel(datasets(), kernels, Path(tmp), "d"):
            spec = suite.get(name)
            sizes = [spec.size(n) for n in spec.meta["train_sizes"]]
            job = make_job(spec, store, data.profile(), sizes)
            em = KernelEmulator.from_job(job)
            lat_dram = float(em.params.lat[ops.R["dram"]])
            base = em.params
            points = counter_points(em, job)
            per_kernel[name] = {}
            for s in sigmas:
                em.params = replace(base, scatter=replace(base.scatter, dram_spread=s))
                per_kernel[name][str(s)] = log_ratios(em, points)
            print(name, len(points), flush=True)
    summary = {}
    for s in sigmas:
        allp = np.abs(np.concatenate([np.asarray(v[str(s)]) for v in per_kernel.values()]))
        summary[str(s)] = {
            "median_abs_log": float(np.nanmedian(allp)),
            "mean_abs_log": float(np.nanmean(allp)),
            "points": int(np.isfinite(allp).sum()),
        }
    best = min(sigmas, key=lambda s: summary[str(s)]["median_abs_log"])
    result = {
        "what": "sigma_dram (cycles) against the training-size counters (ncu sm_cycles), every "
        "counter point of every suite kernel, emulated with its own counters' memory behaviour",
        "rule": "the sigma with the least median |log(emulated / sm_cycles)| over all points",
        "chosen_sigma_cycles": best,
        "lat_dram_cycles": lat_dram,
        "chosen_fraction_of_lat_dram": best / lat_dram if lat_dram else None,
        "summary": summary,
        "per_kernel_median_abs_log": {
            k: {s: float(np.nanmedian(np.abs(v))) for s, v in rows.items()}
            for k, rows in per_kernel.items()
        },
        "provenance": stamp(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(summary, indent=1))
    print(
        f"chosen sigma_dram {best} cycles ({result['chosen_fraction_of_lat_dram']:.3f} of lat_dram)"
    )


if __name__ == "__main__":
    main()
