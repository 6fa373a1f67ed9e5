"""`klaraptor demo`, the main job.

With a GPU: build a few example kernels at small sizes, choose a block at a larger size, then
time every candidate there (exhaustive search) and print the chosen block's measured time beside
the best and the worst.

Without a GPU: the same pipeline (fit → helper program → select → report) runs on the recorded
H200 dataset shipped with the package (real measurements), and the choices are compared with
the recorded exhaustive optimum. The builds stay in the store (when one is named), so `klaraptor
select`, `explain`, `show` and `export` work on them afterwards.

Both write a plot: per kernel, each method's slowdown r = t(chosen) / t(best) (1 is the best
block), the quantity the demo is about. A demo run again replaces its earlier builds in the
store rather than adding to them.
"""

from __future__ import annotations

import math
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

GPU_KERNELS = ("polybench.atax.k1", "polybench.conv2d.conv2d", "polybench.gemm.gemm")
GPU_EVAL = 2048


# What each column and score means, printed under the tables (the README repeats it).
RECORDED_COLUMNS = (
    ("kernel", "the suite kernel (PolyBench's, without the polybench. prefix)"),
    ("N", "the evaluation size: larger than every training size, so each choice extrapolates"),
    ("chosen block, chosen ms", "klaraptor's block and its measured time at N"),
    ("best block, best ms", "the fastest block of the recorded exhaustive search at N"),
    ("r", "slowdown, chosen ms / best ms: 1.000 is the best block"),
    ("default r", "the same for the benchmark's default block (256 threads, or 32×8)"),
    ("model", "the model `auto` chose for the kernel from its training data"),
)
SUMMARY_COLUMNS = (
    ("geomean r, max r", "the slowdown over all (kernel, N) pairs: geometric mean and worst"),
    ("within 5%", "the share of pairs with r <= 1.05"),
    ("mean S%", "the mean of S = (r - 1) × 100 over the pairs: 0 when every choice is the best"),
    ("klaraptor", "the helper program's choice (model only, no extra run)"),
    (
        "klaraptor_topk",
        "online refinement: the best measured of the few blocks the model ranks within its tie "
        "band (tune-once's block among them), as launcher(refine=k) tries them on the first calls",
    ),
    ("tune_once", "the best block at the largest training size, reused at every N"),
    ("nearest_size", "the best block at the training size nearest N (log scale)"),
    ("default", "the benchmark's default block"),
    ("occ", "max occupancy: median time over the blocks of highest theoretical occupancy"),
    ("exhaustive", "the best block at each N (r = 1 by definition)"),
    ("noise band", "the median relative IQR of the best block's timing samples"),
)
# The methods the plot shows, with their colours.
PLOT_METHODS = (
    ("klaraptor", "#d62728", "klaraptor (model only)"),
    ("klaraptor_topk", "#ff9896", "klaraptor, online top-k"),
    ("tune_once", "#1f77b4", "tune-once"),
    ("default", "#2ca02c", "default block"),
)
PLOT_R_MAX = 1.5  # bars beyond it are cut there and labelled with their value


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
    from klaraptor.backends.cupy_backend import gpu_available

    # Tables need ~100 columns; a pipe (make, CI logs) would otherwise be cut at 80.
    console = console or Console(width=None if Console().is_terminal else 110)
    from klaraptor.core.errors import CollectError

    if plot is not None:  # before any work: its directory, that it is no directory, its format
        from klaraptor.core.validate import check_plot_file

        plot = check_plot_file(plot, "the plot")
    if gpu is None:
        gpu = gpu_available()
    elif gpu and not gpu_available():
        raise CollectError(
            "no CUDA GPU here for `demo --gpu`; `klaraptor demo --recorded` runs it on recorded H200 data"
        )
    if gpu:
        return _gpu_demo(console, store_path, plot)
    return _recorded_demo(console, kernels, store_path, plot)


@dataclass(frozen=True)
class Slowdowns:
    """What the plot draws of one kernel: per evaluated size, each method's slowdown
    r = t(chosen) / t(best)."""

    kernel: str
    r: tuple[Mapping[str, float], ...]


def _plot(
    console: Console, results: Sequence[Slowdowns], plot: str | Path | None, gpu: str
) -> None:
    from klaraptor.core.errors import KlaraptorError

    if plot is None:
        return
    path = Path(plot)
    try:
        plot_slowdowns([r for r in results if r.r], path, gpu=gpu)
    except OSError as exc:
        raise KlaraptorError(f"cannot write the plot {path}: {exc}") from None
    console.print(
        f"plot of each method's slowdown r per kernel (1 = the best block): {path}", markup=False
    )


def plot_slowdowns(results: Sequence[Slowdowns], path: Path, *, gpu: str) -> None:
    """Per kernel, each method's slowdown r = t(chosen) / t(best), the geometric mean over the
    kernel's evaluated sizes, as horizontal bars from r = 1 (the best block) on a linear axis;
    a bar beyond PLOT_R_MAX is cut there and labelled with its value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    methods = [m for m in PLOT_METHODS if all(m[0] in at for r in results for at in r.r)]
    rows = [r for r in results if r.r]
    names = [r.kernel.removeprefix("polybench.") for r in rows]
    height = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(9, 1.5 + 0.25 * len(rows) * max(1, len(methods)) ** 0.5))
    y = np.arange(len(rows))
    for j, (m, colour, label) in enumerate(methods):
        rs = np.array([math.exp(np.mean([math.log(at[m]) for at in r.r])) for r in rows])
        pos = y + (j - (len(methods) - 1) / 2) * height
        ax.barh(pos, np.minimum(rs, PLOT_R_MAX) - 1.0, height, left=1.0, color=colour,
                label=label)  # fmt: skip
        for yy, v in zip(pos, rs):
            if v > PLOT_R_MAX:
                ax.text(PLOT_R_MAX, yy, f" {v:.2f}", va="center", fontsize=6)
    ax.set_yticks(y, names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(1.0, PLOT_R_MAX * 1.06)
    ax.axvline(1.05, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("slowdown r = t(chosen) / t(best block)   (1 = the best; dotted: 5 % slower)")
    ax.set_title(f"{gpu}: each method's slowdown per kernel (geometric mean over its sizes)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _gpu_demo(console: Console, store_path: str | None, plot: str | Path | None = None) -> int:
    from klaraptor import suite
    from klaraptor.assemble import build, current_profile
    from klaraptor.collect.collector import CollectOptions, collect
    from klaraptor.store import Store
    from klaraptor.suite.protocol import collect_counters, collect_timing

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
    results: list[Slowdowns] = []
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
        default_t = (
            math.nan if spec.default_block is None else times.get(spec.default_block, math.nan)
        )
        results.append(
            Slowdowns(name, ({"klaraptor": t / times[best], "default": default_t / times[best]},))
        )
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
    _replace_earlier_builds(store, GPU_KERNELS, device.key)
    console.print(table)
    console.print(
        "slowdown = chosen ms / best ms (1.000 is the best block); worst ms shows what a bad "
        "block costs. Every candidate was timed at N to find the best and the worst."
    )
    _print_bottlenecks(console, bottlenecks)
    _plot(console, results, plot, device.name)
    console.print(
        f"The builds are in {store.path}: try `{klaraptor_command()} select {GPU_KERNELS[0]} "
        "N=4096`.",
        markup=False,
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
    from klaraptor.assemble.bottleneck import store_bottleneck
    from klaraptor.cli.plugins import bench_plugin
    from klaraptor.core.errors import ExtrapolationWarning
    from klaraptor.suite.recorded import load_recorded

    # The scoring against the recorded exhaustive search, beside the baselines, is the
    # evaluation's: asked of the plug-in before any work.
    evaluation = bench_plugin("`klaraptor demo` without a GPU (scoring against the recorded data)")
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
                res = evaluation.evaluate_recorded(store, data, name, model="auto")
                results.append(res)
                last = max(res.pairs, key=lambda q: q.N) if res.pairs else None
                chosen = None if last is None else last.choices.get("klaraptor")
                if last is not None and chosen is not None:
                    spec = suite.get(name)
                    text = store_bottleneck(
                        spec,
                        store,
                        data.profile(),
                        [spec.size(n) for n in spec.meta["train_sizes"]],
                        spec.size(last.N),
                        chosen,
                    )
                    bottlenecks.append((name, last.N, chosen, text))
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
        replaced = _replace_earlier_builds(store, names, data.device_key) if store_path else 0
        store.close()
    console.print(table)
    _legend(console, "Columns", RECORDED_COLUMNS)
    console.print(evaluation.format_summary(results))
    _legend(console, "Summary", SUMMARY_COLUMNS)
    _print_bottlenecks(console, bottlenecks)
    slowdowns = [
        Slowdowns(r.kernel, tuple({m: p.r(m) for m in p.times} for p in r.pairs)) for r in results
    ]
    _plot(console, slowdowns, plot, "H200 (recorded)")
    if store_path:
        again = f" (replacing {replaced} from an earlier run)" if replaced else ""
        cmd = klaraptor_command()
        console.print(
            f"The builds are kept in {store_path}{again}. Next, try:\n"
            f"  {cmd} select polybench.gemm.gemm N=4096\n"
            f"  {cmd} explain polybench.gemm.gemm N=4096 --limit 5\n"
            f"  {cmd} import-recorded    (adds the Rodinia-style kernels)",
            markup=False,
            highlight=False,
        )
    return 0


def _replace_earlier_builds(store: Any, names: Sequence[str], device: str) -> int:
    """Delete the builds of `names` that this run superseded (the newest per kernel, GPU and
    model is what every command uses), so that running the demo again adds none."""
    return sum(len(store.delete_builds(n, device=device, keep=1)) for n in names)


def klaraptor_command() -> str:
    """The command that runs klaraptor from here: `klaraptor` when the PATH finds this one,
    else the path of the running script (`.venv/bin/klaraptor` after `make demo`), else
    `python -m klaraptor.cli`."""
    import os
    import shutil
    import sys

    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    found = shutil.which("klaraptor")
    if script is not None and script.name == "klaraptor" and script.is_file():
        if found and Path(found).resolve() == script.resolve():
            return "klaraptor"
        rel = os.path.relpath(script.resolve(), Path.cwd())
        return rel if not rel.startswith("..") else str(script.resolve())
    if found:
        return "klaraptor"
    return f"{sys.executable} -m klaraptor.cli"


def _bottleneck(kern: Any, N: int) -> str:
    from klaraptor.assemble.bottleneck import bottleneck_text

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


def _block(b: Sequence[int] | None) -> str:
    if b is None:  # no choice (the kernel could not be built or measured)
        return "-"
    return "×".join(str(v) for v in (b if b[2] != 1 else b[:2]))
