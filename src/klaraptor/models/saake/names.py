"""SAAKE's resources as a CUDA programmer names them, with one line saying what each means.

The emulator's resource keys (`ops.RESOURCES`) stay as they are in files and code; `explain` and
`klaraptor demo` print these names. One resource needs the kernel to name it: `smem` is the SM's
L1 / shared-memory data pipe, which every global load and store also passes (one wavefront a
cycle). A kernel with no shared-memory instruction is limited by its L1 cache path, so it is
named `l1`; one whose pipe demand is all shared-memory accesses `shared_memory`; a mix
`l1_shared` (`smem_name`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResourceName:
    """How `explain` prints a resource: a short name and one line saying what it is."""

    name: str
    meaning: str


NAMES: dict[str, ResourceName] = {
    "fp32": ResourceName("fp32", "single-precision arithmetic (FFMA, FADD, FMUL) on the FMA pipe"),
    "imad": ResourceName(
        "int_multiply", "integer multiply-add (IMAD, IMUL): index and address arithmetic"
    ),
    "alu": ResourceName(
        "int_alu", "integer add, compare, logic, shift, select and move instructions (ALU pipe)"
    ),
    "fp64": ResourceName("fp64", "double-precision arithmetic (DFMA, DADD, DMUL)"),
    "sfu": ResourceName(
        "special_functions",
        "the special-function unit: exp, log, sqrt, rsqrt, 1/x, sin/cos and int/float "
        "conversions (MUFU)",
    ),
    "issue": ResourceName(
        "instruction_issue",
        "the warp schedulers: each issues one warp instruction a cycle, so the instruction "
        "count itself limits",
    ),
    "l2": ResourceName("l2", "the L2 cache: the loads and stores that leave the SM (L1 misses)"),
    "dram": ResourceName("dram", "device memory (HBM): the traffic that misses the L2"),
    "launch": ResourceName(
        "block_launch",
        "the GPU's block dispatcher (about 0.6 ns a block on the H200) and the launch's fixed "
        "cost: many small blocks with little work each",
    ),
}
SMEM_NAMES: dict[str, ResourceName] = {
    "global": ResourceName(
        "l1",
        "the SM's L1 cache path: every global load and store passes it, one 32-B sector slot a "
        "cycle (strided or scattered accesses take several); this kernel uses no shared memory",
    ),
    "shared": ResourceName(
        "shared_memory",
        "shared-memory accesses on the SM's L1/shared pipe, one bank word a cycle (bank "
        "conflicts take several)",
    ),
    "both": ResourceName(
        "l1_shared",
        "the SM's L1 / shared-memory pipe: shared-memory accesses and every global load and "
        "store pass it",
    ),
}
# Shares of the pipe's demand below this count as absent when naming it.
_MINOR = 0.05


def smem_kind(shared_share: float | None) -> str:
    """ "global", "shared" or "both" from the share of the L1/shared pipe's demand that comes from
    shared-memory instructions (None: unknown, named as both)."""
    if shared_share is None:
        return "both"
    if shared_share < _MINOR:
        return "global"
    if shared_share > 1.0 - _MINOR:
        return "shared"
    return "both"


def resource_name(resource: str, shared_share: float | None = None) -> ResourceName:
    """The name and meaning of a SAAKE resource (`shared_share`: see `smem_kind`)."""
    if resource == "smem":
        return SMEM_NAMES[smem_kind(shared_share)]
    return NAMES.get(resource, ResourceName(resource, resource))


__all__ = ["NAMES", "SMEM_NAMES", "ResourceName", "resource_name", "smem_kind"]
