"""`klaraptor bench`: collect the suite on the GPU and report against exhaustive search."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from klaraptor.cli.common import console, open_store
from klaraptor.core.errors import CollectError, KlaraptorError
from klaraptor.core.validate import arg_nonempty, arg_positive_float, arg_positive_int

if TYPE_CHECKING:  # the collector is imported when a GPU phase runs
    from klaraptor.collect.collector import CollectReport


def _add_out(parser: Any) -> None:
    """The results folder an evaluation writes (`--out`)."""
    parser.add_argument(
        "--out", type=arg_nonempty, default="benchmarks/results/h200", help="the output directory"
    )


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="evaluation against exhaustive search (suite)")
    b.set_defaults(func=run)
    bs = b.add_subparsers(dest="bench_command", required=True)
    c = bs.add_parser("collect", help="GPU: training points and ground truth for suite kernels")
    c.add_argument("--kernels", default="polybench", help="suite prefix or comma-separated names")
    c.add_argument("--phase", default="time,ncu,truth", help="comma-separated: time, ncu, truth")
    c.add_argument(
        "--budget",
        type=arg_positive_float,
        default=60.0,
        help="ground-truth seconds per (kernel, N)",
    )
    c.add_argument("--log", default=None, help="append a JSON line per step here")
    c.set_defaults(bench_func=_collect)
    r = bs.add_parser("report", help="evaluate the methods and write benchmarks/results/<gpu>/")
    _add_out(r)
    r.add_argument("--recorded", action="store_true", help="use the shipped recorded datasets")
    r.add_argument(
        "--jobs", type=arg_positive_int, default=None, help="worker processes (default: CPUs)"
    )
    r.add_argument(
        "--no-compare",
        action="store_true",
        help="skip the comparison models on full training data (scaling_full, time_fit, mwp_cwp)",
    )
    r.add_argument(
        "--saake",
        action="store_true",
        help="add SAAKE (saake_model_only, saake_top4) to the comparison; slow: the emulator is fitted per "
        "kernel (its Table 1 and search: `klaraptor bench saake`)",
    )
    r.set_defaults(bench_func=_report)
    sk = bs.add_parser("saake", help="SAAKE's Table 1, search and bottlenecks (recorded data)")
    _add_out(sk)
    sk.add_argument(
        "--kernels",
        type=arg_nonempty,
        default=None,
        help="comma-separated names or prefixes (default: all 44)",
    )
    sk.add_argument(
        "--jobs",
        type=arg_positive_int,
        default=1,
        help="worker processes for Table 1 and the search, one kernel each at a time (the "
        "results do not depend on it; default 1)",
    )
    sk.add_argument(
        "--sol", default=None, help="sol.json of the device speed-of-light run (docs/saake.md)"
    )
    sk.add_argument(
        "--counters", action="store_true", help="partial referee from recorded counters only"
    )
    sk.add_argument(
        "--referee-check",
        default=None,
        help="check.json of scripts/device_referee_check.py: the referee on kernels whose "
        "bottleneck is known (writes referee_check.json)",
    )
    sk.add_argument(
        "--unseen-plan",
        action="store_true",
        help="write saake_unseen_plan.json: what scripts/device_saake_unseen.py measures for "
        "the kernels SAAKE never saw (the 16 patterns)",
    )
    sk.add_argument(
        "--unseen",
        default=None,
        metavar="DIR",
        help="the output folder of scripts/device_saake_unseen.py: judge SAAKE on the unseen "
        "kernels (writes saake_unseen.json, adds agreement_unseen to bottlenecks.json)",
    )
    sk.add_argument(
        "--params",
        default=None,
        metavar="RAW_JSON",
        help="the recorded tunables extract (scripts/extract_tunables_recorded.py): SAAKE's "
        "search over program parameters against klaraptor's top-k (writes "
        "saake_param_search.json)",
    )
    sk.set_defaults(bench_func=_saake)
    e = bs.add_parser("export", help="write the recorded dataset from a store")
    e.add_argument("--out", type=arg_nonempty, required=True, help="the dataset file to write")
    e.add_argument(
        "--kernels", default="polybench", help="suite prefix or comma-separated kernel names"
    )
    e.add_argument(
        "--logs", nargs="*", default=[], help="bench collect --log files (per-phase wall times)"
    )
    e.add_argument(
        "--provenance", help="JSON file: GPU, dates, commands, commits of the collection"
    )
    e.set_defaults(bench_func=_export)
    add_snowpack_parsers(bs)


def run(args: argparse.Namespace) -> int:
    return int(args.bench_func(args) or 0)


def _specs(text: str) -> list[Any]:
    from klaraptor.frontends.targets import resolve_specs

    out = []
    for part in text.split(","):
        out += resolve_specs(part.strip())
    return out


def _collect(args: argparse.Namespace) -> int:
    from klaraptor.assemble import current_profile
    from klaraptor.backends.cupy_backend import gpu_available
    from klaraptor.suite.protocol import collect_counters, collect_timing
    from klaraptor_bench.truth import collect_truth

    if not gpu_available():
        raise CollectError(
            "bench collect needs a CUDA GPU with CuPy; `klaraptor bench report` evaluates the "
            "recorded H200 data without one"
        )
    phases = [p.strip() for p in args.phase.split(",") if p.strip()]
    bad = sorted(set(phases) - {"time", "ncu", "truth"})
    if bad:
        raise KlaraptorError(f"unknown phase(s) {bad}: use time, ncu, truth")
    if args.log and not Path(args.log).parent.is_dir():
        raise KlaraptorError(
            f"--log {args.log}: the directory {Path(args.log).parent} does not exist"
        )
    store = open_store(args)
    device = current_profile(store)
    specs = _specs(args.kernels)
    # Phase by phase over all kernels, so an interrupted session leaves whole phases behind.
    for phase in phases:
        for spec in specs:
            row: dict[str, Any] = {"kernel": spec.name, "phase": phase, "device": device.key}
            t = time.perf_counter()
            rep: CollectReport | None
            if phase == "time":
                rep = collect_timing(spec, store, device=device)
            elif phase == "ncu":
                rep = collect_counters(spec, store, device=device)
            else:
                decisions, rep, _ = collect_truth(spec, store, device, budget_s=args.budget)
                row["decisions"] = {d.N: d.to_dict() for d in decisions}
            row["wall_s"] = time.perf_counter() - t
            if rep is not None:
                row.update(
                    counts=rep.counts,
                    steps=rep.wall_s,
                    ncu=rep.ncu_status,
                    ncu_reason=rep.ncu_reason,
                    failures=[f"{f.D} {f.block}: {f.reason}" for f in rep.failures][:20],
                )
            console.print(
                f"[bold]{phase} {spec.name}[/bold] {row['wall_s']:.1f} s {row.get('counts')}"
            )
            if args.log:
                with Path(args.log).open("a") as fh:
                    fh.write(json.dumps(row, default=str) + "\n")
    return 0


def _report(args: argparse.Namespace) -> int:
    from klaraptor_bench.report import write_report

    _writable_dir(Path(args.out), "--out")  # before the evaluation, not after it
    return write_report(args)


def _saake(args: argparse.Namespace) -> int:
    from klaraptor_bench.saake_eval import recorded_kernel_names, write

    if args.kernels is not None:  # before any work: a name matching nothing is a mistake
        known = recorded_kernel_names()
        args.kernels = ",".join(_match_kernels(args.kernels, known, "--kernels"))
    _writable_dir(Path(args.out), "--out")
    return write(args)


def _match_kernels(text: str, known: list[str], option: str) -> list[str]:
    """The names in `known` that the comma-separated names or dotted prefixes of `text` give;
    KlaraptorError naming one that gives none (with the closest names)."""
    import difflib

    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise KlaraptorError(f"{option} {text!r} has an empty name")
        hits = [k for k in known if k == part or k.startswith(part + ".")]
        if not hits:
            close = difflib.get_close_matches(part, known, n=3)
            maybe = f"; did you mean {' or '.join(close)}?" if close else ""
            raise KlaraptorError(
                f"{option} {part!r} names no recorded kernel{maybe} (`klaraptor list --suite`)"
            )
        out += [k for k in hits if k not in out]
    return out


def _writable_dir(path: Path, option: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KlaraptorError(f"{option} {path}: cannot create the directory ({exc})") from None


def _read_json(path: str, option: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise KlaraptorError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise KlaraptorError(f"{option} {path}: not valid JSON ({exc})") from None


def _export(args: argparse.Namespace) -> int:
    from klaraptor_bench.dataset import costs_from_logs, export_dataset

    prov = _read_json(args.provenance, "--provenance") if args.provenance else {}
    if not isinstance(prov, dict):
        raise KlaraptorError(f"--provenance {args.provenance}: must be a JSON object")
    if not prov:
        console.print(
            "[yellow]warning:[/yellow] no --provenance given: the dataset will not say where it came from"
        )
    try:
        costs = costs_from_logs(Path(p) for p in args.logs)
    except OSError as exc:
        raise KlaraptorError(f"--logs: cannot read {exc.filename} ({exc.strerror})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise KlaraptorError(f"--logs: not `bench collect --log` lines ({exc!r})") from None
    _writable_dir(Path(args.out).parent, "--out")
    path = export_dataset(
        open_store(args, must_exist=True),
        _specs(args.kernels),
        Path(args.out),
        provenance=prov,
        costs=costs,
    )
    console.print(f"wrote {path}")
    return 0


def _train_snowpack(args: argparse.Namespace) -> int:
    from klaraptor.models.snowpack.learner import save_regressor
    from klaraptor_bench.snowpack_eval import train_snowpack

    store = open_store(args, must_exist=not args.recorded)
    reg, report = train_snowpack(
        None if args.recorded else store,
        recorded=args.recorded,
        device=args.device,
        quick=args.quick,
        patterns=args.patterns,
    )
    if args.recorded:  # kept in the user's store too (from the store, training saved it)
        save_regressor(store, reg)
    console.print(
        f"trained SNOWPACK on {len(report['kernels'])} kernels ({report['rows']} rows): kept "
        f"{reg.learner} ({reg.target}, {reg.view} columns), validated mean S "
        f"{report['kept_candidate']['mean_S_pct']:.2f}% ("
        + ", ".join(f"best {k} {v['mean_S_pct']:.2f}%" for k, v in report["learners"].items())
        + ")"
    )
    for name, why in report["skipped"].items():
        console.print(f"  skipped {name}: {why}", markup=False)
    if args.ship:
        Path(args.ship).write_bytes(reg.to_bytes())
        console.print(f"wrote {args.ship} ({Path(args.ship).stat().st_size} bytes)")
    return 0


def _snowpack(args: argparse.Namespace) -> int:
    from klaraptor_bench.snowpack_eval import write_snowpack

    _writable_dir(Path(args.out), "--out")
    if args.protocol == "paper":
        if args.patterns:
            raise KlaraptorError("--patterns applies to --protocol benchmark only")
        from klaraptor_bench.snowpack_paper_report import write_paper

        write_paper(Path(args.out), console=console, quick=args.quick)
        return 0
    write_snowpack(Path(args.out), console=console, quick=args.quick, patterns=args.patterns)
    return 0


def _add_search_flags(parser: Any, *, quick: str, patterns: str) -> None:
    """SNOWPACK's `--quick` (a small search) and `--patterns` (the training-only corpus too)."""
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--patterns", action="store_true", help=patterns)


def add_snowpack_parsers(bs: Any) -> None:
    t = bs.add_parser(
        "train-snowpack",
        help="train SNOWPACK from every kernel timed in the store (or the recorded suites)",
    )
    t.add_argument("--device", help="profile key of the GPU (default: the store's only one)")
    t.add_argument(
        "--recorded", action="store_true", help="train on the recorded H200 suites instead"
    )
    t.add_argument("--ship", metavar="FILE", help="also write the model to FILE (package data)")
    _add_search_flags(
        t,
        quick="small search (minutes less, worse)",
        patterns="with --recorded: also the training-only corpus (klaraptor.suite.patterns)",
    )
    t.set_defaults(bench_func=_train_snowpack)
    s = bs.add_parser("snowpack", help="SNOWPACK's evaluation (unseen kernels and sizes)")
    _add_out(s)
    s.add_argument(
        "--protocol",
        choices=("benchmark", "paper"),
        default="benchmark",
        help="benchmark: leave one benchmark out, train at the training sizes (snowpack.json); "
        "paper: the paper's 10 random 75:25 splits by kernel and by size, beside OCC and a "
        "Nelder-Mead autotuner (snowpack_paper.json, .md and figures)",
    )
    _add_search_flags(
        s,
        quick="small search (for a smoke run)",
        patterns="train every fold on the training-only corpus too (klaraptor.suite.patterns)",
    )
    s.set_defaults(bench_func=_snowpack)
