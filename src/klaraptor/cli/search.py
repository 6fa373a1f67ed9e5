"""`klaraptor search KERNEL D=...`: SAAKE's bottleneck-driven walk over a suite kernel's program
parameters and block (models/saake/search), on emulated times: each variant is compiled and its
SASS emulated at D, nothing is run. It prints the path it took and why."""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

from klaraptor.cli.common import console, size_text
from klaraptor.core.validate import arg_nonempty


def add_parser(sub: Any) -> None:
    s = sub.add_parser(
        "search",
        help="SAAKE's walk over program parameters and block, emulated (not measured)",
        description="From the author's configuration, emulate each compiled variant's SASS at "
        "D, name the bottleneck, and move to the neighbour (one program parameter one value "
        "up or down, or one block dimension doubled or halved) that relieves it and emulates "
        "faster; stop where none does (SAAKE, Alg. 3). Nothing is run on a GPU.",
    )
    s.add_argument(
        "kernel", type=arg_nonempty, help="a suite kernel with program parameters (tunables.*)"
    )
    s.add_argument("D", nargs="+", help="N=4096 (or just 4096; rows=512 cols=1024)")
    s.add_argument(
        "--device",
        type=arg_nonempty,
        default="h200",
        help="the recorded GPU profile to emulate (default: h200)",
    )
    s.add_argument("--json", action="store_true", help="the path as one JSON object on stdout")
    s.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    import numpy as np

    from klaraptor import suite
    from klaraptor.device.profile import recorded_profile
    from klaraptor.models.saake.search import SearchError, format_path, path_to_dict, search

    spec = suite.get(args.kernel)
    if not spec.params:  # before the size, which would be parsed for nothing
        raise SearchError(
            f"kernel {spec.name!r} has no program parameters: `klaraptor search` walks program "
            "parameters and block shape (the tunables.* suite kernels have them; for the block "
            "alone use `klaraptor explain`)"
        )
    D = spec.size(size_text(args.D))
    profile = recorded_profile(args.device)
    # The interpreter of the kernel's integer arithmetic overflows float32 casts on values the
    # kernel never uses (e.g. out-of-range lanes): not the user's concern.
    with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        path = search(spec, D, profile)
    if args.json:
        console.print_json(json.dumps({**path_to_dict(path), "device": args.device}))
    else:
        console.print(f"GPU emulated: recorded profile {args.device!r}", markup=False)
        console.print(format_path(path), markup=False, highlight=False)
    return 0
