"""klaraptor: near-optimal CUDA thread-block configurations from rational programs."""

from __future__ import annotations

from klaraptor.errors import (
    BuildError,
    CollectError,
    CompileError,
    FitError,
    KlaraptorError,
    LaunchError,
    ProgramError,
    SpecError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "BuildError",
    "CollectError",
    "CompileError",
    "FitError",
    "KlaraptorError",
    "LaunchError",
    "ProgramError",
    "SpecError",
    "StoreError",
    "__version__",
]
