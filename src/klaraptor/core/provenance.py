"""Where a figure came from: date, command and commit, stamped on every recorded result.

The device machine receives a copy of the working tree without git history, so the commit is
taken from $KLARAPTOR_COMMIT when set (the session script passes it), else from git.
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]  # the repository (src/klaraptor/core/provenance.py)


def commit() -> str:
    env = os.environ.get("KLARAPTOR_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        if out.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def stamp(command: str | None = None, **extra: Any) -> dict[str, Any]:
    """date, command, commit (+ extra) for a result being written."""
    return {
        "date": now(),
        "command": command
        if command is not None
        else " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit(),
        **extra,
    }
