"""SAAKE's block-dispatch bound against the TRAINING timings: is it where the GPU is?

    python experiments/saake_dispatch_check.py [OUT.json]

For every recorded suite kernel, at its training sizes (the data the `saake` model is built
from), every timed configuration whose emulated waves are bound by the dispatcher (the blocks'
dispatch time exceeds the emulated trace's work) is compared with the bound itself,
lat_launch + sum over waves of blocks per SM x gap_launch: measured / bound near 1 says the
configuration is dispatch-bound on the GPU too; far above 1, that the emulator under-predicts
its work there and names the wrong bottleneck. Writes per kernel the count and the ratio's
median and 10th/90th percentiles (default experiments/experiments/results/h200/saake_dispatch_check.json).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from klaraptor import suite
from klaraptor.assemble import make_job
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.provenance import stamp
from klaraptor.models.saake import ops
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor_bench.saake_eval import datasets

OUT = Path(__file__).resolve().parent / "results" / "h200" / "saake_dispatch_check.json"


def bound_ratios(job: object, em: KernelEmulator) -> tuple[int, list[float]]:
    """(timed configurations, measured / dispatch bound of the dispatch-bound ones)."""
    clock = em.profile.sm_clock_mhz * 1e3
    lat = float(em.params.lat[ops.R["launch"]])
    timed, ratios = 0, []
    train = job.train  # type: ignore[attr-defined]
    for i, d in enumerate(train.derived):
        b = tuple(int(v) for v in train.blocks[i])
        if "time_ms" not in d or b not in em.candidates:
            continue
        D, j = tuple(int(v) for v in train.D[i]), em.candidates.index(b)
        shape = em.shape(D, j)
        if shape.blocks <= 0 or shape.active_blocks <= 0:
            continue
        q = em.quantities(D)
        work = dispatch = 0.0
        for reps, per_sm, share in shape.waves():
            _, res = em.sm_work(j, q.counts[j], q.memory[j], per_sm * shape.warps_per_block, share)
            work += reps * res.emulated
            dispatch += reps * res.dispatch
        timed += 1
        if dispatch > work:
            ratios.append(float(d["time_ms"]) / ((lat + dispatch) / clock))
    return timed, ratios


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    rows = []
    for data in datasets():
        with tempfile.TemporaryDirectory() as td:
            store = data.to_store(Path(td) / "s.sqlite")
            for name in sorted(data.kernels):
                spec = suite.get(name)
                sizes = [spec.size(n) for n in spec.meta["train_sizes"]]
                job = make_job(spec, store, data.profile(), sizes)
                try:
                    em = KernelEmulator.from_job(job, only=[])
                except KlaraptorError as exc:
                    rows.append({"kernel": name, "error": str(exc)})
                    continue
                timed, r = bound_ratios(job, em)
                row: dict = {"kernel": name, "timed": timed, "dispatch_bound": len(r)}
                if r:
                    p10, p50, p90 = np.percentile(r, [10, 50, 90])
                    row |= {"ratio_median": p50, "ratio_p10": p10, "ratio_p90": p90}
                    print(
                        f"{name:34s} {len(r):4d}/{timed:4d} dispatch-bound; measured/bound "
                        f"median {p50:.2f} (p10 {p10:.2f}, p90 {p90:.2f})",
                        flush=True,
                    )
                rows.append(row)
    bound = [r for r in rows if r.get("dispatch_bound")]
    result = {
        "what": __doc__.split("\n\n")[2].replace("\n", " "),
        "kernels": rows,
        "kernels_with_dispatch_bound_points": len(bound),
        "provenance": stamp("python experiments/saake_dispatch_check.py " + " ".join(argv)),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(bound)} kernels have dispatch-bound training points; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
