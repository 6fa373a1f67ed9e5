"""The commands of `klaraptor`: build, select, explain, list, show, export, device, demo.

A launch configuration is always shown grid first, then block (CUDA's `<<<grid, block>>>`), as
the exported Python `best(D) -> (grid, block)` and C `klaraptor_<K>_best(D, grid, block)` give it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from klaraptor.cli.common import (
    console,
    load_kernel,
    open_store,
    parse_sizes,
    print_warning,
    size_text,
    when,
)
from klaraptor.core.errors import CollectError, ExtrapolationWarning, KlaraptorError


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
    from klaraptor.assemble import plan
    from klaraptor.backends.cupy_backend import gpu_problem
    from klaraptor.frontends.targets import resolve_specs
    from klaraptor.models import get_model

    specs = resolve_specs(args.target)
    budget = parse_budget(str(getattr(args, "budget", "1.5")))
    if args.model != "auto":
        get_model(args.model)  # an unknown model is refused before any work
    sizes = {spec.name: parse_sizes(args.sizes, spec) for spec in specs}
    if args.dry_run:
        store = open_store(args, must_exist=True) if args.store else None
        device = None
        if store is not None:
            from klaraptor.device.profile import DeviceProfile

            profiles = store.device_profiles()
            if len(profiles) == 1:
                device = DeviceProfile.from_dict(next(iter(profiles.values())))
        for spec in specs:
            view = plan(
                spec,
                sizes[spec.name],
                budget=budget,
                store=store,
                device=device,
                prior=getattr(args, "prior", None),
                prior_keep=getattr(args, "prior_keep", None),
            )
            console.print(view.format(), markup=False)
        return 0
    client = cluster = None
    if args.dask or args.gpus is not None:
        from klaraptor.collect.dask.cluster import open_client

        client, cluster, where = open_client(args.dask, args.gpus, timeout_s=args.dask_timeout)
        console.print(f"collecting on {where}")
    elif (problem := gpu_problem()) is not None:
        raise CollectError(
            f"no CUDA GPU here ({problem}); building measures the kernel on one. "
            "`klaraptor build TARGET --dry-run` shows the plan; `klaraptor import-recorded` gives "
            "the recorded H200 builds of the suites; `klaraptor demo` runs the pipeline on them; "
            "--dask ADDRESS collects on a Dask cluster's GPUs"
        )
    try:
        _build_all(args, specs, sizes, budget, client)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return 0


def _build_all(
    args: argparse.Namespace,
    specs: list,
    sizes: dict[str, list],
    budget: float | None,
    client: object,
) -> None:
    from klaraptor.assemble import build
    from klaraptor.collect.collector import CollectOptions

    store = open_store(args)
    opts = CollectOptions(counters=not args.no_counters)
    for i, spec in enumerate(specs, 1):
        # Per kernel: one line before (collection shows its own progress) and one after.
        console.print(f"[bold][{i}/{len(specs)}][/bold] {spec.name}: collecting, then fitting")
        t0 = time.perf_counter()
        kern = build(
            spec,
            sizes[spec.name],
            model=args.model,
            budget=budget,
            store=store,
            collect_options=opts,
            client=client,
            prior=getattr(args, "prior", None),
            prior_keep=getattr(args, "prior_keep", None),
        )
        rep = kern.report
        assert rep is not None
        chosen = rep.fits.get("model_selection", {}).get("chosen")
        model = f"{rep.model} (auto chose it)" if chosen else rep.model
        console.print(
            f"[bold green]built[/bold green] {spec.name} with {model} in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        plan_done = (rep.collect or {}).get("plan")
        if plan_done:
            console.print(
                f"  plan: {plan_done['counts']}, estimated {plan_done['spent_s']:.1f} s of "
                f"measurement against tune-once's {plan_done['tune_once_s']:.1f} s "
                f"({plan_done['ratio']:.2f}×)"
            )
        for metric, f in rep.fits.get("metrics", {}).items():
            console.print(f"  {metric:22s} {f['method']:8s} {_fit_error(f)}")


def _pct(x: Any) -> str:
    try:
        return f"{100 * float(x):.3g}%"
    except (TypeError, ValueError):
        return "?"


def _fit_error(f: dict[str, Any]) -> str:
    return (
        f"held-out relative error: median {_pct(f.get('validation_median'))}, "
        f"max {_pct(f.get('validation_max'))}"
    )


def cmd_select(args: argparse.Namespace) -> int:
    kern = load_kernel(args)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExtrapolationWarning)  # said below, in one line
            sel = kern.select(size_text(args.D))
    finally:
        kern.selector.flush()
    if sel.extrapolated:
        print_warning(f"extrapolating: {sel.extrapolated}")
    band = kern.helper.band
    tmin = min((t for _, t in sel.topk), default=sel.predicted_ms)
    tied = [t <= tmin * (1.0 + band) for _, t in sel.topk]
    if args.json:
        print(
            json.dumps(
                {
                    "kernel": kern.name,
                    "D": list(sel.D.values()),
                    "data": dict(sel.D.items()),
                    "grid": list(sel.grid),
                    "block": list(sel.block),
                    "predicted_ms": sel.predicted_ms,
                    "topk": [[list(b), t] for b, t in sel.topk],
                    "tie_band": band,
                    "tied": tied,
                    "source": sel.source,
                    "extrapolated": sel.extrapolated,
                    "device": kern.device_key,
                    "model": kern.helper.model_name,
                }
            ),
            flush=True,
        )
        return 0
    how = (
        f"predicted {sel.predicted_ms:.4g} ms by model {kern.helper.model_name}"
        if sel.source == "model"
        else f"refined on real calls: measured {sel.measured_ms:.4g} ms"
    )
    console.print(f"{kern.name} {sel.D}: grid {sel.grid} block {sel.block} ({how})", markup=False)
    console.print("  #  grid                block           predicted ms", markup=False)
    for i, ((b, t), tie) in enumerate(zip(sel.topk, tied), 1):
        grid = kern.selector.grid_for(sel.D, b)
        mark = "  tied" if tie and any(tied[1:]) else ""
        console.print(
            f"  {i}  {str(grid):18s}  {str(b):14s}  {t:.4g}{mark}", markup=False, highlight=False
        )
    if any(t < sel.predicted_ms for _, t in sel.topk[1:]):
        console.print(
            f"  The tied ones are within the tie band: predictions within {band:.3%} of the "
            "fastest (the timing noise measured at build) count as equal, and among them the "
            "highest predicted occupancy wins, then the fewest threads. So #1 may be predicted "
            "a little slower than a runner-up.",
            markup=False,
        )
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from klaraptor.runtime.selector import format_explain

    if args.limit is not None and args.limit < 1:
        raise KlaraptorError(f"--limit must be a positive number of rows, got {args.limit}")
    kern = load_kernel(args)
    D = kern.selector.size(size_text(args.D))
    far = kern.selector.extrapolation(D)
    if far:
        print_warning(f"extrapolating: {far}")
    console.print(f"{kern.name} {D}: model {kern.helper.model_name}", markup=False)
    console.print(format_explain(kern.explain(D), limit=args.limit), markup=False)
    from klaraptor.assemble.bottleneck import bottleneck_text

    console.print(bottleneck_text(kern, D), markup=False, highlight=False)
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
        console.print(
            f"no builds in {store.path} (`klaraptor build` on a GPU, or `klaraptor "
            "import-recorded` for the recorded H200 builds)"
        )
        return 0
    rows = [("kernel", "model", "built", "device")]
    rows += [(b.kernel, b.model, when(b.created), b.device) for b in builds]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        console.print(
            "  ".join(f"{v:<{w}}" for v, w in zip(r, widths)) + "  " + r[3],
            markup=False,
            highlight=False,
        )
    console.print(f"{len(builds)} builds in {store.path}", markup=False)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    kern = load_kernel(args)
    h = kern.helper
    rep = kern.report
    console.print(f"[bold]{h.kernel}[/bold]", highlight=False)
    console.print(f"  model       {h.model_name}", markup=False)
    driver = f" (driver {rep.device_driver})" if rep is not None and rep.device_driver else ""
    console.print(f"  built for   {kern.device_key}{driver}", markup=False)
    console.print(
        f"  data        {', '.join(h.data_names)}; {len(h.candidates)} candidate blocks; "
        f"tie band {h.band:.3%}",
        markup=False,
    )
    if rep is not None:
        console.print(f"  trained at  {'; '.join(str(s) for s in rep.sizes)}", markup=False)
        console.print(f"  fit time    {rep.fit_wall_s:.1f} s", markup=False)
        sel = rep.fits.get("model_selection")
        if isinstance(sel, dict) and sel.get("scores"):
            scores = ", ".join(
                f"{m} r={float(v.get('r', float('nan'))):.3f}" for m, v in sel["scores"].items()
            )
            console.print(
                f"  auto        chose {sel.get('chosen')} (slowdown of each model's choice on "
                f"held-out training sizes: {scores})",
                markup=False,
            )
        metrics = rep.fits.get("metrics", {})
        if metrics:
            console.print("  fits:", markup=False)
            for metric, f in metrics.items():
                console.print(f"    {metric:22s} {f['method']:9s} {_fit_error(f)}", markup=False)
    for b, why in kern.selector.rejected.items():
        console.print(f"  rejected {b}: {why}", markup=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = Path(args.output) if args.output else None
    if out is not None and not out.parent.is_dir():
        raise KlaraptorError(
            f"cannot write {out}: the directory {out.parent} does not exist; create it first"
        )
    kern = load_kernel(args)
    text = kern.export_c() if args.lang == "c" else kern.export_python()
    if out is not None:
        try:
            out.write_text(text)
        except OSError as exc:
            raise KlaraptorError(f"cannot write {out}: {exc.strerror or exc}") from None
        console.print(f"wrote {out}", markup=False)
    else:
        sys.stdout.write(text)
    return 0


def cmd_device(args: argparse.Namespace) -> int:
    from klaraptor.backends.cupy_backend import gpu_available
    from klaraptor.device.profile import format_profile, query_device, recorded_profile

    if args.recorded:
        console.print(format_profile(recorded_profile(args.recorded)), markup=False)
        return 0
    if not gpu_available():
        raise CollectError(
            "no CUDA GPU here; `klaraptor device --recorded h200` shows the committed H200 profile"
        )
    store = open_store(args)
    if args.measure:
        from klaraptor.collect.microbench import measure_profile

        profile = measure_profile(0, store, force=args.force)
    else:
        profile = store.cached_profile(query_device().key) or query_device()
    console.print(format_profile(profile), markup=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from klaraptor.cli import demo
    from klaraptor.store import default_store_path

    gpu = True if args.gpu else (False if args.recorded else None)
    return demo.run(gpu=gpu, store_path=args.store or str(default_store_path()), plot=args.plot)
