"""The `klaraptor` command line (main: the parser; commands; bench; common)."""

from klaraptor.cli.main import main

__all__ = ["main"]
