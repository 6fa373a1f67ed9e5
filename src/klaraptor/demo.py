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
from typing import Any

from rich.console import Console
from rich.table import Table

GPU_KERNELS = ("polybench.atax.k1", "polybench.conv2d.conv2d", "polybench.gemm.gemm")
GPU_TRAIN = (256, 512, 768, 1024)
GPU_EVAL = 2048


def run(*, gpu: bool | None = None, store_path: str | None = None, console: Console | None = None) -> int:
    from klaraptor.build import gpu_available

    console = console or Console()
    if gpu is None:
        gpu = gpu_available()
    if gpu:
        return _gpu_demo(console, store_path)
    return _recorded_demo(console)


def _gpu_demo(console: Console, store_path: str | None) -> int:
    from klaraptor import suite
    from klaraptor.build import build
    from klaraptor.collect import CollectOptions, collect
    from klaraptor.store import Store

    store = Store(store_path) if store_path else Store()
    table = Table(title=f"klaraptor on this GPU: trained at N ≤ {max(GPU_TRAIN)}, chosen at N = {GPU_EVAL}")
    for col in ("kernel", "chosen block", "chosen ms", "best block", "best ms", "worst ms", "slowdown"):
        table.add_column(col)
    for name in GPU_KERNELS:
        spec = suite.get(name)
        console.print(f"[bold]building {name}[/bold]")
        kern = build(spec, [{"N": n} for n in GPU_TRAIN], store=store)
        sel = kern.select(GPU_EVAL)
        console.print(f"  chose block {sel.block}, grid {sel.grid}; now timing every candidate at N={GPU_EVAL}")
        collect(spec, [{"N": GPU_EVAL}], store=store, options=CollectOptions(counters=False, check=False))
        times = {
            m.block: float(m.value["median_ms"])
            for m in store.measurements(spec.name, kern.device_key, kind="time", status="ok")
            if m.D == (GPU_EVAL,)
        }
        best = min(times, key=times.__getitem__)
        worst = max(times, key=times.__getitem__)
        t = times.get(sel.block, math.nan)
        table.add_row(name, str(sel.block), f"{t:.4f}", str(best), f"{times[best]:.4f}", f"{times[worst]:.4f}", f"{t / times[best]:.3f}")
    console.print(table)
    return 0


def _recorded_demo(console: Console) -> int:
    from klaraptor.bench.dataset import load_recorded
    from klaraptor.bench.evaluate import evaluate_kernels, format_summary

    data = load_recorded()
    console.print(
        f"[bold]No GPU here:[/bold] running the pipeline on the recorded dataset "
        f"({data.provenance.get('gpu', '?')}, {data.provenance.get('date', '?')}, "
        f"{len(data.kernels)} kernels)."
    )
    with tempfile.TemporaryDirectory() as tmp:
        store = data.to_store(Path(tmp) / "recorded.sqlite")
        results = evaluate_kernels(store, data, console=console)
        store.close()
    console.print(format_summary(results))
    return 0


def kernels_of(names: Sequence[str]) -> list[Any]:
    from klaraptor import suite

    return [suite.get(n) for n in names]
