"""The GPU-free part of a build, run on the workers of a Dask cluster, before GPU time is spent.

`preflight(spec, sizes, client=..., store=..., device=...)` plans the points on the client, then
every worker that gets a chunk plans those sizes again (admissible and launchable on `device`:
the same blocks, grids and dynamic shared memory) and builds each size's launch arguments with
the spec's factory, as the timing worker will (same seed). Each point's result is a store row
of kind 'preflight' (the arguments' SHA-1 and size, or why it failed), written by the client in
one transaction per chunk, so an interrupted preflight resumes where it stopped. Sizes whose
arguments differ between workers are reported: the factory is not reproducible, and points
timed on different workers would not run on the same data.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from klaraptor.collect.collector import CollectOptions, _check_fingerprint, _register, plan_points
from klaraptor.collect.dask import tasks
from klaraptor.collect.dask.executor import DaskExecutor, DistributedStats, check_transportable
from klaraptor.collect.worker import Point
from klaraptor.core.types import Block, DataSize
from klaraptor.space.configspace import ConfigSpace
from klaraptor.store import Measurement, Store

if TYPE_CHECKING:
    from klaraptor.device.profile import DeviceProfile
    from klaraptor.spec import KernelSpec

PREFLIGHT = "preflight"


@dataclass
class PreflightReport:
    """What one `preflight` call did: counts per status ('ok', 'failed', 'skipped' for points
    already checked, 'rejected' by the client's plan), the failures, the arguments' SHA-1s per
    size over every stored check, and the executor's statistics."""

    kernel: str
    device: str
    points: int
    counts: dict[str, int]
    failures: list[tuple[DataSize, Block, str]] = field(default_factory=list)
    args_sha1: dict[DataSize, set[str]] = field(default_factory=dict)
    wall_s: float = 0.0
    stats: DistributedStats = field(default_factory=DistributedStats)

    @property
    def irreproducible(self) -> list[DataSize]:
        """Sizes whose arguments came out different on different checks."""
        return [d for d, shas in self.args_sha1.items() if len(shas) > 1]

    def format(self) -> str:
        c = self.counts
        lines = [
            f"Preflight of {self.kernel} for {self.device}: {self.points} points, "
            f"{c.get('ok', 0)} ok, {c.get('failed', 0)} failed, {c.get('skipped', 0)} "
            f"already checked, {c.get('rejected', 0)} refused by the plan, in {self.wall_s:.1f} s"
        ]
        for addr, per in sorted(self.stats.per_worker.items()):
            lines.append(f"  {addr}: {per['points']} points in {per['chunks']} chunks")
        if self.stats.lost_workers:
            lines.append(
                f"  workers lost: {', '.join(self.stats.lost_workers)} "
                f"({self.stats.requeued_points} points queued again)"
            )
        for d in self.irreproducible:
            lines.append(f"  arguments of D={d} differ between checks: make_args is not seeded")
        for d, b, why in self.failures:
            lines.append(f"  failed D={d} block={b}: {why}")
        return "\n".join(lines)


def preflight(
    spec: KernelSpec,
    sizes: Iterable[Any],
    *,
    store: Store,
    device: DeviceProfile,
    client: Any = None,
    executor: DaskExecutor | None = None,
    space: ConfigSpace | None = None,
    seed: int = 0,
) -> PreflightReport:
    """Run the GPU-free checks of a build of `spec` at `sizes` on a Dask cluster (see the
    module docstring); `client` (a distributed.Client) or `executor` says where."""
    t0 = time.perf_counter()
    if executor is None:
        executor = DaskExecutor(client, device=device)
    sizes_d = [spec.size(s) for s in sizes]
    space = space or ConfigSpace.for_spec(spec)
    check_transportable(spec)
    _check_fingerprint(store, spec, CollectOptions())
    _register(store, spec)
    done = store.measured_configs(spec.name, device.key, PREFLIGHT)
    plan = plan_points(spec, sizes_d, space, None, device, done)
    report = PreflightReport(
        spec.name,
        device.key,
        len(plan.points),
        {"ok": 0, "failed": 0, "skipped": plan.skipped, "rejected": len(plan.rejected)},
        stats=executor.stats,
    )
    by_id = {p.id: p for p in plan.points}

    def handle(addr: str, fresh: Sequence[Point], answer: dict[str, Any]) -> None:
        ids = {p.id for p in fresh}
        where = executor.collected_by(addr)
        rows = []
        for r in answer["results"]:
            if r.id not in ids:
                continue
            p = by_id[r.id]
            value = {**r.value, "collected_by": where}
            rows.append(
                Measurement(
                    spec.name,
                    device.key,
                    p.D,
                    p.block,
                    PREFLIGHT,
                    r.status,
                    value,
                    r.reason,
                    params=p.params,
                )
            )
            report.counts[r.status] = report.counts.get(r.status, 0) + 1
            if r.status != "ok":
                report.failures.append((p.D, p.block, r.reason))
        store.put_measurements(rows)  # one transaction per chunk

    executor.run_chunks(
        tasks.preflight_chunk,
        spec,
        plan.todo,
        (device.to_dict(), space, int(seed)),
        handle,
        need_gpu=False,
        label="preflight",
    )
    for m in store.measurements(spec.name, device.key, PREFLIGHT, "ok"):
        report.args_sha1.setdefault(m.D, set()).add(str(m.value.get("args_sha1")))
    report.wall_s = time.perf_counter() - t0
    return report
