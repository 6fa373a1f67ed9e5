"""The ConfigSpace stage: the candidate configurations of a kernel, the constraints over them,
and what the device and the compiled kernel admit (with a recorded reason for each refusal)."""

from klaraptor.space.configspace import ConfigSpace, PlannedPoint

__all__ = ["ConfigSpace", "PlannedPoint"]
