"""The commands of `klaraptor`: build, select, explain, list, show, export, device, demo."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from klaraptor.cli.common import (
    console,
    load_kernel,
    open_store,
    parse_sizes,
    size_text,
)
from klaraptor.errors import KlaraptorError


def cmd_build(args: argparse.Namespace) -> int:
    from klaraptor.build import plan
    from klaraptor.configspace import format_dry_run
    from klaraptor.frontends.targets import resolve_specs
    from klaraptor.gpu.backend import gpu_problem

    specs = resolve_specs(args.target)
    if args.dry_run:
        for spec in specs:
            console.print(
                format_dry_run(plan(spec, parse_sizes(args.sizes, spec)), title=spec.name),
                markup=False,
            )
        return 0
    client = cluster = None
    if args.dask or args.gpus is not None:
        from klaraptor.distributed.cluster import open_client

        client, cluster, where = open_client(args.dask, args.gpus, timeout_s=args.dask_timeout)
        console.print(f"collecting on {where}")
    elif (problem := gpu_problem()) is not None:
        raise KlaraptorError(
            f"no CUDA GPU here ({problem}); building measures the kernel on one. "
            "`klaraptor build TARGET --dry-run` shows the plan; `klaraptor demo` runs the "
            "pipeline on recorded H200 data; --dask ADDRESS collects on a Dask cluster's GPUs"
        )
    try:
        _build_all(args, specs, client)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return 0


def _build_all(args: argparse.Namespace, specs: list, client: object) -> None:
    from klaraptor.build import build
    from klaraptor.gpu.collect import CollectOptions

    store = open_store(args)
    opts = CollectOptions(counters=not args.no_counters)
    for spec in specs:
        kern = build(
            spec,
            parse_sizes(args.sizes, spec),
            model=args.model,
            store=store,
            collect_options=opts,
            client=client,
        )
        rep = kern.report
        assert rep is not None
        console.print(
            f"[bold green]built[/bold green] {spec.name} with {rep.model} in "
            f"{rep.total_wall_s:.1f} s"
        )
        for metric, f in rep.fits.get("metrics", {}).items():
            console.print(
                f"  {metric:22s} {f['method']:8s} held-out median rel. error "
                f"{f['validation_median']}"
            )


def cmd_select(args: argparse.Namespace) -> int:
    kern = load_kernel(args)
    try:
        sel = kern.select(size_text(args.D))
    finally:
        kern.selector.flush()
    if args.json:
        print(
            json.dumps(
                {
                    "D": list(sel.D.values()),
                    "data": dict(sel.D.items()),
                    "grid": list(sel.grid),
                    "block": list(sel.block),
                    "predicted_ms": sel.predicted_ms,
                    "topk": [[list(b), t] for b, t in sel.topk],
                    "source": sel.source,
                }
            )
        )
        return 0
    console.print(
        f"{kern.name} D=({sel.D}): block {sel.block} grid {sel.grid} "
        f"(predicted {sel.predicted_ms:.4g} ms, {sel.source})"
    )
    for i, (b, t) in enumerate(sel.topk, 1):
        console.print(f"  {i}. {b}  {t:.4g} ms")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from klaraptor.runtime.selector import format_explain

    if args.limit is not None and args.limit < 1:
        raise KlaraptorError(f"--limit must be a positive number of rows, got {args.limit}")
    kern = load_kernel(args)
    console.print(format_explain(kern.explain(size_text(args.D)), limit=args.limit), markup=False)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.suite:
        from klaraptor import suite

        for name in suite.suites():
            console.print(f"[bold]{name}[/bold]")
            for bench, names in suite.benchmarks(name).items():
                console.print(f"  {bench}: {', '.join(names)}")
        return 0
    store = open_store(args, must_exist=True)
    builds = store.builds()
    if not builds:
        console.print(f"no builds in {store.path}")
    for b in builds:
        console.print(f"{b.kernel}  model={b.model}  device={b.device}  built {b.created}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    kern = load_kernel(args)
    h = kern.helper
    console.print(f"[bold]{h.kernel}[/bold] model {h.model_name} on {kern.device_key}")
    console.print(
        f"data parameters {h.data_names}; {len(h.candidates)} candidate blocks; "
        f"tie band {h.band:.3%}"
    )
    rep = kern.report
    if rep is not None:
        console.print(f"trained at {[str(s) for s in rep.sizes]}")
        for metric, f in rep.fits.get("metrics", {}).items():
            console.print(
                f"  {metric:22s} {f['method']:8s} held-out rel. error median "
                f"{f['validation_median']} max {f['validation_max']}"
            )
    for b, why in kern.selector.rejected.items():
        console.print(f"  rejected {b}: {why}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    kern = load_kernel(args)
    text = kern.export_c() if args.lang == "c" else kern.export_python()
    if args.output:
        out = Path(args.output)
        try:
            out.write_text(text)
        except OSError as exc:
            raise KlaraptorError(f"cannot write {out}: {exc.strerror or exc}") from None
        console.print(f"wrote {out}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_device(args: argparse.Namespace) -> int:
    from klaraptor.device_profile import format_profile, query_device, recorded_profile
    from klaraptor.gpu.backend import gpu_available

    if args.recorded:
        console.print(format_profile(recorded_profile(args.recorded)), markup=False)
        return 0
    if not gpu_available():
        raise KlaraptorError(
            "no CUDA GPU here; `klaraptor device --recorded h200` shows the committed H200 profile"
        )
    store = open_store(args)
    if args.measure:
        from klaraptor.gpu.microbench import measure_profile

        profile = measure_profile(0, store, force=args.force)
    else:
        from klaraptor.device_profile import cached_profile

        profile = cached_profile(store, query_device().key) or query_device()
    console.print(format_profile(profile), markup=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from klaraptor import demo

    gpu = True if args.gpu else (False if args.recorded else None)
    return demo.run(gpu=gpu, store_path=args.store)
