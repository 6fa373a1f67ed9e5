"""klaraptor.tune over a kernel compiled and launched with cuda.core.

    python examples/cuda_core_saxpy.py

`compile_kernel` compiles with cuda.core's Program and keeps the source beside the kernel;
tuned calls launch with cuda.core's `launch(stream, LaunchConfig(...), kernel, *args)`. Arrays
(CuPy arrays here, torch tensors, anything with __cuda_array_interface__) are passed as their
device addresses; scalars need their C type (np.float32, np.int32), as with cuda.core.
"""

import cupy as cp
import numpy as np

import klaraptor
from klaraptor.frontends.cuda_core import compile_kernel

SRC = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""

if __name__ == "__main__":
    saxpy = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")(compile_kernel(SRC, "saxpy"))
    for n in (1 << 22, 1 << 24, 1 << 26):
        x, y = cp.random.rand(n, dtype=cp.float32), cp.zeros(n, cp.float32)
        saxpy(np.float32(2.0), x, y, np.int32(n))
        cp.cuda.Device().synchronize()
        print(
            f"n = {n}: (grid, block, smem) = {saxpy.plan_for(np.float32(2.0), x, y, np.int32(n))}"
        )
