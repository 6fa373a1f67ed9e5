"""A fourth suite: ten kernels whose program parameters matter (issue 32).

Each kernel has compile-time program parameters (work per thread, tile sizes, vector widths,
unroll factors, private copies) besides its block shape: the joint space of (parameter values,
block) is what klaraptor chooses from. The kernels are written for this project from the
algorithms (each source comment names the published formulation it follows), not copied.

Store names are `tunables.<benchmark>.<kernel>`. Half the kernels take their parameters as
preprocessor defines (`param_style="define"`: compiled with `-DTILE=32 -DRPT=4`, the kernel is
`extern "C"`), half as C++ template arguments (`param_style="template"`: `template <int TM, int
TN> __global__ void sgemm(...)`, instantiated as `sgemm<4, 2>` through NVRTC name expressions).

Conventions (every kernel):
- One data parameter N, an int32, the kernel's last argument; `meta["layout"]` says what it
  counts ("N": elements, bodies or rows; "NxN": a square matrix or image; "N^3": a volume).
- Every (parameter values, block) the constraints admit computes the right result at every N
  the data parameter allows: tiles follow the block and the parameters through the grid and
  `dynamic_smem`, loads outside the data are masked, partial tiles are handled, and no
  `__syncthreads` sits under a thread-dependent condition. Where a kernel needs a property of
  the block (whole warps for shuffles, a tile the block divides) a constraint says so, with the
  reason next to it; the other constraints prune configurations no author would ship, keeping
  each kernel's joint space between about 100 and 400 configurations.
- `default_params` and `default_block` are what an author would ship: reasonable, not tuned.
- Every kernel is idempotent except the histogram, which adds its counts to the bins.
- `make_args(D, rng)` builds CuPy arrays (`device=False`: NumPy arrays) of random, non-zero
  data; outputs start random (NaN-poisoned before a check where fully written).
- `reference(D, host_args)` recomputes the outputs in float64 and never mutates its input.

`meta` of every spec: `benchmark`, `suite`, `complexity` (work per launch in N), `train_sizes`
(four) / `eval_sizes` (two, each at least 4x the work of the largest training size), `ncu_sizes`
(three training sizes), `flops` / `min_bytes` (per-launch estimates over N: arithmetic
operations and compulsory DRAM traffic), `overwrites` (outputs written entirely), `layout`,
`check_sizes` (a tiny N and odd ones, where every tile is partial somewhere: the output checks).

`joint_space(spec, D)` lists each variant's admitted default candidate blocks (the space before
the device limits of the compiled variants); `scripts/device_tunables_check.py` compiles and
checks every variant on a GPU with CuPy alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from klaraptor.core.types import ParamStyle, ParamValues
from klaraptor.space.configspace import default_candidates
from klaraptor.spec import Block, Data, DataParam, KernelSpec, ProgramParam
from klaraptor.suite.args import launch_args, rand_f32, sizes_meta
from klaraptor.suite.patterns import matmul_args as sgemm_args

# The arguments of the kernels shaped as the patterns' (the same arrays, the same draws).
from klaraptor.suite.patterns import (
    nbody_args,
    square_args,
    volume_args,
)

ArgsFactory = Callable[..., tuple[Any, ...]]
Reference = Callable[[Data, tuple[Any, ...]], dict[int, np.ndarray]]

INT32_MAX = 2**31 - 1
N_MAX_GRID = 46340  # N * N < 2**31: 32-bit element indices
N_MAX_VOL = 1290  # N ** 3 < 2**31
N_MAX_VEC = 2**30  # grid-stride and per-block offsets stay below 2**31

RTOL_INTEGER = 1e-12  # exact sums of integers (reduction, histogram counts)
RTOL_EXACT = 1e-6  # copied values
RTOL_FEW = 1e-5  # a few float32 operations per output
RTOL_MATH = 1e-4  # float32 exp, sums of a few hundred terms
RTOL_SUM = 1e-3  # sums of thousands of float32 terms

# Kernel constants (compiled into the sources).
SGEMM_BK = 16  # depth of the k-panels staged in shared memory
TRANSPOSE_PAD = 1  # shared tile rows padded by one word: column reads hit distinct banks
GSMAP_A, GSMAP_B = 1.5, -0.75
REDUCE_MAX_VALUE = 8  # reduction inputs are the integers 1..8, so every partial sum is exact
STENCIL2D_C = (0.4, 0.1, 0.05)  # centre, distance 1, distance 2 (weights sum to 1)
STENCIL3D_C = (0.4, 0.1)  # centre, each of the six neighbours
HIST_BINS = 256
SOFTMAX_L = 1024  # row length
CONV_K = 5  # filter side (radius 2)
CONV_W = ((np.arange(CONV_K * CONV_K) * 7) % 11 - 5.0) / 32.0
NBODY_EPS2 = 0.01


def _c_floats(values: np.ndarray) -> str:
    return "{" + ", ".join(f"{float(v)!r}f" for v in values) + "}"


# ---------------------------------------------------------------------------------------------
# CUDA sources
# ---------------------------------------------------------------------------------------------

SRC_SGEMM = f"""
// C = A B (N x N, row-major) with register tiles (Volkov and Demmel, SC 2008): a block of
// bx x by threads computes a (by TM) x (bx TN) tile of C; thread (tx, ty) owns rows ty + i by
// (i < TM) and columns tx + j bx (j < TN), so its shared-memory reads are conflict-free and its
// stores coalesced.
// The k dimension is walked in panels of {SGEMM_BK}: A's panel is stored k-major (transposed,
// rows padded by one word), B's row-major; both are loaded by all threads in turn (any block
// shape) and zero-filled outside the matrices, so partial tiles need no special case.
template <int TM, int TN>
__global__ void sgemm(const float* __restrict__ A, const float* __restrict__ B,
                      float* __restrict__ C, int N)
{{
    extern __shared__ float sgemm_smem[];
    const int bx = blockDim.x, by = blockDim.y;
    const int BM = by * TM, BN = bx * TN, lda = BM + 1;
    float* As = sgemm_smem;                    // {SGEMM_BK} x (BM + 1)
    float* Bs = sgemm_smem + {SGEMM_BK} * lda;   // {SGEMM_BK} x BN
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * bx + tx, nt = bx * by;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < N; k0 += {SGEMM_BK}) {{
        for (int e = tid; e < BM * {SGEMM_BK}; e += nt) {{
            const int r = e / {SGEMM_BK}, c = e % {SGEMM_BK};
            const int gr = row0 + r, gc = k0 + c;
            As[c * lda + r] = (gr < N && gc < N) ? A[gr * N + gc] : 0.0f;
        }}
        for (int e = tid; e < {SGEMM_BK} * BN; e += nt) {{
            const int r = e / BN, c = e % BN;
            const int gr = k0 + r, gc = col0 + c;
            Bs[r * BN + c] = (gr < N && gc < N) ? B[gr * N + gc] : 0.0f;
        }}
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < {SGEMM_BK}; ++k) {{
            float a[TM], b[TN];
            #pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k * lda + ty + i * by];
            #pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k * BN + tx + j * bx];
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }}
        __syncthreads();
    }}
    #pragma unroll
    for (int i = 0; i < TM; ++i) {{
        const int r = row0 + ty + i * by;
        #pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int c = col0 + tx + j * bx;
            if (r < N && c < N) C[r * N + c] = acc[i][j];
        }}
    }}
}}
"""

SRC_TRANSPOSE = f"""
// B = A^T through a TILE x TILE tile in shared memory (Ruetsch and Micikevicius, "Optimizing
// Matrix Transpose in CUDA", 2009; rows padded by {TRANSPOSE_PAD} word, so the
// transposed reads hit distinct banks). A bx x by block copies the tile in row passes of
// by RPT rows: each thread moves RPT rows (by apart) per pass, unrolled, so RPT loads are in
// flight at once, and TILE / bx columns (bx apart). Reads and writes are both row-wise.
#ifndef TILE
#error "TILE must be defined"
#endif
#ifndef RPT
#error "RPT must be defined"
#endif
extern "C" __global__ void transpose_tiles(const float* __restrict__ A, float* __restrict__ B,
                                           int N)
{{
    __shared__ float tile[TILE][TILE + {TRANSPOSE_PAD}];
    const int bx = blockDim.x, by = blockDim.y;
    const int x0 = blockIdx.x * TILE, y0 = blockIdx.y * TILE;  // A's tile: columns x0.., rows y0..
    for (int c = threadIdx.x; c < TILE; c += bx)
        for (int r0 = threadIdx.y; r0 < TILE; r0 += by * RPT) {{
            #pragma unroll
            for (int k = 0; k < RPT; ++k) {{
                const int r = r0 + k * by, i = y0 + r, j = x0 + c;
                if (i < N && j < N) tile[r][c] = A[i * N + j];
            }}
        }}
    __syncthreads();
    // B's tile: rows x0.. (A's columns), columns y0.. (A's rows).
    for (int c = threadIdx.x; c < TILE; c += bx)
        for (int r0 = threadIdx.y; r0 < TILE; r0 += by * RPT) {{
            #pragma unroll
            for (int k = 0; k < RPT; ++k) {{
                const int r = r0 + k * by, i = x0 + r, j = y0 + c;
                if (i < N && j < N) B[i * N + j] = tile[c][r];
            }}
        }}
}}
"""

SRC_GSMAP = """
// z = a x + b y by a grid-stride loop (Harris, "Write Flexible Kernels with Grid-Stride
// Loops", 2013): each pass a thread handles EPT vectors of VEC floats
// (float, float2 or float4 loads), `threads` vectors apart so every load is coalesced; the
// N % VEC trailing elements are handled one per thread by block 0. x, y and z must be aligned
// to VEC floats (allocations are; views at an odd offset are not).
#ifndef VEC
#error "VEC must be defined"
#endif
#ifndef EPT
#error "EPT must be defined"
#endif
#if VEC == 1
typedef float gsmap_vec;
#elif VEC == 2
typedef float2 gsmap_vec;
#elif VEC == 4
typedef float4 gsmap_vec;
#else
#error "VEC must be 1, 2 or 4"
#endif
union gsmap_pack { gsmap_vec v; float f[VEC]; };

extern "C" __global__ void gsmap(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ z, float a, float b, int N)
{
    const int nvec = N / VEC;
    const gsmap_vec* __restrict__ xv = reinterpret_cast<const gsmap_vec*>(x);
    const gsmap_vec* __restrict__ yv = reinterpret_cast<const gsmap_vec*>(y);
    gsmap_vec* __restrict__ zv = reinterpret_cast<gsmap_vec*>(z);
    const int threads = gridDim.x * blockDim.x;
    for (int base = blockIdx.x * blockDim.x + threadIdx.x; base < nvec; base += threads * EPT) {
        gsmap_pack px[EPT], py[EPT];
        #pragma unroll
        for (int e = 0; e < EPT; ++e) {
            const int v = base + e * threads;
            if (v < nvec) { px[e].v = xv[v]; py[e].v = yv[v]; }
        }
        #pragma unroll
        for (int e = 0; e < EPT; ++e) {
            const int v = base + e * threads;
            if (v < nvec) {
                gsmap_pack pz;
                #pragma unroll
                for (int k = 0; k < VEC; ++k) pz.f[k] = a * px[e].f[k] + b * py[e].f[k];
                zv[v] = pz.v;
            }
        }
    }
    const int t = nvec * VEC + threadIdx.x;
    if (blockIdx.x == 0 && t < N) z[t] = a * x[t] + b * y[t];
}
"""

SRC_REDUCE = """
// The sum of N floats in one launch (the threadfence reduction of the CUDA programming guide):
// each thread adds ITEMS values (bx apart, coalesced) with UNROLL independent accumulators, so
// UNROLL loads are in flight; the block sums its threads by warp shuffles and shared memory
// (double) and writes its partial; the last block to finish (a counter, reset afterwards, says
// which) adds the partials and writes the total. Whole warps only (bx % 32 == 0).
__device__ double reduce_block_sum(double v, double* warp_sum)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) warp_sum[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < nwarps ? warp_sum[lane] : 0.0;
        #pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    __syncthreads();  // warp_sum may be reused
    return v;  // the block's sum, in thread 0
}

template <int ITEMS, int UNROLL>
__global__ void reduce_sum(const float* __restrict__ x, double* __restrict__ partial,
                           unsigned int* __restrict__ count, double* __restrict__ out, int N)
{
    __shared__ double warp_sum[32];
    __shared__ int is_last;
    const int bx = blockDim.x, tid = threadIdx.x;
    const int base = blockIdx.x * bx * ITEMS + tid;
    float acc[UNROLL];
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0.0f;
    #pragma unroll 1
    for (int i0 = 0; i0 < ITEMS; i0 += UNROLL) {
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int g = base + (i0 + u) * bx;
            if (g < N) acc[u] += x[g];
        }
    }
    float mine = 0.0f;
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) mine += acc[u];
    const double s = reduce_block_sum((double)mine, warp_sum);
    if (tid == 0) {
        partial[blockIdx.x] = s;
        __threadfence();  // the partial is visible before the counter counts this block
        is_last = atomicAdd(count, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last) {
        double t0 = 0.0, t1 = 0.0;
        int b = tid;
        for (; b + bx < (int)gridDim.x; b += 2 * bx) {
            t0 += __ldcg(partial + b);  // from L2: written by other blocks
            t1 += __ldcg(partial + b + bx);
        }
        if (b < (int)gridDim.x) t0 += __ldcg(partial + b);
        const double total = reduce_block_sum(t0 + t1, warp_sum);
        if (tid == 0) {
            *out = total;
            *count = 0u;  // ready for the next launch
        }
    }
}
"""

SRC_STENCIL2D = f"""
// One step of a radius-2 star stencil (9 points) on an N x N grid; cells within 2 of the border
// are copied. Each thread computes CY consecutive rows of one column, keeping the column's five
// rows in registers as it walks down (CY + 4 vertical loads for CY outputs instead of 5 CY;
// the 2-D form of the register window of Micikevicius, GPGPU-2 2009).
#ifndef CY
#error "CY must be defined"
#endif
#define S2_C0 {STENCIL2D_C[0]!r}f
#define S2_C1 {STENCIL2D_C[1]!r}f
#define S2_C2 {STENCIL2D_C[2]!r}f
"""
SRC_STENCIL2D += """extern "C" __global__ void stencil2d(const float* __restrict__ A,
                                     float* __restrict__ B, int N)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i0 = (blockIdx.y * blockDim.y + threadIdx.y) * CY;
    if (j >= N || i0 >= N) return;  // no barrier below
    const bool inner_col = j >= 2 && j < N - 2;
    float w0 = i0 >= 2 ? A[(i0 - 2) * N + j] : 0.0f;
    float w1 = i0 >= 1 ? A[(i0 - 1) * N + j] : 0.0f;
    float w2 = A[i0 * N + j];
    float w3 = i0 + 1 < N ? A[(i0 + 1) * N + j] : 0.0f;
    #pragma unroll
    for (int k = 0; k < CY; ++k) {
        const int i = i0 + k;
        if (i >= N) break;
        const float w4 = i + 2 < N ? A[(i + 2) * N + j] : 0.0f;
        const int c = i * N + j;
        if (inner_col && i >= 2 && i < N - 2)
            B[c] = S2_C0 * w2 + S2_C1 * (w1 + w3 + A[c - 1] + A[c + 1])
                 + S2_C2 * (w0 + w4 + A[c - 2] + A[c + 2]);
        else
            B[c] = w2;
        w0 = w1; w1 = w2; w2 = w3; w3 = w4;
    }
}
"""

SRC_STENCIL3D = f"""
// One step of a 7-point heat stencil on an N^3 volume (x contiguous); border voxels are copied.
// The walk along z with a register window follows Micikevicius, GPGPU-2 2009.
// Each thread computes CZ consecutive z-planes of one (x, y) column, keeping the planes below,
// at and above in registers as it walks up (CZ + 2 loads along z for CZ outputs instead of 3 CZ).
#define S3_C0 {STENCIL3D_C[0]!r}f
#define S3_C1 {STENCIL3D_C[1]!r}f
"""
SRC_STENCIL3D += """template <int CZ>
__global__ void stencil3d(const float* __restrict__ A, float* __restrict__ B, int N)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = (blockIdx.z * blockDim.z + threadIdx.z) * CZ;
    if (x >= N || y >= N || z0 >= N) return;  // no barrier below
    const int P = N * N;
    const bool edge_xy = x == 0 || y == 0 || x == N - 1 || y == N - 1;
    int c = z0 * P + y * N + x;
    float below = z0 > 0 ? A[c - P] : 0.0f;
    float mid = A[c];
    #pragma unroll
    for (int k = 0; k < CZ; ++k) {
        const int z = z0 + k;
        if (z >= N) break;
        const float above = z + 1 < N ? A[c + P] : 0.0f;
        if (edge_xy || z == 0 || z == N - 1)
            B[c] = mid;
        else
            B[c] = S3_C0 * mid
                 + S3_C1 * (below + above + A[c - 1] + A[c + 1] + A[c - N] + A[c + N]);
        below = mid;
        mid = above;
        c += P;
    }
}
"""

SRC_HISTOGRAM = f"""
// A {HIST_BINS}-bin histogram with privatised copies (Gomez-Luna et al., "An optimized approach
// to histogram computation on GPU", 2013): each block keeps COPIES private histograms
// in shared memory (thread t counts into copy t % COPIES, so the lanes of a warp that meet on
// one bin mostly hit different copies; copies are {HIST_BINS + 1} words apart, so one bin's copies
// sit in different banks); each thread counts ITEMS values (bx apart, coalesced). The block then
// adds its copies bin by bin into the global bins (which it adds to) with one atomic per
// non-empty bin.
#ifndef COPIES
#error "COPIES must be defined"
#endif
#ifndef ITEMS
#error "ITEMS must be defined"
#endif
#define H_STRIDE {HIST_BINS + 1}
extern "C" __global__ void histogram_priv(const unsigned int* __restrict__ data,
                                          unsigned int* __restrict__ bins, int N)
{{
    __shared__ unsigned int priv[COPIES * H_STRIDE];
    for (int k = threadIdx.x; k < COPIES * H_STRIDE; k += blockDim.x) priv[k] = 0u;
    __syncthreads();
    unsigned int* mine = priv + (threadIdx.x % COPIES) * H_STRIDE;
    const int base = blockIdx.x * blockDim.x * ITEMS + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < ITEMS; ++k) {{
        const int g = base + k * blockDim.x;
        if (g < N) atomicAdd(&mine[data[g] % {HIST_BINS}u], 1u);
    }}
    __syncthreads();
    for (int b = threadIdx.x; b < {HIST_BINS}; b += blockDim.x) {{
        unsigned int s = 0u;
        #pragma unroll
        for (int c = 0; c < COPIES; ++c) s += priv[c * H_STRIDE + b];
        if (s != 0u) atomicAdd(&bins[b], s);
    }}
}}
"""

SRC_SOFTMAX = f"""
// Softmax of each of N rows of {SOFTMAX_L} floats, held in registers: WPR warps share a row
// (a bx-thread block holds bx / (32 WPR) rows), each lane loads {SOFTMAX_L} / (32 WPR) floats as
// vectors of VEC (32 lanes read consecutive vectors); the row's maximum and sum go through warp
// shuffles and, for WPR > 1, one shared slot per warp. Whole warps only.
template <int VEC> struct softmax_vec;
template <> struct softmax_vec<1> {{ typedef float type; }};
template <> struct softmax_vec<2> {{ typedef float2 type; }};
template <> struct softmax_vec<4> {{ typedef float4 type; }};

template <int WPR, int VEC>
__global__ void softmax_rows(const float* __restrict__ X, float* __restrict__ Y, int N)
{{
    typedef typename softmax_vec<VEC>::type V;
    constexpr int PER = {SOFTMAX_L} / (32 * WPR * VEC);  // vectors per thread
    __shared__ float part_max[32], part_sum[32];  // one slot per warp
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int rows_per_block = blockDim.x / (32 * WPR);
    const int row = blockIdx.x * rows_per_block + warp / WPR;
    const int part = warp % WPR, first = warp - part;  // the row's first warp
    const bool active = row < N;
    // Threads past the last row read row 0 (valid memory) and write nothing.
    const size_t offset = (size_t)(active ? row : 0) * {SOFTMAX_L};
    const V* x = reinterpret_cast<const V*>(X + offset);
    float v[PER * VEC];
    #pragma unroll
    for (int p = 0; p < PER; ++p) {{
        const V t = x[(p * WPR + part) * 32 + lane];
        const float* f = reinterpret_cast<const float*>(&t);
        #pragma unroll
        for (int k = 0; k < VEC; ++k) v[p * VEC + k] = f[k];
    }}
    float m = v[0];
    #pragma unroll
    for (int i = 1; i < PER * VEC; ++i) m = fmaxf(m, v[i]);
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (WPR > 1) {{
        if (lane == 0) part_max[warp] = m;
        __syncthreads();
        m = part_max[first];
        #pragma unroll
        for (int w = 1; w < WPR; ++w) m = fmaxf(m, part_max[first + w]);
    }}
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < PER * VEC; ++i) {{
        v[i] = expf(v[i] - m);
        s += v[i];
    }}
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (WPR > 1) {{
        if (lane == 0) part_sum[warp] = s;
        __syncthreads();
        s = part_sum[first];
        #pragma unroll
        for (int w = 1; w < WPR; ++w) s += part_sum[first + w];
    }}
    if (!active) return;  // after the last barrier
    const float inv = 1.0f / s;
    V* y = reinterpret_cast<V*>(Y + offset);
    #pragma unroll
    for (int p = 0; p < PER; ++p) {{
        V t;
        float* f = reinterpret_cast<float*>(&t);
        #pragma unroll
        for (int k = 0; k < VEC; ++k) f[k] = v[p * VEC + k] * inv;
        y[(p * WPR + part) * 32 + lane] = t;
    }}
}}
"""

SRC_CONV2D = f"""
// A {CONV_K} x {CONV_K} convolution (correlation, zero outside the image) with output tiling
// (register blocking of the shared-tile convolution in Podlozhnyuk, "Image Convolution with
// CUDA", 2007): a bx x by block computes a (by OY) x (bx OX) tile of outputs, each thread
// OY x OX adjacent ones. The block stages its input tile with the halo in shared memory; a
// thread walks the OY + {CONV_K - 1} input rows of its window once, each row's OX + {CONV_K - 1}
// values in registers, and adds every row to each output row it touches (all indices
// compile-time after unrolling).
#ifndef OX
#error "OX must be defined"
#endif
#ifndef OY
#error "OY must be defined"
#endif
#define CONV_K {CONV_K}
#define CONV_R {CONV_K // 2}
__constant__ float CONV_W[CONV_K * CONV_K] = {_c_floats(CONV_W)};

extern "C" __global__ void conv2d_tiles(const float* __restrict__ A, float* __restrict__ B, int N)
{{
    extern __shared__ float conv_tile[];
    const int TW = blockDim.x * OX, TH = blockDim.y * OY;  // the block's outputs
    const int SW = TW + 2 * CONV_R, SH = TH + 2 * CONV_R;  // its input tile with the halo
    const int ox0 = blockIdx.x * TW, oy0 = blockIdx.y * TH;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    for (int e = tid; e < SW * SH; e += nt) {{
        const int r = e / SW, c = e % SW;
        const int gi = oy0 - CONV_R + r, gj = ox0 - CONV_R + c;
        conv_tile[e] = (gi >= 0 && gi < N && gj >= 0 && gj < N) ? A[gi * N + gj] : 0.0f;
    }}
    __syncthreads();
    const int ly = threadIdx.y * OY, lx = threadIdx.x * OX;
    float acc[OY][OX];
    #pragma unroll
    for (int oy = 0; oy < OY; ++oy)
        #pragma unroll
        for (int ox = 0; ox < OX; ++ox) acc[oy][ox] = 0.0f;
    #pragma unroll
    for (int rr = 0; rr < OY + CONV_K - 1; ++rr) {{
        float seg[OX + CONV_K - 1];
        #pragma unroll
        for (int c = 0; c < OX + CONV_K - 1; ++c) seg[c] = conv_tile[(ly + rr) * SW + lx + c];
        #pragma unroll
        for (int oy = 0; oy < OY; ++oy) {{
            const int ky = rr - oy;
            if (ky >= 0 && ky < CONV_K) {{
                #pragma unroll
                for (int ox = 0; ox < OX; ++ox)
                    #pragma unroll
                    for (int kx = 0; kx < CONV_K; ++kx)
                        acc[oy][ox] = fmaf(CONV_W[ky * CONV_K + kx], seg[ox + kx], acc[oy][ox]);
            }}
        }}
    }}
    #pragma unroll
    for (int oy = 0; oy < OY; ++oy) {{
        const int i = oy0 + ly + oy;
        #pragma unroll
        for (int ox = 0; ox < OX; ++ox) {{
            const int j = ox0 + lx + ox;
            if (i < N && j < N) B[i * N + j] = acc[oy][ox];
        }}
    }}
}}
"""

SRC_NBODY = f"""
// All-pairs gravitational accelerations (softening {NBODY_EPS2}; Nyland, Harris and Prins,
// GPU Gems 3, ch. 31): the bodies are staged TILE at a
// time in shared memory (loaded by all threads in turn, padded with massless bodies, which add
// nothing), and each thread walks a tile UNROLL bodies per loop step.
template <int TILE, int UNROLL>
__global__ void nbody_tiles(const float4* __restrict__ body, float* __restrict__ acc, int N)
{{
    __shared__ float4 tile[TILE];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float4 me = i < N ? body[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float ax = 0.0f, ay = 0.0f, az = 0.0f;
    for (int j0 = 0; j0 < N; j0 += TILE) {{
        for (int t = threadIdx.x; t < TILE; t += blockDim.x) {{
            const int j = j0 + t;
            tile[t] = j < N ? body[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }}
        __syncthreads();
        #pragma unroll 1
        for (int k = 0; k < TILE; k += UNROLL) {{
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {{
                const float4 o = tile[k + u];
                const float dx = o.x - me.x, dy = o.y - me.y, dz = o.z - me.z;
                const float d2 = fmaf(dx, dx, fmaf(dy, dy, fmaf(dz, dz, {NBODY_EPS2}f)));
                const float inv = rsqrtf(d2);
                const float f = o.w * inv * inv * inv;
                ax = fmaf(f, dx, ax);
                ay = fmaf(f, dy, ay);
                az = fmaf(f, dz, az);
            }}
        }}
        __syncthreads();
    }}
    if (i < N) {{
        acc[3 * i] = ax;
        acc[3 * i + 1] = ay;
        acc[3 * i + 2] = az;
    }}
}}
"""


# ---------------------------------------------------------------------------------------------
# Arguments: CuPy arrays (device=False: NumPy) of random, non-zero data
# ---------------------------------------------------------------------------------------------


def gsmap_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, y, z, a, b, N)."""
    n = D["N"]
    return launch_args(
        device,
        rand_f32(rng, n),
        rand_f32(rng, n),
        rand_f32(rng, n),
        np.float32(GSMAP_A),
        np.float32(GSMAP_B),
        np.int32(n),
    )


def reduce_partials(n: int) -> int:
    """Length of the reduction's partial-sum workspace: one per block, and a block (whole warps,
    at least one item per thread) covers at least 32 values."""
    return max(1, -(-n // 32))


def reduce_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(x, partial, count, out, N): x holds the integers 1..REDUCE_MAX_VALUE (as float32), so
    every partial sum is exact and the result is exact whatever the order of the additions: a
    lost or doubled value shows at any N. The counter starts at 0 (the kernel leaves it so)."""
    n = D["N"]
    x = rng.integers(1, REDUCE_MAX_VALUE + 1, n).astype(np.float32)
    partial = rng.random(reduce_partials(n))
    return launch_args(device, x, partial, np.zeros(1, dtype=np.uint32), rng.random(1), np.int32(n))


def histogram_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(data, bins, N): values binomial around the middle bin (about 30 bins take most values,
    as in an image's histogram, so lanes of a warp often meet on one bin); the bins start at
    random counts, which the kernel adds to.

    On the device the values are drawn there (CuPy's binomial, seeded from `rng`): the kernel
    changes its bins, so every output check makes fresh arguments, and drawing 2**23 binomial
    values on the host takes 0.3 to 2.5 s (this CPU, idle to loaded) at every checked point:
    the likely reason the bench's histogram step ran out of its 100 s on the H200 at 1954ee6."""
    n = D["N"]
    bins = rng.integers(1, 1000, HIST_BINS).astype(np.uint32)
    if device:
        import cupy as cp

        seed = int(rng.integers(0, 2**63 - 1))
        data = cp.random.RandomState(seed).binomial(HIST_BINS - 1, 0.5, n).astype(cp.uint32)
        return data, cp.asarray(bins), np.int32(n)
    data = rng.binomial(HIST_BINS - 1, 0.5, n).astype(np.uint32)
    return data, bins, np.int32(n)


def softmax_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(X, Y, N): N rows of SOFTMAX_L values in [-4, 4)."""
    n = D["N"]
    return launch_args(
        device, rand_f32(rng, (n, SOFTMAX_L), -4.0, 4.0), rand_f32(rng, (n, SOFTMAX_L)), np.int32(n)
    )


# ---------------------------------------------------------------------------------------------
# References (float64, inputs untouched)
# ---------------------------------------------------------------------------------------------


def _f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def sgemm_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: _f64(h[0]) @ _f64(h[1])}


def transpose_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: _f64(h[0]).T.copy()}


def gsmap_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {2: float(h[3]) * _f64(h[0]) + float(h[4]) * _f64(h[1])}


def reduce_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    # The counter is back at 0 and the total is exact (integer data).
    return {2: np.zeros(1), 3: np.array([_f64(h[0]).sum()])}


def stencil2d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    b = a.copy()
    if a.shape[0] > 4:
        c0, c1, c2 = STENCIL2D_C
        m = slice(2, -2)
        b[m, m] = (
            c0 * a[m, m]
            + c1 * (a[1:-3, m] + a[3:-1, m] + a[m, 1:-3] + a[m, 3:-1])
            + c2 * (a[:-4, m] + a[4:, m] + a[m, :-4] + a[m, 4:])
        )
    return {1: b}


def stencil3d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    b = a.copy()
    if a.shape[0] > 2:
        c0, c1 = STENCIL3D_C
        m = slice(1, -1)
        b[m, m, m] = c0 * a[m, m, m] + c1 * (
            a[:-2, m, m] + a[2:, m, m] + a[m, :-2, m] + a[m, 2:, m] + a[m, m, :-2] + a[m, m, 2:]
        )
    return {1: b}


def histogram_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    counts = np.bincount(np.asarray(h[0]) % HIST_BINS, minlength=HIST_BINS)
    return {1: _f64(h[1]) + counts}


def softmax_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x = np.asarray(h[0])
    out = np.empty(x.shape, dtype=np.float64)
    for lo in range(0, x.shape[0], 8192):  # chunks keep the float64 temporaries small
        c = x[lo : lo + 8192].astype(np.float64)
        e = np.exp(c - c.max(axis=1, keepdims=True))
        out[lo : lo + 8192] = e / e.sum(axis=1, keepdims=True)
    return {1: out}


def conv2d_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    n, r = a.shape[0], CONV_K // 2
    p = np.pad(a, r)
    w = CONV_W.reshape(CONV_K, CONV_K)
    out = np.zeros_like(a)
    for ky in range(CONV_K):
        for kx in range(CONV_K):
            out += w[ky, kx] * p[ky : ky + n, kx : kx + n]
    return {1: out}


def nbody_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    """a_i = sum_j m_j (p_j - p_i) / (|p_j - p_i|^2 + eps^2)^(3/2), as matrix products: with
    w_ij = m_j / r_ij^3, a_i = (w p)_i - (sum_j w_ij) p_i, and r_ij^2 = |p_i|^2 + |p_j|^2 -
    2 p_i . p_j (float64: in a unit cube the cancellation costs about 1e-15 relative). One
    pass over each pair matrix instead of five: the check of N = 16384 took seconds."""
    body = _f64(h[0]).reshape(-1, 4)
    pos, mass = body[:, :3], body[:, 3]
    sq = (pos * pos).sum(axis=1)
    acc = np.empty_like(pos)
    for lo in range(0, len(pos), 1024):  # chunks keep the pair matrices near 100 MB
        p = pos[lo : lo + 1024]
        r2 = sq[lo : lo + 1024, None] + sq[None, :] - 2.0 * (p @ pos.T)
        np.maximum(r2, 0.0, out=r2)  # rounding may leave -1e-16 for a body and itself
        r2 += NBODY_EPS2
        w = np.sqrt(r2)
        w *= r2
        np.divide(mass[None, :], w, out=w)  # m_j / r^3 (sqrt and a division: pow is slower)
        acc[lo : lo + 1024] = w @ pos - w.sum(axis=1)[:, None] * p
    return {1: acc.reshape(-1)}


# ---------------------------------------------------------------------------------------------
# Sizes (training, evaluation: at least 4x the work of the largest training size; counters)
# ---------------------------------------------------------------------------------------------

# Per size class: training sizes, evaluation sizes (at least 4x the work of the largest
# training size), counter sizes, layout, and the check sizes: a tiny one and odd ones (primes, so
# no block or tile divides them: every tile is partial somewhere).
Sizes = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], str, tuple[int, ...]]
_SIZES: dict[str, Sizes] = {
    # C = A B: N^3 work; the slowest admitted tile at 1792 stays near 3 ms.
    "sgemm": ((384, 512, 640, 768), (1280, 1792), (384, 512, 768), "NxN", (1, 37, 131)),
    "grid": ((1024, 1536, 2048, 3072), (6144, 8192), (1024, 2048, 3072), "NxN", (1, 5, 67, 131)),
    "vec": ((2**20, 2**21, 2**22, 2**23), (2**25, 2**26), (2**20, 2**22, 2**23), "N", (1, 5, 5003)),
    # The reduction reads 4 bytes per element: twice the elements of the maps.
    "vec_big": ((2**21, 2**22, 2**23, 2**24), (2**26, 2**27), (2**21, 2**23, 2**24), "N",
                (1, 5, 5003, 100003)),
    "vol": ((64, 96, 128, 192), (320, 448), (64, 128, 192), "N^3", (1, 3, 13, 37)),
    "rows": ((2048, 4096, 8192, 16384), (65536, 131072), (2048, 8192, 16384), "N", (1, 3, 37)),
    # All pairs: N^2 work; the slowest admitted configuration at 40960 stays near 3 ms.
    "nbody": ((4096, 8192, 12288, 16384), (32768, 40960), (4096, 8192, 16384), "N", (1, 5, 307)),
}  # fmt: skip
HI = {"sgemm": N_MAX_GRID, "grid": N_MAX_GRID, "vec": N_MAX_VEC, "vec_big": N_MAX_VEC,
      "vol": N_MAX_VOL, "rows": INT32_MAX // SOFTMAX_L, "nbody": INT32_MAX // 4}  # fmt: skip


def _spec(
    benchmark: str,
    kernel: str,
    source: str,
    *,
    style: ParamStyle,
    params: dict[str, tuple[int, ...]],
    default_params: dict[str, int],
    dim: int,
    grid: tuple[str, str, str],
    default_block: Block,
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
    constraints: tuple[str, ...] = (),
    dynamic_smem: str | None = None,
    idempotent: bool = True,
    overwrites: tuple[int, ...] | None = None,
) -> KernelSpec:
    train, evals, ncu, layout, check = _SIZES[sizes]
    written = outputs if overwrites is None else overwrites
    return KernelSpec(
        name=f"tunables.{benchmark}.{kernel}",
        source=source,
        kernel=kernel,
        params=tuple(ProgramParam(name, values) for name, values in params.items()),
        param_style=style,
        default_params=ParamValues(list(params), [default_params[name] for name in params]),
        data=(DataParam("N", arg=n_arg, lo=1, hi=HI[sizes]),),
        dim=dim,
        grid=grid,
        constraints=constraints,
        dynamic_smem=dynamic_smem,
        make_args=make_args,
        idempotent=idempotent,
        default_block=default_block,
        reference=reference,
        outputs=outputs,
        rtol=rtol,
        description=description,
        meta={
            **sizes_meta(
                benchmark,
                "tunables",
                complexity,
                (train, evals, ncu),
                flops,
                min_bytes,
                written,
                layout,
            ),
            "check_sizes": check,
        },
    )


DEFINE, TEMPLATE = ParamStyle.DEFINE, ParamStyle.TEMPLATE

SGEMM = _spec(
    "sgemm", "sgemm", SRC_SGEMM, style=TEMPLATE,
    params={"TM": (1, 2, 4, 8), "TN": (1, 2, 4, 8)}, default_params={"TM": 2, "TN": 2},
    dim=2, grid=("ceil(N / (bx * TN))", "ceil(N / (by * TM))", "1"), default_block=(16, 16, 1),
    # Block tiles from 16 x 16 (below, A and B are re-read from L2 more than N / 16 times) to
    # 128 x 128 (the shared panels stay under 17 KB).
    constraints=("bx * TN >= 16", "by * TM >= 16", "bx * TN <= 128", "by * TM <= 128"),
    dynamic_smem=f"{4 * SGEMM_BK} * (by * TM + 1 + bx * TN)",
    sizes="sgemm", n_arg=3, make_args=sgemm_args, reference=sgemm_ref, outputs=(2,),
    complexity="N^3", flops="2 * N * N * N", min_bytes="12 * N * N", rtol=RTOL_SUM,
    description="C = A B, register tiles of TM x TN outputs per thread",
)  # fmt: skip
TRANSPOSE = _spec(
    "transpose", "transpose_tiles", SRC_TRANSPOSE, style=DEFINE,
    params={"TILE": (16, 32, 64), "RPT": (1, 2, 4, 8)}, default_params={"TILE": 32, "RPT": 4},
    dim=2, grid=("ceil(N / TILE)", "ceil(N / TILE)", "1"), default_block=(32, 8, 1),
    # The passes cover the tile exactly (bx columns, by RPT rows at a time); rows of at least 8
    # threads keep the reads and writes in whole 32-byte sectors.
    constraints=("TILE % bx == 0", "TILE % (by * RPT) == 0", "bx >= 8"),
    sizes="grid", n_arg=2, make_args=square_args, reference=transpose_ref, outputs=(1,),
    complexity="N^2", flops="0", min_bytes="8 * N * N", rtol=RTOL_EXACT,
    description="B = A^T through a TILE x TILE shared tile, RPT rows per thread per pass",
)  # fmt: skip
GSMAP = _spec(
    "gsmap", "gsmap", SRC_GSMAP, style=DEFINE,
    params={"VEC": (1, 2, 4), "EPT": (1, 2, 4, 8)}, default_params={"VEC": 1, "EPT": 1},
    dim=1, grid=("ceil(N / (bx * VEC * EPT))", "1", "1"), default_block=(256, 1, 1),
    sizes="vec", n_arg=5, make_args=gsmap_args, reference=gsmap_ref, outputs=(2,),
    complexity="N", flops="3 * N", min_bytes="12 * N", rtol=RTOL_FEW,
    description="z = a x + b y, grid-stride, EPT vectors of VEC floats per thread and pass",
)  # fmt: skip
REDUCE = _spec(
    "reduce", "reduce_sum", SRC_REDUCE, style=TEMPLATE,
    params={"ITEMS": (1, 2, 4, 8, 16), "UNROLL": (1, 2, 4)},
    default_params={"ITEMS": 4, "UNROLL": 1},
    dim=1, grid=("ceil(N / (bx * ITEMS))", "1", "1"), default_block=(256, 1, 1),
    # UNROLL accumulators take turns over the ITEMS values; warp shuffles need whole warps; a
    # block sums at least 512 values (at most N / 512 partials and counter atomics).
    constraints=("ITEMS % UNROLL == 0", "bx % 32 == 0", "bx * ITEMS >= 512"),
    sizes="vec_big", n_arg=4, make_args=reduce_args, reference=reduce_ref, outputs=(2, 3),
    overwrites=(3,), complexity="N", flops="N", min_bytes="4 * N", rtol=RTOL_INTEGER,
    description="sum of N floats in one launch (last block adds the partials), ITEMS per "
    "thread, UNROLL loads in flight",
)  # fmt: skip
STENCIL2D = _spec(
    "stencil2d", "stencil2d", SRC_STENCIL2D, style=DEFINE,
    params={"CY": (1, 2, 4, 8, 16)}, default_params={"CY": 1},
    dim=2, grid=("ceil(N / bx)", "ceil(N / (by * CY))", "1"), default_block=(32, 8, 1),
    constraints=("bx >= 8",),  # rows of at least 8 threads: whole 32-byte sectors
    sizes="grid", n_arg=2, make_args=square_args, reference=stencil2d_ref, outputs=(1,),
    complexity="N^2", flops="17 * N * N", min_bytes="8 * N * N", rtol=RTOL_FEW,
    description="radius-2 star stencil, CY rows per thread (register window along y)",
)  # fmt: skip
STENCIL3D = _spec(
    "stencil3d", "stencil3d", SRC_STENCIL3D, style=TEMPLATE,
    params={"CZ": (1, 2, 4, 8, 16)}, default_params={"CZ": 2},
    dim=3, grid=("ceil(N / bx)", "ceil(N / by)", "ceil(N / (bz * CZ))"),
    default_block=(32, 8, 1),
    constraints=("bx >= 32",),  # whole warps along x: coalesced rows
    sizes="vol", n_arg=2, make_args=volume_args, reference=stencil3d_ref, outputs=(1,),
    complexity="N^3", flops="8 * N * N * N", min_bytes="8 * N * N * N", rtol=RTOL_FEW,
    description="7-point heat stencil, CZ planes per thread (register window along z)",
)  # fmt: skip
HISTOGRAM = _spec(
    "histogram", "histogram_priv", SRC_HISTOGRAM, style=DEFINE,
    params={"COPIES": (1, 4, 16), "ITEMS": (4, 16, 64)},
    default_params={"COPIES": 1, "ITEMS": 16},
    dim=1, grid=("ceil(N / (bx * ITEMS))", "1", "1"), default_block=(256, 1, 1),
    # A block counts at least 1024 values, else clearing and merging its copies dominates; whole
    # pairs of warps keep the space near 130 configurations (the output check of this
    # non-idempotent kernel makes fresh arguments at every point, so points cost more here).
    constraints=("bx * ITEMS >= 1024", "bx % 64 == 0"),
    sizes="vec", n_arg=2, make_args=histogram_args, reference=histogram_ref, outputs=(1,),
    idempotent=False, overwrites=(), complexity="N", flops="N", min_bytes="4 * N",
    rtol=RTOL_INTEGER,
    description=f"{HIST_BINS}-bin histogram, COPIES private copies per block, ITEMS per thread",
)  # fmt: skip
SOFTMAX = _spec(
    "softmax", "softmax_rows", SRC_SOFTMAX, style=TEMPLATE,
    params={"WPR": (1, 2, 4, 8), "VEC": (1, 2, 4)}, default_params={"WPR": 1, "VEC": 1},
    dim=1, grid=("ceil(N * 32 * WPR / bx)", "1", "1"), default_block=(256, 1, 1),
    constraints=("bx % (32 * WPR) == 0",),  # whole warps, whole rows per block
    sizes="rows", n_arg=2, make_args=softmax_args, reference=softmax_ref, outputs=(1,),
    complexity="N", flops=f"{4 * SOFTMAX_L} * N", min_bytes=f"{8 * SOFTMAX_L} * N",
    rtol=RTOL_MATH,
    description=f"softmax of rows of {SOFTMAX_L} in registers, WPR warps per row, VEC-wide loads",
)  # fmt: skip
CONV2D = _spec(
    "conv2d", "conv2d_tiles", SRC_CONV2D, style=DEFINE,
    params={"OX": (1, 2, 4), "OY": (1, 2, 4)}, default_params={"OX": 1, "OY": 1},
    dim=2, grid=("ceil(N / (bx * OX))", "ceil(N / (by * OY))", "1"), default_block=(32, 8, 1),
    # Rows of at least 8 threads; the input tile with its halo fits in 48 KB.
    constraints=("bx >= 8", f"(bx * OX + {CONV_K - 1}) * (by * OY + {CONV_K - 1}) <= 12288"),
    dynamic_smem=f"4 * (bx * OX + {CONV_K - 1}) * (by * OY + {CONV_K - 1})",
    sizes="grid", n_arg=2, make_args=square_args, reference=conv2d_ref, outputs=(1,),
    complexity="N^2", flops=f"{2 * CONV_K * CONV_K} * N * N", min_bytes="8 * N * N",
    rtol=RTOL_FEW,
    description=f"{CONV_K} x {CONV_K} convolution, shared input tile, OY x OX outputs per thread",
)  # fmt: skip
NBODY = _spec(
    "nbody", "nbody_tiles", SRC_NBODY, style=TEMPLATE,
    params={"TILE": (32, 64, 128, 256), "UNROLL": (1, 2, 4, 8)},
    default_params={"TILE": 128, "UNROLL": 1},
    dim=1, grid=("ceil(N / bx)", "1", "1"), default_block=(128, 1, 1),
    # At most 512 threads: at these sizes 1024-thread blocks leave most SMs idle.
    constraints=("bx <= 512",),
    sizes="nbody", n_arg=2, make_args=nbody_args, reference=nbody_ref, outputs=(1,),
    complexity="N^2", flops="20 * N * N", min_bytes="28 * N", rtol=RTOL_SUM,
    description="all-pairs accelerations, TILE bodies staged in shared memory, UNROLL per step",
)  # fmt: skip

SPECS: tuple[KernelSpec, ...] = (
    SGEMM, TRANSPOSE, GSMAP, REDUCE, STENCIL2D, STENCIL3D, HISTOGRAM, SOFTMAX, CONV2D, NBODY,
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The joint space
# ---------------------------------------------------------------------------------------------


def joint_space(
    spec: KernelSpec, D: Mapping[str, int], *, max_threads: int = 1024
) -> dict[ParamValues, list[Block]]:
    """Each variant's default candidate blocks (ConfigSpace's rules) that the spec's
    constraints admit at data size D, in canonical order; before the device limits of the
    compiled variants (registers, shared memory), which only a compile can tell."""
    blocks = default_candidates(spec.dim, max_threads)
    b = np.asarray(blocks, dtype=np.int64)
    out: dict[ParamValues, list[Block]] = {}
    for pv in spec.variants():
        ok = np.ones(len(blocks), dtype=bool)
        for _, mask in spec.constraint_masks(D, b[:, 0], b[:, 1], b[:, 2], params=pv):
            ok &= np.asarray(mask, dtype=bool)
        out[pv] = [blk for blk, keep in zip(blocks, ok) if keep]
    return out


def check_blocks(spec: KernelSpec, blocks: list[Block]) -> list[Block]:
    """The blocks a correctness check runs, out of one variant's admitted `blocks`: the default
    block (when admitted), the fewest and most threads, the widest and tallest shapes, the
    deepest (3-D) and, in 1-D, a width that is not a power of two."""
    if not blocks:
        return []
    threads = [b[0] * b[1] * b[2] for b in blocks]
    aspect = [b[0] / (b[1] * b[2]) for b in blocks]
    picks = [spec.default_block] if spec.default_block in blocks else []
    picks += [
        blocks[int(np.argmin(threads))],
        blocks[int(np.argmax(threads))],
        blocks[int(np.argmax(aspect))],
        blocks[int(np.argmin(aspect))],
        blocks[int(np.argmax([b[2] for b in blocks]))],
    ]
    if spec.dim == 1:
        picks += [b for b in blocks if b[0] & (b[0] - 1)][:1]  # e.g. 96: not a power of two
    return list(dict.fromkeys(picks))


def output_errors(got: Any, expected: np.ndarray) -> tuple[float, float]:
    """(‖got − expected‖ / ‖expected‖, max |got − expected| / max |expected|), each the
    absolute figure where `expected` is all zero; NaN where `got` holds a NaN. The check wants
    both within the spec's rtol: the second catches a few wrong elements in a large output."""
    o = np.asarray(got, dtype=np.float64).ravel()
    r = np.asarray(expected, dtype=np.float64).ravel()
    if o.shape != r.shape:
        return math.inf, math.inf
    if np.isnan(o).any():
        return math.nan, math.nan
    d = np.abs(o - r)
    norm, peak = float(np.linalg.norm(r)), float(np.abs(r).max(initial=0.0))
    rel = float(np.linalg.norm(d)) / norm if norm > 0 else float(np.linalg.norm(d))
    worst = float(d.max(initial=0.0))
    return rel, worst / peak if peak > 0 else worst
