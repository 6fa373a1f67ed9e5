// klaraptor resource microbenchmarks: a latency and a gap per SAAKE resource. Definitions, the
// analysis and the launch configurations are in klaraptor/gpu/resources.py, which compiles this
// file with NVRTC twice, with -DKP_U=U1 and -DKP_U=U2 steps per loop iteration: subtracting the
// two runs cancels the loop overhead exactly. Every kernel writes its result through `sink` when
// `flag` (always 0 at run time, unknown to the compiler) is set, so no work can be dropped.
//
// Timed kernels (kp_lat_*, kp_thr_*):
//   kp_lat_X: ONE warp runs ONE dependent chain of X: cycles / step = latency.
//   kp_thr_X: a 1024-thread block per SM (the host gives it more than half of the SM's shared
//             memory, so no second block fits), each thread KP_K independent chains of X:
//             cycles / (warps x steps x chains) = gap per SM.
//   out[blockIdx.x] = clock64 cycles from the first barrier to the last, smid[blockIdx.x] = SM.

#ifndef KP_U
#define KP_U 16
#endif
#define KP_K 4  // independent chains per thread in the throughput kernels

__device__ __forceinline__ unsigned int kp_smid()
{
    unsigned int r;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
    return r;
}

__device__ __forceinline__ unsigned long long kp_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// -- one step of each resource's chain -----------------------------------------------------------

struct OpFfma {  // FFMA
    using T = float;
    float m, c;
    __device__ __forceinline__ float operator()(float x, int) const { return fmaf(x, m, c); }
};

struct OpDfma {  // DFMA
    using T = double;
    double m, c;
    __device__ __forceinline__ double operator()(double x, int) const { return fma(x, m, c); }
};

struct OpEx2 {  // MUFU.EX2: x <- 2^-x stays in (0, 1] (fixed point 0.641...)
    using T = float;
    __device__ __forceinline__ float operator()(float x, int) const
    {
        float y;
        // The negation stays inside the asm: a C-level -x becomes FADD.FTZ under -ftz=true
        // (which CuPy passes), while neg.f32 folds into MUFU's operand modifier either way.
        asm("{ .reg .f32 t; neg.f32 t, %1; ex2.approx.ftz.f32 %0, t; }" : "=f"(y) : "f"(x));
        return y;
    }
};

struct OpRsq {  // MUFU.RSQ: x <- 1/sqrt(x) converges to 1
    using T = float;
    __device__ __forceinline__ float operator()(float x, int) const
    {
        float y;
        asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    }
};

// Integer ALU: one step is x <- ((x ^ a) + b) + c = LOP3 then IADD3, two dependent ALU
// instructions. In PTX (inline asm) so that LLVM cannot hoist b + c out of the loop; ptxas fuses
// the two adds into one three-input IADD3, which it cannot turn into IMAD.IADD (an FMA-pipe
// instruction it picks for two-input adds). a, b, c must be per-thread registers.
__device__ __forceinline__ unsigned int kp_alu_step(unsigned int x, unsigned int a,
                                                    unsigned int b, unsigned int c)
{
    asm("xor.b32 %0, %0, %1;\n\tadd.u32 %0, %0, %2;\n\tadd.u32 %0, %0, %3;"
        : "+r"(x)
        : "r"(a), "r"(b), "r"(c));
    return x;
}

struct OpAlu {
    using T = unsigned int;
    unsigned int a, b, c;
    __device__ __forceinline__ unsigned int operator()(unsigned int x, int) const
    {
        return kp_alu_step(x, a, b, c);
    }
};

struct OpImad {  // IMAD
    using T = unsigned int;
    unsigned int a, b;
    __device__ __forceinline__ unsigned int operator()(unsigned int x, int) const
    {
        return x * a + b;
    }
};

// -- timing harness -----------------------------------------------------------------------------

template <int K, class Op>
__device__ __forceinline__ void kp_chains(Op op, typename Op::T seed, int iters, int flag,
                                          long long* __restrict__ out,
                                          unsigned int* __restrict__ smid,
                                          typename Op::T* __restrict__ sink)
{
    using T = typename Op::T;
    T x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        x[k] = seed + (T)(k + threadIdx.x);
    }
    __syncthreads();
    const long long c0 = clock64();
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < KP_U; ++u) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                x[k] = op(x[k], u);
            }
        }
    }
    __syncthreads();
    const long long c1 = clock64();
    if (threadIdx.x == 0) {
        out[blockIdx.x] = c1 - c0;
        smid[blockIdx.x] = kp_smid();
    }
    if (flag) {
        T s = x[0];
#pragma unroll
        for (int k = 1; k < K; ++k) {
            s = s + x[k];
        }
        sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
}

#define KP_PIPE(NAME, OP, T, INIT)                                                               \
    extern "C" __global__ void __launch_bounds__(1024, 1)                                        \
        kp_lat_##NAME(T p, T q, int iters, int flag, long long* out, unsigned int* smid, T* sink) \
    {                                                                                            \
        kp_chains<1>(OP INIT, p, iters, flag, out, smid, sink);                                  \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(1024, 1)                                        \
        kp_thr_##NAME(T p, T q, int iters, int flag, long long* out, unsigned int* smid, T* sink) \
    {                                                                                            \
        kp_chains<KP_K>(OP INIT, p, iters, flag, out, smid, sink);                               \
    }

// Arguments p, q: the chain's seed and the operation's constants (runtime values, so nothing
// can be folded). FFMA/DFMA: x <- x * q + p with q just below 1 keeps x finite.
KP_PIPE(fp32, OpFfma, float, ({q, p}))
KP_PIPE(fp64, OpDfma, double, ({q, p}))
KP_PIPE(ex2, OpEx2, float, ({}))
KP_PIPE(rsq, OpRsq, float, ({}))
KP_PIPE(alu, OpAlu, unsigned int, ({q ^ threadIdx.x, p + threadIdx.x, q + 5u * threadIdx.x}))
KP_PIPE(imad, OpImad, unsigned int, ({q, p}))

// Issue: per step 12 FFMA (12 chains) + 2 integer chains of LOP3 + IADD3, 16 independent-ish
// instructions. Per sub-partition the FP32 pipe (32 lanes) needs 12 cycles for them and the ALU
// pipe (16 lanes) 8, so the scheduler's one instruction per cycle is the limit: cycles per
// instruction = the issue gap. Every chain's step is >= 16 instructions apart, more than any
// latency, so one warp alone issues back to back as well.
extern "C" __global__ void __launch_bounds__(1024, 1)
    kp_issue_mix(float p, float q, unsigned int a, unsigned int b, int iters, int flag,
                 long long* __restrict__ out, unsigned int* __restrict__ smid,
                 float* __restrict__ sink)
{
    float f[12];
#pragma unroll
    for (int k = 0; k < 12; ++k) {
        f[k] = p + (float)(k + threadIdx.x);
    }
    unsigned int i0 = a + threadIdx.x, i1 = b + threadIdx.x;
    const unsigned int ra = a ^ threadIdx.x, rb = b + threadIdx.x, rc = a + 5u * threadIdx.x;
    __syncthreads();
    const long long c0 = clock64();
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < KP_U; ++u) {
#pragma unroll
            for (int k = 0; k < 12; ++k) {
                f[k] = fmaf(f[k], q, p);
            }
            i0 = kp_alu_step(i0, ra, rb, rc);
            i1 = kp_alu_step(i1, rb, rc, ra);
        }
    }
    __syncthreads();
    const long long c1 = clock64();
    if (threadIdx.x == 0) {
        out[blockIdx.x] = c1 - c0;
        smid[blockIdx.x] = kp_smid();
    }
    if (flag) {
        float s = (float)(i0 ^ i1);
#pragma unroll
        for (int k = 0; k < 12; ++k) {
            s += f[k];
        }
        sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
}

// -- shared memory ------------------------------------------------------------------------------

// Word i of the array holds the shared-window address of word (i + 32) mod n_words: a lane that
// starts at word l stays in bank l, so every warp load is one conflict-free 128-byte request
// (LDS, 4 bytes per lane), and the loaded value is the next address (no address arithmetic).
__device__ __forceinline__ unsigned int kp_smem_init(unsigned int n_words)
{
    extern __shared__ unsigned int kp_smem[];
    const unsigned int base = (unsigned int)__cvta_generic_to_shared(kp_smem);
    for (unsigned int i = threadIdx.x; i < n_words; i += blockDim.x) {
        kp_smem[i] = base + 4u * ((i + 32u) % n_words);
    }
    return base;
}

__device__ __forceinline__ unsigned int kp_lds(unsigned int addr)
{
    unsigned int v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

template <int K>
__device__ __forceinline__ void kp_smem_chains(unsigned int n_words, int iters, int flag,
                                               long long* __restrict__ out,
                                               unsigned int* __restrict__ smid,
                                               unsigned int* __restrict__ sink)
{
    const unsigned int base = kp_smem_init(n_words);
    const unsigned int warp = threadIdx.x / 32u, lane = threadIdx.x % 32u;
    unsigned int j[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        j[k] = base + 4u * ((32u * (warp * K + k) + lane) % n_words);
    }
    __syncthreads();
    const long long c0 = clock64();
#pragma unroll 1
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < KP_U; ++u) {
#pragma unroll
            for (int k = 0; k < K; ++k) {
                j[k] = kp_lds(j[k]);
            }
        }
    }
    __syncthreads();
    const long long c1 = clock64();
    if (threadIdx.x == 0) {
        out[blockIdx.x] = c1 - c0;
        smid[blockIdx.x] = kp_smid();
    }
    if (flag) {
        unsigned int s = 0;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            s ^= j[k];
        }
        sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
}

extern "C" __global__ void __launch_bounds__(1024, 1)
    kp_lat_smem(unsigned int n_words, int iters, int flag, long long* out, unsigned int* smid,
                unsigned int* sink)
{
    kp_smem_chains<1>(n_words, iters, flag, out, smid, sink);
}

extern "C" __global__ void __launch_bounds__(1024, 1)
    kp_thr_smem(unsigned int n_words, int iters, int flag, long long* out, unsigned int* smid,
                unsigned int* sink)
{
    kp_smem_chains<KP_K>(n_words, iters, flag, out, smid, sink);
}

// -- global memory ------------------------------------------------------------------------------

__device__ __forceinline__ unsigned int kp_ldcg(const unsigned int* p)
{
    unsigned int v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Warp-wide pointer chase: ONE warp; lane l reads the 8-byte word l % 16 of a 128-byte line, so
// each step is one coalesced 128-B request (cached in L2 only). Word i of line X holds the
// address of word i of the next line: the loaded value is the next address, no arithmetic in
// between. out[0] = clock64 cycles, out[1] = globaltimer ns for `steps` loads.
__device__ __forceinline__ unsigned long long kp_ldcg64(unsigned long long addr)
{
    unsigned long long v;
    asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
    return v;
}

// The timed chase from this lane's first address `p` (kp_chase_warp, kp_chase_scatter).
__device__ __forceinline__ void kp_chase_from(unsigned long long p, int steps, int flag,
                                              long long* __restrict__ out,
                                              unsigned long long* __restrict__ sink)
{
    const unsigned long long g0 = kp_globaltimer();
    const long long c0 = clock64();
#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
        p = kp_ldcg64(p);
    }
    const long long c1 = clock64();
    const unsigned long long g1 = kp_globaltimer();
    if (threadIdx.x == 0) {
        out[0] = c1 - c0;
        out[1] = (long long)(g1 - g0);
    }
    if (flag) {
        sink[threadIdx.x] = p;
    }
}

extern "C" __global__ void kp_chase_warp(unsigned long long start, int steps, int flag,
                                         long long* __restrict__ out,
                                         unsigned long long* __restrict__ sink)
{
    kp_chase_from(start + 8u * (threadIdx.x % 16u), steps, flag, out, sink);
}

// Streaming read: every warp instruction loads one whole 128-byte line (lane l: word l), 8
// independent lines per warp per iteration (immediate offsets, no address arithmetic between
// them). Warp w of the grid reads lines 8 w .. 8 w + 7 of every row of 8 x (warps in the grid)
// lines; `rows` rows, `laps` times. Timed with CUDA events by the host.
extern "C" __global__ void __launch_bounds__(256, 8)
    kp_stream(const unsigned int* __restrict__ buf, int rows, int laps, int flag,
              unsigned int* __restrict__ sink)
{
    const unsigned int lane = threadIdx.x % 32u;
    const unsigned long long warp = (blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x) / 32u;
    const unsigned long long row_words = 256ull * ((gridDim.x * (unsigned long long)blockDim.x) / 32u);
    unsigned int acc = 0;
#pragma unroll 1
    for (int lap = 0; lap < laps; ++lap) {
        const unsigned int* p = buf + warp * 256u + lane;
#pragma unroll 1
        for (int r = 0; r < rows; ++r) {
            unsigned int v[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                v[k] = kp_ldcg(p + 32 * k);
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                acc += v[k];
            }
            p += row_words;
        }
    }
    if (flag) {
        sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    }
}

// Scattered reads: as kp_stream, but lane l of a warp instruction loads word 0 of its own
// 128-byte line (32 lines of one 32-B sector each, the pattern of a column walk), 8 independent
// instructions per warp per iteration. Lines wrap within `window_lines` (a power of two). Each
// lap starts `lap_lines` lines further on: a short step in an L2-resident window warmed first
// (the L2), the lines of a whole grid's lap in a window past the L2, flushed first (DRAM, every
// line fetched once). Timed with CUDA events by the host.
extern "C" __global__ void __launch_bounds__(256, 8)
    kp_scatter(const unsigned int* __restrict__ buf, unsigned int window_lines,
               unsigned int lap_lines, int laps, int flag, unsigned int* __restrict__ sink)
{
    const unsigned int lane = threadIdx.x % 32u;
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32u;
    const unsigned int mask = window_lines - 1u;
    unsigned int acc = 0;
#pragma unroll 1
    for (int lap = 0; lap < laps; ++lap) {
        const unsigned int first = warp * 256u + (unsigned int)lap * lap_lines + lane;
        unsigned int v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = kp_ldcg(buf + 32u * ((first + 32u * k) & mask));
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            acc += v[k];
        }
    }
    if (flag) {
        sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    }
}

// Coalesced reads through the L2, kp_scatter's way: each of the 8 warp instructions per lap
// loads one whole 128-B line (lane l word l), every request its own line (lines 9 apart: odd,
// so the requests of a lap cover the window without repeats), each lap `lap_lines` requests
// further on in the L2-resident window. The L2's gap for coalesced requests, measured on the
// same addresses as its gap for scattered ones (kp_scatter), so their ratio compares like with
// like (kp_stream re-reads each warp's same 8 lines every lap: 4.29 against 3.40 cycles a
// request on the H200, experiments/device_l2_lines_check.py).
extern "C" __global__ void __launch_bounds__(256, 8)
    kp_l2_lines(const unsigned int* __restrict__ buf, unsigned int window_lines,
                unsigned int lap_lines, int laps, int flag, unsigned int* __restrict__ sink)
{
    const unsigned int lane = threadIdx.x % 32u;
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32u;
    const unsigned int mask = window_lines - 1u;
    unsigned int acc = 0;
#pragma unroll 1
    for (int lap = 0; lap < laps; ++lap) {
        const unsigned int first = warp * 8u + (unsigned int)lap * lap_lines;
        unsigned int v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = kp_ldcg(buf + 32u * (((first + k) * 9u) & mask) + lane);
        }
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            acc += v[k];
        }
    }
    if (flag) {
        sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
    }
}

// Scattered writes: kp_scatter's addresses, but each of the 8 warp instructions is a store
// (st.global.cg of one word, lane l to word 0 of its own 128-B line: 32 lines of one partly
// written 32-B sector each, the pattern of a column of an output or of an in-place update).
extern "C" __global__ void __launch_bounds__(256, 8)
    kp_scatter_store(unsigned int* __restrict__ buf, unsigned int window_lines,
                     unsigned int lap_lines, int laps, int flag, unsigned int* __restrict__ sink)
{
    const unsigned int lane = threadIdx.x % 32u;
    const unsigned int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32u;
    const unsigned int mask = window_lines - 1u;
#pragma unroll 1
    for (int lap = 0; lap < laps; ++lap) {
        const unsigned int first = warp * 256u + (unsigned int)lap * lap_lines + lane;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            __stcg(buf + 32u * ((first + 32u * k) & mask), (unsigned int)lap + lane);
        }
    }
    if (flag) {
        sink[blockIdx.x * blockDim.x + threadIdx.x] = lane;
    }
}

// Scattered pointer chase: ONE warp, lane l follows its own pointer (starts[l], word 0 of a
// line), so every step is one warp instruction touching 32 different lines. The links are those
// of kp_chase_warp (word 0 of line X holds the address of word 0 of the next line of a cycle);
// the host spreads the 32 starts evenly along the cycle. out[0] = clock64 cycles, out[1] =
// globaltimer ns for `steps` loads.
extern "C" __global__ void kp_chase_scatter(const unsigned long long* __restrict__ starts,
                                            int steps, int flag, long long* __restrict__ out,
                                            unsigned long long* __restrict__ sink)
{
    kp_chase_from(starts[threadIdx.x % 32u], steps, flag, out, sink);
}

// Block dispatch: a block that does nothing. The host times grids of G blocks with CUDA events;
// the slope of time over G is the dispatcher's time per block (GPU-wide), the time of one block
// per SM is what a launch costs before its blocks' work.
extern "C" __global__ void kp_empty(int flag, int* __restrict__ sink)
{
    if (flag) {
        sink[blockIdx.x] = threadIdx.x;
    }
}

// Holds the stream for `cycles` SM cycles, so that the host has queued the timed launch and its
// events before the GPU reaches them (the launch is timed on the GPU alone).
extern "C" __global__ void kp_hold(long long cycles)
{
    const long long c0 = clock64();
    while (clock64() - c0 < cycles) {
    }
}
