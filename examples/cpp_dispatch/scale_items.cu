// A C++ host program that launches the configuration klaraptor chooses for each n: the helper
// header gives grid, block and the program parameters (here ITEMS), and dispatch_on turns ITEMS
// into the template instance to launch. Build and run (see README.md in this directory):
//
//   klaraptor build cpp_dispatch_spec:SPEC
//   klaraptor export examples.cpp_dispatch.scale_items --lang c > scale_items_helper.h
//   nvcc -O3 -std=c++17 -fmad=true scale_items.cu -o scale_items && ./scale_items 50000000
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dispatch.hpp"
#include "scale_items.cuh"

#ifndef KLARAPTOR_HELPER
#define KLARAPTOR_HELPER "scale_items_helper.h"
#endif
#ifndef KLARAPTOR_BEST
#define KLARAPTOR_BEST klaraptor_examples_cpp_dispatch_scale_items_best
#endif
#include KLARAPTOR_HELPER

static int check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
    return 0;
}

int main(int argc, char** argv) {
    int n = argc > 1 ? std::atoi(argv[1]) : 1 << 24;
    long D[1] = {n};
    int grid[3], block[3], params[1];
    if (KLARAPTOR_BEST(D, grid, block, params) != 0) {
        std::fprintf(stderr, "no admissible configuration for n = %d\n", n);
        return 1;
    }
    std::vector<float> hx(n), hy(n);
    for (int i = 0; i < n; ++i) hx[i] = (float)(i % 1000) * 0.5f;
    float *x, *y;
    check(cudaMalloc(&x, sizeof(float) * n), "cudaMalloc");
    check(cudaMalloc(&y, sizeof(float) * n), "cudaMalloc");
    check(cudaMemcpy(x, hx.data(), sizeof(float) * n, cudaMemcpyHostToDevice), "copy");
    dim3 g(grid[0], grid[1], grid[2]), b(block[0], block[1], block[2]);
    bool launched = dispatch_on<1, 2, 4, 8>(params[0], [&](auto items) {
        scale_items<decltype(items)::value><<<g, b>>>(x, y, n);
    });
    if (!launched) {
        std::fprintf(stderr, "the helper chose ITEMS = %d, not compiled here\n", params[0]);
        return 1;
    }
    check(cudaGetLastError(), "launch");
    check(cudaMemcpy(hy.data(), y, sizeof(float) * n, cudaMemcpyDeviceToHost), "copy back");
    for (int i = 0; i < n; ++i)
        if (hy[i] != 2.0f * hx[i]) {
            std::fprintf(stderr, "wrong result at %d\n", i);
            return 1;
        }
    std::printf("n=%d ITEMS=%d grid=(%d,%d,%d) block=(%d,%d,%d): ok\n", n, params[0], grid[0],
                grid[1], grid[2], block[0], block[1], block[2]);
    cudaFree(x);
    cudaFree(y);
    return 0;
}
