"""klaraptor: near-optimal CUDA thread-block configurations from rational programs.

The public API:
- `KernelSpec`, `DataParam`: what a kernel is and how its data sizes are read;
- `DataSize`: the data size D (`spec.size(4096)`, `spec.size("N=4096")`);
- `build(spec, sizes, model="auto")`: collect, fit and store the helper program (a `Kernel`);
- `plan(spec, sizes)`: what a build would measure (a dry run, no GPU needed);
- `load(name)`: a built kernel from the store, without touching the GPU;
- `Kernel.select(D)`, `.explain(D)`, `.tuned(*args)`, `.launcher(refine=k)`, `.export_c()`;
- `tune(data=..., grid=...)`: a decorator giving Numba, CuPy and cuda.core kernels (and torch
  tensors) a tuned launch per call (`klaraptor.frontends.decorator`);
- `fit_rational(X, y, ...)`: rational-function fitting (SVD least squares, degree search);
- `Program`, `parse_expr`: rational programs.
"""

from __future__ import annotations

from klaraptor.build import Kernel, build, load, plan
from klaraptor.errors import (
    BuildError,
    CollectError,
    CompileError,
    DataSizeError,
    FitError,
    KlaraptorError,
    LaunchError,
    ProgramError,
    SpecError,
    StoreError,
)
from klaraptor.fitting import RationalFit, TableFit, fit_rational, fit_rational_table
from klaraptor.program import Program, parse_expr
from klaraptor.spec import DataParam, KernelSpec
from klaraptor.types import DataSize

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The front-ends load on first use: `import klaraptor` stays the core (spec, build, select).
    if name == "tune":
        from klaraptor.frontends.decorator import tune

        return tune
    raise AttributeError(f"module 'klaraptor' has no attribute {name!r}")


__all__ = [
    "BuildError",
    "CollectError",
    "CompileError",
    "DataParam",
    "DataSize",
    "DataSizeError",
    "FitError",
    "Kernel",
    "KernelSpec",
    "KlaraptorError",
    "LaunchError",
    "Program",
    "ProgramError",
    "RationalFit",
    "SpecError",
    "StoreError",
    "TableFit",
    "__version__",
    "build",
    "fit_rational",
    "fit_rational_table",
    "load",
    "parse_expr",
    "plan",
    "tune",
]
