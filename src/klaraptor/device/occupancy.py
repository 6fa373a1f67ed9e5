"""Theoretical occupancy, following NVIDIA's `cuda_occupancy.h` (CUDA 12) limit by limit.

Active blocks per SM = min(warp limit, register limit, shared-memory limit, block limit):

* warps: ``floor(max_warps_per_sm / ceil(threads / 32))``, 0 if ``threads > max_threads_per_block``;
* registers: each warp gets ``ceil(regs * 32 / 256) * 256`` registers; the register file is split
  over 4 sub-partitions, so ``floor(floor(regs_per_sm / 4) / regs_per_warp) * 4`` warps fit, i.e.
  that many warps divided (floor) by the block's warps. The launch is impossible (0) if
  ``regs > 256`` or the block's registers, with its warps rounded up to a multiple of 4 (the
  hardware check), exceed ``regs_per_block``;
* shared memory: a block allocates ``ceil((smem + reserved) / unit) * unit`` bytes (unit 256 B on
  7.x, 128 B on 8.x/9.0; 1 KB reserved per block on 8.0+), and ``floor(smem_per_sm / allocation)``
  blocks fit. It is 0 if ``smem`` exceeds the per-block limit;
* blocks: the per-SM block limit of the architecture.

``smem_per_sm`` is the shared-memory carveout. By default (what
``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` uses) it is the whole shared memory of the SM.
A preference given in bytes is aligned up to a supported carveout size, and if a block's
allocation does not fit in it the next supported size that fits is used, as in the header.

The per-block shared-memory limit is the opt-in maximum by default (the launcher raises
``cudaFuncAttributeMaxDynamicSharedMemorySize`` when a launch needs it); pass
``smem_per_block=arch.smem_per_block`` to model a function whose attribute is left at its default.
The block-barrier limit of 9.0 is not modelled: it binds only for more than two barriers per block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from klaraptor.core.errors import KlaraptorError
from klaraptor.program import Expr, Program, ceil, floor, minimum, var, where

__all__ = [
    "ARCHS",
    "HW_INPUTS",
    "ArchParams",
    "active_blocks_per_sm",
    "arch_params",
    "hw_values",
    "occupancy_limits",
    "occupancy_program",
]

_KB = 1024


@dataclass(frozen=True)
class ArchParams:
    """Occupancy-relevant architecture parameters of one compute capability."""

    cc: tuple[int, int]
    max_threads_per_sm: int
    max_blocks_per_sm: int
    smem_alloc_unit: int
    smem_reserved_per_block: int
    smem_per_sm: int  # bytes of shared memory per SM (the largest carveout)
    smem_per_block_optin: int  # the largest static + dynamic shared memory of one block
    smem_carveouts_kb: tuple[int, ...]  # supported carveout sizes, ascending
    smem_per_block: int = 48 * _KB  # the default per-block limit (no opt-in)
    warp_size: int = 32
    max_threads_per_block: int = 1024
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    reg_alloc_unit: int = 256
    max_regs_per_thread: int = 256
    sub_partitions: int = 4

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def hw_inputs(
        self, *, smem_per_sm: int | None = None, smem_per_block: int | None = None
    ) -> dict[str, float]:
        """Values for the ``hw_*`` inputs of `occupancy_program` (see `HW_INPUTS`)."""
        return {
            "hw_warp_size": float(self.warp_size),
            "hw_max_threads_per_block": float(self.max_threads_per_block),
            "hw_max_threads_per_sm": float(self.max_threads_per_sm),
            "hw_max_blocks_per_sm": float(self.max_blocks_per_sm),
            "hw_regs_per_sm": float(self.regs_per_sm),
            "hw_regs_per_block": float(self.regs_per_block),
            "hw_reg_alloc_unit": float(self.reg_alloc_unit),
            "hw_max_regs_per_thread": float(self.max_regs_per_thread),
            "hw_sub_partitions": float(self.sub_partitions),
            "hw_smem_alloc_unit": float(self.smem_alloc_unit),
            "hw_reserved_smem": float(self.smem_reserved_per_block),
            "hw_smem_per_sm": float(self.carveout(smem_per_sm)),
            # A block can never use more than the opt-in maximum, whatever its attribute says.
            "hw_smem_per_block": float(
                min(self.smem_per_block_optin, smem_per_block or self.smem_per_block_optin)
            ),
        }

    def carveout(self, preference: int | None) -> int:
        """The carveout in bytes for a preference in bytes (None: the default, all of it)."""
        if preference is None:
            return self.smem_per_sm
        for kb in self.smem_carveouts_kb:
            if preference <= kb * _KB:
                return kb * _KB
        raise KlaraptorError(
            f"a shared-memory carveout of {preference} B exceeds the {self.smem_per_sm} B of CC {self.cc}"
        )


_VOLTA_AMPERE_CARVEOUTS = (0, 8, 16, 32, 64)
ARCHS: dict[tuple[int, int], ArchParams] = {
    (7, 0): ArchParams(
        (7, 0), 2048, 32, 256, 0, 96 * _KB, 96 * _KB, (*_VOLTA_AMPERE_CARVEOUTS, 96)
    ),
    (7, 5): ArchParams((7, 5), 1024, 16, 256, 0, 64 * _KB, 64 * _KB, (32, 64)),
    (8, 0): ArchParams(
        (8, 0), 2048, 32, 128, _KB, 164 * _KB, 163 * _KB, (*_VOLTA_AMPERE_CARVEOUTS, 100, 132, 164)
    ),
    (8, 6): ArchParams(
        (8, 6), 1536, 16, 128, _KB, 100 * _KB, 99 * _KB, (*_VOLTA_AMPERE_CARVEOUTS, 100)
    ),
    (8, 9): ArchParams(
        (8, 9), 1536, 24, 128, _KB, 100 * _KB, 99 * _KB, (*_VOLTA_AMPERE_CARVEOUTS, 100)
    ),
    (9, 0): ArchParams(
        (9, 0),
        2048,
        32,
        128,
        _KB,
        228 * _KB,
        227 * _KB,
        (*_VOLTA_AMPERE_CARVEOUTS, 100, 132, 164, 196, 228),
    ),
}

HW_INPUTS: tuple[str, ...] = tuple(ARCHS[(9, 0)].hw_inputs())


def arch_params(cc: tuple[int, int] | str | float) -> ArchParams:
    """The parameters of a compute capability given as ``(9, 0)``, ``"9.0"`` or ``9.0``."""
    key: Any = cc
    if isinstance(cc, str | float):
        major, _, minor = str(cc).partition(".")
        key = (int(major), int(minor or 0)) if major.isdigit() and (minor or "0").isdigit() else cc
    try:
        return ARCHS[tuple(key)]  # type: ignore[arg-type]
    except (KeyError, TypeError):
        supported = ", ".join(f"{a}.{b}" for a, b in ARCHS)
        raise KlaraptorError(
            f"unsupported compute capability {cc!r} (supported: {supported})"
        ) from None


def _ints(x: Any, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a != np.floor(a)) or np.any(a < 0):
        raise KlaraptorError(f"{what} must be non-negative integers, got {x!r}")
    return a.astype(np.int64)


def occupancy_limits(
    threads: Any,
    regs_per_thread: Any,
    smem_bytes: Any,
    cc: tuple[int, int] | str | float,
    *,
    smem_per_sm: int | None = None,
    smem_per_block: int | None = None,
) -> dict[str, np.ndarray]:
    """Blocks per SM allowed by each resource: ``warps``, ``regs``, ``smem`` and ``blocks``
    (int64 arrays broadcast together; a limit of 0 means the block cannot launch at all).
    ``smem_bytes`` is the block's static plus dynamic shared memory."""
    arch = arch_params(cc)
    t = _ints(threads, "threads per block")
    r = _ints(regs_per_thread, "registers per thread")
    s = _ints(smem_bytes, "shared memory bytes")
    t, r, s = np.broadcast_arrays(t, r, s)
    big = np.iinfo(np.int64).max // 4  # stands for the header's INT_MAX ("no limit")
    warps = -(-t // arch.warp_size)
    safe_warps = np.maximum(warps, 1)

    lim_warps = np.where(
        (t >= 1) & (t <= arch.max_threads_per_block), arch.max_warps_per_sm // safe_warps, 0
    )

    unit = arch.reg_alloc_unit
    regs_warp = -(-(r * arch.warp_size) // unit) * unit
    assumed = regs_warp * (-(-warps // arch.sub_partitions) * arch.sub_partitions)
    regs_ok = (
        (r <= arch.max_regs_per_thread)
        & (assumed <= arch.regs_per_block)
        & (regs_warp * warps <= arch.regs_per_block)
    )
    per_sub = (arch.regs_per_sm // arch.sub_partitions) // np.maximum(regs_warp, 1)
    lim_regs = np.where(
        regs_ok, np.where(regs_warp > 0, per_sub * arch.sub_partitions // safe_warps, big), 0
    )

    limit_block = arch.smem_per_block_optin if smem_per_block is None else smem_per_block
    alloc = -(-(s + arch.smem_reserved_per_block) // arch.smem_alloc_unit) * arch.smem_alloc_unit
    pref = arch.carveout(smem_per_sm)
    sizes = np.array([kb * _KB for kb in arch.smem_carveouts_kb], dtype=np.int64)
    # A block that does not fit the preferred carveout gets the next carveout size that fits.
    aligned = sizes[np.minimum(np.searchsorted(sizes, alloc), len(sizes) - 1)]
    per_sm = np.where(pref >= alloc, pref, aligned)
    fits = (s <= limit_block) & (s <= arch.smem_per_block_optin)
    lim_smem = np.where(fits, np.where(alloc > 0, per_sm // np.maximum(alloc, 1), big), 0)

    lim_blocks = np.full(t.shape, arch.max_blocks_per_sm, dtype=np.int64)
    return {"warps": lim_warps, "regs": lim_regs, "smem": lim_smem, "blocks": lim_blocks}


def active_blocks_per_sm(
    threads: Any,
    regs_per_thread: Any,
    smem_bytes: Any,
    cc: tuple[int, int] | str | float,
    *,
    smem_per_sm: int | None = None,
    smem_per_block: int | None = None,
) -> np.ndarray:
    """Active blocks per SM (int64, vectorised; 0 where the block cannot launch), as
    ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` computes it. See `occupancy_limits`."""
    lim = occupancy_limits(
        threads,
        regs_per_thread,
        smem_bytes,
        cc,
        smem_per_sm=smem_per_sm,
        smem_per_block=smem_per_block,
    )
    return np.minimum.reduce([lim["warps"], lim["regs"], lim["smem"], lim["blocks"]])


def occupancy_program(
    cc: tuple[int, int] | str | float | None = None,
    *,
    name: str = "occupancy",
    smem_per_sm: int | None = None,
    smem_per_block: int | None = None,
) -> Program:
    """Occupancy as a rational program over ``threads``, ``regs`` (per thread) and ``smem``
    (static + dynamic bytes per block).

    With ``cc=None`` the architecture parameters are the named inputs `HW_INPUTS` (``hw_*``, values
    from `ArchParams.hw_inputs`); with a ``cc`` they are bound as constants. Outputs:
    ``active_blocks`` (primary), ``active_warps``, ``occupancy`` (active warps / max warps) and
    the per-resource limits ``limit_warps``, ``limit_regs``, ``limit_smem``.

    ``hw_smem_per_sm`` is the carveout in effect; the program assumes every launchable block fits
    in it, which always holds for the default carveout (a smaller preference is modelled exactly
    only by `active_blocks_per_sm`).
    """
    hw: dict[str, Expr] = {n: var(n) for n in HW_INPUTS}
    inputs = ["threads", "regs", "smem"]
    if cc is None:
        inputs += list(HW_INPUTS)
    else:
        values = arch_params(cc).hw_inputs(smem_per_sm=smem_per_sm, smem_per_block=smem_per_block)
        hw = {n: Expr("const", (), v) for n, v in values.items()}
    t, r, s = var("threads"), var("regs"), var("smem")
    warps, regs_warp, alloc = var("warps"), var("regs_per_warp"), var("smem_alloc")
    lim_w, lim_r, lim_s = var("limit_warps"), var("limit_regs"), var("limit_smem")
    sub = hw["hw_sub_partitions"]
    assignments = [
        ("warps", ceil(t / hw["hw_warp_size"])),
        ("max_warps", floor(hw["hw_max_threads_per_sm"] / hw["hw_warp_size"])),
        (
            "limit_warps",
            where(
                (t >= 1) & (t <= hw["hw_max_threads_per_block"]),
                floor(var("max_warps") / warps),
                0,
            ),
        ),
        (
            "regs_per_warp",
            ceil(r * hw["hw_warp_size"] / hw["hw_reg_alloc_unit"]) * hw["hw_reg_alloc_unit"],
        ),
        (
            "regs_ok",
            (r <= hw["hw_max_regs_per_thread"])
            # The hardware check rounds the block's warps up to whole sub-partition sets.
            & (regs_warp * (ceil(warps / sub) * sub) <= hw["hw_regs_per_block"])
            & (regs_warp * warps <= hw["hw_regs_per_block"]),
        ),
        (
            "limit_regs",
            where(
                var("regs_ok"),
                # No registers: no register limit (the block limit still applies).
                where(
                    regs_warp > 0,
                    floor(floor(floor(hw["hw_regs_per_sm"] / sub) / regs_warp) * sub / warps),
                    hw["hw_max_blocks_per_sm"],
                ),
                0,
            ),
        ),
        (
            "smem_alloc",
            ceil((s + hw["hw_reserved_smem"]) / hw["hw_smem_alloc_unit"])
            * hw["hw_smem_alloc_unit"],
        ),
        (
            "limit_smem",
            where(
                s <= hw["hw_smem_per_block"],
                where(alloc > 0, floor(hw["hw_smem_per_sm"] / alloc), hw["hw_max_blocks_per_sm"]),
                0,
            ),
        ),
        ("active_blocks", minimum(lim_r, lim_s, lim_w, hw["hw_max_blocks_per_sm"])),
        ("active_warps", var("active_blocks") * warps),
        ("occupancy", var("active_warps") / var("max_warps")),
    ]
    outputs = [
        "active_blocks",
        "active_warps",
        "occupancy",
        "limit_warps",
        "limit_regs",
        "limit_smem",
    ]
    return Program(name, inputs, assignments, outputs)


def hw_values(
    cc: tuple[int, int] | str | float, overrides: Mapping[str, float] | None = None
) -> dict[str, float]:
    """`ArchParams.hw_inputs` of ``cc`` with some ``hw_*`` values replaced (e.g. from a device query)."""
    values = arch_params(cc).hw_inputs()
    for k, v in (overrides or {}).items():
        if k not in values:
            raise KlaraptorError(
                f"unknown occupancy hardware parameter {k!r} (known: {', '.join(values)})"
            )
        values[k] = float(v)
    return values
