"""The `klaraptor` command line: build, select, explain, list, show, export, instrument, device,
demo, bench, import-recorded."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from klaraptor.build.api import DEFAULT_MODEL
from klaraptor.build.planned import DEFAULT_BUDGET
from klaraptor.cli.bench import add_parser as add_bench
from klaraptor.cli.commands import (
    cmd_build,
    cmd_demo,
    cmd_device,
    cmd_explain,
    cmd_export,
    cmd_list,
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
from klaraptor.errors import KlaraptorError


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
    p = _Parser(prog="klaraptor", description=__doc__)
    p.add_argument(
        "--store", help="SQLite store (default: $KLARAPTOR_HOME/klaraptor.sqlite or the cache dir)"
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
        help="auto (default: scaling unless a x2 fold on the training data says otherwise), "
        "scaling, time_fit or mwp_cwp",
    )
    b.add_argument(
        "--budget",
        default=str(DEFAULT_BUDGET),
        help="measurement budget as a multiple of one sweep of every candidate at the largest "
        f"training size (default {DEFAULT_BUDGET:g}); 'none' times every candidate at every size",
    )
    b.add_argument(
        "--prior",
        choices=["snowpack"],
        default=None,
        help="time the candidates at the largest training size in SNOWPACK's predicted order",
    )
    b.add_argument(
        "--prior-keep",
        type=int,
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
        type=int,
        metavar="N",
        help="collect on N GPUs of this machine, one Dask worker per GPU (dask-cuda)",
    )
    b.add_argument(
        "--dask-timeout", type=float, default=30.0, metavar="S", help="seconds to reach it"
    )
    b.set_defaults(func=cmd_build)

    for name, fn, helptext in (
        ("select", cmd_select, "the block for a size"),
        ("explain", cmd_explain, "every candidate's prediction"),
    ):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("kernel")
        s.add_argument("D", nargs="+", help="N=4096 (or just 4096; rows=512 cols=1024)")
        s.add_argument("--model", default=None, help="the build's model (default: the newest)")
        s.add_argument("--force", action="store_true", help="use a build made on another GPU")
        s.add_argument("--device", help="profile key of the GPU to choose for (default: this one)")
        if name == "select":
            s.add_argument("--json", action="store_true", help="one JSON object on stdout")
        else:
            s.add_argument("--limit", type=int, default=None, help="show the best LIMIT only")
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

    add_instrument(sub)

    dv = sub.add_parser("device", help="the GPU's profile (limits and microbenchmarks)")
    dv.add_argument("--measure", action="store_true", help="run the microbenchmarks")
    dv.add_argument("--force", action="store_true", help="measure again even if cached")
    dv.add_argument("--recorded", metavar="NAME", help="show a committed profile (e.g. h200)")
    dv.set_defaults(func=cmd_device)

    dm = sub.add_parser("demo", help="the main job (GPU if present, else recorded H200 data)")
    g = dm.add_mutually_exclusive_group()
    g.add_argument("--gpu", action="store_true", help="run on this machine's GPU")
    g.add_argument("--recorded", action="store_true", help="use the recorded H200 data")
    dm.add_argument(
        "--plot",
        default="klaraptor-demo.png",
        help="where the recorded demo writes its best / worst / chosen plot",
    )
    dm.set_defaults(func=cmd_demo)

    add_bench(sub)
    add_kernel_tuner(sub)
    add_recorded(sub)
    return p


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
