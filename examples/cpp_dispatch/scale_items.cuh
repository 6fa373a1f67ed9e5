// y = 2 x with ITEMS consecutive elements per thread: ITEMS is a compile-time program parameter
// (a template argument), chosen per call with the block by the helper klaraptor exports.
#pragma once

template <int ITEMS>
__global__ void scale_items(const float* x, float* y, int n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
#pragma unroll
    for (int j = 0; j < ITEMS; ++j)
        if (i0 + j < n) y[i0 + j] = 2.0f * x[i0 + j];
}
