"""ConfigSpace: the candidate thread-block shapes, their constraints and launch feasibility.

Defaults (DESIGN.md):
- 1D: (t, 1, 1) for t = 32, 64, …, max_threads (multiples of 32);
- 2D: (bx, by, 1) with bx, by powers of two and bx·by in [32, max_threads];
- 3D: (bx, by, bz) with bx, by, bz powers of two and bx·by·bz in [32, max_threads].
Every default respects CUDA's per-dimension block limits (1024, 1024, 64).

Candidates are kept in one deterministic order: by thread count ascending, then bx descending,
then by descending (so among equal thread counts the widest-in-x, best-coalesced shape comes
first). Selection ties therefore resolve the same way on every machine.

Three successive filters, each recording why a block was dropped:
1. `admissible(D)`: the spec's and the user's constraints for data D;
2. `filter_launchable(...)`: everything the device would refuse at launch (threads, block dims,
   registers, shared memory, grid dims), decided before any launch;
3. the rest is measured. `dry_run` shows the whole plan without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from klaraptor.core.errors import SpecError
from klaraptor.core.types import (
    BLOCK_VARS,
    Block,
    Config,
    DataSchema,
    DataSize,
    Grid,
    KernelAttributes,
    ParamValues,
)
from klaraptor.spec import Constraint, KernelSpec
from klaraptor.spec.expressions import constraint_masks, parse_constraints

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile

# CUDA's per-dimension block limits (all architectures since sm_20).
CUDA_MAX_BLOCK_DIM: Block = (1024, 1024, 64)
CUDA_MAX_THREADS = 1024
MIN_DEFAULT_THREADS = 32  # below one warp a block wastes lanes on every SM


@dataclass(frozen=True)
class PlannedPoint:
    """One (D, configuration) of a plan: 'measure', or 'rejected' with the reason. `params`
    is the compiled variant (none without program parameters)."""

    D: DataSize
    block: Block
    status: str
    reason: str = ""
    grid: Grid | None = None
    dynamic_smem: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    params: ParamValues = ParamValues.NONE

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def config(self) -> Config:
        return Config(self.params, self.block)


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def default_candidates(dim: int, max_threads: int = CUDA_MAX_THREADS) -> list[Block]:
    """The default block shapes of DESIGN.md for dimensionality `dim`, in canonical order."""
    if dim not in (1, 2, 3):
        raise SpecError(f"ConfigSpace: dim must be 1, 2 or 3, got {dim!r}")
    if max_threads < MIN_DEFAULT_THREADS:
        raise SpecError(f"ConfigSpace: max_threads {max_threads} is below one warp (32)")
    lx, ly, lz = CUDA_MAX_BLOCK_DIM
    out: list[Block] = []
    if dim == 1:
        out = [(t, 1, 1) for t in range(32, min(max_threads, lx) + 1, 32)]
    elif dim == 2:
        out = [
            (bx, by, 1)
            for bx in _pow2_upto(lx)
            for by in _pow2_upto(ly)
            if MIN_DEFAULT_THREADS <= bx * by <= max_threads
        ]
    else:
        out = [
            (bx, by, bz)
            for bx in _pow2_upto(lx)
            for by in _pow2_upto(ly)
            for bz in _pow2_upto(lz)
            if MIN_DEFAULT_THREADS <= bx * by * bz <= max_threads
        ]
    return sorted(out, key=block_order)


def block_order(b: Block) -> tuple[int, int, int, int]:
    """Sort key of the canonical candidate order: threads ↑, then bx ↓, by ↓, bz ↓."""
    return (b[0] * b[1] * b[2], -b[0], -b[1], -b[2])


def _as_block(b: Any, dim: int, where: str) -> Block:
    """A block from an int or a 1-3 tuple (missing dims are 1), checked against `dim`."""
    if isinstance(b, (int, np.integer)) and not isinstance(b, bool):
        t: tuple[Any, ...] = (int(b),)
    elif isinstance(b, Sequence) and not isinstance(b, str) and 1 <= len(b) <= 3:
        t = tuple(b)
    else:
        raise SpecError(f"ConfigSpace {where}: {b!r} is not a block shape (bx, by, bz)")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in t):
        raise SpecError(f"ConfigSpace {where}: {b!r} must hold integers")
    blk = tuple(int(v) for v in t) + (1,) * (3 - len(t))
    if any(v < 1 for v in blk):
        raise SpecError(f"ConfigSpace {where}: {b!r} has a dimension < 1")
    if any(v != 1 for v in blk[dim:]):
        raise SpecError(
            f"ConfigSpace {where}: {blk} uses dimensions beyond dim={dim} (they must be 1)"
        )
    return blk  # type: ignore[return-value]


class ConfigSpace:
    """The candidate blocks of one kernel, with user edits and constraints.

    `candidates` replaces the defaults, `add` / `remove` edit them; `constraints` are extra
    conditions (expressions over data names and bx, by, bz, or callables (D, block) -> bool)
    applied together with the spec's own constraints in `admissible`.
    """

    def __init__(
        self,
        dim: int,
        *,
        max_threads: int = CUDA_MAX_THREADS,
        candidates: Iterable[Any] | None = None,
        add: Iterable[Any] = (),
        remove: Iterable[Any] = (),
        constraints: Iterable[Constraint] = (),
        spec: KernelSpec | None = None,
    ) -> None:
        if dim not in (1, 2, 3) or isinstance(dim, bool):
            raise SpecError(f"ConfigSpace: dim must be 1, 2 or 3, got {dim!r}")
        if spec is not None and spec.dim != dim:
            raise SpecError(
                f"ConfigSpace: dim {dim} differs from spec {spec.name!r}'s dim {spec.dim}"
            )
        self.dim = dim
        self.max_threads = int(max_threads)
        self.spec = spec
        if candidates is None:
            base = default_candidates(dim, self.max_threads)
        else:
            base = [_as_block(b, dim, "candidates") for b in candidates]
        added = [_as_block(b, dim, "add") for b in add]
        removed = {_as_block(b, dim, "remove") for b in remove}
        blocks = {b for b in [*base, *added] if b not in removed}
        if not blocks:
            raise SpecError("ConfigSpace: no candidate blocks left (check candidates/add/remove)")
        self._candidates: tuple[Block, ...] = tuple(sorted(blocks, key=block_order))
        self.user_constraints: tuple[Constraint, ...] = tuple(constraints)
        # Parse user constraints now when the names are known, so typos fail at construction.
        self._parsed_user: dict[tuple[str, ...], tuple[tuple[str, Any], ...]] = {}
        if spec is not None:
            self._user_items(spec.data_names)

    @classmethod
    def for_spec(
        cls, spec: KernelSpec, max_threads: int = CUDA_MAX_THREADS, **kw: Any
    ) -> ConfigSpace:
        """The space of a spec: its dim, its constraints, its grid and shared-memory formulas."""
        return cls(spec.dim, max_threads=max_threads, spec=spec, **kw)

    # -- the candidate list ---------------------------------------------------------------------

    @property
    def candidates(self) -> tuple[Block, ...]:
        """All candidate blocks in canonical order (threads ↑, bx ↓, by ↓, bz ↓)."""
        return self._candidates

    def __len__(self) -> int:
        return len(self._candidates)

    def __iter__(self) -> Iterator[Block]:
        return iter(self._candidates)

    def __contains__(self, block: object) -> bool:
        return block in self._candidates

    def __repr__(self) -> str:
        owner = f" for {self.spec.name!r}" if self.spec else ""
        return f"ConfigSpace(dim={self.dim}, {len(self)} candidates{owner})"

    def arrays(
        self, blocks: Sequence[Block] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """bx, by, bz as int64 arrays (of the candidates, or of `blocks`)."""
        b = np.asarray(self._candidates if blocks is None else list(blocks), dtype=np.int64)
        b = b.reshape(-1, 3)
        return b[:, 0], b[:, 1], b[:, 2]

    # -- constraints ------------------------------------------------------------------------------

    def _user_items(self, data_names: Sequence[str]) -> tuple[tuple[str, Any], ...]:
        key = tuple(data_names)
        if key not in self._parsed_user:
            params = self.spec.param_names if self.spec is not None else ()
            allowed = (*key, *params, *BLOCK_VARS)
            self._parsed_user[key] = parse_constraints(
                self.user_constraints, allowed, "ConfigSpace user constraints"
            )
        return self._parsed_user[key]

    def _data(self, D: Any, spec: KernelSpec | None) -> DataSize:
        if spec is not None:
            return spec.size(D)
        if type(D) is DataSize:
            return D
        if not isinstance(D, Mapping):
            raise SpecError("ConfigSpace without a spec needs D as a mapping {name: value}")
        return DataSchema(tuple(str(k) for k in D)).parse(D)

    def admissible(
        self,
        D: Mapping[str, Any] | Sequence[Any] | int,
        blocks: Sequence[Block] | None = None,
        *,
        spec: KernelSpec | None = None,
        params: ParamValues | None = None,
    ) -> tuple[list[Block], list[tuple[Block, str]]]:
        """(blocks satisfying every constraint for D, [(block, reason)] for the others); for a
        kernel with program parameters, of the compiled variant `params`."""
        spec = spec or self.spec
        d = self._data(D, spec)
        blocks = list(self._candidates if blocks is None else blocks)
        if not blocks:
            return [], []
        items = list(spec.constraint_items()) if spec is not None else []
        items += list(self._user_items(d.names))
        if not items:
            return blocks, []
        bx, by, bz = self.arrays(blocks)
        env: dict[str, Any] = {
            **dict(d.items()),
            **dict(params or {}),
            "bx": bx,
            "by": by,
            "bz": bz,
        }
        masks = constraint_masks(items, env)
        ok: list[Block] = []
        rejected: list[tuple[Block, str]] = []
        for i, b in enumerate(blocks):
            failing = [label for label, m in masks if not m[i]]
            if failing:
                rejected.append((b, "constraint " + ", ".join(failing) + " is false"))
            else:
                ok.append(b)
        return ok, rejected

    # -- launch feasibility -----------------------------------------------------------------------

    def filter_launchable(
        self,
        blocks: Sequence[Block],
        D: Mapping[str, Any] | Sequence[Any] | int,
        attrs: KernelAttributes | None,
        device: DeviceProfile,
        *,
        spec: KernelSpec | None = None,
        params: ParamValues | None = None,
    ) -> tuple[list[Block], list[tuple[Block, str]]]:
        """Split blocks into (launchable, [(block, reason)]) WITHOUT launching anything (for a
        kernel with program parameters: of the compiled variant `params`, whose `attrs`).

        A block is refused when its threads exceed the function's register-limited
        max_threads_per_block or the device limit, a dimension exceeds the device's block dims,
        registers × threads exceed the registers per block, static + dynamic shared memory exceeds
        the per-block limit (48 KB unless the kernel opted in, then the opt-in maximum) or the
        function's max dynamic shared memory, or the spec's grid for D is not launchable (not a
        positive integer, or over the device's max grid dims). `attrs=None` skips the
        function-specific checks (no compiled kernel yet, e.g. in a dry run).
        """
        spec = spec or self.spec
        d = self._data(D, spec)
        blocks = list(blocks)
        if not blocks:
            return [], []
        # The spec's formulas run once over all blocks (vectorised), not once per block.
        grids: np.ndarray | None = None
        dyns = np.zeros(len(blocks))
        if spec is not None:
            bx, by, bz = self.arrays(blocks)
            pv = params if spec.params else None
            grids = np.stack(spec.grid_arrays(d, bx, by, bz, pv), axis=-1).reshape(len(blocks), 3)
            dyns = np.asarray(spec.dynamic_smem_arrays(d, bx, by, bz, pv), dtype=np.float64)
            dyns = np.broadcast_to(dyns, (len(blocks),))
        ok: list[Block] = []
        rejected: list[tuple[Block, str]] = []
        for i, b in enumerate(blocks):
            grid = None if grids is None else grids[i]
            reasons = self._launch_problems(b, attrs, device, spec, grid, float(dyns[i]))
            if reasons:
                rejected.append((b, "; ".join(reasons)))
            else:
                ok.append(b)
        return ok, rejected

    def _launch_problems(
        self,
        b: Block,
        attrs: KernelAttributes | None,
        device: DeviceProfile,
        spec: KernelSpec | None,
        grid: np.ndarray | None,
        dyn_value: float,
    ) -> list[str]:
        threads = b[0] * b[1] * b[2]
        why: list[str] = []
        if attrs is not None and threads > attrs.max_threads_per_block:
            why.append(
                f"{threads} threads > the kernel's max_threads_per_block "
                f"{attrs.max_threads_per_block} (register-limited)"
            )
        if threads > device.max_threads_per_block:
            why.append(f"{threads} threads > the device's max {device.max_threads_per_block}")
        for axis, (v, lim) in enumerate(zip(b, device.max_block_dim)):
            if v > lim:
                why.append(f"block {'xyz'[axis]} = {v} > the device's max {lim}")
        if attrs is not None and attrs.num_regs * threads > device.regs_per_block:
            why.append(
                f"{attrs.num_regs} registers × {threads} threads = {attrs.num_regs * threads} "
                f"> {device.regs_per_block} registers per block"
            )
        dyn = 0
        if math.isfinite(dyn_value) and dyn_value >= 0 and dyn_value.is_integer():
            dyn = int(dyn_value)
        else:
            expr = spec.dynamic_smem if spec is not None else None
            why.append(
                f"dynamic_smem {expr!r} gives {dyn_value:g}, not a non-negative integer of bytes"
            )
        static = attrs.static_smem if attrs is not None else 0
        opted_in = attrs is not None and static + attrs.max_dynamic_smem > device.smem_per_block
        limit = device.smem_per_block_optin if opted_in else device.smem_per_block
        if static + dyn > limit:
            kind = "opt-in maximum" if opted_in else "default limit (kernel did not opt in)"
            why.append(
                f"shared memory {static} static + {dyn} dynamic = {static + dyn} B "
                f"> {limit} B per block ({kind})"
            )
        elif attrs is not None and dyn > attrs.max_dynamic_smem:
            why.append(
                f"dynamic shared memory {dyn} B > the kernel's max_dynamic_smem "
                f"{attrs.max_dynamic_smem} B (raise cudaFuncAttributeMaxDynamicSharedMemorySize)"
            )
        if spec is not None and grid is not None:
            for axis, (g, lim) in enumerate(zip(grid.tolist(), device.max_grid_dim)):
                if not (math.isfinite(g) and g >= 1 and float(g).is_integer()):
                    why.append(
                        f"grid[{axis}] = {spec.grid[axis]!r} gives {g:g}, not a positive integer"
                    )
                elif g > lim:
                    why.append(f"grid {'xyz'[axis]} = {int(g)} > the device's max {lim}")
        return why

    # -- dry run ------------------------------------------------------------------------------------

    def variants(self, spec: KernelSpec | None = None) -> list[ParamValues]:
        """The compiled variants of the space's kernel ([ParamValues.NONE] without program
        parameters)."""
        spec = spec or self.spec
        return spec.variants() if spec is not None else [ParamValues.NONE]

    def configs(self, spec: KernelSpec | None = None) -> list[Config]:
        """Every candidate configuration: variant by variant (the spec's order), each with
        every candidate block (canonical order)."""
        return [Config(pv, b) for pv in self.variants(spec) for b in self._candidates]

    def dry_run(
        self,
        spec: KernelSpec | None,
        sizes: Iterable[Mapping[str, Any] | Sequence[Any] | int],
        device: DeviceProfile | None = None,
        attrs: KernelAttributes | Mapping[ParamValues, KernelAttributes] | None = None,
    ) -> list[PlannedPoint]:
        """The collection plan for `sizes`: every (D, configuration) marked 'measure' or
        'rejected'.

        Constraints always apply; device limits apply when `device` is given, function limits
        (registers, static shared memory) when `attrs` is given too (for a kernel with program
        parameters, a mapping of each compiled variant's attributes). Nothing touches a GPU.
        """
        spec = spec or self.spec
        plan: list[PlannedPoint] = []
        for D in sizes:
            d = self._data(D, spec)
            for pv in self.variants(spec):
                a = attrs.get(pv) if isinstance(attrs, Mapping) else attrs
                plan += self._dry_run_variant(spec, d, device, a, pv)
        return plan

    def _dry_run_variant(
        self,
        spec: KernelSpec | None,
        d: DataSize,
        device: DeviceProfile | None,
        attrs: KernelAttributes | None,
        pv: ParamValues,
    ) -> list[PlannedPoint]:
        has_params = spec is not None and bool(spec.params)
        ok, rejected = self.admissible(d, spec=spec, params=pv if has_params else None)
        reasons: dict[Block, str] = dict(rejected)
        if device is not None:
            ok, rej2 = self.filter_launchable(
                ok, d, attrs, device, spec=spec, params=pv if has_params else None
            )
            reasons.update(rej2)
        good = set(ok)
        plan: list[PlannedPoint] = []
        for b in self._candidates:
            if b in good:
                grid: Block | None = None
                dyn = 0
                if spec is not None:
                    try:
                        grid = spec.grid_for(d, b, pv if has_params else None)
                        dyn = spec.dynamic_smem_for(d, b, pv if has_params else None)
                    except SpecError as exc:
                        plan.append(PlannedPoint(d, b, "rejected", str(exc), params=pv))
                        continue
                plan.append(PlannedPoint(d, b, "measure", "", grid, dyn, params=pv))
            else:
                plan.append(PlannedPoint(d, b, "rejected", reasons.get(b, ""), params=pv))
        return plan


def format_dry_run(
    points: Sequence[PlannedPoint],
    *,
    title: str | None = None,
    show_measured: bool = True,
    budgeted: bool = False,
) -> str:
    """The plan as a readable table, one section per data size, with counts. `budgeted`: the
    points are what a budgeted plan may time (it times a part of them), not what it will."""
    lines: list[str] = []
    if title:
        lines += [title, ""]
    by_d: dict[DataSize, list[PlannedPoint]] = {}
    for p in points:
        by_d.setdefault(p.D, []).append(p)
    n_measure = sum(p.status == "measure" for p in points)
    for key, pts in by_d.items():
        dtext = str(key)
        m = sum(p.status == "measure" for p in pts)
        verb = "feasible" if budgeted else "to measure"
        lines.append(f"D: {dtext}  —  {m} {verb}, {len(pts) - m} rejected")
        rows = [p for p in pts if show_measured or p.status != "measure"]
        if rows:
            head = ("block", "threads", "grid", "smem", "status", "reason")
            table = [
                (
                    "×".join(map(str, p.block)) + (f" [{p.params}]" if p.params else ""),
                    str(p.threads),
                    "×".join(map(str, p.grid)) if p.grid else "-",
                    str(p.dynamic_smem) if p.status == "measure" else "-",
                    p.status,
                    p.reason,
                )
                for p in rows
            ]
            widths = [max(len(r[i]) for r in [head, *table]) for i in range(5)]
            fmt = "  " + "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
            lines.append(fmt.format(*head).rstrip())
            lines += [fmt.format(*r).rstrip() for r in table]
        lines.append("")
    if budgeted:
        lines.append(
            f"{n_measure} feasible points over {len(by_d)} sizes; {len(points) - n_measure} "
            "rejected before any launch. The budgeted plan below times all of them at the "
            "largest size, and of the others only as many as its budget allows"
        )
    else:
        lines.append(
            f"{n_measure} points to measure over {len(by_d)} sizes; "
            f"{len(points) - n_measure} rejected before any launch"
        )
    return "\n".join(lines)


def launch_values(
    spec: KernelSpec, d: DataSize, blocks: Sequence[Block], params: ParamValues | None
) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Each block's grid and dynamic shared memory at `d`, the formulas run once over all blocks
    (per block: 0.8 s of a 10,000-point sweep); an invalid entry gets the spec's own error."""
    if not blocks:
        return [], []
    bx, by, bz = (np.asarray(v, dtype=np.int64) for v in zip(*blocks))
    g = np.stack(spec.grid_arrays(d, bx, by, bz, params), axis=1)
    sm = spec.dynamic_smem_arrays(d, bx, by, bz, params)
    with np.errstate(invalid="ignore"):
        good = spec.grid_valid(g[:, 0], g[:, 1], g[:, 2])
        good &= np.isfinite(sm) & (sm >= 0) & (sm == np.floor(sm))
    grids: list[tuple[int, int, int]] = []
    smems: list[int] = []
    for r, v, ok, b in zip(g.tolist(), sm.tolist(), good.tolist(), blocks):
        grids.append((int(r[0]), int(r[1]), int(r[2])) if ok else spec.grid_for(d, b, params))
        smems.append(int(v) if ok else spec.dynamic_smem_for(d, b, params))
    return grids, smems
