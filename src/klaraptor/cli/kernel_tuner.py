"""`klaraptor import-kt` and `klaraptor export-kt`: Kernel Tuner files in and out of the store.

    klaraptor import-kt scale_n1048576.cache.json scale_n4194304.cache.json mod:SCALE \\
        --profile h200 --build time_fit
    klaraptor export-kt mod:SCALE -o scale-results.json

KERNEL is what `klaraptor build` takes (a .cu file, module:ATTR, a suite name). The GPU is the
profile the measurements belong to: `--profile NAME` (a committed one, e.g. h200), `--device KEY`
(one in the store), else this machine's GPU.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from klaraptor.cli.common import console, open_store
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.validate import arg_output_file


def _pairs(items: list[str] | None, what: str, *, numbers: bool) -> dict[str, Any]:
    """NAME=VALUE words as a dict; values as JSON when `numbers` (ints, floats), else text."""
    out: dict[str, Any] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise KlaraptorError(f"{what} {item!r}: expected NAME=VALUE")
        text = value.strip()
        try:
            out[name.strip()] = json.loads(text) if numbers else int(text)
        except ValueError:
            out[name.strip()] = text
    return out


def _one_spec(target: str) -> Any:
    from klaraptor.frontends.targets import resolve_specs

    specs = resolve_specs(target)
    if len(specs) != 1:
        raise KlaraptorError(
            f"{target!r} names {len(specs)} kernels; name one ({', '.join(s.name for s in specs)})"
        )
    return specs[0]


def _profile(args: argparse.Namespace, store: Any) -> Any:
    from klaraptor.device.profile import DeviceProfile, recorded_profile

    if args.profile:
        return recorded_profile(args.profile)
    if args.device:
        stored = store.device_profile(args.device)
        if stored is None:
            known = ", ".join(sorted(store.device_profiles())) or "none"
            raise KlaraptorError(f"no device profile {args.device!r} in {store.path} ({known})")
        return DeviceProfile.from_dict(stored)
    from klaraptor.assemble.api import current_profile
    from klaraptor.backends.cupy_backend import gpu_problem

    problem = gpu_problem()
    if problem is not None:
        raise KlaraptorError(
            f"no GPU here ({problem}): name the GPU the file was measured on with --profile "
            "(e.g. h200) or --device KEY"
        )
    return current_profile(store)


def cmd_import_kt(args: argparse.Namespace) -> int:
    from klaraptor.frontends.kernel_tuner import import_kernel_tuner

    spec = _one_spec(args.kernel)
    store = open_store(args)
    profile = _profile(args, store)
    mapping = _pairs(args.map, "--map", numbers=False)
    fixed = _pairs(args.fixed, "--fixed", numbers=True)
    sizes = []
    for path in args.file:
        rep = import_kernel_tuner(
            path,
            spec,
            store=store,
            device=profile,
            mapping=mapping,
            fixed=fixed,
            metadata=args.metadata,
            device_name=args.device_name,
            kernel_name=args.kernel_name,
            ignore=args.ignore or (),
        )
        console.print(rep.summary(), markup=False, highlight=False)
        sizes += [s for s in rep.sizes if s not in sizes]
    if args.build:
        from klaraptor.assemble import build

        sizes.sort(key=lambda s: s.values())
        kern = build(spec, sizes, model=args.build, store=store, device=profile, collect_data=False)
        console.print(
            f"[bold green]built[/bold green] {spec.name} for {profile.key} with {args.build} from "
            f"the imported sizes {[dict(s) for s in sizes]}"
        )
        largest = sizes[-1]
        sel = kern.select(largest)
        console.print(
            f"  at {dict(largest)}: block {sel.block}, predicted {sel.predicted_ms:.4g} ms"
        )
    return 0


def cmd_export_kt(args: argparse.Namespace) -> int:
    from klaraptor.frontends.kernel_tuner import export_t4

    spec = _one_spec(args.kernel)
    store = open_store(args, must_exist=True)
    device = args.device
    if device is None:
        devices = store.collect_devices(spec.name)
        if not devices:
            raise KlaraptorError(
                f"{spec.name} has no measurements in {store.path}: nothing to export (collect "
                "them with `klaraptor build`, or import them with `klaraptor import-kt`)"
            )
        if len(devices) != 1:
            raise KlaraptorError(
                f"{spec.name} has measurements on {len(devices)} GPUs in {store.path}; name one "
                f"with --device KEY ({', '.join(repr(d) for d in devices)})"
            )
        device = devices[0]
    results, meta = export_t4(store, spec, device, args.output, metadata_path=args.metadata)
    n = len(store.measurements(spec.name, device, kind="time"))
    console.print(f"wrote {n} configurations of {spec.name} to {results} (metadata {meta})")
    return 0


def add_parser(sub: Any) -> None:
    """The `import-kt` and `export-kt` commands."""
    im = sub.add_parser(
        "import-kt", help="import Kernel Tuner caches / T4 / results files as measurements"
    )
    im.add_argument("file", nargs="+", help="Kernel Tuner cache, T4 results or results list")
    im.add_argument("kernel", help=".cu file, module:ATTR or suite name of the kernel")
    gpu = im.add_mutually_exclusive_group()
    gpu.add_argument("--profile", help="a committed device profile (e.g. h200)")
    gpu.add_argument("--device", help="a device profile key in the store")
    im.add_argument(
        "--map",
        action="append",
        metavar="NAME=SOURCE",
        help="data name or bx/by/bz = problem_size, problem_size[i], a tunable or an int",
    )
    im.add_argument(
        "--fixed", action="append", metavar="NAME=VALUE", help="import only this tunable value"
    )
    im.add_argument("--metadata", help="the T4 metadata file (default: found beside the results)")
    im.add_argument("--device-name", help="the GPU's name, for files that do not record it")
    im.add_argument("--kernel-name", help="the kernel's name in the file, if not the spec's")
    im.add_argument(
        "--ignore", action="append", metavar="FIELD", help="a results-list field that is a metric"
    )
    im.add_argument(
        "--build",
        metavar="MODEL",
        help="then build from the store without measuring (time_fit: Kernel Tuner has no counters)",
    )
    im.set_defaults(func=cmd_import_kt)

    ex = sub.add_parser("export-kt", help="klaraptor's timings as a Kernel Tuner T4 results file")
    ex.add_argument("kernel", help=".cu file, module:ATTR or suite name of the kernel")
    ex.add_argument(
        "-o",
        "--output",
        type=arg_output_file,
        required=True,
        help="the T4 results file to write (its directory must exist)",
    )
    ex.add_argument("--device", help="profile key of the GPU (default: the only one measured)")
    ex.add_argument("--metadata", help="the T4 metadata file (default: beside the results)")
    ex.set_defaults(func=cmd_export_kt)
