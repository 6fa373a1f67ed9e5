// The per-launch cost of `klaraptor instrument`'s choice (scripts/device_instrument.py builds,
// instruments and runs this program). Two identical kernels: `noop` is annotated, so its launch
// is rewritten to ask the helper (cached per D); `noop_plain` is not, so its launch stays plain.
// Both are launched with the helper's configuration, so the GPU work is the same; the host time
// per launch (enqueue only, and launch throughput with a final wait) is compared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#pragma kernel_info_size_param_idx_noop = 1;
#pragma kernel_info_dim_noop = 1;
__global__ void noop(float *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] < -1.0f) a[i] = 0.0f;  // never true: a is zeroed
}

__global__ void noop_plain(float *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && a[i] < -1.0f) a[i] = 0.0f;
}

static double now_us()
{
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 65536;
    int rounds = argc > 2 ? atoi(argv[2]) : 41;
    const int burst = 256;  // launches per timed burst: fewer than the launch queue holds
    float *a;
    cudaMalloc(&a, n * sizeof(float));
    cudaMemset(a, 0, n * sizeof(float));
    dim3 block(256), grid((n + 255) / 256);
#ifdef KLARAPTOR_RUNTIME_H
    {  // the plain launches use the helper's configuration too: the same GPU work
        long D[1] = {n};
        int g[3], b[3];
        if (klaraptor_overhead_noop_choose(D, g, b) == 0) {
            grid = dim3(g[0], g[1], g[2]);
            block = dim3(b[0], b[1], b[2]);
        }
    }
#endif
    noop<<<grid, block>>>(a, n);
    noop_plain<<<grid, block>>>(a, n);
    cudaDeviceSynchronize();
    std::vector<double> plain_enqueue, tuned_enqueue, plain_total, tuned_total;
    for (int r = 0; r < rounds; ++r) {
        double t0 = now_us();
        for (int i = 0; i < burst; ++i) noop_plain<<<grid, block>>>(a, n);
        double t1 = now_us();
        cudaDeviceSynchronize();
        double t2 = now_us();
        plain_enqueue.push_back((t1 - t0) / burst);
        plain_total.push_back((t2 - t0) / burst);
        t0 = now_us();
        for (int i = 0; i < burst; ++i) noop<<<grid, block>>>(a, n);
        t1 = now_us();
        cudaDeviceSynchronize();
        t2 = now_us();
        tuned_enqueue.push_back((t1 - t0) / burst);
        tuned_total.push_back((t2 - t0) / burst);
    }
    printf("grid=%u,%u,%u block=%u,%u,%u n=%d rounds=%d burst=%d\n", grid.x, grid.y, grid.z,
           block.x, block.y, block.z, n, rounds, burst);
    printf("plain_enqueue_us=%.4f\n", median(plain_enqueue));
    printf("instrumented_enqueue_us=%.4f\n", median(tuned_enqueue));
    printf("plain_launch_us=%.4f\n", median(plain_total));
    printf("instrumented_launch_us=%.4f\n", median(tuned_total));
#ifdef KLARAPTOR_RUNTIME_H
    {
        long D[1] = {n};
        int g[3], b[3];
        long reps = 20000000, acc = 0;
        double t0 = now_us();
        for (long i = 0; i < reps; ++i) acc += klaraptor_overhead_noop_choose(D, g, b) + g[0];
        double cached = (now_us() - t0) * 1000.0 / reps;
        t0 = now_us();
        for (long i = 0; i < 4000; ++i) {  // a new D each call: every call misses the cache
            long Dn[1] = {4096 + i};
            acc += klaraptor_overhead_noop_choose(Dn, g, b) + g[0];
        }
        double uncached = (now_us() - t0) / 4000;
        printf("choose_cached_ns=%.3f\n", cached);
        printf("choose_uncached_us=%.3f\n", uncached);
        printf("checksum=%ld\n", acc);
    }
#endif
    cudaFree(a);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
