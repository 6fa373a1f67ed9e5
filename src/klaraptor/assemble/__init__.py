"""Building a kernel's helper program: the training job (api.make_job), the choice of model
(model_selection, `model="auto"`), the public `Kernel` (kernel), and `build`, `load`, `plan`
(api)."""

from klaraptor.assemble.api import DEFAULT_MODEL, build, current_profile, load, make_job, plan
from klaraptor.assemble.kernel import BuildReport, Kernel

__all__ = [
    "DEFAULT_MODEL",
    "BuildReport",
    "Kernel",
    "build",
    "current_profile",
    "load",
    "make_job",
    "plan",
]
