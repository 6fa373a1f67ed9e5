"""SNOWPACK (Singh et al., ScalA'17): a block for a kernel never measured, from static features
and a statistical model. One module per stage: `features` (static and dynamic features),
`learner` (scikit-learn regressors, targets, views, persistence), `search` (the
cross-validated choice of learner, target and view), `model` (the registered
`snowpack` model, `Predictor`, `rank_prior`), `train` (training from the store, the
zero-measurement job). docs/snowpack.md tells what it does and how well.
"""

from klaraptor.models.snowpack.features import FEATURE_SET, SnowpackError
from klaraptor.models.snowpack.learner import Regressor
from klaraptor.models.snowpack.model import (
    Predictor,
    SnowpackModel,
    load_regressor,
    rank_prior,
)
from klaraptor.models.snowpack.search import SearchSettings

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
