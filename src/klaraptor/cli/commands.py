"""The commands of `klaraptor`: build, select, explain, list, show, export, device, demo."""

from __future__ import annotations

import argparse
import json
import math
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


def parse_budget(text: str) -> float | None:
    """--budget: a multiple of tune-once's cost (>= 1), or 'none' for a full collection."""
    if text.strip().lower() in ("none", "full", "inf"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 1.0 or math.isinf(value):
        raise KlaraptorError(
            f"--budget must be a number >= 1 (a multiple of tune-once's measurement cost) or "
            f"'none', got {text!r}"
        )
    return value


def cmd_build(args: argparse.Namespace) -> int:
    from klaraptor.build import build, plan
    from klaraptor.frontends.targets import resolve_specs
    from klaraptor.gpu.backend import gpu_problem
    from klaraptor.gpu.collect import CollectOptions

    specs = resolve_specs(args.target)
    budget = parse_budget(str(getattr(args, "budget", "1.5")))
    if args.dry_run:
        store = open_store(args, must_exist=True) if args.store else None
        device = None
        if store is not None:
            from klaraptor.device_profile import DeviceProfile

            profiles = store.device_profiles()
            if len(profiles) == 1:
                device = DeviceProfile.from_dict(next(iter(profiles.values())))
        for spec in specs:
            view = plan(
                spec, parse_sizes(args.sizes, spec), budget=budget, store=store, device=device
            )
            console.print(view.format(), markup=False)
        return 0
    problem = gpu_problem()
    if problem is not None:
        raise KlaraptorError(
            f"no CUDA GPU here ({problem}); building measures the kernel on one. "
            "`klaraptor build TARGET --dry-run` shows the plan; `klaraptor demo` runs the "
            "pipeline on recorded H200 data"
        )
    store = open_store(args)
    opts = CollectOptions(counters=not args.no_counters)
    for spec in specs:
        kern = build(
            spec,
            parse_sizes(args.sizes, spec),
            model=args.model,
            budget=budget,
            store=store,
            collect_options=opts,
        )
        rep = kern.report
        assert rep is not None
        console.print(
            f"[bold green]built[/bold green] {spec.name} with {rep.model} in "
            f"{rep.total_wall_s:.1f} s"
        )
        plan_done = (rep.collect or {}).get("plan")
        if plan_done:
            console.print(
                f"  plan: {plan_done['counts']}, estimated {plan_done['spent_s']:.1f} s of "
                f"measurement against tune-once's {plan_done['tune_once_s']:.1f} s "
                f"({plan_done['ratio']:.2f}×)"
            )
        for metric, f in rep.fits.get("metrics", {}).items():
            console.print(
                f"  {metric:22s} {f['method']:8s} held-out median rel. error "
                f"{f['validation_median']}"
            )
    return 0


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
