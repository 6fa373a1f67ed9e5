"""klaraptor.tune over a CuPy RawKernel (RawModule.get_function(name) works the same).

python examples/cupy_saxpy.py
"""

import cupy as cp
import numpy as np

import klaraptor

SRC = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""

saxpy = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)")(cp.RawKernel(SRC, "saxpy"))

if __name__ == "__main__":
    for n in (1 << 22, 1 << 24, 1 << 26):
        x, y = cp.random.rand(n, dtype=cp.float32), cp.zeros(n, cp.float32)
        saxpy(np.float32(2.0), x, y, np.int32(n))
        print(
            f"n = {n}: (grid, block, smem) = {saxpy.plan_for(np.float32(2.0), x, y, np.int32(n))}"
        )
