"""The bottleneck of one chosen configuration, for `klaraptor explain` and `klaraptor demo`.

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

from klaraptor.errors import KlaraptorError
from klaraptor.models.base import HelperJob
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor.models.saake.model import calibrated_emulator
from klaraptor.models.saake.sensitivity import Sensitivity, analyse, format_sensitivity


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


def kernel_bottleneck(
    kern: Any,
    D: Any,
    block: tuple[int, int, int] | None = None,
    *,
    regions: bool | None = None,
) -> Sensitivity:
    """The sensitivity of a built `klaraptor.build.Kernel` at D (its chosen block by default;
    `regions` as `job_bottleneck`)."""
    from klaraptor.build import make_job
    from klaraptor.device_profile import recorded_profile

    if kern.spec is None or kern.store is None or kern.report is None:
        raise KlaraptorError(
            f"{kern.name}: the bottleneck needs the kernel's spec, store and build report"
        )
    profile = kern.store.cached_profile(kern.device_key)
    if profile is None:
        profile = recorded_profile("h200")
        if profile.key != kern.device_key:
            raise KlaraptorError(
                f"{kern.name}: the store has no device profile for {kern.device_key!r}"
            )
    size = kern.spec.size(D) if not hasattr(D, "names") else D
    if block is None:
        block = kern.select(size).block
    job = make_job(kern.spec, kern.store, profile, kern.report.sizes)
    return job_bottleneck(job, size, block, regions=regions)


def store_bottleneck(
    spec: Any, store: Any, profile: Any, sizes: Any, D: Any, block: tuple[int, int, int]
) -> str:
    """The one-line headline for `block` at D from the store's training points at `sizes`
    (what `klaraptor demo` prints per kernel), or why the analysis could not run."""
    from klaraptor.build import make_job

    try:
        job = make_job(spec, store, profile, list(sizes))
        return job_bottleneck(job, D, block, regions=False).headline()
    except KlaraptorError as exc:
        return f"bottleneck: unavailable ({exc})"


def bottleneck_text(kern: Any, D: Any, *, regions: bool | None = None) -> str:
    """What `klaraptor explain` prints: the headline, what the named resources are, the largest
    sensitivities and, when no single resource stands out, the code region and resource that
    the per-region analysis names; or why the analysis could not run."""
    try:
        return format_sensitivity(kernel_bottleneck(kern, D, regions=regions))
    except KlaraptorError as exc:
        return f"bottleneck: unavailable ({exc})"


__all__ = ["bottleneck_text", "job_bottleneck", "kernel_bottleneck", "store_bottleneck"]
