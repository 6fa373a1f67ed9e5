"""Performance models, each a rational-program template, and their registry.

A model has:

* ``name`` — its registry name;
* ``metrics`` — the names of the per-kernel metric sub-programs its template calls (fitted by the
  builder from measured points);
* ``hardware`` — the ``hw_*`` inputs of its template (device profile and architecture values);
* ``point_values(derived, block, threads, warps)`` — one measured point's canonical metrics
  (`klaraptor.metrics`) turned into the values of its metric sub-programs, so they can be fitted;
  ``threads`` and ``warps`` are per block;
* ``program(inputs)`` — the template: a `Program` whose inputs are ``inputs`` (the names the
  bound sub-programs read, e.g. data names, ``bx, by, bz, cfg``) plus ``hardware``. The exact
  per-kernel quantities ``blocks`` (total blocks), ``threads`` (per block), ``regs`` and ``smem``
  and the metrics are unbound calls resolved by name; the builder binds them. Its first output is
  the predicted cycles, the others are diagnostics.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from klaraptor.errors import KlaraptorError
from klaraptor.program import Program

__all__ = ["KERNEL_QUANTITIES", "Model", "available_models", "get_model", "register_model"]

# Exactly known per-kernel sub-programs every template calls (never fitted).
KERNEL_QUANTITIES: tuple[str, ...] = ("blocks", "threads", "regs", "smem")


class Model(Protocol):
    name: str
    metrics: tuple[str, ...]
    hardware: tuple[str, ...]

    def point_values(
        self, derived: Mapping[str, float], block: Sequence[int], threads: int, warps: int
    ) -> dict[str, float]: ...

    def program(self, inputs: Sequence[str]) -> Program: ...


# name -> "module:attribute" of a zero-argument factory, imported on first use.
_BUILTIN: dict[str, str] = {
    "mwp_cwp": "klaraptor.models.mwp_cwp:MwpCwpModel",
    "time_fit": "klaraptor.models.time_fit:TimeFitModel",
}
_FACTORIES: dict[str, Callable[[], Model]] = {}


def register_model(name: str, factory: Callable[[], Model]) -> None:
    """Register a model factory under ``name`` (replacing a previous registration)."""
    if not isinstance(name, str) or not name:
        raise KlaraptorError(f"a model name must be a non-empty string, got {name!r}")
    _FACTORIES[name] = factory


def available_models() -> list[str]:
    """Names of the registered models, sorted."""
    return sorted({*_BUILTIN, *_FACTORIES})


def get_model(name: str) -> Model:
    """A fresh instance of the model registered as ``name``."""
    factory = _FACTORIES.get(name)
    if factory is None:
        target = _BUILTIN.get(name)
        if target is None:
            raise KlaraptorError(
                f"unknown model {name!r} (available: {', '.join(available_models())})"
            )
        module, _, attr = target.partition(":")
        factory = getattr(importlib.import_module(module), attr)
        _FACTORIES[name] = factory
    return factory()
