"""The commands of `klaraptor`: build, select, explain, list, show, export, device, demo.

A launch configuration is always shown grid first, then block (CUDA's `<<<grid, block>>>`), as
the exported Python `best(D) -> (grid, block)` and C `klaraptor_<K>_best(D, grid, block)` give it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any

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
from klaraptor.core.validate import check_output_file

if TYPE_CHECKING:
    from klaraptor.assemble.report import ModelSelection


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
    from klaraptor.models import get_model, is_budgeted, priors

    specs = resolve_specs(args.target)
    budget = getattr(args, "budget", 1.5)
    if isinstance(budget, str):  # a Namespace made by hand; the parser gives a number
        budget = parse_budget(budget)
    if args.model != "auto":
        get_model(args.model)  # an unknown model is refused before any work
    prior, prior_keep = getattr(args, "prior", None), getattr(args, "prior_keep", None)
    if prior_keep is not None and prior is None:
        raise KlaraptorError(
            f"--prior-keep K needs --prior MODEL, one of {', '.join(priors())} (it keeps the "
            "prior's K best)"
        )
    if prior is not None and prior not in priors():  # the registry's, before any work
        raise KlaraptorError(
            f"unknown prior {prior!r}: a prior is a model that ranks candidates without "
            f"measuring ({', '.join(priors())})"
        )
    if prior is not None and not is_budgeted(args.model):
        raise KlaraptorError(
            f"--prior orders a budgeted build's sweep; model {args.model!r} times every candidate "
            "at every size (use a budgeted model: --model auto or scaling)"
        )
    sizes = {spec.name: parse_sizes(args.sizes, spec) for spec in specs}
    if args.dry_run:
        store = open_store(args, must_exist=True) if args.store else None
        device = None
        if store is not None:
            from klaraptor.device.profile import DeviceProfile

            profiles = store.device_profiles()
            if len(profiles) == 1:
                device = DeviceProfile.from_dict(next(iter(profiles.values())))
        if not is_budgeted(args.model) and budget is not None:
            console.print(
                f"model {args.model} fits each candidate from its own times, so it times every "
                "candidate at every training size: --budget does not apply",
                markup=False,
            )
        for spec in specs:
            view = plan(
                spec,
                sizes[spec.name],
                budget=budget,
                store=store,
                device=device,
                prior=prior,
                prior_keep=prior_keep,
                model=args.model,
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
    sizes: dict[str, list | None],
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
        model = f"{rep.model} (auto chose it)" if rep.selection is not None else rep.model
        console.print(
            f"[bold green]built[/bold green] {spec.name} with {model} in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        plan_done = rep.collect.plan if rep.collect is not None else None
        if plan_done is not None:
            console.print(
                f"  plan: {plan_done.counts}, estimated {plan_done.spent_s:.1f} s of "
                f"measurement against tune-once's {plan_done.tune_once_s:.1f} s "
                f"({plan_done.ratio:.2f}×)"
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

    kern = load_kernel(args)
    D = kern.selector.size(size_text(args.D))
    far = kern.selector.extrapolation(D)
    if far:
        print_warning(f"extrapolating: {far}")
    from klaraptor.assemble.bottleneck import bottleneck_text

    console.print(f"{kern.name} {D}: model {kern.helper.model_name}", markup=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # said above, in one line
        rows = kern.explain(D)
        bottleneck = bottleneck_text(kern, D)
    console.print(format_explain(rows, limit=args.limit), markup=False)
    console.print(bottleneck, markup=False, highlight=False)
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
    rows = _list_rows(store, builds, every=getattr(args, "all", False))
    table = [("kernel", "model", "built", "device"), *rows]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    for r in table:
        console.print(
            "  ".join(f"{v:<{w}}" for v, w in zip(r, widths)) + "  " + r[3],
            markup=False,
            highlight=False,
        )
    kernels = len({r[0] for r in rows})
    console.print(
        f"{kernels} kernels, {len(builds)} builds in {store.path}, newest per kernel, GPU and "
        "model. 'scaling (auto)': built with model auto, which chose scaling (the build is "
        "stored under both names); select, explain and show use the newest build, or the "
        "one --model names.",
        markup=False,
    )
    superseded = len(builds) - len({(b.kernel, b.device, b.model) for b in builds})
    if superseded and not getattr(args, "all", False):
        console.print(
            f"{superseded} older builds are superseded: no command uses them (`klaraptor list "
            "--all` shows them, `klaraptor prune` deletes them)",
            markup=False,
        )
    return 0


def _list_rows(store: Any, builds: list[Any], *, every: bool) -> list[tuple[str, str, str, str]]:
    """One row per kernel, GPU and model (the newest build, which every command uses), sorted
    by kernel; an `auto` build is the row of the model it chose when both hold the same helper
    program (auto stores its choice under both names). `every`: each build."""
    if every:
        ordered = sorted(builds, key=lambda b: (b.kernel, b.device, b.model, -b.created))
        return [(b.kernel, b.model, when(b.created), b.device) for b in ordered]
    newest: dict[tuple[str, str, str], Any] = {}
    for b in builds:  # newest first
        newest.setdefault((b.kernel, b.device, b.model), b)
    merged: dict[tuple[str, str], str] = {}  # (kernel, device) -> the model auto's build is
    labels: dict[tuple[str, str, str], str] = {}
    for kernel, device, model in newest:
        if model != "auto":
            continue
        auto = store.latest_build(kernel, device, "auto")
        chosen = str((auto.report if auto is not None else {}).get("model") or "")
        labels[(kernel, device, model)] = f"{chosen} (auto)" if chosen else "auto"
        if (kernel, device, chosen) in newest and auto is not None:
            twin = store.latest_build(kernel, device, chosen)
            if twin is not None and twin.helper == auto.helper:
                merged[(kernel, device)] = chosen
    rows = []
    for (kernel, device, model), b in sorted(newest.items()):
        if model == "auto" and (kernel, device) in merged:
            continue  # the same build, listed as its model's row
        label = labels.get((kernel, device, model), model)
        if merged.get((kernel, device)) == model:
            label = f"{model} (auto)"
        rows.append((kernel, label, when(b.created), device))
    return rows


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
        _show_selection(rep.selection)
        _show_fits(rep.fits)
    for b, why in kern.selector.rejected.items():
        console.print(f"  rejected {b}: {why}", markup=False)
    return 0


def _show_selection(sel: ModelSelection | None) -> None:
    """How `auto` chose: each model's ×2-fold slowdown, or why a model was not scored."""
    if sel is None or not sel.scores:
        return
    console.print(
        f"  auto        chose {sel.chosen} ({sel.reason}). Each model was fitted "
        "on the training sizes up to half the largest and chose a block for the largest; r is "
        "that block's measured time over the best's there (1.000 = the best):",
        markup=False,
    )
    for m, v in sel.scores.items():
        if isinstance(v, dict) and "r" in v:
            text = f"r={float(v['r']):.3f} (block {tuple(v.get('block', ()))})"
        else:
            why = v.get("error", "no score") if isinstance(v, dict) else str(v)
            text = f"not scored: {why}"
        console.print(f"    {m:10s} {text}", markup=False)


def _show_fits(fits: dict[str, Any]) -> None:
    """The fits and their held-out errors (fitted without a size, scored at it)."""
    metrics = fits.get("metrics", {})
    if metrics:
        console.print("  fits:", markup=False)
        for metric, f in metrics.items():
            console.print(f"    {metric:22s} {f['method']:9s} {_fit_error(f)}", markup=False)
        return
    scaling = fits.get("scaling") if isinstance(fits, dict) else None
    report = (scaling or {}).get("report") or {}
    fold = report.get("fold") or {}
    if "error_without" not in fold:
        return
    anchor, target = float(fold.get("anchor", math.nan)), float(fold.get("target", math.nan))
    console.print(
        f"  fits:       held out: fitted at the sizes up to {anchor:g}, scored at {target:g} "
        f"({fold.get('compared', '?')} candidates)",
        markup=False,
    )
    used = "uses" if float(report.get("lambda", 0.0) or 0.0) > 0 else "does not use"
    line = f"    relative times   error {_pct(fold['error_without'])} (centred log error)"
    if "error_with" in fold:
        line += f"; with per-block deviations {_pct(fold['error_with'])} (the build {used} them)"
    console.print(line, markup=False)
    if "r_without" in fold:
        console.print(
            f"    {'choice at ' + format(target, 'g'):16s} r={float(fold['r_without']):.3f} (its "
            "measured time over the best's)",
            markup=False,
        )
    growth = (report.get("growth") or {}).get("chosen_by")
    if growth:
        short = re.sub(r"\d+\.\d{4,}(e-?\d+)?", lambda m: f"{float(m.group(0)):.3g}", str(growth))
        console.print(f"    growth curve     {short}", markup=False)


def cmd_prune(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    doomed: list[Any] = []
    for kernel in args.kernels or [None]:
        if kernel is not None and not store.builds(kernel):
            raise KlaraptorError(f"no build of kernel {kernel!r} in {store.path}")
        doomed += store.delete_builds(kernel, keep=args.keep, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    kernels = len({b.kernel for b in doomed})
    console.print(
        f"{verb} {len(doomed)} superseded builds of {kernels} kernels in {store.path} (kept the "
        f"newest {args.keep} per kernel, GPU and model; measurements are kept)",
        markup=False,
    )
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    store = open_store(args, must_exist=True)
    for kernel in args.kernels:
        if store.kernel(kernel) is None and not store.builds(kernel):
            from klaraptor.assemble.loading import not_built

            raise not_built(store, kernel)
    for kernel in args.kernels:
        if args.measurements:
            if args.model or args.device:
                raise KlaraptorError(
                    "--measurements forgets the whole kernel: drop --model/--device"
                )
            rows = store.delete_kernel(kernel)
            console.print(f"deleted {kernel}: {rows} rows (builds, measurements, history)")
            continue
        gone = store.delete_builds(kernel, device=args.device, model=args.model)
        console.print(
            f"deleted {len(gone)} builds of {kernel} (measurements kept: `klaraptor build` "
            "rebuilds from them)",
            markup=False,
        )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    out = check_output_file(args.output, "-o") if args.output is not None else None
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

    full = getattr(args, "full", False)
    if args.recorded is not None:
        console.print(format_profile(recorded_profile(args.recorded), full=full), markup=False)
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
    console.print(format_profile(profile, full=full), markup=False)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from klaraptor.cli import demo
    from klaraptor.store import default_store_path

    gpu = True if args.gpu else (False if args.recorded else None)
    return demo.run(gpu=gpu, store_path=args.store or str(default_store_path()), plot=args.plot)
