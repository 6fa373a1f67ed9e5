"""What a collection worker process is, shared by the code that starts it (`process`, `warm`):
its module, its exit codes and its environment."""

from __future__ import annotations

import os
from pathlib import Path

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CONTEXT_LOST = 3
WORKER_MODULE = "klaraptor.collect.worker"


def worker_env() -> dict[str, str]:
    """The environment of worker processes: ours, with klaraptor importable by `-m`."""
    env = dict(os.environ)
    # src/ (or site-packages): three levels above this file, klaraptor/collect/protocol.py
    root = str(Path(__file__).resolve().parents[2])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root, *paths])
    return env


__all__ = ["EXIT_CONTEXT_LOST", "EXIT_FATAL", "EXIT_OK", "WORKER_MODULE", "worker_env"]
