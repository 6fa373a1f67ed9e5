"""Regenerate the SASS/PTX fixtures of tests/test_isa_*.py (real NVRTC + cuobjdump output).

Usage: python tests/data/isa/make_fixtures.py   (needs the `isa` extra; no GPU)
The fixtures are committed; the tests read them and never run the tools for these.
"""

from __future__ import annotations

from pathlib import Path

from klaraptor import suite
from klaraptor.isa.compile import compile_source
from klaraptor.isa.tools import run_cuobjdump, versions

HERE = Path(__file__).resolve().parent

SOURCES = {
    # Two kernels with known loop structure: a doubly nested loop (kept rolled) and none.
    "loops": r'''
extern "C" __global__ void nested(const float* __restrict__ a, float* __restrict__ out, int n, int m)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < n; ++i) {
        #pragma unroll 1
        for (int j = 0; j < m; ++j) acc += a[(i * m + j) * 64 + t];
        acc *= 0.5f;
    }
    out[t] = acc;
}
extern "C" __global__ void straight(const float* __restrict__ a, float* __restrict__ out, int n)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) out[t] = a[t] * 2.0f + 1.0f;
}
''',
    # Register widths, memory spaces, conversions, warp ops, a subroutine called in a loop.
    "widths": r'''
__device__ __noinline__ float helper(const float* a, int n)
{
    float s = 0.0f;
    #pragma unroll 1
    for (int i = 0; i < n; ++i) s += a[i] * a[i];
    return s;
}
extern "C" __global__ void widths(const float4* __restrict__ v, const double* __restrict__ d,
                                  float* __restrict__ out, int* __restrict__ counter, int n)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    __shared__ int hist[32];
    float local[16];
    float4 x = v[t];
    double y = d[t] * 3.0 + d[t + 1];
    #pragma unroll 1
    for (int k = 0; k < 16; ++k) local[k] = x.x * k + (float)y;
    float acc = local[(t * 7) % 16] + x.y + x.z + x.w;
    #pragma unroll 1
    for (int r = 0; r < 2; ++r) acc += helper(out + r, n);
    int slot = atomicAdd(counter, 1);
    atomicAdd(&hist[t % 32], 1);
    __syncthreads();
    unsigned ballot = __ballot_sync(0xffffffffu, acc > 0.0f);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1) + __sinf(acc) + (float)(int)acc;
    out[t] = acc + (float)hist[(t + 1) % 32] + (float)slot + (float)ballot;
}
''',
}


def main() -> None:
    print("tools:", versions())
    for name, src in SOURCES.items():
        res = compile_source(src, ("--std=c++17",))
        (HERE / f"{name}.sass").write_text(run_cuobjdump(res.cubin, ["-sass"]))
        (HERE / f"{name}.res").write_text(run_cuobjdump(res.cubin, ["-res-usage"]))
        (HERE / f"{name}.ptx").write_text(res.ptx)
    spec = suite.get("polybench.gemm.gemm")
    res = compile_source(spec.source, spec.options)
    (HERE / "gemm.sass").write_text(run_cuobjdump(res.cubin, ["-sass"]))
    (HERE / "gemm.ptx").write_text(res.ptx)
    (HERE / "NVRTC_VERSION").write_text(res.nvrtc_version + "\n")


if __name__ == "__main__":
    main()
