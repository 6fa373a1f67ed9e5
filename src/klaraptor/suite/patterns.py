"""A third suite, for training only: one kernel per common CUDA programming pattern.

SNOWPACK learns from other kernels; with 25 benchmarks a held-out one is often unlike every
kernel it can learn from. This corpus widens what it learns from. It is never an evaluation
kernel: `klaraptor bench snowpack` and the shipped model add its rows to every fold's training
rows, and nothing reports a suboptimality for it.

Which patterns (the rule, not a list chosen from results): one kernel for each pattern of the
CUDA programming guide's and CUDA samples' standard repertoire, written naively with the block
shape free: element-wise maps (memory-bound, FMA-bound, SFU-bound, in 1-D and 3-D), gathers,
stencils (1-D with a shared halo, 2-D, 3-D), a blur with window loops, a resampling, transposes
(naive and through a shared tile), a row reduction in shared memory, a shared-memory histogram
with atomics, tiled matrix multiplication and an all-pairs n-body. The corpus was written after
SNOWPACK's unseen-kernel evaluation had shown its losses (3DCONV, LUD, SYRK); it contains 3-D
and shared-memory-tiled kernels because the repertoire does, and docs/snowpack.md says so.

Store names are `patterns.<pattern>.<kernel>`. Conventions as in the other suites: float32 data
(uint32 for the histogram), one data parameter N read from the last argument, any block shape is
correct (tiles follow the block through `dynamic_smem`; threads check their bounds and stay in
the block until its last barrier), idempotent kernels except the histogram (it adds to its
bins), `make_args(D, rng, device=False)` gives NumPy arrays and `reference` recomputes outputs in
float64. `meta`: `benchmark` (the pattern), `suite`, `training_only`, `complexity`,
`train_sizes` / `eval_sizes` (both are training rows for SNOWPACK; the split only tells
collection which sizes get every candidate with the output checked and which the exhaustive
ground-truth protocol), `flops`, `min_bytes`, `overwrites`, `layout` ("N", "NxN", "N^3").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from klaraptor.spec import Block, Data, DataParam, KernelSpec
from klaraptor.suite.args import launch_args, rand_f32

ArgsFactory = Callable[..., tuple[Any, ...]]
Reference = Callable[[Data, tuple[Any, ...]], dict[int, np.ndarray]]

# Sizes: 1-D elements, 2-D matrix side, 3-D volume side (training sizes, then the larger ones).
TRAIN_VEC = (524288, 1048576, 2097152, 4194304)
EVAL_VEC = (16777216, 33554432)
TRAIN_GRID = (256, 512, 1024, 1536)
EVAL_GRID = (2048, 4096, 8192)
TRAIN_VOL = (32, 48, 64, 96)
EVAL_VOL = (128, 256)
# Work grows with N^2 (n-body) or N^3 (matrix product): smaller ranges.
TRAIN_NBODY = (2048, 4096, 6144, 8192)
EVAL_NBODY = (16384, 32768)
TRAIN_MATMUL = (256, 512, 768, 1024)
EVAL_MATMUL = (2048, 4096)
# Row reduction: N rows of ROW_LEN values.
ROW_LEN = 256
TRAIN_ROWS = (16384, 32768, 65536, 131072)
EVAL_ROWS = (524288, 1048576)

_SIZES = {
    "vec": (TRAIN_VEC, EVAL_VEC, "N"),
    "grid": (TRAIN_GRID, EVAL_GRID, "NxN"),
    "vol": (TRAIN_VOL, EVAL_VOL, "N^3"),
    "nbody": (TRAIN_NBODY, EVAL_NBODY, "N"),
    "matmul": (TRAIN_MATMUL, EVAL_MATMUL, "NxN"),
    "rows": (TRAIN_ROWS, EVAL_ROWS, "N"),
}

INT32_MAX = 2**31 - 1
N_MAX_GRID = 23170  # resize2x writes (2N)^2 < 2**31 elements
N_MAX_VOL = 1290  # N^3 < 2**31

RTOL_EXACT = 1e-6  # integer-valued or copied results
RTOL_FEW = 1e-5
RTOL_MATH = 1e-4  # float32 exp/log/erfc, Horner steps
RTOL_SUM = 1e-3  # sums of thousands of float32 terms

SAXPY_A = 1.5
POLY_DEGREE = 48
POLY_C = (((np.arange(POLY_DEGREE + 1) * 7) % 13) - 6.0) / 64.0
CONV1D_R = 8
CONV1D_W = (((np.arange(2 * CONV1D_R + 1) * 5) % 9) - 3.0) / 16.0
HIST_BINS = 256
NBODY_EPS2 = 0.01
MATMUL_KT = 32
BS_RATE, BS_VOL = 0.02, 0.30


def _c_floats(values: np.ndarray) -> str:
    return "{" + ", ".join(f"{float(v)!r}f" for v in values) + "}"


# ---------------------------------------------------------------------------------------------
# CUDA sources
# ---------------------------------------------------------------------------------------------

SRC_SAXPY = """
// z = a x + y: the memory-bound map.
extern "C" __global__ void saxpy(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ z, float a, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) z[i] = a * x[i] + y[i];
}
"""

SRC_BLACKSCHOLES = """
// Black-Scholes call and put prices per option: the SFU-bound map (log, exp, sqrt, erfc).
extern "C" __global__ void blackscholes(const float* __restrict__ S, const float* __restrict__ X,
                                        const float* __restrict__ T, float* __restrict__ call,
                                        float* __restrict__ put, float r, float v, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float s = S[i], x = X[i], t = T[i];
    const float sq = sqrtf(t);
    const float d1 = (logf(s / x) + (r + 0.5f * v * v) * t) / (v * sq);
    const float d2 = d1 - v * sq;
    const float c1 = 0.5f * erfcf(-d1 * 0.70710678f), c2 = 0.5f * erfcf(-d2 * 0.70710678f);
    const float disc = x * expf(-r * t);
    call[i] = s * c1 - disc * c2;
    put[i] = disc * (1.0f - c2) - s * (1.0f - c1);
}
"""

SRC_GATHER = """
// out[i] = w[i] x[idx[i]]: the irregular read.
extern "C" __global__ void gather(const float* __restrict__ x, const int* __restrict__ idx,
                                  const float* __restrict__ w, float* __restrict__ out, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = w[i] * x[idx[i]];
}
"""

SRC_POLY = f"""
// A degree-{POLY_DEGREE} polynomial by Horner's rule per element: the FMA-bound map with a loop.
__constant__ float POLY_C[{POLY_DEGREE + 1}] = {_c_floats(POLY_C)};

extern "C" __global__ void poly(const float* __restrict__ x, float* __restrict__ y, int N)
{{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float v = x[i];
    float acc = POLY_C[0];
    #pragma unroll 4
    for (int k = 1; k <= {POLY_DEGREE}; ++k) acc = acc * v + POLY_C[k];
    y[i] = acc;
}}
"""

SRC_CONV1D = f"""
// A radius-{CONV1D_R} 1-D convolution; each block stages its bx + 2R inputs in shared memory
// (zero outside the array).
__constant__ float CONV1D_W[{2 * CONV1D_R + 1}] = {_c_floats(CONV1D_W)};

extern "C" __global__ void conv1d(const float* __restrict__ x, float* __restrict__ y, int N)
{{
    extern __shared__ float tile[];
    const int base = blockIdx.x * blockDim.x - {CONV1D_R};
    for (int t = threadIdx.x; t < blockDim.x + {2 * CONV1D_R}; t += blockDim.x) {{
        const int g = base + t;
        tile[t] = (g >= 0 && g < N) ? x[g] : 0.0f;
    }}
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float acc = 0.0f;
    #pragma unroll
    for (int k = 0; k <= {2 * CONV1D_R}; ++k) acc += CONV1D_W[k] * tile[threadIdx.x + k];
    y[i] = acc;
}}
"""

SRC_HISTOGRAM = f"""
// A {HIST_BINS}-bin histogram: per-block bins in shared memory, then one atomic add per
// non-empty bin into the global bins (which it adds to).
extern "C" __global__ void histogram(const unsigned int* __restrict__ data,
                                     unsigned int* __restrict__ bins, int N)
{{
    __shared__ unsigned int local[{HIST_BINS}];
    for (int b = threadIdx.x; b < {HIST_BINS}; b += blockDim.x) local[b] = 0u;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) atomicAdd(&local[data[i] % {HIST_BINS}u], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < {HIST_BINS}; b += blockDim.x)
        if (local[b] != 0u) atomicAdd(&bins[b], local[b]);
}}
"""

SRC_NBODY = f"""
// All-pairs gravitational accelerations (softening {NBODY_EPS2}): each block stages bx bodies
// (x, y, z, mass) at a time in shared memory and every thread accumulates over them.
extern "C" __global__ void nbody(const float4* __restrict__ body, float* __restrict__ acc, int N)
{{
    extern __shared__ float4 tile[];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float4 me = i < N ? body[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float ax = 0.0f, ay = 0.0f, az = 0.0f;
    for (int j0 = 0; j0 < N; j0 += blockDim.x) {{
        const int j = j0 + threadIdx.x;
        tile[threadIdx.x] = j < N ? body[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncthreads();
        const int m = min((int)blockDim.x, N - j0);
        for (int k = 0; k < m; ++k) {{
            const float4 o = tile[k];
            const float dx = o.x - me.x, dy = o.y - me.y, dz = o.z - me.z;
            const float d2 = dx * dx + dy * dy + dz * dz + {NBODY_EPS2}f;
            const float inv = rsqrtf(d2);
            const float f = o.w * inv * inv * inv;
            ax += f * dx; ay += f * dy; az += f * dz;
        }}
        __syncthreads();
    }}
    if (i < N) {{ acc[3 * i] = ax; acc[3 * i + 1] = ay; acc[3 * i + 2] = az; }}
}}
"""

SRC_ROWNORM = f"""
// Euclidean norm of each of N rows of {ROW_LEN} values: by rows per block, bx lanes per row
// summing a strided share, then a tree in shared memory (any bx).
extern "C" __global__ void rownorm(const float* __restrict__ A, float* __restrict__ out, int N)
{{
    extern __shared__ float part[];
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    float s = 0.0f;
    if (row < N)
        for (int c = threadIdx.x; c < {ROW_LEN}; c += blockDim.x) {{
            const float a = A[(size_t)row * {ROW_LEN} + c];
            s += a * a;
        }}
    float* mine = part + threadIdx.y * blockDim.x;
    mine[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int step = 1; step < blockDim.x; step *= 2) {{
        if (threadIdx.x % (2 * step) == 0 && threadIdx.x + step < blockDim.x)
            mine[threadIdx.x] += mine[threadIdx.x + step];
        __syncthreads();
    }}
    if (row < N && threadIdx.x == 0) out[row] = sqrtf(mine[0]);
}}
"""

SRC_TRANSPOSE_NAIVE = """
// B = A^T, one thread per element: reads coalesced along x, writes strided by N.
extern "C" __global__ void transpose_naive(const float* __restrict__ A, float* __restrict__ B,
                                           int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < N && j < N) B[j * N + i] = A[i * N + j];
}
"""

SRC_TRANSPOSE_TILED = """
// B = A^T through a by x (bx + 1) tile in shared memory: the block reads a tile row-wise and
// writes it transposed, also row-wise, by renumbering its threads (any block shape).
extern "C" __global__ void transpose_tiled(const float* __restrict__ A, float* __restrict__ B,
                                           int N)
{
    extern __shared__ float tile[];
    const int bx = blockDim.x, by = blockDim.y, w = bx + 1;
    const int x0 = blockIdx.x * bx, y0 = blockIdx.y * by;
    const int j = x0 + threadIdx.x, i = y0 + threadIdx.y;
    if (i < N && j < N) tile[threadIdx.y * w + threadIdx.x] = A[i * N + j];
    __syncthreads();
    // The output tile is bx rows (A's columns) by by columns (A's rows).
    const int t = threadIdx.y * bx + threadIdx.x;
    const int r = t / by, c = t % by;
    const int oi = x0 + r, oj = y0 + c;
    if (oi < N && oj < N) B[oi * N + oj] = tile[c * w + r];
}
"""

SRC_JACOBI2D = """
// One 5-point Jacobi step; border cells are copied.
extern "C" __global__ void jacobi2d(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    const int c = i * N + j;
    if (i == 0 || j == 0 || i == N - 1 || j == N - 1) { B[c] = A[c]; return; }
    B[c] = 0.2f * (A[c] + A[c - 1] + A[c + 1] + A[c - N] + A[c + N]);
}
"""

SRC_BLUR5 = """
// 5 x 5 box blur with clamped borders, window loops in registers (no shared memory).
extern "C" __global__ void blur5(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= N || j >= N) return;
    float acc = 0.0f;
    for (int di = -2; di <= 2; ++di) {
        const int ii = min(max(i + di, 0), N - 1);
        for (int dj = -2; dj <= 2; ++dj) {
            const int jj = min(max(j + dj, 0), N - 1);
            acc += A[ii * N + jj];
        }
    }
    B[i * N + j] = acc * 0.04f;
}
"""

SRC_RESIZE2X = """
// Bilinear upsampling of an N x N image to 2N x 2N (pixel centres aligned, edges clamped).
extern "C" __global__ void resize2x(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int M = 2 * N;
    if (x >= M || y >= M) return;
    const float sx = fminf(fmaxf((x + 0.5f) * 0.5f - 0.5f, 0.0f), (float)(N - 1));
    const float sy = fminf(fmaxf((y + 0.5f) * 0.5f - 0.5f, 0.0f), (float)(N - 1));
    const int x0 = (int)sx, y0 = (int)sy;
    const int x1 = min(x0 + 1, N - 1), y1 = min(y0 + 1, N - 1);
    const float fx = sx - x0, fy = sy - y0;
    const float top = A[y0 * N + x0] * (1.0f - fx) + A[y0 * N + x1] * fx;
    const float bot = A[y1 * N + x0] * (1.0f - fx) + A[y1 * N + x1] * fx;
    B[y * M + x] = top * (1.0f - fy) + bot * fy;
}
"""

SRC_MATMUL_TILED = f"""
// C = A B with shared-memory tiles: a block computes a by x bx tile of C and walks k in steps
// of {MATMUL_KT}, staging a by x {MATMUL_KT} panel of A and a {MATMUL_KT} x bx panel of B
// (loaded by all threads in turn, so any block shape works).
extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int N)
{{
    extern __shared__ float smem[];
    const int bx = blockDim.x, by = blockDim.y, nt = bx * by;
    float* As = smem;                      // by x KT
    float* Bs = smem + by * {MATMUL_KT};    // KT x bx
    const int row0 = blockIdx.y * by, col0 = blockIdx.x * bx;
    const int t = threadIdx.y * bx + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < N; k0 += {MATMUL_KT}) {{
        for (int e = t; e < by * {MATMUL_KT}; e += nt) {{
            const int r = row0 + e / {MATMUL_KT}, c = k0 + e % {MATMUL_KT};
            As[e] = (r < N && c < N) ? A[r * N + c] : 0.0f;
        }}
        for (int e = t; e < {MATMUL_KT} * bx; e += nt) {{
            const int r = k0 + e / bx, c = col0 + e % bx;
            Bs[e] = (r < N && c < N) ? B[r * N + c] : 0.0f;
        }}
        __syncthreads();
        #pragma unroll 8
        for (int k = 0; k < {MATMUL_KT}; ++k)
            acc += As[threadIdx.y * {MATMUL_KT} + k] * Bs[k * bx + threadIdx.x];
        __syncthreads();
    }}
    const int i = row0 + threadIdx.y, j = col0 + threadIdx.x;
    if (i < N && j < N) C[i * N + j] = acc;
}}
"""

SRC_LAPLACE3D = """
// 7-point Laplacian of an N^3 volume, one thread per voxel (x contiguous); border voxels are 0.
extern "C" __global__ void laplace3d(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= N || j >= N || k >= N) return;
    const int c = (i * N + j) * N + k;
    if (i == 0 || j == 0 || k == 0 || i == N - 1 || j == N - 1 || k == N - 1) {
        B[c] = 0.0f;
        return;
    }
    const int P = N * N;
    B[c] = A[c - 1] + A[c + 1] + A[c - N] + A[c + N] + A[c - P] + A[c + P] - 6.0f * A[c];
}
"""

SRC_AXPY3D = """
// z = a x + y over an N^3 volume with a 3-D block: the memory-bound map, three-dimensional.
extern "C" __global__ void axpy3d(const float* __restrict__ x, const float* __restrict__ y,
                                  float* __restrict__ z, float a, int N)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int i = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= N || j >= N || k >= N) return;
    const int c = (i * N + j) * N + k;
    z[c] = a * x[c] + y[c];
}
"""


# ---------------------------------------------------------------------------------------------
# Arguments: CuPy arrays (device=False: NumPy) of random, non-zero data
# ---------------------------------------------------------------------------------------------


def saxpy_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, y, z, a, N)."""
    n = D["N"]
    return launch_args(
        device,
        rand_f32(rng, n),
        rand_f32(rng, n),
        rand_f32(rng, n),
        np.float32(SAXPY_A),
        np.int32(n),
    )


def blackscholes_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(S, X, T, call, put, r, v, N): prices 5-30, strikes 1-100, 0.25-10 years."""
    n = D["N"]
    return launch_args(
        device,
        rand_f32(rng, n, 5.0, 30.0),
        rand_f32(rng, n, 1.0, 100.0),
        rand_f32(rng, n, 0.25, 10.0),
        rand_f32(rng, n),
        rand_f32(rng, n),
        np.float32(BS_RATE),
        np.float32(BS_VOL),
        np.int32(n),
    )


def gather_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, idx, w, out, N): idx uniform over [0, N)."""
    n = D["N"]
    idx = rng.integers(0, n, n, dtype=np.int32)
    return launch_args(
        device, rand_f32(rng, n), idx, rand_f32(rng, n), rand_f32(rng, n), np.int32(n)
    )


def poly_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, y, N): x in [-1, 1]."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, n, -1.0, 1.0), rand_f32(rng, n), np.int32(n))


def conv1d_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, y, N)."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, n), rand_f32(rng, n), np.int32(n))


def histogram_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, bins, N): values binomial around the middle bin (bins fill unevenly, as an image's
    do); the bins start at random counts, which the kernel adds to."""
    n = D["N"]
    data = rng.binomial(HIST_BINS - 1, 0.5, n).astype(np.uint32)
    bins = rng.integers(1, 1000, HIST_BINS).astype(np.uint32)
    return launch_args(device, data, bins, np.int32(n))


def nbody_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(body, acc, N): N bodies as (x, y, z, mass) float32 quadruples in a unit cube."""
    n = D["N"]
    body = rand_f32(rng, (n, 4))
    body[:, 3] = rand_f32(rng, n, 0.5, 1.5)
    return launch_args(device, body.reshape(-1), rand_f32(rng, 3 * n), np.int32(n))


def rownorm_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, out, N): N rows of ROW_LEN values."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, (n, ROW_LEN)), rand_f32(rng, n), np.int32(n))


def square_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, N): N x N input and output."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, (n, n)), rand_f32(rng, (n, n)), np.int32(n))


def resize2x_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, N): N x N input, 2N x 2N output."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, (n, n)), rand_f32(rng, (2 * n, 2 * n)), np.int32(n))


def matmul_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, C, N)."""
    n = D["N"]
    mats = (
        rand_f32(rng, (n, n), -1.0, 1.0),
        rand_f32(rng, (n, n), -1.0, 1.0),
        rand_f32(rng, (n, n)),
    )
    return launch_args(device, *mats, np.int32(n))


def volume_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(A, B, N): N^3 input and output."""
    n = D["N"]
    return launch_args(device, rand_f32(rng, (n, n, n)), rand_f32(rng, (n, n, n)), np.int32(n))


def axpy3d_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, y, z, a, N): N^3 volumes."""
    n = D["N"]
    vols = (rand_f32(rng, (n, n, n)), rand_f32(rng, (n, n, n)), rand_f32(rng, (n, n, n)))
    return launch_args(device, *vols, np.float32(SAXPY_A), np.int32(n))


# ---------------------------------------------------------------------------------------------
# References (float64, inputs untouched)
# ---------------------------------------------------------------------------------------------


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def saxpy_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: float(h[3]) * _f64(h[0]) + _f64(h[1])}


def blackscholes_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    from scipy.special import erfc

    s, x, t = _f64(h[0]), _f64(h[1]), _f64(h[2])
    r, v = float(h[5]), float(h[6])
    sq = np.sqrt(t)
    d1 = (np.log(s / x) + (r + 0.5 * v * v) * t) / (v * sq)
    d2 = d1 - v * sq
    c1, c2 = 0.5 * erfc(-d1 / np.sqrt(2.0)), 0.5 * erfc(-d2 / np.sqrt(2.0))
    disc = x * np.exp(-r * t)
    return {3: s * c1 - disc * c2, 4: disc * (1.0 - c2) - s * (1.0 - c1)}


def gather_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {3: _f64(h[2]) * _f64(h[0])[np.asarray(h[1])]}


def poly_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x = _f64(h[0])
    acc = np.full_like(x, POLY_C[0])
    for c in POLY_C[1:]:
        acc = acc * x + c
    return {1: acc}


def conv1d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x = np.pad(_f64(h[0]), CONV1D_R)
    n = x.size - 2 * CONV1D_R
    return {1: sum(w * x[k : k + n] for k, w in enumerate(CONV1D_W))}


def histogram_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    counts = np.bincount(np.asarray(h[0]) % HIST_BINS, minlength=HIST_BINS)
    return {1: _f64(h[1]) + counts}


def nbody_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    body = _f64(h[0]).reshape(-1, 4)
    pos, mass = body[:, :3], body[:, 3]
    acc = np.empty_like(pos)
    for lo in range(0, len(pos), 1024):  # chunks keep the pair matrices small
        d = pos[None, :, :] - pos[lo : lo + 1024, None, :]
        inv = 1.0 / np.sqrt((d * d).sum(axis=2) + NBODY_EPS2)
        acc[lo : lo + 1024] = ((mass * inv**3)[:, :, None] * d).sum(axis=1)
    return {1: acc.reshape(-1)}


def rownorm_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: np.sqrt((_f64(h[0]) ** 2).sum(axis=1))}


def transpose_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: _f64(h[0]).T.copy()}


def jacobi2d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    b = a.copy()
    b[1:-1, 1:-1] = 0.2 * (a[1:-1, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:] + a[:-2, 1:-1] + a[2:, 1:-1])
    return {1: b}


def blur5_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    n = a.shape[0]
    p = np.pad(a, 2, mode="edge")
    window = sum(p[di : di + n, dj : dj + n] for di in range(5) for dj in range(5))
    return {1: np.asarray(window) * 0.04}


def resize2x_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    n = a.shape[0]
    s = np.clip((np.arange(2 * n) + 0.5) * 0.5 - 0.5, 0.0, n - 1)
    i0 = s.astype(np.int64)
    i1 = np.minimum(i0 + 1, n - 1)
    f = s - i0
    rows = a[i0, :] * (1 - f)[:, None] + a[i1, :] * f[:, None]  # along y
    return {1: rows[:, i0] * (1 - f)[None, :] + rows[:, i1] * f[None, :]}


def matmul_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: _f64(h[0]) @ _f64(h[1])}


def laplace3d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    b = np.zeros_like(a)
    c = a[1:-1, 1:-1, 1:-1]
    b[1:-1, 1:-1, 1:-1] = (
        a[1:-1, 1:-1, :-2]
        + a[1:-1, 1:-1, 2:]
        + a[1:-1, :-2, 1:-1]
        + a[1:-1, 2:, 1:-1]
        + a[:-2, 1:-1, 1:-1]
        + a[2:, 1:-1, 1:-1]
        - 6.0 * c
    )
    return {1: b}


def axpy3d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: float(h[3]) * _f64(h[0]) + _f64(h[1])}


# ---------------------------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------------------------

GRID_1D = ("ceil(N / bx)", "1", "1")
GRID_2D = ("ceil(N / bx)", "ceil(N / by)", "1")
GRID_3D = ("ceil(N / bx)", "ceil(N / by)", "ceil(N / bz)")
DEFAULT_BLOCK: dict[int, Block] = {1: (256, 1, 1), 2: (32, 8, 1), 3: (32, 8, 1)}
HI = {"vec": INT32_MAX // 4, "grid": N_MAX_GRID, "vol": N_MAX_VOL, "nbody": INT32_MAX // 4,
      "matmul": N_MAX_GRID, "rows": INT32_MAX // ROW_LEN}  # fmt: skip


def _spec(
    pattern: str,
    kernel: str,
    source: str,
    *,
    dim: int,
    sizes: str,
    n_arg: int,
    make_args: ArgsFactory,
    reference: Reference,
    outputs: tuple[int, ...],
    complexity: str,
    flops: str,
    min_bytes: str,
    rtol: float,
    description: str,
    grid: tuple[str, str, str] | None = None,
    dynamic_smem: str | None = None,
    idempotent: bool = True,
    overwrites: tuple[int, ...] | None = None,
) -> KernelSpec:
    train, evals, layout = _SIZES[sizes]
    return KernelSpec(
        name=f"patterns.{pattern}.{kernel}",
        source=source,
        kernel=kernel,
        data=(DataParam("N", arg=n_arg, lo=3, hi=HI[sizes]),),
        dim=dim,
        grid=grid or {1: GRID_1D, 2: GRID_2D, 3: GRID_3D}[dim],
        make_args=make_args,
        dynamic_smem=dynamic_smem,
        idempotent=idempotent,
        default_block=DEFAULT_BLOCK[dim],
        reference=reference,
        outputs=outputs,
        rtol=rtol,
        description=description,
        meta={
            "benchmark": pattern,
            "suite": "patterns",
            "training_only": True,
            "complexity": complexity,
            "train_sizes": train,
            "eval_sizes": evals,
            "flops": flops,
            "min_bytes": min_bytes,
            "overwrites": outputs if overwrites is None else overwrites,
            "layout": layout,
        },
    )


SAXPY = _spec(
    "saxpy", "saxpy", SRC_SAXPY, dim=1, sizes="vec", n_arg=4, make_args=saxpy_args,
    reference=saxpy_ref, outputs=(2,), complexity="N", flops="2 * N", min_bytes="12 * N",
    rtol=RTOL_FEW, description="z = a x + y",
)  # fmt: skip
BLACKSCHOLES = _spec(
    "blackscholes", "blackscholes", SRC_BLACKSCHOLES, dim=1, sizes="vec", n_arg=7,
    make_args=blackscholes_args, reference=blackscholes_ref, outputs=(3, 4), complexity="N",
    flops="40 * N", min_bytes="20 * N", rtol=RTOL_MATH,
    description="Black-Scholes call and put prices",
)  # fmt: skip
GATHER = _spec(
    "gather", "gather", SRC_GATHER, dim=1, sizes="vec", n_arg=4, make_args=gather_args,
    reference=gather_ref, outputs=(3,), complexity="N", flops="N", min_bytes="16 * N",
    rtol=RTOL_FEW, description="out = w * x[idx], random indices",
)  # fmt: skip
POLY = _spec(
    "poly", "poly", SRC_POLY, dim=1, sizes="vec", n_arg=2, make_args=poly_args,
    reference=poly_ref, outputs=(1,), complexity="N", flops=f"{2 * POLY_DEGREE} * N",
    min_bytes="8 * N", rtol=RTOL_MATH, description=f"degree-{POLY_DEGREE} Horner per element",
)  # fmt: skip
CONV1D = _spec(
    "conv1d", "conv1d", SRC_CONV1D, dim=1, sizes="vec", n_arg=2, make_args=conv1d_args,
    reference=conv1d_ref, outputs=(1,), complexity="N", flops=f"{2 * (2 * CONV1D_R + 1)} * N",
    min_bytes="8 * N", rtol=RTOL_FEW, dynamic_smem=f"4 * (bx + {2 * CONV1D_R})",
    description=f"radius-{CONV1D_R} convolution, shared-memory tile with halo",
)  # fmt: skip
HISTOGRAM = _spec(
    "histogram", "histogram", SRC_HISTOGRAM, dim=1, sizes="vec", n_arg=2,
    make_args=histogram_args, reference=histogram_ref, outputs=(1,), idempotent=False,
    overwrites=(), complexity="N", flops="N", min_bytes="4 * N", rtol=RTOL_EXACT,
    description=f"{HIST_BINS}-bin histogram, shared-memory bins and atomics",
)  # fmt: skip
NBODY = _spec(
    "nbody", "nbody", SRC_NBODY, dim=1, sizes="nbody", n_arg=2, make_args=nbody_args,
    reference=nbody_ref, outputs=(1,), complexity="N^2", flops="20 * N * N",
    min_bytes="28 * N", rtol=RTOL_SUM, dynamic_smem="16 * bx",
    description="all-pairs accelerations, bodies staged in shared memory",
)  # fmt: skip
ROWNORM = _spec(
    "rownorm", "rownorm", SRC_ROWNORM, dim=2, sizes="rows", n_arg=2, make_args=rownorm_args,
    reference=rownorm_ref, outputs=(1,), complexity="N", flops=f"{2 * ROW_LEN} * N",
    min_bytes=f"{4 * ROW_LEN + 4} * N", rtol=RTOL_SUM, grid=("ceil(N / by)", "1", "1"),
    dynamic_smem="4 * bx * by", description=f"row norms ({ROW_LEN} values), tree in shared memory",
)  # fmt: skip
TRANSPOSE_NAIVE = _spec(
    "transpose", "transpose_naive", SRC_TRANSPOSE_NAIVE, dim=2, sizes="grid", n_arg=2,
    make_args=square_args, reference=transpose_ref, outputs=(1,), complexity="N^2", flops="0",
    min_bytes="8 * N * N", rtol=RTOL_EXACT, description="B = A^T, one thread per element",
)  # fmt: skip
TRANSPOSE_TILED = _spec(
    "transpose", "transpose_tiled", SRC_TRANSPOSE_TILED, dim=2, sizes="grid", n_arg=2,
    make_args=square_args, reference=transpose_ref, outputs=(1,), complexity="N^2", flops="0",
    min_bytes="8 * N * N", rtol=RTOL_EXACT, dynamic_smem="4 * by * (bx + 1)",
    description="B = A^T through a shared-memory tile",
)  # fmt: skip
JACOBI2D = _spec(
    "jacobi2d", "jacobi2d", SRC_JACOBI2D, dim=2, sizes="grid", n_arg=2, make_args=square_args,
    reference=jacobi2d_ref, outputs=(1,), complexity="N^2", flops="5 * N * N",
    min_bytes="8 * N * N", rtol=RTOL_FEW, description="one 5-point Jacobi step",
)  # fmt: skip
BLUR5 = _spec(
    "blur5", "blur5", SRC_BLUR5, dim=2, sizes="grid", n_arg=2, make_args=square_args,
    reference=blur5_ref, outputs=(1,), complexity="N^2", flops="26 * N * N",
    min_bytes="8 * N * N", rtol=RTOL_FEW, description="5 x 5 box blur, clamped borders",
)  # fmt: skip
RESIZE2X = _spec(
    "resize2x", "resize2x", SRC_RESIZE2X, dim=2, sizes="grid", n_arg=2, make_args=resize2x_args,
    reference=resize2x_ref, outputs=(1,), complexity="N^2", flops="40 * N * N",
    min_bytes="20 * N * N", rtol=RTOL_FEW, grid=("ceil(2 * N / bx)", "ceil(2 * N / by)", "1"),
    description="bilinear 2x upsampling",
)  # fmt: skip
MATMUL_TILED = _spec(
    "matmul", "matmul_tiled", SRC_MATMUL_TILED, dim=2, sizes="matmul", n_arg=3,
    make_args=matmul_args, reference=matmul_ref, outputs=(2,), complexity="N^3",
    flops="2 * N * N * N", min_bytes="12 * N * N", rtol=RTOL_SUM,
    dynamic_smem=f"{4 * MATMUL_KT} * (bx + by)",
    description=f"C = A B, {MATMUL_KT}-deep shared-memory panels",
)  # fmt: skip
LAPLACE3D = _spec(
    "laplace3d", "laplace3d", SRC_LAPLACE3D, dim=3, sizes="vol", n_arg=2, make_args=volume_args,
    reference=laplace3d_ref, outputs=(1,), complexity="N^3", flops="8 * N * N * N",
    min_bytes="8 * N * N * N", rtol=RTOL_FEW, description="7-point Laplacian of a volume",
)  # fmt: skip
AXPY3D = _spec(
    "axpy3d", "axpy3d", SRC_AXPY3D, dim=3, sizes="vol", n_arg=4, make_args=axpy3d_args,
    reference=axpy3d_ref, outputs=(2,), complexity="N^3", flops="2 * N * N * N",
    min_bytes="12 * N * N * N", rtol=RTOL_FEW, description="z = a x + y over a volume",
)  # fmt: skip

SPECS: tuple[KernelSpec, ...] = (
    SAXPY, BLACKSCHOLES, GATHER, POLY, CONV1D, HISTOGRAM, NBODY,
    ROWNORM, TRANSPOSE_NAIVE, TRANSPOSE_TILED, JACOBI2D, BLUR5, RESIZE2X, MATMUL_TILED,
    LAPLACE3D, AXPY3D,
)  # fmt: skip
