"""GPU tests of the collector (CuPy backend, worker isolation, ncu). Skipped without a GPU.

Run on the GPU machine with output shown:  PYTHONPATH=src python3 -m pytest -s -m gpu tests/test_gpu_collect.py
Budget: about 50 s of GPU-machine time (four short collections, one of them waits out a 10 s hang).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from klaraptor.collect.collector import CollectOptions, collect
from klaraptor.collect.ncu import find_ncu
from klaraptor.core.errors import CompileError, LaunchError
from klaraptor.fit.training import collected
from klaraptor.space.configspace import ConfigSpace
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.store import Store

pytestmark = pytest.mark.gpu

# ---------------------------------------------------------------------------------------------
# Kernels and their specs (callables at module level: they travel to worker processes)

SRC = r"""
extern "C" __global__ void twice(const float* __restrict__ x, float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}

// Misbehaves on purpose for chosen block shapes:
//   64 threads: illegal address (kills the CUDA context), 96: never ends,
//   160: wrong result (output check), anything else: y = 2 x.
extern "C" __global__ void faulty(const float* __restrict__ x, float* __restrict__ y,
                                  volatile int* flag, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (blockDim.x == 64) {
        float* bad = (float*)0x10;
        bad[threadIdx.x] = 1.0f;
        return;
    }
    if (blockDim.x == 96) {
        while (flag[0] == 0) { }
        return;
    }
    if (i < n) y[i] = (blockDim.x == 160 ? 3.0f : 2.0f) * x[i];
}

// Needs bx * 1024 bytes of dynamic shared memory (64 KB at bx = 64: above the 48 KB default).
extern "C" __global__ void smem_copy(const float* __restrict__ x, float* __restrict__ y, int n)
{
    extern __shared__ float buf[];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[threadIdx.x * 256] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = buf[threadIdx.x * 256];
}
"""


def twice_args(D, rng):  # noqa: ANN001, ANN201
    import cupy

    n = D["N"]
    x = cupy.asarray(rng.random(n, dtype=np.float32))
    return (x, cupy.empty(n, dtype=cupy.float32), np.int32(n))


def twice_ref(D, host):  # noqa: ANN001, ANN201
    return {1: 2.0 * host[0].astype(np.float64)}


def faulty_args(D, rng):  # noqa: ANN001, ANN201
    import cupy

    x, y, n = twice_args(D, rng)
    return (x, y, cupy.zeros(1, dtype=cupy.int32), n)


def copy_ref(D, host):  # noqa: ANN001, ANN201
    return {1: host[0].astype(np.float64)}


GRID = ("ceil(N / bx)", "1", "1")
DATA = (DataParam("N", arg=2),)

TWICE = KernelSpec(
    name="gputest.twice",
    source=SRC,
    kernel="twice",
    data=DATA,
    dim=1,
    grid=GRID,
    make_args=twice_args,
    reference=twice_ref,
    outputs=(1,),
    rtol=1e-6,
)
FAULTY = KernelSpec(
    name="gputest.faulty",
    source=SRC,
    kernel="faulty",
    data=(DataParam("N", arg=3),),
    dim=1,
    grid=GRID,
    make_args=faulty_args,
    reference=twice_ref,
    outputs=(1,),
    rtol=1e-6,
)
SMEM = KernelSpec(
    name="gputest.smem",
    source=SRC,
    kernel="smem_copy",
    data=DATA,
    dim=1,
    grid=GRID,
    make_args=twice_args,
    reference=copy_ref,
    outputs=(1,),
    dynamic_smem="bx * 1024",
)

FAST = CollectOptions(min_time_ms=5.0, counters=False)


def show(report: object, store: Store, spec: KernelSpec) -> None:
    print(f"\n{report}")
    for m in store.measurements(spec.name, report.device):  # type: ignore[attr-defined]
        v = m.value
        t = (
            f"{v['median_ms'] * 1e3:9.2f} us ×{v['inner']:>3} n={v['repeats']:>3}"
            if "median_ms" in v
            else ""
        )
        print(f"  {m.kind:4} D={m.D} block={m.block} {m.status:8} {t} {m.reason}")


# ---------------------------------------------------------------------------------------------
# Backend, in this process


def test_compile_error_shows_the_nvrtc_log(tmp_path: Path) -> None:
    from klaraptor.backends.cupy_backend import CupyBackend

    be = CupyBackend()
    bad = 'extern "C" __global__ void bad(int* a, int N) { a[0] = undefined_name; }'
    with pytest.raises(CompileError) as info:
        be.compile(bad, "bad", ("--std=c++17",))
    print(f"\n{info.value}")
    assert "undefined_name" in info.value.log and "is undefined" in info.value.log
    # Through collect: the worker compiles, the parent raises with the log.
    spec = KernelSpec(
        name="gputest.bad",
        source=bad,
        kernel="bad",
        data=(DataParam("N", arg=1),),
        dim=1,
        grid=GRID,
        make_args=twice_args,
    )
    with Store(tmp_path / "s.sqlite") as store, pytest.raises(CompileError) as info:
        collect(spec, [{"N": 64}], store=store, options=FAST, progress=False)
    assert "undefined_name" in info.value.log


def test_an_oversize_launch_raises_launch_error() -> None:
    import cupy

    from klaraptor.backends.cupy_backend import CupyBackend

    be = CupyBackend()
    fn = be.compile(SRC, "twice", ("--std=c++17",))
    x = cupy.ones(64, dtype=cupy.float32)
    with pytest.raises(LaunchError, match=r"block \(2048, 1, 1\)") as info:
        be.launch(fn, (1, 1, 1), (2048, 1, 1), (x, x, np.int32(64)))
    print(f"\n{info.value}")
    assert be.context_alive()  # an invalid configuration does not poison the context


def test_timing_is_positive_and_stable() -> None:
    import cupy

    from klaraptor.backends.cupy_backend import CupyBackend

    be = CupyBackend()
    fn = be.compile(SRC, "twice", ("--std=c++17",))
    timer = be.timer(be.device_clock_mhz(0))
    for n, block in ((1 << 24, 256), (4096, 128)):
        x = cupy.ones(n, dtype=cupy.float32)
        y = cupy.empty_like(x)
        grid = (n + block - 1) // block
        runs = [
            timer.measure(
                lambda: be.launch(fn, (grid, 1, 1), (block, 1, 1), (x, y, np.int32(n))),  # noqa: B023
                min_time_ms=20.0,
            )
            for _ in range(5)
        ]
        meds = [r["median_ms"] for r in runs]
        print(
            f"\nN={n} block={block}: medians {[f'{m * 1e3:.2f} us' for m in meds]}, "
            f"inner {runs[0]['inner']}, repeats {[r['repeats'] for r in runs]}, "
            f"spread {[round(r['spread'], 3) for r in runs]}"
        )
        assert all(m > 0 for m in meds)
        assert max(meds) / min(meds) < 1.25, meds
        if n == 4096:
            assert runs[0]["inner"] > 1  # a few-µs kernel is batched
    assert float(cupy.asnumpy(y[:1])[0]) == 2.0
    flushed = be.timer(be.device_clock_mhz(0), flush_bytes=2 * be.l2_bytes(0))
    n = 1 << 22
    x, y = cupy.ones(n, dtype=cupy.float32), cupy.empty(n, dtype=cupy.float32)
    r = flushed.measure(lambda: be.launch(fn, (n // 256, 1, 1), (256, 1, 1), (x, y, np.int32(n))))
    print(f"L2 flushed, N={n}: {r['median_ms'] * 1e3:.2f} us, inner {r['inner']}")
    assert r["inner"] == 1 and r["flush_l2"] and r["median_ms"] > 0


# ---------------------------------------------------------------------------------------------
# collect(), with worker processes


def test_oversize_points_are_rejected_before_launch(tmp_path: Path) -> None:
    space = ConfigSpace.for_spec(SMEM, candidates=[64, 256, 2048])
    with Store(tmp_path / "s.sqlite") as store:
        rep = collect(
            SMEM, [{"N": 1 << 16}], store=store, space=space, options=FAST, progress=False
        )
        show(rep, store, SMEM)
        rows = {m.block[0]: m for m in store.measurements(SMEM.name, rep.device, "time")}
    assert rows[64].status == "ok", rows[64].reason  # 64 KB of dynamic smem: opted in
    assert rows[64].value["check"]["ok"]
    assert rows[256].status == "rejected" and "shared memory" in rows[256].reason
    assert rows[2048].status == "rejected" and "2048 threads" in rows[2048].reason
    assert rep.count("time", "rejected") == 2


def test_crash_and_hang_are_isolated(tmp_path: Path) -> None:
    space = ConfigSpace.for_spec(FAULTY, candidates=[32, 64, 96, 128, 160])
    opts = CollectOptions(min_time_ms=5.0, counters=False, timeout_s=10.0)
    t0 = time.monotonic()
    with Store(tmp_path / "s.sqlite") as store:
        rep = collect(
            FAULTY, [{"N": 1 << 16}], store=store, space=space, options=opts, progress=False
        )
        show(rep, store, FAULTY)
        rows = {m.block[0]: m for m in store.measurements(FAULTY.name, rep.device, "time")}
        print(f"wall {time.monotonic() - t0:.1f} s")
        # Resume: everything is recorded, so a second call measures nothing.
        again = collect(
            FAULTY, [{"N": 1 << 16}], store=store, space=space, options=opts, progress=False
        )
    assert rows[32].status == "ok" and rows[128].status == "ok"
    assert rows[32].value["median_ms"] > 0 and rows[32].value["check"]["ok"]
    assert rows[64].status == "failed" and "illegal" in rows[64].reason.lower()
    assert rows[96].status == "failed" and rows[96].reason.startswith("timeout after 10 s")
    assert rows[160].status == "failed" and "output check failed" in rows[160].reason
    assert rep.worker["crashes"] == 1 and rep.worker["timeouts"] == 1
    assert rep.worker["timing_workers"] == 3  # replaced after the crash and after the hang
    assert again.count("time", "skipped") == 5 and again.count("time", "ok") == 0


def test_counters_with_ncu(tmp_path: Path) -> None:
    if find_ncu() is None:
        pytest.skip("ncu not found")
    space = ConfigSpace.for_spec(TWICE, candidates=[32, 128, 1024])
    sizes = [{"N": 1 << 16}, {"N": 1 << 18}]
    with Store(tmp_path / "s.sqlite") as store:
        rep = collect(
            TWICE,
            sizes,
            store=store,
            space=space,
            options=CollectOptions(min_time_ms=5.0),
            progress=False,
        )
        show(rep, store, TWICE)
        facts = store.collect_facts(TWICE.name, rep.device)
        print(f"collection facts: {facts}")
        got = collected(store, TWICE, rep.device)
    assert rep.ncu_status == "ok", rep.ncu_reason
    assert rep.count("ncu", "ok") == 6
    assert facts is not None and facts.ptx_barriers == 0, facts
    for (D, cfg), d in sorted(got.items(), key=lambda kv: (kv[0][0].values(), kv[0][1].block)):
        block = cfg.block
        print(f"  D={D} block={block}: " + ", ".join(f"{k}={v:.4g}" for k, v in d.items()))
        n = D["N"]
        assert d["warps"] == n // 32  # every warp is full: n is a multiple of the block
        assert d["gld_per_warp"] == pytest.approx(1.0)
        assert d["gst_per_warp"] == pytest.approx(1.0)
        assert d["gld_sectors_per_req"] == pytest.approx(4.0)  # 32 floats = 4 sectors
        assert d["sync_per_warp"] == 0.0
        assert d["time_ms"] > 0 and d["ncu_duration_ms"] > 0
    print(f"ncu pass: {rep.wall_s.get('ncu', 0):.1f} s for {rep.count('ncu', 'ok')} points")
