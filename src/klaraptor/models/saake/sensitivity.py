"""Sensitivity analysis (SAAKE §3.3): which resource limits a (configuration, D), and how.

Every resource's latency and gap is scaled by 1 ± `step` (10 %) in turn, all else fixed, and
the emulation is repeated. The elasticity of the predicted time T to a parameter X is the
central difference (T(X·(1+s)) − T(X·(1−s))) / (2 s T): 1 means T moves one for one with X
(the paper's ΔT/T over ΔX/X), 0 that X does not matter.

The bottleneck is the resource with the largest elasticity; it is latency-bound when its
latency elasticity is the larger of its two (more concurrency would help), throughput-bound when
its gap's is (only less demand helps). It "stands out" when that elasticity is at least
`MIN_ELASTICITY` and the next resource's is below `CLEAR_RATIO` times it; otherwise the
analysis says that no single resource stands out and names the two largest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.models.saake.emulate import Params
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor.models.saake.ops import RESOURCES

STEP = 0.10
MIN_ELASTICITY = 0.10
CLEAR_RATIO = 0.8
KINDS = ("lat", "gap")
MODE = {"lat": "latency", "gap": "throughput"}


@dataclass
class Sensitivity:
    """The result of the analysis for one (configuration, D)."""

    kernel: str
    D: tuple[int, ...]
    block: tuple[int, int, int]
    cycles: float
    elasticity: dict[str, dict[str, float]] = field(default_factory=dict)  # res -> kind -> e
    step: float = STEP

    def ranked(self) -> list[tuple[str, str, float]]:
        """(resource, kind, elasticity), largest first."""
        rows = [(r, k, e) for r, by in self.elasticity.items() for k, e in by.items()]
        return sorted(rows, key=lambda x: -x[2])

    def per_resource(self) -> list[tuple[str, float]]:
        """(resource, its larger elasticity), largest first."""
        best = {r: max(by.values()) for r, by in self.elasticity.items()}
        return sorted(best.items(), key=lambda x: -x[1])

    @property
    def bottleneck(self) -> str:
        return self.per_resource()[0][0]

    @property
    def mode(self) -> str:
        by = self.elasticity[self.bottleneck]
        return MODE["lat" if by["lat"] >= by["gap"] else "gap"]

    @property
    def stands_out(self) -> bool:
        top = self.per_resource()
        first = top[0][1]
        second = top[1][1] if len(top) > 1 else 0.0
        return first >= MIN_ELASTICITY and second < CLEAR_RATIO * first

    def headline(self) -> str:
        """`bottleneck: <resource> (<latency|throughput>-bound)`, or why none stands out."""
        if self.stands_out:
            return f"bottleneck: {self.bottleneck} ({self.mode}-bound)"
        (r1, e1), (r2, e2) = self.per_resource()[:2]
        return (
            f"bottleneck: none stands out (largest: {r1} {e1:.2f}, {r2} {e2:.2f}; "
            f"nearest: {self.bottleneck} ({self.mode}-bound))"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "D": list(self.D),
            "block": list(self.block),
            "cycles": self.cycles,
            "bottleneck": self.bottleneck,
            "mode": self.mode,
            "stands_out": self.stands_out,
            "elasticity": self.elasticity,
            "step": self.step,
        }


def analyse(
    em: KernelEmulator,
    D: Sequence[int],
    j: int,
    *,
    step: float = STEP,
    resources: Sequence[str] = RESOURCES,
) -> Sensitivity:
    """The sensitivity of configuration j at D (see the module docstring)."""
    d = tuple(int(v) for v in D)
    base = em.cycles(d, j)
    out = Sensitivity(em.spec.name, d, em.candidates[j], base, step=step)
    if not math.isfinite(base) or base <= 0:
        out.elasticity = {r: dict.fromkeys(KINDS, 0.0) for r in resources}
        return out
    p: Params = em.params
    for r in resources:
        out.elasticity[r] = {}
        for kind in KINDS:
            up = em.cycles(d, j, p.scaled(r, kind, 1.0 + step))
            down = em.cycles(d, j, p.scaled(r, kind, 1.0 - step))
            out.elasticity[r][kind] = round((up - down) / (2.0 * step * base), 4)
    return out


def format_sensitivity(s: Sensitivity, top: int = 6) -> str:
    """The headline and the largest elasticities, one per line."""
    lines = [
        s.headline(),
        f"  sensitivities ΔT/T per ±{s.step:.0%} of each parameter (block {s.block}, D {s.D}):",
    ]
    for r, kind, e in s.ranked()[:top]:
        label = "latency" if kind == "lat" else "gap"
        lines.append(f"    {r:6s} {label:8s} {e if abs(e) >= 5e-4 else 0.0:6.3f}")
    return "\n".join(lines)


__all__ = ["STEP", "Sensitivity", "analyse", "format_sensitivity"]
