"""`klaraptor instrument app.cu [-o out.cu]`: the program's launches of annotated kernels tuned
without editing them.

After `klaraptor build app.cu`, every `K<<<grid, block[, smem[, stream]]>>>(args)` of an
annotated kernel K with a build becomes a call that reads D from the launch's arguments, asks
K's helper program (cached per D) for grid and block, and launches K with them. The helper
headers are written beside the output, which compiles with nvcc as the original did. A launch
that cannot be rewritten safely is left alone with a warning naming its line.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from klaraptor.cli.common import console, open_store, print_warning


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "instrument",
        help="rewrite a CUDA program's launches to use the built helpers",
        description=__doc__,
    )
    p.add_argument("source", help="the annotated .cu file (as given to `klaraptor build`)")
    p.add_argument(
        "-o",
        "--output",
        help="the instrumented program (default: SOURCE's stem + .klaraptor.cu, beside it); "
        "the helper headers are written beside it",
    )
    p.add_argument(
        "-I", dest="include_dirs", action="append", default=None, metavar="DIR",
        help="include directory for the parser (as for the compiler)",
    )  # fmt: skip
    p.add_argument(
        "-D", dest="defines", action="append", default=None, metavar="NAME[=VALUE]",
        help="macro for the parser (as for the compiler)",
    )  # fmt: skip
    p.add_argument(
        "--clang-arg", dest="clang_args", action="append", default=None, metavar="ARG",
        help="one more argument for libclang's parse (repeatable)",
    )  # fmt: skip
    p.add_argument("--model", default=None, help="the builds' model (default: the newest)")
    p.add_argument("--force", action="store_true", help="use builds made on another GPU")
    p.add_argument("--device", help="profile key of the GPU to choose for (default: this one)")
    p.add_argument(
        "--dry-run", action="store_true", help="report what would be rewritten; write nothing"
    )
    p.set_defaults(func=cmd_instrument)


def cmd_instrument(args: argparse.Namespace) -> int:
    from klaraptor.assemble import load
    from klaraptor.core.errors import InstrumentError
    from klaraptor.helper.program import HelperProgram
    from klaraptor.instrument import check_source, default_output, instrument

    source = Path(args.source)
    check_source(source)
    output = Path(args.output) if args.output else default_output(source)
    if not args.dry_run and not output.parent.is_dir():
        raise InstrumentError(
            f"cannot write {output}: the directory {output.parent} does not exist; create it first"
        )
    store = open_store(args, must_exist=True)
    loaded: dict[str, HelperProgram] = {}

    def lookup(name: str) -> HelperProgram:
        if name not in loaded:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                kern = load(
                    name, store=store, model=args.model, device=args.device, force=args.force
                )
            for w in caught:
                print_warning(str(w.message))
            loaded[name] = kern.helper
        return loaded[name]

    result = instrument(
        source,
        output,
        helpers=lookup,
        include_dirs=args.include_dirs or (),
        defines=args.defines or (),
        clang_args=args.clang_args or (),
    )
    for notice in result.notices:
        print_warning(str(notice))
    total = len(result.launches)
    kernels = sorted({o.kernel for o in result.launches if o.rewritten})
    summary = (
        f"{source}: {result.rewritten} of {total} launch(es) of annotated kernels rewritten"
        + (f" ({', '.join(kernels)})" if kernels else "")
    )
    if args.dry_run:
        console.print(summary + "; nothing written (--dry-run)", markup=False)
        return 0
    written = result.write()
    console.print(summary, markup=False)
    console.print(f"wrote {', '.join(str(p) for p in written)}", markup=False)
    return 0
