"""SAAKE in klaraptor: abstract kernel emulation with a latency and a gap per resource, and the
sensitivity analysis that names a kernel's bottleneck (docs/saake.md).

Modules, in the order data flows: `isa_source` (the SASS), `tripcounts` (how often each part
runs, from counters), `coalescing` (static lines and sectors per access), `ops` (what each
instruction costs), `trace` (one warp's instruction stream), `emulate` (Alg. 1 on one SM, waves),
`emulator` (one kernel at any configuration and D), `model` (the registered model ``saake``),
`sensitivity` (±10 % per resource parameter, the bottleneck), `referee` (Nsight Compute units).
"""

from __future__ import annotations

from klaraptor.models.saake.model import SaakeModel

__all__ = ["SaakeModel"]
