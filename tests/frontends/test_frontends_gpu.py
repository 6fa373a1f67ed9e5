"""Front-ends on a GPU: Numba collection (timing, counters, attributes) and, per front-end, a
tuned launch that is bit-identical to a plain launch with the configuration it chose.

The builds here are small on purpose (two sizes, blocks that are multiples of 128, timing only,
the committed H200 profile instead of microbenchmarks): they test the front-ends, not the
models. Every test prints what it did (shown when it fails).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import klaraptor
from klaraptor.collect.collector import CollectOptions, collect
from klaraptor.collect.ncu import find_ncu
from klaraptor.store import Store

try:  # the Numba kernels below need numba.cuda at module level (Numba compiles their globals)
    from numba import cuda, float32
except ImportError:  # the other front-ends are tested without it
    cuda = float32 = None

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).parents[2] / "examples"
SRC = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""
N = 1 << 20
# Short timing and bounded waits: one device batch runs all of this.
FAST = dict(
    min_time_ms=5.0, max_repeats=20, timeout_s=30.0, startup_timeout_s=90.0, ncu_stall_s=60.0
)
SMALL = dict(
    sizes=[1 << 16, 1 << 17],
    model="time_fit",
    constraints=("bx % 128 == 0",),
    collect_options=CollectOptions(**FAST, counters=False),
)


def saxpy_nb(a, x, y, n):  # noqa: ANN001 - a Numba kernel (compiled in the tests)
    i = cuda.grid(1)
    if i < n:
        y[i] = a * x[i] + y[i]


def rotate_nb(a, out, n):  # noqa: ANN001 - a Numba kernel with shared memory and a barrier
    s = cuda.shared.array(1024, dtype=float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    s[t] = a[i] if i < n else 0.0
    cuda.syncthreads()
    if i < n:
        out[i] = s[(t + 1) % cuda.blockDim.x]


def need_numba() -> None:
    if cuda is None:
        pytest.skip("numba is not installed")


def show(what: str, **facts: object) -> None:
    print(f"[{what}] " + json.dumps(facts, default=str), flush=True)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:  # noqa: ANN001
    return Store(tmp_path_factory.mktemp("frontends") / "s.sqlite")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_numba_collect_gpu(store: Store, h200) -> None:  # noqa: ANN001
    """Numba backend: compile, attributes, barrier count, timing and ncu counters."""
    need_numba()
    t = klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / bx)",
        store=store,
        device=h200,
        on_missing="default",
        constraints=("bx % 256 == 0",),
    )(cuda.jit(rotate_nb))
    host = np.arange(4096, dtype=np.float32)
    a = cuda.to_device(host)
    out = cuda.to_device(np.zeros(4096, np.float32))
    t(a, out, 4096)
    cuda.synchronize()
    assert np.array_equal(out.copy_to_host(), np.roll(host.reshape(16, 256), -1, axis=1).ravel())
    ncu = find_ncu(None)
    t0 = time.perf_counter()
    rep = collect(
        t.spec,
        [1 << 16],
        store=store,
        device=h200,
        options=CollectOptions(**FAST, counters=ncu is not None),
        progress=False,
    )
    facts = store.collect_facts(t.spec.name, h200.key)
    show(
        "numba collect",
        wall_s=round(time.perf_counter() - t0, 1),
        report=rep.format(),
        attributes=facts.attributes.to_dict(),
        barriers=facts.ptx_barriers,
        ncu=ncu,
    )
    assert rep.count("time", "ok") == 4, rep.format()
    assert facts.attributes.num_regs > 0 and facts.attributes.static_smem == 4096
    assert facts.ptx_barriers == 1
    times = {
        m.block: m.value["median_ms"]
        for m in store.measurements(t.spec.name, h200.key, "time", "ok")
    }
    assert all(0 < v < 1.0 for v in times.values()), times
    if ncu is not None:
        assert rep.count("ncu", "ok") == 4, rep.format()
        row = store.measurements(t.spec.name, h200.key, "ncu", "ok")[0].value
        show("numba ncu row", keys=sorted(row)[:12], n=len(row))


def test_numba_timer_is_not_slowed_by_its_spin_kernel_compile(h200) -> None:  # noqa: ANN001
    """The Numba timer's spin kernel is JIT-compiled; that compile once landed inside the first
    sample and left every later sample behind a 20 ms spin (10 s a point)."""
    need_numba()
    from klaraptor.backends.cupy_backend import _MAX_SPIN_US
    from klaraptor.backends.numba_backend import NumbaBackend

    be = NumbaBackend()
    kernel = cuda.jit(saxpy_nb)
    x = cuda.to_device(np.ones(N, np.float32))
    y = cuda.to_device(np.zeros(N, np.float32))
    launch = kernel[(N + 255) // 256, 256]
    launch(np.float32(1.0), x, y, N)  # compile the timed kernel first
    cuda.synchronize()
    timer = be.timer(be.device_clock_mhz(0))
    t0 = time.perf_counter()
    stats = timer.measure(lambda: launch(np.float32(1.0), x, y, N))
    wall = time.perf_counter() - t0
    show(
        "numba timer",
        wall_s=round(wall, 3),
        spin_us=timer.spin_us,
        median_ms=stats["median_ms"],
        repeats=stats["repeats"],
        inner=stats["inner"],
    )
    assert 0 < stats["median_ms"] < 1.0
    # Not left at the cap: the spin follows what the host needs for `inner` Numba launches
    # (on the H200 at dd7f9dc: 18 launches, a 2.9 ms spin, 1.6 s for the point).
    assert timer.spin_us < _MAX_SPIN_US / 4, timer.spin_us
    assert wall < 5.0, wall  # measure's own cap is 10 s of wall: it stopped on kernel time


def test_numba_tuned_gpu_bit_identical(store: Store, h200) -> None:  # noqa: ANN001
    need_numba()
    kernel = cuda.jit(saxpy_nb)
    t = klaraptor.tune(data={"n": "n"}, grid="ceil(n / bx)", store=store, device=h200, **SMALL)(
        kernel
    )
    rng = np.random.default_rng(1)
    x = cuda.to_device(rng.random(N, dtype=np.float32))
    y0 = rng.random(N, dtype=np.float32)
    y = cuda.to_device(y0)
    t0 = time.perf_counter()
    t(np.float32(1.5), x, y, N)
    build_s = time.perf_counter() - t0
    grid, block, smem = t.plan_for(np.float32(1.5), x, y, N)
    y_plain = cuda.to_device(y0)
    kernel[grid, block, 0, smem](np.float32(1.5), x, y_plain, N)
    cuda.synchronize()
    show("numba tuned", name=t.name, first_call_s=round(build_s, 1), grid=grid, block=block)
    assert t.kernel is not None and t.kernel.report.model == "time_fit"
    assert block[0] % 128 == 0
    assert same_bits(y.copy_to_host(), y_plain.copy_to_host())
    # A CuPy stream handed to the Numba kernel is wrapped (cuda.external_stream), not refused.
    import cupy as cp

    side = cp.cuda.Stream(non_blocking=True)
    y_side = cuda.to_device(y0)
    t(np.float32(1.5), x, y_side, N, stream=side)
    side.synchronize()
    assert same_bits(y_side.copy_to_host(), y_plain.copy_to_host())


def test_cupy_tuned_gpu_bit_identical(store: Store, h200) -> None:  # noqa: ANN001
    import cupy as cp

    raw = cp.RawKernel(SRC, "saxpy")
    t = klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / bx)",
        name="gpu_test.saxpy",
        store=store,
        device=h200,
        **SMALL,
    )(raw)
    x = cp.random.rand(N, dtype=cp.float32)
    y0 = cp.random.rand(N, dtype=cp.float32)
    y, y_plain = y0.copy(), y0.copy()
    t(np.float32(1.5), x, y, np.int32(N))
    grid, block, smem = t.plan_for(np.float32(1.5), x, y, np.int32(N))
    raw(grid, block, (np.float32(1.5), x, y_plain, np.int32(N)), shared_mem=smem)
    cp.cuda.Device().synchronize()
    show("cupy tuned", name=t.name, grid=grid, block=block)
    assert t.kernel is not None
    assert same_bits(cp.asnumpy(y), cp.asnumpy(y_plain))
    # A torch stream handed to the CuPy kernel becomes a cupy.cuda.ExternalStream.
    torch = pytest.importorskip("torch")
    side = torch.cuda.Stream()
    y_side = y0.copy()
    cp.cuda.Device().synchronize()
    t(np.float32(1.5), x, y_side, np.int32(N), stream=side)
    side.synchronize()
    assert same_bits(cp.asnumpy(y_side), cp.asnumpy(y_plain))


def test_cuda_core_tuned_gpu_bit_identical(store: Store, h200) -> None:  # noqa: ANN001
    import cupy as cp

    from klaraptor.frontends.cuda_core import compile_kernel, cuda_core_module

    core = cuda_core_module()
    ck = compile_kernel(SRC, "saxpy", options=())
    t = klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / bx)",
        name="gpu_test.saxpy",
        store=store,
        device=h200,
        **SMALL,
    )(ck)
    x = cp.random.rand(N, dtype=cp.float32)
    y0 = cp.random.rand(N, dtype=cp.float32)
    y, y_plain = y0.copy(), y0.copy()
    t(np.float32(1.5), x, y, np.int32(N))
    grid, block, smem = t.plan_for(np.float32(1.5), x, y, np.int32(N))
    stream = core.Device().default_stream
    core.launch(
        stream,
        core.LaunchConfig(grid=grid, block=block, shmem_size=smem),
        ck.kernel,
        np.float32(1.5),
        x.data.ptr,
        y_plain.data.ptr,
        np.int32(N),
    )
    stream.sync()
    cp.cuda.Device().synchronize()
    version = getattr(core, "__version__", "?")
    show("cuda.core tuned", name=t.name, grid=grid, block=block, version=version)
    assert t.kernel is not None
    assert same_bits(cp.asnumpy(y), cp.asnumpy(y_plain))


def test_torch_tuned_gpu_forward_pass_no_copies(store: Store, h200) -> None:  # noqa: ANN001
    """CuPy and Numba kernels on torch tensors inside a forward pass, on a side stream."""
    import cupy as cp
    import torch

    need_numba()
    raw = cp.RawKernel(SRC, "saxpy")
    t_cupy = klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / bx)",
        name="gpu_test.saxpy",
        store=store,
        device=h200,
        **SMALL,
    )(raw)
    nb = cuda.jit(saxpy_nb)
    t_numba = klaraptor.tune(
        data={"n": "n"}, grid="ceil(n / bx)", store=store, device=h200, **SMALL
    )(nb)

    class Net(torch.nn.Module):
        def __init__(self, tuned, size_type) -> None:  # noqa: ANN001
            super().__init__()
            self.tuned, self.size_type = tuned, size_type

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            self.tuned(np.float32(1.5), x, y, self.size_type(x.numel()))
            return y * 2

    # CuPy's kernel takes `int n` (np.int32); the Numba kernel was bound to a Python int (int64).
    for label, tuned, size_type in (("cupy", t_cupy, np.int32), ("numba", t_numba, int)):
        x = torch.rand(N, device="cuda")
        y0 = torch.rand(N, device="cuda")
        y, y_plain = y0.clone(), y0.clone()
        ptr = y.data_ptr()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            doubled = Net(tuned, size_type)(x, y)
        side.synchronize()
        grid, block, smem = tuned.plan_for(np.float32(1.5), x, y, size_type(N))
        torch.cuda.synchronize()
        if label == "cupy":
            raw(
                grid,
                block,
                (np.float32(1.5), cp.from_dlpack(x), cp.from_dlpack(y_plain), np.int32(N)),
                shared_mem=smem,
            )
        else:
            nb[grid, block, 0, smem](
                np.float32(1.5), cuda.as_cuda_array(x), cuda.as_cuda_array(y_plain), N
            )
        cp.cuda.Device().synchronize()
        show(
            f"torch {label}",
            name=tuned.name,
            grid=grid,
            block=block,
            built=tuned.kernel is not None,
        )
        assert y.data_ptr() == ptr  # written in place: no copy
        assert same_bits(y.cpu().numpy(), y_plain.cpu().numpy())
        assert same_bits(doubled.cpu().numpy(), (y * 2).cpu().numpy())
    with pytest.raises(klaraptor.LaunchError, match="torch tensor on the CPU"):
        t_cupy(np.float32(1.5), torch.rand(N), torch.rand(N), np.int32(N))


def test_torch_custom_op_example_gpu(store: Store, h200) -> None:  # noqa: ANN001
    sys.path.insert(0, str(EXAMPLES))
    try:
        import torch_custom_op
    finally:
        sys.path.remove(str(EXAMPLES))
    op, kernel = torch_custom_op.register(store=store, device=h200, **SMALL)
    err = torch_custom_op.main((op, kernel), batch=1024, width=1024)
    show("torch custom op", err=err, name=kernel.name)
    assert err < 1e-5 and kernel.kernel is not None


ITEMS_SRC = r"""
extern "C" __global__ void scale_items(const float* x, float* y, int n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
    #pragma unroll
    for (int j = 0; j < ITEMS; ++j)
        if (i0 + j < n) y[i0 + j] = 2.0f * x[i0 + j];
}"""
ITEMS_TEMPLATE_SRC = r"""
template <int ITEMS>
__global__ void scale_items(const float* x, float* y, int n) {
    long i0 = ((long)blockIdx.x * blockDim.x + threadIdx.x) * ITEMS;
    #pragma unroll
    for (int j = 0; j < ITEMS; ++j)
        if (i0 + j < n) y[i0 + j] = 2.0f * x[i0 + j];
}"""
PARAMS = dict(
    params={"ITEMS": (1, 2, 4)},
    default_params={"ITEMS": 1},
    grid="ceil(n / (bx * ITEMS))",
    constraints=("bx % 128 == 0", "bx * ITEMS <= 2048"),
    sizes=[1 << 16, 1 << 17],
    model="time_fit",
    collect_options=CollectOptions(**FAST, counters=False),
)


@pytest.mark.parametrize("style", ["define", "template"])
def test_cupy_params_tuned_gpu(store: Store, h200, style: str) -> None:  # noqa: ANN001
    import cupy as cp

    src = ITEMS_SRC if style == "define" else ITEMS_TEMPLATE_SRC
    raw = cp.RawKernel(src, "scale_items")  # compiled per variant by klaraptor, never as it is
    t = klaraptor.tune(
        data={"n": "n"},
        name=f"gpu_test.items_{style}",
        param_style=style,
        store=store,
        device=h200,
        **PARAMS,
    )(raw)
    x = cp.random.rand(N, dtype=cp.float32)
    y = cp.zeros(N, cp.float32)
    t(x, y, np.int32(N))
    cp.cuda.Device().synchronize()
    grid, block, _ = t.plan_for(x, y, np.int32(N))
    pv = t.plan_params(x, y, np.int32(N))
    sel = t.kernel.select(N)
    show(f"cupy params {style}", name=t.name, grid=grid, block=block, params=dict(pv))
    assert (pv, grid, block) == (sel.params, sel.grid, sel.block)
    assert grid[0] == -(-N // (block[0] * pv["ITEMS"]))
    assert same_bits(cp.asnumpy(y), 2.0 * cp.asnumpy(x))
    assert {c.params["ITEMS"] for c in t.kernel.helper.keys} == {1, 2, 4}


@pytest.mark.parametrize("style", ["define", "template"])
def test_cuda_core_params_tuned_gpu(store: Store, h200, style: str) -> None:  # noqa: ANN001
    """cuda.core with program parameters: each variant compiled by cuda.core's Program (the
    values as defines, or a template instance by name expression), the one chosen launched."""
    import cupy as cp

    from klaraptor.frontends.cuda_core import kernel_source

    src = ITEMS_SRC if style == "define" else ITEMS_TEMPLATE_SRC
    t = klaraptor.tune(
        data={"n": "n"},
        name=f"gpu_test.core_items_{style}",
        param_style=style,
        store=store,
        device=h200,
        **PARAMS,
    )(kernel_source(src, "scale_items"))
    x = cp.random.rand(N, dtype=cp.float32)
    y = cp.zeros(N, cp.float32)
    t(x, y, np.int32(N))
    cp.cuda.Device().synchronize()
    grid, block, _ = t.plan_for(x, y, np.int32(N))
    pv = t.plan_params(x, y, np.int32(N))
    sel = t.kernel.select(N)
    show(f"cuda.core params {style}", name=t.name, grid=grid, block=block, params=dict(pv))
    assert (pv, grid, block) == (sel.params, sel.grid, sel.block)
    assert same_bits(cp.asnumpy(y), 2.0 * cp.asnumpy(x))
    # Every variant launches and computes the same: each compiled by cuda.core.
    adapter = t.adapter
    for items in (1, 2, 4):
        variant = next(c.params for c in t.kernel.helper.keys if c.params["ITEMS"] == items)
        assert adapter.variant(variant) is adapter.variant(variant)  # compiled once


def items_factory(ITEMS):  # noqa: ANN001, ANN201, N803 - a Numba kernel factory
    @cuda.jit
    def scale_items_nb(x, y, n):  # noqa: ANN001, ANN202
        i0 = cuda.grid(1) * ITEMS
        for j in range(ITEMS):
            if i0 + j < n:
                y[i0 + j] = 2.0 * x[i0 + j]

    return scale_items_nb


def test_numba_factory_tuned_gpu(store: Store, h200) -> None:  # noqa: ANN001
    need_numba()
    t = klaraptor.tune(data={"n": "n"}, store=store, device=h200, **PARAMS)(items_factory)
    x = cuda.to_device(np.random.default_rng(2).random(N, dtype=np.float32))
    y = cuda.to_device(np.zeros(N, np.float32))
    t(x, y, N)
    cuda.synchronize()
    pv = t.plan_params(x, y, N)
    grid, block, _ = t.plan_for(x, y, N)
    show("numba factory", name=t.name, grid=grid, block=block, params=dict(pv))
    assert pv == t.kernel.select(N).params
    assert {c.params["ITEMS"] for c in t.kernel.helper.keys} == {1, 2, 4}
    np.testing.assert_array_equal(y.copy_to_host(), 2.0 * x.copy_to_host())


# ---------------------------------------------------------------------------------------------
# Online refinement through each front-end (the one launcher, each front-end's CUDA events)

# Sizes above the builds' training sizes (2^16, 2^17) where the model's band may hold several
# blocks; the first one whose band does is refined.
REFINE_SIZES = (3 * (1 << 17) + 7, (1 << 19) + 3, 600_001, (1 << 20) + 5, 1_500_007, (1 << 21) + 1)


def refine_and_check(label, tune_again, t, args_for, launch_plain, result, sync) -> None:  # noqa: ANN001
    """Refine `t` (tuned with refine=4) at a size whose band holds several blocks: every trial
    call's output is bit-identical to a plain launch of the configuration it used, the trials are
    the model's choice then its band's other blocks, `settle()` pins one measured on the GPU
    (source "refined", measured_ms > 0), and a kernel tuned again (a new process's view) starts
    from it. `args_for(n)` makes fresh arguments, `launch_plain(args, grid, block, smem)` launches
    the kernel itself, `result(args)` is the output on the host, `sync()` waits for the GPU."""
    t(*args_for(1 << 20))  # the first call: builds (or finds the build), plans 2^20
    sel_ = t.kernel.selector
    n, expected = None, []
    for size in REFINE_SIZES:
        chosen = sel_.select(size)
        expected = [chosen.block, *(b for b in sel_.refine_blocks(size, 4) if b != chosen.block)]
        if chosen.source == "model" and len(expected) >= 2:
            n = size
            break
    if n is None:
        pytest.skip(f"{label}: the build's band holds one block at every size tried")
    used = []
    for _ in expected:
        args, plain = args_for(n), args_for(n)
        grid, block, smem = t.plan_for(*args)
        used.append(block)
        t(*args)
        launch_plain(plain, grid, block, smem)
        sync()
        assert same_bits(result(args), result(plain)), (label, block)
    assert used == expected
    t.settle()
    sel = sel_.select(n)
    args, plain = args_for(n), args_for(n)
    t(*args)
    grid, block, smem = t.plan_for(*args)
    launch_plain(plain, grid, block, smem)
    sync()
    show(f"{label} refined", name=t.name, n=n, tried=expected, pinned=sel.block,
         measured_ms=sel.measured_ms, predicted_ms=sel.predicted_ms)  # fmt: skip
    assert sel.source == "refined" and sel.block in expected and sel.measured_ms > 0
    assert t.plan_source(*args) == "refined" and block == sel.block
    assert same_bits(result(args), result(plain))
    again = tune_again()
    again(*args_for(n))
    assert again.plan_source(*args_for(n)) == "refined" and again.plan_for(*args)[1] == sel.block


class CallingOn:
    """A tuned kernel whose calls go through `call` (on a given or a current stream); the rest
    (plan_for, settle, kernel, ...) is the tuned kernel's own."""

    def __init__(self, tuned: Any, call: Any) -> None:
        self.tuned, self.call = tuned, call

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tuned, name)

    def __call__(self, *args: Any) -> None:
        self.call(self.tuned, *args)


def test_numba_refine_gpu(store: Store, h200) -> None:  # noqa: ANN001
    """Numba kernel, calls with stream= a Numba stream: the trials are timed by Numba's events
    on that stream."""
    need_numba()
    kernel = cuda.jit(saxpy_nb)

    def tune(refine: int = 0):  # noqa: ANN202
        return klaraptor.tune(
            data={"n": "n"}, grid="ceil(n / bx)", store=store, device=h200, refine=refine, **SMALL
        )(kernel)

    rng = np.random.default_rng(5)
    x = rng.random(3 << 20, dtype=np.float32)
    y0 = rng.random(3 << 20, dtype=np.float32)
    side = cuda.stream()

    def args_for(n: int) -> tuple:
        return (np.float32(1.5), cuda.to_device(x[:n]), cuda.to_device(y0[:n]), n)

    def sync() -> None:
        side.synchronize()
        cuda.synchronize()

    refine_and_check(
        "numba", tune, CallingOn(tune(4), lambda t, *a: t(*a, stream=side)), args_for,
        lambda a, grid, block, smem: kernel[grid, block, 0, smem](*a),
        lambda a: a[2].copy_to_host(), sync,
    )  # fmt: skip


def test_cuda_core_refine_gpu(store: Store, h200) -> None:  # noqa: ANN001
    import cupy as cp

    from klaraptor.frontends.cuda_core import compile_kernel, cuda_core_module

    core = cuda_core_module()
    ck = compile_kernel(SRC, "saxpy", options=())

    def tune(refine: int = 0):  # noqa: ANN202
        return klaraptor.tune(
            data={"n": "n"}, grid="ceil(n / bx)", name="gpu_test.saxpy", store=store,
            device=h200, refine=refine, **SMALL,
        )(ck)  # fmt: skip

    x = cp.random.rand(3 << 20, dtype=cp.float32)
    y0 = cp.random.rand(3 << 20, dtype=cp.float32)

    def args_for(n: int) -> tuple:
        return (np.float32(1.5), x[:n], y0[:n].copy(), np.int32(n))

    stream = core.Device().default_stream

    def plain(a: tuple, grid: tuple, block: tuple, smem: int) -> None:
        cfg = core.LaunchConfig(grid=grid, block=block, shmem_size=smem)
        core.launch(stream, cfg, ck.kernel, a[0], a[1].data.ptr, a[2].data.ptr, a[3])

    def sync() -> None:
        stream.sync()
        cp.cuda.Device().synchronize()

    refine_and_check("cuda.core", tune, tune(4), args_for, plain, lambda a: cp.asnumpy(a[2]), sync)


def test_torch_refine_gpu(store: Store, h200) -> None:  # noqa: ANN001
    """torch tensors through a CuPy RawKernel, on a side stream made current: the trials are
    timed by torch's events on torch's current stream."""
    import cupy as cp
    import torch

    raw = cp.RawKernel(SRC, "saxpy")

    def tune(refine: int = 0):  # noqa: ANN202
        return klaraptor.tune(
            data={"n": "n"}, grid="ceil(n / bx)", name="gpu_test.saxpy", store=store,
            device=h200, refine=refine, **SMALL,
        )(raw)  # fmt: skip

    x = torch.rand(3 << 20, device="cuda")
    y0 = torch.rand(3 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    t = tune(4)

    def args_for(n: int) -> tuple:
        return (np.float32(1.5), x[:n], y0[:n].clone(), np.int32(n))

    def on_side(t: Any, *args: Any) -> None:
        with torch.cuda.stream(side):
            t(*args)

    def plain(a: tuple, grid: tuple, block: tuple, smem: int) -> None:
        torch.cuda.synchronize()
        raw(grid, block, (a[0], cp.from_dlpack(a[1]), cp.from_dlpack(a[2]), a[3]), shared_mem=smem)

    def sync() -> None:
        side.synchronize()
        torch.cuda.synchronize()
        cp.cuda.Device().synchronize()

    refine_and_check(
        "torch", tune, CallingOn(t, on_side), args_for, plain, lambda a: a[2].cpu().numpy(), sync
    )
