"""What a user names on the command line: a `.cu` file with KLARAPTOR annotations, a
`module:ATTR` holding a KernelSpec (or a list of them), or a suite name."""

from __future__ import annotations

import importlib
import os
import sys

from klaraptor.core.errors import KlaraptorError
from klaraptor.spec import KernelSpec


def resolve_specs(target: str) -> list[KernelSpec]:
    """Specs named by TARGET: a .cu file with KLARAPTOR annotations, `module:ATTR`, a suite kernel
    (`polybench.gemm.gemm`, `rodinia.srad.k1`), a suite benchmark (`polybench.gemm`,
    `rodinia.srad`) or a whole suite (`polybench`, `rodinia`)."""
    from klaraptor import suite

    if target.endswith(".cu"):
        from klaraptor.frontends.annotated import read_annotated

        return read_annotated(target)
    if ":" in target:
        module, _, attr = target.partition(":")
        # As `python -m` does: modules next to where the user stands are importable.
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise KlaraptorError(f"cannot import {target!r}: {e}") from None
        specs = list(obj) if isinstance(obj, (list, tuple)) else [obj]
        if not all(isinstance(s, KernelSpec) for s in specs):
            raise KlaraptorError(f"{target!r} is not a KernelSpec (or a list of them)")
        return specs
    names = [s.name for s in suite.all_specs()]
    if target in names:
        return [suite.get(target)]
    matched = [suite.get(n) for n in names if n.startswith(target + ".")]
    if matched:
        return matched
    raise KlaraptorError(
        f"unknown kernel {target!r}: give a .cu file, module:ATTR, or a suite name such as "
        f"{names[0]!r} (see `klaraptor list --suite`)"
    )
