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

    if not isinstance(target, str) or not target.strip():
        raise KlaraptorError(
            f"the target must name a .cu file, module:ATTR or a suite kernel, got {target!r}"
        )
    if target.lower().endswith(".cu"):  # x.CU is a .cu file too (and says so if missing)
        from klaraptor.frontends.annotated import read_annotated

        return read_annotated(target)
    if ":" in target:
        return _module_specs(target)
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


def _module_specs(target: str) -> list[KernelSpec]:
    """The KernelSpec(s) at `module:ATTR`. A module that fails to import is the user's error:
    its own message is shown (the file and line of a syntax error)."""
    module, _, attr = target.partition(":")
    module, attr = module.strip(), attr.strip()
    if not module or not attr:
        raise KlaraptorError(
            f"{target!r}: give module:ATTR, a module name and an attribute holding a KernelSpec "
            "(e.g. my_kernels:SPEC)"
        )
    # As `python -m` does: modules next to where the user stands are importable.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise KlaraptorError(f"cannot import {target!r}: {e}") from None
    except SyntaxError as e:
        where = f"{e.filename}:{e.lineno}" if e.filename else f"line {e.lineno}"
        raise KlaraptorError(
            f"cannot import {target!r}: module {module!r} has a syntax error at {where}: {e.msg}"
        ) from None
    except Exception as e:  # noqa: BLE001 - the user's module raised while importing
        raise KlaraptorError(
            f"cannot import {target!r}: importing module {module!r} raised "
            f"{type(e).__name__}: {e} (run `python -c 'import {module}'` to see the traceback)"
        ) from None
    try:
        obj = getattr(mod, attr)
    except AttributeError as e:
        raise KlaraptorError(f"cannot import {target!r}: {e}") from None
    specs = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    if not specs:
        raise KlaraptorError(f"{target!r} is an empty list: it names no kernel to build")
    if not all(isinstance(s, KernelSpec) for s in specs):
        raise KlaraptorError(f"{target!r} is not a KernelSpec (or a list of them)")
    return specs
