"""One-shot probe of a GPU machine: toolchain facts, CuPy API facts, occupancy fixture, raw ncu CSV.

Usage (on the device): python3 scripts/device_probe.py OUTDIR
Each section is independent; failures are recorded, not fatal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import traceback

OUT = sys.argv[1] if len(sys.argv) > 1 else "probe_out"
os.makedirs(OUT, exist_ok=True)
facts: dict = {}


def section(name):
    def deco(fn):
        t0 = time.time()
        try:
            facts[name] = fn()
        except Exception:  # noqa: BLE001 - a probe records every failure
            facts[name] = {"error": traceback.format_exc()[-3000:]}
        facts.setdefault("_times", {})[name] = round(time.time() - t0, 2)
        print(f"[{name}] {time.time() - t0:.1f}s", flush=True)
        with open(os.path.join(OUT, "facts.json"), "w") as f:
            json.dump(facts, f, indent=1, default=str)
        return fn

    return deco


def sh(cmd, timeout=120):
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    return {"rc": p.returncode, "out": p.stdout[-4000:], "err": p.stderr[-4000:]}


@section("env")
def _env():
    return {
        "smi": sh(
            "nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,clocks.mem,memory.total --format=csv"
        ),
        "nvcc": sh("nvcc --version | tail -2"),
        "ncu": sh("ncu --version"),
        "which_ncu": sh("which ncu; ls /opt/nvidia 2>/dev/null"),
        "py": sys.version,
        "pkgs": sh(
            "python3 -m pip list 2>/dev/null | grep -i -E 'cupy|cuda|numpy|scipy|rich|matplotlib|hypothesis|pytest|numba'"
        ),
        "cpu": os.cpu_count(),
    }


@section("cupy_api")
def _cupy_api():
    import cupy as cp

    src = r"""extern "C" __global__ void k(float* a, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) a[i]=2.f*a[i];}"""
    mod = cp.RawModule(code=src, options=("--std=c++17",))
    f = mod.get_function("k")
    res = {
        "cupy": cp.__version__,
        "rawkernel_attrs": {
            k: getattr(f, k)
            for k in dir(f)
            if not k.startswith("_") and k not in ("kernel",) and not callable(getattr(f, k, None))
        },
        "attributes": dict(f.attributes),
        "has_kernel": hasattr(f, "kernel"),
        "kernel_type": str(type(f.kernel)),
        "kernel_ptr": int(f.kernel.ptr),
        "driver_occ": [n for n in dir(cp.cuda.driver) if "ccupanc" in n],
        "runtime_fns": [
            n for n in dir(cp.cuda.runtime) if "rofiler" in n or "ccupanc" in n or "FuncSet" in n
        ],
        "has_nvtx": hasattr(cp.cuda, "nvtx"),
        "has_profiler": hasattr(cp.cuda, "profiler"),
        "props": {
            k: (v if not isinstance(v, bytes) else v.decode(errors="replace"))
            for k, v in cp.cuda.runtime.getDeviceProperties(0).items()
        },
        "driver_version": cp.cuda.runtime.driverGetVersion(),
        "runtime_version": cp.cuda.runtime.runtimeGetVersion(),
    }
    # compile error: type and how the log is exposed
    try:
        cp.RawModule(
            code='extern "C" __global__ void bad(int* a){ a[0] = undefined_name; }'
        ).get_function("bad")
    except Exception as e:  # noqa: BLE001
        res["compile_error"] = {
            "type": f"{type(e).__module__}.{type(e).__name__}",
            "str": str(e)[:1500],
            "attrs": [a for a in dir(e) if not a.startswith("__")],
        }
        if hasattr(e, "get_message"):
            res["compile_error"]["get_message"] = e.get_message()[:1500]
    # oversized launch
    try:
        a = cp.zeros(10, dtype=cp.float32)
        f((1,), (2048,), (a, cp.int32(10)))
        cp.cuda.runtime.deviceSynchronize()
    except Exception as e:  # noqa: BLE001
        res["oversize_launch"] = f"{type(e).__module__}.{type(e).__name__}: {e}"
    # timing an empty kernel launch from the host
    e_src = r"""extern "C" __global__ void empty(float* a, int n){}"""
    ek = cp.RawModule(code=e_src).get_function("empty")
    a = cp.zeros(10, dtype=cp.float32)
    n = cp.int32(10)
    for _ in range(200):
        ek((1,), (32,), (a, n))
    cp.cuda.runtime.deviceSynchronize()
    ts = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        for _ in range(1000):
            ek((1,), (32,), (a, n))
        ts.append((time.perf_counter_ns() - t0) / 1000)
        cp.cuda.runtime.deviceSynchronize()
    ts.sort()
    res["empty_launch_us_median"] = ts[len(ts) // 2] / 1000
    return res


@section("occupancy_fixture")
def _occ():
    import cupy as cp

    tmpl = textwrap.dedent(r"""
    extern "C" __global__ void occ(float* out, int n) {
        STATIC_SMEM
        float acc[NACC];
        #pragma unroll
        for (int j = 0; j < NACC; ++j) acc[j] = out[(threadIdx.x + j) % n] * (j + 1);
        for (int it = 0; it < n; ++it) {
            #pragma unroll
            for (int j = 0; j < NACC; ++j) acc[j] = acc[j] * acc[(j + 1) % NACC] + 1.0f;
        }
        float s = 0.f;
        #pragma unroll
        for (int j = 0; j < NACC; ++j) s += acc[j];
        USE_SMEM
        out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    }
    """)
    from cuda.bindings import driver as cu

    cases = []
    variants = []
    for nacc, maxr in [
        (4, None),
        (8, 24),
        (16, 32),
        (24, 40),
        (32, 48),
        (40, 56),
        (48, 64),
        (64, 80),
        (64, 96),
        (96, 128),
        (128, 168),
        (200, 255),
    ]:
        for smem_static in (0, 1024, 6000, 20000, 40000):
            variants.append((nacc, maxr, smem_static))
    blocks = [
        32,
        64,
        96,
        128,
        160,
        192,
        224,
        256,
        288,
        320,
        384,
        448,
        512,
        576,
        640,
        768,
        896,
        1024,
    ]
    dyns = [0, 512, 2048, 9000, 24576, 49152, 70000, 120000, 200000]
    for nacc, maxr, sst in variants:
        ssrc = f"__shared__ float sbuf[{sst // 4}];" if sst else ""
        usrc = f"if (n < 0) out[0] = sbuf[threadIdx.x % {sst // 4}];" if sst else ""
        src = tmpl.replace("STATIC_SMEM", ssrc).replace("USE_SMEM", usrc).replace("NACC", str(nacc))
        opts = ("--std=c++17",) + ((f"--maxrregcount={maxr}",) if maxr else ())
        f = cp.RawModule(code=src, options=opts).get_function("occ")
        attrs = dict(f.attributes)
        regs = f.num_regs
        static = f.shared_size_bytes
        func = cu.CUfunction(int(f.kernel.ptr))
        optin_max = 232448 - static
        try:
            f.max_dynamic_shared_size_bytes = optin_max
            opt = optin_max
        except Exception:  # noqa: BLE001
            opt = None
        for b in blocks:
            if b > attrs.get("max_threads_per_block", 1024):
                continue
            for d in dyns:
                err, nb = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, b, d)
                r1 = int(nb) if int(err) == 0 else None
                r2 = (
                    cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
                        int(f.kernel.ptr), b, d
                    )
                    if hasattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor")
                    else None
                )
                cases.append(
                    {
                        "kernel": f"occ_acc{nacc}_r{maxr}_s{sst}",
                        "threads": b,
                        "regs": regs,
                        "smem_static": static,
                        "smem_dynamic": d,
                        "active_blocks": r1,
                        "cupy_driver": r2,
                        "err": int(err),
                        "max_dyn_optin_set": opt,
                        "max_threads_per_block": attrs.get("max_threads_per_block"),
                    }
                )
    with open(os.path.join(OUT, "occupancy_cases.json"), "w") as fh:
        json.dump(cases, fh)
    return {
        "n": len(cases),
        "regs_seen": sorted({c["regs"] for c in cases}),
        "mismatch_cupy_vs_bindings": sum(
            1
            for c in cases
            if c["cupy_driver"] is not None and c["cupy_driver"] != c["active_blocks"]
        ),
    }


NCU_CANDIDATES = [
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg",
    "smsp__cycles_active.avg",
    "smsp__inst_executed.sum",
    "smsp__warps_launched.sum",
    "smsp__thread_inst_executed.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "smsp__inst_executed_op_global_st.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "smsp__inst_executed_op_barrier.sum",
    "smsp__inst_executed_op_bar.sum",
    "smsp__sass_inst_executed_op_barrier.sum",
    "smsp__sass_inst_executed_op_global_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_write.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__block_size",
    "launch__grid_size",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor",
    "launch__occupancy_per_block_size",
]

TARGET = r'''
import sys, cupy as cp, numpy as np
src = r"""
extern "C" __global__ void mv_row(const float* A, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float s = 0.f; for (int j = 0; j < n; ++j) s += A[i * n + j] * x[j]; y[i] = s; }
}
extern "C" __global__ void conv2(const float* A, float* B, int n) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y * blockDim.y + threadIdx.y;
  __shared__ float t[32];
  if (threadIdx.x == 0 && threadIdx.y == 0) t[0] = 1.f;
  __syncthreads();
  if (i > 0 && j > 0 && i < n - 1 && j < n - 1)
    B[i * n + j] = t[0] * (0.2f * A[(i - 1) * n + j] + 0.5f * A[i * n + j] + 0.3f * A[(i + 1) * n + j - 1]);
}
"""
m = cp.RawModule(code=src)
mv = m.get_function("mv_row"); cv = m.get_function("conv2")
npts = int(sys.argv[1])
rng = np.random.default_rng(0)
for p in range(npts):
    n = 256 * (1 + p % 4)
    A = cp.asarray(rng.random((n, n), dtype=np.float32)); x = cp.asarray(rng.random(n, dtype=np.float32)); y = cp.empty(n, cp.float32)
    B = cp.empty((n, n), cp.float32)
    bx = 32 * (1 + p % 8)
    mv(((n + bx - 1) // bx,), (bx,), (A, x, y, np.int32(n)))  # warm-up, not profiled
    cp.cuda.runtime.deviceSynchronize()
    if hasattr(cp.cuda, "nvtx"): cp.cuda.nvtx.RangePush(f"kp:{p}")
    cp.cuda.runtime.profilerStart()
    if p % 2 == 0:
        mv(((n + bx - 1) // bx,), (bx,), (A, x, y, np.int32(n)))
    else:
        b2 = (16, 1 + p % 8)
        cv(((n + 15) // 16, (n + b2[1] - 1) // b2[1]), b2, (A, B, np.int32(n)))
    cp.cuda.runtime.deviceSynchronize()
    cp.cuda.runtime.profilerStop()
    if hasattr(cp.cuda, "nvtx"): cp.cuda.nvtx.RangePop()
    print(f"LAUNCHED {p}", flush=True)
'''


@section("ncu")
def _ncu():
    q = sh(
        "ncu --query-metrics --chip gh100 2>&1 | head -c 2000000 > "
        + os.path.join(OUT, "ncu_query.txt")
        + "; wc -l "
        + os.path.join(OUT, "ncu_query.txt"),
        timeout=180,
    )
    text = open(os.path.join(OUT, "ncu_query.txt")).read()
    base_names = set()
    for line in text.splitlines():
        tok = line.strip().split(" ")[0] if line.strip() else ""
        if "__" in tok:
            base_names.add(tok)
    present = [
        m
        for m in NCU_CANDIDATES
        if m.rsplit(".", 1)[0] in base_names or m in base_names or m.split(".")[0] in base_names
    ]
    missing = [m for m in NCU_CANDIDATES if m not in present]
    bar_names = sorted(n for n in base_names if "bar" in n and n.startswith("smsp__"))[:60]
    with open(os.path.join(OUT, "target.py"), "w") as fh:
        fh.write(TARGET)
    res = {"query": q, "present": present, "missing": missing, "bar_names": bar_names}
    mlist = ",".join(present)
    for tag, npts, extra in (
        ("ncu_raw", 8, ""),
        ("ncu_raw_nvtx", 8, "--nvtx --print-nvtx-rename kernel"),
        ("ncu_cost", 40, ""),
    ):
        t0 = time.time()
        cmd = (
            f"ncu --csv --page raw --clock-control none --profile-from-start off --target-processes all "
            f"{extra} --metrics {mlist} python3 {OUT}/target.py {npts}"
        )
        r = sh(cmd + f" > {OUT}/{tag}.csv 2> {OUT}/{tag}.err", timeout=400)
        res[tag] = {
            "rc": r["rc"],
            "wall_s": round(time.time() - t0, 2),
            "err_tail": open(f"{OUT}/{tag}.err").read()[-1500:],
        }
    # the time a plain run of the same target takes (to split ncu overhead from python start-up)
    t0 = time.time()
    sh(f"python3 {OUT}/target.py 40 > /dev/null")
    res["plain_target_40_s"] = round(time.time() - t0, 2)
    return res


@section("crash_behaviour")
def _crash():
    code = textwrap.dedent(r'''
    import cupy as cp, numpy as np
    src = r"""extern "C" __global__ void bad(float* a){ float* p = (float*)0x10; p[threadIdx.x] = 1.f; }"""
    f = cp.RawModule(code=src).get_function("bad")
    a = cp.zeros(10, cp.float32)
    try:
        f((1,), (32,), (a,)); cp.cuda.runtime.deviceSynchronize()
    except Exception as e:
        print("FIRST", type(e).__module__, type(e).__name__, e)
    try:
        b = cp.ones(4); print("AFTER", float(b.sum()))
    except Exception as e:
        print("AFTER_ERR", type(e).__module__, type(e).__name__, e)
    ''')
    with open(os.path.join(OUT, "crash.py"), "w") as fh:
        fh.write(code)
    return sh(f"timeout 60 python3 {OUT}/crash.py")


with open(os.path.join(OUT, "facts.json"), "w") as f:
    json.dump(facts, f, indent=1, default=str)
print("probe done", flush=True)
