"""The bottleneck of one chosen configuration from a build's job (`klaraptor.assemble.bottleneck`
finds the job of a built kernel, for `klaraptor explain` and `klaraptor demo`).

Only the chosen block's counter points are fitted (a `KernelEmulator` over that one candidate),
so naming a bottleneck costs a fraction of a build: about 40 emulations of one configuration.
The emulation is calibrated as the model's (`calibrated_emulator`), on this block's own
training timings; one block's timings cannot rank blocks, so the L1 and L2 gaps stay as
measured (the model corrects them per kernel from every candidate's timings).
Any build of the kernel works (its training sizes and the store's points are used), whatever
model chose the block.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from klaraptor.core.errors import KlaraptorError
from klaraptor.models.base import HelperJob
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor.models.saake.model import calibrated_emulator
from klaraptor.models.saake.sensitivity import Sensitivity, analyse


def job_bottleneck(
    job: HelperJob, D: Any, block: tuple[int, int, int], *, regions: bool | None = None
) -> Sensitivity:
    """The sensitivity analysis of `block` at D from a build's job (`regions`: the per-region
    analysis, `sensitivity.analyse`'s argument; by default when no single resource stands
    out)."""
    block = tuple(int(v) for v in block)  # type: ignore[assignment]
    if block not in job.candidates:
        raise KlaraptorError(f"{job.spec.name}: block {block} is not a launchable candidate")
    em = KernelEmulator.from_job(replace(job, candidates=(block,)))
    # Calibrated on this block's own training timings (the model fits all candidates').
    em, _, _ = calibrated_emulator(em, job)
    values = D.values() if hasattr(D, "values") and callable(D.values) else tuple(D)
    return analyse(em, tuple(int(v) for v in values), 0, regions=regions)


__all__ = ["job_bottleneck"]
