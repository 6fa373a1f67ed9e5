"""Front-end tests: where there is no GPU, Numba's CUDA simulator runs the Numba kernels.

NUMBA_ENABLE_CUDASIM must be set before numba is first imported, so it is set here, at
collection, and only when no GPU is usable (on a GPU machine the real Numba runs them).
"""

from __future__ import annotations

import os
import sys

from klaraptor.backends.cupy_backend import gpu_problem

if "numba" not in sys.modules and gpu_problem() is not None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
