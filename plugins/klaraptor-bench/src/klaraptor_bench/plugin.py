"""The entry point `klaraptor.plugins` / `bench`: what the `klaraptor` command asks of the
evaluation (`klaraptor.cli.plugins.BenchPlugin`). Imports stay light: the parser is built on
every `klaraptor` run, the evaluation is imported when a subcommand runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from klaraptor_bench.cli import add_parser

if TYPE_CHECKING:
    from klaraptor.store import Store
    from klaraptor.suite.recorded import RecordedDataset
    from klaraptor_bench.evaluate import KernelResult


def evaluate_recorded(
    store: Store, data: RecordedDataset, name: str, *, model: str = "auto"
) -> KernelResult:
    """`klaraptor demo` without a GPU: the default build and the baselines of kernel `name`
    scored against the recorded exhaustive search (`evaluate.evaluate_kernel`)."""
    from klaraptor_bench.evaluate import evaluate_kernel

    return evaluate_kernel(store, data, name, model=model)


def format_summary(results: Sequence[Any]) -> str:
    from klaraptor_bench.evaluate import format_summary as summary

    return summary(results)


__all__ = ["add_parser", "evaluate_recorded", "format_summary"]
