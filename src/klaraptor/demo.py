"""`klaraptor demo`, the main job.

With a GPU: build a few example kernels at small sizes, choose a block at a larger size, then
time every candidate there (exhaustive search) and print the chosen block's measured time beside
the best and the worst.

Without a GPU: the same pipeline (fit → helper program → select → report) runs on the recorded
H200 dataset shipped with the package (real measurements), and the choices are compared with
the recorded exhaustive optimum. The builds stay in the store (when one is named), so `klaraptor
select`, `explain`, `show` and `export` work on them afterwards.

Both write a plot: per kernel, the worst and the best block's time and the chosen block's.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

GPU_KERNELS = ("polybench.atax.k1", "polybench.conv2d.conv2d", "polybench.gemm.gemm")
GPU_EVAL = 2048


# What each column and score means, printed under the tables (the README repeats it).
RECORDED_COLUMNS = (
    ("N", "the evaluation size: larger than every training size, so each choice extrapolates"),
    ("chosen block, chosen ms", "klaraptor's block and its measured time at N"),
    ("best block, best ms", "the fastest block of the recorded exhaustive search at N"),
    ("r", "slowdown, chosen ms / best ms: 1.000 is the best block"),
    ("default r", "the same for the benchmark's default block (256 threads, or 32×8)"),
    ("model", "the model `auto` chose for the kernel from its training data"),
)
SUMMARY_COLUMNS = (
    ("geomean r, max r", "the slowdown over all (kernel, N) pairs: geometric mean and worst"),
    (
        "mean Error%",
        "(t - t_best) / (t_worst - t_best) × 100: 0 is the best block, 100 the worst",
    ),
    (
        "within noise",
        "pairs where r - 1 is inside the timing noise (the best block's relative IQR)",
    ),
    ("klaraptor", "the helper program's choice (model only, no extra run)"),
    ("klaraptor_top4", "the best measured of the model's top 4 (online refinement, refine=4)"),
    ("default", "the benchmark's default block"),
    ("occ", "max occupancy: median time over the blocks of highest theoretical occupancy"),
    ("tune_once", "the best block at the largest training size, reused at every N"),
    ("exhaustive", "the best block at each N (r = 1 by definition)"),
)


def _legend(console: Console, title: str, rows: Sequence[tuple[str, str]]) -> None:
    console.print(f"[bold]{title}[/bold]")
    width = max(len(a) for a, _ in rows)
    for a, b in rows:
        console.print(f"  {a:<{width}}  {b}", markup=False, highlight=False)


def run(
    *,
    gpu: bool | None = None,
    store_path: str | None = None,
    console: Console | None = None,
    kernels: Sequence[str] | None = None,
    plot: str | Path | None = None,
) -> int:
    """The demo. `store_path` keeps the builds (else the recorded demo uses a temporary store);
    `plot` is where the best / worst / chosen plot goes (None: no plot)."""
    from klaraptor.gpu.backend import gpu_available

    # Tables need ~100 columns; a pipe (make, CI logs) would otherwise be cut at 80.
    console = console or Console(width=None if Console().is_terminal else 110)
    from klaraptor.errors import CollectError, KlaraptorError

    if plot is not None and not Path(plot).parent.is_dir():
        raise KlaraptorError(
            f"cannot write the plot {plot}: the directory {Path(plot).parent} does not exist"
        )
    if gpu is None:
        gpu = gpu_available()
    elif gpu and not gpu_available():
        raise CollectError(
            "no CUDA GPU here for `demo --gpu`; `klaraptor demo --recorded` runs it on recorded H200 data"
        )
    if gpu:
        return _gpu_demo(console, store_path, plot)
    return _recorded_demo(console, kernels, store_path, plot)


def _plot(console: Console, results: Sequence[Any], plot: str | Path | None, gpu: str) -> None:
    from klaraptor.bench.report import plot_best_worst
    from klaraptor.errors import KlaraptorError

    if plot is None:
        return
    path = Path(plot)
    try:
        plot_best_worst([r for r in results if r.pairs], path, gpu=gpu)
    except OSError as exc:
        raise KlaraptorError(f"cannot write the plot {path}: {exc}") from None
    console.print(f"plot of the worst, best and chosen block per kernel: {path}", markup=False)


def _gpu_demo(console: Console, store_path: str | None, plot: str | Path | None = None) -> int:
    from klaraptor import suite
    from klaraptor.bench.evaluate import KernelResult, PairResult
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
    results = []
    bottlenecks: list[tuple[str, int, Any, str]] = []
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
        pair = PairResult(
            name, GPU_EVAL, best, times[best], worst, times[worst], math.nan, len(times)
        )
        pair.times = {"klaraptor": t, "default": times.get(spec.default_block, math.nan)}
        results.append(KernelResult(name, name, [pair], math.nan, math.nan, math.nan, {}))
        bottlenecks.append((name, GPU_EVAL, sel.block, _bottleneck(kern, GPU_EVAL)))
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
    console.print(
        "slowdown = chosen ms / best ms (1.000 is the best block); worst ms shows what a bad "
        "block costs. Every candidate was timed at N to find the best and the worst."
    )
    _print_bottlenecks(console, bottlenecks)
    _plot(console, results, plot, device.name)
    console.print(
        f"The builds are in {store.path}: try `klaraptor select {GPU_KERNELS[0]} N=4096`."
    )
    return 0


def _recorded_demo(
    console: Console,
    kernels: Sequence[str] | None = None,
    store_path: str | None = None,
    plot: str | Path | None = None,
) -> int:
    from rich.progress import Progress

    from klaraptor import suite
    from klaraptor.bench.dataset import load_recorded
    from klaraptor.bench.evaluate import evaluate_kernel, format_summary
    from klaraptor.errors import ExtrapolationWarning
    from klaraptor.models.saake.explain import store_bottleneck

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
    bottlenecks: list[tuple[str, int, Any, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = store_path or Path(tmp) / "recorded.sqlite"
        store = data.to_store(path, kernels=names)
        with Progress(console=console, transient=True) as progress, warnings.catch_warnings():
            # Every evaluation size lies beyond the training sizes: that is the experiment.
            warnings.simplefilter("ignore", ExtrapolationWarning)
            task = progress.add_task("building and selecting", total=len(names))
            for name in names:
                progress.update(task, description=f"building and selecting: {name}")
                res = evaluate_kernel(store, data, name, model="auto")
                results.append(res)
                last = max(res.pairs, key=lambda q: q.N) if res.pairs else None
                if last is not None and last.choices.get("klaraptor") is not None:
                    p = last
                    spec = suite.get(name)
                    text = store_bottleneck(
                        spec,
                        store,
                        data.profile(),
                        [spec.size(n) for n in spec.meta["train_sizes"]],
                        spec.size(p.N),
                        p.choices["klaraptor"],
                    )
                    bottlenecks.append((name, p.N, p.choices["klaraptor"], text))
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
    _legend(console, "Columns", RECORDED_COLUMNS)
    console.print(format_summary(results))
    _legend(console, "Summary", SUMMARY_COLUMNS)
    _print_bottlenecks(console, bottlenecks)
    _plot(console, results, plot, "H200 (recorded)")
    if store_path:
        console.print(
            f"The builds are kept in {store_path}: try `klaraptor select polybench.gemm.gemm "
            "N=4096`, `klaraptor explain ...`, `klaraptor export ...` (`klaraptor "
            "import-recorded` adds the Rodinia-style kernels).",
            markup=False,
        )
    return 0


def _bottleneck(kern: Any, N: int) -> str:
    from klaraptor.models.saake.explain import bottleneck_text

    return bottleneck_text(kern, N, regions=False).splitlines()[0]


def _print_bottlenecks(console: Console, rows: Sequence[tuple[str, int, Any, str]]) -> None:
    """SAAKE's bottleneck of each chosen block (docs/saake.md): which resource limits it."""
    if not rows:
        return
    console.print(
        "[bold]Why[/bold] (SAAKE: abstract emulation of the SASS, ±10 % on each resource's "
        "latency and gap; `klaraptor explain KERNEL N=...` shows the sensitivities)"
    )
    width = max(len(r[0]) for r in rows)
    for name, N, block, text in rows:
        console.print(
            f"  {name:<{width}}  N={N:<5d} {_block(block)}  {text}", markup=False, highlight=False
        )
    legend = _resource_legend([r[3] for r in rows])
    if legend:
        console.print("  where:", highlight=False)
        for line in legend:
            console.print(f"    {line}", markup=False, highlight=False)


def _resource_legend(texts: Sequence[str]) -> list[str]:
    """One line per resource named in `texts`: what it is (SAAKE's printed names)."""
    import re

    from klaraptor.models.saake.names import NAMES, SMEM_NAMES

    joined = "\n".join(texts)
    return [
        f"{n.name}: {n.meaning}"
        for n in (*NAMES.values(), *SMEM_NAMES.values())
        if re.search(rf"\b{re.escape(n.name)}\b", joined)
    ]


def _block(b: Sequence[int]) -> str:
    return "×".join(str(v) for v in (b if b[2] != 1 else b[:2]))
