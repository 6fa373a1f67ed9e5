"""The benchmark suite: the PolyBench/GPU-style kernels of the KLARAPTOR thesis as KernelSpecs.

>>> from klaraptor import suite
>>> suite.benchmarks()["ATAX"]
['polybench.atax.k1', 'polybench.atax.k2']
>>> suite.SPEC_REF["polybench.gemm.gemm"]  # re-imported by worker processes with `resolve`
'klaraptor.suite.polybench:GEMM'
"""

from __future__ import annotations

import importlib

from klaraptor.errors import SpecError
from klaraptor.spec import KernelSpec
from klaraptor.suite import polybench

_BY_NAME: dict[str, KernelSpec] = {spec.name: spec for spec in polybench.SPECS}

# "module:ATTRIBUTE" of every suite spec, so another process can re-import it with `resolve`.
SPEC_REF: dict[str, str] = {
    value.name: f"{polybench.__name__}:{attr}"
    for attr, value in vars(polybench).items()
    if isinstance(value, KernelSpec)
}


def all_specs() -> list[KernelSpec]:
    """Every suite kernel, benchmarks in the order of the thesis' Table 6.2, kernels in launch order."""
    return list(polybench.SPECS)


def get(name: str) -> KernelSpec:
    """The suite kernel with this store name, e.g. "polybench.atax.k1"."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SpecError(f"no suite kernel named {name!r}; known: {', '.join(_BY_NAME)}") from None


def benchmarks() -> dict[str, list[str]]:
    """The 15 benchmarks of the thesis (Table 6.2 names) -> their kernel names, in launch order."""
    out: dict[str, list[str]] = {}
    for spec in polybench.SPECS:
        out.setdefault(spec.meta["benchmark"], []).append(spec.name)
    return out


def resolve(ref: str) -> KernelSpec:
    """The KernelSpec a "module:ATTRIBUTE" reference (see SPEC_REF) points to."""
    module, _, attr = ref.partition(":")
    try:
        spec = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SpecError(f"cannot resolve spec reference {ref!r}: {exc}") from exc
    if not isinstance(spec, KernelSpec):
        raise SpecError(f"{ref!r} is a {type(spec).__name__}, not a KernelSpec")
    return spec


__all__ = ["SPEC_REF", "all_specs", "benchmarks", "get", "resolve"]
