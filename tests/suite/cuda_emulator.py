"""Run a CUDA kernel's own source on the CPU, for tests without a GPU.

The source is compiled as C++20 by the host compiler (g++ or clang++) after a small prelude that
defines what the kernels use (thread and block indices, `__syncthreads`, warp shuffles,
atomics, vector types, `__ldcg`, the float intrinsics) and two rewrites of the text:
`extern __shared__ T name[];` points `name` at the launch's dynamic shared memory, and each
`__shared__` declaration becomes a `static` (one block runs at a time) registered with the
runtime. A launch runs the blocks one after another, each with one OS thread per CUDA thread
(so barriers and shuffles really synchronise), and checks what a GPU would not report:
- every argument array and the dynamic shared memory are separate heap allocations of their
  exact size, and the program is built with AddressSanitizer: an out-of-bounds access of global
  or shared memory (static or dynamic) aborts with the faulting line;
- shared memory is filled with 0xFF bytes (a NaN for floats) before every block, so a value read
  before the block wrote it reaches the output;
- every thread of a block must reach the same number of `__syncthreads` (a barrier under a
  thread-dependent condition fails), and a shuffle needs its whole warp;
- a kernel that hangs (a barrier some threads never reach) is stopped after `timeout` seconds.
Arithmetic is the host's float32 (no FMA contraction guarantees), so results match a float64
reference to the suite's tolerances, not bit for bit.

`EmulatedKernel(source, kernel, options)` compiles once (options are `-D` defines; `kernel` may
be a template instance such as `sgemm<4, 2>`); `launch(args, grid, block, smem)` runs it on NumPy
arrays and scalars and returns the arrays as the kernel left them.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from klaraptor.spec.cuda_source import kernel_parameters

PRELUDE = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include <algorithm>
using std::min; using std::max;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __constant__

struct kp_uint3 { unsigned int x, y, z; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

static thread_local kp_uint3 threadIdx, blockIdx;
static kp_uint3 blockDim, gridDim;
static unsigned char* kp_dyn_smem = nullptr;

static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T> static inline T __ldcg(const T* p) { return *p; }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

[[noreturn]] static void kp_fail(const char* what) {
    std::fprintf(stderr, "EMULATION ERROR: %s (block %u,%u,%u thread %u,%u,%u)\n", what,
                 blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    std::fflush(stderr);
    std::_Exit(3);
}

template <class T> static inline T atomicAdd(T* p, T v) {
    return std::atomic_ref<T>(*p).fetch_add(v);
}

// Block barrier and per-thread barrier counts.
static std::unique_ptr<std::barrier<>> kp_block_bar;
static thread_local long kp_syncs = 0;
static inline void __syncthreads() { ++kp_syncs; kp_block_bar->arrive_and_wait(); }

// Warps: one exchange slot per lane and a barrier per warp.
struct kp_warp {
    std::unique_ptr<std::barrier<>> bar;
    unsigned lanes = 0;
    alignas(8) unsigned char slot[32][8];
};
static std::vector<kp_warp> kp_warps;
static thread_local unsigned kp_lane = 0, kp_warp_id = 0;

template <class T> static inline T kp_shfl(unsigned mask, T v, unsigned src, bool valid) {
    kp_warp& w = kp_warps[kp_warp_id];
    if (w.lanes != 32 || mask != 0xffffffffu) kp_fail("shuffle without a whole warp");
    static_assert(sizeof(T) <= 8, "shuffle of a wide type");
    std::memcpy(w.slot[kp_lane], &v, sizeof(T));
    w.bar->arrive_and_wait();
    T r = v;
    if (valid) std::memcpy(&r, w.slot[src], sizeof(T));
    w.bar->arrive_and_wait();
    return r;
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
    return kp_shfl(mask, v, kp_lane + delta, kp_lane + delta < 32);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, unsigned lanemask) {
    return kp_shfl(mask, v, kp_lane ^ lanemask, (kp_lane ^ lanemask) < 32);
}

// Static shared memory: registered on first use, refilled with 0xFF before every block.
struct kp_region { void* p; size_t n; };
static std::mutex kp_shared_mutex;
static std::vector<kp_region> kp_shared;
static void kp_register_shared(void* p, size_t n) {
    std::lock_guard<std::mutex> lock(kp_shared_mutex);
    for (auto& r : kp_shared) if (r.p == p) return;
    std::memset(p, 0xFF, n);
    kp_shared.push_back({p, n});
}
"""

MAIN = r"""
template <class T> static T* kp_read(const char* dir, int i, size_t* count) {
    char path[4096];
    std::snprintf(path, sizeof path, "%%s/arg%%d.bin", dir, i);
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) { std::fprintf(stderr, "cannot read %s\n", path); std::exit(2); }
    size_t bytes = (size_t)f.tellg();
    f.seekg(0);
    *count = bytes / sizeof(T);
    T* p = new T[*count > 0 ? *count : 1];
    f.read(reinterpret_cast<char*>(p), (std::streamsize)bytes);
    return p;
}
template <class T> static void kp_write(const char* dir, int i, const T* p, size_t count) {
    char path[4096];
    std::snprintf(path, sizeof path, "%%s/arg%%d.out", dir, i);
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(p), (std::streamsize)(count * sizeof(T)));
}

int main(int argc, char** argv) {
    // argv: dir gx gy gz bx by bz smem scalar...
    if (argc < 9) { std::fprintf(stderr, "usage\n"); return 2; }
    const char* dir = argv[1];
    gridDim = {(unsigned)std::atoi(argv[2]), (unsigned)std::atoi(argv[3]), (unsigned)std::atoi(argv[4])};
    blockDim = {(unsigned)std::atoi(argv[5]), (unsigned)std::atoi(argv[6]), (unsigned)std::atoi(argv[7])};
    const size_t smem = (size_t)std::atoll(argv[8]);
    int next_scalar = 9;
    (void)next_scalar;
%(read_args)s
    std::unique_ptr<unsigned char[]> dyn(smem > 0 ? new unsigned char[smem] : nullptr);
    kp_dyn_smem = dyn.get();
    const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    kp_block_bar = std::make_unique<std::barrier<>>(nthreads);
    const unsigned nwarps = (nthreads + 31) / 32;
    kp_warps = std::vector<kp_warp>(nwarps);
    for (unsigned w = 0; w < nwarps; ++w) {
        kp_warps[w].lanes = std::min(32u, nthreads - 32 * w);
        kp_warps[w].bar = std::make_unique<std::barrier<>>(kp_warps[w].lanes);
    }
    std::vector<long> syncs(nthreads, 0);
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < nthreads; ++t) {
        threads.emplace_back([&, t] {
            threadIdx = {t %% blockDim.x, (t / blockDim.x) %% blockDim.y, t / (blockDim.x * blockDim.y)};
            kp_lane = t %% 32;
            kp_warp_id = t / 32;
            for (unsigned bz = 0; bz < gridDim.z; ++bz)
            for (unsigned by = 0; by < gridDim.y; ++by)
            for (unsigned bx = 0; bx < gridDim.x; ++bx) {
                blockIdx = {bx, by, bz};
                kp_syncs = 0;
                if (t == 0 && smem > 0) std::memset(kp_dyn_smem, 0xFF, smem);
                kp_block_bar->arrive_and_wait();
                %(call)s;
                syncs[t] = kp_syncs;
                kp_block_bar->arrive_and_wait();
                if (t == 0) {
                    for (unsigned u = 1; u < nthreads; ++u)
                        if (syncs[u] != syncs[0]) kp_fail("threads of a block reached different numbers of __syncthreads");
                    for (auto& r : kp_shared) std::memset(r.p, 0xFF, r.n);
                }
                kp_block_bar->arrive_and_wait();
            }
        });
    }
    for (auto& th : threads) th.join();
%(write_args)s
    return 0;
}
"""

_SHARED_DYN = re.compile(r"extern\s+__shared__\s+([\w:<> ]+?)\s+(\w+)\s*\[\s*\]\s*;")
_SHARED_STATIC = re.compile(r"__shared__\s+([^;]+);")
_DECLARATOR = re.compile(r"^\s*(.*?)\b(\w+)\s*(\[.*)?$", re.DOTALL)
_C_TYPES = {
    "float": np.float32,
    "double": np.float64,
    "int": np.int32,
    "unsigned int": np.uint32,
    "unsigned": np.uint32,
    "float2": np.float32,
    "float4": np.float32,
}


class EmulationError(AssertionError):
    """The emulated kernel failed: a sanitizer report, a barrier or shuffle error, or a hang."""


def compiler() -> str | None:
    """The host C++ compiler to use, or None when there is none with C++20 <barrier>."""
    for name in ("g++", "clang++"):
        path = shutil.which(name)
        if path and _has_barrier(path):
            return path
    return None


@functools.cache
def _has_barrier(path: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "t.cpp"
        src.write_text("#include <barrier>\nint main() { std::barrier<> b(1); return 0; }\n")
        r = subprocess.run(
            [path, "-std=c++20", "-pthread", str(src), "-o", str(Path(tmp) / "t")],
            capture_output=True,
        )
        return r.returncode == 0


def _rewrite_shared(source: str) -> str:
    """Dynamic shared arrays point at the launch's buffer; static ones become registered
    statics."""
    text = _SHARED_DYN.sub(
        lambda m: f"{m.group(1)}* {m.group(2)} = reinterpret_cast<{m.group(1)}*>(kp_dyn_smem);",
        source,
    )

    def static(m: re.Match[str]) -> str:
        # "unsigned int a[8], b[4]": the type precedes the first declarator's name.
        names = []
        for d in _split_top(m.group(1)):
            parts = _DECLARATOR.match(d)
            if parts is None:
                raise EmulationError(f"cannot read the shared declaration {m.group(0)!r}")
            names.append(parts.group(2))
        regs = " ".join(f"kp_register_shared(&{n}, sizeof({n}));" for n in names)
        return f"static {m.group(1)}; {regs}"

    return _SHARED_STATIC.sub(static, text)


def _split_top(decls: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in decls:
        depth += ch in "[(" and 1 or (ch in "])" and -1 or 0)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _arg_type(decl: str) -> tuple[str, bool]:
    """(C element type, is a pointer) of a parameter declaration."""
    pointer = "*" in decl
    words = [
        w
        for w in re.findall(r"[A-Za-z_]\w*", decl.split("*")[0] if pointer else decl)
        if w not in ("const", "__restrict__", "__restrict", "volatile")
    ]
    if not pointer:
        words = words[:-1]  # the parameter's name
    ctype = " ".join(words)
    if ctype not in _C_TYPES:
        raise EmulationError(f"the emulator does not know the C type {ctype!r} ({decl!r})")
    return ctype, pointer


class EmulatedKernel:
    """One kernel (one compiled variant) built for the CPU with AddressSanitizer."""

    def __init__(
        self,
        source: str,
        kernel: str,
        options: Sequence[str] = (),
        *,
        build_dir: str | os.PathLike[str] | None = None,
        sanitize: str = "address",
    ) -> None:
        cxx = compiler()
        if cxx is None:
            raise EmulationError("no C++20 host compiler (g++ or clang++) for the emulator")
        base = kernel.split("<")[0].strip()
        decls = kernel_parameters(source, base)
        if decls is None:
            raise EmulationError(f"cannot read the parameters of {base!r}")
        self.types = [_arg_type(d) for d in decls]
        self.kernel = kernel
        defines = [o for o in options if o.startswith("-D")]
        read, write, names = [], [], []
        for i, (ctype, pointer) in enumerate(self.types):
            if pointer:
                read.append(f"    size_t n{i}; {ctype}* a{i} = kp_read<{ctype}>(dir, {i}, &n{i});")
                write.append(f"    kp_write<{ctype}>(dir, {i}, a{i}, n{i});")
            elif ctype in ("float", "double"):
                read.append(
                    f"    {ctype} a{i} = ({ctype})std::strtod(argv[next_scalar++], nullptr);"
                )
            else:
                read.append(
                    f"    {ctype} a{i} = ({ctype})std::strtoll(argv[next_scalar++], nullptr, 10);"
                )
            names.append(f"a{i}")
        program = (
            PRELUDE
            + _rewrite_shared(source)
            + MAIN
            % {
                "read_args": "\n".join(read),
                "write_args": "\n".join(write),
                "call": f"{kernel}({', '.join(names)})",
            }
        )
        flags = ["-std=c++20", "-O1", "-g", "-pthread", "-Wno-unknown-pragmas", *defines]
        if sanitize:
            flags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer"]
        key = hashlib.sha256((program + " ".join(flags) + cxx).encode()).hexdigest()[:20]
        root = Path(build_dir or Path(tempfile.gettempdir()) / "klaraptor_cuda_emulator")
        root.mkdir(parents=True, exist_ok=True)
        self.exe = root / f"{base}_{key}"
        if not self.exe.exists():
            src = root / f"{base}_{key}.cpp"
            src.write_text(program)
            tmp = root / f"{base}_{key}.{os.getpid()}.tmp"
            r = subprocess.run(
                [cxx, *flags, str(src), "-o", str(tmp)], capture_output=True, text=True
            )
            if r.returncode != 0:
                raise EmulationError(f"host compile of {kernel} failed:\n{r.stderr[-4000:]}")
            tmp.replace(self.exe)

    def launch(
        self,
        args: Sequence[Any],
        grid: Sequence[int],
        block: Sequence[int],
        smem: int = 0,
        *,
        timeout: float = 120.0,
    ) -> list[Any]:
        """Run one launch; the returned list holds the arguments after it (arrays copied)."""
        if len(args) != len(self.types):
            raise EmulationError(
                f"{self.kernel} takes {len(self.types)} arguments, got {len(args)}"
            )
        scalars: list[str] = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, ((ctype, pointer), a) in enumerate(zip(self.types, args)):
                if pointer:
                    arr = np.ascontiguousarray(a)
                    if arr.dtype != _C_TYPES[ctype]:
                        raise EmulationError(f"argument {i}: {arr.dtype} for a {ctype}*")
                    arr.tofile(Path(tmp) / f"arg{i}.bin")
                else:
                    scalars.append(repr(float(a)) if ctype in ("float", "double") else str(int(a)))
            cmd = [str(self.exe), tmp, *map(str, grid), *map(str, block), str(int(smem)), *scalars]
            env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0")
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                raise EmulationError(
                    f"{self.kernel} grid={tuple(grid)} block={tuple(block)} hung for {timeout} s "
                    "(a barrier some threads never reach?)"
                ) from None
            if r.returncode != 0:
                raise EmulationError(
                    f"{self.kernel} grid={tuple(grid)} block={tuple(block)} smem={smem} failed "
                    f"(exit {r.returncode}):\n{r.stderr[-6000:]}"
                )
            out: list[Any] = []
            for i, ((_ctype, pointer), a) in enumerate(zip(self.types, args)):
                if pointer:
                    arr = np.asarray(a)
                    got = np.fromfile(Path(tmp) / f"arg{i}.out", dtype=arr.dtype)
                    out.append(got.reshape(arr.shape))
                else:
                    out.append(a)
            return out
