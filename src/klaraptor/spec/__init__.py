"""The KernelSpec stage: what a kernel is, how its data sizes are read from a call, its program
parameters, and the expressions (grid, shared memory, constraints) over D, P and the block.

`kernel_spec` defines `KernelSpec` and `DataParam`; `params` the compile-time program
parameters; `expressions` parses and evaluates spec expressions with NumPy; `cuda_source` reads
what it needs from CUDA C++ text without compiling it."""

from klaraptor.core.types import Block
from klaraptor.spec.kernel_spec import Constraint, Data, DataParam, KernelSpec, data_name_problem
from klaraptor.spec.params import ProgramParam

__all__ = [
    "Block",
    "Constraint",
    "Data",
    "DataParam",
    "KernelSpec",
    "ProgramParam",
    "data_name_problem",
]
