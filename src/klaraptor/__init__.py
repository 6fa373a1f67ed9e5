"""klaraptor: near-optimal CUDA launch configurations per call, from rational programs.

The public API (each name is imported on first use, so `import klaraptor` is cheap and no stage
ever imports this package's face):
- `KernelSpec`, `DataParam`: what a kernel is, how its data sizes are read, its program
  parameters;
- `DataSize`: the data size D (`spec.size(4096)`, `spec.size("N=4096")`);
- `build(spec, sizes, model="auto")`: collect, fit and store the helper program (a `Kernel`);
- `plan(spec, sizes)`: what a build would measure (a dry run, no GPU needed);
- `load(name)`: a built kernel from the store, without touching the GPU;
- `Kernel.select(D)`, `.explain(D)`, `.tuned(*args)`, `.launcher(refine=k)`, `.export_c()`;
- `tune(data=..., grid=...)`: a decorator giving Numba, CuPy and cuda.core kernels (and torch
  tensors) a tuned launch per call;
- `fit_rational(X, y, ...)`: rational-function fitting (SVD least squares, degree search);
- `Program`, `parse_expr`: rational programs;
- `gpu_available()`: whether this machine can measure;
- the errors (`KlaraptorError` and its subclasses) and warnings (`KlaraptorWarning`,
  `ExtrapolationWarning`, `DeviceWarning`).
"""

from __future__ import annotations

import importlib
from typing import Any

from klaraptor.core.version import __version__

# name -> the module that defines it
_PUBLIC: dict[str, str] = {
    "Kernel": "klaraptor.assemble",
    "build": "klaraptor.assemble",
    "load": "klaraptor.assemble",
    "plan": "klaraptor.assemble",
    "tune": "klaraptor.frontends.decorator",
    "KernelSpec": "klaraptor.spec",
    "DataParam": "klaraptor.spec",
    "DataSize": "klaraptor.core.types",
    "Config": "klaraptor.core.types",
    "LaunchConfig": "klaraptor.core.types",
    "ParamValues": "klaraptor.core.types",
    "RationalFit": "klaraptor.fit",
    "TableFit": "klaraptor.fit",
    "fit_rational": "klaraptor.fit",
    "fit_rational_table": "klaraptor.fit",
    "Program": "klaraptor.program",
    "parse_expr": "klaraptor.program",
    "gpu_available": "klaraptor.backends.cupy_backend",
    **{
        name: "klaraptor.core.errors"
        for name in (
            "BuildError",
            "CollectError",
            "CompileError",
            "DataSizeError",
            "FitError",
            "KlaraptorError",
            "LaunchError",
            "ProgramError",
            "SpecError",
            "StoreError",
            "KlaraptorWarning",
            "ExtrapolationWarning",
            "DeviceWarning",
        )
    },
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'klaraptor' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = ["__version__", *_PUBLIC]
