"""SNOWPACK (Singh et al., ScalA'17): a block for a kernel never measured, from static features
and a statistical model. One module per stage: `features` (static and dynamic features),
`learner` (scikit-learn regressors, targets, views, persistence), `search` (the
cross-validated choice of learner, target and view), `model` (the registered
`snowpack` model, `Predictor`, `rank_prior`), `train` (training from the store, the
zero-measurement job). docs/snowpack.md tells what it does and how well.
"""

import importlib
from typing import Any

# Each public name's module, imported on first use (PEP 562): a build reads the `snowpack`
# model's tags through this package, and must not pay seconds for scikit-learn to do so.
_EXPORTS = {
    "FEATURE_SET": "features",
    "SnowpackError": "features",
    "Regressor": "learner",
    "Predictor": "model",
    "SnowpackModel": "model",
    "load_regressor": "model",
    "rank_prior": "model",
    "SearchSettings": "search",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "FEATURE_SET",
    "Predictor",
    "Regressor",
    "SearchSettings",
    "SnowpackError",
    "SnowpackModel",
    "load_regressor",
    "rank_prior",
]
