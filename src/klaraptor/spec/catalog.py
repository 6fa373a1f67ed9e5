"""The kernel catalog: the KernelSpecs klaraptor can find by store name without being handed
them (for `load` of a zero-measurement build, the hints of "unknown kernel" errors, SNOWPACK's
training from a store).

Kernel collections are found by module name, never imported by the stages that ask: the
built-in suites below, plus any module a package declares under the entry-point group
`klaraptor.kernels` (each module defines `SPECS`, a sequence of KernelSpec). A collection that
fails to import is skipped, so one broken plug-in never hides the others."""

from __future__ import annotations

import difflib
import importlib
import warnings
from functools import cache
from importlib import metadata

from klaraptor.core.errors import KlaraptorWarning, SpecError
from klaraptor.spec.kernel_spec import KernelSpec

BUILTIN: tuple[str, ...] = (
    "klaraptor.suite.polybench",
    "klaraptor.suite.rodinia",
    "klaraptor.suite.patterns",
    "klaraptor.suite.tunables",
)
ENTRY_POINT_GROUP = "klaraptor.kernels"


def collections() -> tuple[str, ...]:
    """The module names of every known kernel collection, built-in first."""
    found = [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return tuple(dict.fromkeys([*BUILTIN, *found]))


@cache
def _specs() -> dict[str, KernelSpec]:
    out: dict[str, KernelSpec] = {}
    for name in collections():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # declared but not installed (e.g. a suite not shipped)
            warnings.warn(
                f"kernel collection {name} cannot be imported: {exc}",
                KlaraptorWarning,
                stacklevel=3,
            )
            continue
        except Exception as exc:  # noqa: BLE001 - a broken collection must not hide the others
            warnings.warn(
                f"kernel collection {name} cannot be imported: {exc}",
                KlaraptorWarning,
                stacklevel=3,
            )
            continue
        for spec in getattr(module, "SPECS", ()):
            if isinstance(spec, KernelSpec):
                out.setdefault(spec.name, spec)
    return out


def names() -> list[str]:
    """Every catalogued kernel's store name, in catalogue order."""
    return list(_specs())


def find(name: str) -> KernelSpec | None:
    """The catalogued KernelSpec with this store name, or None."""
    return _specs().get(name)


def get(name: str) -> KernelSpec:
    """The catalogued KernelSpec with this store name; SpecError with close matches if none."""
    spec = find(name)
    if spec is None:
        close = difflib.get_close_matches(str(name), names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise SpecError(f"no catalogued kernel named {name!r}{hint}")
    return spec


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "collections", "find", "get", "names"]
