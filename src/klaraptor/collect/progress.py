"""Progress bars of collection (rich, on stderr): one per pass, with count, elapsed and ETA."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Progress", "progress_columns"]


def progress_columns(description: str, remaining: str) -> tuple[Any, ...]:
    """rich progress columns: the task's `description` (a rich format), the bar, done of total,
    the elapsed time, then `remaining` and the time left."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return (
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn(remaining),
        TimeRemainingColumn(),
    )


class Progress:
    """rich progress bars (count, elapsed, ETA) on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self._p: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import Progress

            columns = progress_columns("[bold]{task.description}", "eta")
            self._p = Progress(*columns, console=Console(stderr=True))

    def __enter__(self) -> Progress:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.stop()

    def task(self, description: str, total: int) -> Callable[..., None]:
        """A function advancing the new bar by n (default 1)."""
        if self._p is None:
            return lambda n=1: None
        tid = self._p.add_task(description, total=total)
        return lambda n=1: self._p.advance(tid, n)

    def print(self, text: str) -> None:
        if self._p is not None:
            self._p.console.print(text, markup=False)
