/* klaraptor_runtime.h: what every program instrumented by `klaraptor instrument` shares.
 *
 * - A per-kernel cache of the helper's choice, keyed by the data sizes D: a direct-mapped table
 *   of KLARAPTOR_CACHE_SLOTS entries per kernel and per host thread (thread-local: no locks, no
 *   races), so that a launch with a D seen before costs a hash, a compare and a copy.
 * - (CUDA only) the launch glue the generated wrappers call, and three environment variables,
 *   read once per process:
 *     KLARAPTOR_LOG=1   one line on stderr per launch: kernel, D, grid, block, and whether the
 *                       helper's configuration or the program's own was used (and why);
 *     KLARAPTOR_TIME=1  GPU time of every instrumented launch (CUDA events; each launch is then
 *                       waited for), summed per kernel and printed on stderr at exit;
 *     KLARAPTOR_OFF=1   launch with the program's own configuration (the untuned program).
 *
 * The C part compiles as C99 or C++; the rest only under nvcc (__CUDACC__). */
#ifndef KLARAPTOR_RUNTIME_H
#define KLARAPTOR_RUNTIME_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef KLARAPTOR_CACHE_SLOTS
#define KLARAPTOR_CACHE_SLOTS 16 /* a power of two */
#endif
#define KLARAPTOR_MAX_DATA 8

#if defined(__cplusplus) && __cplusplus >= 201103L
#define KLARAPTOR_TLS thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define KLARAPTOR_TLS _Thread_local
#elif defined(_MSC_VER)
#define KLARAPTOR_TLS __declspec(thread)
#else
#define KLARAPTOR_TLS __thread
#endif

typedef struct {
    long D[KLARAPTOR_MAX_DATA];
    int used, status, grid[3], block[3];
} klaraptor_cache_entry;

typedef int (*klaraptor_best_fn)(const long *D, int grid[3], int block[3]);

/* The helper's choice for D through `cache` (KLARAPTOR_CACHE_SLOTS entries): 0 and the
 * configuration, or the helper's -1 when no candidate is admissible (cached too). */
static int klaraptor_cached_best(klaraptor_cache_entry *cache, klaraptor_best_fn best,
                                 const long *D, int n, int grid[3], int block[3])
{
    unsigned long h = 1469598103934665603UL;
    int i, status;
    klaraptor_cache_entry *e;
    for (i = 0; i < n; ++i) h = (h ^ (unsigned long)D[i]) * 1099511628211UL;
    e = &cache[(h ^ (h >> 29)) & (KLARAPTOR_CACHE_SLOTS - 1)];
    if (e->used) {
        for (i = 0; i < n && e->D[i] == D[i]; ++i) {
        }
        if (i == n) {
            memcpy(grid, e->grid, sizeof e->grid);
            memcpy(block, e->block, sizeof e->block);
            return e->status;
        }
    }
    status = best(D, grid, block);
    e->used = 1;
    e->status = status;
    memcpy(e->D, D, (size_t)n * sizeof(long));
    memcpy(e->grid, grid, sizeof e->grid);
    memcpy(e->block, block, sizeof e->block);
    return status;
}

#define KLARAPTOR_FLAG_LOG 1
#define KLARAPTOR_FLAG_TIME 2
#define KLARAPTOR_FLAG_OFF 4

static int klaraptor_env_set(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

/* The KLARAPTOR_* variables, read once (a race between threads reads the same values). */
static int klaraptor_flags(void)
{
    static int flags = -1;
    if (flags < 0) {
        flags = (klaraptor_env_set("KLARAPTOR_LOG") ? KLARAPTOR_FLAG_LOG : 0) |
                (klaraptor_env_set("KLARAPTOR_TIME") ? KLARAPTOR_FLAG_TIME : 0) |
                (klaraptor_env_set("KLARAPTOR_OFF") ? KLARAPTOR_FLAG_OFF : 0);
    }
    return flags;
}

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <tuple>

/* Makes a wrapper's arguments a non-deduced context: they take the kernel's parameter types
 * (deduced from the kernel alone), converted at the call as a launch converts them. */
template <typename T> struct klaraptor_same {
    typedef T type;
};

struct klaraptor_stats {
    const char *kernel;
    long launches, helper_launches;
    double gpu_ms;
    cudaEvent_t start, stop;
    int registered;
};

#define KLARAPTOR_MAX_KERNELS 256
static klaraptor_stats *klaraptor_registry[KLARAPTOR_MAX_KERNELS];
static int klaraptor_registered;

static void klaraptor_report(void)
{
    int i;
    for (i = 0; i < klaraptor_registered; ++i) {
        const klaraptor_stats *s = klaraptor_registry[i];
        fprintf(stderr, "klaraptor-time: kernel=%s launches=%ld helper_launches=%ld gpu_ms=%.6f\n",
                s->kernel, s->launches, s->helper_launches, s->gpu_ms);
    }
}

/* Chooses the launch configuration: the helper's for D (grid and block replaced), unless
 * `why_not` gives a reason to keep the program's own (an assumption of the build that fails),
 * KLARAPTOR_OFF is set, or the helper admits no candidate for D. */
static inline void klaraptor_configure(klaraptor_stats *stats, klaraptor_best_fn choose,
                                       const long *D, int n, const char *why_not, dim3 *grid,
                                       dim3 *block)
{
    int flags = klaraptor_flags(), g[3] = {0, 0, 0}, b[3] = {0, 0, 0}, i;
    if (flags & KLARAPTOR_FLAG_OFF)
        why_not = "KLARAPTOR_OFF";
    if (why_not == NULL) {
        if (choose(D, g, b) == 0) {
            *grid = dim3((unsigned)g[0], (unsigned)g[1], (unsigned)g[2]);
            *block = dim3((unsigned)b[0], (unsigned)b[1], (unsigned)b[2]);
            stats->helper_launches++;
        } else {
            why_not = "the helper admits no configuration for this D";
        }
    }
    stats->launches++;
    if ((flags & KLARAPTOR_FLAG_TIME) && !stats->registered) {
        stats->registered = 1;
        if (klaraptor_registered < KLARAPTOR_MAX_KERNELS) {
            if (klaraptor_registered == 0)
                atexit(klaraptor_report);
            klaraptor_registry[klaraptor_registered++] = stats;
        }
    }
    if (flags & KLARAPTOR_FLAG_LOG) {
        fprintf(stderr, "klaraptor: launch kernel=%s D=", stats->kernel);
        for (i = 0; i < n; ++i)
            fprintf(stderr, i ? ",%ld" : "%ld", D[i]);
        fprintf(stderr, " grid=%u,%u,%u block=%u,%u,%u source=%s%s%s\n", grid->x, grid->y,
                grid->z, block->x, block->y, block->z, why_not ? "program" : "helper",
                why_not ? " reason=" : "", why_not ? why_not : "");
    }
}

static inline void klaraptor_timer_start(klaraptor_stats *stats, cudaStream_t stream)
{
    if (!(klaraptor_flags() & KLARAPTOR_FLAG_TIME))
        return;
    if (stats->start == NULL) {
        cudaEventCreate(&stats->start);
        cudaEventCreate(&stats->stop);
    }
    cudaEventRecord(stats->start, stream);
}

static inline void klaraptor_timer_stop(klaraptor_stats *stats, cudaStream_t stream)
{
    float ms = 0.0f;
    if (!(klaraptor_flags() & KLARAPTOR_FLAG_TIME))
        return;
    cudaEventRecord(stats->stop, stream);
    if (cudaEventSynchronize(stats->stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, stats->start, stats->stop) == cudaSuccess)
        stats->gpu_ms += ms;
}
#endif /* __CUDACC__ */
#endif /* KLARAPTOR_RUNTIME_H */
