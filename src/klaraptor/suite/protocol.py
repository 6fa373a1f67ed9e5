"""The training protocol of the benchmark suites: how the recorded H200 datasets were collected
(timing with the output check at every training size, counters at three of them), which the
models were validated on. `klaraptor demo` on a GPU builds with it; the evaluation plugin
(`klaraptor bench collect`) collects the suites' training points with it, then the ground truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from klaraptor.collect.collector import CollectOptions, CollectReport, collect
from klaraptor.spec import KernelSpec
from klaraptor.store import Store

TRAIN_OPTIONS = CollectOptions(
    counters=False,
    check=True,
    warmup=2,
    min_time_ms=5.0,
    min_repeats=5,
    max_repeats=30,
    target_sample_ms=0.2,
    ncu_batch=150,
)
# Counters at three of the training sizes (the per-configuration fits need three to validate).
NCU_SIZES = (512, 1024, 1536)
# 3DCONV has 231 candidate shapes; two counter sizes keep its ncu session short (joint fits).
NCU_SIZES_3D = (48, 96)


def ncu_sizes_for(spec: KernelSpec) -> tuple[int, ...]:
    """The counter sizes: the spec's `meta["ncu_sizes"]` where given, else the PolyBench ones."""
    if spec.meta.get("ncu_sizes"):
        return tuple(int(n) for n in spec.meta["ncu_sizes"])
    return NCU_SIZES_3D if spec.dim == 3 else NCU_SIZES


def collect_timing(
    spec: KernelSpec, store: Store, *, device: Any, progress: bool = True
) -> CollectReport:
    """Timing (with the output check) of every candidate at every training size."""
    sizes = [{"N": n} for n in spec.meta["train_sizes"]]
    return collect(
        spec, sizes, store=store, device=device, options=TRAIN_OPTIONS, progress=progress
    )


def collect_counters(
    spec: KernelSpec,
    store: Store,
    *,
    device: Any,
    sizes: Sequence[int] | None = None,
    progress: bool = True,
) -> CollectReport:
    """Hardware counters (one ncu session per batch) at the counter sizes (timed points only)."""
    sizes = list(sizes or ncu_sizes_for(spec))
    opts = CollectOptions(**{**TRAIN_OPTIONS.__dict__, "timing": False, "counters": True})
    return collect(
        spec, [{"N": n} for n in sizes], store=store, device=device, options=opts, progress=progress
    )
