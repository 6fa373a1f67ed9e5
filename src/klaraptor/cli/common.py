"""What every command shares: the consoles, the exit codes, the store, loading a build, sizes."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from klaraptor.core.errors import (
    BuildError,
    CollectError,
    CompileError,
    FitError,
    KlaraptorError,
    LaunchError,
    ProgramError,
    StoreError,
)

if TYPE_CHECKING:
    from klaraptor.assemble import Kernel
    from klaraptor.spec import KernelSpec
    from klaraptor.store import Store


def die_with_parent(parent_pid: int) -> None:
    """A pool worker's initializer: the worker is killed when the process that started it dies
    (Linux PR_SET_PDEATHSIG), so a SIGKILLed command leaves no workers behind. Ctrl-C reaches
    the whole process group: the worker ignores it and the parent, which handles it, cancels
    the work (else every worker prints its own KeyboardInterrupt traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    # The parent may have died before the guard was set.
    if os.getppid() != parent_pid:
        os._exit(1)


# A pipe (make, CI logs, less, a file) gets lines as long as they are: wrapped at 80 columns,
# explain's table would be unreadable.
_PIPED = not Console().is_terminal
console = Console(soft_wrap=_PIPED, width=200 if _PIPED else None)
err_console = Console(stderr=True, soft_wrap=not Console(stderr=True).is_terminal)

# The exit codes of `klaraptor` (README "Exit codes"): (code, meaning, the errors that give it).
# A subclass is looked up before its base, so the order of the errors below matters not.
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_STORE = 3
EXIT_BUILD = 4
EXIT_GPU = 5
EXIT_INTERRUPTED = 130
EXIT_CODES: tuple[tuple[int, str, tuple[type[BaseException], ...]], ...] = (
    (EXIT_OK, "success", ()),
    (
        EXIT_INTERNAL,
        "internal error: a bug in klaraptor (KLARAPTOR_DEBUG=1 shows the traceback)",
        (),
    ),
    (
        EXIT_USAGE,
        "bad command line or bad input: arguments, sizes, specs, annotated files, targets",
        (KlaraptorError,),
    ),
    (
        EXIT_STORE,
        "the store: missing, empty, corrupt, foreign, newer, locked, malformed",
        (StoreError,),
    ),
    (
        EXIT_BUILD,
        "unknown kernel, no build (for this GPU or model), or the build failed",
        (BuildError, FitError, ProgramError),
    ),
    (
        EXIT_GPU,
        "needs a CUDA GPU, or a GPU step failed (collection, compilation, launch)",
        (CollectError, CompileError, LaunchError),
    ),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); measurements so far are kept", ()),
)


def exit_code(exc: BaseException | type[BaseException]) -> int:
    """The exit code of an error (or error class): that of its most specific class in
    EXIT_CODES."""
    for cls in (exc if isinstance(exc, type) else type(exc)).__mro__:
        for code, _, classes in EXIT_CODES:
            if cls in classes:
                return code
    return EXIT_INTERNAL


def print_error(message: str) -> None:
    err_console.print(f"[bold red]error:[/bold red] {escape(message)}")


def print_warning(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(message)}")


def open_store(args: argparse.Namespace, *, must_exist: bool = False) -> Store:
    """The store named by --store (else the default); read-only commands pass must_exist, so
    that they never create a store."""
    from klaraptor.store import Store

    return Store(args.store, must_exist=must_exist) if args.store else Store(must_exist=must_exist)


def load_kernel(args: argparse.Namespace) -> Kernel:
    """The build named by the command's arguments, warnings shown on stderr."""
    from klaraptor.assemble import load
    from klaraptor.models import get_model

    # A model that needs no measurements builds from the spec alone: the store may be new.
    unmeasured = args.model not in (None, "auto") and not get_model(args.model).needs_measurements
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kern = load(
            args.kernel,
            store=open_store(args, must_exist=not unmeasured),
            model=args.model,
            device=args.device,
            force=args.force,
        )
    for w in caught:
        print_warning(str(w.message))
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
    if not words:
        raise KlaraptorError("--sizes is empty; give sizes such as 256,512,1024")
    sizes = [spec.size(w.strip()) for w in words]
    seen = set()
    for s in sizes:
        if s in seen:
            raise KlaraptorError(f"--sizes gives {s} twice")
        seen.add(s)
    return sizes


def when(epoch: float) -> str:
    """A store timestamp as local date and time (`2026-11-23 11:15`)."""
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(float(epoch)).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return "?"
