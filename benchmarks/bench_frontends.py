"""Per-call cost of a tuned launch through each front-end vs that front-end's own plain launch.

    python benchmarks/bench_frontends.py OUT [--steps cupy numba ...] [--step-timeout S]

An EMPTY kernel (`empty(const float* x, float* y, int n) {}`, and its Numba twin) over n = 2^20,
so the host cost of a launch is all there is to measure. Each front-end is one step, run in its
own process with a time limit (a step that fails or hangs is recorded; the others go on):

| step        | tuned launch                | plain launch (the same grid and block)            |
| ----------- | --------------------------- | ------------------------------------------------- |
| cupy        | `t(x, y, np.int32(n))`      | `raw(grid, block, (x, y, np.int32(n)))`           |
| numba       | `t(x, y, n)`                | `kernel[grid, block](x, y, n)`                    |
| cuda_core   | `t(x, y, np.int32(n))`      | `launch(stream, config, kernel, x.data.ptr, ...)`, config made once (also: made per call) |
| torch_cupy  | `t(x, y, np.int32(n))`, torch tensors | `raw(..., (np.uint64(x.data_ptr()), ...), stream=<torch's current stream>)` (also: through cupy.from_dlpack) |
| torch_numba | `t(x, y, n)`, torch tensors | `kernel[grid, block, <torch's current stream>](x, y, n)` |

Before timing, each tuned kernel gets a small real build (timing only, two sizes, blocks that
are multiples of 256) so the tuned path is the one a built kernel takes; when the build fails
the step times the default-block path and says so. Timing: after warm-up, rounds of `calls`
launches timed with perf_counter_ns (the GPU synchronised between rounds, outside the timed
part), plain and tuned rounds alternating; the figure is the median over rounds of the host time
per launch. Target: tuned / plain <= 1.1. Writes OUT/bench_frontends.json (results and
provenance) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

STEPS = ("cupy", "numba", "cuda_core", "torch_cupy", "torch_numba")
TARGET = 1.1
N = 1 << 20
SRC = r"""extern "C" __global__ void empty(const float* x, float* y, int n) { }"""


def empty_nb(x, y, n):  # noqa: ANN001 - a Numba kernel with an empty body
    pass


# ---------------------------------------------------------------------------------------------
# One step (in its own process)


def timed_rounds(
    loops: dict[str, Callable[[int], None]], sync: Callable[[], None], calls: int, rounds: int
) -> dict[str, list[float]]:
    """Microseconds per launch of every loop, `rounds` times, in alternating order."""
    for loop in loops.values():
        loop(max(50, calls // 10))
    sync()
    out: dict[str, list[float]] = {k: [] for k in loops}
    names = list(loops)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            sync()
            t0 = time.perf_counter_ns()
            loops[name](calls)
            t1 = time.perf_counter_ns()
            out[name].append((t1 - t0) / calls / 1e3)
    sync()
    return out


def summary(us: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(us)
    return {
        "median_us": float(np.median(a)),
        "p10_us": float(np.percentile(a, 10)),
        "p90_us": float(np.percentile(a, 90)),
        "rounds": int(a.size),
    }


def tune_options(store_path: Path, name: str | None) -> dict[str, Any]:
    from klaraptor.collect.collector import CollectOptions
    from klaraptor.device.profile import query_device, recorded_profile
    from klaraptor.store import Store

    live = query_device()
    h200 = recorded_profile("h200")
    # The committed profile saves the microbenchmarks on the H200 (the choice here does not
    # matter: only the launch path is timed); elsewhere this GPU's profile is measured.
    device = h200 if live.name == h200.name else None
    return dict(
        data={"n": "n"},
        grid="ceil(n / bx)",
        name=name,
        store=Store(store_path),
        device=device,
        sizes=[1 << 14, 1 << 15],
        model="time_fit",
        constraints=("bx % 256 == 0",),
        collect_options=CollectOptions(
            counters=False, min_time_ms=2.0, max_repeats=10, timeout_s=20.0, startup_timeout_s=40.0
        ),
        progress=False,
    )


def first_call(make: Callable[..., Any], opts: dict[str, Any], args: tuple[Any, ...]) -> Any:
    """Tune and call once (building); on a failed build, fall back to the default block."""
    import warnings

    t0 = time.perf_counter()
    tuned = make(**opts)
    info: dict[str, Any] = {}
    try:
        tuned(*args)
    except Exception as exc:  # noqa: BLE001 - recorded; the launch path is still timed
        info["build_error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tuned = make(**{**opts, "on_missing": "default"})
            tuned(*args)
    info["first_call_s"] = round(time.perf_counter() - t0, 2)
    grid, block, smem = tuned.plan_for(*args)
    info.update(grid=list(grid), block=list(block), smem=smem, name=tuned.name)
    info["source"] = tuned.plan_source(*args)
    return tuned, info


def step_cupy(store: Path) -> dict[str, Any]:
    import cupy as cp
    import numpy as np

    import klaraptor

    raw = cp.RawKernel(SRC, "empty")
    x, y, n = cp.zeros(N, cp.float32), cp.zeros(N, cp.float32), np.int32(N)
    opts = tune_options(store, "bench.empty")
    t, info = first_call(lambda **o: klaraptor.tune(**o)(raw), opts, (x, y, n))
    grid, block = tuple(info["grid"]), tuple(info["block"])

    def plain(k: int) -> None:
        for _ in range(k):
            raw(grid, block, (x, y, n))

    def tuned(k: int) -> None:
        for _ in range(k):
            t(x, y, n)

    sync = cp.cuda.Device().synchronize
    info["us"] = timed_rounds({"plain": plain, "tuned": tuned}, sync, 2000, 21)
    info["versions"] = {"cupy": cp.__version__}
    return info


def step_numba(store: Path, torch_args: bool = False) -> dict[str, Any]:
    import numpy as np
    from numba import cuda

    import klaraptor

    kernel = cuda.jit(empty_nb)
    if torch_args:
        import torch

        x = torch.zeros(N, device="cuda")
        y = torch.zeros(N, device="cuda")
    else:
        x, y = cuda.device_array(N, np.float32), cuda.device_array(N, np.float32)
    opts = tune_options(store, None)
    t, info = first_call(lambda **o: klaraptor.tune(**o)(kernel), opts, (x, y, N))
    grid, block = tuple(info["grid"]), tuple(info["block"])
    if torch_args:
        streams: dict[int, Any] = {}

        def plain(k: int) -> None:
            for _ in range(k):
                ptr = torch.cuda.current_stream().cuda_stream
                s = streams.get(ptr)
                if s is None:
                    s = streams[ptr] = cuda.external_stream(ptr) if ptr else 0
                kernel[grid, block, s](x, y, N)

        sync = torch.cuda.synchronize
    else:

        def plain(k: int) -> None:
            for _ in range(k):
                kernel[grid, block](x, y, N)

        sync = cuda.synchronize

    def tuned(k: int) -> None:
        for _ in range(k):
            t(x, y, N)

    info["us"] = timed_rounds({"plain": plain, "tuned": tuned}, sync, 500, 21)
    from importlib.metadata import version

    info["versions"] = {"numba-cuda": version("numba-cuda")}
    return info


def step_cuda_core(store: Path) -> dict[str, Any]:
    import cupy as cp
    import numpy as np

    import klaraptor
    from klaraptor.frontends.cuda_core import compile_kernel, cuda_core_module

    core = cuda_core_module()
    ck = compile_kernel(SRC, "empty", options=())
    x, y, n = cp.zeros(N, cp.float32), cp.zeros(N, cp.float32), np.int32(N)
    opts = tune_options(store, "bench.empty")
    t, info = first_call(lambda **o: klaraptor.tune(**o)(ck), opts, (x, y, n))
    grid, block = tuple(info["grid"]), tuple(info["block"])
    stream = core.Device().default_stream
    launch, LaunchConfig, kernel = core.launch, core.LaunchConfig, ck.kernel
    config = LaunchConfig(grid=grid, block=block, shmem_size=0)

    def plain(k: int) -> None:
        for _ in range(k):
            launch(stream, config, kernel, x.data.ptr, y.data.ptr, n)

    def plain_inline_config(k: int) -> None:
        for _ in range(k):
            launch(stream, LaunchConfig(grid=grid, block=block), kernel, x.data.ptr, y.data.ptr, n)

    def tuned(k: int) -> None:
        for _ in range(k):
            t(x, y, n)

    sync = cp.cuda.Device().synchronize
    loops = {"plain": plain, "tuned": tuned, "plain_inline_config": plain_inline_config}
    info["us"] = timed_rounds(loops, sync, 2000, 21)
    info["versions"] = {"cuda.core": getattr(core, "__version__", "?")}
    return info


def step_torch_cupy(store: Path) -> dict[str, Any]:
    import cupy as cp
    import numpy as np
    import torch

    import klaraptor

    raw = cp.RawKernel(SRC, "empty")
    x, y, n = torch.zeros(N, device="cuda"), torch.zeros(N, device="cuda"), np.int32(N)
    opts = tune_options(store, "bench.empty")
    t, info = first_call(lambda **o: klaraptor.tune(**o)(raw), opts, (x, y, n))
    grid, block = tuple(info["grid"]), tuple(info["block"])
    streams: dict[int, Any] = {}

    def torch_stream() -> Any:
        ptr = torch.cuda.current_stream().cuda_stream
        s = streams.get(ptr)
        if s is None:
            s = streams[ptr] = cp.cuda.ExternalStream(ptr) if ptr else cp.cuda.Stream.null
        return s

    def plain(k: int) -> None:
        for _ in range(k):
            args = (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), n)
            raw(grid, block, args, stream=torch_stream())

    def plain_dlpack(k: int) -> None:
        for _ in range(k):
            raw(grid, block, (cp.from_dlpack(x), cp.from_dlpack(y), n), stream=torch_stream())

    def tuned(k: int) -> None:
        for _ in range(k):
            t(x, y, n)

    loops = {"plain": plain, "tuned": tuned, "plain_dlpack": plain_dlpack}
    info["us"] = timed_rounds(loops, torch.cuda.synchronize, 2000, 21)
    info["versions"] = {"torch": torch.__version__, "cupy": cp.__version__}
    return info


def run_step(step: str, out: Path) -> int:
    # Numba warns on grids under 128 blocks; a warning per plain launch would time the warning
    # (the grids here are larger, this is a safety net). Read when numba is first imported.
    os.environ["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    store = out / "store.sqlite"
    try:
        if step == "cupy":
            info = step_cupy(store)
        elif step == "numba":
            info = step_numba(store)
        elif step == "cuda_core":
            info = step_cuda_core(store)
        elif step == "torch_cupy":
            info = step_torch_cupy(store)
        elif step == "torch_numba":
            info = step_numba(store, torch_args=True)
        else:
            raise ValueError(f"unknown step {step!r}")
        us = info.pop("us")
        info["timings"] = {k: summary(v) for k, v in us.items()}
        info["samples_us"] = us
        plain, tuned = info["timings"]["plain"]["median_us"], info["timings"]["tuned"]["median_us"]
        info.update(status="ok", ratio=tuned / plain, target=TARGET, met=tuned / plain <= TARGET)
    except Exception as exc:  # noqa: BLE001 - the step's failure is its result
        info = {
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}"[-3000:],
            "traceback": traceback.format_exc()[-6000:],
        }
    (out / f"{step}.json").write_text(json.dumps(info, indent=1, default=str))
    return 0 if info["status"] == "ok" else 1


# ---------------------------------------------------------------------------------------------
# The driver


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    p.add_argument("--step-timeout", type=float, default=60.0)
    p.add_argument("--step", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.step:
        return run_step(a.step, a.out)
    from klaraptor.core.provenance import stamp

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    results: dict[str, Any] = {}
    for step in a.steps:
        t0 = time.perf_counter()
        cmd = [sys.executable, str(Path(__file__).resolve()), str(a.out), "--step", step]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=a.step_timeout, env=env, cwd=ROOT
            )
            rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
        except subprocess.TimeoutExpired as exc:
            rc, tail = "timeout", str(exc)[-3000:]
        path = a.out / f"{step}.json"
        res = json.loads(path.read_text()) if path.exists() else {"status": "failed"}
        res.update(returncode=rc, wall_s=round(time.perf_counter() - t0, 1))
        if res.get("status") != "ok":
            res["log_tail"] = tail
        results[step] = res
        line = (
            f"{step:12s} plain {res['timings']['plain']['median_us']:8.2f} us  tuned "
            f"{res['timings']['tuned']['median_us']:8.2f} us  ratio {res['ratio']:.3f}  "
            f"block {tuple(res['block'])} ({res['source']})  [{res['wall_s']} s]"
            if res.get("status") == "ok"
            else f"{step:12s} FAILED ({rc}): {res.get('error', tail)[-400:]}"
        )
        print(line, flush=True)
        doc = {  # written after every step: a batch cut short keeps what it measured
            "what": "host time per launch of an empty kernel: tuned launch vs the front-end's "
            "plain launch with the same grid and block (medians over rounds)",
            "n": N,
            "target_ratio": TARGET,
            "provenance": stamp(host=platform.node()),
            "results": results,
        }
        (a.out / "bench_frontends.json").write_text(json.dumps(doc, indent=1, default=str))
    ok = [r for r in results.values() if r.get("status") == "ok"]
    print(f"{len(ok)}/{len(results)} steps ok; {sum(r['met'] for r in ok)} met ratio <= {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
