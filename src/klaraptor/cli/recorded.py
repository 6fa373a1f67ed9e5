"""`klaraptor import-recorded`: the recorded H200 builds of both suites in a store, on any machine.

The recorded measurements (real H200 timings and counters, shipped in the package) are imported
as collection would have left them, and every kernel is built from its training sizes with the
recorded H200 profile. Afterwards `list`, `select`, `explain`, `show` and `export` work without
a GPU (their choices are the H200's).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from klaraptor.cli.common import console, die_with_parent, open_store
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.validate import arg_positive_int


def add_parser(sub: Any) -> None:
    r = sub.add_parser(
        "import-recorded",
        help="the recorded H200 builds of both suites in the store (no GPU needed)",
        description=__doc__,
    )
    r.add_argument(
        "--kernels",
        nargs="+",
        default=["polybench", "rodinia"],
        help="suite prefixes or kernel names (polybench.gemm, rodinia.srad.k1)",
    )
    r.add_argument("--model", default="auto", help="the model to build with")
    r.add_argument(
        "--jobs",
        type=arg_positive_int,
        default=min(8, os.cpu_count() or 1),
        help="kernels built at once (processes)",
    )
    r.add_argument(
        "--rebuild", action="store_true", help="build again kernels the store already has"
    )
    r.set_defaults(func=cmd_import_recorded)


def _select(patterns: list[str], available: dict[str, str]) -> dict[str, str]:
    """kernel → dataset file for the kernels the patterns name (a name or a dotted prefix)."""
    chosen: dict[str, str] = {}
    for pat in patterns:
        hits = {k: f for k, f in available.items() if k == pat or k.startswith(pat + ".")}
        if not hits:
            import difflib

            close = difflib.get_close_matches(pat, sorted(available), n=3)
            maybe = f"; did you mean {' or '.join(close)}?" if close else ""
            raise KlaraptorError(
                f"--kernels {pat!r} names no recorded kernel{maybe} (the recorded ones: "
                "`klaraptor list --suite`)"
            )
        chosen.update(hits)
    return dict(sorted(chosen.items()))


def cmd_import_recorded(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from klaraptor.models import get_model
    from klaraptor.suite.recorded import build_recorded, recorded_datasets

    if args.jobs < 1:
        raise KlaraptorError(f"--jobs must be at least 1, got {args.jobs}")
    if args.model != "auto":
        get_model(args.model)  # an unknown model is refused before any work
    datasets = recorded_datasets()
    available = {k: f for f, d in datasets.items() for k in d.kernels}
    todo = _select(list(args.kernels), available)
    store = open_store(args)
    # The measurements first (cheap, one process): every build then reads them from the store.
    for file, data in datasets.items():
        names = [k for k, f in todo.items() if f == file]
        if names:
            data.to_store(store.path, kernels=names).close()
    if not args.rebuild:
        key = {f: d.device_key for f, d in datasets.items()}
        done = [k for k, f in todo.items() if store.latest_build(k, key[f], args.model)]
        for k in done:
            del todo[k]
        if done:
            console.print(
                f"{len(done)} kernels already built in {store.path} (--rebuild builds them again)"
            )
    store.close()
    console.print(
        f"building {len(todo)} kernels from the recorded H200 measurements with model "
        f"{args.model} ({min(args.jobs, max(1, len(todo)))} at once) into {store.path}"
    )
    t0 = time.perf_counter()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    pool = futures = None
    if args.jobs > 1 and len(todo) > 1:
        # Workers start at submit: before the progress display's thread exists.
        pool = ProcessPoolExecutor(
            max_workers=min(args.jobs, len(todo)),
            initializer=die_with_parent,
            initargs=(os.getpid(),),
        )
        futures = [
            pool.submit(build_recorded, store.path, file, kernel, args.model)
            for kernel, file in todo.items()
        ]
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("kernels", total=len(todo))

            def report(done: dict[str, Any]) -> None:
                progress.console.print(
                    f"  built {done['kernel']} ({done['model']}) in {done['fit_s']:.1f} s"
                )
                progress.advance(task)

            if futures is None:
                for kernel, file in todo.items():
                    progress.update(task, description=kernel)
                    report(build_recorded(store.path, file, kernel, args.model))
            else:
                for fut in as_completed(futures):
                    report(fut.result())
    except KeyboardInterrupt:
        _stop_pool(pool)
        pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    from klaraptor.cli.demo import klaraptor_command

    cmd = klaraptor_command()
    console.print(
        f"[bold green]done[/bold green] in {time.perf_counter() - t0:.0f} s. Try: "
        f"{cmd} list; {cmd} select polybench.gemm.gemm N=4096",
        highlight=False,
    )
    return 0


def _stop_pool(pool: ProcessPoolExecutor | None) -> None:
    """Ctrl-C: stop the workers now (each build is written in transactions, and a kernel whose
    build did not finish is built again by the next run) and shut the pool down with a second
    Ctrl-C ignored, so that no KeyboardInterrupt lands inside the executor's cleanup (which
    printed a traceback before the message)."""
    if pool is None:
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
    finally:
        signal.signal(signal.SIGINT, previous)
