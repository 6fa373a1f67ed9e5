"""The benchmark suites as KernelSpecs: "polybench" (the PolyBench/GPU-style kernels of the
KLARAPTOR thesis), "rodinia" (kernels of the Rodinia applications), "patterns" (one kernel per
common CUDA pattern: SNOWPACK's training corpus, never evaluated) and "tunables" (kernels whose
compile-time program parameters matter: tiles, work per thread, vector widths, unrolling).

>>> from klaraptor import suite
>>> list(suite.suites())
['polybench', 'rodinia', 'patterns', 'tunables']
>>> suite.get("tunables.sgemm.sgemm").param_names
('TM', 'TN')
>>> suite.benchmarks("polybench")["ATAX"]
['polybench.atax.k1', 'polybench.atax.k2']
>>> suite.benchmarks("rodinia")["srad"]
['rodinia.srad.k1', 'rodinia.srad.k2']
>>> suite.SPEC_REF["polybench.gemm.gemm"]  # re-imported by worker processes with `resolve`
'klaraptor.suite.polybench:GEMM'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from klaraptor.core.errors import SpecError
from klaraptor.spec import KernelSpec
from klaraptor.suite import patterns, polybench, rodinia, tunables

# Suite name -> its module (each defines SPECS in its own order); names are store-name prefixes.
_SUITES: dict[str, ModuleType] = {
    "polybench": polybench,
    "rodinia": rodinia,
    "patterns": patterns,
    "tunables": tunables,
}

_BY_NAME: dict[str, KernelSpec] = {
    spec.name: spec for module in _SUITES.values() for spec in module.SPECS
}

# "module:ATTRIBUTE" of every suite spec, so another process can re-import it with `resolve`.
SPEC_REF: dict[str, str] = {
    value.name: f"{module.__name__}:{attr}"
    for module in _SUITES.values()
    for attr, value in vars(module).items()
    if isinstance(value, KernelSpec)
}


def _modules(suite: str | None) -> list[ModuleType]:
    if suite is None:
        return list(_SUITES.values())
    try:
        return [_SUITES[suite]]
    except KeyError:
        raise SpecError(f"no suite named {suite!r}; known: {', '.join(_SUITES)}") from None


def suites() -> dict[str, list[str]]:
    """Suite name ("polybench", "rodinia", "patterns", "tunables") -> the names of its kernels, in
    suite order."""
    return {name: [spec.name for spec in module.SPECS] for name, module in _SUITES.items()}


def all_specs(suite: str | None = None) -> list[KernelSpec]:
    """Every kernel of one suite (or of all, PolyBench first): PolyBench in the order of the
    thesis' Table 6.2, Rodinia by application, then the patterns and the tunables; kernels in
    launch order."""
    return [spec for module in _modules(suite) for spec in module.SPECS]


def get(name: str) -> KernelSpec:
    """The suite kernel with this store name, e.g. "polybench.atax.k1", "rodinia.srad.k1" or
    "tunables.sgemm.sgemm"."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SpecError(f"no suite kernel named {name!r}; known: {', '.join(_BY_NAME)}") from None


def benchmarks(suite: str | None = None) -> dict[str, list[str]]:
    """Benchmark (PolyBench: the thesis' Table 6.2 names; Rodinia: the application; patterns
    and tunables: the pattern) -> its kernel names in launch order, for one suite or for all."""
    out: dict[str, list[str]] = {}
    for spec in all_specs(suite):
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


__all__ = ["SPEC_REF", "all_specs", "benchmarks", "get", "resolve", "suites"]
