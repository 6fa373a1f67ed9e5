"""A second suite: kernels of the Rodinia applications (Che et al., "Rodinia: A Benchmark Suite for
Heterogeneous Computing", IISWC 2009), the kind of workloads SAAKE and SNOWPACK were evaluated on.

The kernels are written for this project from the published algorithms (cited per application
below), not copied from Rodinia's sources. They keep what makes Rodinia different from the
PolyBench-style suite: shared-memory tiles whose size follows the block, `__syncthreads` inside
loops (pyramids of stencil steps, tree reductions, wavefronts) and per-thread work that depends
on the data (graph traversal).

Store names are `rodinia.<app>.<kernel>`, e.g. `rodinia.hotspot.temp`, `rodinia.srad.k1`.

Conventions (every kernel):
- One data parameter N, an int32, the kernel's last argument. `meta["layout"]` says what N
  counts: "NxN" (an N x N grid or matrix) or "N" (points, nodes, columns or input units; the other
  dimensions are the fixed constants of each application, documented below).
- Any candidate block shape is correct: shared-memory tiles are sized by the block through
  `dynamic_smem` (bytes), the grid is a ceil(...) expression and threads check their bounds.
  Where the algorithm needs a shape property (a stencil pyramid needs a tile wider than its
  halo), `constraints` say so, with the reason next to them.
- No `__syncthreads` sits under a thread-dependent condition: threads outside the domain stay in
  the block until its last barrier and only skip the work.
- Every kernel is idempotent: where Rodinia updates an array in place, the kernel here writes a
  separate output, so repeated timing launches do the same work and the output check can reuse
  its arguments. The docstrings say where this departs from Rodinia.
- `make_args(D, rng)` builds CuPy arrays (`device=False`: NumPy arrays) of random, non-zero data
  (a graph and its BFS state for bfs); outputs start random, so unwritten elements fail the check.
- `reference(D, host_args)` recomputes the outputs with NumPy in float64 (SciPy for triangular
  solves) and never mutates its input.

`meta` of every spec: `benchmark` (the application), `complexity` (work per launch in N),
`flops` / `min_bytes` (per-launch estimates over N in the spec grammar: arithmetic operations and
compulsory DRAM traffic), `train_sizes` / `eval_sizes` (every training size strictly below every
evaluation size; evaluation at 2.7-10.7x the largest training size), `ncu_sizes` (three training
sizes for hardware counters), `overwrites` (outputs written entirely, poisoned before a check),
`layout`, `features` (any of "shared_tile", "barrier_in_loop", "data_dependent") and, where
Rodinia's own block is not a candidate, `rodinia_block`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from klaraptor.spec import Block, Data, DataParam, KernelSpec
from klaraptor.suite.args import launch_args, sizes_meta

ArgsFactory = Callable[..., tuple[Any, ...]]
Reference = Callable[[Data, tuple[Any, ...]], dict[int, np.ndarray]]

# Sizes. "NxN" kernels: grid/matrix side; "N" kernels: points, nodes or columns.
TRAIN_GRID = (512, 768, 1024, 1536, 2048)
EVAL_GRID = (4096, 8192, 16384)
NCU_GRID = (768, 1536, 2048)
TRAIN_VEC = (131072, 262144, 393216, 524288, 786432)
EVAL_VEC = (2097152, 4194304, 8388608)
NCU_VEC = (262144, 524288, 786432)
# nn moves 12 bytes per point: eight times more points keep its launches above launch overhead.
TRAIN_NN = tuple(8 * n for n in TRAIN_VEC)
EVAL_NN = tuple(8 * n for n in EVAL_VEC)
NCU_NN = tuple(8 * n for n in NCU_VEC)
# streamcluster moves 1 KB per point (256 coordinates): eight times fewer points.
TRAIN_SC = tuple(n // 8 for n in TRAIN_VEC)
EVAL_SC = tuple(n // 8 for n in EVAL_VEC)
NCU_SC = tuple(n // 8 for n in NCU_VEC)

N_MAX_GRID = 46340  # largest N with N * N < 2**31 (32-bit indexing)
INT32_MAX = 2**31 - 1

# Relative tolerances of the output check (norm-wise, against float64).
RTOL_EXACT = 1e-6  # integer-valued results: any wrong element is far above this
RTOL_FEW = 1e-5  # a few float32 operations per element
RTOL_SUM = 1e-4  # divisions or sums of hundreds of float32 terms

# hotspot: Rodinia's pyramid height (time steps per launch) and the RC coefficients of its
# default 512 x 512 chip (chip 0.016 m square, 0.5 mm thick, silicon: k = 100 W/(m K),
# specific heat 1.75e6 J/(m^3 K), factor_chip 0.5, max power density 3e6 W/m^3, precision 0.001,
# ambient 80 K), kept fixed for every N so that the explicit scheme stays stable.
HS_PYRAMID = 2
HS_CHIP = 0.016
HS_T_CHIP = 0.0005
HS_K_SI = 100.0
HS_SPEC_HEAT = 1.75e6
HS_FACTOR = 0.5
HS_MAX_PD = 3.0e6
HS_PRECISION = 0.001
HS_AMB = 80.0
HS_GRID = 512


def hotspot_coefficients() -> tuple[float, float, float, float]:
    """(step / Cap, 1 / Rx, 1 / Ry, 1 / Rz) of the HotSpot RC model on the 512 x 512 chip."""
    cell = HS_CHIP / HS_GRID
    cap = HS_FACTOR * HS_SPEC_HEAT * HS_T_CHIP * cell * cell
    rx = cell / (2.0 * HS_K_SI * HS_T_CHIP * cell)
    ry = cell / (2.0 * HS_K_SI * HS_T_CHIP * cell)
    rz = HS_T_CHIP / (HS_K_SI * cell * cell)
    step = HS_PRECISION / (HS_MAX_PD / (HS_FACTOR * HS_T_CHIP * HS_SPEC_HEAT))
    return step / cap, 1.0 / rx, 1.0 / ry, 1.0 / rz


PF_ROWS = 20  # pathfinder: rows per launch (Rodinia's pyramid height)
SRAD_LAMBDA = 0.5  # srad: Rodinia's default diffusion step
BP_HID = 16  # backprop: hidden units (Rodinia's default)
BP_CHUNK = 16  # backprop: input units per partial sum (Rodinia's block height)
BP_ETA = 0.3  # backprop: learning rate and momentum (Rodinia's)
BP_MOMENTUM = 0.3
NN_TARGET = (30.0, 90.0)  # nn: the query's latitude and longitude
KM_FEATURES = 34  # kmeans: features and clusters of Rodinia's kdd_cup input
KM_CLUSTERS = 5
KM_SPREAD = 0.05  # kmeans: largest offset of a point from its centre, per feature
KM_SEPARATION = 2.0  # kmeans: offset that keeps the random centres apart (see _kmeans_points)
LUD_TILE = 16  # lud: the factorisation's panel width (Rodinia's BLOCK_SIZE)
NW_TILE = 16  # needleman-wunsch: tile side (Rodinia's BLOCK_SIZE)
NW_PENALTY = 10  # needleman-wunsch: gap penalty (Rodinia's default)
NW_SMEM_PER_TILE = 4 * ((NW_TILE + 1) ** 2 + NW_TILE**2)  # bytes: score tile with halo + ref tile
BFS_MEAN_DEGREE = 6  # bfs: mean out-degree (Rodinia's graph1MW_6 has 6)
SC_DIM = 256  # streamcluster: coordinates per point (Rodinia's default dim)


# ---------------------------------------------------------------------------------------------
# CUDA sources
# ---------------------------------------------------------------------------------------------

SRC_HOTSPOT = f"""
// HotSpot (Huang et al., IEEE TVLSI 14(5), 2006): explicit time steps of the thermal RC model,
//   T' = T + cdt * (P + (T_s + T_n - 2T) ry + (T_e + T_w - 2T) rx + (amb - T) rz),
// with a missing neighbour at the chip edge replaced by the cell itself.
// A block loads a bx x by tile of T and P into shared memory and takes HS_PYRAMID steps there
// (a pyramid: after step k the outer k rings of the tile are stale), then writes the inner
// (bx - 2 HS_PYRAMID) x (by - 2 HS_PYRAMID) cells: neighbouring tiles overlap by the halo.
// Dynamic shared memory: 3 bx by floats (two temperature buffers and the power tile).
#define HS_PYRAMID {HS_PYRAMID}

extern "C" __global__ void hotspot_temp(const float* __restrict__ power,
                                        const float* __restrict__ temp_in,
                                        float* __restrict__ temp_out,
                                        float cdt, float rx_1, float ry_1, float rz_1, float amb,
                                        int N)
{{
    extern __shared__ float hs_smem[];
    const int bw = blockDim.x, bh = blockDim.y;
    const int tx = threadIdx.x, ty = threadIdx.y;
    float* t_cur = hs_smem;
    float* t_next = hs_smem + bw * bh;
    float* pw = hs_smem + 2 * bw * bh;
    const int gx = (int)blockIdx.x * (bw - 2 * HS_PYRAMID) - HS_PYRAMID + tx;
    const int gy = (int)blockIdx.y * (bh - 2 * HS_PYRAMID) - HS_PYRAMID + ty;
    const int s = ty * bw + tx;
    const bool inside = gx >= 0 && gx < N && gy >= 0 && gy < N;
    if (inside) {{
        t_cur[s] = temp_in[gy * N + gx];
        pw[s] = power[gy * N + gx];
    }}
    // A cell steps when each neighbour is in the tile or beyond the chip edge (then itself).
    const bool steps = inside && (tx > 0 || gx == 0) && (tx < bw - 1 || gx == N - 1)
                              && (ty > 0 || gy == 0) && (ty < bh - 1 || gy == N - 1);
    const int w = gx == 0 ? s : s - 1;
    const int e = gx == N - 1 ? s : s + 1;
    const int n = gy == 0 ? s : s - bw;
    const int so = gy == N - 1 ? s : s + bw;
    __syncthreads();
    for (int step = 0; step < HS_PYRAMID; ++step) {{
        if (steps) {{
            const float t = t_cur[s];
            t_next[s] = t + cdt * (pw[s] + (t_cur[so] + t_cur[n] - 2.0f * t) * ry_1
                                         + (t_cur[e] + t_cur[w] - 2.0f * t) * rx_1
                                         + (amb - t) * rz_1);
        }} else if (inside) {{
            t_next[s] = t_cur[s];
        }}
        __syncthreads();  // every read of t_cur is done before it is overwritten next step
        float* swap = t_cur;
        t_cur = t_next;
        t_next = swap;
    }}
    if (inside && tx >= HS_PYRAMID && tx < bw - HS_PYRAMID && ty >= HS_PYRAMID
        && ty < bh - HS_PYRAMID) {{
        temp_out[gy * N + gx] = t_cur[s];
    }}
}}
"""

SRC_PATHFINDER = f"""
// PathFinder (dynamic programming on a grid, Rodinia): the cheapest path from the top row down,
// moving straight or diagonally:  dst[x] = wall[r][x] + min(src[x-1], src[x], src[x+1]),
// a missing neighbour at the edge replaced by the cell itself. One launch sweeps PF_ROWS rows.
// A block keeps bx columns in shared memory and sweeps all rows there (a pyramid: after row k
// the outer k columns are stale), then writes its inner bx - 2 PF_ROWS columns.
// Dynamic shared memory: 2 bx floats.
#define PF_ROWS {PF_ROWS}

extern "C" __global__ void pathfinder_dynproc(const float* __restrict__ wall,
                                              const float* __restrict__ src,
                                              float* __restrict__ dst, int N)
{{
    extern __shared__ float pf_smem[];
    const int bw = blockDim.x, tx = threadIdx.x;
    float* cur = pf_smem;
    float* nxt = pf_smem + bw;
    const int gx = (int)blockIdx.x * (bw - 2 * PF_ROWS) - PF_ROWS + tx;
    const bool inside = gx >= 0 && gx < N;
    const bool steps = inside && (tx > 0 || gx == 0) && (tx < bw - 1 || gx == N - 1);
    const int w = gx == 0 ? tx : tx - 1;
    const int e = gx == N - 1 ? tx : tx + 1;
    if (inside) cur[tx] = src[gx];
    __syncthreads();
    for (int r = 0; r < PF_ROWS; ++r) {{
        if (steps) {{
            nxt[tx] = wall[r * N + gx] + fminf(cur[tx], fminf(cur[w], cur[e]));
        }} else if (inside) {{
            nxt[tx] = cur[tx];
        }}
        __syncthreads();  // every read of cur is done before it is overwritten next row
        float* swap = cur;
        cur = nxt;
        nxt = swap;
    }}
    if (inside && tx >= PF_ROWS && tx < bw - PF_ROWS) dst[gx] = cur[tx];
}}
"""

SRC_SRAD = """
// SRAD, speckle reducing anisotropic diffusion (Yu and Acton, IEEE TIP 11(11), 2002), one
// iteration as two kernels. Neighbours beyond the image edge are clamped to the edge pixel.

// K1: directional derivatives and the diffusion coefficient of every pixel:
//   d* = J[neighbour] - J, G2 = sum d*^2 / J^2, L = sum d* / J,
//   q^2 = (G2 / 2 - L^2 / 16) / (1 + L / 4)^2,  c = 1 / (1 + (q^2 - q0^2) / (q0^2 (1 + q0^2))),
//   c clamped to [0, 1].
// The block stages its (bx + 2) x (by + 2) tile of J (one-pixel halo) in shared memory.
extern "C" __global__ void srad_k1(const float* __restrict__ J, float* __restrict__ dN,
                                   float* __restrict__ dS, float* __restrict__ dW,
                                   float* __restrict__ dE, float* __restrict__ c,
                                   float q0sqr, int N)
{
    extern __shared__ float sr_tile[];
    const int bw = blockDim.x, bh = blockDim.y, tw = bw + 2;
    const int j0 = blockIdx.x * bw, i0 = blockIdx.y * bh;
    const int tid = threadIdx.y * bw + threadIdx.x;
    for (int k = tid; k < (bh + 2) * tw; k += bw * bh) {
        const int gi = min(max(i0 + k / tw - 1, 0), N - 1);
        const int gj = min(max(j0 + k % tw - 1, 0), N - 1);
        sr_tile[k] = J[gi * N + gj];
    }
    __syncthreads();
    const int j = j0 + threadIdx.x, i = i0 + threadIdx.y;
    if (i >= N || j >= N) return;
    const int s = (threadIdx.y + 1) * tw + threadIdx.x + 1;
    const float jc = sr_tile[s];
    const float n = sr_tile[s - tw] - jc;
    const float so = sr_tile[s + tw] - jc;
    const float w = sr_tile[s - 1] - jc;
    const float e = sr_tile[s + 1] - jc;
    const float g2 = (n * n + so * so + w * w + e * e) / (jc * jc);
    const float l = (n + so + w + e) / jc;
    const float num = 0.5f * g2 - 0.0625f * l * l;
    const float den = 1.0f + 0.25f * l;
    const float qsqr = num / (den * den);
    const float dq = (qsqr - q0sqr) / (q0sqr * (1.0f + q0sqr));
    const float cv = 1.0f / (1.0f + dq);
    const int o = i * N + j;
    dN[o] = n;
    dS[o] = so;
    dW[o] = w;
    dE[o] = e;
    c[o] = fminf(fmaxf(cv, 0.0f), 1.0f);
}

// K2: divergence of c * grad J and the update
//   J' = J + lambda / 4 * (c dN + c_south dS + c dW + c_east dE).
// The block stages its (bx + 1) x (by + 1) tile of c (south and east halo) in shared memory.
// Rodinia updates J in place; here J' is a separate output.
extern "C" __global__ void srad_k2(const float* __restrict__ J, const float* __restrict__ c,
                                   const float* __restrict__ dN, const float* __restrict__ dS,
                                   const float* __restrict__ dW, const float* __restrict__ dE,
                                   float* __restrict__ J_out, float lambda, int N)
{
    extern __shared__ float sr_tile[];
    const int bw = blockDim.x, bh = blockDim.y, tw = bw + 1;
    const int j0 = blockIdx.x * bw, i0 = blockIdx.y * bh;
    const int tid = threadIdx.y * bw + threadIdx.x;
    for (int k = tid; k < (bh + 1) * tw; k += bw * bh) {
        const int gi = min(i0 + k / tw, N - 1);
        const int gj = min(j0 + k % tw, N - 1);
        sr_tile[k] = c[gi * N + gj];
    }
    __syncthreads();
    const int j = j0 + threadIdx.x, i = i0 + threadIdx.y;
    if (i >= N || j >= N) return;
    const int s = threadIdx.y * tw + threadIdx.x;
    const float cc = sr_tile[s];
    const int o = i * N + j;
    const float div = cc * dN[o] + sr_tile[s + tw] * dS[o] + cc * dW[o] + sr_tile[s + 1] * dE[o];
    J_out[o] = J[o] + 0.25f * lambda * div;
}
"""

SRC_BACKPROP = f"""
// Back-propagation (Rumelhart, Hinton and Williams, Nature 323, 1986) of a two-layer perceptron
// with N input units and BP_HID hidden units; weights w are N x BP_HID, row i = input unit i.
// Both kernels map x to the hidden unit j (w rows are contiguous) and y to the input unit i; the
// grid's x dimension runs over the inputs (it allows 2^31 - 1 blocks).
#define BP_HID {BP_HID}
#define BP_CHUNK {BP_CHUNK}
#define BP_ETA {BP_ETA}f
#define BP_MOMENTUM {BP_MOMENTUM}f

// Forward pass, first layer: partial[g][j] = sum over the BP_CHUNK inputs i of group g of
// w[i][j] * input[i]. The block stages its inputs and the products in shared memory and reduces
// every group of BP_CHUNK rows by a tree (log2 BP_CHUNK barrier-separated rounds); by must be a
// multiple of BP_CHUNK. Rodinia also writes the products back over the weights; this does not.
// Dynamic shared memory: by (bx + 1) floats.
extern "C" __global__ void backprop_layerforward(const float* __restrict__ input,
                                                 const float* __restrict__ w,
                                                 float* __restrict__ partial, int N)
{{
    extern __shared__ float bp_smem[];
    const int bw = blockDim.x, bh = blockDim.y;
    const int tx = threadIdx.x, ty = threadIdx.y;
    float* in_s = bp_smem;
    float* prod = bp_smem + bh;
    const int i = blockIdx.x * bh + ty;
    const int j = blockIdx.y * bw + tx;
    if (tx == 0) in_s[ty] = i < N ? input[i] : 0.0f;
    __syncthreads();
    prod[ty * bw + tx] = (i < N && j < BP_HID) ? w[i * BP_HID + j] * in_s[ty] : 0.0f;
    __syncthreads();
    for (int half = BP_CHUNK / 2; half >= 1; half /= 2) {{
        if (ty % BP_CHUNK < half) prod[ty * bw + tx] += prod[(ty + half) * bw + tx];
        __syncthreads();
    }}
    if (ty % BP_CHUNK == 0 && i < N && j < BP_HID) {{
        partial[(i / BP_CHUNK) * BP_HID + j] = prod[ty * bw + tx];
    }}
}}

// Weight update with momentum: dw = eta * delta[j] * ly[i] + momentum * oldw[i][j],
// w_out = w + dw, dw_out = dw. Rodinia updates w and oldw in place; here both are new outputs.
extern "C" __global__ void backprop_adjust_weights(const float* __restrict__ delta,
                                                   const float* __restrict__ ly,
                                                   const float* __restrict__ w,
                                                   const float* __restrict__ oldw,
                                                   float* __restrict__ w_out,
                                                   float* __restrict__ dw_out, int N)
{{
    const int j = blockIdx.y * blockDim.x + threadIdx.x;
    const int i = blockIdx.x * blockDim.y + threadIdx.y;
    if (i >= N || j >= BP_HID) return;
    const int k = i * BP_HID + j;
    const float dw = BP_ETA * delta[j] * ly[i] + BP_MOMENTUM * oldw[k];
    w_out[k] = w[k] + dw;
    dw_out[k] = dw;
}}
"""

SRC_NN = """
// Nearest neighbour (Rodinia nn): the Euclidean distance of every record (latitude, longitude)
// to the query point; the host then picks the k smallest. One thread per record.
extern "C" __global__ void nn_euclid(const float2* __restrict__ loc, float* __restrict__ dist,
                                     float lat, float lng, int N)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float2 p = loc[i];
    dist[i] = sqrtf((lat - p.x) * (lat - p.x) + (lng - p.y) * (lng - p.y));
}
"""

SRC_KMEANS = f"""
// K-means (Lloyd, IEEE TIT 28(2), 1982), the assignment step and the feature transposition that
// precedes it in Rodinia. N points with KM_FEATURES features, KM_CLUSTERS clusters.
#define KM_FEATURES {KM_FEATURES}
#define KM_CLUSTERS {KM_CLUSTERS}

// Assignment: each point joins its nearest centre (squared Euclidean distance, first minimum).
// Features are transposed (feature f of point p at f * N + p), so the reads are coalesced; the
// centres are read by every thread at the same address (broadcast).
extern "C" __global__ void kmeans_assign(const float* __restrict__ features,
                                         const float* __restrict__ clusters,
                                         int* __restrict__ membership, int N)
{{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= N) return;
    int best = 0;
    float best_d = 3.402823466e38f;
    for (int k = 0; k < KM_CLUSTERS; ++k) {{
        float d = 0.0f;
        for (int f = 0; f < KM_FEATURES; ++f) {{
            const float diff = features[f * N + p] - clusters[k * KM_FEATURES + f];
            d += diff * diff;
        }}
        if (d < best_d) {{
            best_d = d;
            best = k;
        }}
    }}
    membership[p] = best;
}}

// Transposition of the point-major input (features of point p at p * KM_FEATURES + f) into the
// feature-major layout above. One thread per point: strided reads, coalesced writes.
extern "C" __global__ void kmeans_swap(const float* __restrict__ points,
                                       float* __restrict__ features, int N)
{{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= N) return;
    for (int f = 0; f < KM_FEATURES; ++f) features[f * N + p] = points[p * KM_FEATURES + f];
}}
"""

SRC_LUD = f"""
// Blocked LU decomposition without pivoting (Golub and Van Loan, Matrix Computations, 3.2.10),
// Rodinia's right-looking variant, at its first step: the LUD_TILE x LUD_TILE diagonal tile of
// a holds its L (unit lower, below the diagonal) and U factors; M = N - LUD_TILE.
#define LUD_TILE {LUD_TILE}

// Perimeter: the U panel urow = L^-1 a[0:T, T:N] (forward substitution, one thread per column)
// and the L panel lcol = a[T:N, 0:T] U^-1 (one thread per row); threads [0, M) do columns,
// [M, 2M) rows. The diagonal tile is staged in shared memory. Rodinia writes the panels back into
// a; here they are separate outputs: urow is T x M, lcol is M x T.
extern "C" __global__ void lud_perimeter(const float* __restrict__ a, float* __restrict__ urow,
                                         float* __restrict__ lcol, int N)
{{
    __shared__ float dia[LUD_TILE * LUD_TILE];
    for (int k = threadIdx.x; k < LUD_TILE * LUD_TILE; k += blockDim.x) {{
        dia[k] = a[(k / LUD_TILE) * N + k % LUD_TILE];
    }}
    __syncthreads();
    const int M = N - LUD_TILE;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    float v[LUD_TILE];
    if (t < M) {{
        const int j = LUD_TILE + t;
        #pragma unroll
        for (int k = 0; k < LUD_TILE; ++k) v[k] = a[k * N + j];
        #pragma unroll
        for (int k = 1; k < LUD_TILE; ++k) {{
            #pragma unroll
            for (int m = 0; m < k; ++m) v[k] -= dia[k * LUD_TILE + m] * v[m];
        }}
        #pragma unroll
        for (int k = 0; k < LUD_TILE; ++k) urow[k * M + t] = v[k];
    }} else if (t < 2 * M) {{
        const int r = t - M;
        const int i = LUD_TILE + r;
        #pragma unroll
        for (int k = 0; k < LUD_TILE; ++k) v[k] = a[i * N + k];
        #pragma unroll
        for (int k = 0; k < LUD_TILE; ++k) {{
            #pragma unroll
            for (int m = 0; m < k; ++m) v[k] -= v[m] * dia[m * LUD_TILE + k];
            v[k] /= dia[k * LUD_TILE + k];
        }}
        #pragma unroll
        for (int k = 0; k < LUD_TILE; ++k) lcol[r * LUD_TILE + k] = v[k];
    }}
}}

// Internal: the trailing update out = a[T:N, T:N] - a[T:N, 0:T] a[0:T, T:N] (a rank-LUD_TILE
// update; the panels of a are the perimeter's results), one thread per element. The block
// stages its by x LUD_TILE rows of the L panel and LUD_TILE x bx columns of the U panel in shared
// memory. Rodinia updates a in place; here out is a separate M x M output.
// Dynamic shared memory: LUD_TILE (bx + by) floats.
extern "C" __global__ void lud_internal(const float* __restrict__ a, float* __restrict__ out,
                                        int N)
{{
    extern __shared__ float lu_smem[];
    const int bw = blockDim.x, bh = blockDim.y;
    float* lpanel = lu_smem;
    float* upanel = lu_smem + bh * LUD_TILE;
    const int M = N - LUD_TILE;
    const int c0 = blockIdx.x * bw, r0 = blockIdx.y * bh;
    const int tid = threadIdx.y * bw + threadIdx.x;
    for (int k = tid; k < bh * LUD_TILE; k += bw * bh) {{
        const int r = r0 + k / LUD_TILE;
        lpanel[k] = r < M ? a[(LUD_TILE + r) * N + k % LUD_TILE] : 0.0f;
    }}
    for (int k = tid; k < LUD_TILE * bw; k += bw * bh) {{
        const int c = c0 + k % bw;
        upanel[k] = c < M ? a[(k / bw) * N + LUD_TILE + c] : 0.0f;
    }}
    __syncthreads();
    const int c = c0 + threadIdx.x, r = r0 + threadIdx.y;
    if (r >= M || c >= M) return;
    float sum = 0.0f;
    #pragma unroll
    for (int m = 0; m < LUD_TILE; ++m) {{
        sum += lpanel[threadIdx.y * LUD_TILE + m] * upanel[m * bw + threadIdx.x];
    }}
    out[r * M + c] = a[(LUD_TILE + r) * N + LUD_TILE + c] - sum;
}}
"""

SRC_NW = f"""
// Needleman-Wunsch global alignment (Needleman and Wunsch, J. Mol. Biol. 48(3), 1970) of two
// sequences of length N: score is (N + 1) x (N + 1), row 0 and column 0 hold the gap penalties,
//   score[i][j] = max(score[i-1][j-1] + ref[i][j], score[i-1][j] - penalty, score[i][j-1] - penalty).
// The cells are cut into NW_TILE x NW_TILE tiles; one launch computes the main anti-diagonal of
// tiles (tile t at tile row t, tile column T - 1 - t, T = ceil(N / NW_TILE)), all independent.
// Block: by tiles per block, bx lanes per tile (a lane handles columns lane, lane + bx, ...).
// Each tile is staged in shared memory (scores with their halo row and column, and ref) and
// computed as a wavefront over its 2 NW_TILE - 1 inner anti-diagonals, one barrier per diagonal.
// Dynamic shared memory: by * NW_SMEM_INTS ints.
#define NW_TILE {NW_TILE}
#define NW_W (NW_TILE + 1)
#define NW_SMEM_INTS (NW_W * NW_W + NW_TILE * NW_TILE)

extern "C" __global__ void nw_diagonal(const int* __restrict__ ref, int* __restrict__ score,
                                       int penalty, int N)
{{
    extern __shared__ int nw_smem[];
    const int lanes = blockDim.x, lane = threadIdx.x;
    const int tiles = (N + NW_TILE - 1) / NW_TILE;
    const int t = blockIdx.x * blockDim.y + threadIdx.y;
    const bool active = t < tiles;
    int* tmp = nw_smem + threadIdx.y * NW_SMEM_INTS;
    int* rf = tmp + NW_W * NW_W;
    const int W = N + 1;
    const int r0 = t * NW_TILE, c0 = (tiles - 1 - t) * NW_TILE;
    if (active) {{
        for (int k = lane; k < NW_W; k += lanes) {{
            tmp[k] = c0 + k <= N ? score[r0 * W + c0 + k] : 0;
            tmp[k * NW_W] = r0 + k <= N ? score[(r0 + k) * W + c0] : 0;
        }}
        for (int k = lane; k < NW_TILE * NW_TILE; k += lanes) {{
            const int i = r0 + 1 + k / NW_TILE, j = c0 + 1 + k % NW_TILE;
            rf[k] = i <= N && j <= N ? ref[i * W + j] : 0;
        }}
    }}
    __syncthreads();
    for (int d = 0; d < 2 * NW_TILE - 1; ++d) {{
        if (active) {{
            for (int c = lane; c < NW_TILE; c += lanes) {{
                const int r = d - c;
                if (r >= 0 && r < NW_TILE) {{
                    const int diag = tmp[r * NW_W + c] + rf[r * NW_TILE + c];
                    const int up = tmp[r * NW_W + c + 1] - penalty;
                    const int left = tmp[(r + 1) * NW_W + c] - penalty;
                    tmp[(r + 1) * NW_W + c + 1] = max(diag, max(up, left));
                }}
            }}
        }}
        __syncthreads();  // diagonal d is complete before d + 1 reads it
    }}
    if (active) {{
        for (int k = lane; k < NW_TILE * NW_TILE; k += lanes) {{
            const int r = k / NW_TILE, c = k % NW_TILE;
            const int i = r0 + 1 + r, j = c0 + 1 + c;
            if (i <= N && j <= N) score[i * W + j] = tmp[(r + 1) * NW_W + c + 1];
        }}
    }}
}}
"""

SRC_BFS = """
// Breadth-first search (level-synchronous, Harish and Narayanan, HiPC 2007, as in Rodinia), the
// expansion kernel: every node v of the frontier walks its adjacency list (CSR: row_ptr, col) and
// gives each unvisited neighbour u the next level and an `updating` flag. The work of a thread
// depends on the data: whether v is in the frontier and how many neighbours it has. Frontier
// nodes all have the same level, so concurrent writes to cost[u] write the same value; cost[v]
// (read) and cost[u] (written) belong to disjoint node sets (visited, unvisited). Rodinia also
// clears v's frontier flag here; this leaves that to the host so repeated launches do the same
// work.
extern "C" __global__ void bfs_expand(const int* __restrict__ row_ptr, const int* __restrict__ col,
                                      const unsigned char* __restrict__ frontier,
                                      const unsigned char* __restrict__ visited,
                                      int* cost, unsigned char* updating, int N)
{
    const int v = blockIdx.x * blockDim.x + threadIdx.x;
    if (v >= N || !frontier[v]) return;
    const int next = cost[v] + 1;
    const int end = row_ptr[v + 1];
    for (int e = row_ptr[v]; e < end; ++e) {
        const int u = col[e];
        if (!visited[u]) {
            cost[u] = next;
            updating[u] = 1;
        }
    }
}
"""

SRC_STREAMCLUSTER = f"""
// Streamcluster (online k-median, Guha et al., IEEE TKDE 15(3), 2003; Rodinia from PARSEC), the
// distance part of pgain: for a candidate centre x, every point's cost change if it moved to x,
//   gain[p] = weight[p] * |coord[p] - coord[x]|^2 - cost[p].
// Coordinates are dimension-major (coordinate d of point p at d * N + p): coalesced reads. The
// block stages the candidate's SC_DIM coordinates in shared memory. Rodinia also accumulates
// per-block sums for the host (without atomics); the host can sum gain instead.
#define SC_DIM {SC_DIM}

extern "C" __global__ void streamcluster_pgain(const float* __restrict__ coord,
                                               const float* __restrict__ weight,
                                               const float* __restrict__ cost,
                                               float* __restrict__ gain, int x, int N)
{{
    __shared__ float centre[SC_DIM];
    for (int d = threadIdx.x; d < SC_DIM; d += blockDim.x) centre[d] = coord[d * N + x];
    __syncthreads();
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= N) return;
    float dist = 0.0f;
    for (int d = 0; d < SC_DIM; ++d) {{
        const float diff = coord[d * N + p] - centre[d];
        dist += diff * diff;
    }}
    gain[p] = dist * weight[p] - cost[p];
}}
"""


# ---------------------------------------------------------------------------------------------
# Argument factories: make_args(D, rng) -> CuPy arrays; device=False gives NumPy arrays.
# ---------------------------------------------------------------------------------------------


def _rand(rng: np.random.Generator, shape: Any, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    """Uniform float32 in [lo, hi) (never exactly 0 for lo > 0)."""
    a = rng.random(shape, dtype=np.float32)
    if lo != 0.0 or hi != 1.0:
        a *= np.float32(hi - lo)
        a += np.float32(lo)
    return a


def _positive(rng: np.random.Generator, shape: Any) -> np.ndarray:
    """Uniform float32 in [0.5, 1.5): random, bounded away from zero."""
    return _rand(rng, shape, 0.5, 1.5)


def hotspot_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(power, temp_in, temp_out, cdt, rx_1, ry_1, rz_1, amb, N): N x N chip, 323-343 K."""
    n = D["N"]
    power = _rand(rng, (n, n), 0.01, 0.5)
    temp = _rand(rng, (n, n), 323.0, 343.0)
    out = _rand(rng, (n, n), 323.0, 343.0)
    coef = (np.float32(c) for c in hotspot_coefficients())
    return launch_args(device, power, temp, out, *coef, np.float32(HS_AMB), np.int32(n))


def pathfinder_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(wall, src, dst, N): PF_ROWS x N wall of integer costs 1..10 (exact in float32)."""
    n = D["N"]
    wall = rng.integers(1, 11, (PF_ROWS, n)).astype(np.float32)
    src = rng.integers(1, 11, n).astype(np.float32)
    dst = _rand(rng, n, 1.0, 2.0)
    return launch_args(device, wall, src, dst, np.int32(n))


def srad_q0sqr(J: np.ndarray) -> float:
    """The speckle scale q0^2 = variance / mean^2 of the image (Rodinia: of a region of it)."""
    j = np.asarray(J, dtype=np.float64)
    return float(j.var() / j.mean() ** 2)


def srad_k1_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(J, dN, dS, dW, dE, c, q0sqr, N): positive N x N image J, five outputs."""
    n = D["N"]
    J = _positive(rng, (n, n))
    outs = [_rand(rng, (n, n), 1.0, 2.0) for _ in range(5)]
    return launch_args(device, J, *outs, np.float32(srad_q0sqr(J)), np.int32(n))


def srad_k2_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(J, c, dN, dS, dW, dE, J_out, lambda, N): c in (0, 1], derivatives in [-0.5, 0.5)."""
    n = D["N"]
    J = _positive(rng, (n, n))
    c = _rand(rng, (n, n), 0.05, 1.0)
    ds = [_rand(rng, (n, n), -0.5, 0.5) for _ in range(4)]
    out = _rand(rng, (n, n), 1.0, 2.0)
    return launch_args(device, J, c, *ds, out, np.float32(SRAD_LAMBDA), np.int32(n))


def backprop_groups(n: int) -> int:
    """Partial sums per hidden unit: one per BP_CHUNK inputs."""
    return -(-n // BP_CHUNK)


def layerforward_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(input, w, partial, N): N inputs, N x BP_HID weights, ceil(N / 16) x BP_HID partials."""
    n = D["N"]
    partial = _rand(rng, (backprop_groups(n), BP_HID), 1.0, 2.0)
    return launch_args(
        device, _positive(rng, n), _rand(rng, (n, BP_HID), -1.0, 1.0), partial, np.int32(n)
    )


def adjust_weights_args(
    D: Data, rng: np.random.Generator, *, device: bool = True
) -> tuple[Any, ...]:
    """(delta, ly, w, oldw, w_out, dw_out, N): BP_HID errors, N inputs, N x BP_HID weights."""
    n = D["N"]
    return launch_args(
        device,
        _rand(rng, BP_HID, -1.0, 1.0),
        _positive(rng, n),
        _rand(rng, (n, BP_HID), -1.0, 1.0),
        _rand(rng, (n, BP_HID), -0.1, 0.1),
        _rand(rng, (n, BP_HID), 1.0, 2.0),
        _rand(rng, (n, BP_HID), 1.0, 2.0),
        np.int32(n),
    )


def nn_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(loc, dist, lat, lng, N): N (latitude, longitude) records as an N x 2 array."""
    n = D["N"]
    loc = np.empty((n, 2), dtype=np.float32)
    loc[:, 0] = _rand(rng, n, -90.0, 90.0)
    loc[:, 1] = _rand(rng, n, -180.0, 180.0)
    dist = _rand(rng, n, 1.0, 2.0)
    lat, lng = (np.float32(v) for v in NN_TARGET)
    return launch_args(device, loc, dist, lat, lng, np.int32(n))


def _kmeans_points(
    n: int, rng: np.random.Generator, *, feature_major: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(centres K x F, points N x F, or F x N when `feature_major`): points around random centres.

    Centre k is random in [0, 1)^F plus KM_SEPARATION in feature k, so centres are at least
    KM_SEPARATION * sqrt(2) - 1 apart; points lie within KM_SPREAD of their centre in every
    feature (|noise| <= KM_SPREAD * sqrt(F) = 0.29). Every point's nearest centre therefore wins
    by a wide margin and float32 and float64 agree on it. The kernel's work does not depend on
    the data.
    """
    centres = _rand(rng, (KM_CLUSTERS, KM_FEATURES))
    centres[np.arange(KM_CLUSTERS), np.arange(KM_CLUSTERS)] += np.float32(KM_SEPARATION)
    labels = rng.integers(0, KM_CLUSTERS, n)
    if feature_major:  # built in place: transposing a large array afterwards is slow
        points = _rand(rng, (KM_FEATURES, n), -KM_SPREAD, KM_SPREAD)
        points += np.ascontiguousarray(centres.T)[:, labels]
    else:
        points = _rand(rng, (n, KM_FEATURES), -KM_SPREAD, KM_SPREAD)
        points += centres[labels]
    return centres, points


def kmeans_assign_args(
    D: Data, rng: np.random.Generator, *, device: bool = True
) -> tuple[Any, ...]:
    """(features F x N, clusters K x F, membership N int32, N); membership starts invalid."""
    n = D["N"]
    centres, features = _kmeans_points(n, rng, feature_major=True)
    membership = rng.integers(KM_CLUSTERS, 2 * KM_CLUSTERS, n).astype(np.int32)
    return launch_args(device, features, centres, membership, np.int32(n))


def kmeans_swap_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(points N x F, features F x N, N)."""
    n = D["N"]
    _, points = _kmeans_points(n, rng, feature_major=False)
    return launch_args(device, points, _rand(rng, (KM_FEATURES, n), 1.0, 2.0), np.int32(n))


def _lu_in_place(tile: np.ndarray) -> np.ndarray:
    """Doolittle LU without pivoting of a square tile: L (unit, below) and U packed in one."""
    t = np.array(tile, dtype=np.float64)
    for k in range(t.shape[0] - 1):
        t[k + 1 :, k] /= t[k, k]
        t[k + 1 :, k + 1 :] -= np.outer(t[k + 1 :, k], t[k, k + 1 :])
    return t


def _lud_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    """An N x N matrix whose diagonal tile is diagonally dominant and already factorised."""
    a = _rand(rng, (n, n), 0.1, 1.0)
    tile = a[:LUD_TILE, :LUD_TILE].astype(np.float64) + LUD_TILE * np.eye(LUD_TILE)
    a[:LUD_TILE, :LUD_TILE] = _lu_in_place(tile).astype(np.float32)
    return a


def lud_perimeter_args(
    D: Data, rng: np.random.Generator, *, device: bool = True
) -> tuple[Any, ...]:
    """(a, urow T x M, lcol M x T, N) with M = N - LUD_TILE."""
    n = D["N"]
    m = n - LUD_TILE
    a = _lud_matrix(n, rng)
    urow = _rand(rng, (LUD_TILE, m), 1.0, 2.0)
    lcol = _rand(rng, (m, LUD_TILE), 1.0, 2.0)
    return launch_args(device, a, urow, lcol, np.int32(n))


def lud_internal_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(a, out M x M, N): the panels of a are random (any values are valid inputs)."""
    n = D["N"]
    m = n - LUD_TILE
    return launch_args(
        device, _rand(rng, (n, n), 0.1, 1.0), _rand(rng, (m, m), 1.0, 2.0), np.int32(n)
    )


def nw_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(ref, score, penalty, N): (N + 1)^2 int32 similarity (BLOSUM62's range) and scores.

    Every score is random: the tiles of one launch only read the halo cells of their neighbours,
    so consistent earlier diagonals are not needed for a valid launch.
    """
    n = D["N"]
    ref = rng.integers(-4, 12, (n + 1, n + 1)).astype(np.int32)
    score = rng.integers(-100, 101, (n + 1, n + 1)).astype(np.int32)
    return launch_args(device, ref, score, np.int32(NW_PENALTY), np.int32(n))


def _edges_of(row_ptr: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, edge index) of every edge leaving `nodes`; owner indexes into `nodes`."""
    starts = row_ptr[nodes].astype(np.int64)
    lens = row_ptr[nodes + 1].astype(np.int64) - starts
    owner = np.repeat(np.arange(nodes.size), lens)
    first = np.cumsum(lens) - lens
    return owner, starts[owner] + np.arange(int(lens.sum())) - first[owner]


def bfs_levels(row_ptr: np.ndarray, col: np.ndarray, n: int) -> np.ndarray:
    """BFS level of every node from node 0 (-1 where unreachable)."""
    level = np.full(n, -1, dtype=np.int32)
    level[0] = 0
    frontier = np.zeros(1, dtype=np.int64)
    depth = 0
    while frontier.size:
        _, edges = _edges_of(row_ptr, frontier)
        nbrs = col[edges]
        depth += 1
        level[nbrs[level[nbrs] < 0]] = depth
        frontier = np.flatnonzero(level == depth)
    return level


def bfs_args(D: Data, rng: np.random.Generator, *, device: bool = True) -> tuple[Any, ...]:
    """(row_ptr, col, frontier, visited, cost, updating, N): a random directed graph in CSR
    (out-degrees geometric with mean BFS_MEAN_DEGREE, uniform random targets) and the BFS state
    from node 0 at its widest level: frontier = that level, visited = levels up to it, cost =
    level (-1 unvisited), updating = 0.
    """
    n = D["N"]
    degree = rng.geometric(1.0 / BFS_MEAN_DEGREE, n)
    row_ptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(degree, out=row_ptr[1:])
    col = rng.integers(0, n, int(row_ptr[-1]), dtype=np.int32)
    level = bfs_levels(row_ptr, col, n)
    widest = int(np.argmax(np.bincount(level[level >= 0])))
    visited = (level >= 0) & (level <= widest)
    frontier = (level == widest).astype(np.uint8)
    cost = np.where(visited, level, -1).astype(np.int32)
    updating = np.zeros(n, dtype=np.uint8)
    return launch_args(
        device, row_ptr, col, frontier, visited.astype(np.uint8), cost, updating, np.int32(n)
    )


def streamcluster_candidate(n: int) -> int:
    """The candidate centre of the launch: point N // 3."""
    return n // 3


def streamcluster_args(
    D: Data, rng: np.random.Generator, *, device: bool = True
) -> tuple[Any, ...]:
    """(coord SC_DIM x N, weight, cost, gain, x, N)."""
    n = D["N"]
    return launch_args(
        device,
        _rand(rng, (SC_DIM, n)),
        _rand(rng, n, 1.0, 4.0),
        _rand(rng, n, 10.0, 100.0),
        _rand(rng, n, 1.0, 2.0),
        np.int32(streamcluster_candidate(n)),
        np.int32(n),
    )


# ---------------------------------------------------------------------------------------------
# References: NumPy in float64 on host copies of the inputs -> {argument index: expected output}.
# ---------------------------------------------------------------------------------------------


def _f64(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float64)  # always a copy


def hotspot_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    power, t = _f64(h[0]), _f64(h[1])
    cdt, rx, ry, rz, amb = (float(v) for v in h[3:8])
    for _ in range(HS_PYRAMID):
        p = np.pad(t, 1, mode="edge")  # a neighbour beyond the edge is the cell itself
        north, south = p[:-2, 1:-1], p[2:, 1:-1]
        west, east = p[1:-1, :-2], p[1:-1, 2:]
        t = t + cdt * (
            power + (south + north - 2 * t) * ry + (east + west - 2 * t) * rx + (amb - t) * rz
        )
    return {2: t}


def pathfinder_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    wall, cur = _f64(h[0]), _f64(h[1])
    for r in range(PF_ROWS):
        p = np.pad(cur, 1, mode="edge")
        cur = wall[r] + np.minimum(np.minimum(p[:-2], p[1:-1]), p[2:])
    return {2: cur}


def srad_k1_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    J, q0 = _f64(h[0]), float(h[6])
    p = np.pad(J, 1, mode="edge")
    dn, ds = p[:-2, 1:-1] - J, p[2:, 1:-1] - J
    dw, de = p[1:-1, :-2] - J, p[1:-1, 2:] - J
    g2 = (dn**2 + ds**2 + dw**2 + de**2) / J**2
    lap = (dn + ds + dw + de) / J
    qsqr = (0.5 * g2 - lap**2 / 16.0) / (1.0 + 0.25 * lap) ** 2
    c = 1.0 / (1.0 + (qsqr - q0) / (q0 * (1.0 + q0)))
    return {1: dn, 2: ds, 3: dw, 4: de, 5: np.clip(c, 0.0, 1.0)}


def srad_k2_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    J, c = _f64(h[0]), _f64(h[1])
    dn, ds, dw, de = (_f64(a) for a in h[2:6])
    lam = float(h[7])
    p = np.pad(c, ((0, 1), (0, 1)), mode="edge")
    c_south, c_east = p[1:, :-1], p[:-1, 1:]
    div = c * dn + c_south * ds + c * dw + c_east * de
    return {6: J + 0.25 * lam * div}


def layerforward_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    x, w = _f64(h[0]), _f64(h[1])
    n = x.size
    groups = backprop_groups(n)
    prod = np.zeros((groups * BP_CHUNK, BP_HID))
    prod[:n] = w * x[:, None]
    return {2: prod.reshape(groups, BP_CHUNK, BP_HID).sum(axis=1)}


def adjust_weights_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    delta, ly, w, oldw = (_f64(a) for a in h[:4])
    dw = BP_ETA * np.outer(ly, delta) + BP_MOMENTUM * oldw
    return {4: w + dw, 5: dw}


def nn_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    loc, lat, lng = _f64(h[0]), float(h[2]), float(h[3])
    return {1: np.hypot(lat - loc[:, 0], lng - loc[:, 1])}


def kmeans_assign_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    points, centres = _f64(h[0]).T, _f64(h[1])
    # |p - c|^2 expanded (N x K memory, not N x K x F); the nearest centre wins by far more than
    # the rounding of the expansion (see _kmeans_points).
    d = (points**2).sum(axis=1)[:, None] - 2.0 * points @ centres.T + (centres**2).sum(axis=1)
    return {2: np.argmin(d, axis=1).astype(np.float64)}  # first minimum, as the kernel


def kmeans_swap_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    return {1: np.ascontiguousarray(_f64(h[0]).T)}


def lud_perimeter_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    from scipy.linalg import solve_triangular

    a = _f64(h[0])
    t = LUD_TILE
    dia = a[:t, :t]
    urow = solve_triangular(dia, a[:t, t:], lower=True, unit_diagonal=True)
    lcol = solve_triangular(np.triu(dia), a[t:, :t].T, trans="T").T
    return {1: urow, 2: lcol}


def lud_internal_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    a = _f64(h[0])
    t = LUD_TILE
    return {1: a[t:, t:] - a[t:, :t] @ a[:t, t:]}


def nw_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    ref, score, pen, n = _f64(h[0]), _f64(h[1]), float(h[2]), int(h[3])
    tiles = -(-n // NW_TILE)
    side = tiles * NW_TILE + 1
    s = np.zeros((side, side))
    s[: n + 1, : n + 1] = score
    r = np.zeros((side, side))
    r[: n + 1, : n + 1] = ref
    t = np.arange(tiles)
    r0, c0 = NW_TILE * t, NW_TILE * (tiles - 1 - t)
    k = np.arange(NW_TILE + 1)
    tmp = np.zeros((tiles, NW_TILE + 1, NW_TILE + 1))
    tmp[:, 0, :] = s[r0[:, None], c0[:, None] + k]
    tmp[:, :, 0] = s[r0[:, None] + k, c0[:, None]]
    rows = (r0[:, None] + 1 + k[:-1])[:, :, None]
    cols = (c0[:, None] + 1 + k[:-1])[:, None, :]
    rf = r[rows, cols]
    for i in range(NW_TILE):
        for j in range(NW_TILE):
            tmp[:, i + 1, j + 1] = np.maximum(
                tmp[:, i, j] + rf[:, i, j], np.maximum(tmp[:, i, j + 1], tmp[:, i + 1, j]) - pen
            )
    s[rows, cols] = tmp[:, 1:, 1:]
    return {1: s[: n + 1, : n + 1]}


def bfs_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    row_ptr, col = np.asarray(h[0]), np.asarray(h[1])
    visited, cost = np.asarray(h[3]), np.asarray(h[4])
    nodes = np.flatnonzero(np.asarray(h[2]))
    owner, edges = _edges_of(row_ptr, nodes)
    nbrs = col[edges]
    fresh = visited[nbrs] == 0
    new_cost, updating = _f64(cost), _f64(h[5])
    new_cost[nbrs[fresh]] = cost[nodes[owner[fresh]]] + 1.0
    updating[nbrs[fresh]] = 1.0
    return {4: new_cost, 5: updating}


def streamcluster_ref(D: Data, h: tuple[Any, ...]) -> dict[int, np.ndarray]:
    coord, weight, cost, x = _f64(h[0]), _f64(h[1]), _f64(h[2]), int(h[4])
    dist = ((coord - coord[:, x : x + 1]) ** 2).sum(axis=0)
    return {3: dist * weight - cost}


# ---------------------------------------------------------------------------------------------
# The specs
# ---------------------------------------------------------------------------------------------

_SIZES = {
    "grid": (TRAIN_GRID, EVAL_GRID, NCU_GRID),
    "vec": (TRAIN_VEC, EVAL_VEC, NCU_VEC),
    "nn": (TRAIN_NN, EVAL_NN, NCU_NN),
    "sc": (TRAIN_SC, EVAL_SC, NCU_SC),
}


def _spec(
    app: str,
    short: str,
    kernel: str,
    source: str,
    *,
    dim: int,
    grid: tuple[str, str, str],
    n_arg: int,
    make_args: ArgsFactory,
    reference: Reference,
    outputs: tuple[int, ...],
    overwrites: tuple[int, ...],
    default_block: Block,
    sizes: str,
    complexity: str,
    flops: str,
    min_bytes: str,
    rtol: float,
    description: str,
    features: tuple[str, ...] = (),
    constraints: tuple[str, ...] = (),
    dynamic_smem: str | None = None,
    lo: int = 1,
    hi: int = N_MAX_GRID,
    rodinia_block: Block | None = None,
) -> KernelSpec:
    """One Rodinia kernel; N is read from argument `n_arg`."""
    layout = "NxN" if sizes == "grid" else "N"
    meta = sizes_meta(
        app, "rodinia", complexity, _SIZES[sizes], flops, min_bytes, overwrites, layout
    )
    meta["features"] = features
    if rodinia_block is not None:
        meta["rodinia_block"] = rodinia_block
    return KernelSpec(
        name=f"rodinia.{app}.{short}",
        source=source,
        kernel=kernel,
        data=(DataParam("N", arg=n_arg, lo=lo, hi=hi),),
        dim=dim,
        grid=grid,
        make_args=make_args,
        constraints=constraints,
        dynamic_smem=dynamic_smem,
        idempotent=True,
        default_block=default_block,
        reference=reference,
        outputs=outputs,
        rtol=rtol,
        description=description,
        meta=meta,
    )


GRID_2D = ("ceil(N / bx)", "ceil(N / by)", "1")
GRID_1D = ("ceil(N / bx)", "1", "1")
SMEM = "shared_tile"
LOOP_SYNC = "barrier_in_loop"
DATA_DEP = "data_dependent"

HOTSPOT = _spec(
    "hotspot", "temp", "hotspot_temp", SRC_HOTSPOT,
    dim=2, n_arg=8, make_args=hotspot_args, reference=hotspot_ref, outputs=(2,), overwrites=(2,),
    default_block=(16, 16, 1), sizes="grid",
    # Each tile loses HS_PYRAMID cells per side to the pyramid: it must be wider than 2 * 2.
    constraints=(f"bx > {2 * HS_PYRAMID}", f"by > {2 * HS_PYRAMID}"),
    grid=(f"ceil(N / max(bx - {2 * HS_PYRAMID}, 1))", f"ceil(N / max(by - {2 * HS_PYRAMID}, 1))", "1"),
    dynamic_smem="12 * bx * by", features=(SMEM, LOOP_SYNC),
    complexity="N^2", flops=f"{15 * HS_PYRAMID} * N * N", min_bytes="12 * N * N",
    rtol=RTOL_FEW, description=f"{HS_PYRAMID} HotSpot time steps per launch, pyramid in shared memory",
)  # fmt: skip

PATHFINDER = _spec(
    "pathfinder", "dynproc", "pathfinder_dynproc", SRC_PATHFINDER,
    dim=1, n_arg=3, make_args=pathfinder_args, reference=pathfinder_ref, outputs=(2,), overwrites=(2,),
    default_block=(256, 1, 1), sizes="vec", hi=INT32_MAX // PF_ROWS,
    # Each block loses PF_ROWS columns per side to the pyramid: it must be wider than 2 * 20.
    constraints=(f"bx > {2 * PF_ROWS}",),
    grid=(f"ceil(N / max(bx - {2 * PF_ROWS}, 1))", "1", "1"),
    dynamic_smem="8 * bx", features=(SMEM, LOOP_SYNC),
    complexity="N", flops=f"{3 * PF_ROWS} * N", min_bytes=f"{4 * PF_ROWS + 8} * N",
    rtol=RTOL_EXACT, description=f"{PF_ROWS} rows of the path-cost recurrence per launch, in shared memory",
)  # fmt: skip

SRAD_K1 = _spec(
    "srad", "k1", "srad_k1", SRC_SRAD,
    dim=2, n_arg=7, make_args=srad_k1_args, reference=srad_k1_ref,
    outputs=(1, 2, 3, 4, 5), overwrites=(1, 2, 3, 4, 5),
    default_block=(16, 16, 1), sizes="grid", grid=GRID_2D,
    lo=2,  # q0^2 is the image's variance over its mean squared: 0 for a single pixel
    dynamic_smem="4 * (bx + 2) * (by + 2)", features=(SMEM,),
    complexity="N^2", flops="30 * N * N", min_bytes="24 * N * N",
    rtol=RTOL_SUM, description="SRAD derivatives and diffusion coefficient, haloed tile of J",
)  # fmt: skip

SRAD_K2 = _spec(
    "srad", "k2", "srad_k2", SRC_SRAD,
    dim=2, n_arg=8, make_args=srad_k2_args, reference=srad_k2_ref, outputs=(6,), overwrites=(6,),
    default_block=(16, 16, 1), sizes="grid", grid=GRID_2D,
    dynamic_smem="4 * (bx + 1) * (by + 1)", features=(SMEM,),
    complexity="N^2", flops="10 * N * N", min_bytes="28 * N * N",
    rtol=RTOL_FEW, description="SRAD divergence and image update, haloed tile of c",
)  # fmt: skip

BACKPROP_LAYERFORWARD = _spec(
    "backprop", "layerforward", "backprop_layerforward", SRC_BACKPROP,
    dim=2, n_arg=3, make_args=layerforward_args, reference=layerforward_ref, outputs=(2,), overwrites=(2,),
    default_block=(16, 16, 1), sizes="vec", hi=INT32_MAX // BP_HID,
    # bx: lanes beyond the 16 hidden units would only idle; by: a block holds whole groups of
    # 16 inputs, since each group's partial sum is reduced inside one block.
    constraints=(f"bx <= {BP_HID}", f"by % {BP_CHUNK} == 0"),
    grid=("ceil(N / by)", f"ceil({BP_HID} / bx)", "1"),
    dynamic_smem="4 * by * (bx + 1)", features=(SMEM, LOOP_SYNC),
    complexity="N", flops=f"{2 * BP_HID} * N", min_bytes=f"{4 * BP_HID + 8} * N",
    rtol=RTOL_FEW, description="input-to-hidden products and per-16-input tree reductions",
)  # fmt: skip

BACKPROP_ADJUST = _spec(
    "backprop", "adjust_weights", "backprop_adjust_weights", SRC_BACKPROP,
    dim=2, n_arg=6, make_args=adjust_weights_args, reference=adjust_weights_ref,
    outputs=(4, 5), overwrites=(4, 5),
    default_block=(16, 16, 1), sizes="vec", hi=INT32_MAX // BP_HID,
    # Lanes beyond the 16 hidden units would only idle.
    constraints=(f"bx <= {BP_HID}",),
    grid=("ceil(N / by)", f"ceil({BP_HID} / bx)", "1"),
    complexity="N", flops=f"{5 * BP_HID} * N", min_bytes=f"{16 * BP_HID + 4} * N",
    rtol=RTOL_FEW, description="weight update with momentum, one thread per weight",
)  # fmt: skip

NN = _spec(
    "nn", "euclid", "nn_euclid", SRC_NN,
    dim=1, n_arg=4, make_args=nn_args, reference=nn_ref, outputs=(1,), overwrites=(1,),
    default_block=(256, 1, 1), sizes="nn", hi=INT32_MAX // 2, grid=GRID_1D,
    complexity="N", flops="6 * N", min_bytes="12 * N",
    rtol=RTOL_FEW, description="distance of every record to the query point",
)  # fmt: skip

KMEANS_ASSIGN = _spec(
    "kmeans", "assign", "kmeans_assign", SRC_KMEANS,
    dim=1, n_arg=3, make_args=kmeans_assign_args, reference=kmeans_assign_ref, outputs=(2,), overwrites=(2,),
    default_block=(256, 1, 1), sizes="vec", hi=INT32_MAX // KM_FEATURES, grid=GRID_1D,
    complexity="N", flops=f"{3 * KM_FEATURES * KM_CLUSTERS} * N", min_bytes=f"{4 * KM_FEATURES + 4} * N",
    rtol=RTOL_EXACT, description=f"nearest of {KM_CLUSTERS} centres over {KM_FEATURES} features, one thread per point",
)  # fmt: skip

KMEANS_SWAP = _spec(
    "kmeans", "swap", "kmeans_swap", SRC_KMEANS,
    dim=1, n_arg=2, make_args=kmeans_swap_args, reference=kmeans_swap_ref, outputs=(1,), overwrites=(1,),
    default_block=(256, 1, 1), sizes="vec", hi=INT32_MAX // KM_FEATURES, grid=GRID_1D,
    complexity="N", flops="0", min_bytes=f"{8 * KM_FEATURES} * N",
    rtol=RTOL_EXACT, description="point-major to feature-major transposition, one thread per point",
)  # fmt: skip

LUD_PERIMETER = _spec(
    "lud", "perimeter", "lud_perimeter", SRC_LUD,
    dim=1, n_arg=3, make_args=lud_perimeter_args, reference=lud_perimeter_ref,
    outputs=(1, 2), overwrites=(1, 2),
    default_block=(2 * LUD_TILE, 1, 1), sizes="grid", lo=LUD_TILE + 1,
    grid=(f"ceil(2 * (N - {LUD_TILE}) / bx)", "1", "1"), features=(SMEM,),
    # Per panel column or row: T (T - 1) / 2 multiply-adds (and T divisions for a row).
    complexity="N", flops=f"{2 * LUD_TILE * (LUD_TILE - 1) + LUD_TILE} * (N - {LUD_TILE})",
    min_bytes=f"{16 * LUD_TILE} * (N - {LUD_TILE})",
    rtol=RTOL_FEW, description="U and L panels of the first step by triangular solves",
)  # fmt: skip

LUD_INTERNAL = _spec(
    "lud", "internal", "lud_internal", SRC_LUD,
    dim=2, n_arg=2, make_args=lud_internal_args, reference=lud_internal_ref, outputs=(1,), overwrites=(1,),
    default_block=(LUD_TILE, LUD_TILE, 1), sizes="grid", lo=LUD_TILE + 1,
    grid=(f"ceil((N - {LUD_TILE}) / bx)", f"ceil((N - {LUD_TILE}) / by)", "1"),
    dynamic_smem=f"{4 * LUD_TILE} * (bx + by)", features=(SMEM,),
    complexity="N^2", flops=f"{2 * LUD_TILE} * (N - {LUD_TILE}) * (N - {LUD_TILE})",
    min_bytes=f"8 * (N - {LUD_TILE}) * (N - {LUD_TILE})",
    rtol=RTOL_FEW, description="trailing rank-16 update of the first step, panels in shared memory",
)  # fmt: skip

NW = _spec(
    "nw", "diagonal", "nw_diagonal", SRC_NW,
    dim=2, n_arg=3, make_args=nw_args, reference=nw_ref, outputs=(1,), overwrites=(),
    # Rodinia runs one 16-lane tile per block; one warp is the smallest candidate, so the
    # default is two such tiles per block.
    default_block=(NW_TILE, 2, 1), rodinia_block=(NW_TILE, 1, 1), sizes="grid", hi=N_MAX_GRID - 1,
    # bx: a tile is 16 columns wide, more lanes would only idle; by: 2180 B of shared memory per
    # tile, and 16 tiles stay within the 48 KB every device grants without opting in.
    constraints=(f"bx <= {NW_TILE}", "by <= 16"),
    grid=(f"ceil(ceil(N / {NW_TILE}) / by)", "1", "1"),
    dynamic_smem=f"{NW_SMEM_PER_TILE} * by", features=(SMEM, LOOP_SYNC),
    complexity="N", flops=f"{4 * NW_TILE} * N", min_bytes=f"{8 * NW_TILE * NW_TILE + 8 * (NW_TILE + 1)} * ceil(N / {NW_TILE})",
    rtol=RTOL_EXACT, description="the main anti-diagonal of 16 x 16 tiles, wavefront in shared memory",
)  # fmt: skip

BFS = _spec(
    "bfs", "expand", "bfs_expand", SRC_BFS,
    dim=1, n_arg=6, make_args=bfs_args, reference=bfs_ref, outputs=(4, 5), overwrites=(),
    default_block=(512, 1, 1), sizes="vec", hi=INT32_MAX // (4 * BFS_MEAN_DEGREE), grid=GRID_1D,
    features=(DATA_DEP,),
    # Estimates as if every node's list were walked once (the frontier is the widest level).
    complexity="N", flops=f"{BFS_MEAN_DEGREE} * N", min_bytes=f"{4 * BFS_MEAN_DEGREE + 11} * N",
    rtol=RTOL_EXACT, description="frontier expansion of a random graph at its widest BFS level",
)  # fmt: skip

STREAMCLUSTER = _spec(
    "streamcluster", "pgain", "streamcluster_pgain", SRC_STREAMCLUSTER,
    dim=1, n_arg=5, make_args=streamcluster_args, reference=streamcluster_ref, outputs=(3,), overwrites=(3,),
    default_block=(512, 1, 1), sizes="sc", hi=INT32_MAX // SC_DIM, grid=GRID_1D, features=(SMEM,),
    complexity="N", flops=f"{3 * SC_DIM + 2} * N", min_bytes=f"{4 * SC_DIM + 12} * N",
    rtol=RTOL_SUM, description=f"cost change of every point for a candidate centre ({SC_DIM} dimensions)",
)  # fmt: skip

# Applications in Rodinia's alphabetical order, kernels in launch order.
SPECS: tuple[KernelSpec, ...] = (
    BACKPROP_LAYERFORWARD, BACKPROP_ADJUST,
    BFS,
    HOTSPOT,
    KMEANS_SWAP, KMEANS_ASSIGN,
    LUD_PERIMETER, LUD_INTERNAL,
    NN,
    NW,
    PATHFINDER,
    SRAD_K1, SRAD_K2,
    STREAMCLUSTER,
)  # fmt: skip
