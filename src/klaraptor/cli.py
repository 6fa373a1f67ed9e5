"""The `klaraptor` command line: build, select, explain, list, show, export, device, demo, bench."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from klaraptor.errors import KlaraptorError

console = Console()
err_console = Console(stderr=True)


# ---------------------------------------------------------------------------------------------
# Resolving what the user names


def resolve_specs(target: str) -> list[Any]:
    """Specs named by TARGET: a .cu file with KLARAPTOR annotations, `module:ATTR`, a suite kernel
    (`polybench.gemm.gemm`, `rodinia.srad.k1`), a suite benchmark (`polybench.gemm`,
    `rodinia.srad`) or a whole suite (`polybench`, `rodinia`)."""
    from klaraptor import suite
    from klaraptor.spec import KernelSpec

    if target.endswith(".cu"):
        from klaraptor.frontend import read_annotated

        return read_annotated(target)
    if ":" in target:
        module, _, attr = target.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise KlaraptorError(f"cannot import {target!r}: {e}") from None
        specs = list(obj) if isinstance(obj, (list, tuple)) else [obj]
        if not all(isinstance(s, KernelSpec) for s in specs):
            raise KlaraptorError(f"{target!r} is not a KernelSpec (or a list of them)")
        return specs
    names = [s.name for s in suite.all_specs()]
    if target in names:
        return [suite.get(target)]
    matched = [suite.get(n) for n in names if n.startswith(target + ".")]
    if matched:
        return matched
    raise KlaraptorError(
        f"unknown kernel {target!r}: give a .cu file, module:ATTR, or a suite name such as "
        f"{names[0]!r} (see `klaraptor list --suite`)"
    )


def parse_D(items: Sequence[str]) -> dict[str, int] | int:
    """`N=4096` pairs (or a bare integer for one data parameter)."""
    if len(items) == 1 and "=" not in items[0]:
        try:
            return int(items[0])
        except ValueError:
            raise KlaraptorError(
                f"bad size {items[0]!r}: expected an integer or NAME=VALUE"
            ) from None
    out: dict[str, int] = {}
    for it in items:
        name, eq, value = it.partition("=")
        if not eq:
            raise KlaraptorError(f"bad size {it!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise KlaraptorError(f"bad size {it!r}: {value!r} is not an integer") from None
    return out


def parse_sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise KlaraptorError(f"bad --sizes {text!r}: expected comma-separated integers") from None


def _store(args: argparse.Namespace) -> Any:
    from klaraptor.store import Store

    return Store(args.store) if args.store else Store()


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_build(args: argparse.Namespace) -> int:
    from klaraptor.builder import build, gpu_available
    from klaraptor.collect import CollectOptions, dry_run
    from klaraptor.configspace import format_dry_run

    specs = resolve_specs(args.target)
    sizes = parse_sizes(args.sizes)
    if args.dry_run:
        for spec in specs:
            sz = [spec.normalize_data(s) for s in (sizes or spec.meta.get("train_sizes") or [])]
            if not sz:
                raise KlaraptorError(f"{spec.name}: give --sizes (the spec has no training sizes)")
            console.print(format_dry_run(dry_run(spec, sz), title=spec.name))
        return 0
    if not gpu_available():
        raise KlaraptorError(
            "no CUDA GPU (or CuPy) here: building needs one to measure the kernel. "
            "`klaraptor demo` runs the pipeline on recorded data instead"
        )
    store = _store(args)
    opts = CollectOptions(counters=not args.no_counters)
    for spec in specs:
        sz = None if sizes is None else [spec.normalize_data(s) for s in sizes]
        kern = build(spec, sz, model=args.model, store=store, collect_options=opts)
        rep = kern.report
        console.print(
            f"[bold green]built[/bold green] {spec.name} with {args.model} in {rep['total_wall_s']:.1f} s"
        )
        for metric, f in rep["fits"]["metrics"].items():
            console.print(
                f"  {metric:22s} {f['method']:8s} held-out median rel. error {f['validation_median']}"
            )
    return 0


def _load(args: argparse.Namespace) -> Any:
    import warnings

    from klaraptor.builder import load

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kern = load(
            args.kernel, store=_store(args), model=args.model, device=args.device, force=args.force
        )
    for w in caught:
        err_console.print(f"[yellow]warning:[/yellow] {w.message}")
    return kern


def cmd_select(args: argparse.Namespace) -> int:
    kern = _load(args)
    sel = kern.select(parse_D(args.D))
    if args.json:
        print(
            json.dumps(
                {
                    "D": sel.D,
                    "grid": sel.grid,
                    "block": sel.block,
                    "predicted_ms": sel.predicted_ms,
                    "topk": [[list(b), t] for b, t in sel.topk],
                    "source": sel.source,
                }
            )
        )
        return 0
    console.print(
        f"{kern.name} D={sel.D}: block {sel.block} grid {sel.grid} "
        f"(predicted {sel.predicted_ms:.4g} ms, {sel.source})"
    )
    for i, (b, t) in enumerate(sel.topk, 1):
        console.print(f"  {i}. {b}  {t:.4g} ms")
    kern.selector.flush()
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from klaraptor.selector import format_explain

    kern = _load(args)
    console.print(format_explain(kern.explain(parse_D(args.D)), limit=args.limit))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    if args.suite:
        from klaraptor import suite

        for name in suite.suites():
            console.print(f"[bold]{name}[/bold]")
            for bench, names in suite.benchmarks(name).items():
                console.print(f"  {bench}: {', '.join(names)}")
        return 0
    store = _store(args)
    builds = store.builds()
    if not builds:
        console.print(f"no builds in {store.path}")
    for b in builds:
        console.print(
            f"{b['kernel']}  model={b['model']}  device={b['device']}  built {b.get('created')}"
        )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    kern = _load(args)
    h = kern.helper
    console.print(f"[bold]{h.kernel}[/bold] model {h.model_name} on {kern.device_key}")
    console.print(
        f"data parameters {h.data_names}; {len(h.candidates)} candidate blocks; tie band {h.band:.3%}"
    )
    rep = kern.report
    if rep:
        console.print(f"trained at {rep.get('sizes')}")
        for metric, f in rep.get("fits", {}).get("metrics", {}).items():
            console.print(
                f"  {metric:22s} {f['method']:8s} held-out rel. error median {f['validation_median']} max {f['validation_max']}"
            )
        for b, why in rep.get("rejected", {}).items():
            console.print(f"  rejected {b}: {why}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    kern = _load(args)
    text = kern.export_c() if args.lang == "c" else kern.export_python()
    if args.output:
        Path(args.output).write_text(text)
        console.print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


def cmd_device(args: argparse.Namespace) -> int:
    from klaraptor.builder import gpu_available
    from klaraptor.device_profile import format_profile, query_device, recorded_profile

    if args.recorded:
        console.print(format_profile(recorded_profile(args.recorded)))
        return 0
    if not gpu_available():
        raise KlaraptorError(
            "no CUDA GPU here; `klaraptor device --recorded h200` shows the committed H200 profile"
        )
    store = _store(args)
    if args.measure:
        from klaraptor.microbench import measure_profile

        profile = measure_profile(0, store, force=args.force)
    else:
        from klaraptor.device_profile import cached_profile

        profile = cached_profile(store, query_device().key) or query_device()
    console.print(format_profile(profile))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from klaraptor import demo

    gpu = True if args.gpu else (False if args.recorded else None)
    return demo.run(gpu=gpu, store_path=args.store)


def cmd_bench(args: argparse.Namespace) -> int:
    from klaraptor.bench import cli as bench_cli

    return bench_cli.run(args)


# ---------------------------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="klaraptor", description=__doc__)
    p.add_argument(
        "--store", help="SQLite store (default: $KLARAPTOR_HOME/klaraptor.sqlite or the cache dir)"
    )
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="collect, fit and store helper programs")
    b.add_argument(
        "target", help=".cu file, module:ATTR, or suite name (polybench.gemm.gemm, rodinia)"
    )
    b.add_argument("--sizes", help="training sizes, e.g. 256,512,1024 (default: the spec's)")
    b.add_argument("--model", default="mwp_cwp")
    b.add_argument("--dry-run", action="store_true", help="list the points a build would measure")
    b.add_argument("--no-counters", action="store_true", help="timing only (no Nsight Compute)")
    b.set_defaults(func=cmd_build)

    for name, fn, helptext in (
        ("select", cmd_select, "the block for a size"),
        ("explain", cmd_explain, "every candidate's prediction"),
    ):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("kernel")
        s.add_argument("D", nargs="+", help="N=4096 (or just 4096)")
        s.add_argument("--model", default=None)
        s.add_argument("--force", action="store_true", help="use a build made on another GPU")
        s.add_argument("--device", help="profile key of the GPU to choose for (default: this one)")
        if name == "select":
            s.add_argument("--json", action="store_true")
        else:
            s.add_argument("--limit", type=int, default=None)
        s.set_defaults(func=fn)

    ls = sub.add_parser("list", help="builds in the store")
    ls.add_argument("--suite", action="store_true", help="list the bundled benchmark kernels")
    ls.set_defaults(func=cmd_list)

    sh = sub.add_parser("show", help="a build's fits and candidates")
    sh.add_argument("kernel")
    sh.add_argument("--model", default=None)
    sh.add_argument("--force", action="store_true")
    sh.add_argument("--device")
    sh.set_defaults(func=cmd_show)

    ex = sub.add_parser("export", help="the helper program as a C header or a Python module")
    ex.add_argument("kernel")
    ex.add_argument("--lang", choices=("c", "python"), default="c")
    ex.add_argument("-o", "--output")
    ex.add_argument("--model", default=None)
    ex.add_argument("--force", action="store_true")
    ex.add_argument("--device")
    ex.set_defaults(func=cmd_export)

    dv = sub.add_parser("device", help="the GPU's profile (limits and microbenchmarks)")
    dv.add_argument("--measure", action="store_true", help="run the microbenchmarks")
    dv.add_argument("--force", action="store_true", help="measure again even if cached")
    dv.add_argument("--recorded", metavar="NAME", help="show a committed profile (e.g. h200)")
    dv.set_defaults(func=cmd_device)

    dm = sub.add_parser("demo", help="the main job (GPU if present, else recorded H200 data)")
    g = dm.add_mutually_exclusive_group()
    g.add_argument("--gpu", action="store_true")
    g.add_argument("--recorded", action="store_true")
    dm.set_defaults(func=cmd_demo)

    from klaraptor.bench.cli import add_parser as add_bench

    add_bench(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KlaraptorError as e:
        err_console.print(f"[bold red]error:[/bold red] {e}")
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted (measurements so far are in the store; run again to resume)")
        return 130


if __name__ == "__main__":
    sys.exit(main())
