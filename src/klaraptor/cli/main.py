"""The `klaraptor` command line: build, select, explain, list, show, export, instrument, prune, rm,
device, demo, bench, import-recorded, import-kt, export-kt, search."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from klaraptor.assemble.api import DEFAULT_MODEL
from klaraptor.assemble.planned import DEFAULT_BUDGET
from klaraptor.cli.bench import add_parser as add_bench
from klaraptor.cli.commands import (
    cmd_build,
    cmd_demo,
    cmd_device,
    cmd_explain,
    cmd_export,
    cmd_list,
    cmd_prune,
    cmd_rm,
    cmd_select,
    cmd_show,
)
from klaraptor.cli.common import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    exit_code,
    print_error,
)
from klaraptor.cli.instrument import add_parser as add_instrument
from klaraptor.cli.kernel_tuner import add_parser as add_kernel_tuner
from klaraptor.cli.recorded import add_parser as add_recorded
from klaraptor.cli.search import add_parser as add_search
from klaraptor.core.errors import KlaraptorError
from klaraptor.core.validate import (
    arg_budget,
    arg_nonempty,
    arg_output_file,
    arg_plot_file,
    arg_positive_float,
    arg_positive_int,
)
from klaraptor.models import AUTO, available_models


class _HelpFormatter(argparse.HelpFormatter):
    """--help shows each option's default (where it has one worth showing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" not in text
            and default not in (None, False, argparse.SUPPRESS)
            and action.option_strings
        ):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def make_parser() -> argparse.ArgumentParser:
    from klaraptor import __version__

    p = _Parser(
        prog="klaraptor",
        description=__doc__,
        epilog="`klaraptor COMMAND --help` describes a command. Exit codes: README 'Exit codes'.",
    )
    p.add_argument("--version", action="version", version=f"klaraptor {__version__}")
    p.add_argument(
        "--store",
        type=arg_nonempty,
        help="SQLite store (default: $KLARAPTOR_HOME/klaraptor.sqlite or the cache dir)",
    )
    # Every subcommand's parser (also those other modules register) shows its defaults.
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    b = sub.add_parser("build", help="collect, fit and store helper programs")
    b.add_argument(
        "target", help=".cu file, module:ATTR, or suite name (polybench.gemm.gemm, rodinia)"
    )
    b.add_argument(
        "--sizes",
        nargs="+",
        help="training sizes: 256,512,1024, or rows=512,cols=1024 rows=1024,cols=2048 "
        "(default: the spec's meta['train_sizes'])",
    )
    b.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        choices=[AUTO, *available_models()],
        help="auto (default: the models tagged as candidates of auto compete in a x2 fold on the "
        "training data; the scaling model wins unless another does clearly better), or one model",
    )
    b.add_argument(
        "--budget",
        type=arg_budget,
        default=DEFAULT_BUDGET,
        help="measurement budget as a multiple of one sweep of every candidate at the largest "
        f"training size (default {DEFAULT_BUDGET:g}); 'none' times every candidate at every size; "
        "time_fit and mwp_cwp always time every candidate at every size",
    )
    b.add_argument(
        "--prior",
        default=None,
        metavar="MODEL",
        help="time the candidates at the largest training size in this model's predicted order "
        "(a model tagged as ranking candidates without measuring; an unknown one is refused "
        "with the list)",
    )
    b.add_argument(
        "--prior-keep",
        type=arg_positive_int,
        default=None,
        metavar="K",
        help="with --prior: time only its K best there (the others are never chosen)",
    )
    b.add_argument(
        "--dry-run", action="store_true", help="show the plan a build would run, without a GPU"
    )
    b.add_argument("--no-counters", action="store_true", help="timing only (no Nsight Compute)")
    where = b.add_mutually_exclusive_group()
    where.add_argument(
        "--dask",
        metavar="SCHEDULER",
        help="collect on the GPUs of a Dask cluster (tcp://HOST:8786); needs klaraptor[dask]",
    )
    where.add_argument(
        "--gpus",
        type=arg_positive_int,
        metavar="N",
        help="collect on N GPUs of this machine, one Dask worker per GPU (dask-cuda)",
    )
    b.add_argument(
        "--dask-timeout",
        type=arg_positive_float,
        default=30.0,
        metavar="S",
        help="seconds to reach the Dask scheduler",
    )
    b.set_defaults(func=cmd_build)

    for name, fn, helptext in (
        ("select", cmd_select, "the block for a size"),
        ("explain", cmd_explain, "every candidate's prediction"),
    ):
        s = sub.add_parser(name, help=helptext)
        _build_choice_options(s)
        s.add_argument("D", nargs="+", help="N=4096 (or just 4096; rows=512 cols=1024)")
        if name == "select":
            s.add_argument("--json", action="store_true", help="one JSON object on stdout")
        else:
            s.add_argument(
                "--limit", type=arg_positive_int, default=None, help="show the best LIMIT only"
            )
        s.set_defaults(func=fn)

    ls = sub.add_parser("list", help="builds in the store, one row per kernel, GPU and model")
    ls.add_argument("--suite", action="store_true", help="list the bundled benchmark kernels")
    ls.add_argument(
        "--all", action="store_true", help="every build, older ones and each model's too"
    )
    ls.set_defaults(func=cmd_list)

    sh = sub.add_parser("show", help="a build's fits and candidates")
    _build_choice_options(sh)
    sh.set_defaults(func=cmd_show)

    ex = sub.add_parser("export", help="the helper program as a C header or a Python module")
    _build_choice_options(ex)
    ex.add_argument("--lang", choices=("c", "python"), default="c", help="the language")
    ex.add_argument(
        "-o", "--output", type=arg_output_file, help="the file to write (default: stdout)"
    )
    ex.set_defaults(func=cmd_export)

    pr = sub.add_parser(
        "prune",
        help="delete superseded builds (select, explain and show use only the newest)",
        description="Delete the builds no command uses any more: per kernel, GPU and model, "
        "all but the newest KEEP. Measurements stay.",
    )
    pr.add_argument("kernels", nargs="*", help="only these kernels (default: every kernel)")
    pr.add_argument(
        "--keep", type=arg_positive_int, default=1, help="builds kept per kernel, GPU and model"
    )
    pr.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted, delete nothing"
    )
    pr.set_defaults(func=cmd_prune)

    rm = sub.add_parser(
        "rm",
        help="delete a kernel's builds (with --measurements, everything stored about it)",
    )
    rm.add_argument("kernels", nargs="+", type=arg_nonempty, help="the kernels' names")
    rm.add_argument("--model", type=arg_nonempty, help="only the builds with this model")
    rm.add_argument("--device", type=arg_nonempty, help="only the builds for this GPU (key)")
    rm.add_argument(
        "--measurements",
        action="store_true",
        help="also its measurements, history and collection facts (the kernel is forgotten)",
    )
    rm.set_defaults(func=cmd_rm)

    add_instrument(sub)

    dv = sub.add_parser("device", help="the GPU's profile (limits and microbenchmarks)")
    dv.add_argument("--measure", action="store_true", help="run the microbenchmarks")
    dv.add_argument("--force", action="store_true", help="measure again even if cached")
    dv.add_argument(
        "--recorded",
        metavar="NAME",
        type=arg_nonempty,
        help="show a committed profile (e.g. h200)",
    )
    dv.add_argument(
        "--full", action="store_true", help="every field, the microbenchmark tables included"
    )
    dv.set_defaults(func=cmd_device)

    dm = sub.add_parser("demo", help="the main job (GPU if present, else recorded H200 data)")
    g = dm.add_mutually_exclusive_group()
    g.add_argument("--gpu", action="store_true", help="run on this machine's GPU")
    g.add_argument("--recorded", action="store_true", help="use the recorded H200 data")
    dm.add_argument(
        "--plot",
        type=arg_plot_file,
        default="klaraptor-demo.png",
        help="where the demo writes its plot of each method's slowdown per kernel (its suffix "
        "names the format: .png, .pdf, .svg, ...)",
    )
    dm.set_defaults(func=cmd_demo)

    add_bench(sub)
    add_kernel_tuner(sub)
    add_recorded(sub)
    add_search(sub)
    return p


def _build_choice_options(s: argparse.ArgumentParser) -> None:
    """The kernel and the options that pick one of its builds (select, explain, show, export)."""
    s.add_argument("kernel", type=arg_nonempty, help="the kernel's name (`klaraptor list`)")
    s.add_argument(
        "--model", type=arg_nonempty, default=None, help="the build's model (default: the newest)"
    )
    s.add_argument("--force", action="store_true", help="use a build made on another GPU")
    s.add_argument(
        "--device",
        type=arg_nonempty,
        help="profile key of the GPU to choose for (default: this one)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure becomes a message on stderr and an exit code (README
    "Exit codes"), never a traceback (KLARAPTOR_DEBUG=1 shows one for internal errors)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KlaraptorError as e:
        print_error(str(e))
        return exit_code(e)
    except KeyboardInterrupt:
        print_error("interrupted (measurements so far are in the store; run again to resume)")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`klaraptor explain ... | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as e:
        if os.environ.get("KLARAPTOR_DEBUG"):
            raise
        print_error(
            f"internal error ({type(e).__name__}: {e}). This is a bug in klaraptor: please report "
            "it with the command; KLARAPTOR_DEBUG=1 shows the traceback"
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
