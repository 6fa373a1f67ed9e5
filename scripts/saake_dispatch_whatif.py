"""What-if, not a model: SAAKE's time error if launches were bounded by the block dispatcher.

    python scripts/saake_dispatch_whatif.py [--ns-per-block X]

For every recorded suite kernel this builds the `saake` model as `klaraptor bench saake` does
(training sizes only) and, at the evaluation sizes, compares its Table-1 error with that of
max(predicted time, blocks x the measured time per block), the block dispatcher's bound. The
time per block is the median, over blocks of 32-128 threads, of
benchmarks/results/h200/resources/block_dispatch.json (scripts/device_block_dispatch.py on the
H200). The bound is applied after SAAKE's calibration, so this only estimates what a dispatch
resource inside the emulator could gain; the emulator does not have one (docs/saake.md).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import numpy as np

from klaraptor import suite
from klaraptor.bench.saake_eval import _truth, datasets
from klaraptor.build import make_job
from klaraptor.models.saake.model import SaakeModel

MEASURED = (
    Path(__file__).resolve().parents[1] / "benchmarks/results/h200/resources/block_dispatch.json"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ns-per-block", type=float, default=None)
    a = ap.parse_args()
    rows = json.loads(MEASURED.read_text())["rows"]
    ns = a.ns_per_block or float(
        np.median([r["ns_per_block_gpu"] for r in rows if r["threads"] <= 128])
    )
    print(f"time per block: {ns:.3f} ns")
    base, bound = [], []
    for data in datasets():
        with tempfile.TemporaryDirectory() as td:
            store = data.to_store(Path(td) / "s.sqlite")
            for name in sorted(data.kernels):
                spec = suite.get(name)
                job = make_job(
                    spec, store, data.profile(), [spec.size(n) for n in spec.meta["train_sizes"]]
                )
                grid = SaakeModel().emulated(job)
                helper, _ = SaakeModel().helper_from(job, grid, calibrated=True)
                em = grid.emulator
                r = []
                for N, measured in sorted(_truth(data, name, spec).items()):
                    D = spec.size(N)
                    pred = helper.predict(D)
                    for i, b in enumerate(helper.candidates):
                        if b in measured and pred.valid[i]:
                            blocks = em.shape(D.values(), em.candidates.index(tuple(b))).blocks
                            r.append((float(pred.ms[i]), measured[b], blocks * ns * 1e-6))
                if not r:
                    continue
                x = np.array(r)
                e0 = float(np.mean(abs(x[:, 0] / x[:, 1] - 1)))
                e1 = float(np.mean(abs(np.maximum(x[:, 0], x[:, 2]) / x[:, 1] - 1)))
                share = float(np.mean(x[:, 2] > x[:, 0]))
                base.append(e0)
                bound.append(e1)
                print(
                    f"{name:34s} {e0 * 100:6.1f} % -> {e1 * 100:6.1f} %  ({share * 100:4.1f} % of configurations bound)",
                    flush=True,
                )
    g = lambda v: 100 * math.exp(np.mean(np.log(v)))  # noqa: E731
    print(
        f"geomean over {len(base)} kernels: {g(base):.1f} % -> {g(bound):.1f} %; median {100 * np.median(base):.1f} % -> {100 * np.median(bound):.1f} %"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
