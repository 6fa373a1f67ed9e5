"""klaraptor.tune over a Numba kernel: the thread block is chosen per call from n.

    python examples/numba_saxpy.py

The first call builds the kernel once for this GPU (timing and Nsight Compute counters at
n/16 … n/2, with progress bars; later runs load the build from the store), then every call
launches with the block chosen for its n.
"""

import numpy as np
from numba import cuda

import klaraptor


@klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")
@cuda.jit
def saxpy(a, x, y, n):
    i = cuda.grid(1)
    if i < n:
        y[i] = a * x[i] + y[i]


if __name__ == "__main__":
    for n in (1 << 22, 1 << 24, 1 << 26):
        x = cuda.to_device(np.random.default_rng(0).random(n, dtype=np.float32))
        y = cuda.to_device(np.zeros(n, np.float32))
        saxpy(np.float32(2.0), x, y, n)
        grid, block, _ = saxpy.plan_for(np.float32(2.0), x, y, n)
        print(f"n = {n}: block {block}, grid {grid}")
