"""`klaraptor.triton.autotune`: a drop-in for `triton.autotune` that chooses each new key's config
from a model built once (see `klaraptor.frontends.triton`)."""

from klaraptor.frontends.triton import TritonBuild, TritonTuner, autotune

__all__ = ["TritonBuild", "TritonTuner", "autotune"]
