"""Host cost of klaraptor's per-call path through the cuda.core front-end, without a GPU.

    python benchmarks/bench_call_overhead.py [OUT] [--calls 20000] [--rounds 31]

The real `klaraptor.tune` object over the real `CoreAdapter` launches through stand-ins where
cuda.core would run: `launch` is `"".format` (a C function that takes any positional arguments
and does nothing with them), `LaunchConfig` a small class, the arrays objects with CuPy's
`x.data.ptr` (named `ndarray` in a `cupy.*` module so the adapter takes the CuPy path, as it does
for real CuPy arrays). What is timed is therefore the Python work klaraptor adds around a launch:

- `plain`: cuda.core's own call, `launch(stream, config, kernel, x.data.ptr, y.data.ptr, n)`,
  the config made once (benchmarks/bench_frontends.py's plain launch);
- `plain_inline_config`: the same with `LaunchConfig(grid=..., block=...)` made per call;
- `tuned`: `t(x, y, n)` after the first call planned its size (on_missing="default": no build).

`tuned - plain` (ns per call, median over rounds) is the overhead this measures; on the H200 a
plain cuda.core launch of an empty kernel costs about 5 µs (bench_frontends.json), so the 1.1×
target leaves about 500 ns. The real launch's cost is measured by bench_frontends.py on a GPU.
Writes OUT/bench_call_overhead.json when OUT is given.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

SRC = r"""extern "C" __global__ void empty(const float* x, float* y, int n) { }"""
N = 1 << 20


class LaunchConfig:
    """Stand-in for cuda.core.LaunchConfig (keeps its fields, as the real one does)."""

    __slots__ = ("grid", "block", "shmem_size")

    def __init__(self, grid: Any = 1, block: Any = 1, shmem_size: int = 0) -> None:
        self.grid, self.block, self.shmem_size = grid, block, shmem_size


class MemoryPointer:
    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class ndarray:  # noqa: N801 - the adapter recognises CuPy arrays by type name and module
    __slots__ = ("data", "shape", "dtype", "size")
    __module__ = "cupy.standin"

    def __init__(self, ptr: int, n: int) -> None:
        self.data, self.shape, self.dtype, self.size = MemoryPointer(ptr), (n,), np.float32, n


def standin_core() -> SimpleNamespace:
    device = SimpleNamespace(default_stream=object())
    return SimpleNamespace(
        launch="".format, LaunchConfig=LaunchConfig, Device=lambda device_id=0: device
    )


def tuned_kernel(store_dir: Path) -> Any:
    import klaraptor
    from klaraptor.frontends import cuda_core
    from klaraptor.store import Store

    core = standin_core()
    cuda_core.cuda_core_module = lambda: core  # the adapter's cuda.core: the stand-ins
    ck = cuda_core.CoreKernel(kernel=object(), source=SRC, name="empty", options=())
    return core, klaraptor.tune(
        data={"n": "n"},
        grid="ceil(n / bx)",
        on_missing="default",
        store=Store(store_dir / "s.sqlite"),
        make_args=lambda D, rng: (),  # never called: nothing is built here
    )(ck)


def timed(loops: dict[str, Any], calls: int, rounds: int) -> dict[str, list[float]]:
    """ns per call of every loop, `rounds` times, alternating the order."""
    for loop in loops.values():
        loop(calls // 10)
    out: dict[str, list[float]] = {k: [] for k in loops}
    names = list(loops)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter_ns()
            loops[name](calls)
            out[name].append((time.perf_counter_ns() - t0) / calls)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=31)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        core, t = tuned_kernel(Path(tmp))
        x, y, n = ndarray(1 << 32, N), ndarray(1 << 33, N), np.int32(N)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "no build: launching with the default block"
            t(x, y, n)
        grid, block, smem = t.plan_for(x, y, n)
        launch, stream, kernel = core.launch, core.Device().default_stream, object()
        config = LaunchConfig(grid=grid, block=block, shmem_size=smem)

        def plain(k: int) -> None:
            for _ in range(k):
                launch(stream, config, kernel, x.data.ptr, y.data.ptr, n)

        def plain_inline_config(k: int) -> None:
            for _ in range(k):
                launch(stream, LaunchConfig(grid=grid, block=block), kernel, x.data.ptr, y.data.ptr, n)  # fmt: skip

        def tuned(k: int) -> None:
            for _ in range(k):
                t(x, y, n)

        loops = {"plain": plain, "plain_inline_config": plain_inline_config, "tuned": tuned}
        ns = timed(loops, a.calls, a.rounds)
    med = {k: float(np.median(v)) for k, v in ns.items()}
    result = {
        "what": "ns per call on the host, cuda.core replaced by stand-ins (module docstring)",
        "median_ns": med,
        "tuned_minus_plain_ns": med["tuned"] - med["plain"],
        "inline_config_minus_plain_ns": med["plain_inline_config"] - med["plain"],
        "calls": a.calls,
        "rounds": a.rounds,
        "python": platform.python_version(),
        "host": platform.node(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    for k, v in med.items():
        print(f"{k:20s} {v:8.1f} ns/call")
    print(f"tuned - plain        {result['tuned_minus_plain_ns']:8.1f} ns/call")
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "bench_call_overhead.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
