
import sys, cupy as cp, numpy as np
src = r"""
extern "C" __global__ void mv_row(const float* A, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float s = 0.f; for (int j = 0; j < n; ++j) s += A[i * n + j] * x[j]; y[i] = s; }
}
extern "C" __global__ void conv2(const float* A, float* B, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  __shared__ float t[32];
  if (threadIdx.x == 0 && threadIdx.y == 0) t[0] = 1.f;
  __syncthreads();
  if (i > 0 && j > 0 && i < n - 1 && j < n - 1)
    B[i * n + j] = t[0] * (0.2f * A[(i - 1) * n + j] + 0.5f * A[i * n + j] + 0.3f * A[(i + 1) * n + j - 1]);
}
"""
m = cp.RawModule(code=src)
mv = m.get_function("mv_row"); cv = m.get_function("conv2")
npts = int(sys.argv[1])
rng = np.random.default_rng(0)
for p in range(npts):
    n = 256 * (1 + p % 4)
    A = cp.asarray(rng.random((n, n), dtype=np.float32)); x = cp.asarray(rng.random(n, dtype=np.float32)); y = cp.empty(n, cp.float32)
    B = cp.empty((n, n), cp.float32)
    bx = 32 * (1 + p % 8)
    mv(((n + bx - 1) // bx,), (bx,), (A, x, y, np.int32(n)))  # warm-up, not profiled
    cp.cuda.runtime.deviceSynchronize()
    if hasattr(cp.cuda, "nvtx"): cp.cuda.nvtx.RangePush(f"kp:{p}")
    cp.cuda.runtime.profilerStart()
    if p % 2 == 0:
        mv(((n + bx - 1) // bx,), (bx,), (A, x, y, np.int32(n)))
    else:
        b2 = (16, 1 + p % 8)
        cv(((n + 15) // 16, (n + b2[1] - 1) // b2[1]), b2, (A, B, np.int32(n)))
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStop()
    if hasattr(cp.cuda, "nvtx"): cp.cuda.nvtx.RangePop()
    print(f"LAUNCHED {p}", flush=True)
