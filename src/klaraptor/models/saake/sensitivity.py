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

Per region (the paper's Tables 4-5): when no single resource stands out, each resource's latency
and gap is perturbed in one code region at a time (`regions`: each loop, the code outside loops;
`emulate.RegionScale`), and the (region, resource) whose perturbation moves the whole kernel's
time most is named: which loop (and source lines, where line information exists) to change,
and what limits it there. The elasticities are of the whole kernel's time, as in the paper.

Printed names (`names`): the resources as a CUDA programmer names them, with one line each; the
L1/shared pipe is `l1` for a kernel with no shared-memory instruction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from klaraptor.models.saake.emulate import Params, RegionScale
from klaraptor.models.saake.emulator import KernelEmulator
from klaraptor.models.saake.names import resource_name
from klaraptor.models.saake.ops import RESOURCES
from klaraptor.models.saake.regions import Region, code_regions, line_map

STEP = 0.10
# Resources an instruction occupies (the dispatcher is per block, not per instruction).
REGION_RESOURCES: tuple[str, ...] = tuple(r for r in RESOURCES if r != "launch")
MIN_ELASTICITY = 0.10
CLEAR_RATIO = 0.8
KINDS = ("lat", "gap")
MODE = {"lat": "latency", "gap": "throughput"}


@dataclass
class RegionSensitivity:
    """One code region's elasticities: resource -> kind -> ΔT/T of the whole kernel."""

    region: Region
    elasticity: dict[str, dict[str, float]] = field(default_factory=dict)

    def top(self) -> tuple[str, str, float]:
        """(resource, kind, elasticity) with the largest elasticity."""
        rows = [(r, k, e) for r, by in self.elasticity.items() for k, e in by.items()]
        return max(rows, key=lambda x: x[2]) if rows else ("", "", 0.0)


@dataclass
class Sensitivity:
    """The result of the analysis for one (configuration, D)."""

    kernel: str
    D: tuple[int, ...]
    block: tuple[int, int, int]
    cycles: float
    elasticity: dict[str, dict[str, float]] = field(default_factory=dict)  # res -> kind -> e
    step: float = STEP
    # The share of the L1/shared pipe's demand made by shared-memory instructions (names).
    shared_share: float | None = None
    regions: list[RegionSensitivity] = field(default_factory=list)
    regions_note: str = ""  # why there is no region analysis, or where its lines come from

    def name(self, resource: str) -> str:
        """The printed name of a resource (`names`)."""
        return resource_name(resource, self.shared_share).name

    def meaning(self, resource: str) -> str:
        """`name: what it is`, one line."""
        n = resource_name(resource, self.shared_share)
        return f"{n.name}: {n.meaning}"

    def region_bottleneck(self) -> tuple[RegionSensitivity, str, str, float] | None:
        """(region, resource, kind, elasticity) of the largest per-region elasticity."""
        best = None
        for rs in self.regions:
            r, k, e = rs.top()
            if r and (best is None or e > best[3]):
                best = (rs, r, k, e)
        return best

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
        """`bottleneck: <resource> (<latency|throughput>-bound)`, or why none stands out
        (resources by their printed names)."""
        if self.stands_out:
            return f"bottleneck: {self.name(self.bottleneck)} ({self.mode}-bound)"
        (r1, e1), (r2, e2) = self.per_resource()[:2]
        return (
            f"bottleneck: none stands out (largest: {self.name(r1)} {e1:.2f}, "
            f"{self.name(r2)} {e2:.2f}; nearest: {self.name(self.bottleneck)} "
            f"({self.mode}-bound))"
        )

    def region_headline(self) -> str | None:
        """`in <region>: <resource> (<mode>-bound)`: the code region and resource that the
        per-region analysis names (None without it)."""
        got = self.region_bottleneck()
        if got is None:
            return None
        rs, r, k, e = got
        return (
            f"region bottleneck: {self.name(r)} ({MODE[k]}-bound, ΔT/T {e:.2f}) in "
            f"{rs.region.label()}"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            "kernel": self.kernel,
            "D": list(self.D),
            "block": list(self.block),
            "cycles": self.cycles,
            "bottleneck": self.bottleneck,
            "bottleneck_name": self.name(self.bottleneck),
            "mode": self.mode,
            "stands_out": self.stands_out,
            "elasticity": self.elasticity,
            "step": self.step,
        }
        if self.regions:
            rs, r, k, e = self.region_bottleneck()  # type: ignore[misc]
            out["regions"] = [
                {**x.region.to_dict(), "elasticity": x.elasticity} for x in self.regions
            ]
            out["region_bottleneck"] = {
                "region": rs.region.name,
                "resource": r,
                "mode": MODE[k],
                "elasticity": e,
            }
        return out


def analyse(
    em: KernelEmulator,
    D: Sequence[int],
    j: int,
    *,
    step: float = STEP,
    resources: Sequence[str] = RESOURCES,
    regions: bool | None = False,
) -> Sensitivity:
    """The sensitivity of configuration j at D (see the module docstring). `regions`: True
    always adds the per-region analysis, None when no single resource stands out, False never."""
    d = tuple(int(v) for v in D)
    base = em.cycles(d, j)
    out = Sensitivity(em.spec.name, d, em.candidates[j], base, step=step)
    if not math.isfinite(base) or base <= 0:
        out.elasticity = {r: dict.fromkeys(KINDS, 0.0) for r in resources}
        return out
    out.shared_share = em.shared_share(d, j)
    p: Params = em.params
    for r in resources:
        out.elasticity[r] = {}
        for kind in KINDS:
            up = em.cycles(d, j, p.scaled(r, kind, 1.0 + step))
            down = em.cycles(d, j, p.scaled(r, kind, 1.0 - step))
            out.elasticity[r][kind] = round((up - down) / (2.0 * step * base), 4)
    if regions or (regions is None and not out.stands_out):
        analyse_regions(em, d, j, out)
    return out


def analyse_regions(
    em: KernelEmulator,
    D: Sequence[int],
    j: int,
    out: Sensitivity,
    *,
    resources: Sequence[str] = REGION_RESOURCES,
) -> Sensitivity:
    """Fill `out.regions`: every instruction resource's latency and gap perturbed in one code
    region at a time (module docstring). A kernel with one region has nothing to tell apart."""
    lines = line_map(em.spec, em.isa)
    regs = code_regions(em.isa, em.classes, lines.lines, getattr(em.spec, "source", "") or "")
    if len(regs) < 2:
        out.regions_note = "one code region (no loop): the per-region analysis is the kernel's"
        return out
    out.regions_note = (
        "source lines from NVRTC -lineinfo + nvdisasm -g"
        if lines.lines
        else f"regions named by SASS address ({lines.status})"
    )
    d = tuple(int(v) for v in D)
    base = out.cycles
    step = out.step
    for reg in regs:
        rs = RegionSensitivity(reg)
        for r in resources:
            rs.elasticity[r] = {}
            for kind in KINDS:
                up = em.cycles(d, j, region=RegionScale(reg.ops, r, kind, 1.0 + step))
                down = em.cycles(d, j, region=RegionScale(reg.ops, r, kind, 1.0 - step))
                rs.elasticity[r][kind] = round((up - down) / (2.0 * step * base), 4)
        out.regions.append(rs)
    return out


def format_sensitivity(s: Sensitivity, top: int = 6) -> str:
    """The headline, what the named resources are, the largest elasticities, and the per-region
    analysis where it ran, one per line."""
    lines = [s.headline()]
    named = [s.bottleneck] if s.stands_out else [r for r, _ in s.per_resource()[:2]]
    lines += [f"  {s.meaning(r)}" for r in named]
    lines.append(
        f"  sensitivities ΔT/T per ±{s.step:.0%} of each parameter (block {s.block}, D {s.D}):"
    )
    width = max(len(s.name(r)) for r, _, _ in s.ranked()[:top]) if s.elasticity else 6
    for r, kind, e in s.ranked()[:top]:
        label = "latency" if kind == "lat" else "gap"
        lines.append(f"    {s.name(r):{width}s} {label:8s} {e if abs(e) >= 5e-4 else 0.0:6.3f}")
    if s.regions:
        lines.append(
            f"  by code region (ΔT/T of the kernel per ±{s.step:.0%} of one parameter in one "
            f"region; {s.regions_note}):"
        )
        for rs in s.regions:
            r, k, e = rs.top()
            label = "latency" if k == "lat" else "gap"
            lines.append(f"    {rs.region.label()}")
            lines.append(
                f"      largest: {s.name(r)} {label} {e:.3f}"
                if e >= 5e-4
                else "      no parameter of this region moves the kernel's time"
            )
        head = s.region_headline()
        if head:
            lines.append(head)
    elif s.regions_note:
        lines.append(f"  {s.regions_note}")
    return "\n".join(lines)


__all__ = [
    "REGION_RESOURCES",
    "STEP",
    "RegionSensitivity",
    "Sensitivity",
    "analyse",
    "analyse_regions",
    "format_sensitivity",
]
