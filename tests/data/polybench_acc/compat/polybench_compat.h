/* Passed with `nvcc -include` when compiling PolyBench-ACC's CUDA programs with CUDA 13:
 * cudaThreadSynchronize() (CUDA 5 era, long deprecated, no longer declared by CUDA 13) is
 * cudaDeviceSynchronize() under its old name. Nothing else of the programs changes. */
#ifndef KLARAPTOR_POLYBENCH_COMPAT_H
#define KLARAPTOR_POLYBENCH_COMPAT_H
#include <cuda_runtime.h>
static inline cudaError_t cudaThreadSynchronize(void) { return cudaDeviceSynchronize(); }
#endif
