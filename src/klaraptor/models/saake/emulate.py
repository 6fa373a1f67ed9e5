"""Abstract kernel emulation (SAAKE, Alg. 1) of the warps resident on one SM, scaled to a grid.

One SM is emulated. Its W resident warps (occupancy × warps per block) are represented by S
sampled warps (S = W up to `max_warps`; past that whole blocks where they fit, each sampled warp
standing for W/S warps), all running the same `Trace`. State, as in Alg. 1:

- per warp: an instruction pointer, the finish time `fin` of every instruction it issued, and
  the earliest time its next instruction may issue (`ready` = the latest `fin` of the
  instructions it depends on, and at least one issue latency after its previous instruction);
- per resource r: `admit[r]`, the earliest time r accepts another request. An instruction issued
  at t starts at max(t, admit[r]) on every resource it uses, finishes `latency` later, and moves
  admit[r] to max(admit[r], t) + gap[r] x demand x weight x W/S (each sampled warp's request
  stands for W/S warps' requests; `weight` is the fraction of warps that run it).

Issue is itself a resource (the SM's four schedulers: gap_issue per warp instruction). The
scheduler is greedy-then-oldest: the warp that issued last keeps issuing while it is ready when
the issue resource is free, else the warp whose next instruction is ready first (the lowest
index on ties). A barrier (BAR.SYNC) holds every warp of its block until all of them reached it
and all their earlier instructions finished (§4.4).

Loops: the trace holds K iterations of each loop; the steady-state period P of a loop is the
mean over warps of the time between the starts of its last two emitted iterations, and the
iterations not emitted add P_own each (P minus the emitted inner iterations' periods), so an
emulation costs the same for N = 512 or N = 8192 ("loop bodies once per trip-count class").
P is at least the busiest resource's cycles for one iteration of every sampled warp: a warp
that never stalls keeps the scheduler (greedy) and runs its iterations back to back while the
others wait, so its own period is its demand alone, not the SM's (poly, a chain of FFMAs
shorter than four warps' issue: P was a quarter of the SM's).

Grid: with M active blocks per SM (occupancy), B blocks and n SMs, full = floor(B / (M n))
waves of M blocks per SM and, if blocks remain, one tail wave with ceil(rest / n) blocks per SM:
T = lat_launch + T_SM(M) + (full - 1) x T_steady + T_SM(tail).

Consecutive waves (`steady_wave_work`): an SM does not wait for the last block of a wave
before starting the next: a block's slot takes a new block as soon as it finishes, so the
blocks on an SM drift out of step and one block's wait on memory is covered by others' work.
The first wave is emulated as it runs (every block starting at once); each later full wave
costs T_steady = B + (1 - rho) x L: B the busiest resource's cycles in the wave, rho = B / T_SM(M)
how busy the emulated wave kept it, L one block's time alone on the SM. A wave its busiest
resource kept busy throughout (rho = 1) costs B; one that waited on latency (rho small) up to
B + L, never more than T_SM(M). The form was chosen on the suites' training sizes only (raw
error 18.3 % -> 17.9 % over the 44 kernels; docs/saake.md).

Busy share: with fewer than n SMs busy (tail or small grids) each gets a larger share of L2
and DRAM bandwidth, but not the whole GPU's: an SM's gap with b of n SMs busy is
gap x g(b) / g(n), g the gap per busy SM measured with b SMs loading (`BusyShare`, the
profile's `l2_gap_by_busy_sms`, `dram_gap_by_busy_sms`; on the H200 a lone SM gets 0.28 of its
all-SM L2 gap, not 1/132). A profile without them scales by b / n.

Block dispatch (`launch`): the GPU starts blocks at a fixed rate, which no instruction uses. An
SM cannot finish a wave of m blocks before it has received them, so T_SM(m) is at least
m x gap_launch (scaled by the busy share, like L2 and DRAM: the dispatcher serves the whole
GPU); its latency is charged once per launch. Grids of many small blocks with little work each
are bound by it (docs/saake.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from klaraptor.models.saake.ops import (
    BARRIER,
    NO_SCATTER,
    RESOURCES,
    MemoryParams,
    R,
    ScatterCost,
    StaticOp,
    op_costs,
    op_tails,
    slowest_extra,
)
from klaraptor.models.saake.trace import Trace

MAX_WARPS = 4
_INF = math.inf
# Resources that serve the whole GPU: with fewer SMs busy, each SM gets a larger share.
SHARE_SCALED: tuple[str, ...] = ("l2", "dram", "launch")


@dataclass(frozen=True)
class BusyShare:
    """How a GPU-wide resource's gap per busy SM scales when only some SMs are busy (module
    docstring): per resource, (busy fraction b / n, gap factor g(b) / g(n)) points, ascending,
    from a measured gap per busy SM g(b). A resource without points scales by b / n."""

    points: tuple[tuple[str, tuple[float, ...], tuple[float, ...]], ...] = ()

    @staticmethod
    def from_measured(
        curves: Mapping[str, Sequence[tuple[int, float]]], sm_count: int
    ) -> BusyShare:
        """From {resource: [(busy SMs, gap per busy SM)]}, normalised at the largest b measured
        (the whole GPU)."""
        out = []
        for res, curve in sorted(curves.items()):
            pts = sorted((int(b), float(g)) for b, g in curve)
            if not pts or pts[-1][1] <= 0:
                continue
            b_full, g_full = pts[-1]
            n = max(sm_count, b_full)
            out.append(
                (
                    res,
                    tuple(b / n for b, _ in pts),
                    tuple(min(g / g_full, 1.0) for _, g in pts),
                )
            )
        return BusyShare(tuple(out))

    def factor(self, resource: str, share: float) -> float:
        """The gap factor of `resource` with a fraction `share` of the SMs busy."""
        if share >= 1.0:
            return 1.0
        for res, xs, ys in self.points:
            if res == resource:
                # Below the fewest SMs measured, the lone SM's factor; never below b / n.
                return max(float(np.interp(share, xs, ys)), share)
        return share


NO_BUSY_SHARE = BusyShare()


@dataclass(frozen=True)
class Params:
    """Latency and gap per resource (arrays indexed like RESOURCES), in SM cycles; what a
    scattered request costs beyond a coalesced one (`ops.ScatterCost`; none without the
    profile's l2_scatter figures); and how the GPU-wide gaps scale with few SMs busy
    (`BusyShare`; b / n without the profile's figures)."""

    lat: np.ndarray
    gap: np.ndarray
    scatter: ScatterCost = NO_SCATTER
    busy: BusyShare = NO_BUSY_SHARE

    @staticmethod
    def from_pairs(
        pairs: dict[str, tuple[float, float]],
        busy: BusyShare = NO_BUSY_SHARE,
        scatter_store_gap: float | None = None,
        dram_scatter_store_gap: float | None = None,
    ) -> Params:
        """`pairs`: (latency, gap) per resource; `scatter_store_gap`, `dram_scatter_store_gap`:
        the gaps of a scattered store in the L2 and through DRAM (none: in the L2 stores are
        charged as scattered loads, through DRAM by their bytes)."""
        scatter = NO_SCATTER
        if "l2_scatter" in pairs:
            scatter = ScatterCost.from_measured(
                pairs["l2"],
                pairs["l2_scatter"],
                pairs.get("dram"),
                pairs.get("dram_scatter"),
                scatter_store_gap,
                dram_scatter_store_gap,
            )
        return Params(
            np.array([pairs[r][0] for r in RESOURCES], dtype=np.float64),
            np.array([pairs[r][1] for r in RESOURCES], dtype=np.float64),
            scatter,
            busy,
        )

    def scaled(self, resource: str, kind: str, factor: float) -> Params:
        """A copy with one resource's latency ("lat") or gap ("gap") multiplied by factor."""
        lat, gap = self.lat.copy(), self.gap.copy()
        (lat if kind == "lat" else gap)[R[resource]] *= factor
        return Params(lat, gap, self.scatter, self.busy)


@dataclass(frozen=True)
class RegionScale:
    """One resource parameter scaled for the instructions of one code region only (SAAKE's
    per-region sensitivity, its Tables 4-5): `ops` the static instruction indices of the region,
    `kind` "lat" or "gap". A gap scales the region's demands on the resource; a latency the
    results of the region's instructions that wait on it (their latency computed with the
    resource's latency scaled; the issue latency between instructions stays global)."""

    ops: frozenset[int]
    resource: str
    kind: str
    factor: float


@dataclass
class SMResult:
    """One emulation of one SM."""

    cycles: float  # emulated time plus the extrapolated loop iterations
    emulated: float  # the emulated trace alone
    periods: dict[str, float] = field(default_factory=dict)  # loop class -> own period
    busy: np.ndarray = field(default_factory=lambda: np.zeros(len(RESOURCES)))  # admitted gaps
    issued: int = 0
    dispatch: float = 0.0  # cycles the dispatcher needs to start this wave's blocks on the SM

    def wave_cycles(self, work: float) -> float:
        """The wave's time when its blocks' work takes `work` cycles: no less than dispatch."""
        return work if work > self.dispatch else self.dispatch


def sampled_warps(active_warps: int, warps_per_block: int, max_warps: int = MAX_WARPS) -> int:
    """How many warps to emulate for `active_warps` resident warps (whole blocks when they fit)."""
    if active_warps <= max_warps:
        return max(active_warps, 1)
    if warps_per_block <= max_warps:
        return warps_per_block * (max_warps // warps_per_block)
    return max_warps


def emulate_sm(
    trace: Trace,
    ops: Sequence[StaticOp],
    params: Params,
    mem: MemoryParams,
    *,
    active_warps: int,
    warps_per_block: int,
    bandwidth_share: float = 1.0,
    max_warps: int = MAX_WARPS,
    access: dict[int, tuple[int, int, int]] | None = None,
    region: RegionScale | None = None,
) -> SMResult:
    """Emulate `active_warps` warps running `trace` on one SM (see the module docstring).

    `bandwidth_share` (<= 1): the fraction of the GPU's SMs busy, which scales the L2, DRAM and
    dispatch gaps (`BusyShare`).
    `region`: one resource parameter scaled for one code region's instructions only.
    """
    n = len(trace)
    if n == 0 or active_warps <= 0:
        return SMResult(0.0, 0.0)
    S = sampled_warps(active_warps, warps_per_block, max_warps)
    scale = active_warps / S
    group = max(1, min(warps_per_block, S))
    gap = params.gap.copy()
    for shared in SHARE_SCALED:
        gap[R[shared]] *= params.busy.factor(shared, bandwidth_share)
    dispatch = float(gap[R["launch"]]) * active_warps / max(warps_per_block, 1)
    lat_op, dem_op = op_costs(ops, params.lat, mem, access, params.scatter)
    lat_pos = lat_op[trace.op]
    amounts = dem_op[trace.op] * (trace.weight[:, None] * scale) * gap[None, :]
    if region is not None:
        inside = np.isin(trace.op, np.fromiter(region.ops, dtype=np.int64))
        if region.kind == "gap":
            amounts[inside, R[region.resource]] *= region.factor
        else:
            scaled = params.scaled(region.resource, "lat", region.factor)
            lat_in, _ = op_costs(ops, scaled.lat, mem, access, params.scatter)
            lat_pos = np.where(inside, lat_in[trace.op], lat_pos)
    lat = lat_pos.tolist()
    # The lines each global load sends past the L1 and their latency's spread: a load returns
    # when the slowest of its warp's lines in flight does (`ops.op_tails`).
    lines_op, spread_op = op_tails(ops, mem, access, params.scatter)
    out_lines = lines_op[trace.op].tolist()
    out_spread = spread_op[trace.op].tolist()
    in_flight: list[list[tuple[float, float]]] = [[] for _ in range(S)]
    issue_r = R["issue"]
    issue_cost = amounts[:, issue_r].tolist()
    amounts[:, issue_r] = 0.0
    nz_pos, nz_res = np.nonzero(amounts)
    dem: list[tuple[tuple[int, float], ...]] = [()] * n
    if nz_pos.size:
        vals = amounts[nz_pos, nz_res].tolist()
        splits = np.searchsorted(nz_pos, np.arange(n + 1))
        res_l = nz_res.tolist()
        dem = [
            tuple(zip(res_l[splits[p] : splits[p + 1]], vals[splits[p] : splits[p + 1]]))
            for p in range(n)
        ]
    barrier = [ops[i].kind == BARRIER for i in trace.op.tolist()]
    deps = trace.deps
    lat_issue = float(params.lat[issue_r])
    marks = {p for lp in trace.loops for inst in lp.instances for p in inst}

    admit = [0.0] * len(RESOURCES)
    fin = [[0.0] * n for _ in range(S)]
    maxfin = [0.0] * S
    pc = [0] * S
    ready = [0.0] * S
    arrived = [-1] * S
    is_mark = [False] * n
    for p in marks:
        is_mark[p] = True
    started: list[dict[int, float]] = [{} for _ in range(S)]
    warps = range(S)
    cur = 0
    alive = S
    iss = 0.0  # when the issue resource (the schedulers) is free next
    while alive:
        w = cur
        r_w = ready[w]
        if r_w > iss:
            w = min(warps, key=ready.__getitem__)
            r_w = ready[w]
            if r_w == _INF:
                break  # every live warp waits at a barrier no one else reaches (malformed)
        p = pc[w]
        if barrier[p]:
            arrived[w] = p
            ready[w] = _INF
            g0 = (w // group) * group
            members = range(g0, min(g0 + group, S))
            if all(arrived[m] == p for m in members):
                release = max(max(maxfin[m] for m in members), r_w)
                for m in members:
                    arrived[m] = -1
                    pc[m] = p + 1
                    if p + 1 >= n:
                        alive -= 1
                        ready[m] = _INF
                    else:
                        ready[m] = _next_ready(fin[m], deps[p + 1], release)
            cur = w
            continue
        t = r_w if r_w > iss else iss
        iss = t + issue_cost[p]
        start = t
        for r, amount in dem[p]:
            a = admit[r]
            if a > start:
                start = a
                admit[r] = a + amount
            else:
                admit[r] = t + amount if t > a else a + amount
        f = start + lat[p]
        k = out_lines[p]
        if k > 0.0:
            mine = [x for x in in_flight[w] if x[0] > t]
            lines = k + sum(x[1] for x in mine)
            f += out_spread[p] * slowest_extra(lines)
            mine.append((f, k))
            in_flight[w] = mine
        fw = fin[w]
        fw[p] = f
        if f > maxfin[w]:
            maxfin[w] = f
        if is_mark[p]:
            started[w][p] = t
        p += 1
        pc[w] = p
        if p >= n:
            alive -= 1
            ready[w] = _INF
        else:
            at = t + lat_issue  # when warp w can issue next: after its operands are ready
            for d in deps[p]:
                fd = fw[d]
                if fd > at:
                    at = fd
            ready[w] = at
        cur = w
    demand = amounts.copy()
    demand[:, issue_r] = issue_cost
    busy = (demand.sum(axis=0) * S).tolist()
    emulated = max(maxfin)
    periods = _loop_periods(trace, started, demand * S)
    extra = sum(lp.missing * periods.get(lp.name, 0.0) for lp in trace.loops)
    res = SMResult(0.0, emulated, periods, np.asarray(busy), S * n, dispatch)
    res.cycles = res.wave_cycles(emulated + extra)
    # On the emulated trace's time scale, like the other resources' busy cycles.
    res.busy[R["launch"]] = dispatch * emulated / res.cycles if res.cycles > 0 else 0.0
    return res


def _next_ready(fw: list[float], dep: tuple[int, ...], floor: float) -> float:
    r = floor
    for d in dep:
        f = fw[d]
        if f > r:
            r = f
    return r


def _loop_periods(
    trace: Trace, started: list[dict[int, float]], demand: np.ndarray
) -> dict[str, float]:
    """Own steady-state period of every loop (see the module docstring). `demand`: per trace
    position, the cycles it takes of each resource for all the sampled warps together."""
    full: list[float] = []
    # Demand of positions [a, b) on each resource: cum[b] - cum[a].
    cum = np.vstack([np.zeros((1, demand.shape[1])), np.cumsum(demand, axis=0)])
    for lp in trace.loops:
        per: list[float] = []
        for inst in lp.instances:
            if len(inst) < 2:
                continue
            a, b = inst[-2], inst[-1]
            d = [s[b] - s[a] for s in started if a in s and b in s]
            if d:
                # A warp the scheduler never had to leave runs its iterations back to back
                # while the other warps wait, so its period is its own demand, not the SM's:
                # an iteration of every warp takes at least its busiest resource's cycles.
                floor = float((cum[b] - cum[a]).max())
                per.append(max(sum(d) / len(d), floor))
        full.append(float(np.median(per)) if per else 0.0)
    out: dict[str, float] = {}
    for i, lp in enumerate(trace.loops):
        inner = sum(trace.loops[c].unroll * full[c] for c in lp.children)
        out[lp.name] = max(full[i] - inner, 0.0)
    return out


@dataclass(frozen=True)
class GridShape:
    """How a launch fills the GPU: blocks, active blocks per SM, warps per block, SMs."""

    blocks: int
    active_blocks: int
    warps_per_block: int
    sm_count: int

    def waves(self) -> list[tuple[int, int, float]]:
        """[(repetitions, blocks per SM, busy-SM share)]: the full waves, then the tail."""
        per_wave = self.active_blocks * self.sm_count
        full, rest = divmod(self.blocks, per_wave)
        out = []
        if full:
            out.append((full, self.active_blocks, 1.0))
        if rest:
            per_sm = math.ceil(rest / self.sm_count)
            busy = min(self.sm_count, rest) / self.sm_count
            out.append((1, per_sm, busy))
        return out


def steady_wave_work(work: float, wave: SMResult, alone: float) -> float:
    """The work cycles of a full wave after the first (module docstring, "Consecutive waves"):
    B + (1 - rho) x L, at most the first wave's `work`. B: the busiest resource's cycles in the
    wave (its admitted gaps, scaled from the emulated trace to `work`); rho = B / work, how
    much of the wave that resource was busy; L (`alone`): one block's work cycles alone on the
    SM, the latency a block's own chain of dependent instructions takes."""
    if work <= 0 or wave.emulated <= 0:
        return work
    busy = np.asarray(wave.busy, dtype=np.float64).copy()
    busy[R["launch"]] = 0.0  # the dispatcher is the wave's own floor (`wave_cycles`)
    bottleneck = float(busy.max()) * work / wave.emulated
    rho = min(bottleneck / work, 1.0)
    return min(work, bottleneck + (1.0 - rho) * alone)


__all__ = [
    "MAX_WARPS",
    "GridShape",
    "Params",
    "RegionScale",
    "SMResult",
    "steady_wave_work",
    "emulate_sm",
    "sampled_warps",
]
