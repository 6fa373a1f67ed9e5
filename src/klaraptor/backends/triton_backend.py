"""Triton kernels: timing a launch, the compiled variant's resources, the device's shape.

A Triton config is measured as `triton.autotune` measures it: CUDA events around back-to-back
launches, the L2 flushed (a 256 MB buffer zeroed) before each sample, the median over the
samples. Under Triton's interpreter (`TRITON_INTERPRET=1`: NumPy on the CPU) the same protocol
runs with `time.perf_counter` and no flush, so the whole path is exercised without a GPU; those
times say nothing about a GPU.

Nothing here imports torch or triton at import time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klaraptor.core.errors import LaunchError, MissingDependencyError

__all__ = [
    "INTERPRETER_DEVICE",
    "CompiledResources",
    "Timing",
    "TritonDevice",
    "compiled_resources",
    "fix_interpreter_index",
    "interpreting",
    "time_launch",
    "triton_device",
]

INTERPRETER_DEVICE = "triton-interpreter-cpu"
_FLUSH_BYTES = 256 * 1024 * 1024  # larger than any current L2 (H200: 60 MB)


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the extra brings torch
        raise MissingDependencyError(
            "klaraptor.triton needs torch and triton: pip install 'klaraptor[triton]'"
        ) from exc
    return torch


@dataclass(frozen=True)
class TritonDevice:
    """What a build is keyed by and what the waves need: name, SM count, compute capability."""

    name: str
    sm_count: int
    cc: tuple[int, int]
    gpu: bool


def triton_device() -> TritonDevice:
    """The current CUDA device (torch's), or the interpreter as a device of one 'SM'."""
    if interpreting():
        return TritonDevice(INTERPRETER_DEVICE, 1, (9, 0), False)
    torch = _torch()
    if not torch.cuda.is_available():
        raise LaunchError(
            "no CUDA device for Triton: set TRITON_INTERPRET=1 to run kernels in Triton's "
            "CPU interpreter"
        )
    idx = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    return TritonDevice(
        str(props.name), int(props.multi_processor_count), (props.major, props.minor), True
    )


@dataclass(frozen=True)
class CompiledResources:
    """A compiled variant's registers per thread and shared memory per program (bytes)."""

    num_regs: int
    shared: int
    num_warps: int


def compiled_resources(kernel: Any, num_warps: int) -> CompiledResources | None:
    """Read a `CompiledKernel` (what a Triton launch returns); None under the interpreter."""
    if kernel is None:
        return None
    regs = getattr(kernel, "n_regs", None)
    meta = getattr(kernel, "metadata", None)
    shared = getattr(meta, "shared", None) if meta is not None else None
    if regs is None or shared is None:
        return None
    return CompiledResources(int(regs), int(shared), int(num_warps))


@dataclass(frozen=True)
class Timing:
    """Median milliseconds of the samples and their relative interquartile range."""

    median_ms: float
    spread: float
    samples: int


def _summary(samples: list[float]) -> Timing:
    med = statistics.median(samples)
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        spread = (q[2] - q[0]) / med if med > 0 else 0.0
    else:
        spread = float("nan")
    return Timing(float(med), float(spread), len(samples))


def time_launch(
    launch: Callable[[], Any],
    *,
    warmup_ms: float = 25.0,
    rep_ms: float = 100.0,
    max_samples: int = 1000,
) -> Timing:
    """Time `launch` (one kernel launch, with its pre-launch hooks) as `triton.testing.do_bench`
    sizes its runs: estimate one launch from five, then warm up for `warmup_ms` and sample for
    `rep_ms` (at least one sample each)."""
    if warmup_ms < 0 or rep_ms <= 0:
        raise LaunchError(f"timing needs warmup_ms >= 0 and rep_ms > 0, got {warmup_ms}, {rep_ms}")
    if interpreting():
        return _time_cpu(launch, warmup_ms, rep_ms, max_samples)
    torch = _torch()
    cache = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    launch()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        launch()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5.0, 1e-3)
    n_warmup = max(1, int(warmup_ms / estimate))
    n_rep = max(1, min(max_samples, int(rep_ms / estimate)))
    for _ in range(n_warmup):
        launch()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for s, e in zip(starts, ends):
        cache.zero_()
        s.record()
        launch()
        e.record()
    torch.cuda.synchronize()
    return _summary([s.elapsed_time(e) for s, e in zip(starts, ends)])


def _time_cpu(launch: Callable[[], Any], warmup_ms: float, rep_ms: float, cap: int) -> Timing:
    t0 = time.perf_counter()
    launch()
    estimate = max((time.perf_counter() - t0) * 1e3, 1e-3)
    for _ in range(int(warmup_ms / estimate)):
        launch()
    samples = []
    for _ in range(max(1, min(cap, int(rep_ms / estimate)))):
        t = time.perf_counter()
        launch()
        samples.append((time.perf_counter() - t) * 1e3)
    return _summary(samples)


_INDEX_FIXED = False


def fix_interpreter_index() -> None:
    """Let Triton's interpreter run loops over runtime integers under NumPy >= 2.4.

    Triton 3.6's interpreter gives its scalar tensors `__index__ = int(handle.data)`, and
    `handle.data` is a one-element array, which NumPy 2.4 no longer converts with `int()`
    ("only 0-dimensional arrays can be converted"): `for off in range(0, N, BLOCK)` then fails in
    every tutorial kernel that loops. This wraps the interpreter's tensor patching so `__index__`
    reads the one element instead. Only the interpreter's (temporary, per launch) patch changes;
    compiled GPU launches are untouched. Idempotent."""
    global _INDEX_FIXED
    if _INDEX_FIXED or not interpreting():
        return
    try:
        from triton.runtime import interpreter
    except ImportError:  # pragma: no cover - the extra brings triton
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:  # another Triton: nothing to fix here
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_lang_tensor
    _INDEX_FIXED = True
