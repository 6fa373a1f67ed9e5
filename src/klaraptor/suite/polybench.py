"""The 15 PolyBench/GPU-style benchmarks of the KLARAPTOR thesis (Ch. 6, Tables 6.1/6.2).

The kernels are written for this project from the algorithms; they follow the PolyBench/GPU
parallelisation (one thread per output element or per row/column, no tiling), because that naive
mapping is what makes the block shape matter and what the thesis evaluated.

Store names are `polybench.<bench>.<kernel>`, e.g. `polybench.gemm.gemm`, `polybench.atax.k1`;
a name component cannot start with a digit, so 2MM, 3MM, 2DCONV, 3DCONV are `mm2`, `mm3`,
`conv2d`, `conv3d`. Multi-kernel benchmarks number their kernels k1, k2, ... in launch order.

Conventions (every kernel):
- float32 data, row-major arrays; one data parameter N (square problems), read from the kernel's
  last argument, an int32. Indices are 32-bit ints, so N is bounded by N*N < 2**31 (N^3 for 3DCONV).
- 2D kernels map x to the column (contiguous) index j and y to the row index i; 1D kernels use x
  only; the 3D kernel maps x, y, z to the three axes, contiguous first.
- The grid is ceil(N / b) along every used axis and each thread checks its bounds, so any block
  shape and any N are safe.
- `make_args(D, rng)` builds CuPy arrays filled with random values (never zeros, so an output a
  kernel fails to write is caught) and NumPy scalars; `make_args(D, rng, device=False)` builds the
  same arguments as NumPy arrays (the CPU tests use it).
- `reference(D, host_args)` recomputes the outputs with NumPy in float64 and never mutates its input.

`meta` of every spec:
- `benchmark`: the thesis' benchmark name (Table 6.2), `complexity`: work per launch ("N", "N^2", "N^3");
- `train_sizes` / `eval_sizes`: values of N (training strictly below evaluation);
  `retired_eval_sizes`: former evaluation sizes still in the recorded data, not scored;
- `flops` / `min_bytes`: per-launch work estimates as expressions over N in the spec grammar:
  arithmetic operations, and compulsory DRAM traffic (each array touched once; caches ignored);
- `overwrites`: the output argument indices the kernel writes entirely without reading (a check
  may poison them first); outputs not listed are updated in place or only partly written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from klaraptor.core.types import Block
from klaraptor.spec import Data, DataParam, KernelSpec
from klaraptor.suite.args import launch_args

ArgsFactory = Callable[..., tuple[Any, ...]]
Reference = Callable[[Data, tuple[Any, ...]], dict[int, np.ndarray]]

# Scalars of the BLAS-like kernels. beta < 1 keeps in-place updates bounded when a kernel is re-run
# many times on the same arrays (timing repeats).
ALPHA = 1.5
BETA = 0.5

TRAIN_SIZES = (256, 512, 768, 1024, 1536)
EVAL_SIZES = (2048, 4096, 8192)
# 3DCONV works on N^3 volumes (512^3 floats = 537 MB per array). Its evaluation sizes are the
# powers of two up to 512, as the thesis's Table 6.2.
TRAIN_SIZES_3D = (32, 48, 64, 96)
EVAL_SIZES_3D = (128, 256, 512)
RETIRED_EVAL_SIZES_3D = (384,)  # measured as an evaluation size before 512 was

N_MAX_2D = 46340  # largest N with N * N < 2**31 (32-bit indexing)
N_MAX_3D = 1290  # largest N with N ** 3 < 2**31

BLOCK_1D: Block = (256, 1, 1)
BLOCK_2D: Block = (32, 8, 1)
# PolyBench/GPU's 3DCONV uses a (32, 8) block and loops over the outer axis on the host; our
# kernel covers that axis with the grid's z dimension and keeps the same default block.
BLOCK_3D: Block = (32, 8, 1)

GRID_1D = ("ceil(N / bx)", "1", "1")
GRID_2D = ("ceil(N / bx)", "ceil(N / by)", "1")
GRID_3D = ("ceil(N / bx)", "ceil(N / by)", "ceil(N / bz)")

# Relative tolerances of the output check. Sums of N float32 terms have a worst-case relative
# error of about N * 2**-24 (5e-4 at N = 8192); stencils and element-wise updates combine a few.
RTOL_SUM = 1e-3
RTOL_FEW = 1e-5

# CORR: a column whose standard deviation is below this is treated as constant (scaled by 1).
CORR_EPS = 1e-4

# FDTD-2D: length of the excitation series `fict` and the fixed time step of the measured launch.
FDTD_TMAX = 500
FDTD_T = FDTD_TMAX // 2

# Fixed, non-symmetric stencil weights (dyadic, so exact in float32). Non-symmetric so that a
# swapped axis in a kernel shows up in the output check.
CONV2D_W = np.array([[1.0, -2.0, 3.0], [-4.0, 8.0, 5.0], [6.0, 7.0, -1.0]]) / 16.0
CONV3D_W = (((np.arange(27) * 5) % 11) - 4.0).reshape(3, 3, 3) / 8.0


def gramschm_k(n: int) -> int:
    """The column step GRAMSCHM's kernels run at: the middle one, k = N // 2.

    The algorithm runs K1..K3 for k = 0..N-1; K3's work shrinks with k (N - k - 1 columns), so the
    middle step is the representative single launch we time and model. k is an int argument of
    the kernels, not a data parameter.
    """
    return n // 2


def _c_floats(values: np.ndarray) -> str:
    """A C initializer list for an array of floats, e.g. {{0.5f, -1.0f}, {...}}."""
    if values.ndim == 0:
        return f"{float(values)!r}f"
    return "{" + ", ".join(_c_floats(v) for v in values) + "}"


# ---------------------------------------------------------------------------------------------
# CUDA sources, one per benchmark
# ---------------------------------------------------------------------------------------------

SRC_2DCONV = f"""
// 2DCONV: B = 3x3 convolution of A with fixed weights; border pixels of B are 0.
__constant__ float CONV2D_W[3][3] = {_c_floats(CONV2D_W)};

// x -> column j: the three row reads and the write are coalesced.
extern "C" __global__ void conv2d(const float* __restrict__ A, float* __restrict__ B, int N)
{{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    if (i > 0 && i < N - 1 && j > 0 && j < N - 1) {{
        #pragma unroll
        for (int di = -1; di <= 1; ++di) {{
            #pragma unroll
            for (int dj = -1; dj <= 1; ++dj) {{
                acc += CONV2D_W[di + 1][dj + 1] * A[(i + di) * N + (j + dj)];
            }}
        }}
    }}
    B[i * N + j] = acc;
}}
"""

SRC_3DCONV = f"""
// 3DCONV: B = 3x3x3 convolution of the N^3 volume A with fixed weights; border voxels of B are 0.
__constant__ float CONV3D_W[3][3][3] = {_c_floats(CONV3D_W)};

// x -> k (contiguous axis, coalesced), y -> j, z -> i: a genuine 3D block.
extern "C" __global__ void conv3d(const float* __restrict__ A, float* __restrict__ B, int N)
{{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= N || j >= N || k >= N) return;
    float acc = 0.0f;
    if (i > 0 && i < N - 1 && j > 0 && j < N - 1 && k > 0 && k < N - 1) {{
        #pragma unroll
        for (int di = -1; di <= 1; ++di) {{
            #pragma unroll
            for (int dj = -1; dj <= 1; ++dj) {{
                #pragma unroll
                for (int dk = -1; dk <= 1; ++dk) {{
                    acc += CONV3D_W[di + 1][dj + 1][dk + 1]
                         * A[((i + di) * N + (j + dj)) * N + (k + dk)];
                }}
            }}
        }}
    }}
    B[(i * N + j) * N + k] = acc;
}}
"""

SRC_2MM = """
// 2MM: tmp = alpha * A * B, then D = beta * D + tmp * C. One thread per output element.

// x -> column j: B[k][j] is coalesced, A[i][k] is one broadcast per row of the block.
extern "C" __global__ void mm2_k1(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ tmp, float alpha, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[k * N + j];
    tmp[i * N + j] = alpha * acc;
}

// x -> column j: C[k][j] is coalesced, tmp[i][k] is a broadcast; D is updated in place.
extern "C" __global__ void mm2_k2(const float* __restrict__ tmp, const float* __restrict__ C,
                                  float* __restrict__ D, float beta, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += tmp[i * N + k] * C[k * N + j];
    D[i * N + j] = beta * D[i * N + j] + acc;
}
"""

SRC_3MM = """
// 3MM: E = A * B, F = C * D, G = E * F. Three kernels (distinct names for the profiler) sharing
// one body: Z[i][j] = sum_k X[i][k] * Y[k][j], one thread per output element.

// x -> column j: Y[k][j] is coalesced, X[i][k] is one broadcast per row of the block.
__device__ __forceinline__ void matmul_element(const float* __restrict__ X,
                                               const float* __restrict__ Y,
                                               float* __restrict__ Z, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += X[i * N + k] * Y[k * N + j];
    Z[i * N + j] = acc;
}

extern "C" __global__ void mm3_k1(const float* __restrict__ A, const float* __restrict__ B,
                                  float* __restrict__ E, int N)
{
    matmul_element(A, B, E, N);
}

extern "C" __global__ void mm3_k2(const float* __restrict__ C, const float* __restrict__ D,
                                  float* __restrict__ F, int N)
{
    matmul_element(C, D, F, N);
}

extern "C" __global__ void mm3_k3(const float* __restrict__ E, const float* __restrict__ F,
                                  float* __restrict__ G, int N)
{
    matmul_element(E, F, G, N);
}
"""

SRC_GEMM = """
// GEMM: C = alpha * A * B + beta * C, one thread per element of C (updated in place).
// x -> column j: B[k][j] is coalesced, A[i][k] is one broadcast per row of the block.
extern "C" __global__ void gemm(const float* __restrict__ A, const float* __restrict__ B,
                                float* __restrict__ C, float alpha, float beta, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[k * N + j];
    C[i * N + j] = alpha * acc + beta * C[i * N + j];
}
"""

SRC_SYRK = """
// SYRK: C = alpha * A * A^T + beta * C (full matrix), one thread per element of C (in place).
// x -> column j: A[j][k] is strided by N across a warp (uncoalesced), A[i][k] is a broadcast.
extern "C" __global__ void syrk(const float* __restrict__ A, float* __restrict__ C,
                                float alpha, float beta, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * A[j * N + k];
    C[i * N + j] = alpha * acc + beta * C[i * N + j];
}
"""

SRC_SYR2K = """
// SYR2K: C = alpha * (A * B^T + B * A^T) + beta * C (full matrix), one thread per element (in place).
// x -> column j: A[j][k], B[j][k] are strided by N across a warp (uncoalesced), row i is a broadcast.
extern "C" __global__ void syr2k(const float* __restrict__ A, const float* __restrict__ B,
                                 float* __restrict__ C, float alpha, float beta, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < N; ++k) acc += A[i * N + k] * B[j * N + k] + B[i * N + k] * A[j * N + k];
    C[i * N + j] = alpha * acc + beta * C[i * N + j];
}
"""

SRC_ATAX = """
// ATAX: y = A^T (A x), as tmp = A x then y = A^T tmp.

// One thread per row i: A[i][j] is strided by N across a warp (uncoalesced), x[j] a broadcast.
extern "C" __global__ void atax_k1(const float* __restrict__ A, const float* __restrict__ x,
                                   float* __restrict__ tmp, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float acc = 0.0f;
    for (int j = 0; j < N; ++j) acc += A[i * N + j] * x[j];
    tmp[i] = acc;
}

// One thread per column j: A[i][j] is coalesced, tmp[i] a broadcast.
extern "C" __global__ void atax_k2(const float* __restrict__ A, const float* __restrict__ tmp,
                                   float* __restrict__ y, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) acc += A[i * N + j] * tmp[i];
    y[j] = acc;
}
"""

SRC_BICG = """
// BICG: s = A^T r and q = A p (the two products of the BiCG method).

// One thread per column j: A[i][j] is coalesced, r[i] a broadcast.
extern "C" __global__ void bicg_k1(const float* __restrict__ A, const float* __restrict__ r,
                                   float* __restrict__ s, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) acc += r[i] * A[i * N + j];
    s[j] = acc;
}

// One thread per row i: A[i][j] is strided by N across a warp (uncoalesced), p[j] a broadcast.
extern "C" __global__ void bicg_k2(const float* __restrict__ A, const float* __restrict__ p,
                                   float* __restrict__ q, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float acc = 0.0f;
    for (int j = 0; j < N; ++j) acc += A[i * N + j] * p[j];
    q[i] = acc;
}
"""

SRC_MVT = """
// MVT: x1 += A y1 and x2 += A^T y2 (both accumulate in place).

// One thread per row i: A[i][j] is strided by N across a warp (uncoalesced), y1[j] a broadcast.
extern "C" __global__ void mvt_k1(const float* __restrict__ A, const float* __restrict__ y1,
                                  float* __restrict__ x1, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float acc = x1[i];
    for (int j = 0; j < N; ++j) acc += A[i * N + j] * y1[j];
    x1[i] = acc;
}

// One thread per column i of A: A[j][i] is coalesced, y2[j] a broadcast.
extern "C" __global__ void mvt_k2(const float* __restrict__ A, const float* __restrict__ y2,
                                  float* __restrict__ x2, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float acc = x2[i];
    for (int j = 0; j < N; ++j) acc += A[j * N + i] * y2[j];
    x2[i] = acc;
}
"""

SRC_GESUMMV = """
// GESUMMV: y = alpha * A x + beta * B x.
// One thread per row i: A[i][j], B[i][j] are strided by N across a warp (uncoalesced), x[j] a broadcast.
extern "C" __global__ void gesummv(const float* __restrict__ A, const float* __restrict__ B,
                                   const float* __restrict__ x, float* __restrict__ y,
                                   float alpha, float beta, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float ax = 0.0f;
    float bx = 0.0f;
    for (int j = 0; j < N; ++j) {
        ax += A[i * N + j] * x[j];
        bx += B[i * N + j] * x[j];
    }
    y[i] = alpha * ax + beta * bx;
}
"""

SRC_CORR = (
    f"#define CORR_EPS {CORR_EPS!r}f\n"
    + """
// CORR: the correlation matrix of the N columns (variables) of data (N rows = observations).

// K1, one thread per column j: column means; data[i][j] is coalesced.
extern "C" __global__ void corr_k1(const float* __restrict__ data, float* __restrict__ mean, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) acc += data[i * N + j];
    mean[j] = acc / (float)N;
}

// K2, one thread per column j: column standard deviations; data[i][j] is coalesced.
extern "C" __global__ void corr_k2(const float* __restrict__ data, const float* __restrict__ mean,
                                   float* __restrict__ stddev, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    const float m = mean[j];
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) {
        const float d = data[i * N + j] - m;
        acc += d * d;
    }
    const float s = sqrtf(acc / (float)N);
    stddev[j] = s <= CORR_EPS ? 1.0f : s;
}

// K3, one thread per element (x -> column j, coalesced): center and scale data in place.
extern "C" __global__ void corr_k3(float* __restrict__ data, const float* __restrict__ mean,
                                   const float* __restrict__ stddev, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    data[i * N + j] = (data[i * N + j] - mean[j]) / (sqrtf((float)N) * stddev[j]);
}

// K4, one thread per column j1 (triangular work: N - j1 - 1 columns j2 > j1):
// corr[j1][j2] = corr[j2][j1] = sum_i data[i][j1] * data[i][j2], and corr[j1][j1] = 1.
// Reads of data[i][j1] and data[i][j2] are coalesced; the row write corr[j1][j2] is strided by N
// across a warp (uncoalesced), the column write corr[j2][j1] is coalesced.
extern "C" __global__ void corr_k4(const float* __restrict__ data, float* __restrict__ corr, int N)
{
    const int j1 = blockIdx.x * blockDim.x + threadIdx.x;
    if (j1 >= N) return;
    corr[j1 * N + j1] = 1.0f;
    for (int j2 = j1 + 1; j2 < N; ++j2) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i) acc += data[i * N + j1] * data[i * N + j2];
        corr[j1 * N + j2] = acc;
        corr[j2 * N + j1] = acc;
    }
}
"""
)

SRC_COVAR = """
// COVAR: the sample covariance matrix of the N columns (variables) of data (N rows).

// K1, one thread per column j: column means; data[i][j] is coalesced.
extern "C" __global__ void covar_k1(const float* __restrict__ data, float* __restrict__ mean, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) acc += data[i * N + j];
    mean[j] = acc / (float)N;
}

// K2, one thread per element (x -> column j, coalesced): center data in place.
extern "C" __global__ void covar_k2(float* __restrict__ data, const float* __restrict__ mean, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    data[i * N + j] -= mean[j];
}

// K3, one thread per column j1 (triangular work: columns j2 >= j1):
// cov[j1][j2] = cov[j2][j1] = sum_i data[i][j1] * data[i][j2] / (N - 1).
// Reads are coalesced; the row write cov[j1][j2] is strided by N (uncoalesced), the column
// write cov[j2][j1] is coalesced.
extern "C" __global__ void covar_k3(const float* __restrict__ data, float* __restrict__ cov, int N)
{
    const int j1 = blockIdx.x * blockDim.x + threadIdx.x;
    if (j1 >= N) return;
    const float scale = 1.0f / (float)(N - 1);
    for (int j2 = j1; j2 < N; ++j2) {
        float acc = 0.0f;
        for (int i = 0; i < N; ++i) acc += data[i * N + j1] * data[i * N + j2];
        cov[j1 * N + j2] = acc * scale;
        cov[j2 * N + j1] = acc * scale;
    }
}
"""

SRC_FDTD2D = """
// FDTD-2D: one time step t of the 2D Yee scheme, as three kernels (each updates in place).
// All three: x -> column j (coalesced), y -> row i.

// K1: ey[0][j] = fict[t]; ey[i][j] -= 0.5 * (hz[i][j] - hz[i-1][j]) for i > 0.
extern "C" __global__ void fdtd2d_k1(float* __restrict__ ey, const float* __restrict__ hz,
                                     const float* __restrict__ fict, int t, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    if (i == 0) {
        ey[j] = fict[t];
    } else {
        ey[i * N + j] -= 0.5f * (hz[i * N + j] - hz[(i - 1) * N + j]);
    }
}

// K2: ex[i][j] -= 0.5 * (hz[i][j] - hz[i][j-1]) for j > 0.
extern "C" __global__ void fdtd2d_k2(float* __restrict__ ex, const float* __restrict__ hz, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N || j == 0) return;
    ex[i * N + j] -= 0.5f * (hz[i * N + j] - hz[i * N + j - 1]);
}

// K3: hz[i][j] -= 0.7 * (ex[i][j+1] - ex[i][j] + ey[i+1][j] - ey[i][j]) for i, j < N - 1.
extern "C" __global__ void fdtd2d_k3(float* __restrict__ hz, const float* __restrict__ ex,
                                     const float* __restrict__ ey, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N - 1 || j >= N - 1) return;
    hz[i * N + j] -= 0.7f * (ex[i * N + j + 1] - ex[i * N + j]
                             + ey[(i + 1) * N + j] - ey[i * N + j]);
}
"""

SRC_GRAMSCHM = """
// GRAMSCHM: column step k of modified Gram-Schmidt (A = Q R), as three kernels.

// K1, a single block: r[k][k] = ||a[:, k]||. Each thread sums a strided part of column k
// (reads strided by N, uncoalesced), then a shared-memory tree reduction that is correct for any
// blockDim.x: each round folds the upper half [s, n) onto [0, n - s) with s = ceil(n / 2).
// Dynamic shared memory: blockDim.x floats.
extern "C" __global__ void gramschm_k1(const float* __restrict__ a, float* __restrict__ r,
                                       int k, int N)
{
    extern __shared__ float partial[];
    const unsigned tid = threadIdx.x;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) {
        const float v = a[i * N + k];
        acc += v * v;
    }
    partial[tid] = acc;
    __syncthreads();
    for (unsigned n = blockDim.x; n > 1;) {
        const unsigned s = (n + 1) / 2;
        if (tid < n - s) partial[tid] += partial[tid + s];
        __syncthreads();
        n = s;
    }
    if (tid == 0) r[k * N + k] = sqrtf(partial[0]);
}

// K2, one thread per row i: q[i][k] = a[i][k] / r[k][k]; column accesses strided by N (uncoalesced).
extern "C" __global__ void gramschm_k2(const float* __restrict__ a, const float* __restrict__ r,
                                       float* __restrict__ q, int k, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    q[i * N + k] = a[i * N + k] / r[k * N + k];
}

// K3, one thread per column j > k: r[k][j] = q[:, k] . a[:, j], then a[:, j] -= q[:, k] * r[k][j].
// a[i][j] is coalesced across a warp, q[i][k] a broadcast; threads with j <= k exit at once.
extern "C" __global__ void gramschm_k3(float* __restrict__ a, float* __restrict__ r,
                                       const float* __restrict__ q, int k, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j <= k || j >= N) return;
    float acc = 0.0f;
    for (int i = 0; i < N; ++i) acc += q[i * N + k] * a[i * N + j];
    r[k * N + j] = acc;
    for (int i = 0; i < N; ++i) a[i * N + j] -= q[i * N + k] * acc;
}
"""


# ---------------------------------------------------------------------------------------------
# Argument factories: make_args(D, rng) -> CuPy arrays; device=False gives NumPy arrays.
# ---------------------------------------------------------------------------------------------


def _mat(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random((n, n), dtype=np.float32)


def _vec(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n, dtype=np.float32)


def conv2d_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, N): N x N image A, output B."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _mat(rng, n), np.int32(n))


def conv3d_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, N): N^3 volume A, output B."""
    n = D["N"]
    a = rng.random((n, n, n), dtype=np.float32)
    b = rng.random((n, n, n), dtype=np.float32)
    return launch_args(device, a, b, np.int32(n))


def mm2_k1_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, tmp, alpha, N)."""
    n = D["N"]
    return launch_args(
        device, _mat(rng, n), _mat(rng, n), _mat(rng, n), np.float32(ALPHA), np.int32(n)
    )


def mm2_k2_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(tmp, C, D, beta, N)."""
    n = D["N"]
    return launch_args(
        device, _mat(rng, n), _mat(rng, n), _mat(rng, n), np.float32(BETA), np.int32(n)
    )


def matmul_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(X, Y, Z, N) for Z = X * Y (the three 3MM kernels)."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _mat(rng, n), _mat(rng, n), np.int32(n))


def gemm_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, C, alpha, beta, N)."""
    n = D["N"]
    mats = (_mat(rng, n), _mat(rng, n), _mat(rng, n))
    return launch_args(device, *mats, np.float32(ALPHA), np.float32(BETA), np.int32(n))


def syrk_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, C, alpha, beta, N)."""
    n = D["N"]
    return launch_args(
        device, _mat(rng, n), _mat(rng, n), np.float32(ALPHA), np.float32(BETA), np.int32(n)
    )


def syr2k_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, C, alpha, beta, N)."""
    return gemm_args(D, rng, device=device)


def matvec_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, v, w, N): matrix, input vector, output vector (ATAX, BICG, MVT kernels)."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _vec(rng, n), _vec(rng, n), np.int32(n))


def gesummv_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, x, y, alpha, beta, N)."""
    n = D["N"]
    arrays = (_mat(rng, n), _mat(rng, n), _vec(rng, n), _vec(rng, n))
    return launch_args(device, *arrays, np.float32(ALPHA), np.float32(BETA), np.int32(n))


def column_mean_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, mean, N): mean is the output (CORR K1, COVAR K1)."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _vec(rng, n), np.int32(n))


def corr_std_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, mean, stddev, N): mean consistent with data, stddev the output."""
    n = D["N"]
    data = _mat(rng, n)
    mean = data.mean(axis=0, dtype=np.float64).astype(np.float32)
    return launch_args(device, data, mean, _vec(rng, n), np.int32(n))


def corr_scale_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, mean, stddev, N): mean and stddev consistent with data, which is scaled in place."""
    n = D["N"]
    data = _mat(rng, n)
    mean = data.mean(axis=0, dtype=np.float64)
    std = np.sqrt(((data - mean) ** 2).mean(axis=0))
    std = np.where(std <= CORR_EPS, 1.0, std)
    return launch_args(device, data, mean.astype(np.float32), std.astype(np.float32), np.int32(n))


def corr_matrix_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, corr, N): data already centered and scaled as CORR K3 leaves it; corr the output."""
    n = D["N"]
    data = _mat(rng, n).astype(np.float64)
    data -= data.mean(axis=0)
    data /= np.sqrt(n) * np.maximum(data.std(axis=0), CORR_EPS)
    return launch_args(device, data.astype(np.float32), _mat(rng, n), np.int32(n))


def covar_center_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, mean, N): mean consistent with data, which is centered in place."""
    n = D["N"]
    data = _mat(rng, n)
    mean = data.mean(axis=0, dtype=np.float64).astype(np.float32)
    return launch_args(device, data, mean, np.int32(n))


def covar_matrix_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, cov, N): data already centered as COVAR K2 leaves it; cov the output."""
    n = D["N"]
    data = _mat(rng, n)
    data -= data.mean(axis=0, dtype=np.float64).astype(np.float32)
    return launch_args(device, data, _mat(rng, n), np.int32(n))


def fdtd2d_k1_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(ey, hz, fict, t, N) with t = FDTD_T."""
    n = D["N"]
    fict = _vec(rng, FDTD_TMAX)
    return launch_args(device, _mat(rng, n), _mat(rng, n), fict, np.int32(FDTD_T), np.int32(n))


def fdtd2d_k2_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(ex, hz, N)."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _mat(rng, n), np.int32(n))


def fdtd2d_k3_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(hz, ex, ey, N)."""
    n = D["N"]
    return launch_args(device, _mat(rng, n), _mat(rng, n), _mat(rng, n), np.int32(n))


def _gramschm_state(
    D: Data, rng: np.random.Generator, *, with_norm: bool, with_q: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Random a, r, q for column step k; r[k][k] and q[:, k] consistent with a when asked."""
    n = D["N"]
    k = gramschm_k(n)
    a, r, q = _mat(rng, n), _mat(rng, n), _mat(rng, n)
    norm = np.sqrt((a[:, k].astype(np.float64) ** 2).sum())
    if with_norm:
        r[k, k] = norm
    if with_q:
        q[:, k] = a[:, k] / norm
    return a, r, q, k


def gramschm_k1_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(a, r, k, N) with k = N // 2; r[k][k] is the output."""
    a, r, _, k = _gramschm_state(D, rng, with_norm=False, with_q=False)
    return launch_args(device, a, r, np.int32(k), np.int32(D["N"]))


def gramschm_k2_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(a, r, q, k, N) with k = N // 2, r[k][k] = ||a[:, k]||; q[:, k] is the output."""
    a, r, q, k = _gramschm_state(D, rng, with_norm=True, with_q=False)
    return launch_args(device, a, r, q, np.int32(k), np.int32(D["N"]))


def gramschm_k3_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(a, r, q, k, N) with k = N // 2 and q[:, k] = a[:, k] / ||a[:, k]|| (K1 and K2 done)."""
    a, r, q, k = _gramschm_state(D, rng, with_norm=True, with_q=True)
    return launch_args(device, a, r, q, np.int32(k), np.int32(D["N"]))


# ---------------------------------------------------------------------------------------------
# References: NumPy in float64 on host copies of the inputs -> {argument index: expected output}.
# ---------------------------------------------------------------------------------------------


def _f64(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float64)  # always a copy


def conv2d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    n = a.shape[0]
    w = CONV2D_W
    b = np.zeros_like(a)
    if n >= 3:
        b[1:-1, 1:-1] = sum(
            w[di, dj] * a[di : n - 2 + di, dj : n - 2 + dj] for di in range(3) for dj in range(3)
        )
    return {1: b}


def conv3d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    n = a.shape[0]
    w = CONV3D_W
    b = np.zeros_like(a)
    if n >= 3:
        b[1:-1, 1:-1, 1:-1] = sum(
            w[di, dj, dk] * a[di : n - 2 + di, dj : n - 2 + dj, dk : n - 2 + dk]
            for di in range(3)
            for dj in range(3)
            for dk in range(3)
        )
    return {1: b}


def mm2_k1_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: float(h[3]) * (_f64(h[0]) @ _f64(h[1]))}


def mm2_k2_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: float(h[3]) * _f64(h[2]) + _f64(h[0]) @ _f64(h[1])}


def matmul_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: _f64(h[0]) @ _f64(h[1])}


def gemm_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, c = _f64(h[0]), _f64(h[1]), _f64(h[2])
    return {2: float(h[3]) * (a @ b) + float(h[4]) * c}


def syrk_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, c = _f64(h[0]), _f64(h[1])
    return {1: float(h[2]) * (a @ a.T) + float(h[3]) * c}


def syr2k_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, c = _f64(h[0]), _f64(h[1]), _f64(h[2])
    return {2: float(h[3]) * (a @ b.T + b @ a.T) + float(h[4]) * c}


def matvec_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    """w = A v (ATAX K1, BICG K2)."""
    return {2: _f64(h[0]) @ _f64(h[1])}


def matvec_t_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    """w = A^T v (ATAX K2, BICG K1)."""
    return {2: _f64(h[0]).T @ _f64(h[1])}


def mvt_k1_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: _f64(h[2]) + _f64(h[0]) @ _f64(h[1])}


def mvt_k2_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: _f64(h[2]) + _f64(h[0]).T @ _f64(h[1])}


def gesummv_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, b, x = _f64(h[0]), _f64(h[1]), _f64(h[2])
    return {3: float(h[4]) * (a @ x) + float(h[5]) * (b @ x)}


def column_mean_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: _f64(h[0]).mean(axis=0)}


def corr_std_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean = _f64(h[0]), _f64(h[1])
    std = np.sqrt(((data - mean) ** 2).mean(axis=0))
    return {2: np.where(std <= CORR_EPS, 1.0, std)}


def corr_scale_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data, mean, std = _f64(h[0]), _f64(h[1]), _f64(h[2])
    return {0: (data - mean) / (np.sqrt(data.shape[0]) * std)}


def corr_matrix_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data = _f64(h[0])
    corr = data.T @ data
    np.fill_diagonal(corr, 1.0)
    return {1: corr}


def covar_center_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {0: _f64(h[0]) - _f64(h[1])}


def covar_matrix_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    data = _f64(h[0])
    return {1: (data.T @ data) / (data.shape[0] - 1)}


def fdtd2d_k1_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ey, hz, fict, t = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
    ey[0, :] = fict[t]
    return {0: ey}


def fdtd2d_k2_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ex, hz = _f64(h[0]), _f64(h[1])
    ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
    return {0: ex}


def fdtd2d_k3_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    hz, ex, ey = _f64(h[0]), _f64(h[1]), _f64(h[2])
    hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return {0: hz}


def gramschm_k1_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, k = _f64(h[0]), _f64(h[1]), int(h[2])
    r[k, k] = np.sqrt((a[:, k] ** 2).sum())
    return {1: r}


def gramschm_k2_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, q, k = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    q[:, k] = a[:, k] / r[k, k]
    return {2: q}


def gramschm_k3_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a, r, q, k = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[3])
    cols = slice(k + 1, a.shape[1])
    r[k, cols] = q[:, k] @ a[:, cols]
    a[:, cols] -= np.outer(q[:, k], r[k, cols])
    return {0: a, 1: r}


# ---------------------------------------------------------------------------------------------
# The specs
# ---------------------------------------------------------------------------------------------


def _spec(
    bench: str,
    slug: str,
    kernel: str,
    short: str,
    source: str,
    *,
    dim: int,
    n_arg: int,
    make_args: ArgsFactory,
    reference: Reference,
    outputs: tuple[int, ...],
    overwrites: tuple[int, ...],
    idempotent: bool,
    complexity: str,
    flops: str,
    min_bytes: str,
    rtol: float,
    description: str,
    grid: tuple[str, str, str] | None = None,
    dynamic_smem: str | None = None,
    lo: int = 1,
) -> KernelSpec:
    """One suite kernel: N is read from argument `n_arg`; the grid covers N along each used axis."""
    three_d = dim == 3
    return KernelSpec(
        name=f"polybench.{slug}.{short}",
        source=source,
        kernel=kernel,
        data=(DataParam("N", arg=n_arg, lo=lo, hi=N_MAX_3D if three_d else N_MAX_2D),),
        dim=dim,
        grid=grid or {1: GRID_1D, 2: GRID_2D, 3: GRID_3D}[dim],
        make_args=make_args,
        dynamic_smem=dynamic_smem,
        idempotent=idempotent,
        default_block={1: BLOCK_1D, 2: BLOCK_2D, 3: BLOCK_3D}[dim],
        reference=reference,
        outputs=outputs,
        rtol=rtol,
        description=description,
        meta={
            "benchmark": bench,
            "complexity": complexity,
            "train_sizes": TRAIN_SIZES_3D if three_d else TRAIN_SIZES,
            "eval_sizes": EVAL_SIZES_3D if three_d else EVAL_SIZES,
            # Sizes of the recorded data that are no longer scored (`retired_eval_sizes`).
            "retired_eval_sizes": RETIRED_EVAL_SIZES_3D if three_d else (),
            "flops": flops,
            "min_bytes": min_bytes,
            "overwrites": overwrites,
        },
    )


# Idempotence: False exactly where the kernel reads what it writes (in-place updates: +=, -=,
# beta * C, FDTD field steps), so a second run on the same arrays computes something else.

CONV2D = _spec(
    "2DCONV", "conv2d", "conv2d", "conv2d", SRC_2DCONV,
    dim=2, n_arg=2, make_args=conv2d_args, reference=conv2d_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^2", flops="18 * N * N", min_bytes="8 * N * N",
    rtol=RTOL_FEW, description="B = 3x3 convolution of A (border 0)",
)  # fmt: skip

CONV3D = _spec(
    "3DCONV", "conv3d", "conv3d", "conv3d", SRC_3DCONV,
    dim=3, n_arg=2, make_args=conv3d_args, reference=conv3d_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^3", flops="54 * N * N * N", min_bytes="8 * N * N * N",
    rtol=RTOL_FEW, description="B = 3x3x3 convolution of the N^3 volume A (border 0)",
)  # fmt: skip

MM2_K1 = _spec(
    "2MM", "mm2", "mm2_k1", "k1", SRC_2MM,
    dim=2, n_arg=4, make_args=mm2_k1_args, reference=mm2_k1_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^3", flops="2 * N * N * N + N * N", min_bytes="12 * N * N",
    rtol=RTOL_SUM, description="tmp = alpha * A * B",
)  # fmt: skip

MM2_K2 = _spec(
    "2MM", "mm2", "mm2_k2", "k2", SRC_2MM,
    dim=2, n_arg=4, make_args=mm2_k2_args, reference=mm2_k2_ref, outputs=(2,), overwrites=(),
    idempotent=False,  # D = beta * D + ... reads its output
    complexity="N^3", flops="2 * N * N * N + 2 * N * N", min_bytes="16 * N * N",
    rtol=RTOL_SUM, description="D = beta * D + tmp * C",
)  # fmt: skip

MM3_K1 = _spec(
    "3MM", "mm3", "mm3_k1", "k1", SRC_3MM,
    dim=2, n_arg=3, make_args=matmul_args, reference=matmul_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^3", flops="2 * N * N * N", min_bytes="12 * N * N",
    rtol=RTOL_SUM, description="E = A * B",
)  # fmt: skip

MM3_K2 = _spec(
    "3MM", "mm3", "mm3_k2", "k2", SRC_3MM,
    dim=2, n_arg=3, make_args=matmul_args, reference=matmul_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^3", flops="2 * N * N * N", min_bytes="12 * N * N",
    rtol=RTOL_SUM, description="F = C * D",
)  # fmt: skip

MM3_K3 = _spec(
    "3MM", "mm3", "mm3_k3", "k3", SRC_3MM,
    dim=2, n_arg=3, make_args=matmul_args, reference=matmul_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^3", flops="2 * N * N * N", min_bytes="12 * N * N",
    rtol=RTOL_SUM, description="G = E * F",
)  # fmt: skip

GEMM = _spec(
    "GEMM", "gemm", "gemm", "gemm", SRC_GEMM,
    dim=2, n_arg=5, make_args=gemm_args, reference=gemm_ref, outputs=(2,), overwrites=(),
    idempotent=False,  # C = ... + beta * C reads its output
    complexity="N^3", flops="2 * N * N * N + 3 * N * N", min_bytes="16 * N * N",
    rtol=RTOL_SUM, description="C = alpha * A * B + beta * C",
)  # fmt: skip

SYRK = _spec(
    "SYRK", "syrk", "syrk", "syrk", SRC_SYRK,
    dim=2, n_arg=4, make_args=syrk_args, reference=syrk_ref, outputs=(1,), overwrites=(),
    idempotent=False,  # C = ... + beta * C reads its output
    complexity="N^3", flops="2 * N * N * N + 3 * N * N", min_bytes="12 * N * N",
    rtol=RTOL_SUM, description="C = alpha * A * A^T + beta * C",
)  # fmt: skip

SYR2K = _spec(
    "SYR2K", "syr2k", "syr2k", "syr2k", SRC_SYR2K,
    dim=2, n_arg=5, make_args=syr2k_args, reference=syr2k_ref, outputs=(2,), overwrites=(),
    idempotent=False,  # C = ... + beta * C reads its output
    complexity="N^3", flops="4 * N * N * N + 3 * N * N", min_bytes="16 * N * N",
    rtol=RTOL_SUM, description="C = alpha * (A * B^T + B * A^T) + beta * C",
)  # fmt: skip

ATAX_K1 = _spec(
    "ATAX", "atax", "atax_k1", "k1", SRC_ATAX,
    dim=1, n_arg=3, make_args=matvec_args, reference=matvec_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 8 * N",
    rtol=RTOL_SUM, description="tmp = A x, one thread per row",
)  # fmt: skip

ATAX_K2 = _spec(
    "ATAX", "atax", "atax_k2", "k2", SRC_ATAX,
    dim=1, n_arg=3, make_args=matvec_args, reference=matvec_t_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 8 * N",
    rtol=RTOL_SUM, description="y = A^T tmp, one thread per column",
)  # fmt: skip

BICG_K1 = _spec(
    "BICG", "bicg", "bicg_k1", "k1", SRC_BICG,
    dim=1, n_arg=3, make_args=matvec_args, reference=matvec_t_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 8 * N",
    rtol=RTOL_SUM, description="s = A^T r, one thread per column",
)  # fmt: skip

BICG_K2 = _spec(
    "BICG", "bicg", "bicg_k2", "k2", SRC_BICG,
    dim=1, n_arg=3, make_args=matvec_args, reference=matvec_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 8 * N",
    rtol=RTOL_SUM, description="q = A p, one thread per row",
)  # fmt: skip

MVT_K1 = _spec(
    "MVT", "mvt", "mvt_k1", "k1", SRC_MVT,
    dim=1, n_arg=3, make_args=matvec_args, reference=mvt_k1_ref, outputs=(2,), overwrites=(),
    idempotent=False,  # x1 += A y1 accumulates into its output
    complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 12 * N",
    rtol=RTOL_SUM, description="x1 += A y1, one thread per row",
)  # fmt: skip

MVT_K2 = _spec(
    "MVT", "mvt", "mvt_k2", "k2", SRC_MVT,
    dim=1, n_arg=3, make_args=matvec_args, reference=mvt_k2_ref, outputs=(2,), overwrites=(),
    idempotent=False,  # x2 += A^T y2 accumulates into its output
    complexity="N^2", flops="2 * N * N", min_bytes="4 * N * N + 12 * N",
    rtol=RTOL_SUM, description="x2 += A^T y2, one thread per column of A",
)  # fmt: skip

GESUMMV = _spec(
    "GESUMMV", "gesummv", "gesummv", "gesummv", SRC_GESUMMV,
    dim=1, n_arg=6, make_args=gesummv_args, reference=gesummv_ref, outputs=(3,), overwrites=(3,),
    idempotent=True, complexity="N^2", flops="4 * N * N + 3 * N", min_bytes="8 * N * N + 8 * N",
    rtol=RTOL_SUM, description="y = alpha * A x + beta * B x, one thread per row",
)  # fmt: skip

CORR_K1 = _spec(
    "CORR", "corr", "corr_k1", "k1", SRC_CORR,
    dim=1, n_arg=2, make_args=column_mean_args, reference=column_mean_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^2", flops="N * N + N", min_bytes="4 * N * N + 4 * N",
    rtol=RTOL_SUM, description="column means, one thread per column",
)  # fmt: skip

CORR_K2 = _spec(
    "CORR", "corr", "corr_k2", "k2", SRC_CORR,
    dim=1, n_arg=3, make_args=corr_std_args, reference=corr_std_ref, outputs=(2,), overwrites=(2,),
    idempotent=True, complexity="N^2", flops="3 * N * N + 2 * N", min_bytes="4 * N * N + 8 * N",
    rtol=RTOL_SUM, description="column standard deviations, one thread per column",
)  # fmt: skip

CORR_K3 = _spec(
    "CORR", "corr", "corr_k3", "k3", SRC_CORR,
    dim=2, n_arg=3, make_args=corr_scale_args, reference=corr_scale_ref, outputs=(0,), overwrites=(),
    idempotent=False,  # centers and scales data in place
    complexity="N^2", flops="4 * N * N", min_bytes="8 * N * N + 8 * N",
    rtol=RTOL_FEW, description="data = (data - mean) / (sqrt(N) * stddev), in place",
)  # fmt: skip

CORR_K4 = _spec(
    "CORR", "corr", "corr_k4", "k4", SRC_CORR,
    dim=1, n_arg=2, make_args=corr_matrix_args, reference=corr_matrix_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^3", flops="N * N * (N - 1)", min_bytes="8 * N * N",
    rtol=RTOL_SUM, description="correlation matrix, one thread per column j1 over j2 > j1",
)  # fmt: skip

COVAR_K1 = _spec(
    "COVAR", "covar", "covar_k1", "k1", SRC_COVAR,
    dim=1, n_arg=2, make_args=column_mean_args, reference=column_mean_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^2", flops="N * N + N", min_bytes="4 * N * N + 4 * N",
    rtol=RTOL_SUM, description="column means, one thread per column", lo=2,
)  # fmt: skip

COVAR_K2 = _spec(
    "COVAR", "covar", "covar_k2", "k2", SRC_COVAR,
    dim=2, n_arg=2, make_args=covar_center_args, reference=covar_center_ref, outputs=(0,), overwrites=(),
    idempotent=False,  # centers data in place
    complexity="N^2", flops="N * N", min_bytes="8 * N * N + 4 * N",
    rtol=RTOL_FEW, description="data -= mean (per column), in place", lo=2,
)  # fmt: skip

COVAR_K3 = _spec(
    "COVAR", "covar", "covar_k3", "k3", SRC_COVAR,
    dim=1, n_arg=2, make_args=covar_matrix_args, reference=covar_matrix_ref, outputs=(1,), overwrites=(1,),
    idempotent=True, complexity="N^3", flops="N * N * (N + 1) + N * N", min_bytes="8 * N * N",
    rtol=RTOL_SUM, description="covariance matrix, one thread per column j1 over j2 >= j1", lo=2,
)  # fmt: skip

FDTD2D_K1 = _spec(
    "FDTD_2D", "fdtd2d", "fdtd2d_k1", "k1", SRC_FDTD2D,
    dim=2, n_arg=4, make_args=fdtd2d_k1_args, reference=fdtd2d_k1_ref, outputs=(0,), overwrites=(),
    idempotent=False,  # a field step: ey -= ... reads its output
    complexity="N^2", flops="3 * N * N", min_bytes="12 * N * N",
    rtol=RTOL_FEW, description="ey update of time step t (row 0 = fict[t])",
)  # fmt: skip

FDTD2D_K2 = _spec(
    "FDTD_2D", "fdtd2d", "fdtd2d_k2", "k2", SRC_FDTD2D,
    dim=2, n_arg=2, make_args=fdtd2d_k2_args, reference=fdtd2d_k2_ref, outputs=(0,), overwrites=(),
    idempotent=False,  # a field step: ex -= ... reads its output
    complexity="N^2", flops="3 * N * N", min_bytes="12 * N * N",
    rtol=RTOL_FEW, description="ex update of time step t",
)  # fmt: skip

FDTD2D_K3 = _spec(
    "FDTD_2D", "fdtd2d", "fdtd2d_k3", "k3", SRC_FDTD2D,
    dim=2, n_arg=3, make_args=fdtd2d_k3_args, reference=fdtd2d_k3_ref, outputs=(0,), overwrites=(),
    idempotent=False,  # a field step: hz -= ... reads its output
    complexity="N^2", flops="6 * N * N", min_bytes="16 * N * N",
    rtol=RTOL_FEW, description="hz update of time step t",
)  # fmt: skip

GRAMSCHM_K1 = _spec(
    "GRAMSCHM", "gramschm", "gramschm_k1", "k1", SRC_GRAMSCHM,
    dim=1, n_arg=3, make_args=gramschm_k1_args, reference=gramschm_k1_ref, outputs=(1,), overwrites=(),
    idempotent=True, complexity="N", flops="2 * N", min_bytes="4 * N",
    grid=("1", "1", "1"), dynamic_smem="bx * 4",
    rtol=RTOL_SUM, description="r[k][k] = ||a[:, k]|| (k = N // 2), one-block reduction",
)  # fmt: skip

GRAMSCHM_K2 = _spec(
    "GRAMSCHM", "gramschm", "gramschm_k2", "k2", SRC_GRAMSCHM,
    dim=1, n_arg=4, make_args=gramschm_k2_args, reference=gramschm_k2_ref, outputs=(2,), overwrites=(),
    idempotent=True, complexity="N", flops="N", min_bytes="8 * N",
    rtol=RTOL_FEW, description="q[:, k] = a[:, k] / r[k][k] (k = N // 2), one thread per row",
)  # fmt: skip

GRAMSCHM_K3 = _spec(
    "GRAMSCHM", "gramschm", "gramschm_k3", "k3", SRC_GRAMSCHM,
    dim=1, n_arg=4, make_args=gramschm_k3_args, reference=gramschm_k3_ref, outputs=(0, 1), overwrites=(),
    idempotent=False,  # a[:, j] -= q[:, k] * r[k][j] updates a in place
    complexity="N^2", flops="4 * N * (N - N // 2 - 1)", min_bytes="8 * N * (N - N // 2 - 1)",
    rtol=RTOL_SUM, description="r[k][j] and a[:, j] for columns j > k (k = N // 2)",
)  # fmt: skip

# Benchmarks in the order of the thesis' Table 6.2, kernels in launch order.
SPECS: tuple[KernelSpec, ...] = (
    CONV2D,
    ATAX_K1, ATAX_K2,
    MVT_K1, MVT_K2,
    BICG_K1, BICG_K2,
    GESUMMV,
    GEMM,
    SYRK,
    SYR2K,
    MM2_K1, MM2_K2,
    MM3_K1, MM3_K2, MM3_K3,
    CORR_K1, CORR_K2, CORR_K3, CORR_K4,
    COVAR_K1, COVAR_K2, COVAR_K3,
    CONV3D,
    GRAMSCHM_K1, GRAMSCHM_K2, GRAMSCHM_K3,
    FDTD2D_K1, FDTD2D_K2, FDTD2D_K3,
)  # fmt: skip
