"""Plug-ins of the `klaraptor` command, found through the entry-point group `klaraptor.plugins`.

The evaluation against exhaustive search is not part of the product: it is the distribution
`klaraptor-bench` (`plugins/klaraptor-bench/` of the repository, package `klaraptor_bench`),
which declares

    [project.entry-points."klaraptor.plugins"]
    bench = "klaraptor_bench.plugin"

and `klaraptor bench ...` and the recorded `klaraptor demo` load it here. klaraptor never imports
it by name (the import-linter contract in pyproject.toml): without an installation (a checkout
run with `PYTHONPATH=src:plugins/klaraptor-bench/src`, as the GPU scripts do) the loader falls
back to importing the module its entry point would name, by string.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from importlib import metadata
from typing import Any, Protocol, cast

from klaraptor.core.errors import PluginMissingError

ENTRY_POINT_GROUP = "klaraptor.plugins"
BENCH = "bench"
# Where each known plug-in lives when it is importable but not installed (no entry point).
FALLBACK_MODULES = {BENCH: "klaraptor_bench.plugin"}
INSTALL_HINTS = {
    BENCH: "pip install -e plugins/klaraptor-bench (from a klaraptor checkout; `make test` and "
    "`make demo` install it)"
}


class BenchPlugin(Protocol):
    """What the evaluation plug-in gives the command line."""

    def add_parser(self, sub: Any) -> None:
        """Register `klaraptor bench` and its subcommands on the top-level subparsers."""

    def evaluate_recorded(self, store: Any, data: Any, name: str, *, model: str) -> Any:
        """Kernel `name` of the recorded dataset `data` (imported into `store`): built from its
        training sizes and scored against the recorded exhaustive search at its evaluation sizes
        beside the baselines (`klaraptor_bench.evaluate.KernelResult`)."""

    def format_summary(self, results: Sequence[Any]) -> str:
        """The methods' scores over `results`, as text."""


def load_plugin(name: str) -> Any | None:
    """The plug-in registered as `name` (its entry point's object), else the module it would name
    when that is importable, else None."""
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        return ep.load()
    module = FALLBACK_MODULES.get(name)
    if module is None:
        return None
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        # Only the plug-in itself missing means "not installed"; a missing dependency inside it
        # is a real error to show.
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise


def bench_plugin(purpose: str) -> BenchPlugin:
    """The evaluation plug-in; PluginMissingError saying how to install it if it is absent."""
    plugin = load_plugin(BENCH)
    if plugin is None:
        raise PluginMissingError(
            f"{purpose} needs the evaluation plug-in klaraptor-bench, which is not installed: "
            f"{INSTALL_HINTS[BENCH]}"
        )
    return cast(BenchPlugin, plugin)


def add_missing_parser(sub: Any, name: str, help_text: str, purpose: str) -> None:
    """A stand-in subcommand for an absent plug-in: it takes any arguments and says how to
    install the plug-in (rather than argparse refusing its subcommands as unknown)."""
    p = sub.add_parser(
        name,
        help=f"{help_text} (plug-in not installed)",
        description=f"{purpose} is a plug-in that is not installed: {INSTALL_HINTS[BENCH]}",
    )
    p.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def missing(args: argparse.Namespace) -> int:
        bench_plugin(purpose)  # raises while it is absent
        raise PluginMissingError(f"{purpose}: the plug-in was installed after this run started")

    p.set_defaults(func=missing)
