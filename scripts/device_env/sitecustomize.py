"""A compatibility shim for one broken environment: numba-cuda 0.30.4 with a NumPy that no
longer has `numpy.row_stack` (deprecated in NumPy 2.0, then removed). numba-cuda registers
`overload(np.row_stack)` when it first compiles a kernel, so every Numba compilation fails there
with "module 'numpy' has no attribute 'row_stack'" (the H200 machine's /opt/torch/.venv).

Not part of klaraptor: the GPU harness (scripts/frontends_gpu.py, scripts/device_confirm.sh)
puts this directory first on PYTHONPATH, so Python imports this file at startup, in every
process of the run (klaraptor's collection workers inherit PYTHONPATH). It imports nothing
heavy: it only watches for the first `import numpy` and then, if that NumPy lacks `row_stack`,
sets `numpy.row_stack = numpy.vstack` (the alias it always was). Where NumPy has `row_stack`, or
is never imported, it changes nothing. See docs/frontends.md.

A `sitecustomize` of the interpreter's own (Debian's Python ships one) would be shadowed by this
file, so this file runs it as well.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from types import ModuleType


def add_row_stack(numpy: ModuleType) -> bool:
    """Give a NumPy without `row_stack` the alias; True when it was missing."""
    if hasattr(numpy, "row_stack") or not hasattr(numpy, "vstack"):
        return False
    numpy.row_stack = numpy.vstack
    return True


class _NumpyWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asked for numpy, it asks the other finders and returns their spec
    with a loader that patches the module once it has run. It stays until numpy has really been
    executed: `importlib.util.find_spec("numpy")` (an availability check) asks without loading,
    and a watch gone after the first question would miss the real import (the H200 run)."""

    def __init__(self) -> None:
        self._asking = False

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 - finder protocol
        if name != "numpy" or self._asking:
            return None
        self._asking = True  # the look-up below must not find this finder again
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._asking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        watch = self

        def exec_module(module: ModuleType) -> None:
            run(module)
            add_row_stack(module)
            if watch in sys.meta_path:
                sys.meta_path.remove(watch)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _chain_next_sitecustomize() -> None:
    """Run the `sitecustomize` this file shadows (the next one on sys.path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        other = os.path.join(folder, "sitecustomize.py")
        if folder == here or not os.path.isfile(other):
            continue
        spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", other)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:  # noqa: BLE001 - as site.py does: say so, go on
                print(f"Error in {other}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return


if "numpy" in sys.modules:
    add_row_stack(sys.modules["numpy"])
else:
    sys.meta_path.insert(0, _NumpyWatch())
_chain_next_sitecustomize()
