"""What every command shares: the consoles, the store, loading a build, parsing sizes."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console

from klaraptor.errors import KlaraptorError

if TYPE_CHECKING:
    from klaraptor.build import Kernel
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store

# Tables need room: a pipe (make, CI logs, less) would otherwise be cut at 80 columns.
console = Console(width=None if Console().is_terminal else 160)
err_console = Console(stderr=True)


def open_store(args: argparse.Namespace, *, must_exist: bool = False) -> Store:
    """The store named by --store (else the default); read-only commands pass must_exist."""
    from klaraptor.store import Store

    return Store(args.store, must_exist=must_exist) if args.store else Store(must_exist=must_exist)


def load_kernel(args: argparse.Namespace) -> Kernel:
    """The build named by the command's arguments, warnings shown on stderr."""
    from klaraptor.build import load

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kern = load(
            args.kernel,
            store=open_store(args, must_exist=True),
            model=args.model,
            device=args.device,
            force=args.force,
        )
    for w in caught:
        err_console.print(f"[yellow]warning:[/yellow] {w.message}")
    return kern


def size_text(items: Sequence[str]) -> str:
    """The words of a size on the command line (`N=4096`, `4096`, `rows=512 cols=1024`) as one
    text for `DataSchema.parse`."""
    return " ".join(items)


def parse_sizes(items: Sequence[str] | None, spec: KernelSpec) -> list[Any] | None:
    """--sizes: `256,512,1024` for one data parameter, or one `rows=512,cols=1024` per size."""
    if not items:
        return None
    if len(items) == 1 and "=" not in items[0]:
        words = [w for w in items[0].split(",") if w.strip()]
    else:
        words = list(items)
    sizes = [spec.size(w.strip()) for w in words]
    seen = set()
    for s in sizes:
        if s in seen:
            raise KlaraptorError(f"--sizes gives {s} twice")
        seen.add(s)
    return sizes
