"""The GPU backends: compile a kernel, read its attributes, launch it, time it with CUDA events
and check its outputs, through CuPy (`cupy_backend`) or Numba (`numba_backend`). Collection
measures through them and the runtime launches through them; CuPy and Numba are imported on
first use, never at import time. `gpu_problem()` is the one GPU check."""

from klaraptor.backends.cupy_backend import CupyBackend, gpu_available, gpu_problem

__all__ = ["CupyBackend", "gpu_available", "gpu_problem"]
