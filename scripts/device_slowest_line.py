"""How long a warp waits for the slowest of k lines in flight, in the L2 and through DRAM.

Usage (device machine, one GPU, repository root; about 10 s of GPU time):
    PYTHONPATH=src python3 scripts/device_slowest_line.py OUTDIR [--repeats 3]

SAAKE's emulator (`klaraptor.models.saake.ops`, "the slowest of the lines in flight") takes each
line's latency as its level's fixed part plus an exponential delay of scale theta, so a warp
waiting on k lines waits theta (H_k - 1) past the mean (H_k the k-th harmonic number). The L2's
theta comes from the l2_scatter chase, DRAM's from the dram_scatter chase (k = 32 only). This
measures the law itself, at k = 1, 2, 4, 8, 16, 32: one warp of k lanes, each lane chasing its
own pointer through random 128-B lines (kp_chase_scatter, the l2_scatter chase's kernel), so each
step is one load instruction waiting on k lines.
- L2: an 8 MiB cycle, loaded once before (L2-resident); the k lanes start evenly spaced along it.
- DRAM: per window of 16 MiB (within the TLB's reach, as the DRAM chase), 8192 random lines
  linked in a cycle, the L2 flushed before each timed chase; 4 windows.
Writes OUTDIR/slowest_line.json: per level and k the cycles per step (median over repeats and
windows), theta_k = (t_k - t_1) / (H_k - 1) (a constant theta across k supports the law) and, for
comparison, sigma_k = (t_k - t_1) / e(k), the normal law's (e(k) the expected largest of k
standard normals; it grows with k: the normal law's tail is too light). The recorded run
(7b85694) wrote sigma_k only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from klaraptor.collect.resources import REQUEST_BYTES, ResourceConfig  # noqa: E402
from klaraptor.collect.resources_device import Device, _write_chase  # noqa: E402
from klaraptor.core.provenance import stamp  # noqa: E402
from klaraptor.models.saake.ops import slowest_extra  # noqa: E402

LANES = (1, 2, 4, 8, 16, 32)


def chase_k(d: Device, base: int, order: np.ndarray, lanes: int, steps: int) -> float:
    """Cycles per step of one warp of `lanes` lanes, lane l starting at order[l * stride]."""
    cp = d.cp
    stride = len(order) // 32
    starts = cp.asarray(
        [base + int(order[lane * stride]) * REQUEST_BYTES for lane in range(lanes)],
        dtype=cp.uint64,
    )
    sink = cp.zeros(32, dtype=cp.uint64)
    d.be.launch(
        d.kernel("kp_chase_scatter"),
        (1, 1, 1),
        (lanes, 1, 1),
        (starts, np.int32(steps), np.int32(0), d.out, sink),
    )
    d.be.synchronize(f"slowest-line chase, {lanes} lanes")
    cycles = int(d.out[:1].get()[0])
    return cycles / steps


def _normal_max(k: int) -> float:
    """The expected largest of k standard normals."""
    from scipy.stats import norm

    x = np.linspace(-9.0, 9.0, 20001)
    return float(np.trapezoid(x * k * norm.pdf(x) * norm.cdf(x) ** (k - 1), x))


def measure(repeats: int) -> dict:
    cfg = ResourceConfig()
    d = Device(cfg)
    out: dict = {"lanes": list(LANES)}
    # L2-resident: one cycle through every line of 8 MiB, warmed by a full pass.
    n_l2 = cfg.chase_l2_bytes // REQUEST_BYTES
    buf = d.stream_buffer(max(cfg.chase_l2_bytes, cfg.chase_dram_windows * cfg.chase_window_bytes))
    order = d.rng.permutation(n_l2)
    _write_chase(d, buf, order)
    base = int(buf.data.ptr)
    steps = n_l2 // 32 - 1
    chase_k(d, base, order, 32, steps)  # loads every line into the L2
    l2 = {k: [chase_k(d, base, order, k, steps) for _ in range(repeats)] for k in LANES}
    # Through DRAM: fresh random lines per window, the L2 flushed before each chase.
    window_lines = cfg.chase_window_bytes // REQUEST_BYTES
    spacing = (buf.nbytes // REQUEST_BYTES) // cfg.chase_dram_windows
    n_dram = 8192
    dram: dict[int, list[float]] = {k: [] for k in LANES}
    for w in range(cfg.chase_dram_windows):
        lines = d.rng.permutation(window_lines)[:n_dram] + w * spacing
        _write_chase(d, buf, lines)
        for k in LANES:
            for _ in range(repeats):
                d.flush_l2()
                dram[k].append(chase_k(d, base, lines, k, n_dram // 32 - 1))
    for name, t in (("l2", l2), ("dram", dram)):
        med = {k: float(np.median(v)) for k, v in t.items()}
        out[name] = {
            "cycles_per_step": {str(k): med[k] for k in LANES},
            "samples": {str(k): t[k] for k in LANES},
            "theta_k": {str(k): (med[k] - med[1]) / slowest_extra(k) for k in LANES if k > 1},
            "sigma_k": {str(k): (med[k] - med[1]) / _normal_max(k) for k in LANES if k > 1},
        }
    out["sm_clock_mhz"] = d.prof.sm_clock_mhz
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res = measure(args.repeats)
    res["seconds"] = time.time() - t0
    res["command"] = "PYTHONPATH=src python3 scripts/device_slowest_line.py " + args.out
    res["provenance"] = stamp()
    (outdir / "slowest_line.json").write_text(json.dumps(res, indent=1))
    for name in ("l2", "dram"):
        print(name, res[name]["cycles_per_step"], "theta_k", res[name]["theta_k"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
