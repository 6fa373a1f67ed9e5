"""A PARTIAL check of SAAKE's bottlenecks against the recorded hardware counters.

The referee the issue asks for is Nsight Compute's speed-of-light breakdown at an evaluation
size (scripts/device_saake_sol.py measures it on the H200; `klaraptor bench saake --sol`
turns it into bottlenecks.json). The recorded datasets have no speed-of-light metrics and no
counters at evaluation sizes, but they do have, at the largest counter (training) size, the
raw counts that a utilisation can be computed from (`referee.counter_units`: issue, DRAM, L2,
L1/TEX, and for the Rodinia-style kernels the FMA/ALU/FP64/XU pipes). This module judges
SAAKE's bottleneck against the busiest of those units:

- per kernel, D = the largest size with counters; the block is SAAKE's choice at D among the
  blocks with counters there (the emulator's fastest; calibration is monotone, so the
  calibrated model chooses the same);
- SAAKE's sensitivity analysis of that block at D names the bottleneck; the counters' busiest
  unit (percent of the profile's measured peak) is the referee's.

Weaknesses, stated in bottlenecks_counters.json too: D is a training size (its counters went
into the trip counts and memory fits), the units' peaks are the microbenchmarks' gaps (the
same numbers the emulator uses), and L1/TEX wavefronts are a lower bound for strided access.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from klaraptor.suite.recorded import RecordedDataset, recorded_suites
from klaraptor_bench.dataset import each_recorded_kernel

PARTIAL_NOTE = (
    "partial referee from recorded counters at the largest counter (training) size, NOT Nsight "
    "Compute's speed of light at an evaluation size; unit peaks are the device profile's "
    "measured gaps; L1/TEX wavefronts are a lower bound for strided access; pipe units only "
    "where per-pipe counters were collected (Rodinia-style set)"
)


def judge_kernel(data: RecordedDataset, store: Any, name: str) -> dict[str, Any]:
    """SAAKE's bottleneck and the counters' busiest unit for one kernel."""
    from klaraptor import suite
    from klaraptor.assemble import make_job
    from klaraptor.models.saake.emulator import KernelEmulator
    from klaraptor.models.saake.model import calibrated_emulator
    from klaraptor.models.saake.sensitivity import analyse
    from klaraptor_bench.referee import counter_units, judge_units

    spec = suite.get(name)
    kd = data.kernels[name]
    profile = data.profile()
    nd = len(spec.data_names)
    rows = [r for r in kd.ncu if r[-1]]
    top = max(tuple(r[:nd]) for r in rows)
    raw_of = {tuple(int(v) for v in r[nd : nd + 3]): r[-1] for r in rows if tuple(r[:nd]) == top}
    job = make_job(spec, store, profile, [spec.size(n) for n in spec.meta["train_sizes"]])
    em, _, _ = calibrated_emulator(KernelEmulator.from_job(job), job)
    js = [j for j, b in enumerate(em.candidates) if b in raw_of]
    if not js:
        return {"kernel": name, "status": "no candidate has counters at D", "match": None}
    cyc = {j: em.cycles(top, j) for j in js}
    j = min(js, key=cyc.__getitem__)
    if not math.isfinite(cyc[j]):
        return {"kernel": name, "status": "no launchable candidate emulated", "match": None}
    sens = analyse(em, top, j)
    pct = counter_units(raw_of[em.candidates[j]], _with_gaps(profile))
    row = {
        "kernel": name,
        "D": list(top),
        "block": list(em.candidates[j]),
        "saake_bottleneck": sens.bottleneck,
        "saake_mode": sens.mode,
        "saake_stands_out": sens.stands_out,
        "saake_headline": sens.headline(),
    }
    row.update(judge_units(sens.bottleneck, sens.mode, pct))
    return row


def _with_gaps(profile: Any) -> Any:
    """The profile, or the recorded one of the same GPU when it predates the resource
    microbenchmarks (as `emulator.resource_params` does)."""
    from klaraptor.device.profile import recorded_profile

    if getattr(profile, "gap_issue_cycles", None) is not None:
        return profile
    ref = recorded_profile("h200")
    return ref if ref.key == profile.key else profile


def judge_all(
    datasets: Sequence[RecordedDataset],
    kernels: Sequence[str] | None = None,
    console: Any | None = None,
) -> dict[str, Any]:
    from klaraptor_bench.referee import agreement

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for data, store, name in each_recorded_kernel(datasets, kernels, Path(tmp), "r"):
            row = judge_kernel(data, store, name)
            rows.append(row)
            if console is not None:
                console.print(
                    f"  {name:32s} saake {row.get('saake_bottleneck')} "
                    f"({row.get('saake_mode')}) counters' top {row.get('ncu_top_unit')} "
                    f"{row.get('ncu_top_pct')} % match={row.get('match')}",
                    markup=False,
                )
    return {**agreement(rows), "referee": PARTIAL_NOTE, "kernels": rows}


def write_counter_referee(out: Path, console: Any | None = None) -> dict[str, Any]:
    """bottlenecks_counters.json in `out` (all 44 recorded kernels)."""
    from klaraptor.core.provenance import stamp

    result = judge_all(recorded_suites(), console=console)
    result["provenance"] = stamp(f"klaraptor bench saake --counters --out {out}")
    (out / "bottlenecks_counters.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


__all__ = ["PARTIAL_NOTE", "judge_all", "judge_kernel", "write_counter_referee"]
