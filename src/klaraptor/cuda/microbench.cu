// klaraptor device microbenchmarks. The methods, buffer sizes and their rationale are documented
// in klaraptor/microbench.py, which compiles this file with NVRTC and runs the kernels.
// Every timed kernel writes its result through `sink` so the compiler cannot drop the work.

__device__ __forceinline__ unsigned long long kp_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Pointer chase: ONE thread follows `next` for `steps` dependent loads. __ldcg caches in L2
// only, so no load can hit in L1. out[0] = SM cycles (clock64), out[1] = nanoseconds
// (globaltimer) for the whole chain; the per-load latency includes the ~2 instructions that turn
// the loaded index into the next address.
extern "C" __global__ void kp_chase(const unsigned int* __restrict__ next, unsigned int start,
                                    int steps, long long* __restrict__ out,
                                    unsigned int* __restrict__ sink)
{
    unsigned int j = start;
    const unsigned long long g0 = kp_globaltimer();
    const long long c0 = clock64();
    for (int s = 0; s < steps; ++s) {
        j = __ldcg(next + j);
    }
    const long long c1 = clock64();
    const unsigned long long g1 = kp_globaltimer();
    out[0] = c1 - c0;
    out[1] = (long long)(g1 - g0);
    sink[0] = j;
}

// Departure delay (Hong & Kim 2009): the k warps of one block each issue ONE load right after a
// barrier, and the block waits for all of them. Coalesced: lane l of warp w reads word
// 32 w + l (one 128-B line per warp). Uncoalesced: it reads word 32 (32 w + l) (a separate line
// per lane, 32 per warp). The time from the barrier until all loads are back grows with k by
// one departure delay per warp; the host fits that slope. out[launch] = SM cycles (thread 0).
extern "C" __global__ void kp_departure(const unsigned int* __restrict__ data, int uncoalesced,
                                        int launch, long long* __restrict__ out,
                                        unsigned int* __restrict__ sink)
{
    __shared__ unsigned int stash[1024];
    const unsigned int t = threadIdx.x;
    const unsigned long long idx = uncoalesced ? 32ull * t : (unsigned long long)t;
    __syncthreads();
    const long long c0 = clock64();
    const unsigned int v = __ldcg(data + idx);
    stash[t] = v;  // a shared store needs the loaded value: the load completes before the barrier
    __syncthreads();
    const long long c1 = clock64();
    if (t == 0) {
        out[launch] = c1 - c0;
    }
    if (v == 0xFFFFFFFFu) {
        sink[0] = stash[(t + 1) % blockDim.x];
    }
}

// Achievable DRAM bandwidth: a grid-stride copy of 16-byte elements.
extern "C" __global__ void kp_copy(const float4* __restrict__ src, float4* __restrict__ dst,
                                   unsigned long long n)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        dst[i] = src[i];
    }
}

// Issue cycles: ONE warp runs 8 independent FMA chains (unrolled 8 times per iteration, so
// 64 FMAs per iteration and no dependency stall), out[0] = SM cycles for iters x 64 FMAs.
extern "C" __global__ void kp_issue(float seed, float m, float c, int iters,
                                    long long* __restrict__ out, float* __restrict__ sink)
{
    float a0 = seed, a1 = seed + 1.0f, a2 = seed + 2.0f, a3 = seed + 3.0f;
    float a4 = seed + 4.0f, a5 = seed + 5.0f, a6 = seed + 6.0f, a7 = seed + 7.0f;
    const long long c0 = clock64();
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            a0 = fmaf(a0, m, c);
            a1 = fmaf(a1, m, c);
            a2 = fmaf(a2, m, c);
            a3 = fmaf(a3, m, c);
            a4 = fmaf(a4, m, c);
            a5 = fmaf(a5, m, c);
            a6 = fmaf(a6, m, c);
            a7 = fmaf(a7, m, c);
        }
    }
    const long long c1 = clock64();
    if (threadIdx.x == 0) {
        out[0] = c1 - c0;
    }
    sink[threadIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}
