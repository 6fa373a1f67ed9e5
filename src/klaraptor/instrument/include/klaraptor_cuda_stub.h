/* klaraptor instrument: a stand-in for the CUDA headers, so that libclang can parse a program's
 * host code (and find its kernel launches) on a machine without the CUDA toolkit. It declares
 * what host code and `<<<...>>>` need; it is never compiled into a program (nvcc uses the real
 * headers). Anything it lacks only costs a parse diagnostic: launches that the parser cannot
 * read are reported and left alone, never rewritten blindly. */
#ifndef KLARAPTOR_CUDA_STUB_H
#define KLARAPTOR_CUDA_STUB_H


#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#define CUDART_VERSION 13000

#ifdef __cplusplus
extern "C++" {
#endif

typedef __SIZE_TYPE__ klaraptor_stub_size_t;

#define KLARAPTOR_STUB_VEC(T, N)                                                     \
    struct N##1 { T x; };                                                           \
    struct N##2 { T x, y; };                                                        \
    struct N##3 { T x, y, z; };                                                     \
    struct N##4 { T x, y, z, w; };                                                  \
    typedef struct N##1 N##1;                                                       \
    typedef struct N##2 N##2;                                                       \
    typedef struct N##3 N##3;                                                       \
    typedef struct N##4 N##4;                                                       \
    static inline __host__ __device__ N##2 make_##N##2(T x, T y) { N##2 v = {x, y}; return v; } \
    static inline __host__ __device__ N##3 make_##N##3(T x, T y, T z) { N##3 v = {x, y, z}; return v; } \
    static inline __host__ __device__ N##4 make_##N##4(T x, T y, T z, T w) { N##4 v = {x, y, z, w}; return v; }
KLARAPTOR_STUB_VEC(char, char)
KLARAPTOR_STUB_VEC(unsigned char, uchar)
KLARAPTOR_STUB_VEC(short, short)
KLARAPTOR_STUB_VEC(unsigned short, ushort)
KLARAPTOR_STUB_VEC(int, int)
KLARAPTOR_STUB_VEC(unsigned int, uint)
KLARAPTOR_STUB_VEC(long, long)
KLARAPTOR_STUB_VEC(unsigned long, ulong)
KLARAPTOR_STUB_VEC(long long, longlong)
KLARAPTOR_STUB_VEC(unsigned long long, ulonglong)
KLARAPTOR_STUB_VEC(float, float)
KLARAPTOR_STUB_VEC(double, double)
#undef KLARAPTOR_STUB_VEC

struct dim3 {
    unsigned int x, y, z;
#ifdef __cplusplus
    __host__ __device__ dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
        : x(vx), y(vy), z(vz) {}
    __host__ __device__ dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
#endif
};
typedef struct dim3 dim3;

extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUgraph_st *cudaGraph_t;
typedef struct CUgraphExec_st *cudaGraphExec_t;
typedef enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
struct cudaDeviceProp {
    char name[256];
    klaraptor_stub_size_t totalGlobalMem, sharedMemPerBlock, totalConstMem, sharedMemPerBlockOptin;
    int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
    int major, minor, multiProcessorCount, maxThreadsPerMultiProcessor, memoryClockRate;
    int memoryBusWidth, l2CacheSize, concurrentKernels, asyncEngineCount, unifiedAddressing;
};
typedef struct cudaDeviceProp cudaDeviceProp;

/* The launch configuration call that clang's Sema turns `<<<...>>>` into (new and old API). */
extern "C" unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
                                                klaraptor_stub_size_t sharedMem = 0,
                                                void *stream = 0);
extern "C" cudaError_t cudaConfigureCall(dim3 gridDim, dim3 blockDim,
                                         klaraptor_stub_size_t sharedMem = 0,
                                         cudaStream_t stream = 0);

extern "C" {
cudaError_t cudaMalloc(void **ptr, klaraptor_stub_size_t size);
cudaError_t cudaMallocManaged(void **ptr, klaraptor_stub_size_t size, unsigned int flags = 1);
cudaError_t cudaMallocHost(void **ptr, klaraptor_stub_size_t size);
cudaError_t cudaHostAlloc(void **ptr, klaraptor_stub_size_t size, unsigned int flags);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, klaraptor_stub_size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, klaraptor_stub_size_t count,
                            enum cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, klaraptor_stub_size_t count,
                               klaraptor_stub_size_t offset = 0,
                               enum cudaMemcpyKind kind = cudaMemcpyHostToDevice);
cudaError_t cudaMemset(void *ptr, int value, klaraptor_stub_size_t count);
cudaError_t cudaMemsetAsync(void *ptr, int value, klaraptor_stub_size_t count, cudaStream_t stream = 0);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaThreadSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaThreadExit(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                             klaraptor_stub_size_t sharedMem, cudaStream_t stream);
}

#ifdef __cplusplus
template <class T> static inline cudaError_t cudaMalloc(T **ptr, klaraptor_stub_size_t size) {
    return cudaMalloc((void **)ptr, size);
}
template <class T>
static inline cudaError_t cudaMallocManaged(T **ptr, klaraptor_stub_size_t size, unsigned int flags = 1) {
    return cudaMallocManaged((void **)ptr, size, flags);
}
template <class T> static inline cudaError_t cudaMallocHost(T **ptr, klaraptor_stub_size_t size) {
    return cudaMallocHost((void **)ptr, size);
}
#endif

__device__ void __syncwarp(unsigned mask = 0xffffffffu);
__device__ void __threadfence(void);
__device__ int atomicAdd(int *address, int val);
__device__ unsigned atomicAdd(unsigned *address, unsigned val);
__device__ float atomicAdd(float *address, float val);
__device__ double atomicAdd(double *address, double val);
__device__ int atomicMax(int *address, int val);
__device__ int atomicMin(int *address, int val);
__device__ int atomicCAS(int *address, int compare, int val);
__device__ int atomicExch(int *address, int val);
__device__ float __shfl_down_sync(unsigned mask, float var, unsigned delta, int width = 32);
__device__ int __shfl_down_sync(unsigned mask, int var, unsigned delta, int width = 32);
__device__ float __shfl_xor_sync(unsigned mask, float var, int lane_mask, int width = 32);
__device__ int __shfl_xor_sync(unsigned mask, int var, int lane_mask, int width = 32);
__device__ float __shfl_sync(unsigned mask, float var, int src, int width = 32);
__device__ int __shfl_sync(unsigned mask, int var, int src, int width = 32);
template <class T> __device__ T __ldg(const T *ptr);

/* The device side of the math library, declared as clang's own CUDA headers do: after the
 * host's, static (they overload the C library's host functions of the same names). */
}
#include <math.h>
extern "C++" {
#define KLARAPTOR_STUB_D static __device__
#define KLARAPTOR_STUB_MATH1(f) KLARAPTOR_STUB_D double f(double); KLARAPTOR_STUB_D float f##f(float);
#define KLARAPTOR_STUB_MATH2(f) \
    KLARAPTOR_STUB_D double f(double, double); KLARAPTOR_STUB_D float f##f(float, float);
KLARAPTOR_STUB_MATH1(sqrt) KLARAPTOR_STUB_MATH1(cbrt) KLARAPTOR_STUB_MATH1(exp)
KLARAPTOR_STUB_MATH1(exp2) KLARAPTOR_STUB_MATH1(expm1) KLARAPTOR_STUB_MATH1(log)
KLARAPTOR_STUB_MATH1(log2) KLARAPTOR_STUB_MATH1(log10) KLARAPTOR_STUB_MATH1(log1p)
KLARAPTOR_STUB_MATH1(sin) KLARAPTOR_STUB_MATH1(cos) KLARAPTOR_STUB_MATH1(tan)
KLARAPTOR_STUB_MATH1(asin) KLARAPTOR_STUB_MATH1(acos) KLARAPTOR_STUB_MATH1(atan)
KLARAPTOR_STUB_MATH1(sinh) KLARAPTOR_STUB_MATH1(cosh) KLARAPTOR_STUB_MATH1(tanh)
KLARAPTOR_STUB_MATH1(fabs) KLARAPTOR_STUB_MATH1(floor) KLARAPTOR_STUB_MATH1(ceil)
KLARAPTOR_STUB_MATH1(round) KLARAPTOR_STUB_MATH1(trunc) KLARAPTOR_STUB_MATH1(rsqrt)
KLARAPTOR_STUB_MATH1(erf) KLARAPTOR_STUB_MATH1(erfc)
KLARAPTOR_STUB_MATH2(pow) KLARAPTOR_STUB_MATH2(fmin) KLARAPTOR_STUB_MATH2(fmax)
KLARAPTOR_STUB_MATH2(fmod) KLARAPTOR_STUB_MATH2(atan2) KLARAPTOR_STUB_MATH2(hypot)
KLARAPTOR_STUB_D float __expf(float);
KLARAPTOR_STUB_D float __logf(float);
KLARAPTOR_STUB_D float __sinf(float);
KLARAPTOR_STUB_D float __cosf(float);
KLARAPTOR_STUB_D float __fdividef(float, float);
KLARAPTOR_STUB_D float __powf(float, float);
KLARAPTOR_STUB_D int abs(int);
KLARAPTOR_STUB_D int min(int, int);
KLARAPTOR_STUB_D int max(int, int);
#ifdef __cplusplus
KLARAPTOR_STUB_D float sqrt(float);
KLARAPTOR_STUB_D float exp(float);
KLARAPTOR_STUB_D float log(float);
KLARAPTOR_STUB_D float fabs(float);
KLARAPTOR_STUB_D float pow(float, float);
KLARAPTOR_STUB_D float min(float, float);
KLARAPTOR_STUB_D float max(float, float);
#endif
#undef KLARAPTOR_STUB_MATH1
#undef KLARAPTOR_STUB_MATH2
#undef KLARAPTOR_STUB_D

#ifdef __cplusplus
}
#endif
#endif /* KLARAPTOR_CUDA_STUB_H */
