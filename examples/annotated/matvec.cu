// A small CUDA program annotated the KLARAPTOR way (thesis §5.1).
// `klaraptor build examples/annotated/matvec.cu` builds one helper program per annotated kernel;
// each kernel's grid formula, constraints and argument sizes live in matvec.<kernel>.py.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define SCALE 0.5f

__device__ inline float scaled(float v) { return SCALE * v; }

// y = A x, one thread per row: a warp reads 32 different rows (uncoalesced).
#pragma kernel_info_size_param_idx_mv_rows = 3;
#pragma kernel_info_dim_mv_rows = 1;
__global__ void mv_rows(const float *A, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float s = 0.0f;
        for (int j = 0; j < n; ++j) s += A[i * n + j] * x[j];
        y[i] = scaled(s);
    }
}

// B = A^T, one thread per element: reads are coalesced along x, writes are strided.
#pragma kernel_info_size_param_idx_transpose = 2;
#pragma kernel_info_dim_transpose = 2;
__global__ void transpose(const float *A, float *B, int n) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < n && j < n) B[j * n + i] = A[i * n + j];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    float *A, *x, *y, *B;
    cudaMalloc(&A, sizeof(float) * n * n);
    cudaMalloc(&x, sizeof(float) * n);
    cudaMalloc(&y, sizeof(float) * n);
    cudaMalloc(&B, sizeof(float) * n * n);
    dim3 block1(256), grid1((n + 255) / 256);
    mv_rows<<<grid1, block1>>>(A, x, y, n);
    dim3 block2(32, 8), grid2((n + 31) / 32, (n + 7) / 8);
    transpose<<<grid2, block2>>>(A, B, n);
    cudaDeviceSynchronize();
    printf("done\n");
    return 0;
}
