"""The bottleneck of a built kernel's chosen configuration (SAAKE's sensitivity analysis), for
`klaraptor explain` and `klaraptor demo`: the build's job is made again from the store, and the
emulator of the chosen block is analysed (`klaraptor.models.saake.explain.job_bottleneck`)."""

from __future__ import annotations

from typing import Any

from klaraptor.assemble.api import make_job
from klaraptor.core.errors import KlaraptorError
from klaraptor.models.saake.explain import job_bottleneck
from klaraptor.models.saake.sensitivity import Sensitivity, format_sensitivity


def kernel_bottleneck(
    kern: Any,
    D: Any,
    block: tuple[int, int, int] | None = None,
    *,
    regions: bool | None = None,
) -> Sensitivity:
    """The sensitivity of a built `klaraptor.assemble.Kernel` at D (its chosen block by default;
    `regions` as `klaraptor.models.saake.explain.job_bottleneck`)."""
    from klaraptor.device.profile import recorded_profile

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


__all__ = ["bottleneck_text", "kernel_bottleneck", "store_bottleneck"]
