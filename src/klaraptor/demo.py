"""`klaraptor demo`, the main job.

With a GPU: build a few example kernels at small sizes, choose a block at a larger size, then
time every candidate there (exhaustive search) and print the chosen block's measured time beside
the best and the worst.

Without a GPU: the same pipeline (fit → helper program → select → report) runs on the recorded
H200 dataset shipped with the package (real measurements), and the choices are compared with
the recorded exhaustive optimum.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

GPU_KERNELS = ("polybench.atax.k1", "polybench.conv2d.conv2d", "polybench.gemm.gemm")
GPU_EVAL = 2048


def run(
    *,
    gpu: bool | None = None,
    store_path: str | None = None,
    console: Console | None = None,
    kernels: Sequence[str] | None = None,
) -> int:
    from klaraptor.gpu.backend import gpu_available

    # Tables need ~100 columns; a pipe (make, CI logs) would otherwise be cut at 80.
    console = console or Console(width=None if Console().is_terminal else 110)
    if gpu is None:
        gpu = gpu_available()
    if gpu:
        return _gpu_demo(console, store_path)
    return _recorded_demo(console, kernels)


def _gpu_demo(console: Console, store_path: str | None) -> int:
    from klaraptor import suite
    from klaraptor.bench.truth import collect_counters, collect_timing
    from klaraptor.build import build, current_profile
    from klaraptor.gpu.collect import CollectOptions, collect
    from klaraptor.store import Store

    store = Store(store_path) if store_path else Store()
    device = current_profile(store)
    table = Table(
        title=f"klaraptor on {device.name}: trained at N ≤ 1536, chosen at N = {GPU_EVAL}"
    )
    for col in (
        "kernel",
        "model",
        "chosen block",
        "chosen ms",
        "best block",
        "best ms",
        "worst ms",
        "slowdown",
    ):
        table.add_column(col)
    for name in GPU_KERNELS:
        spec = suite.get(name)
        console.print(
            f"[bold]building {name}[/bold] (the benchmark suite's protocol: timing at "
            f"{list(spec.meta['train_sizes'])}, counters at three of them)"
        )
        collect_timing(spec, store, device=device)
        collect_counters(spec, store, device=device)
        kern = build(
            spec,
            [{"N": n} for n in spec.meta["train_sizes"]],
            store=store,
            device=device,
            collect_data=False,
        )
        sel = kern.select(GPU_EVAL)
        console.print(
            f"  chose block {sel.block}, grid {sel.grid}; now timing every candidate at N={GPU_EVAL}"
        )
        collect(
            spec,
            [{"N": GPU_EVAL}],
            store=store,
            device=device,
            options=CollectOptions(counters=False, check=False),
        )
        times = {
            m.block: float(m.value["median_ms"])
            for m in store.measurements(spec.name, kern.device_key, kind="time", status="ok")
            if m.D.values() == (GPU_EVAL,)
        }
        best = min(times, key=times.__getitem__)
        worst = max(times, key=times.__getitem__)
        t = times.get(sel.block, math.nan)
        table.add_row(
            name,
            kern.helper.model_name,
            str(sel.block),
            f"{t:.4f}",
            str(best),
            f"{times[best]:.4f}",
            f"{times[worst]:.4f}",
            f"{t / times[best]:.3f}",
        )
    console.print(table)
    return 0


def _recorded_demo(console: Console, kernels: Sequence[str] | None = None) -> int:
    from rich.progress import Progress

    from klaraptor.bench.dataset import load_recorded
    from klaraptor.bench.evaluate import evaluate_kernel, format_summary

    data = load_recorded()
    names = list(kernels or sorted(data.kernels))
    console.print(
        f"[bold]No GPU here:[/bold] running fit → helper program → select on the recorded dataset "
        f"({data.provenance.get('gpu', '?')}, measured {data.provenance.get('date', '?')}; "
        f"{len(names)} kernels). Training sizes only go into the fits; the choices are then scored "
        "against the recorded exhaustive search at the larger evaluation sizes."
    )
    table = Table(
        title="klaraptor (auto model) vs the recorded exhaustive optimum, H200",
        box=box.SIMPLE,
        pad_edge=False,
    )
    for col in (
        "kernel",
        "N",
        "chosen block",
        "chosen ms",
        "best block",
        "best ms",
        "r",
        "default r",
        "model",
    ):
        table.add_column(
            col,
            justify="right"
            if col not in ("kernel", "chosen block", "best block", "model")
            else "left",
        )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        store = data.to_store(Path(tmp) / "recorded.sqlite", kernels=names)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("building and selecting", total=len(names))
            for name in names:
                res = evaluate_kernel(store, data, name, model="auto")
                results.append(res)
                model = res.fits.get("model_selection", {}).get("chosen", "?")
                for p in res.pairs:
                    table.add_row(
                        name.removeprefix("polybench."),
                        str(p.N),
                        _block(p.choices["klaraptor"]),
                        f"{p.times['klaraptor']:.4g}",
                        _block(p.best),
                        f"{p.t_best:.4g}",
                        f"{p.r('klaraptor'):.3f}",
                        f"{p.r('default'):.2f}",
                        model,
                    )
                progress.advance(task)
        store.close()
    console.print(table)
    console.print(format_summary(results))
    return 0


def _block(b: Sequence[int]) -> str:
    return "×".join(str(v) for v in (b if b[2] != 1 else b[:2]))
