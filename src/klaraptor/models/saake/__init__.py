"""SAAKE in klaraptor: abstract kernel emulation with a latency and a gap per resource, and the
sensitivity analysis that names a kernel's bottleneck (docs/saake.md).

Modules, in the order data flows: `isa_source` (the SASS), `tripcounts` (how often each part
runs, from counters), `coalescing` (static lines and sectors per access), `ops` (what each
instruction costs), `trace` (one warp's instruction stream), `emulate` (Alg. 1 on one SM, waves),
`emulator` (one kernel at any configuration and D), `model` (the registered model ``saake``),
`sensitivity` (±10 % per resource parameter, the bottleneck), `referee` (Nsight Compute units).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SaakeModel"]


def __getattr__(name: str) -> Any:
    # Imported on first use (PEP 562): the emulator and SciPy are not needed to read the
    # `saake` model's tags, which every build does.
    if name == "SaakeModel":
        from klaraptor.models.saake.model import SaakeModel

        return SaakeModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
