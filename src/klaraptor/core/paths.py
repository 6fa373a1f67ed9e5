"""Where klaraptor keeps its files: the store and its caches."""

from __future__ import annotations

import os
from pathlib import Path


def home_path(name: str) -> Path:
    """`$KLARAPTOR_HOME/<name>`, else `$XDG_CACHE_HOME/klaraptor/<name>`, else
    `~/.cache/klaraptor/<name>`."""
    home = os.environ.get("KLARAPTOR_HOME")
    if home:
        return Path(home).expanduser() / name
    cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(cache).expanduser() if cache else Path.home() / ".cache"
    return base / "klaraptor" / name
