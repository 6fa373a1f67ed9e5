"""Performance models and their registry.

Every model implements the contract of `klaraptor.models.base` (a `Model`, usually a
`TemplateModel`); `klaraptor.models.checks.check_model` tests a model against it. Built-in:

- `scaling`: anchored at the times measured at the largest training size, hot below the L2 and
  L2-flushed beyond it, with one growth law per kernel (`klaraptor.models.scaling`);
- `mwp_cwp`: the faithful KLARAPTOR model (MWP-CWP with the synchronisation cost);
  `mwp_cwp_fenced` the same with the thesis's configuration-level outlier fence (§5.4);
- `time_fit`: the measured time fitted per configuration as a rational function of D;
- `saake`: SAAKE's abstract kernel emulation of the SASS, fitted per configuration (docs/saake.md).
- `snowpack`: SNOWPACK's statistical model over static features (no measurements needed).

`model="auto"` in a build is not a model but a choice between registered ones
(`klaraptor.assemble.model_selection`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from klaraptor.core.errors import KlaraptorError
from klaraptor.models.base import (
    BUILTIN_TAGS,
    KERNEL_QUANTITIES,
    HelperJob,
    Model,
    ModelTags,
    TemplateModel,
)

__all__ = [
    "AUTO",
    "KERNEL_QUANTITIES",
    "HelperJob",
    "Model",
    "ModelTags",
    "TemplateModel",
    "auto_candidates",
    "available_models",
    "get_model",
    "is_budgeted",
    "model_tags",
    "priors",
    "register_model",
]

# Not a model: a build's choice among the models tagged with an `auto_rank`.
AUTO = "auto"

# name -> "module:attribute" of a zero-argument factory, imported on first use.
_BUILTIN: dict[str, str] = {
    "scaling": "klaraptor.models.scaling_model:ScalingModel",
    "mwp_cwp": "klaraptor.models.mwp_cwp:MwpCwpModel",
    "mwp_cwp_fenced": "klaraptor.models.mwp_cwp:fenced",
    "time_fit": "klaraptor.models.time_fit:TimeFitModel",
    "saake": "klaraptor.models.saake.model:SaakeModel",
    "snowpack": "klaraptor.models.snowpack.model:SnowpackModel",
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
    model = factory()
    if not isinstance(model, Model):
        raise KlaraptorError(
            f"model {name!r} is a {type(model).__name__}, not a klaraptor.models.Model"
        )
    return model


def model_tags(name: str) -> ModelTags:
    """The capabilities a registered model declares (a built-in one's without importing it)."""
    if name not in _FACTORIES and name in BUILTIN_TAGS:
        return BUILTIN_TAGS[name]
    return get_model(name).tags


def auto_candidates(params: bool = False) -> list[str]:
    """The models `model="auto"` chooses among, the default first (for a kernel with program
    parameters, those that support them)."""
    ranked = [
        (t.auto_rank, n)
        for n in available_models()
        if (t := model_tags(n)).auto_rank is not None and (t.supports_params or not params)
    ]
    return [n for _, n in sorted(ranked)]


def is_budgeted(name: str) -> bool:
    """Whether a budgeted measurement plan serves builds with this model (auto: its default)."""
    if name == AUTO:
        return model_tags(auto_candidates()[0]).budgeted
    return model_tags(name).budgeted


def priors() -> list[str]:
    """The models that can order a budgeted build's sweep without measuring (`prior=`)."""
    return [n for n in available_models() if model_tags(n).ranks_without_measuring]
